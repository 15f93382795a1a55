"""Plain rsocket-py peers (none of pyspark-reactive's code) that the RSocket adapter, the
built-in ``rsocket`` publisher, ``serve`` and ``expose`` are tested and measured against.

:class:`CountingServer` answers request-streams with numbered payloads, only against the
demand it is given, and records every request and how many payloads it had sent at that
moment. :class:`PlainClient` requests a stream with demand the test controls, and keeps
every payload. Each runs its own event loop on a thread of its own, started and stopped
by the test (``with`` blocks). :class:`RecordingRange` is the other side's local
publisher: it records the demand that reaches it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reactivestreams.subscriber import Subscriber as RSocketSubscriber
from rsocket.extensions.composite_metadata import CompositeMetadata
from rsocket.extensions.helpers import authenticate_bearer, composite, route
from rsocket.extensions.mimetypes import WellKnownMimeTypes
from rsocket.extensions.routing import RoutingMetadata
from rsocket.frame import CancelFrame
from rsocket.helpers import single_transport_provider
from rsocket.payload import Payload
from rsocket.request_handler import BaseRequestHandler
from rsocket.rsocket_client import RSocketClient
from rsocket.rsocket_server import RSocketServer
from rsocket.transports.tcp import TransportTCP

from reactive_streams import Publisher, RangePublisher, Subscriber, Subscription

UNBOUNDED_REQUEST_N = 2**31 - 1
# Payloads sent between two yields to the loop, so the connection's writer keeps up.
_BURST = 256


class _LoopThread:
    """An event loop on a thread of its own, for one peer."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, function: Callable[[], Any]) -> None:
        self.loop.call_soon_threadsafe(function)

    def stall(self, resume: threading.Event) -> None:
        """Block the loop (its sockets go unread and unanswered) until ``resume`` is set."""
        stalled = threading.Event()

        def block() -> None:
            stalled.set()
            resume.wait(60)

        self.call(block)
        if not stalled.wait(30):
            raise AssertionError("the loop did not stall within 30 s")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


@dataclass
class StreamRecord:
    """What the server saw of one request-stream."""

    route: str | None
    data: bytes
    requests: list[int] = field(default_factory=list)
    # Outstanding demand (requested minus sent) right after each request: the most the
    # stream ever had outstanding, since only a request raises it.
    outstanding_after: list[int] = field(default_factory=list)
    sent: int = 0
    cancelled: bool = False  # by a CANCEL frame or by the connection's end
    cancel_frame: bool = False  # by a CANCEL frame
    completed: bool = False

    @property
    def requested(self) -> int:
        return sum(self.requests)

    @property
    def max_outstanding(self) -> int:
        return max(self.outstanding_after, default=0)


def numbered(index: int) -> bytes:
    return str(index).encode()


class _CountingStream:
    """An rsocket-py publisher and subscription: ``count`` payloads, against demand."""

    def __init__(self, server: CountingServer, record: StreamRecord, count: int) -> None:
        self._server = server
        self._record = record
        self._count = count
        self._demand = server.beyond_demand
        self._unbounded = False
        self._subscriber: Any = None
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, subscriber: Any) -> None:
        self._subscriber = subscriber
        subscriber.on_subscribe(self)

    def request(self, n: int) -> None:
        record = self._record
        with self._server.changed:
            record.requests.append(n)
            if n >= UNBOUNDED_REQUEST_N:
                self._unbounded = True
            self._demand += n
            record.outstanding_after.append(
                -1 if self._unbounded else record.requested - record.sent)
            self._server.changed.notify_all()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._send())

    def cancel(self) -> None:
        with self._server.changed:
            self._record.cancelled = True
            if self._server.handling_cancel_frame:
                self._record.cancel_frame = True
            self._server.changed.notify_all()
        if self._task is not None:
            self._task.cancel()

    async def _send(self) -> None:
        record, payload = self._record, self._server.payload
        if self._count == 0:
            self._finish()
            return
        burst = 0
        while (self._unbounded or self._demand > 0) and not record.cancelled:
            index = record.sent
            last = index + 1 == self._count
            with self._server.changed:
                record.sent += 1
                self._demand -= 1
            self._subscriber.on_next(Payload(payload(index)), is_complete=last)
            if last:
                self._finish()
                return
            burst += 1
            if burst == _BURST:
                burst = 0
                await asyncio.sleep(0)

    def _finish(self) -> None:
        if self._count == 0:
            self._subscriber.on_complete()
        with self._server.changed:
            self._record.completed = True
            self._server.changed.notify_all()


class _Refusing:
    def __init__(self, message: str) -> None:
        self._message = message

    def subscribe(self, subscriber: Any) -> None:
        subscriber.on_subscribe(self)
        subscriber.on_error(RuntimeError(self._message))

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


