"""Rows/s, peak memory and batch latency of ``publish()`` under Spark Connect beside
classic ``publish()`` (the baseline), for the same stream, in the same run.

The stream is the built-in ``range`` publisher read by ``format("reactive")`` (``--rows``
rows in batches of ``--batch``), run with ``availableNow`` into ``publish(element="tuple")``
and a subscriber that requests 1024 at a time and counts. Each mode runs in a process of
its own (a process holds one Spark application):

* classic: ``local_session()`` in the benchmark's process, whose driver JVM runs the query
  and calls the publisher back in this process;
* connect: a Spark Connect server in a process of its own (``tests/databricks/
  local_server.py``'s ``LocalConnectServer``: ``SparkConnectServer`` by ``spark-submit`` of
  this interpreter's pyspark, on 127.0.0.1, its token through its environment, ended by
  its process id), and the benchmark's process a client of it. The server's Python
  processes import the same ``pyspark_reactive`` as the client (its ``src`` folder is put
  on their ``PYTHONPATH``), so a checkout's own code runs on both sides
  (``compare_revisions.py`` relies on that).

Printed per mode:

* rows/s from the subscriber's first row to its last, and the whole query's time (from
  ``publish()`` to the terminal signal);
* peak resident memory (VmHWM, from ``/proc``) of the client's Python process; of the JVM
  (classic: the driver; connect: the server) and, under Connect, of the server-side
  ``foreachBatch`` worker and of the largest other Python process of the server (source
  runner, executors' workers), sampled every 0.5 s while the query runs;
* the latency of each micro-batch from the moment its data is ready in Spark to its first
  row at the subscriber, median and max over batches. "Ready" is, for classic, the entry
  of the ``foreachBatch`` function (``ForeachBatchPublisher.__call__``: the batch is a
  planned DataFrame; computing its first partition is part of the latency); for Connect,
  the end of the stager's write of the batch's staging table, read as the modification
  time of the table's ``_SUCCESS`` file in the server's warehouse (a folder the benchmark
  sets and watches every 10 ms, with no round trip to the server; file times are
  within a few ms). The Connect figure therefore holds what the transport adds after the
  data is computed: the stager's summary job and its signed mark, the client's discovery
  of the mark (it polls every 50 ms), the check of the mark and the read of the first
  partition. A transport that stages no table (the persist and temporary view one before
  commit bed2ac2) gives no Connect latency ("n/a"). Both timestamps are wall-clock
  (``time.time()``); the first row of a batch is found without a per-row cost by noting,
  when the publisher begins a batch (a wrapper of ``ForeachBatchPublisher._begin``), how
  many rows it delivered before it.

Then Connect's rows/s as a ratio of classic's (the baseline). ``--json PATH`` writes the
figures for ``bench.py`` (``report.py``).

Run from the repository root::

    .venv/bin/python benchmarks/connect_publish_throughput.py [--rows N] [--batch N]

A/B of two checkouts (old, new, interleaved; copy this file into the old one first)::

    .venv/bin/python benchmarks/compare_revisions.py --old /tmp/old --rounds 3 \\
        connect_publish_throughput.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from report import Figure, write  # this folder is on sys.path when run as a script
from sink_throughput import Count

MODES = ("classic", "connect")
ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
SAMPLE_S = 0.5  # memory of the server's processes
WATCH_S = 0.01  # the staging tables' folders
STAGE_PREFIX = "reactive_stage_"


class Timed(Count):
    """``sink_throughput.Count`` (request 1024 at a time), noting the time of the first
    row, of the last (the ``rows``-th), and of the first row of each batch: the publisher's
    ``_begin`` wrapper sets ``mark`` to the rows delivered before the batch."""

    def __init__(self, rows: int) -> None:
        super().__init__(1024)
        self.rows = rows
        self.first = 0.0
        self.last = 0.0
        self.mark = 0  # the count at which the next batch's first row arrives
        self.pending: int | None = None  # that batch's id
        self.batch_first: dict[int, float] = {}  # batch id -> its first row, wall clock
        self.error: BaseException | None = None
        self.done = threading.Event()

    def on_next(self, element: Any) -> None:
        count = self.count
        if count == self.mark and self.pending is not None:
            self.batch_first[self.pending] = time.time()
            self.pending = None
        if count == 0:
            self.first = time.perf_counter()
        super().on_next(element)
        if count + 1 == self.rows:
            self.last = time.perf_counter()

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def on_complete(self) -> None:
        self.done.set()


def watch_batches(subscriber: Timed, ready: dict[int, float] | None) -> None:
    """Note each batch's beginning for ``subscriber`` and, when ``ready`` is given (classic),
    the entry time of the ``foreachBatch`` function, by wrapping the publisher's methods
    in this process."""
    from pyspark_reactive import ForeachBatchPublisher

    begin = ForeachBatchPublisher._begin

    def _begin(self: Any, batch_id: int) -> None:
        subscriber.mark, subscriber.pending = self.rows_delivered, batch_id
        begin(self, batch_id)

    ForeachBatchPublisher._begin = _begin  # type: ignore[method-assign]
    if ready is not None:
        call = ForeachBatchPublisher.__call__

        def __call__(self: Any, batch: Any, batch_id: int) -> None:
            ready.setdefault(batch_id, time.time())
            call(self, batch, batch_id)

        ForeachBatchPublisher.__call__ = __call__  # type: ignore[method-assign]


def peak_rss(pid: int) -> int:
    """Peak resident memory of process ``pid`` in bytes (VmHWM), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Every ``SAMPLE_S``, the peak memory of a server's Python processes: its
    ``foreachBatch`` worker and the largest of the others (a process's VmHWM only grows,
    so the last look at each is its peak up to then)."""

    def __init__(self, server_pid: int) -> None:
        super().__init__(daemon=True, name="memory-sampler")
        self.server_pid = server_pid
        self.peaks: dict[int, tuple[str, int]] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(SAMPLE_S):
            self.look()

    def look(self) -> None:
        import psutil

        try:
            children = psutil.Process(self.server_pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for child in children:
            try:
                cmdline = " ".join(child.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if "python" not in cmdline:
                continue
            role = "foreachBatch" if "foreach_batch_worker" in cmdline else "other"
            peak = peak_rss(child.pid)
            if peak:
                self.peaks[child.pid] = (role, max(peak, self.peaks.get(child.pid,
                                                                         ("", 0))[1]))

    def stop(self) -> dict[str, int]:
        self.stopped.set()
        self.join()
        self.look()
        return {role: max((p for r, p in self.peaks.values() if r == role), default=0)
                for role in ("foreachBatch", "other")}


class StagedWatcher(threading.Thread):
    """Every ``WATCH_S``, the staging tables' folders in ``warehouse``: the modification
    time of each one's ``_SUCCESS`` file (the end of its write), by batch id."""

    def __init__(self, warehouse: Path) -> None:
        super().__init__(daemon=True, name="staging-watcher")
        self.warehouse = warehouse
        self.ready: dict[int, float] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(WATCH_S):
            try:
                entries = list(os.scandir(self.warehouse))
            except OSError:
                continue
            for entry in entries:
                name = entry.name
                if not name.startswith(STAGE_PREFIX):
                    continue
                batch_id = name.rsplit("_", 1)[-1]
                if not batch_id.isdigit() or int(batch_id) in self.ready:
                    continue
                try:
                    self.ready[int(batch_id)] = os.stat(
                        os.path.join(entry.path, "_SUCCESS")).st_mtime
                except OSError:
                    continue  # still being written

    def stop(self) -> dict[int, float]:
        self.stopped.set()
        self.join()
        return self.ready


