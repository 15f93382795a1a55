"""The reactive source and the foreach writer used from a Spark Connect client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from spark_publishers import Recording
from streaming import ADMISSION_CONTROL, wait_input_rows

from pyspark_reactive import SubscriberForeachWriter, read_stream
from reactive_streams import RangePublisher, Subscriber, SyncSubscriber


def run_to_end(df: Any, tmp_path: Path, name: str, rows: int) -> list[Any]:
    """Run ``df`` into parquet until its publisher's ``rows`` rows are in; return them.

    With admission control the query runs with ``availableNow`` and must end by itself.
    Without it (Spark 4.0/4.1) Spark would run ``availableNow`` as one micro-batch
    (test_available_now_lines.py checks that): the query runs with the default trigger
    and is stopped once it has read ``rows`` rows, in as many batches."""
    out = tmp_path / name
    writer = (df.writeStream.format("parquet").option("path", str(out))
              .option("checkpointLocation", str(tmp_path / f"{name}-checkpoint")))
    if ADMISSION_CONTROL:
        query = writer.trigger(availableNow=True).start()
        assert query.awaitTermination(180), "the availableNow query did not end"
    else:
        query = writer.start()
        wait_input_rows(query, rows)
        query.stop()
    assert query.exception() is None
    return list(df.sparkSession.read.parquet(str(out)).collect())


@pytest.mark.spark_lines
def test_range_by_its_name(spark: SparkSession, tmp_path: Path) -> None:
    df = (spark.readStream.format("reactive").option("publisher", "range")
          .option("count", 2500).option("maxRecordsPerTrigger", 1000).load())
    rows = run_to_end(df, tmp_path, "range", 2500)
    assert sorted(r.value for r in rows) == list(range(2500))


def test_import_path_publisher_gets_demand_of_max_records(spark: SparkSession,
                                                          tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    df = (spark.readStream.format("reactive")
          .option("publisher", "spark_publishers:recorded_range").option("count", 1234)
          .option("recordTo", str(record)).option("maxRecordsPerTrigger", 300).load())
    rows = run_to_end(df, tmp_path, "recorded", 1234)
    assert sorted(int(r.value) for r in rows) == list(range(1234))
    recording = Recording(record)
    assert recording.requests[0] == 300
    assert recording.max_outstanding <= 300


@pytest.mark.spark_lines
def test_read_stream_with_a_factory_from_the_client(spark: SparkSession,
                                                    tmp_path: Path) -> None:
    offset = 40  # a closure over client state travels to the server's source runner
    df = read_stream(spark, lambda options: RangePublisher(offset, 700),
                     schema="value BIGINT", maxRecordsPerTrigger=250)
    rows = run_to_end(df, tmp_path, "factory", 700)
    assert sorted(r.value for r in rows) == list(range(offset, offset + 700))


class FileSubscriber(SyncSubscriber[Any]):
    """Runs on an executor; writes what it received and its process id to a file."""

    def __init__(self, path: str) -> None:
        super().__init__(batch_size=16)
        self.path = path
        self.values: list[int] = []

    def on_element(self, row: Any) -> bool:
        self.values.append(row.value)
        return True

    def on_finished(self, error: BaseException | None) -> None:
        import os

        with open(self.path, "w") as out:
            json.dump({"values": self.values, "pid": os.getpid(),
                       "error": repr(error) if error else None}, out)


@pytest.mark.spark_lines
def test_foreach_writer_feeds_subscribers_on_the_executors(spark: SparkSession,
                                                           tmp_path: Path) -> None:
    out = str(tmp_path)

    def factory(partition: int, epoch: int) -> Subscriber[Any]:
        return FileSubscriber(f"{out}/p{partition}-e{epoch}.json")

    df = (spark.readStream.format("reactive").option("publisher", "range")
          .option("count", 1500).option("maxRecordsPerTrigger", 1500)
          .option("numPartitions", 3).load())
    query = (df.writeStream.foreach(SubscriberForeachWriter(factory))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None
    results = [json.loads(p.read_text()) for p in tmp_path.glob("p*-e*.json")]
    assert len(results) == 3 and all(r["error"] is None for r in results)
    assert sorted(v for r in results for v in r["values"]) == list(range(1500))


@pytest.mark.spark_lines
def test_column_functions_build_connect_columns(spark: SparkSession) -> None:
    # The classic server in this process must not make pyspark.sql.functions build
    # classic columns, which a Connect DataFrame cannot take.
    from pyspark.sql import functions as F

    assert spark.range(10).agg(F.count("*").alias("n")).first()["n"] == 10
