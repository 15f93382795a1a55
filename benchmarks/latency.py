"""Latency of ``spark.readStream.format("reactive")`` at 200 elements/s, beside Spark's own
``rate`` source at the same rate, in the same run.

A publisher (an ``IterablePublisher`` over a paced generator, shipped with
``read_stream``) emits 200 elements a second, each stamped with its emission time
(``time.time()``). A query with the source's default options and the default trigger
writes through ``foreachBatch``, which collects each batch's rows, then takes
``time.time()``: arrival minus emission is a row's latency. The baseline is the ``rate``
source at ``rowsPerSecond=200`` through the very same sink, its ``timestamp`` column (when
the row was due) standing for the emission time; a second baseline is a bare Python
``DataSourceStreamReader`` at the same rate (no publisher: its rows are made in ``read()``
with the time each was due), which shows what Spark's Python source machinery costs by
itself. Steady state is every batch after the
first three, for ``--seconds``; its figures are p50 and p99 of the rows' latencies and
batches per second. Two start-up figures: the time from ``start()`` to the first rows in
``foreachBatch``, and the age of the oldest row of the second batch (the backlog the
start-up left). A "low-latency configuration" (``--low-latency``, by default
``fillWaitMs=0``) runs too, with its batches per second: what it costs. The session's
first query (the reactive source, default options) is reported apart as the cold
start-up: it starts every Python process cold; it then runs 10 s more, untimed, while the
JVM compiles its hot paths, and the compared queries run after it.

For each reactive run a start-up timeline is printed: ``start()`` called and returned,
the processes Spark started for it (psutil), the first element emitted (the runner
subscribes at the first ``latestOffset``, and the publisher emits at once), the first
trigger's start (query progress), first rows in ``foreachBatch``; then the ``durationMs``
of the first batches and the median of the steady ones (``latestOffset`` is the runner's
own time: subscribing, then waiting up to ``fillWaitMs`` to fill the batch).

Run from the repository root::

    .venv/bin/python benchmarks/latency.py [--seconds S] [--quick] [--json PATH]

Bounds and targets are printed, never enforced. Exit status 1 means a run lost or
repeated rows, failed, or never reached its steady state: no figure comes from it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from memory import ProcessTreeMemory, Seen
from pyspark_reactive import local_session, read_stream
from reactive_streams import IterablePublisher, Publisher
from report import Figure, write

RATE = 200.0  # elements per second
WARM_BATCHES = 3  # batches left out of the steady state
P50_BOUND_MS = 150.0
P99_BOUND_MS = 400.0
START_TIMEOUT_S = 180.0
COLD_SECONDS = 10.0  # steady state of the session's first query, which is not compared
SCHEMA = "seq BIGINT, emitted DOUBLE"
DURATIONS = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit",
             "commitOffsets", "triggerExecution")
DEFAULT_CASE = "reactive, default options"
BARE_CASE = "bare Python source"
RATE_CASE = "rate source"
COLD_CASE = "reactive, default options, cold"


def stamped(rate: float) -> Iterator[tuple[int, float]]:
    """Element ``k`` is due ``k / rate`` s after the first; each carries when it left."""
    began = time.monotonic()
    k = 0
    while True:
        delay = began + k / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield k, time.time()
        k += 1


class _Span(InputPartition):
    def __init__(self, low: int, high: int, began: float) -> None:
        super().__init__(low)
        self.low, self.high, self.began = low, high, began


class PacedReader(DataSourceStreamReader):
    """A bare Python streaming source at the same rate: no publisher, no buffer. Its
    latest offset is the count of rows due since its first ``latestOffset``; ``read``
    makes them with the time each was due, as the ``rate`` source does."""

    def __init__(self) -> None:
        self.began: float | None = None

    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        if self.began is None:
            self.began = time.time()
        return {"offset": int((time.time() - self.began) * RATE)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        assert self.began is not None
        return [_Span(start["offset"], end["offset"], self.began)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, float]]:
        assert isinstance(partition, _Span)
        for k in range(partition.low, partition.high):
            yield k, partition.began + k / RATE


class PacedSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_paced"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> PacedReader:
        return PacedReader()


def paced_publisher(options: Mapping[str, str]) -> Publisher[tuple[int, float]]:
    """The factory shipped to the source runner (pickled by value with this script)."""
    return IterablePublisher(lambda: stamped(RATE))


@dataclass
class Batch:
    batch_id: int
    arrived: float
    seqs: list[int]
    emitted: list[float]

    @property
    def latencies_ms(self) -> list[float]:
        return [(self.arrived - e) * 1000 for e in self.emitted]


@dataclass
class LatencySink:
    """The ``foreachBatch`` function: collects, stamps arrival, keeps what it saw."""

    seconds: float
    batches: list[Batch] = field(default_factory=list)
    empty: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    began: float = 0.0

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = df.collect()
        arrived = time.time()
        if not rows:
            self.empty += 1
            return
        self.batches.append(Batch(batch_id, arrived, [r[0] for r in rows],
                                  [r[1] for r in rows]))
        if (len(self.batches) > WARM_BATCHES
                and arrived - self.batches[WARM_BATCHES - 1].arrived >= self.seconds):
            self.done.set()


@dataclass
class Run:
    case: str
    sink: LatencySink
    started: float  # start() called (epoch s)
    returned: float  # start() returned
    progress: list[dict[str, Any]]
    processes: list[Seen]  # every process of the tree seen during the run

    @property
    def steady(self) -> list[Batch]:
        return self.sink.batches[WARM_BATCHES:]

    def steady_latencies(self) -> list[float]:
        return [x for b in self.steady for x in b.latencies_ms]

    def batches_per_second(self) -> float:
        first = self.sink.batches[WARM_BATCHES - 1].arrived
        return len(self.steady) / (self.steady[-1].arrived - first)

    def first_rows_s(self) -> float:
        return self.sink.batches[0].arrived - self.started

    def second_batch_oldest_s(self) -> float:
        second = self.sink.batches[1]
        return second.arrived - min(second.emitted)

    def check(self) -> str | None:
        """Why the run's data cannot be trusted, or ``None``."""
        seqs = sorted(s for b in self.sink.batches for s in b.seqs)
        if len(self.sink.batches) <= WARM_BATCHES:
            return f"{self.case}: only {len(self.sink.batches)} batches with rows"
        if seqs != list(range(len(seqs))):
            missing = len(set(range(seqs[-1] + 1)) - set(seqs))
            return (f"{self.case}: rows lost or repeated ({len(seqs)} rows, {missing} "
                    f"missing below the highest, {len(seqs) - len(set(seqs))} repeated)")
        return None


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in (0, 100].

    >>> percentile([5, 1, 3, 2, 4], 50), percentile(list(range(1, 101)), 99)
    (3, 99)
    """
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def reactive_frame(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    if __name__ != "__main__":  # imported: the runner cannot import this module by name
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return read_stream(spark, paced_publisher, schema=SCHEMA, **options)


def bare_frame(spark: SparkSession) -> DataFrame:
    spark.dataSource.register(PacedSource)
    return spark.readStream.format(PacedSource.name()).load()


def rate_frame(spark: SparkSession) -> DataFrame:
    return (spark.readStream.format("rate").option("rowsPerSecond", int(RATE)).load()
            .select(F.col("value").alias("seq"),
                    F.col("timestamp").cast("double").alias("emitted")))


def measure(case: str, frame: DataFrame, seconds: float) -> Run:
    sink = LatencySink(seconds)
    sink.began = time.time()
    query = frame.writeStream.foreachBatch(sink).start()
    returned = time.time()
    tree = ProcessTreeMemory(interval=0.1)
    tree.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S + seconds * 3
        while not sink.done.wait(0.5):
            if not query.isActive:
                raise RuntimeError(f"{case}: the query ended: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{case}: no steady state within "
                                   f"{START_TIMEOUT_S + seconds * 3:.0f} s "
                                   f"({len(sink.batches)} batches)")
        progress = [dict(p.jsonValue()) if hasattr(p, "jsonValue") else dict(p)
                    for p in query.recentProgress]
    finally:
        query.stop()
        tree.stop()
    # Progress reports of batches that ran (idle reports repeat a batch id with no rows).
    ran: dict[int, dict[str, Any]] = {}
    for p in progress:
        if p.get("numInputRows", 0) > 0:
            ran.setdefault(p["batchId"], p)
    return Run(case, sink, sink.began, returned, [ran[k] for k in sorted(ran)],
               tree.processes)


def epoch(timestamp: str) -> float:
    """Query progress's ``timestamp`` (ISO 8601, UTC) as epoch seconds."""
    return dt.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc).timestamp()


