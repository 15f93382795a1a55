"""Rows/s of realistic records through ``spark.readStream.format("reactive")``, beside the
single-process ceiling and Spark's own simple Python source, in the same run.

Records have five columns (``id BIGINT, name STRING, value DOUBLE, ts TIMESTAMP, flag
BOOLEAN``; names of varying length) and come from a Python generator, as dicts or as
tuples. The reactive source reads them from a factory returning an ``IterablePublisher``
over the generator (shipped with ``read_stream``), ``maxRecordsPerTrigger`` records per
batch, ``trigger(availableNow=True)``, into Spark's ``noop`` sink; ``start()`` to
termination is timed. Beside it, in the same run:

(a) the generator alone, consumed in a loop;
(b) the generator and ``pyarrow.Table.from_pylist`` on each batch's worth of dicts: what one
    Python process does at best to turn such records into Arrow (the target: reactive at
    >= 0.6 of it); (a) and (b) best of two, after a small warm-up call;
(c) Spark's own ``SimpleDataSourceStreamReader`` returning the same tuples, a batch's worth
    per ``read``, ``availableNow``, ``noop`` (the target: reactive at >= 3x it);
(d) the alternative design of converting on the executors, as a prototype: a Python
    streaming source whose runner ships each batch's dicts pickled in two partitions and
    whose ``read()`` converts them with the source's ``RowConverter``;
(e) Spark taking the same records as ready Arrow (made once per worker, outside the timed
    batches' work) from a Python source: the ceiling of any Python source here.

While each Spark query runs, the peak resident memory of the source runner, the Python
driver, its JVM and the Python workers is sampled (``memory.py``) and reported beside
(c)'s. A small warm-up query of each source runs first. Each query's row count is checked.

Run from the repository root::

    .venv/bin/python benchmarks/source_records.py [--rows N] [--batch B] [--quick] [--json PATH]

Targets are printed, never enforced; exit status 1 means a query read the wrong number of
rows or failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import itertools
import pickle
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)

from memory import DRIVER_JVM, DRIVER_PYTHON, PYTHON_WORKERS, SOURCE_RUNNER, ProcessTreeMemory
from pyspark_reactive import local_session, read_stream
from reactive_streams import IterablePublisher, Publisher
from report import Figure, write

try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # Spark 4.0/4.1
    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

SCHEMA = "id BIGINT, name STRING, value DOUBLE, ts TIMESTAMP, flag BOOLEAN"
ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("value", pa.float64()),
                          ("ts", pa.timestamp("us", tz="UTC")), ("flag", pa.bool_())])
PYLIST_TARGET = 0.6
PARTITIONS = 2  # (d): one per core of local[2]
EXECUTORS = "(d) converting on the executors, dicts"
CEILING = "(e) Spark taking ready Arrow from a Python source"
SIMPLE_TARGET = 3.0
WARM_ROWS = 20_000
EPOCH = 1_700_000_000.0
UTC = dt.timezone.utc
# Suffixes that make names from 5 to about 40 characters long.
PADS = tuple("-" + "abcdefghij" * (k // 10) + "abcdefghij"[: k % 10] for k in range(32))


def dicts(start: int, stop: int) -> Iterator[dict[str, Any]]:
    """Records ``start`` .. ``stop - 1`` as dicts; record ``i`` is always the same."""
    for i in range(start, stop):
        yield {"id": i, "name": f"n{i}{PADS[i % 32]}", "value": i * 0.25,
               "ts": dt.datetime.fromtimestamp(EPOCH + i / 1000, UTC), "flag": i % 3 == 0}


def tuples(start: int, stop: int) -> Iterator[tuple[Any, ...]]:
    """The same records as tuples, in the schema's column order."""
    for i in range(start, stop):
        yield (i, f"n{i}{PADS[i % 32]}", i * 0.25,
               dt.datetime.fromtimestamp(EPOCH + i / 1000, UTC), i % 3 == 0)


GENERATORS: dict[str, Callable[[int, int], Iterator[Any]]] = {"dicts": dicts, "tuples": tuples}


