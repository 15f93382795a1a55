"""The connector as Databricks serverless would run it: through a ``DatabricksSession`` of
the local Spark Connect server (4.0, as Databricks Connect 17.x), with the serverless guard
active here and in every Python process of the server, so each query runs with an
``availableNow`` trigger and nothing may use ``persist()``, a global temporary view or the
JVM.

Spark 4.0 runs an ``availableNow`` run over a Python source as one micro-batch (sized by an
explicit ``availableNowMaxRecords``); ``publish()``'s several-batch runs read files, which
``availableNow`` splits by ``maxFilesPerTrigger``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from executor_subscribers import DemandChecked
from local_server import LocalConnectServer
from on_demand_rounds import ROUNDS, run_rounds
from polling import wait_until
from serverless_guard import guarded_environment
from spark_publishers import Recording
from test_connect_sink import Holding, reactive
from test_connector import check_served_on_the_server
from test_sink import Checked

from pyspark_reactive import SubscriberForeachWriter, publish, read_stream
from pyspark_reactive.sink import connect as connect_sink
from reactive_streams import RangePublisher

TIMEOUT_S = 180.0
RUN = {"availableNow": True}


def run_to_table(df: Any, tmp_path: Path) -> list[Any]:
    """One ``availableNow`` run of ``df`` into Parquet files; the rows written."""
    out = tmp_path / "out"
    query = (df.writeStream.format("parquet").option("path", str(out)).trigger(**RUN)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(TIMEOUT_S)
    assert not query.isActive and query.exception() is None, query.exception()
    return list(df.sparkSession.read.parquet(str(out)).collect())


def staging_tables(spark: Any, checkpoint: Path) -> list[str]:
    """The staging tables of the query of ``checkpoint`` (all its runs)."""
    part = connect_sink.query_part(str(checkpoint), "")
    return [r.tableName for r in
            spark.sql(f"SHOW TABLES LIKE '{connect_sink.PREFIX}{part}_*'").collect()
            if not r.isTemporary]


def test_a_named_publisher_through_format_reactive(spark: Any, tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", count=1500,
                  recordTo=record, maxRecordsPerTrigger=500,
                  availableNowMaxRecords=1500).load()
    rows = run_to_table(df, tmp_path)
    assert sorted(int(r.value) for r in rows) == list(range(1500))
    recording = Recording(record)  # written by the publisher in the server's source runner
    assert recording.max_outstanding <= 1500


def test_read_stream_with_a_factory_from_the_client(spark: Any, tmp_path: Path) -> None:
    offset = 40  # a closure over client state travels to the server's source runner
    df = read_stream(spark, lambda options: RangePublisher(offset, 700),
                     schema="value BIGINT", availableNowMaxRecords=700)
    rows = run_to_table(df, tmp_path)
    assert sorted(r.value for r in rows) == list(range(offset, offset + 700))


def test_foreach_writer_feeds_subscribers_in_the_servers_workers(
        spark: Any, connect_server: LocalConnectServer, tmp_path: Path) -> None:
    out = str(tmp_path)

    def factory(partition: int, epoch: int) -> DemandChecked:
        return DemandChecked(64, report_to=f"{out}/p{partition}-e{epoch}.json")

    df = reactive(spark, publisher="range", count=1500, availableNowMaxRecords=1500,
                  numPartitions=3).load()
    query = (df.writeStream.foreach(SubscriberForeachWriter(factory)).trigger(**RUN)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(TIMEOUT_S)
    assert not query.isActive and query.exception() is None, query.exception()
    check_served_on_the_server(tmp_path, connect_server, 1500)


def files(spark: Any, folder: Path, count: int, per_file: int) -> Any:
    """``count`` JSON files of ``per_file`` values each (0, 1, ...), read as a stream one
    file per micro-batch."""
    for index in range(count):
        (spark.range(index * per_file, (index + 1) * per_file, 1, 1)
         .selectExpr("id AS value").write.json(str(folder / f"part{index}")))
    return (spark.readStream.schema("value BIGINT").option("maxFilesPerTrigger", 1)
            .json(str(folder / "part*")))


def test_publish_several_batches_held_by_a_slow_subscriber(spark: Any, tmp_path: Path) -> None:
    df = files(spark, tmp_path / "in", 4, 100)
    checkpoint = tmp_path / "checkpoint"
    publisher = publish(df.selectExpr("value", "value * 2 AS twice"), element="tuple",
                        trigger=RUN, checkpointLocation=checkpoint, chunk_rows=16)
    subscriber = Holding(50)
    publisher.subscribe(subscriber)
    subscriber.wait_for(50, timeout=TIMEOUT_S)
    # Held: batch 0 waits for the subscriber, so Spark stages no other. Observed over the
    # client's heartbeats, which the waiting batch function reads (one that had returned
    # would have let Spark stage batch 1).
    [table] = staging_tables(spark, checkpoint)

    def beats() -> int:
        marks = connect_sink._properties(spark, table)
        return int(marks.get(connect_sink.ALIVE, 0)) if marks else 0

    first = beats()
    wait_until(lambda: beats() >= first + 2, 60, "two heartbeats of the held batch")
    assert staging_tables(spark, checkpoint) == [table] and table.endswith("_0")
    assert len(subscriber.elements) == 50 and publisher.batch_id == 0
    assert subscriber.subscription is not None
    subscriber.outstanding = 350
    subscriber.subscription.request(350)
    assert subscriber.done.wait(TIMEOUT_S), f"{len(subscriber.elements)} rows, no end"
    assert subscriber.completed, subscriber.error
    assert subscriber.violations == []
    assert sorted(subscriber.elements) == [(i, 2 * i) for i in range(400)]
    assert publisher.batch_id == 3  # four batches, one per file
    assert staging_tables(spark, checkpoint) == []


def test_a_failing_batch_reaches_subscribers_as_on_error(spark: Any, tmp_path: Path) -> None:
    df = files(spark, tmp_path / "in", 2, 100)
    failing = df.selectExpr("IF(value = 150, raise_error('value 150 is refused'), value) "
                            "AS value")
    publisher = publish(failing, element="tuple", trigger=RUN,
                        checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(1000)
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(TIMEOUT_S), f"{len(subscriber.elements)} rows, no end"
    assert subscriber.error is not None and not subscriber.completed
    assert "value 150 is refused" in str(subscriber.error)
    assert sorted(subscriber.elements) == [(i,) for i in range(100)]  # batch 0 only
    assert not (tmp_path / "checkpoint" / "commits" / "1").exists()


def test_stop_while_a_batch_is_held(spark: Any, tmp_path: Path) -> None:
    df = files(spark, tmp_path / "in", 2, 100)
    checkpoint = tmp_path / "checkpoint"
    publisher = publish(df, element="tuple", trigger=RUN, checkpointLocation=checkpoint)
    subscriber = Holding(10)
    publisher.subscribe(subscriber)
    subscriber.wait_for(10, timeout=TIMEOUT_S)
    publisher.query.stop()
    assert subscriber.done.wait(60) and subscriber.completed, subscriber.error
    assert not (checkpoint / "commits" / "0").exists()
    wait_until(lambda: staging_tables(spark, checkpoint) == [], 60,
               "the stopped batch's staging table dropped")


_CLIENT = """
import os, sys, threading
from databricks.connect import DatabricksSession
from pyspark_reactive import publish

