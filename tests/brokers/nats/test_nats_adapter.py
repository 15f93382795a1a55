"""JetStreamPublisher against a real nats-server with JetStream on 127.0.0.1: demand bounds
what the consumer has delivered unacknowledged while its backlog grows, nothing is lost
across subscriptions, a held message is not redelivered past AckWait, and each error names
the server without showing a secret."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import nats_server
import pytest

from reactive_streams import Subscriber, Subscription, collect
from reactive_streams.adapters.nats_jetstream import (
    JetStreamError,
    JetStreamMessage,
    JetStreamPublisher,
    check_urls,
)


class Holding(Subscriber[JetStreamMessage]):
    """Requests when told, keeps what arrives."""

    def __init__(self) -> None:
        self.subscription: Subscription | None = None
        self.messages: list[JetStreamMessage] = []
        self.error: BaseException | None = None
        self.changed = threading.Condition()

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription

    def on_next(self, element: JetStreamMessage) -> None:
        with self.changed:
            self.messages.append(element)
            self.changed.notify_all()

    def on_error(self, error: BaseException) -> None:
        with self.changed:
            self.error = error
            self.changed.notify_all()

    def on_complete(self) -> None:
        pass

    def wait(self, count: int, timeout: float = 20.0) -> None:
        with self.changed:
            assert self.changed.wait_for(
                lambda: len(self.messages) >= count or self.error is not None, timeout), (
                f"{len(self.messages)} of {count} messages within {timeout} s")
            assert self.error is None, self.error


def _eventually(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        pause.wait(0.05)


def _ids(messages: list[JetStreamMessage]) -> list[int]:
    return [json.loads(m.data)["id"] for m in messages]


def test_demand_bounds_what_is_delivered_unacknowledged_while_the_backlog_grows(
        nats: nats_server.Server, stream: str) -> None:
    nats_server.create_consumer(nats, stream, "slow", ack_wait_s=3.0)
    nats_server.publish_json(nats, f"{stream}.a", 2000)
    publisher: JetStreamPublisher[JetStreamMessage] = JetStreamPublisher(
        nats.url, stream, "slow", acknowledge="on_durable", max_batch=100, **nats.credentials)
    slow = Holding()
    publisher.subscribe(slow)
    assert publisher.wait_ready(20)
    assert slow.subscription is not None
    slow.subscription.request(30)
    slow.wait(30)
    info = nats_server.consumer_info(nats, stream, "slow")
    # Demand is the bound: 30 requested, 30 delivered and held unacknowledged.
    assert (info.num_ack_pending, info.num_pending) == (30, 1970)
    nats_server.publish_json(nats, f"{stream}.a", 500, start=2000)
    # Past AckWait (3 s) the held messages are kept in progress (told every second), not
    # delivered again.
    assert not _eventually(lambda: nats_server.consumer_info(
        nats, stream, "slow").num_redelivered, timeout=4.0)
    info = nats_server.consumer_info(nats, stream, "slow")
    assert (info.num_ack_pending, info.num_pending) == (30, 2470)  # the backlog grew
    assert publisher.pending() == 2470
    slow.subscription.request(250)  # more than max_batch: in several pull requests
    slow.wait(280)
    publisher.on_durable(280)
    assert _eventually(lambda: nats_server.consumer_info(
        nats, stream, "slow").num_ack_pending == 0)
    assert _ids(slow.messages) == list(range(280))
    slow.subscription.cancel()
    assert publisher.wait_closed(10)


def test_a_new_subscription_gets_what_the_last_did_not_acknowledge(
        nats: nats_server.Server, stream: str) -> None:
    nats_server.create_consumer(nats, stream, "restart", ack_wait_s=30.0)
    nats_server.publish_json(nats, f"{stream}.a", 300)
    first: JetStreamPublisher[JetStreamMessage] = JetStreamPublisher(
        nats.url, stream, "restart", acknowledge="on_durable", linger=0.0,
        **nats.credentials)
    holding = Holding()
    first.subscribe(holding)
    assert first.wait_ready(20) and holding.subscription is not None
    holding.subscription.request(120)
    holding.wait(120)
    first.on_durable(70)  # 70 durable; 50 signalled and not: given back at cancel
    holding.subscription.cancel()
    assert first.wait_closed(10)
    # Given back (NAK), so delivered again at once rather than after AckWait (30 s).
    second: JetStreamPublisher[JetStreamMessage] = JetStreamPublisher(
        nats.url, stream, "restart", max_messages=230, **nats.credentials)
    rest = collect(second, timeout=20)
    assert sorted(_ids(rest)) == list(range(70, 300))
    again = [m for m in rest if m.redelivered]
    assert sorted(_ids(again)) == list(range(70, 120))
    assert all(m.num_delivered == 2 for m in again)
    # Acknowledged as each on_next returned: written once the connection has closed.
    assert second.wait_closed(10)
    assert nats_server.settled_counts(
        lambda: nats_server.consumer_info(nats, stream, "restart")) == (0, 0)


def test_errors_name_the_server_and_never_the_secret(
        nats: nats_server.Server, stream: str) -> None:
    nats_server.create_consumer(nats, stream, "c")
    address = f"127.0.0.1:{nats.port}"

    def failure(**given: Any) -> str:
        keywords = {"urls": nats.url, "stream": stream, "consumer": "c",
                    "connect_timeout": 3.0, **given}
        with pytest.raises(JetStreamError) as raised:
            collect(JetStreamPublisher(**keywords), timeout=20)
        return str(raised.value)

    refused = failure(username=nats_server.USER, password="not-the-password-42")
    assert address in refused and "refused the credentials" in refused
    assert "not-the-password-42" not in refused
    assert "refused the credentials" in failure()  # no credentials at all
    missing = failure(stream="NOSUCH", **nats.credentials)
    assert f"nats {address}: the stream 'NOSUCH' does not exist" in missing
    no_consumer = failure(consumer="nobody", **nats.credentials)
    assert "has no consumer 'nobody'" in no_consumer and "createConsumer" in no_consumer
    unreachable = failure(urls=f"nats://127.0.0.1:{nats_server.free_port()}",
                          connect_timeout=1.0)
    assert "could not connect" in unreachable and "Connect call failed" in unreachable
    # createConsumer makes the missing consumer, and it reads.
    made: JetStreamPublisher[JetStreamMessage] = JetStreamPublisher(
        nats.url, stream, "made", create_consumer=True, filter_subject=f"{stream}.b",
        ack_wait=5.0, max_messages=2, **nats.credentials)
    nats_server.publish_json(nats, f"{stream}.a", 3)
    nats_server.publish_json(nats, f"{stream}.b", 2, start=10)
    assert _ids(collect(made, timeout=20)) == [10, 11]
    info = nats_server.consumer_info(nats, stream, "made")
    assert info.config.ack_wait == 5.0 and info.config.filter_subject == f"{stream}.b"


def test_bad_parameters_and_urls_are_refused_at_once() -> None:
    for urls, why in (("http://h:1", "nats://host:port"), ("nats://u:pw@h:1", "credentials"),
                      ("nats://h:99999", "port"), ("", "URLs are needed")):
        with pytest.raises(ValueError, match=why) as raised:
            check_urls(urls)
        assert "pw" not in str(raised.value)
    with pytest.raises(ValueError, match="stream 'a.b'"):
        JetStreamPublisher("nats://h", "a.b", "c")
    with pytest.raises(ValueError, match="password: accepted only with a username"):
        JetStreamPublisher("nats://h", "s", "c", password="x")


def test_tls_with_a_ca_file() -> None:
    import ssl

    with nats_server.Server(tls=True) as server:
        nats_server.create_stream(server, "TLS")
        nats_server.create_consumer(server, "TLS", "c")
        nats_server.publish_json(server, "TLS.a", 3)
        context = ssl.create_default_context(cafile=str(server.ca_file))
        publisher: JetStreamPublisher[JetStreamMessage] = JetStreamPublisher(
            server.url, "TLS", "c", tls=context, max_messages=3, **server.credentials)
        assert _ids(collect(publisher, timeout=20)) == [0, 1, 2]
        with pytest.raises(JetStreamError, match="could not connect"):
            # The system's authorities do not know the test's.
            collect(JetStreamPublisher(server.url, "TLS", "c", max_messages=1,
                                       connect_timeout=3.0, **server.credentials),
                    timeout=20)
