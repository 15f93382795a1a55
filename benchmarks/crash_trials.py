"""Crash trials: kill a streaming query with SIGKILL again and again, then count the rows
that never reached the sink and the rows that reached it twice.

For each kind of publisher (``benchmarks/crash_publishers.py``: ``plain``, ``resumable``,
``acknowledging``) the trials run, in a child process with a session of its own, the
pipeline publisher -> ``spark.readStream.format("reactive")`` with ``walLocation`` ->
parquet sink with a checkpoint, and end each run with SIGKILL at a seeded random moment:
after a random delay from the run's first batch (between or during micro-batches), or at
a fault point of
``pyspark_reactive._testing.faults`` (``latest``: in ``latestOffset``; ``read``: in a task's
``read()``; ``wal-write``: halfway through a log write) at its n-th hit. Each kill takes
the child's whole process group and every other process of the run (Spark's Python daemon
puts its workers in a group of their own; they are found by an environment variable each
process of the run inherits and killed by pid). The next run restarts with the same
checkpoint, log and publisher state. After ``--kills`` kills a final run lets the stream
settle: a stop file tells the publisher to complete once it owes nothing more, and the
query runs until the publisher has completed and ``processAllAvailable()`` returns. Then
what the publishers recorded before each ``on_next`` is compared with what the sink
committed (read through Spark).

Run from the repository root (one kind takes a few minutes for 20 kills)::

    .venv/bin/python benchmarks/crash_trials.py [--kind plain|resumable|acknowledging|all]
        [--kills N] [--seed S] [--out DIR]

Acceptance, per kind: ``plain``: what a kill loses is a tail of its run (no row lost that
was signalled before a row the sink holds, none signalled more than 2 s before the kill;
those older than ``walSyncMs`` + 100 ms are counted), none duplicated; ``resumable``: none
lost, none duplicated; ``acknowledging``: none lost (duplicates are counted, not
limited). Every run must end by a kill and the final run must finish. The exit status is
1 when a kind misses its acceptance. ``--out`` gets ``crash_trials.json`` and a folder per
kind (checkpoint, log, sink, emission record, each run's output).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from crash_publishers import COMPLETED_SUFFIX, read_emissions  # noqa: E402

KINDS = ("plain", "resumable", "acknowledging")
MODES = ("delay", "latest", "read", "wal-write")
# The n of a fault point's kill is drawn from 1..N_MAX[point]: hits counted in one process
# (latestOffset calls, read() calls in one worker, log writes).
N_MAX = {"latest": 20, "read": 8, "wal-write": 60}
DELAY_S = (0.3, 8.0)  # a delay kill comes this long after the run's first batch
# A fault point not reached this long after the run's first batch: killed anyway.
FAULT_DEADLINE_S = 40.0
START_TIMEOUT_S = 240.0  # JVM start to the first batch, on a loaded machine
FINAL_TIMEOUT_S = 600.0
LOST_LISTED = 2000  # lost rows listed one by one in the JSON
# plain: what a kill may lose is the log's group commit in flight and what came after it:
# the newest rows of the run, a tail. A lost row signalled before a row the log kept is a
# hole: a failure. How old that tail may be depends on how long a commit takes: walSyncMs
# between commits, plus the write and fsync, which a loaded machine stretches (one run
# beside CI's other lane lost rows signalled 268 ms before the kill, at walSyncMs 50).
# Reported: the rows lost from more than walSyncMs + MARGIN_MS before their kill. Failed:
# a row lost from more than STALE_MS before it, a log that fell that far behind.
MARGIN_MS = 100.0
STALE_MS = 2000.0
# Every process of a run inherits this variable; its value names the trial.
TAG = "PYSPARK_REACTIVE_CRASH_TRIAL"
CRASH_AT = "PYSPARK_REACTIVE_CRASH_AT"
CRASH_LOG = "PYSPARK_REACTIVE_CRASH_LOG"


def _default_wal_sync_ms() -> int:
    try:
        from pyspark_reactive.source.options import DEFAULT_WAL_SYNC_MS
    except ImportError:  # a version before the log was durable on arrival
        return 50
    return int(DEFAULT_WAL_SYNC_MS)


# -- the child: one query run ------------------------------------------------------------


def _child(args: argparse.Namespace) -> int:
    """Run the pipeline until killed (or, with --final, until the stream has settled)."""
    from pyspark_reactive import local_session

    folder = Path(args.dir)
    spark = local_session(app_name=f"crash-trial-{args.child}")
    reader = (spark.readStream.format("reactive").schema("value BIGINT")
              .option("publisher", f"crash_publishers:{args.child}")
              .option("walLocation", str(folder / "wal"))
              .option("walSyncMs", args.wal_sync_ms)
              .option("maxRecordsPerTrigger", args.max_records)
              .option("emittedTo", str(folder / "emitted"))
              .option("brokerDir", str(folder / "broker"))
              .option("stopFile", str(folder / "stop"))
              .option("rowsPerSecond", args.rate)
              .option("run", args.run))
    writer = (reader.load().writeStream.format("parquet")
              .option("path", str(folder / "sink"))
              .option("checkpointLocation", str(folder / "checkpoint")))
    spark.streams.addListener(_first_batch_listener(folder / f"ready-{args.run}"))
    query = writer.start()
    if not args.final:
        query.awaitTermination()  # raises if the query fails; only a kill ends it otherwise
        print("crash trial: the query ended without a kill", file=sys.stderr)
        return 3
    # Settle: the publisher signals what it still owes, then completes and says so in a
    # file; then every row it signalled is in the source, and processAllAvailable() returns
    # once they are all committed. (Not availableNow: it ends the query as soon as the
    # publisher pauses for fillWaitMs, which a publisher starting up on a loaded machine
    # may do.)
    completed = folder / f"stop{COMPLETED_SUFFIX}"
    deadline = time.monotonic() + FINAL_TIMEOUT_S
    while not completed.exists():
        if query.awaitTermination(0.1):  # raises if the query failed
            print("crash trial: the final query ended before its publisher completed",
                  file=sys.stderr)
            return 3
        if time.monotonic() > deadline:
            print(f"crash trial: the publisher did not complete within {FINAL_TIMEOUT_S} s",
                  file=sys.stderr)
            return 3
    query.processAllAvailable()
    query.stop()
    values = spark.read.parquet(str(folder / "sink")).select("value").toArrow()
    committed = folder / "committed"
    committed.write_text("".join(f"{v}\n" for v in values.column(0).to_pylist()))
    spark.stop()
    return 0


def _first_batch_listener(path: Path) -> Any:
    from pyspark.sql.streaming import StreamingQueryListener

    class FirstBatch(StreamingQueryListener):
        """Writes the time of the run's first batch to ``path``: delays count from it."""

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            if not path.exists():
                path.write_text(f"{time.time():.6f}\n")

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return FirstBatch()