def start_server(log_dir: Path, warehouse: Path) -> Any:
    """A Connect server in a process of its own, of this interpreter's pyspark, whose
    Python processes import the same ``pyspark_reactive`` as this process."""
    import pyspark_reactive

    sys.path[:0] = [str(ROOT / "tests" / "databricks"), str(ROOT / "tests" / "peers")]
    from local_server import LocalConnectServer

    src = str(Path(pyspark_reactive.__file__).resolve().parents[1])
    return LocalConnectServer(Path(sys.executable), log_dir, python_path=[src],
                              conf={"spark.sql.warehouse.dir": str(warehouse)}).start()


def run_mode(mode: str, rows: int, batch: int) -> dict[str, Any]:
    from pyspark_reactive import publish

    ready: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="connect-publish-") as scratch:
        server = watcher = sampler = None
        try:
            if mode == "connect":
                warehouse = Path(scratch) / "warehouse"
                server = start_server(Path(scratch) / "server", warehouse)
                os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
                from pyspark.sql.connect.session import SparkSession as ConnectSession

                spark: Any = ConnectSession.builder.remote(server.remote).create()
                jvm_pid = server.process.pid
                sampler = Sampler(jvm_pid)
                watcher = StagedWatcher(warehouse)
            else:
                from pyspark import SparkContext

                from pyspark_reactive.session import local_session

                spark = local_session("classic-publish")
                gateway = SparkContext._gateway
                assert gateway is not None
                jvm_pid = gateway.proc.pid
            df = (spark.readStream.format("reactive").option("publisher", "range")
                  .option("count", rows).option("maxRecordsPerTrigger", batch).load())
            subscriber = Timed(rows)
            watch_batches(subscriber, ready if mode == "classic" else None)
            for thread in (sampler, watcher):
                if thread is not None:
                    thread.start()
            began = time.perf_counter()
            publisher = publish(df, element="tuple", trigger={"availableNow": True},
                                checkpointLocation=str(Path(scratch) / "checkpoint"))
            publisher.subscribe(subscriber)
            if not subscriber.done.wait(1800):
                sys.exit(f"{mode}: no terminal signal after 30 minutes")
            ended = time.perf_counter()
            server_peaks = sampler.stop() if sampler else {}
            if watcher is not None:
                ready = watcher.stop()
            jvm_peak = peak_rss(jvm_pid)
            spark.stop()
        finally:
            if server is not None:
                server.stop()
    if subscriber.error is not None:
        sys.exit(f"{mode}: the stream failed: {subscriber.error!r}")
    if subscriber.count != rows:
        sys.exit(f"{mode}: {subscriber.count} rows, expected {rows}")
    latencies = [subscriber.batch_first[b] - ready[b] for b in sorted(ready)
                 if b in subscriber.batch_first]
    return {
        "rate": rows / (subscriber.last - subscriber.first),
        "query_s": ended - began,
        "batches": len(subscriber.batch_first),
        "latency_s": latencies,
        "client": peak_rss(os.getpid()),
        "jvm": jvm_peak,
        "worker": server_peaks.get("foreachBatch", 0),
        "python": server_peaks.get("other", 0),
    }


