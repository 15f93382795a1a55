"""Soak: the whole pipeline at full speed for minutes, watching every process it runs on.

The pipeline is the built-in ``range`` publisher (endless) -> ``spark.readStream.format(
"reactive")`` with a ``walLocation`` and ``maxRecordsPerTrigger`` 200,000 -> a
transformation (a filter, a product, a cast) -> ``pyspark_reactive.publish()`` -> a
subscriber in this process that requests 4096 rows at a time and counts them. Nothing
paces it but backpressure, so it runs as fast as the slowest stage sustains. Every
second, psutil samples each process of the pipeline, named by its role (``ROLES``):
resident memory (RSS), open file descriptors and threads; the subscriber's count gives
rows/s. The JVM gets its whole heap (1 GiB, Spark's default) at start, so that its RSS
shows what it holds outside the heap (see :func:`soak_session`).

Run from the repository root::

    .venv/bin/python benchmarks/soak.py [--minutes N] [--out DIR] [--max-records N]

``--minutes`` (default 30, fractions allowed) counts from the subscriber's first row.
``DIR`` (default ``benchmarks/results/soak-<UTC timestamp>/``) receives ``soak.json``
(every sample, the settings, the summary and the verdict) and ``soak.png`` (one panel per
metric, one line per role). A summary table is printed at the end, and the exit status is
1 when :func:`check` finds a problem.

What :func:`check` calls a problem, after a warm-up of 20% of the run, at least 60 s but
at most half the run (so 60 s of a 2-minute run, 6 minutes of 30), from the first row.
The warm-up lets the JVM settle. Its bounded thread pools (the block manager's) fill up
during the first 35 to 50 s on 2 cores: about 100 threads, then about 310 for good. Its
JIT-compiled code and class metadata keep growing for minutes, ever more slowly: from
minute 1 to 13 of a run, ``-XX:NativeMemoryTracking`` counted +35 MB of code cache and
+9 MB of metaspace, 10 and 7 of them in the first 2.5 minutes, 1 and 0.1 in the last.
In a 30-minute run that took the JVM's RSS up by 41 MiB from minute 1 to 6 and by
23 MiB from minute 6 to 30.

- **Memory**: any process whose RSS grows by more than 50 MiB, from the median of its
  first 5 samples after the warm-up (or after it appeared) to the median of its last 5.
  Per process, not per role: how many Python workers a role has at a moment varies, so
  its total jumps when one is added without anything leaking.
- **File descriptors, threads, processes**: a role's total (over its processes, so a
  worker replaced by a new one is not growth) *keeps growing*: split the samples after
  the warm-up into thirds; the last third's minimum is above the first third's maximum,
  and the peak rises from each third to the next. Noise (pools that grow and shrink)
  leaves the last third's minimum at or below the first third's peak; a single step (a
  pool made once and kept) raises the peak in one third only. A leak does both.
- **Stalls**: rows/s must stay above 0 throughout: no 10 s after the warm-up without a
  row reaching the subscriber. (Rows/s of a single second can be 0 between two
  micro-batches.)
- The stream ending early (the query failed, or the subscriber got a terminal signal).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

MIB = 2**20
RSS_GROWTH_LIMIT = 50 * MIB
STALL_SECONDS = 10.0
WARMUP_FRACTION = 0.2
WARMUP_MIN_SECONDS = 60.0
EDGE_SAMPLES = 5  # samples whose median stands for a process's RSS at either end
STARTUP_TIMEOUT = 300.0  # seconds from start() to the first row before giving up

# Each process of the pipeline, by role, in the order tables and plots list them.
ROLES = {
    "driver": "this Python process: the query, publish() and the subscriber",
    "jvm": "the driver JVM, a child of the driver",
    "source-runner": "the reactive source's runner (pyspark's python_streaming_source_runner,"
                     " a child of the JVM): the publisher and the write-ahead log",
    "worker-daemon": "pyspark.daemon processes of tasks (children of the JVM)",
    "worker": "Python workers those daemons fork: the source's read() of each partition",
    "planner-daemon": "pyspark.daemon processes of data source planning (lookup, create,"
                      " plan read)",
    "planner": "Python workers those daemons fork",
    "other": "any other process under the JVM",
}
METRICS = ("rss", "fds", "threads")


def role_of(pid: int, ppid: int, cmdline: list[str], driver_pid: int, jvm_pid: int) -> str:
    """The role (a key of ``ROLES``) of one process of the pipeline."""
    if pid == driver_pid:
        return "driver"
    if pid == jvm_pid:
        return "jvm"
    if any("python_streaming_source_runner" in part for part in cmdline):
        return "source-runner"
    if "pyspark.daemon" in cmdline:
        # "python -m pyspark.daemon <worker module>": forked workers keep the command line.
        following = cmdline[cmdline.index("pyspark.daemon") + 1:]
        module = following[0] if following else "pyspark.worker"
        kind = "worker" if module == "pyspark.worker" else "planner"
        return f"{kind}-daemon" if ppid == jvm_pid else kind
    if "pyspark.worker" in cmdline:  # spark.python.use.daemon=false
        return "worker"
    return "other"


def sample_processes(driver_pid: int, jvm_pid: int) -> list[dict[str, Any]]:
    """RSS (bytes), open fds and threads of the driver, the JVM and all under the JVM."""
    found: list[psutil.Process] = [psutil.Process(driver_pid)]
    try:
        jvm = psutil.Process(jvm_pid)
        found += [jvm, *jvm.children(recursive=True)]
    except psutil.NoSuchProcess:
        pass  # the JVM is gone: the stream ends, and the check reports it
    samples = []
    jvm_cmdline: list[str] = []
    for proc in found:
        try:
            with proc.oneshot():
                cmdline, ppid = proc.cmdline(), proc.ppid()
                rss, fds, threads = proc.memory_info().rss, proc.num_fds(), proc.num_threads()
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess is one too
            continue  # ended between the listing and the reading
        if proc.pid == jvm_pid:
            jvm_cmdline = cmdline
        elif cmdline == jvm_cmdline or "jspawnhelper" in "".join(cmdline[:1]):
            continue  # the JVM starting a process: a copy of it for a moment, before exec
        role = role_of(proc.pid, ppid, cmdline, driver_pid, jvm_pid)
        samples.append({"pid": proc.pid, "role": role, "rss": rss, "fds": fds,
                        "threads": threads})
        if role == "other":  # say what it was
            samples[-1]["cmdline"] = " ".join(cmdline)[:200]
    return samples


# -- the pipeline -----------------------------------------------------------------------------

HEAP = "1g"  # Spark's default spark.driver.memory


def soak_session() -> Any:
    """``local_session("soak")`` whose JVM holds its whole heap from the start.

    G1 commits heap as it needs it, up to -Xmx, and rarely gives it back: left alone, the
    JVM's RSS climbs by hundreds of MiB over the first minutes without anything leaking.
    With -Xms equal to -Xmx, pre-touched, the JVM's RSS after the warm-up moves only with
    what it holds outside the heap (direct buffers, metaspace, thread stacks, native
    memory), which is what an RSS check can judge. A leak on the heap ends in an
    OutOfMemoryError that fails the query, which :func:`check` reports. In a process that
    already runs Spark, that session is returned as it is, without these settings.
    """
    from pyspark_reactive import local_session

    return local_session("soak", conf={
        "spark.driver.memory": HEAP,
        "spark.driver.extraJavaOptions": f"-Xms{HEAP} -XX:+AlwaysPreTouch"})


def _row_counter(batch_size: int) -> Any:
    from reactive_streams import SyncSubscriber

    class RowCounter(SyncSubscriber[Any]):
        """Requests ``batch_size`` rows at a time (refilled at half) and counts them."""

        rows = 0

        def on_element(self, element: Any) -> None:
            self.rows += 1

    return RowCounter(batch_size=batch_size)


def run_soak(spark: Any, minutes: float, *, max_records: int = 200_000,
             request: int = 4096, interval: float = 1.0,
             report: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the pipeline for ``minutes`` after its first row; return the run as a dict.

    The dict holds ``settings``, ``roles`` and ``samples`` (each: ``t`` in seconds from
    the first row, negative before it; the subscriber's cumulative ``rows``; ``rows_per_s``
    since the previous sample; ``processes``: pid, role, rss, fds, threads) and ``error``:
    why the stream ended early, or ``None``. The query is stopped before returning.
    """
    from pyspark.sql import functions as F

    from pyspark_reactive import publish
    from pyspark_reactive.source.wal import WriteAheadLog

    driver_pid = os.getpid()
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    counter = _row_counter(request)
    error: str | None = None
    # Samples go to a file, not a list, so that the driver's memory is the pipeline's (a
    # list of them grows by about 0.25 MiB a minute, measured with tracemalloc).
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch, \
            open(os.path.join(scratch, "samples.jsonl"), "w+", encoding="utf-8") as log:
        numbers = (spark.readStream.format("reactive")
                   .option("publisher", "range")
                   .option("maxRecordsPerTrigger", max_records)
                   .option("walLocation", os.path.join(scratch, "wal"))
                   .load())
        transformed = (numbers.where(F.col("value") % 10 != 3)
                       .withColumn("twice", F.col("value") * 2)
                       .withColumn("text", F.col("value").cast("string")))
        publisher = publish(transformed, element="tuple", queryName="soak",
                            checkpointLocation=os.path.join(scratch, "checkpoint"))
        publisher.subscribe(counter)
        started_utc = datetime.now(timezone.utc).isoformat(timespec="seconds")
        started = time.monotonic()
        first_row: float | None = None
        previous = (started, 0)
        next_sample = started
        try:
            while True:
                now = time.monotonic()
                rows = counter.rows
                if first_row is None and rows:
                    first_row = now
                    report(f"first row after {now - started:.1f} s; soaking for "
                           f"{minutes:g} min")
                log.write(json.dumps({
                    "t": now, "rows": rows,  # t: made relative to the first row below
                    "rows_per_s": (rows - previous[1]) / max(now - previous[0], 1e-9),
                    "processes": sample_processes(driver_pid, jvm_pid)}) + "\n")
                previous = (now, rows)
                if first_row is not None and now - first_row >= minutes * 60:
                    break
                if first_row is None and now - started > STARTUP_TIMEOUT:
                    error = f"no row reached the subscriber within {STARTUP_TIMEOUT:.0f} s"
                    break
                next_sample = max(next_sample + interval, time.monotonic())
                # Waits on the subscriber, so a stream that ends wakes this at once.
                if counter.wait(next_sample - time.monotonic()):
                    error = f"the stream ended {now - (first_row or started):.0f} s after " \
                            f"the {'first row' if first_row else 'start'}"
                    try:
                        counter.join(0)
                    except Exception as exc:  # the query's error, or the subscriber's
                        error += f": {exc!r}"
                    break
        finally:
            publisher.query.stop()
            counter.wait(60)
            # stop() returns before the source's runner has kept its buffered rows in the
            # log; the scratch directory may go only once the runner let go of the log.
            held = WriteAheadLog(os.path.join(scratch, "wal"))
            held.lock(timeout=60)
            held.unlock()
        log.seek(0)
        samples = [json.loads(line) for line in log]
    origin = first_row if first_row is not None else started
    for sample in samples:
        sample["t"] = round(sample["t"] - origin, 3)
    return {
        "settings": {"minutes": minutes, "maxRecordsPerTrigger": max_records,
                     "request": request, "interval_s": interval,
                     "master": spark.sparkContext.master, "pyspark": spark.version,
                     "python": platform.python_version(), "cpus": os.cpu_count(),
                     "started_utc": started_utc},
        "roles": ROLES, "samples": samples, "error": error,
    }


