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

``connect-arrow`` is the connect mode with ``publish(element="arrow")``: the subscriber gets
each partition's rows as ``pyarrow.RecordBatch`` es and counts their rows (still requesting
1024 elements at a time), as the ceiling's client counts the rows of each ``toArrow()``:
the transport without the conversion of rows to Python elements.

The ceiling of the transport, in the same run, two ways, each on a Connect server of its
own, with no code of the project in the transport (the stream is the same ``range`` source
read by ``format("reactive")``):

* ceiling: the same streaming query, whose ``foreachBatch`` function only writes each
  batch to a table (``saveAsTable`` in the catalog's default format, columns renamed
  ``c0``, ``c1``, ... and partitioned by ``spark_partition_id()`` into
  ``__reactive_partition``, as the project's stager does; tables named
  ``ceiling_stage_<run>_<batch id>``) and returns; and a plain Connect client that polls
  (``SHOW TABLES ... LIKE``) at the project's interval (``sink.connect.POLL_S``, backing
  off by 1.5 up to ``MAX_POLL_S`` while nothing is found, read from the checkout under
  test), lists the partitions of the oldest table it has not read (``SHOW PARTITIONS``),
  reads each with ``toArrow()``, one at a time, counts the rows, and drops the table (the
  project drops it too, from the server side). Spark goes on to the next batch as soon
  as a table is written, so batches overlap: this is what the tables themselves allow;
* ceiling-sync: the same, except that the batch function returns only once the client
  has dropped its table (it looks with ``tableExists`` at the same interval), as the
  project's stager returns only once its batch is delivered: batches do not overlap, as
  under ``publish()``, whose backpressure needs it.

The ceiling's rows/s is from the first ``toArrow()`` result to the last (rows handed to
nobody: the project also turns them into elements and offers them to a subscriber); its
batch latency, from the table's ``_SUCCESS`` file to the batch's first ``toArrow()``.

