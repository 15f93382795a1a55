"""RedisStreamPublisher against a real redis-server (tests/peers/redis_server.py): demand is
the group's own flow control (XPENDING stays within what was requested while the stream
grows), a new subscription rereads its consumer's pending entries first, a dead consumer's
are claimed, the byte budget, TLS, and errors that name host:port and never the password.
No Spark."""

from __future__ import annotations

import json
import queue
import threading
from typing import Any

import pytest
import redis_server
from polling import wait_until
from redis_server import RedisServer

from reactive_streams import Subscriber, Subscription, collect
from reactive_streams.adapters.redis_streams import (
    RedisEntry,
    RedisError,
    RedisStreamPublisher,
    SkipEntry,
    entry_bytes,
    parse_url,
)


class Holding(Subscriber[Any]):
    """Requests only what the test asks for, and keeps what arrives."""

    def __init__(self) -> None:
        self.subscription: Subscription | None = None
        self.subscribed = threading.Event()
        self.received: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None
        self.ended = threading.Event()

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.subscribed.set()

    def on_next(self, element: Any) -> None:
        self.received.put(element)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.ended.set()

    def on_complete(self) -> None:
        self.ended.set()

    def request(self, n: int) -> None:
        assert self.subscribed.wait(10)
        assert self.subscription is not None
        self.subscription.request(n)

    def take(self, n: int, timeout: float = 10.0) -> list[Any]:
        return [self.received.get(timeout=timeout) for _ in range(n)]


def _reader(server: RedisServer, stream: str, consumer: str = "c", **kwargs: Any
            ) -> RedisStreamPublisher[Any]:
    kwargs.setdefault("password", server.password)
    return RedisStreamPublisher(stream, "g", consumer, port=server.port, **kwargs)


def _ids(entries: list[RedisEntry]) -> list[int]:
    return [json.loads(entry.fields[b"payload"])["id"] for entry in entries]


def test_demand_bounds_the_groups_pending_entries_and_a_restart_rereads_them(
        server: RedisServer, stream: str) -> None:
    added = _add(server, stream, 100)
    _group(server, stream)
    publisher = _reader(server, stream, max_buffered=10, acknowledge="on_durable")
    holder = Holding()
    publisher.subscribe(holder)
    holder.request(25)
    first = holder.take(25)
    assert _ids(first) == list(range(25))
    assert not any(entry.redelivered for entry in first)
    # The stated bound: signalled and not acknowledged, plus min(demand, max_buffered).
    added += _add(server, stream, 500, start=100)
    assert redis_server.stream_length(server, stream) == 600
    assert redis_server.pending_count(server, stream, "g") == 25
    publisher.on_durable(10)
    assert redis_server.pending_count(server, stream, "g") == 15
    holder.request(5)
    assert _ids(holder.take(5)) == list(range(25, 30))
    assert redis_server.pending_count(server, stream, "g") == 20
    assert holder.received.empty()
    assert publisher.pending() == 570  # the group's lag: not yet delivered
    assert holder.subscription is not None
    holder.subscription.cancel()
    assert publisher.wait_closed(10)

    # The same consumer again: its 20 pending entries first, then the rest, none lost.
    again = _reader(server, stream, max_buffered=50, acknowledge="on_durable")
    reader = Holding()
    again.subscribe(reader)
    reader.request(600)
    entries = reader.take(590)
    assert [e.redelivered for e in entries[:20]] == [True] * 20
    assert _ids(entries) == list(range(10, 600))
    assert [e.id for e in entries[20:]] == added[30:]
    again.on_durable(590)
    assert redis_server.pending_count(server, stream, "g") == 0
    assert reader.subscription is not None
    reader.subscription.cancel()
    assert again.wait_closed(10)


def test_on_next_acknowledges_and_decode_skips(server: RedisServer, stream: str) -> None:
    _add(server, stream, 30)
    _group(server, stream)

    def decode(entry: RedisEntry) -> int:
        value = int(json.loads(entry.fields[b"payload"])["id"])
        if value % 10 == 3:
            raise SkipEntry("threes are left out")
        return value

    publisher = _reader(server, stream, max_messages=20, decode=decode)
    assert collect(publisher, timeout=20) == [i for i in range(22) if i % 10 != 3]
    assert publisher.skipped == 2
    assert redis_server.pending_count(server, stream, "g") == 0


def test_a_dead_consumers_entries_are_claimed(server: RedisServer, stream: str) -> None:
    _add(server, stream, 10)
    _group(server, stream)
    client = server.client()
    try:
        client.xreadgroup("g", "dead", {stream: ">"}, count=4)
    finally:
        client.close()
    publisher = _reader(server, stream, "alive", claim_idle_ms=1, max_messages=10)
    entries = collect(publisher, timeout=20)
    assert sorted(_ids(entries)) == list(range(10))
    assert [e.redelivered for e in entries].count(True) == 4
    assert redis_server.pending_count(server, stream, "g") == 0


