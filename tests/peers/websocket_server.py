"""A real ``websockets`` server on 127.0.0.1 (a free port), on an event loop thread of its
own, that sends numbered messages as fast as each connection lets it and records how many
sends completed, and when a send has been blocked (the client is not reading).

The request path says what a connection gets, so one server serves many cases:

- ``/count/<n>``: ``n`` messages, then a normal close (code 1000); ``/count/inf``: endless;
- ``/close/<code>/<n>``: ``n`` messages, then a close with ``code`` and reason "feed broke";
- ``/drop/<n>``: ``n`` messages, then the TCP connection is dropped (no close frame);
- ``/reject``: the opening handshake is refused with HTTP 403;
- ``/redirect/<path>``: the opening handshake is answered with HTTP 302 to ``/<path>``;
- ``/raw/<index>``: one message, ``raw[index]`` as given to the server, then close 1000;
- ``/rawtext/<index>``: ``raw[index]`` (bytes, UTF-8 or not) sent as a text frame, then
  the connection is held open until the client closes it (its close code is recorded, see
  :meth:`wait_closed_by_client`);
- ``/deaf/<n>``: like ``/count/<n>`` but the server never reads, so a close frame from the
  client is never seen and never answered.

With ``ssl`` (an ``ssl.SSLContext``) it serves ``wss://localhost:<port>``; see
:func:`make_tls_files` for a certificate authority of the test's own.

Run as a script (``python websocket_server.py --size 100``) it prints its URL and serves
until stdin closes, printing the messages it sent; benchmarks use that.
"""

from __future__ import annotations

import asyncio
import http
import socket
import ssl as _ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

__all__ = ["WebSocketServer", "effective_buffer", "held_beyond_demand", "make_tls_files",
           "text_message"]

# In the fast mode (no stall watching) a sender yields to its loop every this many sends,
# so the loop still reads (a client's close frame) and serves its other connections.
_YIELD_EVERY = 64


def text_message(index: int, size: int = 0) -> str:
    """Message ``index``: its number, padded with ``-`` to ``size`` characters."""
    return str(index).ljust(size, "-")