def durations(progress: dict[str, Any]) -> dict[str, int]:
    given = progress.get("durationMs") or {}
    return {k: int(given[k]) for k in DURATIONS if k in given}


def median_durations(progress: Sequence[dict[str, Any]]) -> dict[str, float]:
    keys = {k for p in progress for k in durations(p)}
    return {k: statistics.median(durations(p).get(k, 0) for p in progress)
            for k in DURATIONS if k in keys}


def startup_report(run: Run) -> dict[str, Any]:
    """The start-up timeline (seconds after start() was called) and first durations."""
    t0 = run.started
    first = run.sink.batches[0]
    timeline: dict[str, float] = {"start() returned": run.returned - t0}
    for seen in run.processes:  # the processes Spark started for this query
        if t0 - 0.05 <= seen.created <= first.arrived:
            timeline[f"process {seen.pid} started: {seen.command} ({seen.role}; lived "
                     f"{seen.last_seen - seen.created:.1f} s)"] = seen.created - t0
    if run.case != RATE_CASE and 0 in first.seqs:
        timeline["first element emitted (publisher subscribed)"] = (
            first.emitted[first.seqs.index(0)] - t0)
    if run.progress:
        timeline["first trigger began (progress timestamp)"] = (
            epoch(run.progress[0]["timestamp"]) - t0)
    timeline["first rows in foreachBatch"] = first.arrived - t0
    return {
        "timeline_s": {k: round(v, 3) for k, v in timeline.items()},
        "first_batches_durationMs": [
            {"batchId": p["batchId"], "rows": p["numInputRows"], **durations(p)}
            for p in run.progress[:3]],
        "steady_median_durationMs": median_durations(run.progress[WARM_BATCHES:]),
    }


