"""RabbitMQSubscriber against the real node: the TCK (blackbox), an unroutable message and
refused credentials fail it, and a query's output fed through ``SubscriberForeachWriter``
whose writer fails once in the middle of a batch leaves every row in the queue after the
batch runs again: some twice (RabbitMQ does not deduplicate: at least once), each
``message_id`` standing for one row, so deduplicating by ``message_id`` gives every row
once."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from rabbitmq_server import Node, fails_once_writer
from test_source import reactive

from pyspark_reactive.sink.foreach_writer import SubscriberForeachWriter
from reactive_streams import IterablePublisher, Subscriber
from reactive_streams.adapters._confirming import BrokerRefused
from reactive_streams.adapters.rabbitmq import RabbitMQSubscriber
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.subscriber_blackbox import SubscriberBlackboxVerification


def _drain(node: Node, queue: str) -> list[tuple[str | None, Any]]:
    """Every message in ``queue`` as (message_id, JSON body), taken and acknowledged."""
    connection = node.connection()
    try:
        channel = connection.channel()
        got = []
        while True:
            method, properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            assert properties.delivery_mode == 2  # persistent
            got.append((properties.message_id, json.loads(body)))
    finally:
        connection.close()


class TestRabbitMQSubscriber(SubscriberBlackboxVerification[int]):
    """Each check's subscriber publishes to a queue of its own, 4 messages a window."""

    @pytest.fixture(autouse=True)
    def _node(self, node: Node) -> None:
        self.node = node

    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=2000,
                               default_no_signals_timeout_millis=100,
                               default_poll_timeout_millis=20)

    def create_subscriber(self) -> Subscriber[int]:
        return RabbitMQSubscriber(self.node.declare_queue(), url=self.node.url, window=4)

    def create_element(self, element: int) -> int:
        return element


def test_confirmed_persistent_messages_with_deterministic_ids(node: Node, queue: str) -> None:
    for _ in range(2):  # the same batch twice: the same message_id values
        subscriber = RabbitMQSubscriber(queue, url=node.url, window=7, prefix="q-")
        subscriber._own_scope = "batch-7"  # what batch_scope() gives under Spark
        IterablePublisher(lambda: iter(range(20))).subscribe(subscriber)
        subscriber.wait_done(20)
        assert subscriber.confirmed == 20
    got = _drain(node, queue)
    assert [body for _, body in got] == list(range(20)) * 2  # at least once: twice here
    assert [i for i, _ in got][:20] == [f"q-batch-7.{n}" for n in range(20)]
    assert dict(got) == {f"q-batch-7.{n}": n for n in range(20)}  # each id stands for one


def test_an_unroutable_message_fails_it(node: Node) -> None:
    subscriber = RabbitMQSubscriber("no-queue-is-bound-to-this", url=node.url)
    IterablePublisher(lambda: iter(range(3))).subscribe(subscriber)
    with pytest.raises(BrokerRefused, match="312 NO_ROUTE"):
        subscriber.wait_done(20)


def test_refused_credentials_fail_it_and_never_show_the_password(node: Node,
                                                                 queue: str) -> None:
    subscriber = RabbitMQSubscriber(queue, host=node.host, port=node.port,
                                    username=node.username, password="wrong-secret-2")
    IterablePublisher(lambda: iter(range(3))).subscribe(subscriber)
    with pytest.raises(BrokerRefused, match="refused the credentials") as raised:
        subscriber.wait_done(20)
    assert "wrong-secret-2" not in str(raised.value)


def test_a_batch_failed_mid_way_and_run_again_leaves_every_row(
        spark: SparkSession, node: Node, queue: str, tmp_path: Path) -> None:
    count = 400
    marker = str(tmp_path / "failed-once")
    # In the peers' module: Spark's workers import it (this folder is not on their path).
    writer = SubscriberForeachWriter(functools.partial(fails_once_writer, marker, node.url,
                                                       queue))
    queries: list[StreamingQuery] = []

    def run() -> StreamingQuery:
        df = reactive(spark, publisher="range", count=count, maxRecordsPerTrigger=count,
                      numPartitions=2, walLocation=tmp_path / "wal").load()
        query = (df.writeStream.foreach(writer)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        queries.append(query)
        return query

    try:
        # The refusal fails the task (close() raises what wait_done() raises), so the
        # batch is not committed and the query fails; restarted from its checkpoint, it
        # runs the batch again from its first row: the rows the failed attempt published
        # come again, with the same message_id.
        query = run()
        with pytest.raises(Exception, match="injected: the writer fails"):
            query.processAllAvailable()
        assert os.path.exists(marker)  # the writer did fail once, mid-batch
        query = run()
        query.processAllAvailable()
        query.stop()
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    got = _drain(node, queue)
    values = [next(iter(body.values())) for _, body in got]
    assert set(values) == set(range(count))  # every row arrived
    assert len(values) > count  # the failed batch's first rows twice: at least once
    by_id = dict(got)  # deduplicated by message_id: each row once
    assert sorted(next(iter(body.values())) for body in by_id.values()) == list(range(count))