def effective_buffer(option: int, requested: int) -> int:
    """What the kernel makes of ``setsockopt(SOL_SOCKET, option, requested)`` (Linux doubles
    it and keeps a floor): read back from a scratch socket."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, option, requested)
        return int(probe.getsockopt(socket.SOL_SOCKET, option))


def make_tls_files(folder: Path) -> tuple[Path, _ssl.SSLContext]:
    """A certificate authority made for the test and a server certificate it signed for
    ``localhost`` and 127.0.0.1 (``openssl``): returns the CA's PEM file (for a client's
    ``SSL_CERT_FILE``) and a server context holding the certificate."""
    def openssl(*arguments: str) -> None:
        subprocess.run(["openssl", *arguments], cwd=folder, check=True,
                       capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
            "/CN=websocket test CA", "-keyout", "ca.key", "-out", "ca.pem", "-addext",
            "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "server.key", "-out", "server.csr")
    (folder / "extensions").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-out", "server.pem", "-extfile", "extensions")
    context = _ssl.SSLContext(_ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.pem", folder / "server.key")
    return folder / "ca.pem", context


def held_beyond_demand(message_bytes: int, receive_buffer: int, send_buffer: int,
                       write_limit: int) -> int:
    """The most messages a server can have sent (its ``send()`` returned) that a client
    reading only against demand has not been asked for, on Linux loopback.

    Bytes that can sit between the two: the server library's write buffer (up to
    ``write_limit``, plus the message that went over it), the server socket's send buffer,
    the client socket's receive buffer, and one chunk the client library read from it
    before pausing (no more than that receive buffer holds). Buffers are the kernel's
    effective sizes (Linux doubles what is asked; these count the whole doubled size,
    although part of it is bookkeeping, so the bound is generous). Each message takes its
    payload plus a 2, 4 or 10 byte frame header on the wire (no compression, no mask from a
    server). One more message: the library stops reading once a whole message waits
    (``READ_AHEAD_FRAMES`` = 0), and the chunk that completed it holds only the end of it.
    """
    header = 2 if message_bytes < 126 else 4 if message_bytes < 2**16 else 10
    wire = message_bytes + header
    received = effective_buffer(socket.SO_RCVBUF, receive_buffer)
    sending = effective_buffer(socket.SO_SNDBUF, send_buffer)
    held = write_limit + wire + sending + 2 * received
    return -(-held // wire) + 1


class WebSocketServer:
    """See the module docstring.

    Parameters
    ----------
    message : callable, optional
        ``message(index) -> str or bytes``; default: :func:`text_message` of the index.
    raw : sequence of str or bytes
        Messages served one per connection on ``/raw/<index>``.
    send_buffer : int, optional
        ``SO_SNDBUF`` of each accepted socket, set before anything is sent.
    write_limit : int
        High-water mark (bytes) of the library's write buffer: a send waits for it to
        drain below a quarter of this.
    stall_ms : float, optional
        A send blocked this long counts as a stall (see :meth:`wait_stalled`); ``None``
        sends without watching (as fast as it can: benchmarks).
    ssl : ssl.SSLContext, optional
        Serve ``wss://`` with this context (see :func:`make_tls_files`).
    """

    def __init__(self, message: Callable[[int], str | bytes] | None = None,
                 raw: Sequence[str | bytes] = (), send_buffer: int | None = None,
                 write_limit: int = 2**15, stall_ms: float | None = 200.0,
                 ssl: _ssl.SSLContext | None = None) -> None:
        self.message = message or text_message
        self.raw = list(raw)
        self.send_buffer = send_buffer
        self.write_limit = write_limit
        self.stall_s = None if stall_ms is None else stall_ms / 1000
        self.ssl = ssl
        self.sent = 0  # completed sends, over all connections
        self.connections = 0
        self.sent_by_connection: list[int] = []  # completed sends of each, in order
        self.request_headers: list[dict[str, str]] = []
        self.request_paths: list[str] = []  # as requested, with the query string
        # Connection number -> (code, reason) of the close frame the client sent (None, None
        # when it sent none) while the server was still sending.
        self.closed_by_client: dict[int, tuple[int | None, str | None]] = {}
        self._changed = threading.Condition()
        # Per connection: its completed sends while one of its sends is blocked, else None.
        self._stalled_at: list[int | None] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self.port = 0

    @property
    def url(self) -> str:
        if self.ssl is not None:
            return f"wss://localhost:{self.port}"
        return f"ws://127.0.0.1:{self.port}"

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> WebSocketServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                server = await serve(self._handle, "127.0.0.1", 0, compression=None,
                                     write_limit=self.write_limit, ssl=self.ssl,
                                     process_request=self._process_request)
            except BaseException as error:
                failure.append(error)
                ready.set()
                raise
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            async with server:
                await self._stop.wait()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(main())
            except BaseException:
                pass
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=run, name="websocket-test-server", daemon=True)
        self._thread.start()
        if not ready.wait(10) or failure:
            raise RuntimeError(f"the websocket test server did not start: {failure}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass  # the loop already ended
        if self._thread is not None:
            self._thread.join(15)

    def __enter__(self) -> WebSocketServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests wait on ---------------------------------------------------------------

    def wait_stalled(self, timeout: float, connection: int = -1) -> int:
        """Wait until a send of ``connection`` (by default the latest) has been blocked for
        ``stall_ms`` (TCP backpressure reached the server); return the sends that connection
        had completed then. Fails after ``timeout`` seconds."""
        def stalled() -> bool:
            return bool(self._stalled_at) and self._stalled_at[connection] is not None

        with self._changed:
            if not self._changed.wait_for(stalled, timeout):
                sent = self.sent_by_connection[connection] if self.sent_by_connection else 0
                raise AssertionError(f"the server's sends never blocked for {self.stall_s} s "
                                     f"within {timeout} s; it sent {sent}")
            return self._stalled_at[connection] or 0

    def wait_connections(self, count: int, timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self.connections >= count, timeout):
                raise AssertionError(f"{count} connections expected within {timeout} s; "
                                     f"{self.connections} came")

    def wait_closed_by_client(self, connection: int, timeout: float) -> tuple[int | None,
                                                                              str | None]:
        """Wait until the client closes ``connection`` (numbered from 0 in the order they
        came); return the code and reason it sent."""
        with self._changed:
            if not self._changed.wait_for(lambda: connection in self.closed_by_client,
                                          timeout):
                raise AssertionError(f"connection {connection} was not closed by the client "
                                     f"within {timeout} s; closes seen: "
                                     f"{self.closed_by_client}")
            return self.closed_by_client[connection]

    # -- serving ------------------------------------------------------------------------

    def _process_request(self, connection: ServerConnection, request: Any) -> Any:
        with self._changed:
            self.request_headers.append({k: v for k, v in request.headers.raw_items()})
            self.request_paths.append(request.path)
        # A query string (?access_token=...) is the client's business: it is left out.
        path = request.path.partition("?")[0]
        if path == "/reject":
            return connection.respond(http.HTTPStatus.FORBIDDEN, "no entry for this test\n")
        if path.startswith("/redirect/"):
            response = connection.respond(http.HTTPStatus.FOUND, "")
            response.headers["Location"] = path.removeprefix("/redirect")
            return response
        return None

    async def _handle(self, connection: ServerConnection) -> None:
        with self._changed:
            number = self.connections
            self.connections += 1
            self.sent_by_connection.append(0)
            self._stalled_at.append(None)
            self._changed.notify_all()
        if self.send_buffer is not None:
            sock = connection.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
        parts = connection.request.path.partition("?")[0].strip("/").split("/")
        try:
            if parts[0] == "raw":
                await connection.send(self.raw[int(parts[1])])
                await connection.close()
                return
            if parts[0] == "rawtext":
                await connection.send(self.raw[int(parts[1])], text=True)
                await connection.wait_closed()
                self._record_close(number, connection)
                return
            if parts[0] == "deaf":
                connection.transport.pause_reading()
            count = -1 if parts[-1] == "inf" else int(parts[-1])
            await self._send_numbered(connection, number, count)
            if parts[0] == "close":
                await connection.close(int(parts[1]), "feed broke")
            elif parts[0] == "drop":
                connection.transport.abort()
            else:
                await connection.close()
        except ConnectionClosed:
            self._record_close(number, connection)

    def _record_close(self, number: int, connection: ServerConnection) -> None:
        received = connection.protocol.close_rcvd
        with self._changed:
            self.closed_by_client[number] = (received.code if received else None,
                                             received.reason if received else None)
            self._changed.notify_all()

    async def _send_numbered(self, connection: ServerConnection, number: int,
                             count: int) -> None:
        index = 0
        while count < 0 or index < count:
            if self.stall_s is None:
                await connection.send(self.message(index))
                self.sent += 1
                self.sent_by_connection[number] += 1
                index += 1
                if index % _YIELD_EVERY == 0:
                    # A send to a client that keeps up never yields to the loop.
                    await asyncio.sleep(0)
                continue
            sending = asyncio.ensure_future(connection.send(self.message(index)))
            done, _ = await asyncio.wait([sending], timeout=self.stall_s)
            if not done:
                with self._changed:
                    self._stalled_at[number] = self.sent_by_connection[number]
                    self._changed.notify_all()
            await sending
            with self._changed:
                self.sent += 1
                self.sent_by_connection[number] += 1
                self._stalled_at[number] = None
            index += 1


def _main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=100, help="characters per message")
    args = parser.parse_args(argv)
    server = WebSocketServer(message=lambda i: text_message(i, args.size), stall_ms=None).start()
    print(server.url, flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
    server.stop()
    print(server.sent, flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])

