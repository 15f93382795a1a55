"""Seconds to convert five-column records to Arrow with ``RowConverter`` (Spark's semantics),
beside plain pyarrow on the very same elements in the same run.

The records are what a publisher of events would signal: ``id BIGINT`` (a counter),
``name STRING`` (short words of 3 to 24 letters), ``price DOUBLE``, ``at TIMESTAMP``
(``datetime`` values a millisecond apart: a third naive, which Spark reads as local time
of the process, a third aware in UTC, a third aware in Europe/Berlin) and ``ok BOOLEAN``,
with a few ``None`` in every column but ``id``. They are made once, as dicts; the tuples
and ``Row``s are the same values in column order.

| case | baseline |
| --- | --- |
| dicts | ``pyarrow.RecordBatch.from_pylist(dicts, schema=arrow_schema)`` |
| tuples | ``zip(*tuples)`` and ``pyarrow.array(column, type)`` per column, or pyarrow's own
  tuple-to-struct conversion if faster in this run (the best plain way, named in the note) |
| Rows (made with keywords) | the same as tuples, on the Rows (a ``Row`` is a tuple) |
| dicts through ``RowConverter(fast=False)`` | ``from_pylist``, once: the value-by-value path |

The baselines do not do what Spark does (a naive ``datetime`` is UTC wall time to pyarrow
but local time to Spark; pyarrow takes 5.0 for a BIGINT and bytes for a STRING): the
ratio is what Spark's semantics cost. Each case runs ``--repeat`` times with the garbage
collector on, as in the source's runner, after one warm-up on a small slice; the best run
counts. Times are CPU seconds of this process (``time.process_time``; all of it is one
thread's work), so that other load on the machine disturbs the ratios less; the best
wall-clock times are in the JSON figures' ``extra``.

Run from the repository root::

    .venv/bin/python benchmarks/rows_throughput.py [--rows N] [--repeat K] [--json PATH]

The target (dicts in at most 1.3 times ``from_pylist``'s time) is printed, never enforced.
A default run (1M records) takes about 40 s.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import random
import sys
import time
import zoneinfo
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyspark
from pyspark.sql import Row
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_reactive.source.rows import RowConverter, arrow_schema
from report import Figure, write  # this folder is on sys.path when run as a script

SCHEMA = StructType([
    StructField("id", LongType()), StructField("name", StringType()),
    StructField("price", DoubleType()), StructField("at", TimestampType()),
    StructField("ok", BooleanType()),
])
TARGET = ("<=", 1.3)


def five_column_records(count: int, seed: int = 1) -> list[dict[str, Any]]:
    """``count`` event-like dicts of :data:`SCHEMA`; the same ones for the same seed."""
    rnd = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rnd.choice(letters) for _ in range(rnd.randint(3, 24)))
             for _ in range(5000)]
    start = datetime.datetime(2026, 11, 23, 4, 0)
    zones = [None, datetime.timezone.utc, zoneinfo.ZoneInfo("Europe/Berlin")]
    records = []
    for i in range(count):
        at = start + datetime.timedelta(milliseconds=i)
        records.append({
            "id": i,
            "name": None if i % 1000 == 7 else words[rnd.randrange(5000)],
            "price": None if i % 997 == 3 else round(rnd.uniform(0, 1000), 2),
            "at": None if i % 1009 == 5 else at.replace(tzinfo=zones[i % 3]),
            "ok": None if i % 1013 == 11 else rnd.random() < 0.5,
        })
    return records


WALL: dict[str, float] = {}  # the best wall-clock seconds of each timing, by its label


def best_of(label: str, repeat: int, run: Callable[[], object]) -> float:
    """The least CPU time of ``repeat`` runs, in seconds (the least wall time into WALL)."""
    cpu, wall = [], []
    for _ in range(repeat):
        gc.collect()
        started, started_cpu = time.perf_counter(), time.process_time()
        run()
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    WALL[label] = min(wall)
    return min(cpu)


def columns_by_zip(rows: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.RecordBatch:
    arrays = [pa.array(values, type=field.type) for values, field in zip(
        zip(*rows, strict=True), schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def struct_conversion(rows: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.RecordBatch:
    arrays = pa.array(rows, type=pa.struct(list(schema))).flatten()
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def convert(converter: RowConverter, elements: Sequence[Any]) -> pa.RecordBatch:
    batch, error = converter.convert(elements, 0)
    if error is not None or batch.num_rows != len(elements):
        raise SystemExit(f"conversion failed: {error}")
    return batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="write the figures there")
    args = parser.parse_args(argv)
    rows = args.rows

    schema = arrow_schema(SCHEMA)
    converter = RowConverter(SCHEMA)
    began = time.perf_counter()
    dicts = five_column_records(rows)
    tuples = [tuple(record.values()) for record in dicts]
    spark_rows = [Row(**record) for record in dicts]
    made = time.perf_counter() - began
    # Warm-up: pyarrow imports pandas the first time it meets a datetime.
    for sample in (dicts[:1000], tuples[:1000], spark_rows[:1000]):
        convert(converter, sample)
    pa.RecordBatch.from_pylist(dicts[:1000], schema=schema)

    def tuple_baseline(case: str, elements: Sequence[Any]) -> tuple[str, float]:
        zipped = "zip(*rows) + pa.array per column"
        struct = "pa.array(rows, struct type)"
        by_zip = best_of(f"{case}: {zipped}", args.repeat,
                         lambda: columns_by_zip(elements, schema))
        by_struct = best_of(f"{case}: {struct}", args.repeat,
                            lambda: struct_conversion(elements, schema))
        return (zipped, by_zip) if by_zip <= by_struct else (struct, by_struct)

    cases: list[tuple[str, float, str, float]] = []
    pylist = "RecordBatch.from_pylist"
    baseline = best_of(f"dicts: {pylist}", args.repeat,
                       lambda: pa.RecordBatch.from_pylist(dicts, schema=schema))
    cases.append(("dicts", best_of("dicts", args.repeat, lambda: convert(converter, dicts)),
                  pylist, baseline))
    name, tuple_time = tuple_baseline("tuples", tuples)
    cases.append(("tuples", best_of("tuples", args.repeat, lambda: convert(converter, tuples)),
                  name, tuple_time))
    name, row_time = tuple_baseline("Rows", spark_rows)
    cases.append(("Rows", best_of("Rows", args.repeat, lambda: convert(converter, spark_rows)),
                  name, row_time))
    reference = RowConverter(SCHEMA, fast=False)
    cases.append(("dicts, fast=False", best_of("dicts, fast=False", 1,
                                               lambda: convert(reference, dicts)),
                  pylist, baseline))

    print(f"RowConverter vs plain pyarrow, {rows:,} five-column records, best of "
          f"{args.repeat}; Python {platform.python_version()}, pyspark {pyspark.__version__}, "
          f"pyarrow {pa.__version__}, TZ={os.environ.get('TZ', '(unset)')} "
          f"({time.strftime('%Z')}), load {os.getloadavg()[0]:.1f}")
    print(f"making the records: {made:.1f} s")
    print("CPU seconds, best run (wall-clock in the JSON figures)")
    print(f"{'case':<20} {'seconds':>8} {'rows/s':>11}  {'baseline':<34} {'seconds':>8} "
          f"{'ratio':>6}  target")
    figures = []
    for case, seconds, base_name, base_seconds in cases:
        target = TARGET if case == "dicts" else None
        figure = Figure(
            "rows", f"RowConverter.convert, {case}", seconds, "s", baseline=base_name,
            baseline_value=base_seconds, target=target,
            note=f"CPU seconds of {rows:,} records of id BIGINT, name STRING, price DOUBLE, "
                 f"at TIMESTAMP, ok BOOLEAN; {rows / seconds:,.0f} rows/s",
            extra={"rows": rows, "rows_per_s": rows / seconds,
                   "baseline_rows_per_s": rows / base_seconds,
                   "wall_s": WALL[case], "baseline_wall_s": WALL[f"{case.split(',')[0]}: "
                                                                 f"{base_name}"],
                   "load_average": os.getloadavg()[0]})
        figures.append(figure)
        ratio = figure.ratio or 0.0
        verdict = "" if target is None else (
            f"{target[0]} {target[1]}: {'met' if figure.met else 'NOT met'}")
        print(f"{case:<20} {seconds:8.3f} {rows / seconds:11,.0f}  {base_name:<34} "
              f"{base_seconds:8.3f} {ratio:6.2f}  {verdict}")
    write(args.json, "rows", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
