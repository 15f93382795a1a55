"""Rows/s that ForeachBatchPublisher delivers from one micro-batch, and the driver memory
it takes, beside Spark's own ways of bringing a DataFrame to the driver, in the same run.

The batch is ``spark.range(--rows, numPartitions=8)`` with a second column, handed to the
publisher exactly as ``foreachBatch`` would (``publisher(batch, batch_id)``). A subscriber
requests 1024 Rows or tuples at a time, or one Arrow ``RecordBatch`` (of 1024 rows) at a
time, and counts. The baselines iterate the same DataFrame with ``toLocalIterator()``
(one partition at a time, like the publisher) and ``toArrow()`` (fast, but the whole batch
at once). Each case runs once on a small batch to warm up, then ``--repeat`` times (the
slow ``toLocalIterator()`` once); the best counts.

Driver memory, three ways, each the most a case added over what was there before it:

* Python side: Python objects (tracemalloc) plus Arrow buffers (pyarrow's pool, sampled
  every 2 ms), in a separate, untimed run of every case in this process (of
  ``toLocalIterator()``, over its first two partitions: it holds one at a time).
* Driver Python process RSS, sampled with psutil every 2 ms, and
* the driver JVM's live heap (``Runtime.totalMemory() - freeMemory()`` right after a
  ``System.gc()``, sampled about every 50 ms) and RSS,
  these two for ``toArrow()`` and the Arrow-element publisher only, in a fresh process
  (``--memory-cases``), the publisher first, so that it cannot find memory freed by
  ``toArrow()`` (allocators keep it), each after a warm-up on a small batch.

Run from the repository root::

    .venv/bin/python benchmarks/sink_throughput.py [--rows N] [--repeat K] [--json PATH]

Targets (printed, never enforced): Row elements >= 3x ``toLocalIterator()`` rows/s; Arrow
elements >= 0.5 of ``toArrow()`` rows/s with at most a quarter of its peak driver memory.
The default run takes about 3 minutes on this 2-core machine at a load average of 8 (other
benchmarks running), which can halve any figure; compare the ratios, and re-run.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import psutil
import pyarrow as pa
import pyspark
from pyspark.sql import DataFrame, SparkSession

from pyspark_reactive import ForeachBatchPublisher, local_session
from reactive_streams import Subscriber, Subscription
from report import Figure, write  # this folder is on sys.path when run as a script

ROW_TARGET = 3.0  # Row elements, rows/s, over toLocalIterator()'s
TUPLE_TARGET = 2.0
ARROW_TARGET = 0.5  # Arrow elements, rows/s, over toArrow()'s
MEMORY_TARGET = 0.25  # Arrow elements' peak driver memory over toArrow()'s
MIB = 2**20
SMALL = 20_000  # rows of the warm-up batch

ROW, TUPLE, ARROW = ("ForeachBatchPublisher, Row elements, request(1024)",
                     "ForeachBatchPublisher, tuple elements, request(1024)",
                     "ForeachBatchPublisher, arrow elements, request(1)")
LOCAL_ITERATOR, TO_ARROW = "toLocalIterator()", "toArrow()"


class Count(Subscriber[Any]):
    """Requests ``batch`` elements at a time once all arrived; counts them."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.count = 0
        self.left = 0
        self.subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.left = self.batch
        subscription.request(self.batch)

    def on_next(self, element: Any) -> None:
        self.count += 1
        self.left -= 1
        if self.left == 0:
            self.left = self.batch
            assert self.subscription is not None
            self.subscription.request(self.batch)

    def on_error(self, error: BaseException) -> None:
        raise error

    def on_complete(self) -> None:
        pass


class CountRows(Count):
    """:class:`Count` for Arrow elements: counts their rows."""

    def on_next(self, element: pa.RecordBatch) -> None:
        super().on_next(element)
        self.count += element.num_rows - 1


def publisher_case(element: str, request: int) -> Callable[[DataFrame], int]:
    def run(batch: DataFrame) -> int:
        publisher = ForeachBatchPublisher(element=element)
        subscriber = CountRows(request) if element == "arrow" else Count(request)
        publisher.subscribe(subscriber)
        publisher(batch, 0)
        return subscriber.count
    return run


def local_iterator(batch: DataFrame) -> int:
    return sum(1 for _ in batch.toLocalIterator())


