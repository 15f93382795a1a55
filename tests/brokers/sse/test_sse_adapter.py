"""SsePublisher against a real SSE server (sse-starlette under uvicorn): reconnection with
Last-Event-ID, backpressure down to the server, errors, and the TCK."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
from sse_server import SseServer

from pyspark_reactive.publishers.sse import sse_publisher
from pyspark_reactive.source.durability import FactoryOptions
from reactive_streams import Publisher, Subscriber, Subscription, collect
from reactive_streams.adapters.sse import SseError, SsePublisher
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import LONG_MAX, PublisherVerification


def _closed_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port: int = listener.getsockname()[1]
        return port


def test_a_dropped_connection_resumes_from_the_last_event_id(sse_server: SseServer) -> None:
    before = len(sse_server.last_event_ids)
    events = collect(SsePublisher(sse_server.url(count=12, close_after=5, retry=50),
                                  max_events=12), timeout=30)
    assert [e.id for e in events] == [str(n) for n in range(1, 13)]
    assert sse_server.last_event_ids[before:] == [None, "5", "10"]


def test_last_event_id_starts_a_subscription_after_that_event(sse_server: SseServer) -> None:
    events = collect(SsePublisher(sse_server.url(count=8), last_event_id="5", max_events=3),
                     timeout=30)
    assert [e.id for e in events] == ["6", "7", "8"]


class _Holding(Subscriber[Any]):
    def __init__(self) -> None:
        self.subscription: Subscription | None = None
        self.received = 0
        self.changed = threading.Condition()

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription

    def on_next(self, element: Any) -> None:
        with self.changed:
            self.received += 1
            self.changed.notify_all()

    def on_error(self, error: BaseException) -> None:
        pass

    def on_complete(self) -> None:
        pass

    def wait_for(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.received >= n, timeout=30), (
                f"{self.received} events of {n}")


def _settled(read: Any, quiet: float = 0.5, timeout: float = 20.0) -> int:
    """The value of ``read()`` once it has not changed for ``quiet`` seconds."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout
    value = read()
    while time.monotonic() < deadline:
        pause.wait(quiet)
        again = read()
        if again == value:
            return int(value)
        value = again
    raise AssertionError(f"still changing after {timeout} s: {value}")


def test_a_subscriber_that_stops_requesting_holds_the_server_back() -> None:
    # A server of its own: its produced count is this stream's alone.
    size = 4000
    with SseServer() as server:
        publisher = SsePublisher(server.url(size=size), max_buffered=8,
                                 receive_buffer=16 * 1024)
        holding = _Holding()
        publisher.subscribe(holding)
        assert holding.subscription is not None
        holding.subscription.request(20)
        holding.wait_for(20)
        # The server stops producing: it settles while nothing more is requested.
        produced = _settled(lambda: server.produced)
        # What it got out beyond what was signalled sits in this side's buffer
        # (max_buffered events), this socket's receive buffer (16 KiB asked; Linux
        # doubles it), uvicorn's write buffer (64 KiB) and the kernel's send buffer, which
        # grows up to tcp_wmem's maximum (4 MiB by default): the server's to set.
        wire = size + 40  # an event's bytes on the wire: its id, data and padding
        bound = 8 + (2 * 16 * 1024 + 64 * 1024 + _send_buffer_max()) // wire + 1
        assert produced - holding.received <= bound, (produced, holding.received, bound)
        held_at = produced
        holding.subscription.request(3 * bound)
        holding.wait_for(20 + 3 * bound)
        assert server.produced > held_at  # it was held, not finished
        holding.subscription.cancel()
    print(f"\nheld back: the server had produced {held_at} events for 20 signalled "
          f"(events of {size} bytes; the bound from the buffers: {bound})")


def _send_buffer_max() -> int:
    """The most a TCP socket's send buffer grows to here (tcp_wmem's maximum)."""
    with open("/proc/sys/net/ipv4/tcp_wmem", encoding="ascii") as file:
        return int(file.read().split()[2])