# -- the parent: runs, kills, comparison -----------------------------------------------


@dataclass
class Run:
    """One query run: how it was meant to end, and how it did."""

    run: int
    plan: str  # "delay 2.41 s", "latest:7", ...
    ended: str = ""  # "killed", "killed (fault point not reached)", "exited 3", ...
    started: float | None = None  # time.time() when its first batch completed
    killed: float | None = None  # time.time() of the kill
    point: str | None = None  # the fault point that fired, if one did
    outside_group: int = 0  # processes of the run outside the child's process group
    seconds: float = 0.0  # from spawning the child to the end of the run


@dataclass
class KindResult:
    kind: str
    runs: list[Run] = field(default_factory=list)
    emitted: int = 0  # distinct values signalled
    signals: int = 0  # on_next calls recorded (more than emitted when redelivered)
    committed_rows: int = 0
    lost: int = 0
    lost_rows: list[dict[str, Any]] = field(default_factory=list)  # the first LOST_LISTED
    lost_by_run: dict[int, dict[str, Any]] = field(default_factory=dict)
    lost_beyond_window: int = 0  # lost, signalled over walSyncMs + MARGIN_MS before the kill
    holes: int = 0  # lost, signalled before a row of the same run that the sink holds
    stale: int = 0  # lost, signalled over STALE_MS before the kill (or in the final run)
    duplicated: int = 0
    unexpected: int = 0  # values in the sink no publisher emitted
    failures: list[str] = field(default_factory=list)
    accepted: bool = False
    seconds: float = 0.0

    @property
    def kills(self) -> int:
        return sum(1 for r in self.runs if r.killed is not None)


