"""The connector on a real standalone cluster: master and worker on 127.0.0.1, the driver in
this process. A publisher named by import path runs in the source runner beside the driver,
batches are read on the workers' executors, and rows come out either to a subscriber here
(``publish()``) or to subscribers on the executor (``SubscriberForeachWriter``). Every row
once, and no one signalled beyond the demand they were given."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from executor_subscribers import DemandChecked
from pyspark.sql import SparkSession
from spark_publishers import Recording
from standalone import StandaloneCluster
from streaming import install

from pyspark_reactive import SubscriberForeachWriter, publish

PER_TRIGGER = 1000
WAIT_S = 90.0


def recorded_range(spark: SparkSession, count: int, record: Path, **options: Any) -> Any:
    """``count`` ints from a publisher the source runner imports by path; it writes every
    request it gets, and the most demand ever outstanding, to ``record``."""
    reader = (spark.readStream.format("reactive")
              .option("publisher", "spark_publishers:recorded_range")
              .option("count", str(count)).option("recordTo", str(record))
              .option("maxRecordsPerTrigger", str(PER_TRIGGER)))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.schema("value BIGINT").load()


def test_import_path_publisher_to_a_subscriber_in_this_process(
        spark: SparkSession, tmp_path: Path) -> None:
    rows = 5 * PER_TRIGGER
    record = tmp_path / "requests.jsonl"
    publisher = publish(recorded_range(spark, rows, record), element="tuple",
                        checkpointLocation=str(tmp_path / "checkpoint"))
    subscriber = DemandChecked(7)
    publisher.subscribe(subscriber)
    try:
        subscriber.wait_for(rows, WAIT_S)
    finally:
        publisher.query.stop()
    assert subscriber.error is None
    assert subscriber.values == list(range(rows))  # every row once, in order
    assert subscriber.violations == []
    assert subscriber.done.wait(WAIT_S) and subscriber.completed  # on_complete at the stop

    seen = Recording(record)
    assert seen.requests, "the publisher behind the source was never asked for anything"
    assert seen.max_outstanding <= PER_TRIGGER, (
        f"the source had {seen.max_outstanding} outstanding with maxRecordsPerTrigger="
        f"{PER_TRIGGER}; requests: {seen.requests}")


def test_foreach_writer_feeds_subscribers_on_the_executor(
        spark: SparkSession, cluster: StandaloneCluster, tmp_path: Path) -> None:
    rows = 3 * PER_TRIGGER
    record = tmp_path / "requests.jsonl"
    reports = tmp_path / "reports"
    reports.mkdir()
    out = str(reports)

    def factory(partition: int, epoch: int) -> DemandChecked:
        # A name of its own per subscriber: a task run twice shows up as a second report.
        return DemandChecked(7, report_to=f"{out}/p{partition}-e{epoch}-{uuid.uuid4().hex}")

    watch = install(spark)
    try:
        query = (recorded_range(spark, rows, record, numPartitions=2).writeStream
                 .foreach(SubscriberForeachWriter(factory))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            watch.wait_rows(query, rows, WAIT_S)
        finally:
            query.stop()
    finally:
        spark.streams.removeListener(watch)

    seen = [json.loads(path.read_text()) for path in sorted(reports.iterdir())
            if not path.name.endswith(".partial")]
    assert seen, "no subscriber reported"
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    driver_jvm = int(jvm.java.lang.ProcessHandle.current().pid())
    for report in seen:
        assert report["completed"] and report["error"] is None, report["error"]
        assert report["violations"] == []
        # A Python worker of a worker's executor, not of the driver JVM (as in local mode).
        assert report["pid"] not in (os.getpid(), driver_jvm)
        assert any(worker.pid in report["ancestry"] for worker in cluster.workers), (
            report["ancestry"])
        assert driver_jvm not in report["ancestry"], report["ancestry"]
    assert sorted(v for report in seen for v in report["values"]) == list(range(rows))

    demand = Recording(record)
    assert demand.requests and demand.max_outstanding <= PER_TRIGGER, demand.requests