# -- the verdict ------------------------------------------------------------------------------

def warmup_seconds(samples: list[dict[str, Any]]) -> float:
    """20% of the run (from the first row), at least 60 s, at most half the run."""
    length = max((s["t"] for s in samples), default=0.0)
    return min(max(WARMUP_FRACTION * length, WARMUP_MIN_SECONDS), length / 2)


def role_totals(samples: Iterable[dict[str, Any]], metric: str) -> dict[str, list[float]]:
    """Per role, the sum of ``metric`` over its processes at each sample (0 when none)."""
    samples = list(samples)
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(samples))
    for index, sample in enumerate(samples):
        for proc in sample["processes"]:
            totals[proc["role"]][index] += 1 if metric == "procs" else proc[metric]
    return dict(totals)


def keeps_growing(values: list[float]) -> bool:
    """Whether a series after the warm-up keeps growing (see the module's docstring)."""
    third = len(values) // 3
    if third < 2:
        return False
    first, middle, last = values[:third], values[third:-third], values[-third:]
    return min(last) > max(first) and max(first) < max(middle) < max(last)


def rss_growth(samples: list[dict[str, Any]]) -> dict[int, tuple[str, float]]:
    """Per process after the warm-up: its role and RSS growth in bytes (median of its last
    ``EDGE_SAMPLES`` samples minus median of its first), for processes sampled at least
    twice ``EDGE_SAMPLES`` times."""
    series: dict[int, list[float]] = defaultdict(list)
    roles: dict[int, str] = {}
    for sample in samples:
        for proc in sample["processes"]:
            series[proc["pid"]].append(proc["rss"])
            roles[proc["pid"]] = proc["role"]
    return {pid: (roles[pid], statistics.median(values[-EDGE_SAMPLES:])
                  - statistics.median(values[:EDGE_SAMPLES]))
            for pid, values in series.items() if len(values) >= 2 * EDGE_SAMPLES}