def _plans(rng: random.Random, kills: int) -> Iterator[str]:
    """Kill plans: the modes in seeded random order, each of them once every four kills."""
    made = 0
    while made < kills:
        modes = list(MODES)
        rng.shuffle(modes)
        for mode in modes:
            if made == kills:
                return
            made += 1
            if mode == "delay":
                yield f"delay {rng.uniform(*DELAY_S):.2f} s"
            else:
                yield f"{mode}:{rng.randint(1, N_MAX[mode])}"


class Trial:
    """The runs of one kind of publisher, in one folder."""

    def __init__(self, kind: str, folder: Path, args: argparse.Namespace) -> None:
        self.kind = kind
        self.folder = folder
        self.args = args
        self.tag = f"{kind}-{os.getpid()}-{time.time_ns()}"
        self.crash_log = folder / "crash.log"

    def _spawn(self, run: int, final: bool, fault: str | None) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k not in (CRASH_AT, CRASH_LOG)}
        # Spark's Python processes inherit the JVM's environment: the runner imports the
        # publishers from here, and every process carries the trial's tag.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
        env[TAG] = self.tag
        if fault is not None:
            env[CRASH_AT] = fault
            env[CRASH_LOG] = str(self.crash_log)
        command = [sys.executable, str(Path(__file__).resolve()), "--child", self.kind,
                   "--dir", str(self.folder), "--run", str(run),
                   "--wal-sync-ms", str(self.args.wal_sync_ms),
                   "--max-records", str(self.args.max_records), "--rate", str(self.args.rate)]
        if final:
            command.append("--final")
        output = open(self.folder / f"run-{run:02d}.log", "wb")
        with output:
            return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def kill(self, child: subprocess.Popen[bytes]) -> tuple[float, int]:
        """SIGKILL the child's process group, then every other process of this trial.

        Returns the time of the kill and how many of the run's processes were outside
        the child's process group (Spark's Python daemon and its workers).
        """
        killed = time.time()
        if child.returncode is None:  # never signal a group whose leader was reaped
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)  # start_new_session: its own group
        child.wait()
        return killed, self._kill_tagged()

    def _kill_tagged(self) -> int:
        """Kill, by pid, whatever still carries the trial's tag; return how many did."""
        seen: set[psutil.Process] = set()
        deadline = time.monotonic() + 30
        while tagged := _tagged(self.tag):
            seen.update(tagged)
            for process in tagged:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()  # psutil checks it is still the same process
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of crash trial {self.tag} survive SIGKILL: "
                                   f"{[p.pid for p in tagged]}")
            psutil.wait_procs(tagged, timeout=5)
        return len(seen)

    def run_killed(self, run: int, plan: str) -> Run:
        """One run, ended by a kill: after a delay counted from its first batch, or at a
        fault point (whenever it fires, or FAULT_DEADLINE_S after the first batch)."""
        record = Run(run, plan)
        fault = None if plan.startswith("delay") else plan
        crashes_before = len(_lines(self.crash_log))
        ready = self.folder / f"ready-{run}"
        spawned = time.monotonic()
        child = self._spawn(run, final=False, fault=fault)
        deadline = spawned + START_TIMEOUT_S
        try:
            while True:
                fired = _lines(self.crash_log)[crashes_before:]
                if fired:
                    # Written just before the fault point's SIGKILL, which from a daemon
                    # worker ("read") takes the worker's group only: the rest goes now.
                    _, record.outside_group = self.kill(child)
                    point, at = fired[0].split()
                    record.point, record.killed, record.ended = point, float(at), "killed"
                    return record
                if child.poll() is not None:
                    record.ended = f"exited {child.returncode} on its own"
                    return record
                if record.started is None and ready.exists() and ready.read_text().endswith(
                        "\n"):
                    record.started = float(ready.read_text())
                    deadline = time.monotonic() + (
                        float(plan.split()[1]) if fault is None else self.args.fault_deadline)
                if time.monotonic() >= deadline:
                    record.killed, record.outside_group = self.kill(child)
                    record.ended = ("did not finish a batch in time" if record.started is None
                                    else "killed" if fault is None
                                    else "killed (fault point not reached)")
                    if record.started is None:
                        record.killed = None  # not a kill the trials planned: a failure
                    return record
                time.sleep(0.002)
        finally:
            self.kill(child)  # a child that exited may leave the daemon's workers behind
            record.seconds = time.monotonic() - spawned

    def run_final(self, run: int) -> Run:
        record = Run(run, "final: until the publisher completed and all is committed")
        (self.folder / "stop").touch()
        spawned = time.monotonic()
        child = self._spawn(run, final=True, fault=None)
        try:
            code = child.wait(timeout=START_TIMEOUT_S + FINAL_TIMEOUT_S)
            record.ended = "finished" if code == 0 else f"exited {code}"
        except subprocess.TimeoutExpired:
            record.ended = "timed out"
        finally:
            self.kill(child)
            record.seconds = time.monotonic() - spawned
        ready = self.folder / f"ready-{run}"
        if ready.exists():
            record.started = float(ready.read_text())
        return record


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(TAG) == tag:
                found.append(process)
        except (psutil.Error, OSError):
            continue  # gone, a zombie, or not ours to read
    return found


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def run_kind(kind: str, kills: int, seed: int, out: Path,
             args: argparse.Namespace) -> KindResult:
    folder = out / kind
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    began = time.monotonic()
    result = KindResult(kind)
    trial = Trial(kind, folder, args)
    rng = random.Random(f"{seed}:{kind}")
    on_own = 0
    for run, plan in enumerate(_plans(rng, kills), start=1):
        record = trial.run_killed(run, plan)
        result.runs.append(record)
        _say(f"{kind} run {run}: {plan}: {record.ended}"
             + (f" ({record.point})" if record.point else "")
             + (f", {record.outside_group} processes outside the group"
                if record.outside_group else "") + f", {record.seconds:.1f} s")
        if record.killed is None:
            result.failures.append(f"run {run} ({plan}) {record.ended}; see "
                                   f"{folder / f'run-{run:02d}.log'}")
            on_own += 1
            if on_own == 3:
                result.failures.append("three runs ended without a kill: trials stopped")
                break
    final = trial.run_final(len(result.runs) + 1)
    result.runs.append(final)
    _say(f"{kind} final run: {final.ended}, {final.seconds:.1f} s")
    if final.ended != "finished":
        result.failures.append(f"the final run {final.ended}; see "
                               f"{folder / f'run-{final.run:02d}.log'}")
    else:
        _compare(result, folder, args.wal_sync_ms)
    result.seconds = time.monotonic() - began
    result.accepted = not result.failures
    return result


