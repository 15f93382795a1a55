"""The built-in ``rabbitmq`` in real Spark against the real node: every message once with
``walLocation`` (and every message acknowledged), a slow query holding the broker back
(``rabbitmqctl``'s messages_unacknowledged within the stated bound while messages_ready
grows), two shards on the executors reading every message once, and bad options named by
the factory."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from rabbitmq_server import Node, publish_json
from streaming import ProgressWatch
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive.publishers.rabbitmq import (
    MESSAGE_SCHEMA,
    _OtherShardsKept,
    default_schema,
    rabbitmq_publisher,
)
from pyspark_reactive.source.durability import FactoryOptions
from pyspark_reactive.source.options import OptionError
from pyspark_reactive.source.shard_log import ShardLog
from reactive_streams.adapters.rabbitmq import RabbitMQMessage, SkipMessage

__all__ = ["queries", "watch"]  # fixtures shared with test_source


def _counts_become(node: Node, queue: str, check: Any, timeout: float = 20.0
                   ) -> tuple[int, int]:
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        while True:
            counts = node.queue_counts(queue)
            if check(*counts) or deadline.is_set():
                assert check(*counts), f"(ready, unacknowledged) stayed {counts}"
                return counts
    finally:
        timer.cancel()


def test_every_message_once_with_a_log_and_every_one_acknowledged(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        node: Node, queue: str, tmp_path: Path) -> None:
    count = 1000
    publish_json(node, queue, count)
    df = reactive(spark, publisher="rabbitmq", url=node.url, queue=queue, format="json",
                  maxRecordsPerTrigger=300,
                  walLocation=tmp_path / "wal").schema("id BIGINT").load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, count)
    query.stop()
    assert sorted(row.id for row in spark.table(name).collect()) == list(range(count))
    assert max(watch.batch_sizes(query)) <= 300
    _counts_become(node, queue, lambda ready, unacked: (ready, unacked) == (0, 0))


def test_a_slow_query_holds_the_broker_back(
        spark: SparkSession, queries: list[StreamingQuery], node: Node, queue: str,
        tmp_path: Path) -> None:
    per_trigger = 200
    publish_json(node, queue, 500)
    gate, first = threading.Event(), threading.Event()
    sizes: list[int] = []

    def slow(batch: Any, batch_id: int) -> None:
        sizes.append(batch.count())
        first.set()
        gate.wait(60)

    df = reactive(spark, publisher="rabbitmq", url=node.url, queue=queue,
                  maxRecordsPerTrigger=per_trigger, walLocation=tmp_path / "wal").load()
    assert df.schema.simpleString() == (
        "struct<body:binary,routing_key:string,exchange:string,message_id:string,"
        "headers:map<string,string>,redelivered:boolean,delivery_tag:bigint,"
        "timestamp:timestamp,received:timestamp>")
    query = (df.writeStream.foreachBatch(slow)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    queries.append(query)
    try:
        assert first.wait(60), "no batch within 60 s"
        publish_json(node, queue, 2000, start=500)  # the backlog grows in the broker
        # The stated bound: max(1, signalled and not yet durable + demand not met) <=
        # 2 x maxRecordsPerTrigger + 1 (the default prefetch). With the log, signalled
        # rows are durable (and acknowledged) within walSyncMs, and the source holds at
        # most maxRecordsPerTrigger.
        ready, unacked = _counts_become(
            node, queue, lambda ready, unacked: ready >= 2500 - 2 * per_trigger - 1)
        assert unacked <= per_trigger + 1, (ready, unacked)
        ready, unacked = node.queue_counts(queue)  # and it stays so
        assert unacked <= per_trigger + 1 and ready >= 2500 - 2 * per_trigger - 1
    finally:
        gate.set()
    query.stop()
    assert sizes[0] <= per_trigger


def test_two_shards_on_the_executors_read_every_message_once(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        node: Node, queue: str, tmp_path: Path) -> None:
    count = 600
    publish_json(node, queue, count)
    df = reactive(spark, publisher="rabbitmq", url=node.url, queue=queue, format="json",
                  shards=2, maxRecordsPerTrigger=200,
                  walLocation=tmp_path / "wal").schema("id BIGINT").load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, count)
    query.stop()
    assert sorted(row.id for row in spark.table(name).collect()) == list(range(count))
    _counts_become(node, queue, lambda ready, unacked: (ready, unacked) == (0, 0))


def test_a_redelivery_another_shard_kept_is_left_out(tmp_path: Path) -> None:
    """Shard 0 kept m-1 and m-2 (its epoch's identities in its log) but was killed before
    acknowledging them; the broker redelivers m-1 to shard 1, which leaves it out (and so
    acknowledges it); a redelivered message no shard kept, and a new one, are kept."""
    import pyarrow as pa

    location = str(tmp_path / "wal")
    schema = pa.schema([("id", pa.int64())])
    ShardLog(location, 0, owner_check=False).publish(
        1, 0, [pa.record_batch([pa.array([1, 2])], schema=schema)], schema, None,
        identities=["m-1", "m-2"])
    decode = _OtherShardsKept(lambda message: {"id": 0}, location, 1, 2, owner_check=False)

    def message(message_id: str, redelivered: bool) -> RabbitMQMessage:
        return RabbitMQMessage(b"{}", "q", "", redelivered, 1, message_id)

    with pytest.raises(SkipMessage, match="another shard of this query kept it"):
        decode(message("m-1", True))
    assert decode(message("m-3", True)) == {"id": 0}
    assert decode(message("m-2", False)) == {"id": 0}  # not redelivered: not looked up


@pytest.mark.parametrize(("options", "message"), [
    ({}, "option queue=None is not accepted: a queue name; it is required"),
    ({"queue": "q", "prefetch": "0"}, "option prefetch='0'"),
    ({"queue": "q", "prefetch": "70000"}, "option prefetch='70000'"),
    ({"queue": "q", "url": "amqp://h/?x=1"}, "no query or fragment"),
    ({"queue": "q", "passwordFile": "/nonexistent/pw"}, "option passwordFile="),
    ({"queue": "q", "tls": "maybe"}, "option tls='maybe'"),
    ({"queue": "q", "tls": "false", "url": "amqps://h/"}, "true with an amqps:// url"),
    ({"queue": "q", "format": "xml"}, "option format='xml'"),
    ({"queue": "q", "badPayloads": "skip"}, "skip only with format=json"),
    ({"queue": "q", "maxRecordsPerTrigger": "40000"}, "option maxRecordsPerTrigger='40000'"),
    ({"queue": "q", "prefetch": "100", "maxRecordsPerTrigger": "50"},
     "more than 2 x maxRecordsPerTrigger (100) without walLocation"),
])
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as caught:
        rabbitmq_publisher(FactoryOptions(options))
    assert message in str(caught.value)


def test_options_reach_the_publisher(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("pa:ss\n")
    publisher: Any = rabbitmq_publisher(FactoryOptions({
        "url": "amqp://spark@mq:5999/orders", "queue": "q", "passwordFile": str(secret),
        "prefetch": "500", "walLocation": "/x", "maxMessages": "7", "heartbeat": "5",
        "connectTimeoutMs": "2500", "maxMessageBytes": "4096"}))
    assert (publisher.host, publisher.port, publisher.vhost) == ("mq", 5999, "orders")
    assert (publisher.username, publisher.password) == ("spark", "pa:ss")
    assert (publisher.prefetch, publisher.max_messages, publisher.heartbeat) == (500, 7, 5)
    assert (publisher.connect_timeout, publisher.max_message_bytes) == (2.5, 4096)
    assert publisher.acknowledge == "on_durable"
    assert default_schema({}) == MESSAGE_SCHEMA
    with pytest.raises(OptionError, match="format=json parses each body"):
        default_schema({"format": "json"})