def longest_gap(samples: list[dict[str, Any]]) -> float:
    """The longest time, in seconds, during which the subscriber's count did not move."""
    if not samples:
        return 0.0
    gap, moved_at, rows = 0.0, samples[0]["t"], samples[0]["rows"]
    for sample in samples[1:]:
        if sample["rows"] != rows:
            moved_at, rows = sample["t"], sample["rows"]
        gap = max(gap, sample["t"] - moved_at)
    return gap


def check(run: dict[str, Any]) -> list[str]:
    """What went wrong in a run from :func:`run_soak`, one message each; empty: it passed."""
    problems = [run["error"]] if run["error"] else []
    warmup = warmup_seconds(run["samples"])
    after = [s for s in run["samples"] if s["t"] >= warmup]
    if len(after) < 6:
        return [*problems, f"only {len(after)} samples after the warm-up of {warmup:.0f} s"]
    for pid, (role, growth) in sorted(rss_growth(after).items()):
        if growth > RSS_GROWTH_LIMIT:
            problems.append(f"{role} (pid {pid}): RSS grew by {growth / MIB:.0f} MiB after "
                            f"the warm-up (limit {RSS_GROWTH_LIMIT / MIB:.0f} MiB)")
    for metric, label in (("fds", "open file descriptors"), ("threads", "threads"),
                          ("procs", "processes")):
        for role, values in role_totals(after, metric).items():
            if keeps_growing(values):
                third = len(values) // 3
                problems.append(f"{role}: {label} keep growing after the warm-up: "
                                f"{max(values[:third]):.0f} at most in the first third, "
                                f"{min(values[-third:]):.0f} at least in the last")
    gap = longest_gap(after)
    if gap >= STALL_SECONDS:
        problems.append(f"stalled: no row reached the subscriber for {gap:.0f} s after the "
                        f"warm-up (limit {STALL_SECONDS:.0f} s)")
    return problems