spark = DatabricksSession.builder.remote(os.environ["REACTIVE_TEST_REMOTE"]).getOrCreate()
df = (spark.readStream.format("reactive").option("publisher", "range")
      .option("count", "300").option("availableNowMaxRecords", "300")
      .option("walLocation", sys.argv[2]).load())
publisher = publish(df, element="tuple", trigger={"availableNow": True},
                    checkpointLocation=sys.argv[1], client_timeout=10)

class Hold:
    def on_subscribe(self, subscription):
        subscription.request(1)
    def on_next(self, element):
        print("received", element, flush=True)
    def on_error(self, error):
        print("error", error, flush=True)
    def on_complete(self):
        print("complete", flush=True)

publisher.subscribe(Hold())
threading.Event().wait()
"""


def test_a_killed_client_leaves_nothing_and_a_restart_delivers_the_batch(
        spark: Any, serverless_remote: str, tmp_path: Path) -> None:
    checkpoint, wal = tmp_path / "checkpoint", tmp_path / "wal"
    environment = {**os.environ, **guarded_environment(),
                   "REACTIVE_TEST_REMOTE": serverless_remote}
    client = subprocess.Popen([sys.executable, "-c", _CLIENT, str(checkpoint), str(wal)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=environment)
    try:
        assert client.stdout is not None
        lines = []
        for line in client.stdout:  # ends when the client's output closes
            lines.append(line)
            if line.startswith("received"):
                break
        assert lines and lines[-1].startswith("received (0,)"), "".join(lines)[-3000:]
        assert staging_tables(spark, checkpoint), "batch 0 is staged while it is delivered"
    finally:
        client.send_signal(signal.SIGKILL)  # by its process id: a notebook's kernel dies
        client.wait(60)
    # The batch function hears nothing for client_timeout (10 s), fails the batch and
    # drops its table.
    wait_until(lambda: staging_tables(spark, checkpoint) == [], 120,
               "the killed client's batch dropped by the server")
    assert not (checkpoint / "commits" / "0").exists()

    # Staging a dead server side would have left: one of an earlier run of this query,
    # which the next start drops, and one of another query, which it must not touch.
    namespace = connect_sink.staging_namespace(spark, None)
    part = connect_sink.query_part(str(checkpoint), "")
    dead = f"{namespace}.`{connect_sink.PREFIX}{part}_{'d' * 12}_0`"
    other_part = connect_sink.query_part(str(tmp_path / "other"), "")
    other = f"{namespace}.`{connect_sink.PREFIX}{other_part}_{'e' * 12}_0`"
    for name in (dead, other):
        spark.sql(f"CREATE TABLE {name} AS SELECT 1 AS value")

    df = reactive(spark, publisher="range", count=300, availableNowMaxRecords=300,
                  walLocation=wal).load()
    publisher = publish(df, element="tuple", trigger=RUN, checkpointLocation=checkpoint)
    subscriber = Checked(1000)
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(TIMEOUT_S), f"{len(subscriber.elements)} rows, no end"
    assert subscriber.completed, subscriber.error
    assert [v for (v,) in subscriber.elements] == list(range(300))  # batch 0, whole
    assert staging_tables(spark, checkpoint) == []  # the dead run's table too
    assert staging_tables(spark, tmp_path / "other") == [other.split(".")[-1].strip("`")]
    spark.sql(f"DROP TABLE {other}")


def test_demand_driven_runs_three_rounds_each_row_once(spark: Any, tmp_path: Path) -> None:
    publisher, subscriber = run_rounds(spark, tmp_path)
    # Spark 4.0: each run is one micro-batch, of the whole bound.
    assert publisher.run_bounds == list(ROUNDS)
    publisher.stop(timeout=120)
    assert subscriber.done.wait(60) and subscriber.completed
    assert staging_tables(spark, tmp_path / "checkpoint") == []


@pytest.fixture(autouse=True)
def _no_query_left(spark: Any) -> Any:
    yield
    for query in spark.streams.active:  # a failed test's, so the next starts clean
        query.stop()