def _compare(result: KindResult, folder: Path, wal_sync_ms: int) -> None:
    emissions = read_emissions(folder / "emitted")
    committed = [int(v) for v in (folder / "committed").read_text().split()]
    counts = collections.Counter(committed)
    last = {e.value: e for e in emissions}  # a redelivered value: its last signal counts
    killed_at = {r.run: r.killed for r in result.runs}
    result.signals = len(emissions)
    result.emitted = len(last)
    result.committed_rows = len(committed)
    result.duplicated = sum(c - 1 for c in counts.values() if c > 1)
    result.unexpected = sum(1 for v in counts if v not in last)
    window_ms = wal_sync_ms + MARGIN_MS
    # The newest signal of each run whose row the sink holds: a lost row signalled before
    # it is a hole. Signal order is the file's order (each on_next appends its line first),
    # not the clock, which may step or repeat a reading.
    position = {e.value: i for i, e in enumerate(emissions)}  # of each value's last signal
    newest_kept: dict[int, int] = {}
    for value, emission in last.items():
        if value in counts:
            newest_kept[emission.run] = max(newest_kept.get(emission.run, -1), position[value])
    befores: dict[int, list[float | None]] = collections.defaultdict(list)
    for value in sorted(v for v in last if v not in counts):
        emission = last[value]
        kill = killed_at.get(emission.run)
        before = None if kill is None else round((kill - emission.time) * 1000, 1)
        result.lost += 1
        if len(result.lost_rows) < LOST_LISTED:
            result.lost_rows.append({"value": value, "run": emission.run,
                                     "ms_before_kill": before})
        if before is None or before > window_ms:
            result.lost_beyond_window += 1
        if before is None or before > STALE_MS:
            result.stale += 1
        if position[value] < newest_kept.get(emission.run, -1):
            result.holes += 1
        befores[emission.run].append(before)
    for run, values in sorted(befores.items()):
        known = [v for v in values if v is not None]  # None: the run was not killed
        result.lost_by_run[run] = {"rows": len(values),
                                   "min_ms_before_kill": min(known, default=None),
                                   "max_ms_before_kill": max(known, default=None)}
    if result.unexpected:
        result.failures.append(f"{result.unexpected} values in the sink were never emitted")
    if result.kind == "plain":
        if result.holes:
            result.failures.append(f"{result.holes} rows lost that were signalled before a "
                                   "row of their run that the sink holds")
        if result.stale:
            result.failures.append(f"{result.stale} rows lost that were signalled more than "
                                   f"{STALE_MS:.0f} ms before their kill (or in the final run)")
    elif result.lost:
        result.failures.append(f"{result.lost} rows lost")
    if result.kind != "acknowledging" and result.duplicated:
        result.failures.append(f"{result.duplicated} rows duplicated")