# -- the report -------------------------------------------------------------------------------

@dataclass
class RoleSummary:
    role: str
    procs: int
    rss_warm: float
    rss_end: float
    worst_pid_growth: float
    fds_warm: float
    fds_end: float
    threads_warm: float
    threads_end: float


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """Per role, its totals at the end of the warm-up and at the end; the rows."""
    warmup = warmup_seconds(run["samples"])
    after = [s for s in run["samples"] if s["t"] >= warmup]
    growth = rss_growth(after)
    roles: list[dict[str, Any]] = []
    totals = {metric: role_totals(after, metric) for metric in (*METRICS, "procs")}
    for role in ROLES:
        if role not in totals["rss"]:
            continue
        worst = max((g for r, g in growth.values() if r == role), default=0.0)
        roles.append(asdict(RoleSummary(
            role, int(totals["procs"][role][-1]),
            totals["rss"][role][0], totals["rss"][role][-1], worst,
            totals["fds"][role][0], totals["fds"][role][-1],
            totals["threads"][role][0], totals["threads"][role][-1])))
    span = after[-1]["t"] - after[0]["t"] if len(after) > 1 else 0.0
    rows = after[-1]["rows"] - after[0]["rows"] if after else 0
    return {"warmup_s": warmup, "measured_s": span, "rows_total": run["samples"][-1]["rows"]
            if run["samples"] else 0, "rows_measured": rows,
            "mean_rows_per_s": rows / span if span else 0.0,
            "longest_gap_s": longest_gap(after), "roles": roles}


def summary_table(summary: dict[str, Any]) -> str:
    lines = [f"{'role':15} {'procs':>5} {'RSS warm':>9} {'RSS end':>9} {'growth':>8} "
             f"{'worst pid':>9} {'fds warm':>8} {'fds end':>7} {'thr warm':>8} {'thr end':>7}"]
    for r in summary["roles"]:
        lines.append(
            f"{r['role']:15} {r['procs']:5d} {r['rss_warm'] / MIB:6.0f} MiB "
            f"{r['rss_end'] / MIB:5.0f} MiB {(r['rss_end'] - r['rss_warm']) / MIB:+5.0f} MiB "
            f"{r['worst_pid_growth'] / MIB:+5.0f} MiB {r['fds_warm']:8.0f} {r['fds_end']:7.0f} "
            f"{r['threads_warm']:8.0f} {r['threads_end']:7.0f}")
    lines.append(
        f"RSS, fds and threads are totals over a role's processes; 'worst pid' is the largest "
        f"growth of one process.\nAfter a warm-up of {summary['warmup_s']:.0f} s: "
        f"{summary['rows_measured']:,} rows in {summary['measured_s']:.0f} s = "
        f"{summary['mean_rows_per_s']:,.0f} rows/s; longest time without a row "
        f"{summary['longest_gap_s']:.0f} s")
    return "\n".join(lines)