def records_factory(kind: str, rows: int) -> Callable[[Mapping[str, str]], Publisher[Any]]:
    """The factory shipped to the source runner: a publisher over a fresh generator."""
    generate = GENERATORS[kind]
    return lambda options: IterablePublisher(lambda: generate(0, rows))


class SimpleRecordsReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's simple Python streaming reader: ``read`` returns a batch's tuples."""

    def __init__(self, rows: int, batch: int) -> None:
        self.rows, self.batch = rows, batch

    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def read(self, start: dict[str, int]) -> tuple[Iterator[tuple[Any, ...]], dict[str, int]]:
        low = start["offset"]
        high = min(self.rows, low + self.batch)
        # A list's iterator: Spark copies it (copy.copy), which a generator refuses.
        return iter(list(tuples(low, high))), {"offset": high}

    def readBetweenOffsets(self, start: dict[str, int],
                           end: dict[str, int]) -> Iterator[tuple[Any, ...]]:
        return iter(list(tuples(start["offset"], end["offset"])))

    def commit(self, end: dict[str, int]) -> None:
        pass


class SimpleRecords(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_simple_records"

    def schema(self) -> str:
        return SCHEMA

    def simpleStreamReader(self, schema: Any) -> SimpleRecordsReader:
        return SimpleRecordsReader(int(self.options["rows"]), int(self.options["batch"]))


class RawPartition(InputPartition):
    """(d): a batch's share of raw records, pickled in the runner for ``read()``."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class ExecutorConvertingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """(d) the design the issue asks to consider: the runner takes a batch's records as
    they come (dicts), ships them pickled, split over ``PARTITIONS`` partitions, and
    ``read()`` converts them on the executors with the source's own ``RowConverter``."""

    def __init__(self, rows: int, batch: int, schema: Any) -> None:
        self.rows, self.batch, self.spark_schema = rows, batch, schema
        self.next = 0

    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        low = self.next if start is None else start["offset"]
        self.next = min(self.rows, low + self.batch)
        return {"offset": self.next}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        records = list(dicts(start["offset"], end["offset"]))
        step = -(-len(records) // PARTITIONS)
        return [RawPartition(pickle.dumps(records[i:i + step], protocol=5))
                for i in range(0, len(records), step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark_reactive.source.rows import RowConverter

        assert isinstance(partition, RawPartition)
        batch, error = RowConverter(self.spark_schema).convert(
            pickle.loads(partition.payload), 0)
        if error is not None:
            raise error
        yield batch

    def commit(self, end: dict[str, int]) -> None:
        pass


class ExecutorConverting(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_executor_converting"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> ExecutorConvertingReader:
        return ExecutorConvertingReader(int(self.options["rows"]), int(self.options["batch"]),
                                        schema)


_MADE: dict[tuple[int, int], pa.RecordBatch] = {}


class ArrowCeilingReader(ExecutorConvertingReader):
    """(e) Spark's ceiling for these records from any Python source: ``read()`` yields
    the batch's records as Arrow made once per worker process (no generation, no
    conversion in the timed run), so what remains is Spark taking Arrow from Python."""

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        low, high = start["offset"], end["offset"]
        step = -(-(high - low) // PARTITIONS)
        return [RawPartition(pickle.dumps((i, min(high, i + step))))
                for i in range(low, high, step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RawPartition)
        low, high = pickle.loads(partition.payload)
        size = high - low
        if (low % self.batch, size) not in _MADE:  # the same records' shape, made once
            _MADE[(low % self.batch, size)] = pa.RecordBatch.from_pylist(
                list(dicts(low, high)), schema=ARROW_SCHEMA)
        yield _MADE[(low % self.batch, size)]


class ArrowCeiling(ExecutorConverting):
    @classmethod
    def name(cls) -> str:
        return "bench_arrow_ceiling"

    def streamReader(self, schema: Any) -> ArrowCeilingReader:
        return ArrowCeilingReader(int(self.options["rows"]), int(self.options["batch"]),
                                  schema)


def generation_alone(rows: int) -> float:
    gc.collect()
    began = time.perf_counter()
    count = 0
    for _ in dicts(0, rows):
        count += 1
    elapsed = time.perf_counter() - began
    assert count == rows
    return elapsed


def generation_from_pylist(rows: int, batch: int) -> float:
    gc.collect()
    began = time.perf_counter()
    records = dicts(0, rows)
    count = 0
    while chunk := list(itertools.islice(records, batch)):
        count += pa.Table.from_pylist(chunk, schema=ARROW_SCHEMA).num_rows
    elapsed = time.perf_counter() - began
    assert count == rows
    return elapsed


def timed_query(frame: DataFrame, rows: int) -> tuple[float, ProcessTreeMemory]:
    """Seconds from ``start()`` to the end of an availableNow query into ``noop``, and the
    process tree's memory meanwhile; exits if the query did not read exactly ``rows``."""
    with tempfile.TemporaryDirectory() as checkpoint, ProcessTreeMemory() as memory:
        began = time.perf_counter()
        query = (frame.writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - began
        read = sum(p["numInputRows"] for p in query.recentProgress)
        failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"the query failed: {failure}")
    if read != rows:
        raise RuntimeError(f"read {read} rows, expected {rows}")
    return elapsed, memory


def reactive_frame(spark: SparkSession, kind: str, rows: int, batch: int) -> DataFrame:
    if __name__ != "__main__":  # imported: the runner cannot import this module by name
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return read_stream(spark, records_factory(kind, rows), schema=SCHEMA,
                       maxRecordsPerTrigger=batch)


def source_frame(spark: SparkSession, source: type[DataSource], rows: int,
                 batch: int) -> DataFrame:
    """A stream of one of the baseline sources above, ``rows`` records, ``batch`` a batch."""
    spark.dataSource.register(source)
    return (spark.readStream.format(source.name()).option("rows", rows)
            .option("batch", batch).load())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="records per query")
    parser.add_argument("--batch", type=int, default=100_000,
                        help="records per micro-batch (maxRecordsPerTrigger)")
    parser.add_argument("--quick", action="store_true", help="300,000 records")
    parser.add_argument("--json", metavar="PATH", help="write the figures there (report.py)")
    args = parser.parse_args(argv)
    rows = 300_000 if args.quick else args.rows
    batch = min(args.batch, rows)
    print(f"pyspark {pyspark.__version__}, Python {platform.python_version()}, local[2]; "
          f"{rows:,} records of 5 columns, {batch:,} per batch, availableNow, noop sink",
          flush=True)

    generation_from_pylist(1000, 1000)  # first calls: pyarrow's lazy imports, time zones
    plain = {"(a) generation alone": min(generation_alone(rows) for _ in range(2)),
             "(b) generation + from_pylist": min(generation_from_pylist(rows, batch)
                                                 for _ in range(2))}
    for label, seconds in plain.items():
        print(f"  {label:40s} {rows / seconds:>12,.0f} rows/s  ({seconds:.2f} s)", flush=True)

    spark = local_session("bench-source-records")
    queries: dict[str, Callable[[int, int], DataFrame]] = {
        "reactive, dicts": lambda n, b: reactive_frame(spark, "dicts", n, b),
        "reactive, tuples": lambda n, b: reactive_frame(spark, "tuples", n, b),
        "(c) SimpleDataSourceStreamReader, tuples":
            lambda n, b: source_frame(spark, SimpleRecords, n, b),
        EXECUTORS: lambda n, b: source_frame(spark, ExecutorConverting, n, b),
        CEILING: lambda n, b: source_frame(spark, ArrowCeiling, n, b),
    }
    seconds: dict[str, float] = {}
    memory: dict[str, ProcessTreeMemory] = {}
    failures = []
    try:
        for label, frame in queries.items():
            try:
                if label != "reactive, tuples":  # which runs as warm as the dicts' query
                    warm = min(WARM_ROWS, rows)
                    timed_query(frame(warm, min(batch, warm)), warm)  # workers, imports
                seconds[label], memory[label] = timed_query(frame(rows, batch), rows)
            except Exception as error:  # report it; the other queries still run
                failures.append(f"{label}: {error}")
                print(f"  {label}: FAILED: {error}", flush=True)
                continue
            print(f"  {label:40s} {rows / seconds[label]:>12,.0f} rows/s  "
                  f"({seconds[label]:.2f} s; peak {memory[label].summary()})", flush=True)
    finally:
        spark.stop()

    figures = figures_of(rows, batch, plain, seconds, memory)
    for figure in figures:
        if figure.met is not None:
            print(f"  {figure.case} / {figure.baseline}: {figure.ratio:.2f} (target "
                  f"{figure.target[0]} {figure.target[1]:g}): "  # type: ignore[index]
                  f"{'met' if figure.met else 'NOT met'}")
    write(args.json, "source", figures)
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


def figures_of(rows: int, batch: int, plain: Mapping[str, float],
               seconds: Mapping[str, float],
               memory: Mapping[str, ProcessTreeMemory]) -> list[Figure]:
    note = (f"{rows:,} records (BIGINT, STRING, DOUBLE, TIMESTAMP, BOOLEAN) from a "
            f"generator, {batch:,} per batch, availableNow, noop")
    pylist = "(b) generation + from_pylist"
    simple = "(c) SimpleDataSourceStreamReader, tuples"
    figures = []
    for label in ("reactive, dicts", "reactive, tuples"):
        if label not in seconds:
            continue
        rate = rows / seconds[label]
        peaks = memory[label]
        extra = {f"{kind} peak MiB": round(peaks.peak(kind), 1)
                 for kind in (SOURCE_RUNNER, DRIVER_PYTHON, DRIVER_JVM, PYTHON_WORKERS)}
        extra["seconds"] = round(seconds[label], 2)
        figures.append(Figure("source", f"records, {label}", rate, "rows/s",
                              baseline=pylist, baseline_value=rows / plain[pylist],
                              target=(">=", PYLIST_TARGET), note=note,
                              extra=extra if label == "reactive, tuples" else {}))
        if simple in seconds:
            figures.append(Figure("source", f"records, {label}", rate, "rows/s",
                                  baseline=simple, baseline_value=rows / seconds[simple],
                                  target=(">=", SIMPLE_TARGET), note=note))
        if label == "reactive, dicts":
            figures.append(Figure("source", f"records, {label}", rate, "rows/s",
                                  baseline="(a) generation alone",
                                  baseline_value=rows / plain["(a) generation alone"],
                                  note="the generator alone is the ceiling of any source"))
    if CEILING in seconds and "reactive, dicts" in seconds:
        figures.append(Figure(
            "source", "records, reactive, dicts", rows / seconds["reactive, dicts"],
            "rows/s", baseline=CEILING, baseline_value=rows / seconds[CEILING],
            note="Spark taking the same records as ready Arrow from a Python source: "
                 "the ceiling of any Python source on this machine"))
    if EXECUTORS in seconds and "reactive, dicts" in seconds:
        figures.append(Figure(
            "source", "records, reactive, dicts", rows / seconds["reactive, dicts"],
            "rows/s", baseline=EXECUTORS, baseline_value=rows / seconds[EXECUTORS],
            note="converting in the runner (the source) beside a prototype of converting "
                 "on the executors"))
    dicts_memory = memory.get("reactive, dicts")
    if dicts_memory is not None:
        for kind in (SOURCE_RUNNER, DRIVER_PYTHON, DRIVER_JVM, PYTHON_WORKERS):
            figures.append(Figure(
                "source", f"peak memory, {kind}, records as dicts", dicts_memory.peak(kind),
                "MiB",
                **({"baseline": simple, "baseline_value": memory[simple].peak(kind)}
                   if simple in memory else {}),
                note="RSS summed over the role's processes, sampled every 50 ms"))
    return figures


if __name__ == "__main__":
    sys.exit(main())
