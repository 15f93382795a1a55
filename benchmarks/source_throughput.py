"""Rows/s through ``spark.readStream.format("reactive")``, beside a bare Python streaming
source in the same run: integers, and RecordBatch elements.

Every query reads into Spark's ``noop`` sink with ``trigger(availableNow=True)`` on
``local[2]``, and the time from ``start()`` to termination counts.

Integers: ``--batches`` micro-batches of ``--rows`` integers. The reactive source reads the
built-in ``range`` publisher (a synchronous ``RangePublisher``) with
``maxRecordsPerTrigger = --rows``; the baseline is a Python ``DataSourceStreamReader`` with
no publisher at all whose ``read()`` yields the same integers as Arrow, with as many
partitions per batch as the reactive source uses. So the ratio measures what the
publisher, the subscription, the row conversion and shipping the rows inside the
partitions cost. A third query is the reactive one with a write-ahead log (``walLocation``
in a fresh temporary directory each run, default ``walSyncMs``): rows are then converted
and synced to disk in group commits as they arrive, and the second ratio measures what
that costs.

RecordBatch elements: ``--arrow-rows`` rows of four columns (``id BIGINT, value DOUBLE,
name STRING, ts TIMESTAMP``) in ``pyarrow.RecordBatch`` es of ``--arrow-batch`` rows,
made by the same function on both sides. The reactive source reads them from an
``IterablePublisher`` declared with ``arrow_batches`` (``read_stream``),
``maxRecordsPerTrigger = --rows``; the baseline is a bare Python source whose ``read()``
makes and yields the same RecordBatches (each partition's rows), as many partitions per
batch as the reactive source uses. The ratio measures what the Arrow path costs: the
subscription, conforming each batch to the schema, and shipping the rows inside the
partitions. The source runner's peak memory is reported beside the figure.

Each source runs once small as a warm-up, then each query ``--repeat`` times, the queries
taking turns; the best run counts. ``--quick`` runs a fifth of the rows. The default run
took 109 s on 2 cores under a load average of 7 to 10 (other benchmarks running).

Run from the repository root::

    .venv/bin/python benchmarks/source_throughput.py [--rows N] [--batches B]
        [--arrow-rows N] [--arrow-batch N] [--repeat K] [--quick] [--json PATH]

The targets (reactive at >= 50% of the bare source; with the log at >= 90% of without;
RecordBatch elements at >= 95% of the bare source yielding them) are printed, never
enforced; exit status 1 means a query read the wrong number of rows.
On Spark 4.0/4.1, availableNow reads a Python source's latest offset once, so there every
query runs a single batch.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from memory import SOURCE_RUNNER, ProcessTreeMemory
from pyspark_reactive import local_session, read_stream
from pyspark_reactive.source.arrow_elements import arrow_batches
from pyspark_reactive.source.partitions import PARTITION_BYTES
from pyspark_reactive.source.rows import arrow_schema
from reactive_streams import IterablePublisher, Publisher
from report import Figure, write
from source_records import timed_query

TARGET_RATIO = 0.50
WAL_TARGET_RATIO = 0.90
ARROW_TARGET_RATIO = 0.95
WARM_ROWS = 20_000

ARROW_DDL = "id BIGINT, value DOUBLE, name STRING, ts TIMESTAMP"

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
    """Offsets count rows; every batch is ``rows`` more; read() makes them as Arrow.

    ``row_bytes`` sizes the partitions as the reactive source sizes its own (1 MiB each).
    """

    def __init__(self, rows: int, total: int, row_bytes: int = 8) -> None:
        self.rows, self.total, self.row_bytes = rows, total, row_bytes
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
        count = max(1, math.ceil((high - low) * self.row_bytes / PARTITION_BYTES))
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


# -- RecordBatch elements -------------------------------------------------------------------

def make_batch(first: int, count: int, schema: pa.Schema) -> pa.RecordBatch:
    """Rows ``first .. first + count - 1`` of the RecordBatch scenario, column by column."""
    ids = pa.array(np.arange(first, first + count, dtype=np.int64))
    return pa.RecordBatch.from_arrays([
        ids,
        pc.multiply(ids, 0.25),
        pc.binary_join_element_wise("name-", pc.cast(ids, pa.string()), ""),
        pc.cast(pc.multiply(ids, 1_000_000), pa.timestamp("us", tz="UTC")),
    ], schema=schema)


def batches_of(low: int, high: int, size: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The scenario's RecordBatches (each ``size`` rows, aligned on multiples of it) that
    hold rows ``low .. high - 1``, cut to that range."""
    for first in range(low - low % size, high, size):
        batch = make_batch(first, min(size, high - first), schema)
        begin = max(low, first) - first
        yield batch.slice(begin, min(high, first + batch.num_rows) - first - begin)