def plot(run: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = run["samples"]
    times = [s["t"] for s in samples]
    warmup = warmup_seconds(samples)
    colours = {role: f"C{index}" for index, role in enumerate(ROLES)}
    figure, axes = plt.subplots(5, 1, figsize=(11, 15), sharex=True)
    panels = ((axes[0], "rss", "RSS (MiB)", 1 / MIB), (axes[2], "fds", "open file descriptors",
              1.0), (axes[3], "threads", "threads", 1.0))
    for axis, metric, label, scale in panels:
        totals = role_totals(samples, metric)
        for role in ROLES:
            if role in totals:
                axis.plot(times, [v * scale for v in totals[role]], label=role,
                          color=colours[role])
        axis.set_ylabel(label)
        axis.set_title(f"{label.split(' (')[0]} per role (sum over its processes)")
    axes[0].legend(loc="upper left", fontsize="small", ncol=4)
    # What the memory check judges: each process against itself, from the warm-up's end.
    series: dict[int, tuple[str, list[float], list[float]]] = {}
    for sample in samples:
        if sample["t"] >= warmup:
            for proc in sample["processes"]:
                role, xs, ys = series.setdefault(proc["pid"], (proc["role"], [], []))
                xs.append(sample["t"])
                ys.append(proc["rss"] / MIB)
    for role, xs, ys in series.values():
        axes[1].plot(xs, [y - ys[0] for y in ys], color=colours[role], linewidth=0.8)
    axes[1].axhline(RSS_GROWTH_LIMIT / MIB, color="red", linestyle="--", linewidth=0.8)
    axes[1].set_ylabel("RSS change (MiB)")
    axes[1].set_title("RSS of each process since the warm-up ended (or it started); "
                      "dashed: the limit")
    rates = [s["rows_per_s"] for s in samples]
    axes[4].plot(times, rates, color="grey", linewidth=0.6, label="per 1-s sample")
    window = 10
    axes[4].plot(times[window - 1:], [sum(rates[i - window + 1:i + 1]) / window
                                      for i in range(window - 1, len(rates))],
                 color="black", label="mean over 10 samples")
    axes[4].legend(loc="lower right", fontsize="small")
    axes[4].set_ylabel("rows/s")
    axes[4].set_title("rows/s reaching the subscriber")
    axes[4].set_xlabel("seconds since the first row")
    for axis in axes:
        axis.axvspan(min(times, default=0.0), warmup, color="grey", alpha=0.15)
        axis.grid(alpha=0.3)
    settings = run["settings"]
    figure.suptitle(f"Soak of {settings['minutes']:g} min: range -> reactive source "
                    f"(walLocation) -> transformation -> publish() -> subscriber\n"
                    f"maxRecordsPerTrigger={settings['maxRecordsPerTrigger']:,}; shaded: "
                    f"startup and warm-up")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_results(run: dict[str, Any], out: Path) -> tuple[dict[str, Any], list[str]]:
    """Add the summary and the verdict to ``run``; write soak.json and soak.png to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    summary, problems = summarize(run), check(run)
    run = {**run, "summary": summary, "check": {"passed": not problems, "problems": problems}}
    (out / "soak.json").write_text(json.dumps(run, indent=1))
    plot(run, out / "soak.png")
    return summary, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="how long to soak after the first row (default 30)")
    parser.add_argument("--out", type=Path, help="directory for soak.json and soak.png "
                        "(default benchmarks/results/soak-<timestamp>/)")
    parser.add_argument("--max-records", type=int, default=200_000,
                        help="the source's maxRecordsPerTrigger (default 200000)")
    args = parser.parse_args()
    if not args.minutes > 0:
        parser.error(f"--minutes must be a positive number, got {args.minutes}")
    if args.max_records < 1:
        parser.error(f"--max-records must be a positive integer, got {args.max_records}")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path(__file__).parent / "results" / f"soak-{stamp}"

    spark = soak_session()
    try:
        run = run_soak(spark, args.minutes, max_records=args.max_records)
    finally:
        spark.stop()
    summary, problems = write_results(run, out)
    print(summary_table(summary))
    print(f"samples in {out / 'soak.json'}, plot in {out / 'soak.png'}")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print("passed: no process grew by more than 50 MiB, no fds/threads kept growing, "
          "no stall")


if __name__ == "__main__":
    main()