For each Connect mode, where each batch's time goes (``connect_split.py``: the server's
event log, which Spark Connect fills with every operation it runs and the session that
sent it, and the client's own ``toArrow()`` calls, timed by a wrapper of pyspark's
method in this process): the write, the digests after it (the project's read-back and
signed mark), the client's discovery of the batch (polls), its reads, the rest of its
delivery (rows offered to the subscriber), the settling (outcome mark, the batch
function's polls, the drop) and Spark's move to the next batch, as medians in ms, and the
round trips to the server per batch of each side.

Then Connect's rows/s as a ratio of classic's (the baseline) and of each ceiling's, one
line each (``compare_revisions.py`` picks up the rows/s, the latency medians and these
ratios). ``--modes`` runs some of the modes only. ``--json PATH`` writes the figures for
``bench.py`` (``report.py``).

Run from the repository root::

    .venv/bin/python benchmarks/connect_publish_throughput.py [--rows N] [--batch N]

A/B of two checkouts (old, new, interleaved; copy this file and ``connect_split.py``
into the old one first)::

    .venv/bin/python benchmarks/compare_revisions.py --old /tmp/old --rounds 3 \\
        --timeout 3600 connect_publish_throughput.py --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from connect_split import Read, batch_splits, event_lines, median_split, operations, split_text
from report import Figure, write  # this folder is on sys.path when run as a script
from sink_throughput import Count

MODES = ("classic", "connect", "connect-arrow", "ceiling", "ceiling-sync")
CONNECT_MODES = ("connect", "connect-arrow", "ceiling", "ceiling-sync")
ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
SAMPLE_S = 0.5  # memory of the server's processes
WATCH_S = 0.01  # the staging tables' folders
STAGE_PREFIX = "reactive_stage_"
CEILING_PREFIX = "ceiling_stage_"
PART = "__reactive_partition"  # the project's partition column, kept for the ceiling
# Spark gives a Python process it starts (the source runner) 10 s to connect back, which a
# loaded 2-core machine can miss before the query has done anything: a mode that fails so
# is run again, up to ATTEMPTS times in all.
NO_RUNNER = "Python worker failed to connect back"
ATTEMPTS = 5
# The project's polling interval, used when the checkout under test names none.
DEFAULT_POLL_S, DEFAULT_MAX_POLL_S = 0.05, 0.25


class Timed(Count):
    """``sink_throughput.Count`` (request 1024 at a time), noting the time of the first
    row, of the last (the ``rows``-th), and of the first row of each batch: the publisher's
    ``_begin`` wrapper sets ``mark`` to the rows delivered before the batch."""

    def __init__(self, rows: int, arrow: bool = False) -> None:
        super().__init__(1024)
        self.rows = rows
        self.arrow = arrow  # elements are pyarrow.RecordBatches: count their rows
        self.first = 0.0
        self.last = 0.0
        self.mark = 0  # the count at which the next batch's first row arrives
        self.pending: int | None = None  # that batch's id
        self.batch_first: dict[int, float] = {}  # batch id -> its first row, wall clock
        self.error: BaseException | None = None
        self.done = threading.Event()

    def on_next(self, element: Any) -> None:
        count = self.count
        size = element.num_rows if self.arrow else 1
        if self.pending is not None and count <= self.mark < count + size:
            self.batch_first[self.pending] = time.time()
            self.pending = None
        if count == 0:
            self.first = time.perf_counter()
        super().on_next(element)
        self.count += size - 1
        if count < self.rows <= count + size:
            self.last = time.perf_counter()

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def on_complete(self) -> None:
        self.done.set()


class ReadLog:
    """The client's reads: every ``toArrow()`` of a Connect DataFrame in this process, timed
    by a wrapper of pyspark's method (the project's code is left as it is), with the batch
    being delivered when it began (``batch``, set by whoever knows it)."""

    def __init__(self) -> None:
        self.reads: list[Read] = []
        self.batch: int | None = None

    def install(self) -> None:
        from pyspark.sql.connect.dataframe import DataFrame

        original = DataFrame.toArrow
        log = self

        def toArrow(frame: Any) -> Any:  # pyspark's name
            batch, start = log.batch, time.time()
            table = original(frame)
            log.reads.append(Read(start, time.time(), table.num_rows, batch))
            return table

        DataFrame.toArrow = toArrow  # type: ignore[method-assign,assignment]


def watch_batches(subscriber: Timed, ready: dict[int, float] | None,
                  reads: ReadLog | None = None) -> None:
    """Note each batch's beginning for ``subscriber`` (and ``reads``) and, when ``ready`` is
    given (classic), the entry time of the ``foreachBatch`` function, by wrapping the
    publisher's methods in this process."""
    from pyspark_reactive import ForeachBatchPublisher

    begin = ForeachBatchPublisher._begin

    def _begin(self: Any, batch_id: int) -> None:
        subscriber.mark, subscriber.pending = self.rows_delivered, batch_id
        if reads is not None:
            reads.batch = batch_id
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
    """Every ``WATCH_S``, the staging tables' folders in ``warehouse`` (names starting with
    ``prefix``): the modification time of each one's ``_SUCCESS`` file (the end of its
    write), by batch id."""

    def __init__(self, warehouse: Path, prefix: str = STAGE_PREFIX) -> None:
        super().__init__(daemon=True, name="staging-watcher")
        self.warehouse = warehouse
        self.prefix = prefix
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
                if not name.startswith(self.prefix):
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


def start_server(log_dir: Path, warehouse: Path, events: Path) -> Any:
    """A Connect server in a process of its own, of this interpreter's pyspark, whose
    Python processes import the same ``pyspark_reactive`` as this process, with an event
    log in ``events`` (``connect_split.py`` reads it)."""
    import pyspark_reactive

    sys.path[:0] = [str(ROOT / "tests" / "databricks"), str(ROOT / "tests" / "peers")]
    from local_server import LocalConnectServer

    src = str(Path(pyspark_reactive.__file__).resolve().parents[1])
    events.mkdir(parents=True, exist_ok=True)
    return LocalConnectServer(Path(sys.executable), log_dir, python_path=[src], conf={
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
        # Plain text, in one file: read once the server has ended.
        "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",
    }).start()


def poll_intervals() -> tuple[float, float]:
    """The project's polling interval (first, longest) in the checkout under test."""
    from pyspark_reactive.sink import connect

    return (float(getattr(connect, "POLL_S", DEFAULT_POLL_S)),
            float(getattr(connect, "MAX_POLL_S", DEFAULT_MAX_POLL_S)))


class CeilingBatch:
    """The ceiling's ``foreachBatch`` function: writes the batch to a table partitioned as
    the project's stager partitions it, then returns (``hold=False``) or waits until the
    table is gone (``hold=True``: the client has read and dropped it), looking every
    ``poll_s``, backing off by 1.5 up to ``max_poll_s``. Shipped by value (cloudpickle):
    the server needs none of this file."""

    def __init__(self, token: str, hold: bool, poll_s: float, max_poll_s: float) -> None:
        self.token = token
        self.hold = hold
        self.poll_s = poll_s
        self.max_poll_s = max_poll_s

    def __call__(self, batch: Any, batch_id: int) -> None:
        from pyspark.sql.functions import spark_partition_id

        table = f"{CEILING_PREFIX}{self.token}_{batch_id}"
        staged = batch.toDF(*[f"c{index}" for index in range(len(batch.columns))])
        (staged.withColumn(PART, spark_partition_id()).write.partitionBy(PART)
         .saveAsTable(table))
        wait = self.poll_s
        while self.hold and batch.sparkSession.catalog.tableExists(table):
            time.sleep(wait)
            wait = min(wait * 1.5, self.max_poll_s)


class CeilingClient:
    """The ceiling's client: polls for the tables, reads each partition with ``toArrow()``,
    drops the table; notes the first and last rows and each batch's first rows, as
    :class:`Timed` does for ``publish()``."""

    def __init__(self, spark: Any, token: str, rows: int, reads: ReadLog,
                 poll_s: float, max_poll_s: float) -> None:
        self.spark = spark
        self.prefix = f"{CEILING_PREFIX}{token}_"
        self.rows = rows
        self.reads = reads
        self.poll_s = poll_s
        self.max_poll_s = max_poll_s
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.batch_first: dict[int, float] = {}
        self.error: BaseException | None = None

    def pending(self, done: set[int]) -> list[int]:
        names = [str(row.tableName) for row in
                 self.spark.sql(f"SHOW TABLES LIKE '{self.prefix}*'").collect()]
        return sorted(int(name[len(self.prefix):]) for name in names
                      if name.startswith(self.prefix) and name[len(self.prefix):].isdigit()
                      and int(name[len(self.prefix):]) not in done)

    def partitions(self, table: str) -> list[int]:
        rows = self.spark.sql(f"SHOW PARTITIONS {table}").collect()
        return sorted(int(str(row[0]).partition("=")[2]) for row in rows)

    def run(self, query: Any) -> None:
        from pyspark.sql.functions import col

        done: set[int] = set()
        wait = self.poll_s
        while self.count < self.rows:
            pending = self.pending(done)
            # A table is in the catalog once written; its partitions a moment later.
            parts = self.partitions(f"{self.prefix}{pending[0]}") if pending else []
            if not parts:
                if not pending and not query.isActive:
                    error = query.exception()
                    sys.exit(f"ceiling: the query ended after {self.count} of {self.rows} "
                             f"rows: {error}")
                time.sleep(wait)
                wait = min(wait * 1.5, self.max_poll_s)
                continue
            batch_id = pending[0]
            table = f"{self.prefix}{batch_id}"
            self.reads.batch = batch_id
            frame = self.spark.read.table(table)
            for part in parts:
                arrow = frame.where(col(PART) == part).drop(PART).toArrow()
                if self.count == 0:
                    self.first = time.perf_counter()
                self.batch_first.setdefault(batch_id, time.time())
                self.count += arrow.num_rows
            self.last = time.perf_counter()
            self.spark.sql(f"DROP TABLE IF EXISTS {table}")
            done.add(batch_id)
            wait = self.poll_s


def connect_splits(events: Path, client_session: str, prefix: str,
                   reads: list[Read]) -> dict[int, dict[str, float]]:
    """The per-batch split of a Connect mode's run (``connect_split.py``)."""
    table = re.compile(re.escape(prefix) + r"[0-9A-Za-z_]*?_(\d+)(?![0-9A-Za-z_])")
    return batch_splits(operations(event_lines(events), table), reads, client_session)


def run_mode(mode: str, rows: int, batch: int) -> dict[str, Any]:
    from pyspark_reactive import publish

    ready: dict[int, float] = {}
    reads = ReadLog()
    client_session = ""
    prefix = CEILING_PREFIX if mode.startswith("ceiling") else STAGE_PREFIX
    with tempfile.TemporaryDirectory(prefix="connect-publish-") as scratch:
        server = watcher = sampler = None
        events = Path(scratch) / "events"
        try:
            if mode in CONNECT_MODES:
                warehouse = Path(scratch) / "warehouse"
                server = start_server(Path(scratch) / "server", warehouse, events)
                os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
                from pyspark.sql.connect.session import SparkSession as ConnectSession

                spark: Any = ConnectSession.builder.remote(server.remote).create()
                client_session = spark.session_id
                reads.install()
                jvm_pid = server.process.pid
                sampler = Sampler(jvm_pid)
                watcher = StagedWatcher(warehouse, prefix)
            else:
                from pyspark import SparkContext

                from pyspark_reactive.session import local_session

                spark = local_session("classic-publish")
                gateway = SparkContext._gateway
                assert gateway is not None
                jvm_pid = gateway.proc.pid
            df = (spark.readStream.format("reactive").option("publisher", "range")
                  .option("count", rows).option("maxRecordsPerTrigger", batch).load())
            subscriber: Any = Timed(rows, arrow=mode == "connect-arrow")
            watch_batches(subscriber, ready if mode == "classic" else None, reads)
            for thread in (sampler, watcher):
                if thread is not None:
                    thread.start()
            began = time.perf_counter()
            if mode.startswith("ceiling"):
                if CeilingBatch.__module__ != "__main__":  # imported: ship it by value too
                    from pyspark import cloudpickle

                    cloudpickle.register_pickle_by_value(sys.modules[CeilingBatch.__module__])
                token = os.urandom(6).hex()
                query = (df.writeStream.foreachBatch(CeilingBatch(
                    token, mode == "ceiling-sync", *poll_intervals()))
                    .trigger(availableNow=True)
                    .option("checkpointLocation", str(Path(scratch) / "checkpoint")).start())
                subscriber = CeilingClient(spark, token, rows, reads, *poll_intervals())
                subscriber.run(query)
                query.awaitTermination(1800)
                subscriber.error = query.exception()
            else:
                publisher = publish(df, element="arrow" if mode == "connect-arrow" else "tuple",
                                    trigger={"availableNow": True},
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
        # Written in full once the server has ended.
        splits = (connect_splits(events, client_session, prefix, reads.reads)
                  if server is not None else {})
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
        "split": median_split(splits),
        "split_batches": len(splits),
    }


def latency_text(samples: list[float]) -> str:
    if not samples:
        return "batch latency n/a"
    return (f"batch latency median {statistics.median(samples) * 1e3:5.0f} ms, max "
            f"{max(samples) * 1e3:5.0f} ms ({len(samples)} batches)")


def modes_option(text: str) -> list[str]:
    """``--modes``: some of ``MODES``, comma-separated, run in ``MODES``' order."""
    named = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in named if name not in MODES]
    if unknown or not named:
        raise argparse.ArgumentTypeError(
            f"--modes {text!r}: {', '.join(unknown) or 'none named'}; accepted: a "
            f"comma-separated list of {', '.join(MODES)}")
    return [mode for mode in MODES if mode in named]