class BareArrowReader(BareReader):
    """:class:`BareReader` whose ``read()`` makes and yields the scenario's RecordBatches."""

    def __init__(self, rows: int, total: int, size: int, schema: pa.Schema) -> None:
        row_bytes = max(1, math.ceil(make_batch(0, size, schema).nbytes / size))
        super().__init__(rows, total, row_bytes)
        self.size, self.arrow_schema = size, schema

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Slice)
        yield from batches_of(partition.low, partition.high, self.size, self.arrow_schema)


class BareArrowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bare_arrow"

    def schema(self) -> str:
        return ARROW_DDL

    def streamReader(self, schema: StructType) -> BareArrowReader:
        return BareArrowReader(int(self.options["rows"]), int(self.options["total"]),
                               int(self.options["size"]), arrow_schema(schema))


def arrow_factory(total: int, size: int) -> Callable[[Any], Publisher[pa.RecordBatch]]:
    """A factory for ``read_stream``: ``total`` rows in RecordBatches of ``size``."""

    def factory(options: Any) -> Publisher[pa.RecordBatch]:
        schema = arrow_schema(options.schema)
        return arrow_batches(IterablePublisher(lambda: batches_of(0, total, size, schema)))

    return factory


# -- timing -----------------------------------------------------------------------------------

# A query's DataFrame for a number of rows, given a fresh directory of the run's own.
Frame = Callable[[int, str], DataFrame]


def run(frame: Frame, rows: int) -> tuple[float, ProcessTreeMemory]:
    """Seconds from start() to the end of an availableNow query of ``rows`` rows into the
    noop sink, and the process tree's memory meanwhile (see ``source_records``)."""
    with tempfile.TemporaryDirectory() as scratch:
        return timed_query(frame(rows, scratch), rows)