def test_create_group_and_tls(server: RedisServer, stream: str) -> None:
    _add(server, stream, 5)
    publisher = RedisStreamPublisher(
        stream, "made", "c", url=f"rediss://127.0.0.1:{server.tls_port}",
        password=server.password, ca_certs=str(server.ca_file), create_group=True,
        start_id="0", max_messages=5)
    assert _ids(collect(publisher, timeout=20)) == list(range(5))
    # Without the certificate authority, the server's certificate is not trusted.
    untrusted = RedisStreamPublisher(stream, "made", "c", host="127.0.0.1",
                                     port=server.tls_port, tls=True,
                                     password=server.password, max_messages=1)
    with pytest.raises(RedisError, match="certificate verify failed"):
        collect(untrusted, timeout=20)


def test_an_entry_above_max_message_bytes_fails_the_stream_before_it_is_read(
        server: RedisServer, stream: str) -> None:
    client = server.client()
    try:
        client.xadd(stream, {"payload": b"x" * 1000})
        client.xadd(stream, {"payload": b"y" * 5000})
    finally:
        client.close()
    _group(server, stream)
    assert entry_bytes({b"payload": b"x" * 1000}) == 1135
    publisher = _reader(server, stream, max_message_bytes=2048, max_buffered=1)
    subscriber = Holding()
    publisher.subscribe(subscriber)
    subscriber.request(5)
    assert len(subscriber.take(1)[0].fields[b"payload"]) == 1000
    assert subscriber.ended.wait(20)
    assert isinstance(subscriber.error, RedisError)
    assert "a field of 5000 bytes, more than max_message_bytes (2048)" in str(subscriber.error)
    # The large entry stays pending for the consumer (not acknowledged).
    assert redis_server.pending_count(server, stream, "g") == 1


@pytest.mark.parametrize("case", ["password", "user", "port", "group", "stream"])
def test_errors_name_host_and_port_and_never_the_password(
        server: RedisServer, stream: str, case: str) -> None:
    secret = "not-the-password-123"
    kwargs: dict[str, Any] = {"password": secret}
    group = "g"
    port = server.port
    if case == "password":
        expected = "refused the credentials of the default user"
    elif case == "user":
        kwargs["username"] = "nobody"
        expected = "refused the credentials of user 'nobody'"
    elif case == "port":
        port = redis_server.free_port()
        expected = "could not connect"
    else:
        kwargs["password"] = server.password
        if case == "group":
            _add(server, stream, 1)
        group = "missing"
        expected = f"no stream {stream!r} with a consumer group 'missing'"
    publisher = RedisStreamPublisher(stream, group, "c", port=port, max_messages=1,
                                     connect_timeout=5, **kwargs)
    with pytest.raises(RedisError) as raised:
        collect(publisher, timeout=20)
    text = str(raised.value)
    assert f"redis 127.0.0.1:{port}: " in text and expected in text, text
    assert secret not in text and server.password not in text


def test_bad_parameters_and_urls() -> None:
    with pytest.raises(ValueError, match="max_buffered 0: an integer from 1"):
        RedisStreamPublisher("s", "g", "c", max_buffered=0)
    with pytest.raises(ValueError, match="stream '': a non-empty string"):
        RedisStreamPublisher("", "g", "c")
    with pytest.raises(ValueError, match="start_id 'x'"):
        RedisStreamPublisher("s", "g", "c", start_id="x")
    with pytest.raises(ValueError, match="the port is not a number") as raised:
        parse_url("redis://user:secret@h:port")
    assert "secret" not in str(raised.value)
    assert parse_url("redis://h/3") == ("h", 6379, 3, None, None, False)


def test_cancel_is_prompt_while_a_read_blocks(server: RedisServer, stream: str) -> None:
    _group(server, stream)
    publisher = _reader(server, stream, block_ms=200)
    subscriber = Holding()
    publisher.subscribe(subscriber)
    subscriber.request(10)
    wait_until(lambda: _blocked_clients(server) > 0, 10, "a blocked XREADGROUP")
    assert subscriber.subscription is not None
    subscriber.subscription.cancel()
    assert publisher.wait_closed(5)


def _blocked_clients(server: RedisServer) -> int:
    client = server.client()
    try:
        return int(client.info("clients")["blocked_clients"])
    finally:
        client.close()


def _add(server: RedisServer, stream: str, count: int, start: int = 0) -> list[str]:
    return redis_server.add_json(server, stream, count, start)


def _group(server: RedisServer, stream: str) -> None:
    redis_server.create_group(server, stream, "g", "0")
