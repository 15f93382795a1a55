"""What digesting a staged batch as it is written costs the write, against the same write
without it (the baseline), in the same run.

Under Spark Connect, ``publish()`` stages each micro-batch as a table whose rows pass
through ``DigestAsWritten`` (a ``mapInArrow`` step of the write itself) and an
``observe()`` that brings each partition's count and digest back. This script times, in
one local session, three writes of the same cached batch to a table partitioned by Spark
partition, as the stager partitions it:

* plain: ``saveAsTable`` of the batch (what the benchmark's ceiling writes);
* pass: the same rows through a ``mapInArrow`` function that yields its batches unchanged
  (the least any digest computed in Python during the write costs: the rows' trip to a
  Python worker and back);
* digest: the stager's own write (``DigestAsWritten``, the observation, the row numbers).

Each round runs the three in turn (after ``--warmup`` rounds not counted); the medians
are printed, then pass / plain and digest / plain. ``--rows`` rows (``id`` and a string
column) in ``--partitions`` partitions.

Run from the repository root::

    .venv/bin/python benchmarks/staging_write_cost.py [--rows 250000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa


def _unchanged(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    if min(args.rows, args.partitions, args.rounds) < 1 or args.warmup < 0:
        parser.error("--rows, --partitions and --rounds take a number >= 1, --warmup >= 0")

    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    from pyspark_reactive.session import local_session
    from pyspark_reactive.sink.digest import DIGEST, SEQ, DigestAsWritten

    os.chdir(tempfile.mkdtemp(prefix="staging-write-cost-"))  # its spark-warehouse
    spark = local_session(app_name="staging-write-cost")
    part = "__reactive_partition"
    batch = (spark.range(args.rows, numPartitions=args.partitions)
             .selectExpr("id AS c0", "concat('row ', id) AS c1")
             .withColumn(part, F.spark_partition_id()).cache())
    batch.count()
    tables = iter(range(10**6))

    def plain() -> None:
        batch.write.partitionBy(part).saveAsTable(f"t{next(tables)}")

    def passed() -> None:
        (batch.mapInArrow(_unchanged, batch.schema).write.partitionBy(part)
         .saveAsTable(f"t{next(tables)}"))

    def digest() -> None:
        names = ["c0", "c1"]
        out = batch.mapInArrow(DigestAsWritten(len(names)), StructType([
            *batch.schema.fields[:2], StructField(part, IntegerType(), False),
            StructField(SEQ, LongType(), False), StructField(DIGEST, StringType())]))
        seen = Observation(f"o{next(tables)}")
        observed = out.observe(seen, F.count(F.lit(1)).alias("rows"),
                               F.concat_ws(";", F.collect_list(DIGEST)).alias("digests"))
        (observed.select(*names, SEQ, part).write.partitionBy(part)
         .saveAsTable(f"t{next(tables)}"))
        if seen.get["rows"] != args.rows:
            sys.exit(f"the observation counted {seen.get['rows']} rows, not {args.rows}")

    cases: dict[str, Callable[[], None]] = {"plain": plain, "pass": passed, "digest": digest}
    times: dict[str, list[float]] = {name: [] for name in cases}
    total = args.warmup + args.rounds
    for round_ in range(total):
        for name, case in cases.items():
            start = time.perf_counter()
            case()
            if round_ >= args.warmup:
                times[name].append(time.perf_counter() - start)
        print(f"round {round_ + 1} of {total}" + (" (warm-up)" if round_ < args.warmup else ""),
              file=sys.stderr, flush=True)
    print(f"a staged write of {args.rows:,} rows in {args.partitions} partitions, "
          f"median of {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")
    medians: dict[str, Any] = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"  {name:<7} {value * 1000:7.0f} ms")
    for name in ("pass", "digest"):
        print(f"{name} / plain = {medians[name] / medians['plain']:.2f} (time)")
    spark.stop()


if __name__ == "__main__":
    main()