def print_startup(run: Run, report: dict[str, Any]) -> None:
    print(f"  start-up of '{run.case}' (s after start() was called):")
    for name, value in sorted(report["timeline_s"].items(), key=lambda kv: kv[1]):
        print(f"    {value:7.3f}  {name}")
    for p in report["first_batches_durationMs"]:
        fields = ", ".join(f"{k} {v}" for k, v in p.items() if k not in ("batchId", "rows"))
        print(f"    batch {p['batchId']} ({p['rows']} rows) durationMs: {fields}")
    steady = ", ".join(f"{k} {v:g}" for k, v in report["steady_median_durationMs"].items())
    if steady:
        print(f"    steady batches, median durationMs: {steady}")


def option_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected OPTION=VALUE, got {text!r}")
    return name, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="steady state per query, after the first three batches "
                             "(default: %(default)s)")
    parser.add_argument("--low-latency", type=option_pair, nargs="*",
                        default=[("fillWaitMs", "0")], metavar="OPTION=VALUE",
                        help="source options of the low-latency configuration "
                             "(default: fillWaitMs=0); none to leave it out")
    parser.add_argument("--quick", action="store_true", help="8 s of steady state")
    parser.add_argument("--json", metavar="PATH", help="write the figures there (report.py)")
    args = parser.parse_args(argv)
    seconds = 8.0 if args.quick else args.seconds

    spark = local_session("bench-latency",
                          conf={"spark.sql.streaming.numRecentProgressUpdates": "5000"})
    low = dict(args.low_latency)
    low_case = "reactive, " + ", ".join(f"{k}={v}" for k, v in low.items()) if low else None
    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"{RATE:g} elements/s, {seconds:g} s of steady state after {WARM_BATCHES} batches, "
          "default trigger, foreachBatch collect()")
    try:
        # The session's first streaming query starts every process cold: measured apart,
        # and it warms the session for the comparisons.
        # It runs COLD_SECONDS of steady state too, so that the JVM's JIT compilers have
        # done most of their work (two cores!) before the first compared query.
        cold = measure(COLD_CASE, reactive_frame(spark, {}), min(COLD_SECONDS, seconds))
        problem = cold.check()
        print(f"  {COLD_CASE}: first rows {cold.first_rows_s():.2f} s after start()"
              + (f"; BROKEN RUN: {problem}" if problem else ""), flush=True)
        print_startup(cold, startup_report(cold))
        frames: dict[str, Callable[[], DataFrame]] = {
            DEFAULT_CASE: lambda: reactive_frame(spark, {}),
            BARE_CASE: lambda: bare_frame(spark),
            RATE_CASE: lambda: rate_frame(spark)}
        if low_case:
            frames[low_case] = lambda: reactive_frame(spark, low)
        runs: dict[str, Run] = {} if problem else {COLD_CASE: cold}
        failures = [problem] if problem else []
        for case, frame in frames.items():
            try:
                run = measure(case, frame(), seconds)
            except Exception as error:  # a failed query: report it, go on with the others
                failures.append(f"{case}: {type(error).__name__}: {error}")
                print(f"  {case}: FAILED: {error}", flush=True)
                continue
            problem = run.check()
            if problem is not None:
                failures.append(problem)
                print(f"  {case}: BROKEN RUN: {problem}", flush=True)
                continue
            runs[case] = run
            lat = run.steady_latencies()
            print(f"  {case:32s} p50 {percentile(lat, 50):7.1f} ms  p99 "
                  f"{percentile(lat, 99):7.1f} ms  {run.batches_per_second():5.2f} batches/s  "
                  f"first rows {run.first_rows_s():5.2f} s  oldest of 2nd batch "
                  f"{run.second_batch_oldest_s():5.2f} s  ({len(lat)} rows in "
                  f"{len(run.steady)} steady batches)", flush=True)
            print_startup(run, startup_report(run))
    finally:
        spark.stop()

    figures, series = figures_of(runs, low_case, seconds)
    for figure in figures:
        if figure.met is not None:
            print(f"  {figure.case}: {figure.value:.1f} {figure.unit}"
                  + (f" / {figure.baseline} {figure.baseline_value:.1f}"
                     if figure.baseline_value is not None else "")
                  + f": {'met' if figure.met else 'NOT met'} (bound {figure.bound}, "
                  f"ratio target {figure.target})")
    write(args.json, "latency", figures, series)
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