class _CountingHandler(BaseRequestHandler):
    def __init__(self, server: CountingServer) -> None:
        super().__init__()
        self._server = server

    async def request_stream(self, payload: Payload) -> Any:
        server = self._server
        metadata = payload.metadata or b""
        route_seen = None
        if metadata:
            for item in CompositeMetadata().parse(metadata).items:
                if isinstance(item, RoutingMetadata):
                    route_seen = item.tags[0].decode()
        data = bytes(payload.data or b"")
        record = StreamRecord(route_seen, data)
        with server.changed:
            server.streams.append(record)
            server.changed.notify_all()
        if route_seen == "fail":
            return _Refusing("the counting server refuses route 'fail'")
        count = int(data) if data.strip() else server.count
        return _CountingStream(server, record, count)


class _RecordingServer(RSocketServer):
    """Tells a stream's ``cancel()`` whether a CANCEL frame called it: rsocket-py also
    cancels every stream when the connection closes."""

    def __init__(self, server: CountingServer, *args: Any, **kwargs: Any) -> None:
        self._counting = server
        super().__init__(*args, **kwargs)

    async def _handle_next_frame(self, frame: Any, handlers: Any) -> None:
        cancel = isinstance(frame, CancelFrame)
        self._counting.handling_cancel_frame = cancel
        try:
            await super()._handle_next_frame(frame, handlers)
        finally:
            self._counting.handling_cancel_frame = False


class CountingServer:
    """A plain rsocket-py server on 127.0.0.1: a request-stream gets ``count`` payloads
    (or as many as the request's data says, when it holds a number), ``payload(i)`` being
    the ``i``-th; route ``fail`` gets an ERROR. Every stream is recorded in
    :attr:`streams`.
    """

    def __init__(self, count: int = 10, payload: Callable[[int], bytes] = numbered,
                 beyond_demand: int = 0) -> None:
        self.count = count
        self.payload = payload
        self.beyond_demand = beyond_demand  # payloads sent beyond the demand given (§1.1)
        self.handling_cancel_frame = False
        self.streams: list[StreamRecord] = []
        self.changed = threading.Condition()
        self._loop = _LoopThread("counting-rsocket-server")
        self._connections: list[RSocketServer] = []
        self._resume = threading.Event()
        self._server = self._loop.run(self._listen())
        self.port: int = self._server.sockets[0].getsockname()[1]

    async def _listen(self) -> asyncio.AbstractServer:
        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._connections.append(_RecordingServer(
                self, TransportTCP(reader, writer, 65536),
                handler_factory=lambda: _CountingHandler(self)))

        return await asyncio.start_server(accept, "127.0.0.1", 0)

    def wait_for(self, done: Callable[[], bool], timeout: float = 30.0,
                 what: str = "the condition") -> None:
        with self.changed:
            if not self.changed.wait_for(done, timeout):
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                                     f"streams: {self.streams}")

    def stall(self) -> None:
        """Stop answering (a hung server whose connections stay up) until :meth:`resume`."""
        self._resume.clear()
        self._loop.stall(self._resume)

    def resume(self) -> None:
        self._resume.set()

    def close(self) -> None:
        self.resume()

        async def shut() -> None:
            self._server.close()
            for connection in self._connections:
                await connection.close()

        self._loop.run(shut())
        self._loop.stop()

    def __enter__(self) -> CountingServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Keeper(RSocketSubscriber):
    def __init__(self, client: PlainClient) -> None:
        self._client = client

    def on_subscribe(self, subscription: Any) -> None:
        pass

    def on_next(self, value: Payload, is_complete: bool = False) -> None:
        client = self._client
        with client.changed:
            client.payloads.append(bytes(value.data or b""))
            if is_complete:
                client.completed = True
            # Waking a waiter per payload would cost the loop's thread the GIL each time
            # (and the ceiling its rate): only when what it waits for may have come.
            if is_complete or len(client.payloads) >= client.wake_at:
                client.changed.notify_all()

    def on_error(self, exception: Exception) -> None:
        with self._client.changed:
            self._client.error = exception
            self._client.changed.notify_all()

    def on_complete(self) -> None:
        with self._client.changed:
            self._client.completed = True
            self._client.changed.notify_all()


