"""``publish(df)`` from a Spark Connect client: the batch function runs on the server and
the client's subscribers get every row against their demand, with the classic contract,
faults included (a stalled subscriber, a query failing mid-batch, a restart)."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import streaming
from polling import wait_until
from pyspark.sql import SparkSession
from spark_publishers import Recording
from test_sink import EVERY_KIND, PLAIN, Checked
from test_sink_faults import (
    ROWS,
    Stalls,
    Stamps,
    failed_at_250,
    failed_by_a_stall,
    numbers,
)

from pyspark_reactive import ForeachBatchPublisher, publish
from pyspark_reactive.sink import connect as connect_sink

#: The trigger that ends a query by itself once its finite publisher is drained. Without
#: admission control for Python sources (Spark 4.0/4.1) ``availableNow`` runs a single
#: batch (test_available_now_lines.py checks that): the default trigger, and the test
#: stops the query once every row is delivered (:func:`stop_when_delivered`).
UNTIL_DRAINED = streaming.UNTIL_DRAINED or None  # publish(trigger=None): the default


def stop_when_delivered(publisher: ForeachBatchPublisher, rows: int,
                        *subscribers: Checked) -> None:
    """Where :data:`UNTIL_DRAINED` is the default trigger: stop the query once each of
    ``subscribers`` has ``rows`` elements (they then get ``on_complete``, as when an
    ``availableNow`` query ends)."""
    if UNTIL_DRAINED is None:
        for subscriber in subscribers:
            subscriber.wait_for(rows, timeout=180)
        assert publisher.query is not None
        publisher.query.stop()


class Holding(Checked):
    """Requests ``batch`` once; more only when the test asks."""

    def on_next(self, element: Any) -> None:
        self.outstanding += 1 << 30  # never used up: Checked requests nothing more
        super().on_next(element)
        self.outstanding -= 1 << 30


def reactive(spark: SparkSession, **options: Any) -> Any:
    reader = spark.readStream.format("reactive")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader


@pytest.mark.spark_lines
def test_every_row_in_order_within_demand_then_complete(spark: SparkSession,
                                                        tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=5000, maxRecordsPerTrigger=2000).load()
    publisher = publish(df.selectExpr("value", "value * value AS square"), element="tuple",
                        chunk_rows=512, trigger=UNTIL_DRAINED,
                        checkpointLocation=tmp_path / "checkpoint")
    assert isinstance(publisher, ForeachBatchPublisher)
    subscriber = Checked(37)
    publisher.subscribe(subscriber)
    stop_when_delivered(publisher, 5000, subscriber)
    assert subscriber.done.wait(180), f"{len(subscriber.elements)} rows, no terminal signal"
    assert subscriber.completed and subscriber.error is None
    assert subscriber.elements == [(i, i * i) for i in range(5000)]
    assert subscriber.violations == []
    assert publisher.rows_delivered == 5000


def test_several_subscribers_each_get_every_row(spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=1500, maxRecordsPerTrigger=500).load()
    publisher = publish(df, element="dict", trigger=UNTIL_DRAINED,
                        checkpointLocation=tmp_path / "checkpoint")
    # Both attach long before the first batch is planned (seconds after the start).
    first, second = Checked(100), Checked(7)
    publisher.subscribe(first)
    publisher.subscribe(second)
    stop_when_delivered(publisher, 1500, first, second)
    for subscriber in (first, second):
        assert subscriber.done.wait(180) and subscriber.completed
        assert [e["value"] for e in subscriber.elements] == list(range(1500))
        assert subscriber.violations == []


def test_a_slow_subscriber_holds_the_next_batch_and_the_publisher(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    new_token, tokens = connect_sink.new_token, []

    def recorded_token() -> str:  # this publisher's token names its staging tables
        tokens.append(new_token())
        return tokens[-1]

    monkeypatch.setattr(connect_sink, "new_token", recorded_token)
    record = tmp_path / "requests.jsonl"
    df = (reactive(spark, publisher="spark_publishers:recorded_range", recordTo=record,
                   count=1000, maxRecordsPerTrigger=100).schema("value BIGINT").load())
    publisher = publish(df, element="tuple", checkpointLocation=tmp_path / "checkpoint")

    subscriber = Holding(50)
    publisher.subscribe(subscriber)
    subscriber.wait_for(50)
    # Held: the first batch (100 rows) cannot be delivered, so Spark plans no other and
    # the source asks its publisher for no more than the batch it refilled. Observed over
    # events of the pipeline rather than a fixed time: the source's refill request, then
    # three of the client's heartbeats, which the waiting batch function reads every
    # second (a batch function that had returned would have let Spark plan batch 1).
    wait_until(lambda: sum(Recording(record).requests) >= 200, 120,
               "the source's request for the batch behind the held one")

    def beats() -> int:  # the heartbeat property of batch 0's staging table
        tables = spark.sql(f"SHOW TABLES LIKE '{connect_sink.PREFIX}*_{tokens[0]}_0'").collect()
        marks = connect_sink._properties(spark, tables[0].tableName) if tables else None
        return int(marks.get(connect_sink.ALIVE, 0)) if marks else 0

    first = beats()
    wait_until(lambda: beats() >= first + 3, 120, "three heartbeats of the held batch")
    assert len(subscriber.elements) == 50 and subscriber.violations == []
    assert sum(Recording(record).requests) <= 200
    assert publisher.batch_id == 0
    assert subscriber.subscription is not None
    subscriber.outstanding = 950
    subscriber.subscription.request(950)
    subscriber.wait_for(1000)
    assert subscriber.violations == []
    assert [v for (v,) in subscriber.elements] == list(range(1000))
    publisher.query.stop()
    assert subscriber.done.wait(60) and subscriber.completed


def test_query_failure_reaches_subscribers_as_on_error(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    df = (reactive(spark, publisher="spark_publishers:failing", count=25,
                   message="upstream broke #9", maxRecordsPerTrigger=10)
          .schema("value BIGINT").load())
    publisher = publish(df, element="dict", checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(5)
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(180)
    assert subscriber.error is not None and "upstream broke #9" in str(subscriber.error)
    assert [e["value"] for e in subscriber.elements] == list(range(25))


def test_stop_while_a_subscriber_holds_a_batch(spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", maxRecordsPerTrigger=100).load()
    publisher = publish(df, element="tuple", checkpointLocation=tmp_path / "checkpoint")
    subscriber = Holding(10)  # ten rows, then nothing more requested
    publisher.subscribe(subscriber)
    subscriber.wait_for(10)
    stopped = threading.Thread(target=publisher.query.stop)
    stopped.start()
    stopped.join(60)
    assert not stopped.is_alive(), "query.stop() did not return within 60 s"
    assert subscriber.done.wait(60) and subscriber.error is None and subscriber.completed
    assert len(subscriber.elements) == 10


def test_when_unsubscribed_stop_ends_the_query(spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", maxRecordsPerTrigger=100).load()
    publisher = publish(df, element="tuple", when_unsubscribed="stop",
                        checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(10, take=30)
    publisher.subscribe(subscriber)
    # The client's reason is data, quoted under the server's own words: its text can
    # neither pass for the error nor for a stop.
    with pytest.raises(Exception, match=r"batch \d+ was not delivered; the client that "
                       r"publishes this query gave this reason:\n  \| ForeachBatchPublisher: "
                       r"batch \d+ was not delivered: its last subscriber cancelled"):
        publisher.query.awaitTermination(120)
    assert not publisher.query.isActive
    assert [v for (v,) in subscriber.elements] == list(range(30))


def test_a_publisher_given_to_foreach_batch_directly_says_to_use_publish(
        spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=10).load()
    query = (df.writeStream.foreachBatch(ForeachBatchPublisher())
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    with pytest.raises(Exception, match=r"Use publish\(df, \.\.\.\)"):
        query.awaitTermination(120)


# -- faults: a stalled subscriber, a query failing mid-batch, a restart ------------------


def test_demand_timeout_fail_fails_the_query_naming_the_subscriber(spark: SparkSession,
                                                                   tmp_path: Path) -> None:
    subscriber = failed_by_a_stall(spark, tmp_path / "checkpoint")
    assert len(subscriber.elements) == 10


def test_demand_timeout_cancel_ends_only_that_subscriber(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    publisher = publish(numbers(spark), element="tuple", demand_timeout=0.5,
                        when_stalled="cancel", checkpointLocation=tmp_path / "checkpoint")
    staller, reader = Stalls(10), Checked(50)
    publisher.subscribe(staller)
    publisher.subscribe(reader)
    assert staller.done.wait(120) and isinstance(staller.error, TimeoutError), staller.error
    assert "demand_timeout=0.5 s" in str(staller.error)
    reader.wait_for(3 * ROWS)
    assert reader.error is None and reader.violations == []
    assert sorted(v for (v,) in reader.elements[:3 * ROWS]) == list(range(3 * ROWS))
    assert publisher.query.isActive
    publisher.query.stop()
    assert reader.done.wait(60) and reader.completed


def test_a_udf_failing_mid_batch_reaches_every_subscriber(spark: SparkSession,
                                                          tmp_path: Path) -> None:
    _, subscribers = failed_at_250(spark, tmp_path)
    for subscriber in subscribers:
        assert re.search(r"ValueError: bad row 250", str(subscriber.error)), subscriber.error
        # Batches 0 and 1 whole. Batch 2 is computed whole on the server (its counts and
        # digests) before it is staged, so its failure comes before any of its rows.
        assert sorted(v for (v,) in subscriber.elements) == list(range(2 * ROWS))


def test_a_restart_redelivers_the_failed_batch_under_the_same_id(spark: SparkSession,
                                                                 tmp_path: Path) -> None:
    # Failed part way by a stalled subscriber (demand_timeout), batch 0 is delivered
    # again, whole and in the same order, to the subscriber of the restarted query.
    checkpoint = tmp_path / "checkpoint"
    before = failed_by_a_stall(spark, checkpoint)
    second = publish(numbers(spark), element="tuple", checkpointLocation=checkpoint)
    after = Stamps(64)
    after.publisher = second
    second.subscribe(after)
    after.wait_for(2 * ROWS)
    second.query.stop()
    stamped = [(b, v) for b, (v,) in zip(after.batch_ids, after.elements, strict=True)]
    assert [b for b, _ in stamped[:2 * ROWS]] == [0] * ROWS + [1] * ROWS
    assert sorted(v for _, v in stamped[:ROWS]) == list(range(ROWS))
    assert after.elements[:10] == before.elements


def test_every_type_arrives_through_the_staging_table(spark: SparkSession,
                                                      tmp_path: Path) -> None:
    # The batch goes through a table of the catalog's default format (parquet here, Delta
    # on Databricks): each kind of column arrives as Spark reads it back, as rows and as
    # Arrow batches.
    source = tmp_path / "in"
    (spark.range(0, 300, 1, 2).selectExpr(*EVERY_KIND)
     .write.parquet(str(source)))
    reference = spark.read.parquet(str(source))
    expected = reference.orderBy("id").collect()
    got = {}
    for element in ("row", "arrow"):
        stream = spark.readStream.schema(reference.schema).parquet(str(source))
        publisher = publish(stream, element=element, chunk_rows=50, trigger={"availableNow": True},
                            checkpointLocation=tmp_path / f"checkpoint-{element}")
        subscriber = Checked(7)
        publisher.subscribe(subscriber)
        assert subscriber.done.wait(180), f"{len(subscriber.elements)} elements, no end"
        assert subscriber.completed, subscriber.error
        assert subscriber.violations == []
        got[element] = subscriber.elements
    rows = sorted(got["row"], key=lambda row: row.id)
    # As in classic mode: Spark's collect() agrees on the plain columns, a timestamp comes
    # as an aware datetime in UTC (the session's time zone here), maps as dicts.
    assert [[row[name] for name in PLAIN] for row in rows] == [
        [row[name] for name in PLAIN] for row in expected]
    assert [row.at.replace(tzinfo=None) for row in rows] == [row.at for row in expected]
    assert all(row.at.utcoffset() is not None for row in rows)
    assert isinstance(rows[3].m, dict) and rows[1].nested["b"] == [{1: "one"}]
    table = pa.Table.from_batches(got["arrow"])
    assert all(batch.num_rows <= 50 for batch in got["arrow"])
    assert table.num_rows == 300
    assert table.schema.names == reference.columns
    assert sorted(table.column("id").to_pylist()) == list(range(300))
    assert table.sort_by("id").column("amount").to_pylist() == [row.amount for row in expected]


def test_column_names_a_table_would_refuse_arrive_as_the_query_has_them(
        spark: SparkSession, tmp_path: Path) -> None:
    # Staged by position: names that differ only in case, and characters Delta refuses in
    # a column name without column mapping, come back as the query named them.
    df = reactive(spark, publisher="range", count=30, maxRecordsPerTrigger=30).load()
    named = df.selectExpr("value AS `sum(x)`", "value * 2 AS V", "value * 3 AS v",
                          "value AS `a b;c`")
    publisher = publish(named, element="row", trigger={"availableNow": True},
                        checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(100)
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(120) and subscriber.completed, subscriber.error
    assert [list(row.__fields__) for row in subscriber.elements[:1]] == [
        ["sum(x)", "V", "v", "a b;c"]]
    assert [tuple(row) for row in subscriber.elements] == [
        (i, 2 * i, 3 * i, i) for i in range(30)]
