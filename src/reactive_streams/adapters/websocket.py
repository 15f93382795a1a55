"""A WebSocket feed as a Publisher (extra ``websocket``, the ``websockets`` library).

Each subscription opens its own connection and reads a message only against demand, so a
subscriber that requests nothing leaves the socket unread and TCP backpressure reaches the
server. Elements are the messages as text, bytes or parsed JSON.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import socket
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

from ..api import Publisher, Subscriber
from ..errors import ReactiveStreamsError
from ..runners import LoopRunner
from ..signalling import COMPLETE, Emitter, Source, Terminal, require_not_none
from ._extras import require
from .urls import HIDDEN, redact_url, redact_url_in

_client = require("websockets.asyncio.client", "websocket", "the websocket publisher")
_exceptions = require("websockets.exceptions", "websocket", "the websocket publisher")
_uri = require("websockets.uri", "websocket", "the websocket publisher")

__all__ = ["CLOSE_TIMEOUT_S", "FORMATS", "READ_AHEAD_FRAMES", "TLS_READ_AHEAD_BYTES",
           "WebSocketPublisher", "check_url", "header_problem", "url_problem"]

#: Element formats: a text frame's string, a frame's bytes, or a message parsed as JSON.
FORMATS: Final = ("text", "bytes", "json")

#: The library's read-ahead queue (``max_queue``): once more than this many frames wait
#: to be received, it stops reading the socket until the queue is empty again. 0: it
#: stops as soon as one whole frame waits (the library supports a high-water mark of 0).
READ_AHEAD_FRAMES: Final = 0

#: Over ``wss://``, asyncio's TLS layer reads the socket on its own while the library is
#: paused, up to a high-water mark (256 KiB by default); it is lowered to
#: ``receive_buffer`` or, without one, to this many bytes.
TLS_READ_AHEAD_BYTES: Final = 2**16

#: Seconds cancel (or a failed message) waits for the server's close frame, reading and
#: dropping what comes before it; then the connection is dropped.
CLOSE_TIMEOUT_S: Final = 1.0

# The handshake sets these itself; one given again would break it or the server's answer.
_RESERVED_HEADERS: Final = ("host", "upgrade", "connection")
_TOKEN_CHARACTERS: Final = frozenset("!#$%&'*+-.^_`|~0123456789"
                                     "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

# Largest number of characters of a message quoted in an error.
_QUOTED: Final = 60

# Headers whose values are credentials whoever sets them (websockets sends a URL's userinfo
# as Authorization: Basic); the values of the headers given are hidden too.
_CREDENTIAL_HEADERS: Final = frozenset({"authorization", "proxy-authorization", "cookie"})


class WebSocketPublisher(Publisher[Any]):
    """Publishes the messages of a WebSocket server, read only against demand.

    Every subscription opens a connection of its own, on an event loop thread of its own,
    as soon as it is made, and reads the next message only while the subscriber has
    demand left that received messages do not cover. With no demand the socket is left
    unread: the kernel's receive buffer fills, TCP's window closes, and the server's sends
    block (TCP backpressure reaches the server).

    What is held beyond demand: the library reads the socket in chunks and stops reading
    as soon as one whole message waits to be received (``READ_AHEAD_FRAMES``, 0), so it
    holds at most one message (up to ``max_message_bytes``) plus the rest of the chunk in
    which that message ended (no more than the kernel's receive buffer, at most
    256 KiB); over ``wss://`` asyncio's TLS layer also reads ahead, up to
    ``receive_buffer`` bytes (``TLS_READ_AHEAD_BYTES``, 64 KiB, without it) plus one
    chunk; the kernel holds up to its receive buffer (``receive_buffer``, or the system's
    autotuned size, which may reach megabytes); the server's kernel and library hold what
    they were sending. None of these messages are signalled before they are requested; on
    cancel they are lost.

    Keepalive pings are off on this side: a subscriber that requests nothing leaves the
    server's pongs unread, so they would time out. A server that pings (a ``websockets``
    server does, every 20 s) closes a connection left unread for longer than its ping
    timeout; that close is abnormal and is signalled as ``on_error``.

    Parameters
    ----------
    url : str
        ``ws://`` or ``wss://`` URL of the server.
    format : {"text", "bytes", "json"}
        ``text``: each message as ``str`` (a binary message is decoded as UTF-8);
        ``bytes``: each message as ``bytes`` (a text message as its UTF-8 bytes);
        ``json``: each message parsed as JSON (objects become dicts).
    headers : mapping of str to str, optional
        Extra HTTP headers of the opening handshake (``{"Authorization": "Bearer x"}``).
        Names must be HTTP tokens; values may not hold line breaks; ``Host``,
        ``Upgrade``, ``Connection`` and ``Sec-WebSocket-*`` are the handshake's own and
        are refused.
    open_timeout : float
        Seconds allowed to connect and finish the opening handshake.
    receive_buffer : int, optional
        ``SO_RCVBUF`` of the socket in bytes, set before connecting (the kernel may
        double it): bounds what the kernel holds beyond demand, and over ``wss://`` what
        the TLS layer reads ahead. The connection is then made directly, not through a
        proxy, and an HTTP redirect from the server is not followed (it fails the
        subscription).
    max_message_bytes : int, optional
        Largest message accepted; a larger one closes the connection (code 1009) and is
        signalled as ``on_error``. ``None``: no limit.
    fields : collection of str, optional
        With ``format="json"``: keep only these fields of each JSON object (as Spark's
        ``from_json`` ignores fields the schema does not name). ``None``: keep all.

    Raises
    ------
    ValueError
        For a URL that is not ``ws://`` or ``wss://`` (or has port 0), an unknown
        ``format``, headers refused as above, or a timeout or size that is not a positive
        number.
    MissingExtraError
        When ``websockets`` is not installed (``pip install 'pyspark-reactive[websocket]'``).

    Notes
    -----
    Signals, each named after what went wrong:

    - a server's normal close (code 1000, 1001, or none) -> ``on_complete``, after every
      message it sent before closing;
    - an abnormal close (any other code, or the connection dropped) -> ``on_error`` with a
      ``ConnectionError`` naming the URL, the code and the reason;
    - failing to connect (refused, handshake rejected, timeout) -> ``on_error`` with a
      ``ConnectionError`` naming the URL and what failed, whose ``__cause__`` is the
      library's error (with its traceback): the message comes first;
    - a message the format cannot decode (a text message that is not UTF-8 under
      ``text`` or ``json`` too) -> ``on_error`` with a ``ValueError`` naming the format,
      the message's number and its start; the connection is closed with code 1007.

    The URL is shown (in these errors, the repr, the thread's name) without its userinfo,
    query string and fragment (:func:`~reactive_streams.adapters.urls.redact_url`), which
    may carry credentials; header values are never shown.

    Cancel closes the connection with code 1000, reading and dropping what the server
    sent meanwhile until its close frame arrives (so the closing handshake completes), for
    at most ``CLOSE_TIMEOUT_S`` (1 s); a server still sending then has its connection
    dropped.

    Examples
    --------
    >>> from reactive_streams import collect
    >>> from reactive_streams.adapters.websocket import WebSocketPublisher
    >>> collect(WebSocketPublisher("ws://127.0.0.1:8765/ticks", format="json"))  # doctest: +SKIP
    [{'tick': 0}, {'tick': 1}]
    """

    def __init__(self, url: str, *, format: str = "text",
                 headers: Mapping[str, str] | None = None, open_timeout: float = 10.0,
                 receive_buffer: int | None = None,
                 max_message_bytes: int | None = 2**20,
                 fields: Collection[str] | None = None) -> None:
        check_url(url)
        if format not in FORMATS:
            raise ValueError(f"WebSocketPublisher: format={format!r} is not one of "
                             f"{', '.join(FORMATS)}")
        if headers is not None:
            problem = header_problem(headers)
            if problem is not None:
                # Only the names: header values carry credentials (Authorization).
                raise ValueError(f"WebSocketPublisher: headers (named {list(headers)!r}) "
                                 f"refused: {problem}")
        if (isinstance(open_timeout, bool) or not isinstance(open_timeout, (int, float))
                or not open_timeout > 0):
            raise ValueError(f"WebSocketPublisher: open_timeout={open_timeout!r} must be a "
                             "positive number of seconds")
        for name, size in (("receive_buffer", receive_buffer),
                           ("max_message_bytes", max_message_bytes)):
            if size is not None and (type(size) is not int or size <= 0):
                raise ValueError(f"WebSocketPublisher: {name}={size!r} must be a positive "
                                 "int or None")
        self.url = url
        self.format = format
        self.headers = dict(headers) if headers else {}
        self.open_timeout = float(open_timeout)
        self.receive_buffer = receive_buffer
        self.max_message_bytes = max_message_bytes
        if fields is not None and (isinstance(fields, str)
                                   or not all(isinstance(f, str) for f in fields)):
            raise ValueError(f"WebSocketPublisher: fields={fields!r} must be a collection of "
                             "str (the names to keep of each JSON object), or None")
        self.fields = None if fields is None else frozenset(fields)

    def subscribe(self, subscriber: Subscriber[Any]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        # One loop per subscription: it runs while the subscription lives, and stops once
        # the connection is closed after cancel or a terminal signal. Its name leaves the
        # URL out: thread names show in dumps and monitoring, and URLs carry credentials.
        runner = LoopRunner(name="websocket-publisher")
        dispatch = runner.acquire()
        source = _Feed(self, runner)
        emitter: Emitter[Any] = Emitter(subscriber, source, dispatch)
        source.emitter = emitter
        emitter.start()

    def __repr__(self) -> str:
        return f"WebSocketPublisher({redact_url(self.url)!r}, format={self.format!r})"


def url_problem(url: object) -> str | None:
    """Why ``url`` is not a ``ws://`` or ``wss://`` URL, or ``None`` when it is one. The
    reason shows the URL as :func:`~reactive_streams.adapters.urls.redact_url` does."""
    if not isinstance(url, str):
        return f"it is a {type(url).__name__}, not a str"
    try:
        _uri.parse_uri(url)
    except Exception as error:
        return redact_url_in(str(error), url)
    try:
        port = urllib.parse.urlsplit(url).port
    except ValueError as error:
        return redact_url_in(str(error), url)
    if port == 0:
        # websockets would take it for no port and connect to 80 or 443.
        return "port 0 cannot be connected to"
    return None


def header_problem(headers: Mapping[Any, Any]) -> str | None:
    """Why ``headers`` cannot be sent in the opening handshake, or ``None`` when they can.

    Names must be HTTP tokens (RFC 9110: letters, digits and ``!#$%&'*+-.^_`|~``), values
    str without line breaks; ``Host``, ``Upgrade``, ``Connection`` and ``Sec-WebSocket-*``
    are set by the handshake itself.
    """
    for name, value in headers.items():
        if not isinstance(name, str):
            return f"header name {name!r} is not a string"
        if not isinstance(value, str):
            # The value is not shown: headers carry credentials (Authorization).
            return f"header {name!r} has a value of type {type(value).__name__}, not a string"
        if not name or not set(name) <= _TOKEN_CHARACTERS:
            return (f"header name {name!r} is not an HTTP token (letters, digits and "
                    "!#$%&'*+-.^_`|~ only, no spaces or colons)")
        if any(c in value for c in "\r\n\0"):
            return f"header {name!r} holds a line break or NUL"
        if name.lower() in _RESERVED_HEADERS or name.lower().startswith("sec-websocket-"):
            return (f"header {name!r} is set by the WebSocket handshake itself (Host, "
                    "Upgrade, Connection and Sec-WebSocket-* cannot be given)")
    return None


def check_url(url: object) -> None:
    """Raise ``ValueError`` unless ``url`` is a ``ws://`` or ``wss://`` URL."""
    problem = url_problem(url)
    if problem is not None:
        shown = redact_url(url) if isinstance(url, str) else url
        raise ValueError(f"WebSocketPublisher: url={shown!r} is not a ws:// or wss:// URL "
                         f"({problem})")


def _quoted(message: bytes) -> str:
    shown: str | bytes = message
    try:
        shown = message.decode("utf-8")  # quoted as text when it is text
    except UnicodeDecodeError:
        pass
    quoted = repr(shown[:_QUOTED])
    return quoted + (f"... ({len(shown)} in all)" if len(shown) > _QUOTED else "")


def _decoder(format: str, fields: frozenset[str] | None = None) -> Callable[[bytes], Any]:
    # Messages come as bytes, text frames too: a text frame that is not UTF-8 is then an
    # error of this format (the library's own decoding would close with 1007 itself and
    # raise ConnectionClosedError, hiding the message's number and start).
    if format == "text":
        return lambda m: m.decode("utf-8")
    if format == "bytes":
        return lambda m: m

    def parse(message: bytes) -> Any:
        value = json.loads(message.decode("utf-8"))
        if value is None:
            raise ValueError("it is JSON null, which cannot be an element (§2.13)")
        if fields is not None and isinstance(value, dict):
            return {name: field for name, field in value.items() if name in fields}
        return value

    return parse


class _Redacted(ReactiveStreamsError):
    """Stands in for a library's error whose text shows credentials of the URL (a redirect
    to it, say): the same traceback, the text without them."""

    def __init__(self, error: BaseException, text: str) -> None:
        super().__init__(f"{type(error).__module__}.{type(error).__qualname__}: {text}")
        self.__traceback__ = error.__traceback__
        self.__suppress_context__ = True


class _HandshakeLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The library's logger (``websockets.client``) for one connection, with the
    credentials taken out: at DEBUG it logs the request line, whose path holds the query
    string, and every header of the handshake (Authorization, the headers given)."""

    def __init__(self, publisher: WebSocketPublisher) -> None:
        super().__init__(logging.getLogger("websockets.client"), {})
        self._url = publisher.url
        self._hidden = _CREDENTIAL_HEADERS | {name.lower() for name in publisher.headers}

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        if msg in ("> %s: %s", "< %s: %s") and len(args) == 2 and (
                str(args[0]).lower() in self._hidden):
            args = (args[0], HIDDEN)
        args = tuple(redact_url_in(arg, self._url) if isinstance(arg, str) else arg
                     for arg in args)
        super().log(level, msg, *args, **kwargs)


class _Feed(Source[Any]):
    """One connection's messages; every method runs on the subscription's loop thread."""

    def __init__(self, publisher: WebSocketPublisher, runner: LoopRunner) -> None:
        self._publisher = publisher
        self._runner = runner
        self._loop = runner.loop
        self._decode = _decoder(publisher.format, publisher.fields)
        self.emitter: Emitter[Any] | None = None
        self._ready: collections.deque[Any] = collections.deque()
        self._terminal: Terminal | None = None
        # Demand the received messages do not cover yet; the socket is read only while
        # it exceeds what is ready.
        self._wanted = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Set once the task closes the connection; a cancel then lets it finish.
        self._closing = False

    def pull(self, n: int) -> tuple[Sequence[Any], Terminal | None]:
        ready = self._ready
        taken = [ready.popleft() for _ in range(min(n, len(ready)))]
        self._wanted = n - len(taken)
        if self._task is None and self._terminal is None:
            # The first pull comes right after on_subscribe: connect now, demand or not.
            self._task = self._loop.create_task(self._run())
        if self._wanted:
            self._wake.set()
        return taken, (self._terminal if not ready else None)

    def close(self) -> None:
        task, self._task = self._task, None
        self.emitter = None
        if task is not None and not task.done():
            if not self._closing:
                task.cancel()  # the task closes the connection, then the loop is released
            task.add_done_callback(lambda _: self._runner.release())
        else:
            self._runner.release()

    def _notify(self) -> None:
        if self.emitter is not None:
            self.emitter.signal()

    # -- the connection ------------------------------------------------------------------

    async def _run(self) -> None:
        url = redact_url(self._publisher.url)
        try:
            connection = await self._connect()
        except asyncio.CancelledError:
            return
        except Exception as error:
            hint = ""
            if self._publisher.receive_buffer is not None and "redirect" in str(error):
                hint = (" (a redirect is not followed when receive_buffer, the built-in's "
                        "receiveBufferBytes, is set: give the URL it redirects to)")
            # The message first; the library's error, with its traceback, as the cause.
            why = redact_url_in(str(error), self._publisher.url)
            self._end(ConnectionError(
                f"websocket publisher: could not connect to {url}: "
                f"{type(error).__name__}: {why}{hint}"),
                error if why == str(error) else _Redacted(error, why))
            return
        terminal: Terminal | None = None
        cause: BaseException | None = None
        closing = (1000, "")
        try:
            received = 0
            while True:
                while self._wanted <= len(self._ready):
                    # No demand left uncovered: leave the socket unread (backpressure).
                    self._wake.clear()
                    await self._wake.wait()
                try:
                    message = await connection.recv(decode=False)
                except _exceptions.ConnectionClosedOK:
                    terminal = COMPLETE
                    return
                except _exceptions.ConnectionClosed as closed:
                    terminal, cause = self._abnormal_close(closed), closed
                    return
                received += 1
                try:
                    element = self._decode(message)
                except Exception as error:
                    closing = (1007, f"message {received} is not {self._publisher.format}")
                    terminal, cause = ValueError(
                        f"websocket publisher: message {received} from {url} cannot be read "
                        f"as format={self._publisher.format!r}: {error}; the message: "
                        f"{_quoted(message)}"), error
                    return
                self._ready.append(element)
                self._notify()
        finally:
            # Closed before the terminal signal, whose close() would otherwise cancel this
            # task in the middle of the closing handshake.
            self._closing = True
            await self._close(connection, *closing)
            if terminal is not None:
                self._end(terminal, cause)

    async def _connect(self) -> Any:
        publisher = self._publisher
        options: dict[str, Any] = {}
        if publisher.receive_buffer is not None:
            options["sock"] = await asyncio.wait_for(self._socket(), publisher.open_timeout)
        connection = await _client.connect(
            publisher.url,
            additional_headers=publisher.headers or None,
            open_timeout=publisher.open_timeout,
            # A paused reader cannot see pongs; see the class docstring.
            ping_interval=None,
            max_queue=READ_AHEAD_FRAMES,
            max_size=publisher.max_message_bytes,
            close_timeout=CLOSE_TIMEOUT_S,
            logger=_HandshakeLogger(publisher),
            **options)
        limit_reads = getattr(connection.transport, "set_read_buffer_limits", None)
        if connection.transport.get_extra_info("sslcontext") is not None and limit_reads:
            # asyncio's TLS layer keeps reading the socket while the library is paused,
            # until its own buffer reaches this mark (256 KiB by default). Python 3.10's
            # TLS transport has no such limit to set: there the read-ahead is its own.
            limit_reads(high=publisher.receive_buffer or TLS_READ_AHEAD_BYTES)
        return connection

    async def _socket(self) -> socket.socket:
        """A TCP socket with ``SO_RCVBUF`` set before it connects (the window scale is
        agreed in the handshake, so setting it later would not bound the window)."""
        target = _uri.parse_uri(self._publisher.url)
        addresses = await self._loop.getaddrinfo(target.host, target.port,
                                                 type=socket.SOCK_STREAM)
        failure: OSError | None = None
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                                self._publisher.receive_buffer or 0)
                sock.setblocking(False)
                await self._loop.sock_connect(sock, address)
                return sock
            except OSError as error:
                failure = error
                sock.close()
            except BaseException:
                sock.close()
                raise
        raise failure or OSError(f"no address found for {target.host}")

    def _abnormal_close(self, closed: Any) -> ConnectionError:
        if closed.rcvd is not None:
            frame, who = closed.rcvd, "the server"
        elif closed.sent is not None:
            frame, who = closed.sent, "this client"  # e.g. 1009: a message over the limit
        else:
            frame, who = None, ""
        if frame is None:
            how = "the connection dropped without a close frame (code 1006)"
        else:
            how = f"{who} closed it with code {frame.code}"
            how += f", reason {frame.reason!r}" if frame.reason else ", no reason"
        url = redact_url(self._publisher.url)
        return ConnectionError(f"websocket publisher: {url} closed the connection "
                               f"abnormally: {how}")

    def _end(self, terminal: Terminal, cause: BaseException | None = None) -> None:
        if isinstance(terminal, BaseException) and cause is not None:
            terminal.__cause__ = cause
        self._terminal = terminal
        self._notify()

    async def _close(self, connection: Any, code: int, reason: str) -> None:
        # The server's close frame comes after what it already sent, which waits unread
        # when there was no demand: read and drop it until the handshake completes. The
        # library's close_timeout (CLOSE_TIMEOUT_S) bounds this: a server that keeps
        # sending without reading our close frame has its connection dropped then.
        closing = asyncio.ensure_future(connection.close(code, reason))
        try:
            while not closing.done():
                await connection.recv(decode=False)
        except Exception:
            pass  # ConnectionClosed: the handshake is over
        await asyncio.gather(closing, return_exceptions=True)