class PlainClient:
    """A plain rsocket-py client of one request-stream, with demand the caller gives:
    ``request_stream(initial)`` then ``request(n)``; every payload's data is kept in
    :attr:`payloads`. ``token``: presented in SETUP as a bearer token (composite
    metadata, RSocket's authentication extension), as any RSocket library can."""

    def __init__(self, port: int, host: str = "127.0.0.1",
                 receive_buffer: int | None = None, token: str | None = None) -> None:
        self.payloads: list[bytes] = []
        self.wake_at = 1  # payloads that wake a waiter (wait_payloads sets it)
        self.completed = False
        self.error: Exception | None = None
        self.changed = threading.Condition()
        self._loop = _LoopThread("plain-rsocket-client")
        self._requester: Any = None
        self._resume = threading.Event()
        self._client: RSocketClient = self._loop.run(self._connect(host, port, receive_buffer,
                                                                  token))

    async def _connect(self, host: str, port: int, receive_buffer: int | None,
                       token: str | None) -> RSocketClient:
        sock = socket.socket()
        if receive_buffer is not None:
            # Before connecting, so that the window offered to the server is that small.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.socket = sock
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
        reader, writer = await asyncio.open_connection(sock=sock)
        setup = (Payload(b"", composite(authenticate_bearer(token)))
                 if token is not None else None)
        client = RSocketClient(
            single_transport_provider(TransportTCP(reader, writer, 65536)),
            metadata_encoding=WellKnownMimeTypes.MESSAGE_RSOCKET_COMPOSITE_METADATA,
            setup_payload=setup)
        await client.connect()
        return client

    def request_stream(self, initial: int, route_name: str | None = None,
                       data: bytes = b"") -> None:
        def start() -> None:
            metadata = composite(route(route_name)) if route_name is not None else None
            requester = self._client.request_stream(Payload(data, metadata))
            requester.initial_request_n(initial)
            self._requester = requester
            requester.subscribe(_Keeper(self))

        self._loop.call(start)

    def request(self, n: int) -> None:
        self._loop.call(lambda: self._requester.request(n))

    def stall(self) -> None:
        """Block the client's event loop (it stops reading the socket) until :meth:`resume`."""
        self._resume.clear()
        self._loop.stall(self._resume)

    def resume(self) -> None:
        self._resume.set()

    def cancel(self) -> None:
        self._loop.call(lambda: self._requester.cancel())

    def wait_for(self, done: Callable[[], bool], timeout: float = 60.0,
                 what: str = "the condition") -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: done() or self.error is not None, timeout):
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                                     f"{len(self.payloads)} payloads so far")
            if self.error is not None and not done():
                raise AssertionError(f"the stream failed while waiting for {what}: "
                                     f"{self.error}")

    def wait_payloads(self, count: int, timeout: float = 60.0) -> None:
        with self.changed:
            self.wake_at = count
        self.wait_for(lambda: len(self.payloads) >= count, timeout, f"{count} payloads")

    def wait_end(self, timeout: float = 60.0) -> None:
        with self.changed:
            self.wake_at = 2**63  # only the end (or an error) wakes
        self.wait_for(lambda: self.completed, timeout, "the stream's end")

    def json_rows(self) -> list[Any]:
        with self.changed:
            return [json.loads(p) for p in self.payloads]

    def close(self) -> None:
        self.resume()
        self._loop.run(self._client.close())
        self._loop.stop()

    def __enter__(self) -> PlainClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RecordingRange(Publisher[Any]):
    """``convert(i)`` for ``i`` in ``range(count)``, recording the demand each subscription
    is given: every ``request(n)``, the elements delivered, the most ever outstanding."""

    def __init__(self, count: int, convert: Callable[[int], Any] = lambda i: i) -> None:
        self._inner = RangePublisher(0, count)
        self._convert = convert
        self.requests: list[int] = []
        self.delivered = 0
        self.max_outstanding = 0
        self.subscriptions = 0
        self.cancelled = threading.Event()
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber[Any]) -> None:
        with self._lock:
            self.subscriptions += 1
        self._inner.subscribe(_Tap(self, subscriber))

    def requested(self, n: int) -> None:
        with self._lock:
            self.requests.append(n)
            self.max_outstanding = max(self.max_outstanding,
                                       sum(self.requests) - self.delivered)

    def signalled(self) -> None:
        with self._lock:
            self.delivered += 1


class _Tap(Subscriber[int], Subscription):
    def __init__(self, recording: RecordingRange, downstream: Subscriber[Any]) -> None:
        self._recording = recording
        self._downstream = downstream
        self._upstream: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self._upstream = subscription
        self._downstream.on_subscribe(self)

    def on_next(self, element: int) -> None:
        self._recording.signalled()
        self._downstream.on_next(self._recording._convert(element))

    def on_error(self, error: BaseException) -> None:
        self._downstream.on_error(error)

    def on_complete(self) -> None:
        self._downstream.on_complete()

    def request(self, n: int) -> None:
        self._recording.requested(n)
        assert self._upstream is not None
        self._upstream.request(n)

    def cancel(self) -> None:
        self._recording.cancelled.set()
        assert self._upstream is not None
        self._upstream.cancel()


def socket_allowance(client_socket: socket.socket, size: int) -> int:
    """Payloads of ``size`` bytes that the kernel may hold between a stalled client and the
    server once they have left the server's process: the server's send buffer (Linux grows
    it up to tcp_wmem's maximum), the client's receive buffer, and asyncio's write buffer
    (64 KiB high-water mark) that a written frame may still sit in."""
    send_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    receive = client_socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    return -(-(send_max + receive + 65536) // size) + 1


def settled(count: Callable[[], int], window: float = 0.5, timeout: float = 30.0) -> int:
    """``count()`` once it has not changed for ``window`` seconds. A bound on what is NOT
    done can only be watched for a while; the window is long against the loopback's
    microseconds per payload, short against the test's time."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # never set
    last = count()
    while time.monotonic() < deadline:
        pause.wait(window)
        now = count()
        if now == last:
            return now
        last = now
    raise AssertionError(f"still changing after {timeout} s: {last}")


def main() -> None:
    """Run a :class:`CountingServer` in a process of its own (benchmarks): print its port,
    serve until stdin closes."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    server = CountingServer(count=args.count)
    print(server.port, flush=True)
    sys.stdin.read()
    server.close()


if __name__ == "__main__":
    main()
