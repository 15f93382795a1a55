"""``publish_on_demand`` under Spark Connect: availableNow runs started by demand, each
batch through the table staging."""

from __future__ import annotations

from pathlib import Path

from on_demand_rounds import run_rounds
from pyspark.sql import SparkSession

from pyspark_reactive.sink import connect as connect_sink


# Not among the spark_lines tests: on 4.0 tests/serverless runs it through Databricks
# Connect, and the classic test runs it on every line.
def test_three_rounds_of_demand_each_row_once(spark: SparkSession, tmp_path: Path) -> None:
    publisher, subscriber = run_rounds(spark, tmp_path)
    publisher.stop(timeout=120)
    assert subscriber.done.wait(60) and subscriber.completed
    # Every run's staging tables were dropped once delivered.
    query = connect_sink.query_part(str(tmp_path / "checkpoint"), "")
    left = [r.tableName for r in spark.sql(f"SHOW TABLES LIKE '{connect_sink.PREFIX}{query}_*'")
            .collect() if not r.isTemporary]
    assert left == []
