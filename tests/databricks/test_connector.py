"""The connector through a ``DatabricksSession`` (Databricks Connect 17.3 or 18.3) of a local
OSS Spark Connect server: the source by name, ``read_stream``, ``publish()`` over several
micro-batches with a slow subscriber, and the foreach writer with subscribers in the
server's Python workers.

On Spark 4.0 and 4.1 an ``availableNow`` run reads one micro-batch (the source cannot see the
trigger), so the streams here run with the default trigger and are stopped once Spark's
progress (posted to a listener) shows every row.
"""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from executor_subscribers import DemandChecked
from local_server import LocalConnectServer
from spark_publishers import Recording
from streaming import ProgressWatch, install
from test_connect_sink import reactive
from test_sink import Checked

from pyspark_reactive import ForeachBatchPublisher, SubscriberForeachWriter, publish, read_stream
from reactive_streams import RangePublisher

TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def watch(spark: Any) -> Iterator[ProgressWatch]:
    """Every query's progress and termination, as Spark posts them (a client-side
    ``StreamingQueryListener`` of the Databricks Connect session)."""
    listener = install(spark)
    yield listener
    spark.streams.removeListener(listener)


def run_until(df: Any, watch: ProgressWatch, tmp_path: Path,
              rows: int) -> tuple[list[Any], list[int]]:
    """Write ``df`` to Parquet until Spark's progress counts ``rows`` input rows, then stop;
    return the rows written and the sizes of the batches that read some."""
    out = tmp_path / "out"
    query = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        watch.wait_rows(query, rows, TIMEOUT_S)
    finally:
        query.stop()
    return list(df.sparkSession.read.parquet(str(out)).collect()), watch.batch_sizes(query)


def test_a_named_publisher_through_format_reactive(spark: Any, watch: ProgressWatch,
                                                  tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", count=1500,
                  recordTo=record, maxRecordsPerTrigger=500).load()
    rows, batches = run_until(df, watch, tmp_path, 1500)
    assert sorted(int(r.value) for r in rows) == list(range(1500))
    assert len(batches) >= 3 and max(batches) <= 500, batches
    recording = Recording(record)  # written by the publisher in the server's source runner
    assert recording.requests[0] == 500
    assert recording.max_outstanding <= 500


def test_read_stream_with_a_factory_from_the_client(spark: Any, watch: ProgressWatch,
                                                    tmp_path: Path) -> None:
    offset = 40  # a closure over client state travels to the server's source runner
    df = read_stream(spark, lambda options: RangePublisher(offset, 700),
                     schema="value BIGINT", maxRecordsPerTrigger=250)
    rows, batches = run_until(df, watch, tmp_path, 700)
    assert sorted(r.value for r in rows) == list(range(offset, offset + 700))
    assert len(batches) >= 3 and max(batches) <= 250, batches


def test_publish_holds_the_query_to_a_slow_subscribers_demand(spark: Any,
                                                              tmp_path: Path) -> None:
    per_batch = 200
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", recordTo=record,
                  maxRecordsPerTrigger=per_batch).schema("value BIGINT").load()
    publisher = publish(df.selectExpr("value", "value * 2 AS twice"), element="tuple",
                        checkpointLocation=tmp_path / "checkpoint")
    assert isinstance(publisher, ForeachBatchPublisher)
    subscriber = Checked(32, pause=0.002)  # 500 rows/s at most: slower than the source
    publisher.subscribe(subscriber)
    subscriber.wait_for(6 * per_batch + 50, timeout=TIMEOUT_S)  # into the seventh batch
    publisher.query.stop()
    assert subscriber.done.wait(60) and subscriber.completed, subscriber.error
    assert subscriber.error is None and subscriber.violations == []
    received = len(subscriber.elements)
    assert subscriber.elements == [(i, 2 * i) for i in range(received)]
    assert publisher.batch_id is not None and publisher.batch_id >= 3

    # Backpressure: whenever the source asked its publisher for more, it had been handed
    # no more than the subscriber had received, plus the batch being delivered and the
    # one buffered behind it (and the 100 rows between two of the subscriber's samples).
    timeline = Recording(record).timeline
    assert len(timeline) >= 4
    times = [t for t, _ in subscriber.samples]
    for when, delivered in timeline:
        index = bisect.bisect_right(times, when) - 1
        taken = subscriber.samples[index][1] if index >= 0 else 0
        assert delivered <= taken + 2 * per_batch + 100, (when, delivered, taken)


def reports(folder: Path) -> list[dict[str, Any]]:
    """What the foreach writer's subscribers wrote at their terminal signals (each file
    appears whole: written aside, then renamed)."""
    return [json.loads(p.read_text()) for p in folder.glob("p*-e*.json")]


def test_foreach_writer_feeds_subscribers_in_the_servers_workers(
        spark: Any, watch: ProgressWatch, connect_server: LocalConnectServer,
        tmp_path: Path) -> None:
    out = str(tmp_path)

    def factory(partition: int, epoch: int) -> DemandChecked:
        return DemandChecked(64, report_to=f"{out}/p{partition}-e{epoch}.json")

    df = reactive(spark, publisher="range", count=1500, maxRecordsPerTrigger=500,
                  numPartitions=3).load()
    query = (df.writeStream.foreach(SubscriberForeachWriter(factory))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        # A batch's progress comes after its tasks ended, and so after each partition's
        # subscriber wrote its report (at on_complete, when the partition ended).
        watch.wait_rows(query, 1500, TIMEOUT_S)
    finally:
        query.stop()
    check_served_on_the_server(tmp_path, connect_server, 1500)


def check_served_on_the_server(folder: Path, server: LocalConnectServer, rows: int) -> None:
    """The foreach writer's subscribers (their reports in ``folder``): at least three
    partitions, each completed without a violation, every value of ``range(rows)`` once,
    and each subscriber in a Python worker of the server's, not in this client."""
    written = reports(folder)
    assert len(written) >= 3 and all(
        r["error"] is None and r["completed"] and not r["violations"] for r in written), written
    assert sorted(v for r in written for v in r["values"]) == list(range(rows))
    assert server.process is not None
    for report in written:
        assert report["pid"] != os.getpid()
        assert server.process.pid in report["ancestry"], report["ancestry"]


_TOKENLESS = """
import json, os, sys
from pyspark.sql.connect.session import SparkSession

try:
    spark = SparkSession(connection=sys.argv[1])  # the server's address with no token
    spark.release_session_on_close = False
    print(json.dumps({"ran": spark.range(3).count()}), flush=True)
except Exception as error:
    print(json.dumps({"error": f"{type(error).__name__}: {error}"[:600]}), flush=True)
# Out at once: Databricks Connect 18's exit hooks (a cache clean-up, a session release)
# retry against a server that refuses them, for minutes.
os._exit(0)
"""


def test_the_local_server_refuses_a_client_without_its_token(
        spark: Any, connect_server: LocalConnectServer) -> None:
    # The stand-in listens on 127.0.0.1, open to every local user: like Databricks, it
    # must serve only clients that present the token (here, the fixture's session).
    done = subprocess.run([sys.executable, "-c", _TOKENLESS,
                           f"sc://localhost:{connect_server.port}"],
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the client: {done.stdout[-800:]} {done.stderr[-800:]}"
    result = json.loads(lines[-1])
    assert "ran" not in result, f"a client without the token ran a query: {result}"
    assert "UNAUTHENTICATED" in result["error"], result
    assert spark.range(3).count() == 3  # the session with the token still works