def figures_of(runs: Mapping[str, Run], low_case: str | None,
               seconds: float) -> tuple[list[Figure], dict[str, dict[str, list[float]]]]:
    figures: list[Figure] = []
    rate = runs.get(RATE_CASE)
    note = (f"{RATE:g} elements/s, default trigger, foreachBatch collect(); steady: "
            f"{seconds:g} s after {WARM_BATCHES} batches")

    def beside(value: float, of_rate: float | None) -> dict[str, Any]:
        if rate is None or of_rate is None:
            return {}
        return {"baseline": f"{RATE_CASE} {RATE:g}/s", "baseline_value": of_rate}

    for case in (DEFAULT_CASE, low_case):
        run = runs.get(case) if case else None
        if run is None:
            continue
        lat = run.steady_latencies()
        rate_lat = rate.steady_latencies() if rate else None
        extra = {"steady_median_durationMs": median_durations(run.progress[WARM_BATCHES:]),
                 "batches_per_s": run.batches_per_second(), "rows": len(lat)}
        for q, bound in ((50, P50_BOUND_MS), (99, P99_BOUND_MS)):
            value = percentile(lat, q)
            figures.append(Figure(
                "latency", f"p{q}, {case}", value, "ms",
                **beside(value, percentile(rate_lat, q) if rate_lat else None),
                target=("<=", 1.0), bound=("<=", bound), note=note, extra=extra))
    default = runs.get(DEFAULT_CASE)
    if default is not None:
        figures.append(Figure(
            "latency", f"batches/s, {DEFAULT_CASE}", default.batches_per_second(), "batches/s",
            **beside(0, rate.batches_per_second() if rate else None), note=note))
        figures.append(Figure(
            "latency", f"start() to first rows, {DEFAULT_CASE}", default.first_rows_s(), "s",
            **beside(0, rate.first_rows_s() if rate else None),
            note="after the cold query, in the same session",
            extra=startup_report(default)))
        bare = runs.get(BARE_CASE)
        if bare is not None:  # what Spark's Python source machinery costs by itself
            figures.append(Figure(
                "latency", f"p50, {DEFAULT_CASE}, vs bare Python source",
                percentile(default.steady_latencies(), 50), "ms", baseline=BARE_CASE,
                baseline_value=percentile(bare.steady_latencies(), 50), note=note))
            figures.append(Figure(
                "latency", f"start() to first rows, {DEFAULT_CASE}, vs bare Python source",
                default.first_rows_s(), "s", baseline=BARE_CASE,
                baseline_value=bare.first_rows_s(),
                extra={"bare_startup": startup_report(bare)}))
        figures.append(Figure(
            "latency", f"oldest row of 2nd batch, {DEFAULT_CASE}",
            default.second_batch_oldest_s(), "s",
            **beside(0, rate.second_batch_oldest_s() if rate else None)))
    cold = runs.get(COLD_CASE)
    if cold is not None:
        figures.append(Figure(
            "latency", "start() to first rows, first query of the session", cold.first_rows_s(),
            "s", note="every Python process Spark starts for a query starts cold",
            extra=startup_report(cold)))
    low = runs.get(low_case) if low_case else None
    if low is not None:
        figures.append(Figure(
            "latency", f"batches/s, {low_case}", low.batches_per_second(), "batches/s",
            baseline=DEFAULT_CASE if default else None,
            baseline_value=default.batches_per_second() if default else None,
            note="what the low-latency configuration costs: micro-batches per second",
            extra={"startup": startup_report(low)}))
    series = {"latency_ms": {case: run.steady_latencies() for case, run in runs.items()
                             if case != COLD_CASE}}
    return figures, series


if __name__ == "__main__":
    sys.exit(main())