def local_iterator_start(batch: DataFrame) -> int:
    """``toLocalIterator()`` over the first two of the 8 partitions: its memory, for it holds
    one partition at a time, without tracing the whole slow run."""
    return sum(1 for _ in itertools.islice(batch.toLocalIterator(), batch.count() // 4))


def to_arrow(batch: DataFrame) -> int:
    return int(batch.toArrow().num_rows)


CASES: dict[str, Callable[[DataFrame], int]] = {
    LOCAL_ITERATOR: local_iterator,
    TO_ARROW: to_arrow,
    ROW: publisher_case("row", 1024),
    TUPLE: publisher_case("tuple", 1024),
    ARROW: publisher_case("arrow", 1),
}
# Measured in a fresh process, in this order: the cases of the memory target.
MEMORY_CASES = {"arrow": ARROW, "toArrow": TO_ARROW}


def batch_of(spark: SparkSession, rows: int) -> DataFrame:
    return spark.range(rows, numPartitions=8).selectExpr("id", "id * 2 AS twice")


def python_peak(case: Callable[[DataFrame], int], batch: DataFrame) -> int:
    """Peak bytes the driver's Python side held during ``case``: Python objects
    (tracemalloc) plus Arrow buffers (pyarrow's pool, sampled every 2 ms). Untimed:
    tracing is slow."""
    samples = [pa.total_allocated_bytes()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            samples.append(pa.total_allocated_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    tracemalloc.start()
    base_python = tracemalloc.get_traced_memory()[0]
    sampler.start()
    try:
        case(batch)
    finally:
        samples.append(pa.total_allocated_bytes())
        done.set()
        sampler.join()
        python = tracemalloc.get_traced_memory()[1] - base_python
        tracemalloc.stop()
    return python + max(samples) - samples[0]


def process_peaks(case: Callable[[DataFrame], int], batch: DataFrame,
                  spark: SparkSession) -> dict[str, float]:
    """Peak growth, in bytes, of this process's RSS (sampled every 2 ms), of the driver
    JVM's live heap (in use right after a ``System.gc()``, sampled about every 50 ms) and
    of the JVM's RSS while ``case`` runs."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    runtime = jvm.java.lang.Runtime.getRuntime()
    me = psutil.Process()
    java = [p for p in me.children(recursive=True) if "java" in p.name()]

    def live_heap() -> int:
        jvm.java.lang.System.gc()
        return int(runtime.totalMemory() - runtime.freeMemory())

    gc.collect()
    base = {"rss": me.memory_info().rss, "heap": live_heap(),
            "jvm_rss": java[0].memory_info().rss if java else 0}
    peak = dict(base)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            peak["rss"] = max(peak["rss"], me.memory_info().rss)

    def sample_jvm() -> None:
        while not done.wait(0.05):
            peak["heap"] = max(peak["heap"], live_heap())
            if java:
                peak["jvm_rss"] = max(peak["jvm_rss"], java[0].memory_info().rss)

    samplers = [threading.Thread(target=sample, daemon=True),
                threading.Thread(target=sample_jvm, daemon=True)]
    for sampler in samplers:
        sampler.start()
    try:
        count = case(batch)
    finally:
        done.set()
        for sampler in samplers:
            sampler.join()
    peak["rss"] = max(peak["rss"], me.memory_info().rss)
    return {key: peak[key] - base[key] for key in base} | {"rows": count}


def memory_cases(rows: int) -> None:
    """``--memory-cases``: the process peaks of the memory target's cases, in a fresh
    process, as a JSON line. The publisher's first: ``toArrow()``, second, may reuse
    memory the first freed, which can only understate ``toArrow()``'s figures."""
    spark = local_session("sink-memory")
    try:
        peaks = {}
        for name, label in MEMORY_CASES.items():
            case = CASES[label]
            case(batch_of(spark, SMALL))  # warm-up: plans, classes
            peaks[name] = process_peaks(case, batch_of(spark, rows), spark)
        print(json.dumps(peaks), flush=True)
    finally:
        spark.stop()


def fresh_process_peaks(rows: int) -> dict[str, dict[str, float]]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-cases",
                          "--rows", str(rows)], capture_output=True, text=True, check=True)
    result: dict[str, dict[str, float]] = json.loads(out.stdout.strip().splitlines()[-1])
    for name, peaks in result.items():
        if peaks["rows"] != rows:
            sys.exit(f"--memory-cases, {name}: {peaks['rows']} rows, expected {rows}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", metavar="PATH", help="write the figures there (report.py)")
    parser.add_argument("--memory-cases", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_cases:
        memory_cases(args.rows)
        return
    began = time.monotonic()
    spark = local_session("sink-throughput")
    batch = batch_of(spark, args.rows)
    arrow_bytes = batch.toArrow().nbytes
    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"{args.rows:,} rows (id, twice) in 8 partitions = {arrow_bytes / MIB:.0f} MiB "
          f"as Arrow; best of {args.repeat} after a warm-up ({LOCAL_ITERATOR}: one run); "
          f"load average {os.getloadavg()[0]:.1f}")
    small = batch_of(spark, SMALL)
    rates: dict[str, float] = {}
    python_peaks: dict[str, int] = {}
    for label, case in CASES.items():
        case_began = time.monotonic()
        case(small)  # warm-up
        best = float("inf")
        for _ in range(1 if label == LOCAL_ITERATOR else args.repeat):
            started = time.perf_counter()
            count = case(batch)
            best = min(best, time.perf_counter() - started)
            if count != args.rows:
                sys.exit(f"{label}: {count} rows, expected {args.rows}")
        rates[label] = args.rows / best
        python_peaks[label] = python_peak(
            local_iterator_start if label == LOCAL_ITERATOR else case, batch)
        print(f"  {label:52s} {rates[label]:>11,.0f} rows/s   driver peak (Python side) "
              f"{python_peaks[label] / MIB:5.0f} MiB   ({time.monotonic() - case_began:.0f} s)",
              flush=True)
    spark.stop()

    fresh_began = time.monotonic()
    fresh = fresh_process_peaks(args.rows)
    print(f"Peak driver memory, in a fresh process (growth over the start of the case; "
          f"{time.monotonic() - fresh_began:.0f} s):")
    for name, peaks in fresh.items():
        print(f"  {MEMORY_CASES[name]:52s} Python process RSS {peaks['rss'] / MIB:4.0f} MiB   "
              f"JVM live heap {peaks['heap'] / MIB:4.0f} MiB   JVM RSS "
              f"{peaks['jvm_rss'] / MIB:4.0f} MiB")

    note = f"{args.rows:,} rows (id, twice), 8 partitions, local[2]"
    figures = [
        Figure("sink", "Row elements, request(1024)", rates[ROW], "rows/s",
               baseline=LOCAL_ITERATOR, baseline_value=rates[LOCAL_ITERATOR],
               target=(">=", ROW_TARGET), note=note,
               extra={"python_peak_mib": python_peaks[ROW] / MIB}),
        Figure("sink", "tuple elements, request(1024)", rates[TUPLE], "rows/s",
               baseline=LOCAL_ITERATOR, baseline_value=rates[LOCAL_ITERATOR],
               target=(">=", TUPLE_TARGET), note=note,
               extra={"python_peak_mib": python_peaks[TUPLE] / MIB}),
        Figure("sink", "Arrow elements (1024 rows), request(1)", rates[ARROW], "rows/s",
               baseline=TO_ARROW, baseline_value=rates[TO_ARROW],
               target=(">=", ARROW_TARGET), note=note),
        Figure("sink", "Arrow elements: peak Python-side memory (objects + Arrow pool)",
               python_peaks[ARROW] / MIB, "MiB", baseline=TO_ARROW,
               baseline_value=python_peaks[TO_ARROW] / MIB, target=("<=", MEMORY_TARGET),
               note="tracemalloc + pyarrow.total_allocated_bytes(), in this process"),
        Figure("sink", "Arrow elements: peak driver Python process RSS growth",
               fresh["arrow"]["rss"] / MIB, "MiB", baseline=TO_ARROW,
               baseline_value=fresh["toArrow"]["rss"] / MIB, target=("<=", MEMORY_TARGET),
               note="psutil, sampled every 2 ms, in a fresh process"),
        Figure("sink", "Arrow elements: peak driver JVM live heap growth",
               fresh["arrow"]["heap"] / MIB, "MiB", baseline=TO_ARROW,
               baseline_value=fresh["toArrow"]["heap"] / MIB,
               note="heap in use right after System.gc(), sampled about every 50 ms, in "
                    "a fresh process; no target: in local mode the driver JVM runs the "
                    "tasks too, and toArrow() writes each partition to Python as it "
                    "arrives, so neither holds the whole batch there",
               extra={"jvm_rss_mib": fresh["arrow"]["jvm_rss"] / MIB,
                      "baseline_jvm_rss_mib": fresh["toArrow"]["jvm_rss"] / MIB}),
    ]
    for figure in figures:
        verdict = "no target" if figure.target is None else (
            f"target {figure.target[0]} {figure.target[1]:g}: "
            f"{'met' if figure.met else 'NOT met'}")
        print(f"{figure.case}: {figure.ratio or 0:.2f} of {figure.baseline} ({verdict})")
    print(f"({time.monotonic() - began:.0f} s)")
    write(args.json, "sink", figures,
          series={"sink_rows_per_s": {label: [rate] for label, rate in rates.items()}})


if __name__ == "__main__":
    main()