def reactive_arrow(spark: SparkSession, total: int, size: int, per_batch: int) -> DataFrame:
    if __name__ != "__main__":  # imported: the runner cannot import this module by name
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return read_stream(spark, arrow_factory(total, size), schema=ARROW_DDL,
                       maxRecordsPerTrigger=per_batch)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=250_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=4,
                        help="micro-batches per integer query")
    parser.add_argument("--arrow-rows", type=int, default=1_000_000,
                        help="rows per RecordBatch query")
    parser.add_argument("--arrow-batch", type=int, default=10_000,
                        help="rows per RecordBatch element")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs per query")
    parser.add_argument("--quick", action="store_true", help="a fifth of the rows")
    parser.add_argument("--json", metavar="PATH", help="write the figures there (report.py)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.arrow_rows = args.rows // 5, args.arrow_rows // 5

    spark = local_session("source-throughput")
    spark.dataSource.register(BareSource)
    spark.dataSource.register(BareArrowSource)
    admission = tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 2)
    batches = args.batches if admission else 1
    total = args.rows * batches
    arrow_total = args.arrow_rows if admission else min(args.arrow_rows, args.rows)
    size = args.arrow_batch

    def source(fmt: str, **options: Any) -> DataFrame:
        return (spark.readStream.format(fmt)
                .options(**{k: str(v) for k, v in options.items()}).load())

    def per_batch(rows: int) -> int:
        return min(args.rows, rows)

    cases: dict[str, tuple[Frame, int]] = {
        "bare Python source (Arrow from read)": (
            lambda rows, _: source("bare_range", rows=per_batch(rows),
                                   batches=rows // per_batch(rows)), total),
        "reactive, built-in range publisher": (
            lambda rows, _: source("reactive", publisher="range", count=rows,
                                   maxRecordsPerTrigger=per_batch(rows)), total),
        "reactive, range, with walLocation": (  # a log belongs to one checkpoint: one each
            lambda rows, scratch: source("reactive", publisher="range", count=rows,
                                         maxRecordsPerTrigger=per_batch(rows),
                                         walLocation=f"{scratch}/wal"), total),
        "bare source yielding RecordBatches": (
            lambda rows, _: source("bare_arrow", rows=per_batch(rows), total=rows, size=size),
            arrow_total),
        "reactive, RecordBatch elements": (
            lambda rows, _: reactive_arrow(spark, rows, size, per_batch(rows)), arrow_total),
    }
    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"integers: {batches} batches of {args.rows:,} rows; RecordBatch elements: "
          f"{arrow_total:,} rows of 4 columns in batches of {size:,}, {args.rows:,} per "
          f"micro-batch; best of {args.repeat} after a warm-up", flush=True)

    try:
        for label, (frame, rows) in cases.items():
            if "walLocation" not in label:  # the same source as the case before it
                run(frame, min(WARM_ROWS, rows))  # workers, imports
        runs: dict[str, list[float]] = {label: [] for label in cases}
        runner_peak: dict[str, float] = {}
        for _ in range(args.repeat):  # taking turns: a slow spell of the machine hits all
            for label, (frame, rows) in cases.items():
                seconds, memory = run(frame, rows)
                runs[label].append(seconds)
                runner_peak[label] = max(runner_peak.get(label, 0.0),
                                         memory.peak(SOURCE_RUNNER))
    finally:
        spark.stop()

    best = {label: min(times) for label, times in runs.items()}
    for label, (_, rows) in cases.items():
        print(f"  {label:40s} {rows / best[label]:>12,.0f} rows/s   "
              f"(runs: {', '.join(f'{t:.2f}s' for t in runs[label])})", flush=True)
    figures = figures_of(cases, best, runner_peak, args.rows, size)
    for figure in figures:
        assert figure.target is not None and figure.ratio is not None
        print(f"{figure.case} / {figure.baseline} = {figure.ratio:.2f}  (target "
              f"{figure.target[0]} {figure.target[1]:.2f}: "
              f"{'met' if figure.met else 'NOT met'})")
    write(args.json, "source", figures)
    return 0


def figures_of(cases: dict[str, tuple[Frame, int]], best: dict[str, float],
               runner_peak: dict[str, float], per_batch: int, size: int) -> list[Figure]:
    def rate(label: str) -> float:
        return cases[label][1] / best[label]

    bare, reactive, logged, bare_arrow, arrow = cases
    integers = (f"{cases[bare][1]:,} BIGINTs, {per_batch:,} per micro-batch, availableNow, "
                "noop")
    return [
        Figure("source", "integers, reactive (range publisher)", rate(reactive), "rows/s",
               baseline=bare, baseline_value=rate(bare), target=(">=", TARGET_RATIO),
               note=integers),
        Figure("source", "integers, reactive with walLocation", rate(logged), "rows/s",
               baseline="reactive without walLocation", baseline_value=rate(reactive),
               target=(">=", WAL_TARGET_RATIO), note=integers),
        Figure("source", arrow, rate(arrow), "rows/s", baseline=bare_arrow,
               baseline_value=rate(bare_arrow), target=(">=", ARROW_TARGET_RATIO),
               note=(f"{cases[arrow][1]:,} rows ({ARROW_DDL}) in RecordBatches of {size:,}, "
                     f"{per_batch:,} per micro-batch, availableNow, noop"),
               extra={f"{SOURCE_RUNNER} peak MiB": round(runner_peak[arrow], 1),
                      f"bare: {SOURCE_RUNNER} peak MiB": round(runner_peak[bare_arrow], 1)}),
    ]


if __name__ == "__main__":
    sys.exit(main())
