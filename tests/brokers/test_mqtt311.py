"""The built-in ``mqtt`` over MQTT 3.1.1 against RabbitMQ's MQTT plugin (Debian's 3.10 speaks
3.1.1 only): a slow query holds the broker back. (Kills of a 3.1.1 query:
test_broker_kills.py.)"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rabbitmq_server
from pyspark.sql import DataFrame, SparkSession
from streaming import ProgressWatch, install
from test_broker_kills import _Idle, _mqtt_publish, _secret
from test_source import reactive

from reactive_streams.adapters.mqtt import MqttPublisher


@pytest.fixture(scope="module")
def node() -> Iterator[rabbitmq_server.Node]:
    running = rabbitmq_server.shared_node()
    try:
        running.wait_mqtt()
        yield running
    finally:
        rabbitmq_server.release_shared_node()


@pytest.fixture(scope="module")
def watch(spark: SparkSession) -> Iterator[ProgressWatch]:
    listener = install(spark)
    yield listener
    spark.streams.removeListener(listener)


def test_a_slow_query_over_mqtt_311_holds_the_broker_back(
        spark: SparkSession, watch: ProgressWatch, node: rabbitmq_server.Node,
        tmp_path: Path) -> None:
    client_id = f"slow-{uuid.uuid4().hex[:8]}"
    topic = f"{client_id}/in"
    per_trigger, published = 50, 2000
    # RabbitMQ keeps a 3.1.1 persistent session's messages in this queue.
    queue = f"mqtt-subscription-{client_id}qos1"
    session: MqttPublisher[Any] = MqttPublisher(
        node.host, topic, port=node.mqtt_port, client_id=client_id, protocol="3.1.1",
        username=node.username, password=node.password)
    idle = _Idle()
    session.subscribe(idle)
    assert session.wait_subscribed(30) and idle.subscription is not None
    idle.subscription.cancel()
    assert session.wait_closed(10)
    _mqtt_publish(node, topic, 0, published)

    df = reactive(spark, publisher="mqtt", host=node.host, port=node.mqtt_port, topic=topic,
                  clientId=client_id, protocol="3.1.1", username=node.username,
                  passwordFile=_secret(tmp_path, "password", node.password),
                  maxRecordsPerTrigger=per_trigger, walLocation=tmp_path / "wal").load()
    held = threading.Event()
    taken: list[int] = []

    def slow(batch: DataFrame, batch_id: int) -> None:
        if len(taken) >= 2:
            held.wait(120)  # the query holds its third batch until the test is done
        else:
            taken.append(batch.count())

    query = df.writeStream.foreachBatch(slow).start()
    try:
        watch.wait_batches(query, 2)
        ready, unacknowledged = _settled_counts(node, queue)
    finally:
        held.set()
        query.stop()
    # The query read two batches and the source at most one more ahead, plus what the
    # publisher holds beyond demand (maxRecordsPerTrigger): the rest stays in the broker.
    assert ready >= published - 4 * per_trigger, (ready, unacknowledged, taken)
    # Acknowledged once in the log (walLocation), so the broker's unacknowledged messages
    # are at most those read and not yet logged: within its own window (mqtt.prefetch, 10).
    assert unacknowledged <= 2 * per_trigger, (ready, unacknowledged)
    print(f"\nmqtt 3.1.1 slow query: {ready} ready and {unacknowledged} unacknowledged in "
          f"the broker after batches of {taken}")


def _settled_counts(node: rabbitmq_server.Node, queue: str) -> tuple[int, int]:
    """The queue's counts once two readings a statistics interval apart agree (RabbitMQ
    refreshes them every 500 ms)."""
    pause = threading.Event()
    last = node.queue_counts(queue)
    for _ in range(60):
        pause.wait(0.6)
        now = node.queue_counts(queue)
        if now == last:
            return now
        last = now
    raise AssertionError(f"the queue's counts kept changing: {last}")
