"""``publish_on_demand``: availableNow runs started by subscribers' demand (classic)."""

from __future__ import annotations

from pathlib import Path

import pytest
from on_demand_rounds import Rounds, run_rounds
from polling import wait_until
from pyspark.sql import SparkSession

from pyspark_reactive import publish_on_demand
from pyspark_reactive.source.admission import ADMISSION_CONTROL


@pytest.mark.spark_lines
def test_three_rounds_of_demand_each_row_once(spark: SparkSession, tmp_path: Path) -> None:
    publisher, subscriber = run_rounds(spark, tmp_path)
    publisher.stop(timeout=120)
    assert subscriber.done.wait(60) and subscriber.completed


@pytest.mark.spark_lines
def test_a_finite_source_completes_the_stream(spark: SparkSession, tmp_path: Path) -> None:
    def build(bound: int):  # type: ignore[no-untyped-def]
        return (spark.readStream.format("reactive")
                .option("publisher", "spark_publishers:ledger")
                .option("ledger", str(tmp_path / "ledger")).option("total", "50")
                .option("maxRecordsPerTrigger", "20")
                .option("availableNowMaxRecords", str(bound))
                .schema("value BIGINT").load())

    # Spark 4.0/4.1 cannot report a completed source: there a run that reads nothing ends.
    publisher = publish_on_demand(build, checkpointLocation=tmp_path / "checkpoint",
                                  element="tuple", max_run_records=35,
                                  empty_runs=None if ADMISSION_CONTROL else 1)
    subscriber = Rounds()
    publisher.subscribe(subscriber)
    wait_until(lambda: subscriber.subscription is not None, 30, "on_subscribe")
    subscriber.request(1000)
    assert subscriber.done.wait(300), f"{len(subscriber.elements)} rows, no terminal signal"
    assert subscriber.completed, subscriber.error
    assert [v for (v,) in subscriber.elements] == list(range(50))
    # Runs of at most 35 rows, then one that read nothing.
    assert publisher.run_bounds[:2] == [35, 35] and len(publisher.run_bounds) >= 3


def test_bad_arguments_are_named(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="checkpointLocation is required"):
        publish_on_demand(lambda bound: None, checkpointLocation=None)
    with pytest.raises(ValueError, match="max_run_records=0 is not accepted"):
        publish_on_demand(lambda bound: None, checkpointLocation=tmp_path, max_run_records=0)
    with pytest.raises(ValueError, match="trigger is not accepted"):
        publish_on_demand(lambda bound: None, checkpointLocation=tmp_path,
                          trigger={"processingTime": "1 second"})


def test_a_build_that_returns_no_stream_fails_the_stream(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    publisher = publish_on_demand(lambda bound: spark.range(bound),
                                  checkpointLocation=tmp_path / "checkpoint")
    subscriber = Rounds()
    publisher.subscribe(subscriber)
    wait_until(lambda: subscriber.subscription is not None, 30, "on_subscribe")
    subscriber.request(5)
    assert subscriber.done.wait(60)
    assert "build(5) returned DataFrame, not a streaming DataFrame" in str(subscriber.error)
