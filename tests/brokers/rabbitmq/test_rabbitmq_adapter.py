"""RabbitMQPublisher against a real RabbitMQ node (tests/peers/rabbitmq_server.py): the
window follows demand (read from ``rabbitmqctl list_queues``), nothing is lost across a
close and a new subscription, acknowledgements only once durable, bodies over the limit,
and the errors a user meets (refused credentials, missing queue, unreachable port, bad
URL, TLS)."""

from __future__ import annotations

import json
import ssl
import threading
import time
import uuid
from typing import Any

import pytest
import rabbitmq_server
from ports import free_port
from rabbitmq_server import Node, publish_json

from reactive_streams import Subscriber, Subscription
from reactive_streams.adapters.rabbitmq import (
    RabbitMQError,
    RabbitMQMessage,
    RabbitMQPublisher,
    parse_url,
)


class Holder(Subscriber[RabbitMQMessage]):
    """Requests what the test says, and holds what arrives."""

    def __init__(self) -> None:
        self.got: list[RabbitMQMessage] = []
        self.error: BaseException | None = None
        self.completed = False
        self.subscription: Subscription | None = None
        self.changed = threading.Condition()

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription

    def on_next(self, element: RabbitMQMessage) -> None:
        with self.changed:
            self.got.append(element)
            self.changed.notify_all()

    def on_error(self, error: BaseException) -> None:
        with self.changed:
            self.error = error
            self.changed.notify_all()

    def on_complete(self) -> None:
        with self.changed:
            self.completed = True
            self.changed.notify_all()

    def request(self, n: int) -> None:
        assert self.subscription is not None
        self.subscription.request(n)

    def wait_for(self, count: int, timeout: float = 20.0) -> list[RabbitMQMessage]:
        with self.changed:
            assert self.changed.wait_for(
                lambda: len(self.got) >= count or self.error is not None, timeout), (
                f"{len(self.got)} of {count} messages within {timeout} s")
            if self.error is not None:
                raise self.error
            return list(self.got)

    def wait_error(self, timeout: float = 20.0) -> BaseException:
        with self.changed:
            assert self.changed.wait_for(lambda: self.error is not None, timeout), (
                f"no error within {timeout} s; got {len(self.got)} messages")
            assert self.error is not None
            return self.error