def _table(results: Sequence[KindResult], wal_sync_ms: int) -> str:
    window = f"lost >{wal_sync_ms + MARGIN_MS:.0f}ms"
    header = ("kind", "runs", "kills", "emitted", "committed", "lost", window, "holes",
              "max ms before kill", "duplicated", "accepted")
    rows = [header]
    for r in results:
        before = [x["max_ms_before_kill"] for x in r.lost_by_run.values()
                  if x["max_ms_before_kill"] is not None]
        rows.append((r.kind, str(len(r.runs)), str(r.kills), str(r.emitted),
                     str(r.committed_rows), str(r.lost), str(r.lost_beyond_window),
                     str(r.holes), f"{max(before):.0f}" if before else "-", str(r.duplicated),
                     "yes" if r.accepted else "NO"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        modes = collections.Counter(
            (run.point or run.plan.split(":")[0].split()[0]) for run in r.runs
            if run.killed is not None)
        lines.append(f"{r.kind}: kills by point {dict(sorted(modes.items()))}; "
                     f"{r.signals} signals; {r.seconds:.0f} s")
        lines.extend(f"{r.kind}: {failure}" for failure in r.failures)
    return "\n".join(lines)


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=(*KINDS, "all"), default="all")
    parser.add_argument("--kills", type=int, default=20, help="kills per kind (default 20)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="folder for the trials (default: a new temporary one)")
    parser.add_argument("--max-records", type=int, default=500,
                        help="maxRecordsPerTrigger (default 500)")
    parser.add_argument("--rate", type=float, default=3000.0,
                        help="rows per second each publisher signals at most (default 3000)")
    parser.add_argument("--fault-deadline", type=float, default=FAULT_DEADLINE_S,
                        help="seconds a run waits for its fault point before it is killed "
                             f"anyway (default {FAULT_DEADLINE_S:.0f})")
    parser.add_argument("--wal-sync-ms", type=int, default=_default_wal_sync_ms(),
                        help="walSyncMs (default: the source's default)")
    # The child's arguments: one query run.
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--final", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.kills < 0:
        parser.error(f"--kills must be >= 0, got {args.kills}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        return _child(args)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="crash-trials-"))
    out.mkdir(parents=True, exist_ok=True)
    kinds = KINDS if args.kind == "all" else (args.kind,)
    _say(f"crash trials in {out}: {', '.join(kinds)}, {args.kills} kills each, seed "
         f"{args.seed}, walSyncMs {args.wal_sync_ms}")
    results = [run_kind(kind, args.kills, args.seed, out, args) for kind in kinds]
    report = {"seed": args.seed, "kills_per_kind": args.kills,
              "wal_sync_ms": args.wal_sync_ms, "window_ms": args.wal_sync_ms + MARGIN_MS,
              "max_records_per_trigger": args.max_records, "rows_per_second": args.rate,
              "kinds": [asdict(r) | {"kills": r.kills} for r in results]}
    (out / "crash_trials.json").write_text(json.dumps(report, indent=1) + "\n")
    print(_table(results, args.wal_sync_ms))
    print(f"JSON: {out / 'crash_trials.json'}")
    return 0 if all(r.accepted for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
