"""Rows/s through ``spark.readStream.format("reactive")``, beside a bare Python streaming
source in the same run.

Both queries read ``--batches`` micro-batches of ``--rows`` integers into Spark's ``noop``
sink with ``trigger(availableNow=True)`` on ``local[2]``, and the time from ``start()`` to
termination counts. The reactive source reads the built-in ``range`` publisher (a
synchronous ``RangePublisher``) with ``maxRecordsPerTrigger = --rows``; the baseline is a
Python ``DataSourceStreamReader`` with no publisher at all whose ``read()`` yields the same
integers as Arrow, with as many partitions per batch as the reactive source uses. So the
ratio measures what the publisher, the subscription, the row conversion and shipping the
rows inside the partitions cost. A third query is the reactive one with a write-ahead log
(``walLocation`` in a fresh temporary directory each run, default ``walSyncMs``): rows are
then converted and synced to disk in group commits as they arrive, and the second ratio
measures what that costs. Each query runs ``--repeat`` times after one warm-up each; the
best run counts.

Run from the repository root::

    .venv/bin/python benchmarks/source_throughput.py [--rows N] [--batches B] [--repeat K]

The targets (reactive at >= 50% of the bare source; with the log at >= 90% of without)
are printed, never enforced.
On Spark 4.0/4.1, availableNow reads a Python source's latest offset once, so there both
queries run a single batch.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyspark
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pyspark_reactive import local_session
from pyspark_reactive.source import PARTITION_BYTES

TARGET_RATIO = 0.50
WAL_TARGET_RATIO = 0.90

try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # Spark 4.0/4.1
    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


class _Slice(InputPartition):
    def __init__(self, low: int, high: int) -> None:
        super().__init__(low)
        self.low, self.high = low, high


class BareReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets count rows; every batch is ``rows`` more; read() makes them as Arrow."""

    def __init__(self, rows: int, total: int) -> None:
        self.rows, self.total = rows, total
        self.cursor = 0

    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        low = self.cursor if start is None else start["offset"]
        self.cursor = min(self.total, low + self.rows)
        return {"offset": self.cursor}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        low, high = start["offset"], end["offset"]
        if high <= low:
            return []
        # As many partitions as the reactive source makes for the same rows.
        count = max(1, math.ceil((high - low) * 8 / PARTITION_BYTES))
        size = math.ceil((high - low) / count)
        return [_Slice(a, min(high, a + size)) for a in range(low, high, size)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Slice)
        values = pa.array(range(partition.low, partition.high), type=pa.int64())
        yield pa.RecordBatch.from_arrays([values], names=["value"])


class BareSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bare_range"

    def schema(self) -> str:
        return "value BIGINT"

    def streamReader(self, schema: Any) -> BareReader:
        rows = int(self.options["rows"])
        return BareReader(rows, rows * int(self.options["batches"]))


def run(spark: SparkSession, fmt: str, options: dict[str, str], expected: int) -> float:
    """Seconds from start() to the end of an availableNow query into the noop sink."""
    with tempfile.TemporaryDirectory() as checkpoint:
        if "walLocation" in options:  # a log belongs to one checkpoint: a new one each run
            options = {**options, "walLocation": f"{checkpoint}/wal"}
        began = time.perf_counter()
        query = (spark.readStream.format(fmt).options(**options).load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - began
        rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != expected:
        sys.exit(f"{fmt}: read {rows} rows, expected {expected}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=10, help="micro-batches per query")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per query")
    args = parser.parse_args()

    spark = local_session("source-throughput")
    spark.dataSource.register(BareSource)
    admission = tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 2)
    batches = args.batches if admission else 1
    total = args.rows * batches
    cases = {
        "bare Python source (Arrow from read)": (
            "bare_range", {"rows": str(args.rows), "batches": str(batches)}),
        "reactive, built-in range publisher": (
            "reactive", {"publisher": "range", "count": str(total),
                         "maxRecordsPerTrigger": str(args.rows)}),
        "reactive, range, with walLocation": (
            "reactive", {"publisher": "range", "count": str(total),
                         "maxRecordsPerTrigger": str(args.rows), "walLocation": "(per run)"}),
    }
    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"{batches} batches of {args.rows:,} rows, best of {args.repeat} after a warm-up")
    best: dict[str, float] = {}
    for label, (fmt, options) in cases.items():
        run(spark, fmt, options, total)  # warm-up: JVM, Python workers, imports
        times = [run(spark, fmt, options, total) for _ in range(args.repeat)]
        best[label] = min(times)
        print(f"  {label:40s} {total / best[label]:>12,.0f} rows/s   "
              f"(runs: {', '.join(f'{t:.2f}s' for t in times)})", flush=True)
    baseline, reactive, logged = best.values()
    ratio = baseline / reactive
    print(f"reactive / bare = {ratio:.2f}  (target >= {TARGET_RATIO:.2f}: "
          f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})")
    wal_ratio = reactive / logged
    print(f"with walLocation / without = {wal_ratio:.2f}  (target >= {WAL_TARGET_RATIO:.2f}: "
          f"{'met' if wal_ratio >= WAL_TARGET_RATIO else 'NOT met'})")
    spark.stop()


if __name__ == "__main__":
    main()