def mode_text(mode: str, f: dict[str, Any]) -> str:
    """What is printed of one mode's figures (``run_mode``'s): its rows/s and batch
    latency on the first line, as ``compare_revisions.py`` reads them."""
    jvm = "server JVM" if mode in CONNECT_MODES else "driver JVM"
    server = (f"  foreachBatch worker {f['worker'] / MIB:4.0f} MiB  other server Python "
              f"{f['python'] / MIB:4.0f} MiB" if mode in CONNECT_MODES else "")
    split = (f"\n           {split_text(f['split'], f['split_batches'])}"
             if mode in CONNECT_MODES else "")
    return (f"  {mode:12s} {f['rate']:>10,.0f} rows/s  query {f['query_s']:5.1f} s  "
            f"{latency_text(f['latency_s'])}\n"
            f"           peak: client {f['client'] / MIB:4.0f} MiB  {jvm} "
            f"{f['jvm'] / MIB:5.0f} MiB{server}{split}")


def ratio_lines(figures: dict[str, dict[str, Any]]) -> list[str]:
    """Connect ``publish()``'s rows/s against classic's and each ceiling's, one line each,
    for the modes that ran, as ``compare_revisions.py`` reads them."""
    return [f"{mode} / {baseline} = "
            f"{figures[mode]['rate'] / figures[baseline]['rate']:.2f} (rows/s)"
            for mode in ("connect", "connect-arrow") if mode in figures
            for baseline in ("classic", "ceiling", "ceiling-sync") if baseline in figures]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=250_000,
                        help="maxRecordsPerTrigger (default 250000)")
    parser.add_argument("--modes", type=modes_option, default=list(MODES),
                        help=f"comma-separated, of {', '.join(MODES)} (default: all)")
    parser.add_argument("--json", metavar="PATH", help="write the figures there (report.py)")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # a child: one mode, figures as JSON on the last line
        print(json.dumps(run_mode(args.mode, args.rows, args.batch)), flush=True)
        return
    import pyspark

    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"{args.rows:,} rows of range in batches of {args.batch:,}, availableNow, "
          f"tuple elements (connect-arrow: Arrow), request(1024); load average "
          f"{os.getloadavg()[0]:.1f}")
    figures: dict[str, dict[str, Any]] = {}
    for mode in args.modes:
        for attempt in range(1, ATTEMPTS + 1):
            child = subprocess.run(
                [sys.executable, __file__, "--mode", mode, "--rows", str(args.rows),
                 "--batch", str(args.batch)], capture_output=True, text=True)
            output = child.stdout + child.stderr
            if child.returncode == 0 or NO_RUNNER not in output or attempt == ATTEMPTS:
                break
            print(f"  {mode}: Spark's Python source runner did not connect back within its "
                  f"10 s (load average {os.getloadavg()[0]:.1f}); attempt {attempt + 1} of "
                  f"{ATTEMPTS}", file=sys.stderr, flush=True)
        if child.returncode != 0:
            sys.exit(f"{mode} failed:\n{child.stdout[-2000:]}\n{child.stderr[-4000:]}")
        figures[mode] = json.loads(child.stdout.strip().splitlines()[-1])
        print(mode_text(mode, figures[mode]), f"(load average {os.getloadavg()[0]:.1f})",
              flush=True)
    for line in ratio_lines(figures):
        print(line)
    if "connect" not in figures or "classic" not in figures:
        return  # the JSON record compares Connect with classic

    classic, connect = figures["classic"], figures["connect"]
    note = (f"{args.rows:,} rows of range, batches of {args.batch:,}, availableNow, tuple "
            "elements, request(1024), local[2]; Connect server in its own process")
    records = [
        Figure("connect_publish", "publish() under Spark Connect, rows/s", connect["rate"],
               "rows/s", baseline="classic publish()", baseline_value=classic["rate"],
               note=note, extra={
                   "query_s": connect["query_s"],
                   "client_peak_mib": connect["client"] / MIB,
                   "server_jvm_peak_mib": connect["jvm"] / MIB,
                   "foreach_batch_worker_peak_mib": connect["worker"] / MIB,
                   "baseline_query_s": classic["query_s"],
                   "baseline_client_peak_mib": classic["client"] / MIB,
                   "baseline_driver_jvm_peak_mib": classic["jvm"] / MIB,
                   **{f"split_{name}_ms": value * 1e3
                      for name, value in connect["split"].items() if "ops" not in name}}),
    ]
    for ceiling, what, target in (
            ("ceiling", "tables written, batches overlapping", (">=", 0.8)),
            ("ceiling-sync", "tables written, one batch at a time", None)):
        if ceiling in figures:
            records.append(Figure(
                "connect_publish", f"publish() under Spark Connect against the transport's "
                f"{ceiling} ({what}), rows/s", connect["rate"], "rows/s",
                baseline=f"{ceiling}: saveAsTable + plain client toArrow()",
                baseline_value=figures[ceiling]["rate"], target=target, note=note,
                extra={f"baseline_split_{name}_ms": value * 1e3
                       for name, value in figures[ceiling]["split"].items()
                       if "ops" not in name}))
    write(args.json, "connect_publish", records, series={"batch_latency_ms": {
        f"{mode} publish()" if mode in ("classic", "connect") else mode:
        [s * 1e3 for s in figures[mode]["latency_s"]] for mode in figures}})


if __name__ == "__main__":
    main()
