"""Rows/s that ForeachBatchPublisher delivers from one micro-batch, beside Spark's own
ways of bringing a DataFrame to the driver, in the same run.

The batch is ``spark.range(--rows, numPartitions=8)`` with a second column, handed to the
publisher exactly as ``foreachBatch`` would (``publisher(batch, batch_id)``). A subscriber
requests 1024 at a time and counts. The baselines iterate the same DataFrame with
``toLocalIterator()`` (one partition at a time, like the publisher) and ``toArrow()``
(fast, but the whole batch at once). Each case runs ``--repeat`` times after a warm-up;
the best counts. Beside each, the most memory the driver process held for it (Python
objects and Arrow buffers, measured in a separate, untimed run), against the batch's
size as Arrow.

Run from the repository root::

    .venv/bin/python benchmarks/sink_throughput.py [--rows N] [--repeat K]

The acceptance target (at least 2x ``toLocalIterator()``) is printed, never enforced.
"""

from __future__ import annotations

import argparse
import platform
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyspark
from pyspark.sql import DataFrame

from pyspark_reactive import ForeachBatchPublisher, local_session
from reactive_streams import Subscriber, Subscription

TARGET_RATIO = 2.0


class Count(Subscriber[Any]):
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


def publisher_case(element: str) -> Callable[[DataFrame], int]:
    def run(batch: DataFrame) -> int:
        publisher = ForeachBatchPublisher(element=element)
        subscriber = Count(1024)
        publisher.subscribe(subscriber)
        publisher(batch, 0)
        return subscriber.count
    return run


def local_iterator(batch: DataFrame) -> int:
    return sum(1 for _ in batch.toLocalIterator())


def to_arrow(batch: DataFrame) -> int:
    return int(batch.toArrow().num_rows)


def peak_memory(case: Callable[[DataFrame], int], batch: DataFrame) -> int:
    """Peak bytes the driver process held during ``case``: Python objects (tracemalloc)
    plus Arrow buffers (pyarrow's pool, sampled every 2 ms). Untimed: tracing is slow."""
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
        python_peak = tracemalloc.get_traced_memory()[1] - base_python
        tracemalloc.stop()
    return python_peak + max(samples) - samples[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spark = local_session("sink-throughput")
    batch = spark.range(args.rows, numPartitions=8).selectExpr("id", "id * 2 AS twice")
    arrow_bytes = batch.toArrow().nbytes
    cases: dict[str, Callable[[DataFrame], int]] = {
        "toLocalIterator()": local_iterator,
        "toArrow()": to_arrow,
        "ForeachBatchPublisher, Row elements, request(1024)": publisher_case("row"),
        "ForeachBatchPublisher, tuple elements, request(1024)": publisher_case("tuple"),
    }
    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"{args.rows:,} rows (id, twice) in 8 partitions = {arrow_bytes / 2**20:.0f} MiB "
          f"as Arrow; best of {args.repeat} after a warm-up")
    rates: dict[str, float] = {}
    for label, case in cases.items():
        case(batch)  # warm-up
        best = float("inf")
        for _ in range(args.repeat):
            began = time.perf_counter()
            count = case(batch)
            best = min(best, time.perf_counter() - began)
            if count != args.rows:
                sys.exit(f"{label}: {count} rows, expected {args.rows}")
        rates[label] = args.rows / best
        peak = peak_memory(case, batch)
        print(f"  {label:55s} {rates[label]:>11,.0f} rows/s   driver peak "
              f"{peak / 2**20:5.0f} MiB", flush=True)
    baseline = rates["toLocalIterator()"]
    for label in cases:
        if label.startswith("ForeachBatchPublisher"):
            ratio = rates[label] / baseline
            print(f"{label} / toLocalIterator() = {ratio:.2f} (target >= {TARGET_RATIO:.1f}: "
                  f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})")
    spark.stop()


if __name__ == "__main__":
    main()