def latency_text(samples: list[float]) -> str:
    if not samples:
        return "batch latency n/a"
    return (f"batch latency median {statistics.median(samples) * 1e3:5.0f} ms, max "
            f"{max(samples) * 1e3:5.0f} ms ({len(samples)} batches)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=250_000,
                        help="maxRecordsPerTrigger (default 250000)")
    parser.add_argument("--json", metavar="PATH", help="write the figures there (report.py)")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # a child: one mode, figures as JSON on the last line
        print(json.dumps(run_mode(args.mode, args.rows, args.batch)), flush=True)
        return
    import pyspark

    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"{args.rows:,} rows of range in batches of {args.batch:,}, availableNow, "
          f"tuple elements, request(1024); load average {os.getloadavg()[0]:.1f}")
    figures: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        child = subprocess.run(
            [sys.executable, __file__, "--mode", mode, "--rows", str(args.rows),
             "--batch", str(args.batch)], capture_output=True, text=True)
        if child.returncode != 0:
            sys.exit(f"{mode} failed:\n{child.stdout[-2000:]}\n{child.stderr[-4000:]}")
        figures[mode] = json.loads(child.stdout.strip().splitlines()[-1])
        f = figures[mode]
        jvm = "server JVM" if mode == "connect" else "driver JVM"
        server = (f"  foreachBatch worker {f['worker'] / MIB:4.0f} MiB  other server Python "
                  f"{f['python'] / MIB:4.0f} MiB" if mode == "connect" else "")
        print(f"  {mode:8s} {f['rate']:>10,.0f} rows/s  query {f['query_s']:5.1f} s  "
              f"{latency_text(f['latency_s'])}\n"
              f"           peak: client {f['client'] / MIB:4.0f} MiB  {jvm} "
              f"{f['jvm'] / MIB:5.0f} MiB{server}", flush=True)
    classic, connect = figures["classic"], figures["connect"]
    ratio = connect["rate"] / classic["rate"]
    print(f"connect / classic = {ratio:.2f} (rows/s)")

    note = (f"{args.rows:,} rows of range, batches of {args.batch:,}, availableNow, tuple "
            "elements, request(1024), local[2]; Connect server in its own process")
    write(args.json, "connect_publish", [
        Figure("connect_publish", "publish() under Spark Connect, rows/s", connect["rate"],
               "rows/s", baseline="classic publish()", baseline_value=classic["rate"],
               note=note, extra={
                   "query_s": connect["query_s"],
                   "client_peak_mib": connect["client"] / MIB,
                   "server_jvm_peak_mib": connect["jvm"] / MIB,
                   "foreach_batch_worker_peak_mib": connect["worker"] / MIB,
                   "baseline_query_s": classic["query_s"],
                   "baseline_client_peak_mib": classic["client"] / MIB,
                   "baseline_driver_jvm_peak_mib": classic["jvm"] / MIB}),
    ], series={"batch_latency_ms": {
        f"{mode} publish()": [s * 1e3 for s in figures[mode]["latency_s"]]
        for mode in MODES}})


if __name__ == "__main__":
    main()