def _counts_become(node: Node, queue: str, check: Any, timeout: float = 15.0
                   ) -> tuple[int, int]:
    """rabbitmqctl's (ready, unacknowledged) once ``check`` holds for them (the broker
    refreshes them every 500 ms here); fails with the last counts after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        counts = node.queue_counts(queue)
        if check(*counts) or time.monotonic() > deadline:
            assert check(*counts), f"(ready, unacknowledged) stayed {counts}"
            return counts


def _ids(messages: list[RabbitMQMessage]) -> list[int]:
    return [json.loads(m.body)["id"] for m in messages]


def test_a_slow_subscriber_leaves_the_backlog_in_the_queue(node: Node, queue: str) -> None:
    publish_json(node, queue, 300)
    publisher = RabbitMQPublisher(queue, url=node.url, acknowledge="on_durable",
                                  prefetch=1000)
    holder = Holder()
    publisher.subscribe(holder)
    assert publisher.wait_consuming(20)
    holder.request(50)
    assert _ids(holder.wait_for(50)) == list(range(50))
    # The bound: max(1, signalled and not yet durable (50) + demand not met (0)).
    _counts_become(node, queue, lambda ready, unacked: unacked == 50 and ready == 250)
    publish_json(node, queue, 200, start=300)  # the backlog grows in the broker, not here
    _, unacked = _counts_become(node, queue, lambda ready, unacked: ready == 450)
    assert unacked == 50
    assert publisher.received == 50
    publisher.on_durable(30)  # acknowledged: the window shrinks with them
    _counts_become(node, queue, lambda ready, unacked: unacked == 20)
    holder.request(100)
    assert len(holder.wait_for(150)) == 150
    # 120 signalled and not durable, none beyond demand: never the prefetch's 1000.
    _counts_become(node, queue, lambda ready, unacked: unacked == 120 and ready == 350)
    assert publisher.pending() == 350  # the queue's ready ones (and none held)
    holder.subscription.cancel()  # type: ignore[union-attr]
    publisher.on_durable(150)
    assert publisher.wait_closed(10)
    _counts_become(node, queue, lambda ready, unacked: unacked == 0 and ready == 350)


def test_a_closed_subscription_loses_nothing_and_its_unacknowledged_come_again(
        node: Node, queue: str) -> None:
    publish_json(node, queue, 200)
    first = RabbitMQPublisher(queue, url=node.url, acknowledge="on_durable", linger=0)
    holder = Holder()
    first.subscribe(holder)
    holder.request(80)
    holder.wait_for(80)
    first.on_durable(60)  # 60 durable and acknowledged; 20 signalled, not durable
    holder.subscription.cancel()  # type: ignore[union-attr]
    assert first.wait_closed(10)
    again = RabbitMQPublisher(queue, url=node.url, max_messages=140)
    holder = Holder()
    again.subscribe(holder)
    holder.request(1000)
    messages = holder.wait_for(140)
    assert sorted(_ids(messages)) == list(range(60, 200))  # none lost, none acknowledged twice
    redelivered = {m.message_id for m in messages if m.redelivered}
    assert {f"m-{i}" for i in range(60, 80)} <= redelivered
    assert {again.identity(m) for m in messages} == {f"m-{i}" for i in range(60, 200)}
    with holder.changed:
        assert holder.changed.wait_for(lambda: holder.completed, 10)
    assert again.wait_closed(10)
    _counts_become(node, queue, lambda ready, unacked: (ready, unacked) == (0, 0))


def test_a_body_over_max_message_bytes_fails_the_stream_and_stays_queued(
        node: Node, queue: str) -> None:
    publish_json(node, queue, 2)
    publish_json(node, queue, 1, start=2, body_pad=5000)
    publisher = RabbitMQPublisher(queue, url=node.url, max_message_bytes=1000)
    holder = Holder()
    publisher.subscribe(holder)
    holder.request(10)
    error = holder.wait_error()
    assert isinstance(error, RabbitMQError)
    assert "body of 5009 bytes, over max_message_bytes (1000)" in str(error)
    assert _ids(holder.got) == [0, 1]
    assert publisher.wait_closed(10)
    _counts_become(node, queue, lambda ready, unacked: (ready, unacked) == (1, 0))


def test_refused_credentials_name_the_user_and_never_the_password(node: Node,
                                                                  queue: str) -> None:
    publisher = RabbitMQPublisher(queue, host=node.host, port=node.port,
                                  username=node.username, password="not-the-password")
    holder = Holder()
    publisher.subscribe(holder)
    holder.request(1)
    message = str(holder.wait_error())
    assert f"rabbitmq {node.host}:{node.port}: the broker refused the credentials of user " \
           f"{node.username!r}" in message
    assert "not-the-password" not in message


def test_a_missing_queue_is_named_with_its_vhost(node: Node) -> None:
    publisher = RabbitMQPublisher("no-such-queue", url=node.url)
    holder = Holder()
    publisher.subscribe(holder)
    holder.request(1)
    assert "queue 'no-such-queue' not found in vhost '/'" in str(holder.wait_error())


def test_an_unreachable_port_is_named(node: Node) -> None:
    port = free_port()
    publisher = RabbitMQPublisher("q", host="127.0.0.1", port=port, connect_timeout=5)
    holder = Holder()
    publisher.subscribe(holder)
    holder.request(1)
    message = str(holder.wait_error())
    assert message.startswith(f"rabbitmq 127.0.0.1:{port}: could not connect: ")
    assert "refused" in message


@pytest.mark.parametrize(("url", "message"), [
    ("http://u:secret@h/", "url 'http://u:***@h/': amqp://... or amqps://... is accepted"),
    ("amqp://u:secret@:5672/", "a host is needed"),
    ("amqp://h:99999/", "not a URL"),
    ("amqp://h/?heartbeat=5", "no query or fragment is accepted"),
])
def test_bad_urls_are_refused_without_their_password(url: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        RabbitMQPublisher("q", url=url)
    assert message in str(caught.value)
    assert "secret" not in str(caught.value)


def test_url_parts() -> None:
    assert parse_url("amqp://a%40b:p%3Aw@host:1234/v%2Fh") == (
        "host", 1234, "v/h", "a@b", "p:w", False)
    assert parse_url("amqp://host") == ("host", 5672, "/", None, None, False)


def test_tls_with_the_node_s_certificate_authority(node: Node, queue: str) -> None:
    assert node.tls_port is not None
    publish_json(node, queue, 5)
    context = ssl.create_default_context(cafile=str(node.ca_file))
    publisher = RabbitMQPublisher(queue, host=node.host, port=node.tls_port,
                                  username=node.username, password=node.password,
                                  tls=context, max_messages=5)
    holder = Holder()
    publisher.subscribe(holder)
    holder.request(5)
    assert _ids(holder.wait_for(5)) == list(range(5))
    # Without the test's authority the server's certificate is not trusted.
    untrusted = RabbitMQPublisher(queue, host=node.host, port=node.tls_port, tls=True,
                                  username=node.username, password=node.password)
    holder = Holder()
    untrusted.subscribe(holder)
    holder.request(1)
    assert "could not connect: [SSL: CERTIFICATE_VERIFY_FAILED]" in str(holder.wait_error())


def test_the_peer_s_mqtt_listener(node: Node) -> None:
    # The MQTT 3.1.1 work tests against this listener: it must come up.
    assert node.wait_mqtt(30) == node.mqtt_port
    assert rabbitmq_server.Node.username == node.username


def _varied_messages(user: str) -> list[tuple[bytes, Any]]:
    """Bodies and properties for the direct reading of deliveries: each property (user_id
    must be the publishing user's), headers of the field kinds a producer sends, text
    that is not ASCII and a message_id that is not UTF-8, an empty body, and bodies over
    one frame (read by pika) between messages read directly."""
    import pika

    full = pika.BasicProperties(
        content_type="application/json", content_encoding="identity",
        headers={"n": 7, "big": 2**40, "t": "ünï", "b": b"\x00\xff", "l": [1, "x"],
                 "d": {"inner": True}, "none": None},
        delivery_mode=2, priority=3, correlation_id="c-1", reply_to="r", expiration="600000",
        message_id="m-ü", timestamp=1_700_000_000, type="kind", user_id=user,
        app_id="app", cluster_id="c")
    odd_id = pika.BasicProperties(message_id=b"\xff\xfe-id")  # type: ignore[arg-type]
    return [(b'{"id": 0}', full), (b"", pika.BasicProperties()),
            (b"x" * 300_000, pika.BasicProperties(message_id="big-1")),
            (b'{"id": 3}', odd_id), (b"y" * 140_000, pika.BasicProperties(headers={})),
            *[(json.dumps({"id": i}).encode(), pika.BasicProperties(message_id=f"m-{i}"))
              for i in range(5, 2_000)]]


def test_deliveries_read_from_the_bytes_are_those_pika_reads(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection thread reads deliveries from the received bytes (_amqp_deliveries);
    the same messages, read through pika's own frames, compare equal, in the same order,
    and most were read directly."""
    from reactive_streams.adapters import _amqp_deliveries
    from reactive_streams.adapters import rabbitmq as adapter

    exchange = f"fan-{uuid.uuid4().hex[:10]}"
    queues = [node.declare_queue(), node.declare_queue()]
    with node.connection() as connection:
        channel = connection.channel()
        channel.exchange_declare(exchange, "fanout", auto_delete=True)
        for name in queues:
            channel.queue_bind(name, exchange)
        channel.confirm_delivery()
        messages = _varied_messages(node.username)
        for body, properties in messages:
            channel.basic_publish(exchange, "key-ü", body, properties)
    readers: list[Any] = []

    class Counted(_amqp_deliveries.DeliveryReader):
        def install(self) -> bool:
            readers.append(self)
            return super().install()

    monkeypatch.setattr(adapter, "DeliveryReader", Counted)
    read = {}
    for name, direct in zip(queues, (False, True), strict=True):
        monkeypatch.setattr(adapter, "_READ_DELIVERIES", direct)
        publisher = RabbitMQPublisher(name, url=node.url, max_messages=len(messages),
                                      prefetch=500)
        holder = Holder()
        publisher.subscribe(holder)
        holder.request(len(messages))
        read[direct] = holder.wait_for(len(messages))
        assert publisher.wait_closed(10)
    # After a body over one frame, deliveries go through pika until pika has handed that
    # one over (its blocking channel does so later, in its own loop): the order holds.
    assert len(readers) == 1
    assert len(messages) // 2 <= readers[0].read <= len(messages) - 2, readers[0].read
    assert read[True] == read[False]
    assert [m.body for m in read[True]] == [body for body, _ in messages]
    first = read[True][0]
    assert (first.headers["t"], first.headers["d"], first.message_id, first.timestamp,
            first.content_type, first.routing_key, first.exchange) == (
        "ünï", {"inner": True}, "m-ü", 1_700_000_000, "application/json", "key-ü", exchange)
    assert read[True][3].message_id == b"\xff\xfe-id"