def test_refused_credentials_name_the_url_without_its_query(sse_server: SseServer) -> None:
    with pytest.raises(SseError, match="refused the credentials: HTTP 401") as caught:
        collect(SsePublisher(sse_server.url("/private", token="t0ps3cret")), timeout=30)
    assert "t0ps3cret" not in str(caught.value)
    events = collect(SsePublisher(sse_server.url("/private", count=2), max_events=2,
                                  headers={"Authorization": f"Bearer {sse_server.token}"}),
                     timeout=30)
    assert [e.id for e in events] == ["1", "2"]


def test_a_response_that_is_no_event_stream_fails(sse_server: SseServer) -> None:
    with pytest.raises(SseError, match="Content-Type is 'text/plain'"):
        collect(SsePublisher(sse_server.url("/plain")), timeout=30)


def test_204_completes_the_stream(sse_server: SseServer) -> None:
    assert collect(SsePublisher(sse_server.url("/gone")), timeout=30) == []


def test_an_unreachable_server_fails_after_give_up_after() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/events"
    with pytest.raises(SseError, match="no working connection for give_up_after=0.3 s"):
        collect(SsePublisher(url, give_up_after=0.3), timeout=30)


def test_an_event_over_max_event_bytes_fails(sse_server: SseServer) -> None:
    with pytest.raises(SseError, match="longer than max_event_bytes=64"):
        collect(SsePublisher(sse_server.url(count=3, size=200), max_event_bytes=64),
                timeout=30)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"url": "ftp://x/y"}, "url 'ftp://x/y': an http:// or https:// URL is needed"),
    ({"url": "http://h/e", "max_buffered": 0}, "max_buffered 0"),
    ({"url": "http://h/e", "headers": {"A": "b\r\nC: d"}}, "without line breaks"),
    ({"url": "http://h/e", "give_up_after": 0}, "give_up_after 0"),
])
def test_bad_parameters_name_themselves(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SsePublisher(**kwargs)


class TestSseBuiltin(PublisherVerification[Any]):
    """The built-in ``sse`` (rows as dicts) as the TCK sees it, with ``maxEvents`` for a
    finite stream."""

    server: SseServer

    @classmethod
    def setup_class(cls) -> None:
        cls.server = SseServer().start()

    @classmethod
    def teardown_class(cls) -> None:
        cls.server.stop()

    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=3000,
                               default_no_signals_timeout_millis=100,
                               default_poll_timeout_millis=20)

    def stochastic_runs(self, default: int) -> int:
        return min(default, 5)  # each run is a connection

    def create_publisher(self, elements: int) -> Publisher[Any]:
        options = {"url": self.server.url()}
        if elements != LONG_MAX:
            options["maxEvents"] = str(elements)
        publisher: Publisher[Any] = sse_publisher(FactoryOptions(options))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        publisher: Publisher[Any] = sse_publisher(FactoryOptions(
            {"url": f"http://127.0.0.1:{_closed_port()}/events", "giveUpAfterMs": "200"}))
        return publisher


def test_an_event_cut_off_by_a_dropped_connection_is_asked_for_again() -> None:
    # The spec's last event id changes only once an event is complete (the blank line):
    # a connection dropped between an event's id and its end asks for that event again.
    served: list[str | None] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
            b"\r\nretry: 100\n\n")

    def serve() -> None:
        for body in (b"id: 1\ndata: a\n\nid: 2\ndata: b\n",  # cut off before event 2 ends
                     b"id: 2\ndata: b\n\nid: 3\ndata: c\n\n"):
            connection, _ = listener.accept()
            with connection:
                request = connection.recv(65536).decode()
                served.append(next((line.split(": ", 1)[1] for line in request.split("\r\n")
                                    if line.lower().startswith("last-event-id")), None))
                connection.sendall(head + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        events = collect(SsePublisher(f"http://127.0.0.1:{port}/s", max_events=3), timeout=30)
    finally:
        listener.close()
    assert [(e.id, e.data) for e in events] == [("1", "a"), ("2", "b"), ("3", "c")]
    assert served == [None, "1"]


def test_secrets_in_urls_and_headers_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="must be percent-encoded") as caught:
        SsePublisher("http://127.0.0.1:1/s?token=TOP SECRET")
    assert "SECRET" not in str(caught.value)
    with pytest.raises(ValueError, match="in Latin-1") as caught:
        SsePublisher("http://127.0.0.1:1/s", headers={"Authorization": "Bearer s\u20accret"})
    assert "cret" not in str(caught.value)
