"""RSocket request-streams as Reactive Streams, both ways (extra ``rsocket``).

:class:`RSocketPublisher` subscribes to a request-stream of a remote RSocket server, so the
subscriber's ``request(n)`` travels to the server as REQUEST_N; :func:`serve` answers
request-streams from a local Publisher, so each remote REQUEST_N becomes ``request(n)``.
Both run the protocol on an asyncio event loop on a thread they own (rsocket-py), and
both bound what a peer can make them hold (frame and reassembled payload sizes, frames
queued to a peer that does not read, streams and connections); :func:`serve` asks every
connection for a token in its SETUP frame unless told to serve anyone, and reads that frame
itself before rsocket-py sees the connection (``_listening``), so that connections which
never send it cannot keep a client out. Both speak TCP or a Unix domain socket.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import hmac
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from .. import Publisher, Subscriber, Subscription
from ..api import UNBOUNDED
from ..errors import ReactiveStreamsError
from ..runners import LoopRunner, ThreadRunner
from ..signalling import COMPLETE, Emitter, SerialWorker, Source, Terminal, require_not_none
from . import _listening
from ._extras import require
from ._listening import DEFAULT_MAX_PENDING

_FEATURE = "the RSocket adapter"
_client = require("rsocket.rsocket_client", "rsocket", _FEATURE)
_server = require("rsocket.rsocket_server", "rsocket", _FEATURE)
_tcp = require("rsocket.transports.tcp", "rsocket", _FEATURE)
_payload = require("rsocket.payload", "rsocket", _FEATURE)
_helpers = require("rsocket.helpers", "rsocket", _FEATURE)
_handler = require("rsocket.request_handler", "rsocket", _FEATURE)
_frames = require("rsocket.frame_builders", "rsocket", _FEATURE)
_metadata = require("rsocket.extensions.helpers", "rsocket", _FEATURE)
_composite = require("rsocket.extensions.composite_metadata", "rsocket", _FEATURE)
_routing = require("rsocket.extensions.routing", "rsocket", _FEATURE)
_mimetypes = require("rsocket.extensions.mimetypes", "rsocket", _FEATURE)
_frame = require("rsocket.frame", "rsocket", _FEATURE)
_frame_parser = require("rsocket.frame_parser", "rsocket", _FEATURE)
_exceptions = require("rsocket.exceptions", "rsocket", _FEATURE)
_error_codes = require("rsocket.error_codes", "rsocket", _FEATURE)

__all__ = [
    "DEFAULT_KEEPALIVE_INTERVAL",
    "DEFAULT_KEEPALIVE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_MAX_PENDING",
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_SERVE_KEEPALIVE_TIMEOUT",
    "MAX_QUEUED_FRAMES",
    "MAX_REQUEST_N",
    "MAX_ROUTE_BYTES",
    "MAX_TOKEN_BYTES",
    "SETUP_TIMEOUT",
    "UNBOUNDED_REQUEST_N",
    "RSocketPublisher",
    "RSocketService",
    "RemoteStreamError",
    "StreamRequest",
    "serve",
]

T = TypeVar("T")

log = logging.getLogger("reactive_streams.adapters.rsocket")

Payload = _payload.Payload
# rsocket-py's handler base class; it carries no type information.
_BaseRequestHandler: Any = _handler.BaseRequestHandler
_BaseServer: Any = _server.RSocketServer
_BaseClient: Any = _client.RSocketClient
_BaseParser: Any = _frame_parser.FrameParser
_BaseTCP: Any = _tcp.TransportTCP

#: REQUEST_N of ``2**31 - 1`` means "unbounded" in RSocket (as ``2**63 - 1`` does in §3.17).
UNBOUNDED_REQUEST_N: Final[int] = 2**31 - 1
#: The largest bounded REQUEST_N: larger demand is sent in pieces of at most this many
#: (read when a piece is sent; tests lower it to see the pieces).
MAX_REQUEST_N: int = 2**31 - 2
#: How many payloads a served stream asks its local publisher for ahead of those written
#: to the socket, whatever the remote demand: for each stream, the serving process holds
#: at most this many payloads (and asyncio's 64 KiB write buffer), however slowly the
#: client reads; the kernel's socket buffers hold what else is on its way.
DEFAULT_PREFETCH: Final[int] = 4096
COMPOSITE_METADATA: Final = _mimetypes.WellKnownMimeTypes.MESSAGE_RSOCKET_COMPOSITE_METADATA
_READ_BUFFER = 1 << 16
#: Seconds without a KEEPALIVE from a client after which :func:`serve` closes its
#: connection (Spring's clients send one every 20 s and allow 90 s).
DEFAULT_SERVE_KEEPALIVE_TIMEOUT: Final[float] = 90.0
#: Seconds between the KEEPALIVE frames a publisher's connection sends.
DEFAULT_KEEPALIVE_INTERVAL: Final[float] = 2.0
#: Seconds without a KEEPALIVE answer after which a publisher's stream fails.
DEFAULT_KEEPALIVE_TIMEOUT: Final[float] = 30.0
# How long closing a connection waits for a CANCEL frame to be written before it closes.
_CANCEL_WRITE_S = 2.0

#: The largest payload (data and metadata) either side takes from a peer, whole or
#: reassembled from fragments, by default: 4 MiB. A frame longer than this (plus 1 KiB of
#: headers) is refused as soon as its length is read, before it is buffered.
DEFAULT_MAX_PAYLOAD_BYTES: Final[int] = 4 << 20
#: Connections a service admits at once by default; one more is refused with an ERROR
#: frame (REJECTED_SETUP).
DEFAULT_MAX_CONNECTIONS: Final[int] = 64
#: Streams a service serves on one connection at once by default; one more gets an ERROR.
DEFAULT_MAX_STREAMS: Final[int] = 256
#: Frames other than the paced payloads (KEEPALIVE answers, REQUEST_N, ERROR, ...) that may
#: wait to be written to a peer that reads nothing; one more and the connection is cut
#: (read when a frame is queued; tests lower it).
MAX_QUEUED_FRAMES: int = 1024
#: Seconds a service waits for a connection's SETUP frame before it closes the connection.
SETUP_TIMEOUT: Final[float] = 10.0
# The longest frame before a connection's SETUP is accepted: a SETUP is small.
_SETUP_FRAME_LIMIT = 64 << 10
_FRAME_HEADERS = 1 << 10
# Seconds a refused connection may stay open for its ERROR frame to reach the peer.
_REFUSED_LINGER_S = 2.0
_AUTHENTICATION_ID = 0x7C  # message/x.rsocket.authentication.v0 in composite metadata
_AUTHENTICATION = b"message/x.rsocket.authentication.v0"
_BEARER_ID = 0x01  # the well-known "bearer" authentication type
#: The longest token (UTF-8 bytes) a service takes or a client presents.
MAX_TOKEN_BYTES = 4096
# The data of the KEEPALIVE frames by which a served stream learns what its client has read.
_PROBE = b"pyspark-reactive/receipt/"

#: What ``serve(..., token=...)`` generates when no token is given: 256 random bits.
_TOKEN_BYTES = 32


def _check_token(owner: str, token: object, none: str) -> None:
    if token is None:
        return
    if not isinstance(token, str) or not token:
        raise TypeError(f"{owner}: token of type {type(token).__name__} is not accepted: a "
                        f"non-empty str, or {none}")
    if len(token.encode("utf-8")) > MAX_TOKEN_BYTES:
        raise ValueError(f"{owner}: a token of {len(token.encode('utf-8'))} bytes is not "
                         f"accepted: at most {MAX_TOKEN_BYTES} bytes in UTF-8")


def _check_positive_int(owner: str, name: str, value: object) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{owner}: {name}={value!r} is not accepted: a positive int")


def _bearer_metadata(token: str) -> bytes:
    """Composite metadata carrying ``token`` as a bearer token (RSocket's authentication
    extension), as rsocket-js (``encodeBearerAuthMetadata``) and Spring Security send it."""
    return bytes(_metadata.composite(_metadata.authenticate_bearer(token)))


def _bearer_token(metadata: bytes) -> bytes | None:
    """The bearer token of composite metadata, or ``None`` when it holds none (or is not
    composite metadata at all). Parsed here, bounds-checked, since it comes from anyone."""
    view = bytes(metadata)
    at = 0
    while at < len(view):
        head = view[at]
        if head & 0x80:
            known, mime = head & 0x7F, b""
            at += 1
        else:
            known, mime = -1, view[at + 1:at + 2 + head]
            at += 2 + head
        if at + 3 > len(view):
            return None
        length = int.from_bytes(view[at:at + 3], "big")
        content = view[at + 3:at + 3 + length]
        at += 3 + length
        if len(content) != length:
            return None
        if (known == _AUTHENTICATION_ID or mime == _AUTHENTICATION) and content:
            kind = content[0]
            if kind & 0x80:
                if kind & 0x7F == _BEARER_ID:
                    return content[1:]
            elif content[1:2 + kind] == b"bearer":
                return content[2 + kind:]
    return None


class _FrameTooLong(ReactiveStreamsError):
    pass


class _BoundedFrameParser(_BaseParser):  # type: ignore[misc]
    """rsocket-py's frame parser buffers whatever length a frame's header announces (up to
    16 MiB) and copies what follows each frame it takes; this one refuses a frame longer
    than :attr:`limit` as soon as its length is read, and drops what it took once per
    read."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    async def receive_data(self, data: bytes, header_length: int = 3) -> Any:
        buffer = self._buffer
        buffer.extend(data)
        at, total = 0, len(buffer)
        try:
            while total - at >= 3:
                length = int.from_bytes(buffer[at:at + 3], "big")
                if length > self.limit:
                    raise _FrameTooLong(length)
                if total - at < 3 + length:
                    break
                frame = buffer[at + 3:at + 3 + length]
                at += 3 + length
                try:
                    parsed = _frame.parse_or_ignore(frame)
                except Exception:
                    log.debug("an RSocket frame could not be parsed", exc_info=True)
                    parsed = _frame.InvalidFrame()
                if parsed is not None:
                    yield parsed
        finally:
            del buffer[:at]


class _BoundedTCP(_BaseTCP):  # type: ignore[misc]
    """rsocket-py's TCP transport with a bounded frame parser; a frame over the limit
    calls ``on_too_long(length)`` and ends the connection. Once ``discarding``, what the
    peer sends is read and dropped unparsed (a refused connection, until it closes)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 limit: int, on_too_long: Callable[[int], None]) -> None:
        super().__init__(reader, writer, read_buffer_size=_READ_BUFFER)
        self._frame_parser = _BoundedFrameParser(limit)
        self._on_too_long = on_too_long
        self.discarding = False

    @property
    def limit(self) -> int:
        return int(self._frame_parser.limit)

    @limit.setter
    def limit(self, value: int) -> None:
        self._frame_parser.limit = value

    @property
    def peer(self) -> str:
        address = self._writer.get_extra_info("peername")
        return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else "a peer"

    async def next_frame_generator(self) -> Any:
        while True:
            generator = await super().next_frame_generator()
            if generator is None or not self.discarding:
                return None if generator is None else self._checked(generator)
            await generator.aclose()  # the data was read; nothing of it is parsed

    async def _checked(self, generator: Any) -> Any:
        try:
            async for frame in generator:
                yield frame
        except _FrameTooLong as error:
            self._on_too_long(int(error.args[0]))
            raise _exceptions.RSocketTransportError() from None

    def write_eof(self) -> None:
        try:
            if self._writer.can_write_eof():
                self._writer.write_eof()
        except (OSError, RuntimeError):
            pass

    def abort(self) -> None:
        """Close at once, dropping what waits to be written (a peer that reads nothing
        would hold a graceful close forever)."""
        self._writer.transport.abort()


# What holding fragments costs besides their bytes, counted (apart from the bytes) against
# max_payload_bytes: a payload begun (its first frame, this record, the dict's entry), and
# each piece kept (a bytes object and its list entry). Without it, empty or one-byte
# fragments would hold hundreds of bytes each for the few that the cap counts.
_PARTIAL_COST = 1024
_PIECE_COST = 64


def _fragment_cost(frame: Any) -> tuple[int, int]:
    """The bytes of a fragment and what keeping them costs besides."""
    data, metadata = frame.data or b"", frame.metadata or b""
    return len(data) + len(metadata), _PIECE_COST * ((1 if data else 0) + (1 if metadata else 0))


class _Partial:
    """A payload arriving in fragments: its first frame and the pieces after it."""

    __slots__ = ("cost", "data", "first", "metadata", "size")

    def __init__(self, first: Any) -> None:
        self.first = first
        self.data: list[bytes] = []
        self.metadata: list[bytes] = []
        self.size = 0
        self.cost = _PARTIAL_COST
        self.add(first)

    def add(self, frame: Any) -> None:
        data, metadata = frame.data or b"", frame.metadata or b""
        if data:
            self.data.append(data)
        if metadata:
            self.metadata.append(metadata)
        size, cost = _fragment_cost(frame)
        self.size += size
        self.cost += cost

    def whole(self, last: Any) -> Any:
        frame = self.first
        frame.data = b"".join(self.data)
        frame.metadata = b"".join(self.metadata)
        frame.flags_follows = False
        if hasattr(last, "flags_next") and hasattr(frame, "flags_next"):
            frame.flags_next = last.flags_next
        frame.flags_complete = last.flags_complete
        return frame


class _Guarded:
    """What both ends of a connection bound, mixed into rsocket-py's client and server.

    rsocket-py reassembles fragments of any stream without limit (one payload may grow
    for ever), including streams that were never opened, and queues every frame it
    answers (KEEPALIVE echoes...) without limit to a peer that may read nothing. Here
    fragments are reassembled only for open streams (or a request opening one) and at
    most ``max_payload_bytes`` per connection; frames for unknown streams are dropped;
    more than :data:`MAX_QUEUED_FRAMES` frames other than the paced payloads waiting to be
    written cut the connection.
    """

    _stream_control: Any
    _send_queue: Any

    def _init_guard(self, transport: _BoundedTCP, max_payload_bytes: int) -> None:
        self.guard_transport = transport
        self.max_payload_bytes = max_payload_bytes
        self.disconnected: str | None = None  # why, once cut off
        self.frames_dropped = 0  # frames (fragments included) of unknown streams
        self.peak_buffered = 0  # the most fragment bytes held at once
        self._partials: dict[int, _Partial] = {}
        self._buffered = 0
        self._bookkeeping = 0  # what the fragments held cost besides their bytes
        self._queued = 0
        self._closing_task: asyncio.Task[None] | None = None

    # -- hooks ---------------------------------------------------------------------------------

    def _violated(self, reason: str) -> None:
        """The peer broke a bound: ``reason`` says how; the connection is being cut."""

    def _payload_starts(self, stream_id: int) -> str | None:
        """A payload's first fragment arrived on an open stream: ``None`` to take it, or
        why not (the connection is then cut)."""
        return None

    # -- bounds -------------------------------------------------------------------------------

    def disconnect(self, reason: str) -> None:
        """Cut the connection at once (what waits to be written is dropped)."""
        if self.disconnected is not None:
            return
        self.disconnected = reason
        self._partials.clear()
        self._buffered = self._bookkeeping = 0
        self._violated(reason)
        self.guard_transport.abort()
        self._closing_task = asyncio.get_running_loop().create_task(self._close_quietly())

    async def _close_quietly(self) -> None:
        try:
            await self.close()  # type: ignore[attr-defined]
        except Exception:
            log.debug("closing an RSocket connection failed", exc_info=True)

    async def _stop_tasks(self) -> None:
        # When the connection ends from its own receiver (the peer closed, or was cut off),
        # rsocket-py cancels and awaits that very task, and logs a traceback for it: one
        # per connection, which a peer could multiply. The task is ending anyway.
        current = asyncio.current_task()
        for name in ("_sender_task", "_receiver_task"):
            if getattr(self, name, None) is current:
                setattr(self, name, None)
        await super()._stop_tasks()  # type: ignore[misc]

    def frame_too_long(self, length: int) -> None:
        self.disconnect(f"the peer sent a frame of {length} bytes, over the "
                        f"{self.guard_transport.limit} taken (max_payload_bytes="
                        f"{self.max_payload_bytes})")

    def send_frame(self, frame: Any) -> None:
        if self.disconnected is not None:
            return
        if frame.sent_future is None:
            # Not a paced payload (those carry their own future, and their stream holds at
            # most its prefetch unwritten): count it until it is written.
            if self._queued >= MAX_QUEUED_FRAMES:
                self.disconnect(f"the peer reads nothing: {self._queued} frames wait to be "
                                f"written to it (at most {MAX_QUEUED_FRAMES} are kept)")
                return
            self._queued += 1
            frame.sent_future = asyncio.get_running_loop().create_future()
            frame.sent_future.add_done_callback(self._written)
        super().send_frame(frame)  # type: ignore[misc]

    def _written(self, _future: asyncio.Future[None]) -> None:
        self._queued -= 1

    async def _handle_next_frame(self, frame: Any, handlers: Any) -> None:
        if self.disconnected is not None:
            return
        stream_id = getattr(frame, "stream_id", 0)
        if not stream_id and getattr(frame, "flags_follows", False):
            # A fragment on stream 0 belongs to no stream: rsocket-py would keep it, and
            # every one after it, for ever.
            self.frames_dropped += 1
            return
        partial = self._partials.get(stream_id) if stream_id else None
        if partial is not None:
            if not isinstance(frame, _frame.PayloadFrame):
                self.disconnect(f"the peer sent a {type(frame).__name__} on stream "
                                f"{stream_id} amid the fragments of a payload")
                return
            if not self._hold(frame, stream_id, begins=False):
                return
            partial.add(frame)
            if frame.flags_follows:
                return
            del self._partials[stream_id]
            self._buffered -= partial.size
            self._bookkeeping -= partial.cost
            frame = partial.whole(frame)
        elif stream_id and not isinstance(frame, _frame.initiate_request_frame_types):
            if stream_id not in self._stream_control._streams:
                # rsocket-py would keep the fragments of a stream never opened, and log a
                # warning for each other frame.
                self.frames_dropped += 1
                return
            if getattr(frame, "flags_follows", False) and isinstance(frame, _frame.PayloadFrame):
                refused = self._payload_starts(stream_id)
                if refused is not None:
                    self.disconnect(refused)
                    return
                if self._hold(frame, stream_id, begins=True):
                    self._partials[stream_id] = _Partial(frame)
                return
        elif stream_id and getattr(frame, "flags_follows", False):
            if self._hold(frame, stream_id, begins=True):  # a request arriving in fragments
                self._partials[stream_id] = _Partial(frame)
            return
        await super()._handle_next_frame(frame, handlers)  # type: ignore[misc]

    def _hold(self, frame: Any, stream_id: int, begins: bool) -> bool:
        size, cost = _fragment_cost(frame)
        if begins:
            cost += _PARTIAL_COST
        if self._buffered + size > self.max_payload_bytes:
            self.disconnect(f"the peer sent more than max_payload_bytes="
                            f"{self.max_payload_bytes} bytes of fragmented payload (stream "
                            f"{stream_id}): a payload that large is not taken")
            return False
        if self._bookkeeping + cost > self.max_payload_bytes:
            self.disconnect(f"the peer keeps too many fragments in progress (stream "
                            f"{stream_id}): {len(self._partials)} payloads begun in "
                            f"fragments, whose {self._bookkeeping} bytes of bookkeeping "
                            f"would pass max_payload_bytes={self.max_payload_bytes}")
            return False
        self._buffered += size
        self._bookkeeping += cost
        self.peak_buffered = max(self.peak_buffered, self._buffered)
        return True


class RemoteStreamError(ReactiveStreamsError, ConnectionError):
    """A remote request-stream failed: the server's ERROR frame, a refused or lost
    connection, or a payload that could not be decoded. The message names the server
    (``host:port``) and the route.

    Attributes
    ----------
    address : str
        ``host:port`` of the server.
    route : str or None
        The route requested.
    """

    def __init__(self, address: str, route: str | None, what: str) -> None:
        self.address = address
        self.route = route
        where = f"route {route!r}" if route is not None else "no route"
        super().__init__(f"RSocket request-stream from {address} ({where}): {what}")


def _check_endpoint(owner: str, host: object, port: object) -> None:
    if not isinstance(host, str) or not host.strip():
        raise ValueError(f"{owner}: host={host!r} is not accepted: a host name or address")
    if type(port) is not int or not 0 <= port <= 65535:
        raise ValueError(f"{owner}: port={port!r} is not accepted: an int from 1 to 65535 "
                         "(0 only to serve on a free port)")


def _check_path(owner: str, path: object) -> None:
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ValueError(f"{owner}: path={path!r} is not accepted: the absolute path of a "
                         "Unix domain socket")
    if not _listening.unix_path_fits(path):
        raise ValueError(f"{owner}: path={path[:40]!r}... ({len(os.fsencode(path))} bytes) is "
                         "not accepted: a Unix socket's path holds at most 107 bytes (103 "
                         "outside Linux)")


_BYTES_LIKE = (bytes, bytearray, memoryview)
#: The longest route: RSocket's routing metadata gives each tag a one-byte length.
MAX_ROUTE_BYTES: Final[int] = 255


def _check_route(owner: str, route: object) -> None:
    if route is None:
        return
    if not isinstance(route, str) or not route:
        raise TypeError(f"{owner}: route={route!r} is not accepted: a non-empty str, or None "
                        "for no route")
    if len(route.encode("utf-8")) > MAX_ROUTE_BYTES:
        raise ValueError(f"{owner}: route={route[:40]!r}... ({len(route.encode('utf-8'))} "
                         f"bytes) is not accepted: at most {MAX_ROUTE_BYTES} bytes in UTF-8 "
                         "(RSocket's routing tag)")


class RSocketPublisher(Publisher[T], Generic[T]):
    """Publishes the payloads of a request-stream of a remote RSocket server (TCP, or a Unix
    domain socket).

    Each subscription opens its own connection when it is made, and sends REQUEST_STREAM
    with the subscriber's first ``request(n)`` as its initial request, then every later
    ``request(n)`` as REQUEST_N: the server never has more outstanding demand than the
    subscriber gave. Demand above :data:`MAX_REQUEST_N` outstanding is sent in pieces as
    payloads arrive; unbounded demand (``2**63 - 1``, §3.17) is sent once as RSocket's
    unbounded :data:`UNBOUNDED_REQUEST_N`. ``cancel`` sends CANCEL and closes the
    connection; so does the end of the stream. The protocol runs on an event loop on a
    thread the publisher owns while it has subscriptions, and signals are sent from a
    thread of each subscription's own, so a slow subscriber never holds up the
    connection's keep-alives.

    Parameters
    ----------
    host : str
        The server's host name or address (not with ``path``).
    port : int
        The server's TCP port (not with ``path``).
    route : str, optional
        Sent as routing metadata (composite metadata, as Spring's ``@MessageMapping``
        expects). ``None``: no metadata.
    data : bytes
        The request's data (empty by default).
    metadata : bytes, optional
        The request's raw metadata, when no ``route`` is given.
    decode : callable, optional
        ``decode(data: bytes) -> element`` for each payload; default: the data as
        ``bytes``. An exception, or ``None``, fails the stream naming the payload.
    data_mime_type : str
        Announced in the SETUP frame (``application/octet-stream`` by default).
    connect_timeout : float
        Seconds to wait for the TCP connection.
    keepalive_interval : float
        Seconds between the KEEPALIVE frames the connection sends (default 2).
    keepalive_timeout : float
        Seconds without a KEEPALIVE answer from the server after which the stream fails
        (default 30): a server that stops answering (stopped, or gone without closing
        the connection) fails the stream between this and twice this long after its
        last answer (rsocket-py checks once per ``keepalive_timeout``).
    token : str, optional
        Presented in the SETUP frame as a bearer token (composite metadata, RSocket's
        authentication extension), as :func:`serve` asks for. ``None`` (default): no
        credentials. Never shown by ``repr`` or in errors.
    max_payload_bytes : int
        The largest payload taken from the server, whole or reassembled from fragments
        (default 4 MiB): a longer one fails the stream, saying so, as soon as its frame
        header or fragments pass the cap. A fragmented payload counts against the demand
        from its first fragment.
    path : str, optional
        Instead of ``host`` and ``port``: the absolute path of the server's Unix domain
        socket (what :func:`serve` with ``path=`` listens on, and ``expose()`` by
        default).

    Raises
    ------
    ValueError
        For a ``host``, ``port``, ``path``, ``route`` (over 255 bytes in UTF-8),
        ``data_mime_type``, ``connect_timeout``, ``keepalive_interval``,
        ``keepalive_timeout``, ``token`` or ``max_payload_bytes`` not accepted, ``path``
        with ``host`` or ``port``, or ``route`` and ``metadata`` both given.
    TypeError
        For a ``route``, ``token`` or ``data_mime_type`` that is not a str, ``data`` or
        ``metadata`` that are not bytes, or a ``decode`` that is not callable.

    Notes
    -----
    A refused or lost connection (a token the server refused, too), a server that stops
    answering KEEPALIVE, an ERROR frame, a payload over ``max_payload_bytes`` and a
    ``decode`` failure reach the subscriber as ``on_error(RemoteStreamError)``, whose
    message names ``host:port`` (``unix:path``) and the route. Creating the publisher
    connects nowhere.
    What the server can make the client hold is bounded: frames are refused past the
    cap before they are read, fragments of streams not open are dropped, and a server
    that reads nothing while the client answers its KEEPALIVE frames is cut off past
    :data:`MAX_QUEUED_FRAMES` frames waiting.

    Examples
    --------
    >>> from reactive_streams import RangePublisher, collect
    >>> with serve(RangePublisher(5, 3), encode=lambda i: str(i).encode()) as service:
    ...     collect(RSocketPublisher("127.0.0.1", service.port, decode=int,
    ...                              token=service.token), timeout=10)
    [5, 6, 7]
    """

    def __init__(self, host: str | None = None, port: int | None = None,
                 route: str | None = None, data: bytes = b"",
                 metadata: bytes | None = None, decode: Callable[[bytes], T] | None = None,
                 data_mime_type: str = "application/octet-stream",
                 connect_timeout: float = 10.0,
                 keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL,
                 keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
                 token: str | None = None,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, *,
                 path: str | None = None) -> None:
        if path is not None:
            if host is not None or port is not None:
                raise ValueError("RSocketPublisher: give path (a Unix domain socket) or host "
                                 "and port, not both")
            _check_path("RSocketPublisher", path)
        else:
            _check_endpoint("RSocketPublisher", host, port)
            if port == 0:
                raise ValueError("RSocketPublisher: port=0 is not accepted: an int from 1 to "
                                 "65535")
        _check_token("RSocketPublisher", token, "None for no credentials")
        _check_positive_int("RSocketPublisher", "max_payload_bytes", max_payload_bytes)
        if route is not None and metadata is not None:
            raise ValueError("RSocketPublisher: give route or metadata, not both (route is "
                             "sent as composite metadata)")
        if not isinstance(connect_timeout, (int, float)) or not connect_timeout > 0:
            raise ValueError(f"RSocketPublisher: connect_timeout={connect_timeout!r} is not "
                             "accepted: a positive number of seconds")
        for name, seconds in (("keepalive_interval", keepalive_interval),
                              ("keepalive_timeout", keepalive_timeout)):
            if (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                    or not seconds > 0):
                raise ValueError(f"RSocketPublisher: {name}={seconds!r} is not accepted: a "
                                 "positive number of seconds")
        if not keepalive_timeout > keepalive_interval:
            raise ValueError(f"RSocketPublisher: keepalive_timeout={keepalive_timeout!r} is "
                             "not accepted: more seconds than keepalive_interval="
                             f"{keepalive_interval!r}")
        _check_route("RSocketPublisher", route)
        if not isinstance(data, _BYTES_LIKE):
            raise TypeError(f"RSocketPublisher: data={data!r} is not accepted: bytes (the "
                            "request's data)")
        if metadata is not None and not isinstance(metadata, _BYTES_LIKE):
            raise TypeError(f"RSocketPublisher: metadata={metadata!r} is not accepted: bytes "
                            "(the request's raw metadata), or None")
        if decode is not None and not callable(decode):
            raise TypeError(f"RSocketPublisher: decode={decode!r} is not accepted: a callable "
                            "(bytes -> element), or None")
        if not isinstance(data_mime_type, str):
            raise TypeError(f"RSocketPublisher: data_mime_type={data_mime_type!r} is not "
                            "accepted: a MIME type, a str of 1 to 255 ASCII characters")
        if not data_mime_type or not data_mime_type.isascii() or len(data_mime_type) > 255:
            raise ValueError(f"RSocketPublisher: data_mime_type={data_mime_type!r} is not "
                             "accepted: a MIME type, a str of 1 to 255 ASCII characters")
        self.host = host
        self.port = port
        self.path = path
        self.route = route
        self.data = bytes(data)
        self.metadata = bytes(metadata) if metadata is not None else None
        self.decode = decode
        self.data_mime_type = data_mime_type
        self.connect_timeout = float(connect_timeout)
        self.keepalive_interval = float(keepalive_interval)
        self.keepalive_timeout = float(keepalive_timeout)
        self._token = token
        self.max_payload_bytes = max_payload_bytes
        self._runner = LoopRunner(name="rsocket-publisher")

    @property
    def address(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in str(self.host) else (
            f"{self.host}:{self.port}")

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        signals = ThreadRunner(max_workers=1, name="rsocket-publisher-signals")
        self._runner.acquire()
        stream: _RemoteStream[T] = _RemoteStream(self, self._runner, signals)
        emitter: _DemandEmitter[T] = _DemandEmitter(subscriber, stream, signals.acquire())
        stream.emitter = emitter
        emitter.start()
        stream.open()

    def __repr__(self) -> str:
        return f"RSocketPublisher({self.address}, route={self.route!r})"


class _DemandEmitter(Emitter[T], Generic[T]):
    """An Emitter that also hands each valid ``request(n)`` to the remote stream."""

    def __init__(self, subscriber: Subscriber[T], stream: _RemoteStream[T],
                 dispatch: Any) -> None:
        super().__init__(subscriber, stream, dispatch)
        self._stream = stream

    def request(self, n: int) -> None:
        if type(n) is int and n > 0 and not self.done and not self.cancelled:
            self._stream.add_demand(n)
        super().request(n)  # §3.9 for the others, and the local demand accounting


class _ResponseSubscriber:
    """rsocket-py's subscriber of the request-stream; called on the loop's thread."""

    def __init__(self, stream: _RemoteStream[Any]) -> None:
        self._stream = stream

    def on_subscribe(self, subscription: Any) -> None:
        pass

    def on_next(self, value: Any, is_complete: bool = False) -> None:
        self._stream.arrived(value, is_complete)

    def on_error(self, exception: Exception) -> None:
        self._stream.remote_failed(exception)

    def on_complete(self) -> None:
        self._stream.remote_completed()


class _ClientHandler(_BaseRequestHandler):  # type: ignore[misc]
    """Connection-level events of a publisher's connection."""

    def __init__(self, stream: _RemoteStream[Any]) -> None:
        super().__init__()
        self._stream = stream

    async def on_error(self, error_code: Any, payload: Any) -> None:
        # An ERROR frame on stream 0 (the SETUP was rejected, say): the connection's end
        # follows; keep its reason for the stream's error.
        code = getattr(error_code, "name", error_code)
        self._stream.connection_error = f"{code}: {_text(payload.data)}"

    async def on_connection_error(self, rsocket: Any, exception: Exception) -> None:
        self._stream.remote_failed(exception)

    async def on_keepalive_timeout(self, time_since_last_keepalive: datetime.timedelta,
                                   rsocket: Any) -> None:
        # rsocket-py's own handler does nothing: a server that stops answering (stopped,
        # or its machine gone without a FIN) would hold the stream forever.
        self._stream.keepalive_lost(time_since_last_keepalive.total_seconds())

    async def on_close(self, rsocket: Any, exception: Exception | None = None) -> None:
        # After its streams were failed; before any REQUEST_STREAM there were none.
        self._stream.connection_closed()


class _ClientConnection(_Guarded, _BaseClient):  # type: ignore[misc]
    """A publisher's connection: rsocket-py's client, bounded as :class:`_Guarded` says."""

    def __init__(self, stream: _RemoteStream[Any], transport: _BoundedTCP,
                 max_payload_bytes: int, *args: Any, **kwargs: Any) -> None:
        self._stream = stream
        self._init_guard(transport, max_payload_bytes)
        super().__init__(*args, **kwargs)

    def _violated(self, reason: str) -> None:
        self._stream.violated(reason)

    def _payload_starts(self, stream_id: int) -> str | None:
        return self._stream.payload_starts()


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


class _RemoteStream(Source[T], Generic[T]):
    """One subscription's request-stream. Everything but :meth:`pull`, :meth:`close` and
    :meth:`add_demand` runs on the loop's thread; those three only hand work to it."""

    def __init__(self, publisher: RSocketPublisher[T], runner: LoopRunner,
                 signals: ThreadRunner) -> None:
        self._publisher = publisher
        self._runner = runner
        self._signals = signals
        self._loop = runner.loop
        self.emitter: _DemandEmitter[T] | None = None
        self._ready: collections.deque[T] = collections.deque()
        self._terminal: Terminal | None = None
        self.connection_error = ""
        # Loop thread only.
        self._client: Any = None
        self._requester: Any = None
        self._opening: asyncio.Task[None] | None = None
        self._connected = False
        self._closed = False
        self._finished = False  # the remote stream ended (terminal frame received or sent)
        self._requested = 0  # the subscriber's demand, in total (capped at UNBOUNDED)
        self._unsent = 0  # of it, not yet sent to the server
        self._outstanding = 0  # sent to the server and not yet answered with a payload
        self._unbounded = False  # UNBOUNDED_REQUEST_N has been sent
        self._received = 0
        self._cancel_written: asyncio.Future[None] | None = None

    # -- any thread ------------------------------------------------------------------------

    def open(self) -> None:
        self._loop.call_soon_threadsafe(self._start_opening)

    def add_demand(self, n: int) -> None:
        try:
            self._loop.call_soon_threadsafe(self._demand, n)
        except RuntimeError:
            pass  # the loop is closed: the subscription has ended (§3.6)

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        ready = self._ready
        taken = [ready.popleft() for _ in range(min(n, len(ready)))]
        terminal = self._terminal  # set after the last element was appended
        return taken, (terminal if terminal is not None and not ready else None)

    def close(self) -> None:
        # Once, from the emitter, on cancel or after the terminal signal.
        self.emitter = None
        try:
            self._loop.call_soon_threadsafe(self._start_closing)
        finally:
            self._signals.release()

    # -- the loop's thread -------------------------------------------------------------------

    def _error(self, what: str) -> RemoteStreamError:
        return RemoteStreamError(self._publisher.address, self._publisher.route, what)

    def _end(self, terminal: Terminal) -> None:
        if self._terminal is None:
            self._terminal = terminal
            self._finished = True
            self._notify()

    def _notify(self) -> None:
        emitter = self.emitter
        if emitter is not None:
            emitter.signal()

    def _start_opening(self) -> None:
        if not self._closed:
            self._opening = self._loop.create_task(self._open())

    async def _open(self) -> None:
        publisher = self._publisher
        try:
            if publisher.path is not None:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(publisher.path), publisher.connect_timeout)
            else:
                assert publisher.host is not None and publisher.port is not None
                reader, writer = await asyncio.open_connection(sock=await _dial(
                    publisher.host, publisher.port, publisher.connect_timeout))
        except asyncio.TimeoutError:
            self._end(self._error(f"no connection within {publisher.connect_timeout:g} s"))
            return
        except OSError as error:
            self._end(self._error(f"cannot connect: {error}"))
            return
        except Exception as error:  # whatever else: the subscriber must hear of it
            self._end(self._error(f"cannot connect: {type(error).__name__}: {error}"))
            return
        try:
            transport = _BoundedTCP(reader, writer,
                                    publisher.max_payload_bytes + _FRAME_HEADERS,
                                    lambda length: client.frame_too_long(length))
            token = publisher._token
            client = _ClientConnection(
                self, transport, publisher.max_payload_bytes,
                _helpers.single_transport_provider(transport),
                handler_factory=lambda: _ClientHandler(self),
                data_encoding=publisher.data_mime_type.encode(),
                metadata_encoding=COMPOSITE_METADATA,
                keep_alive_period=datetime.timedelta(seconds=publisher.keepalive_interval),
                max_lifetime_period=datetime.timedelta(seconds=publisher.keepalive_timeout),
                setup_payload=(Payload(b"", _bearer_metadata(token))
                               if token is not None else None))
            self._client = client
            await client.connect()
        except Exception as error:
            writer.close()
            self._end(self._error(f"cannot set up the connection: {type(error).__name__}: "
                                  f"{error}"))
            return
        self._connected = True
        self._send_demand()

    def _demand(self, n: int) -> None:
        if self._closed or self._unbounded:
            return
        total = self._requested + n
        if total >= UNBOUNDED:
            added = UNBOUNDED - self._requested
            self._requested = UNBOUNDED
        else:
            added, self._requested = n, total
        self._unsent += added
        self._send_demand()

    def _send_demand(self) -> None:
        if not self._connected or self._closed or self._finished or self._unbounded:
            return
        if self._requested == UNBOUNDED:
            n = UNBOUNDED_REQUEST_N  # §3.17 demand is RSocket's unbounded demand
            self._unbounded = True
            self._unsent = 0
        else:
            # Top up only once the server holds at most half of the largest frame's worth:
            # ordinary demand goes out at once, exactly; huge demand in few frames.
            if self._unsent == 0 or self._outstanding > MAX_REQUEST_N // 2:
                return
            n = min(self._unsent, MAX_REQUEST_N - self._outstanding)
            self._unsent -= n
            self._outstanding += n
        if self._requester is None:
            publisher = self._publisher
            try:
                metadata = (_metadata.composite(_metadata.route(publisher.route))
                            if publisher.route is not None else publisher.metadata)
                requester = self._client.request_stream(Payload(publisher.data, metadata))
                requester.initial_request_n(n)
                self._requester = requester
                requester.subscribe(_ResponseSubscriber(self))
            except Exception as error:  # on a loop callback, nothing else would catch it
                self._end(self._error(f"cannot send REQUEST_STREAM: {type(error).__name__}: "
                                      f"{error}"))
        else:
            self._requester.request(n)

    def arrived(self, payload: Any, is_complete: bool) -> None:
        if self._finished:
            return
        self._received += 1
        if not self._unbounded:
            self._outstanding -= 1
            if self._outstanding < 0:
                self._cancel_remote()
                self._end(self._error(f"the server sent payload #{self._received} beyond the "
                                      "demand it was given (§1.1)"))
                return
        data = payload.data if payload.data is not None else b""
        decode = self._publisher.decode
        if decode is None:
            element: Any = bytes(data)
        else:
            try:
                element = decode(bytes(data))
                if element is None:
                    raise TypeError("decode returned None; elements must not be None (§2.13)")
            except Exception as error:
                self._cancel_remote()
                self._end(self._error(f"decode failed on payload #{self._received} "
                                      f"({_preview(data)}): {type(error).__name__}: {error}"))
                return
        self._ready.append(element)
        if is_complete:
            self._end(COMPLETE)
            return
        self._notify()
        if self._unsent:
            self._send_demand()

    def remote_completed(self) -> None:
        self._end(COMPLETE)

    def _lost(self, otherwise: str) -> str:
        """Why the connection ended: the server's refusal of the SETUP, its ERROR frame on
        the connection, or ``otherwise``."""
        why = self.connection_error
        if why.startswith(("REJECTED_SETUP", "INVALID_SETUP", "UNSUPPORTED_SETUP")):
            hint = ("; no token was given: pass the service's token (token=...)"
                    if self._publisher._token is None and "token" in why else "")
            return f"the server refused the connection: {why}{hint}"
        return f"connection lost: {why or otherwise}"

    def violated(self, reason: str) -> None:
        """The server broke a bound (the connection is being cut)."""
        if not self._finished:
            self._end(self._error(f"connection cut: {reason}"))

    def payload_starts(self) -> str | None:
        """A fragmented payload began: it counts against the demand from now (§1.1)."""
        if self._finished or self._unbounded or self._outstanding > 0:
            return None
        return (f"the server sent payload #{self._received + 1} (its first fragment) beyond "
                "the demand it was given (§1.1)")

    def remote_failed(self, error: BaseException) -> None:
        if self._finished:
            return
        code = getattr(getattr(error, "error_code", None), "name", None)
        if code in ("CONNECTION_ERROR", "CONNECTION_CLOSE"):
            self._end(self._error(self._lost(
                "the connection closed before the stream completed")))
        elif code is not None:
            self._end(self._error(f"the server answered with error {code}: "
                                  f"{getattr(error, 'data', '') or error}"))
        else:
            self._end(self._error(f"the server answered with an error: {error}"))

    def keepalive_lost(self, seconds: float) -> None:
        if not self._closed and not self._finished:
            self._end(self._error(f"connection lost: no KEEPALIVE answer for {seconds:.1f} s "
                                  f"(keepalive_timeout {self._publisher.keepalive_timeout:g} s)"))

    def connection_closed(self) -> None:
        if not self._closed and not self._finished:
            self._end(self._error(self._lost("the server closed the connection")))

    def _cancel_remote(self) -> None:
        """Send CANCEL for a stream under way (idempotent)."""
        requester = self._requester
        if requester is None or self._finished:
            return
        self._finished = True
        frame = _frames.to_cancel_frame(requester.stream_id)
        frame.sent_future = self._loop.create_future()
        # The stream stays registered until the connection closes: payloads already on
        # their way then reach arrived(), which drops them, instead of rsocket-py's
        # warning about frames of an unknown stream.
        self._client.send_frame(frame)
        self._cancel_written = frame.sent_future

    def _start_closing(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.create_task(self._shut())

    async def _shut(self) -> None:
        try:
            opening = self._opening
            if opening is not None and not opening.done():
                opening.cancel()
                await asyncio.gather(opening, return_exceptions=True)
            if self._client is not None:
                self._cancel_remote()
                written = self._cancel_written
                if written is not None:
                    # The CANCEL first, then the connection's end.
                    await asyncio.wait([written], timeout=_CANCEL_WRITE_S)
                try:
                    await self._client.close()
                except Exception:
                    log.debug("closing the connection to %s failed", self._publisher.address,
                              exc_info=True)
        finally:
            self._client = None
            self._requester = None
            self._runner.release()


#: Seconds between attempts to connect while none has: a SYN that a listener drops, its
#: accept queue full (a busy server, or a flood of connections from others), is sent again
#: by the kernel only after 1 s, then 3 s and 7 s; a new attempt meanwhile has its own
#: chance, and the earlier ones stay under way (the first connected is kept).
_REDIAL_S = 0.25


async def _dial(host: str, port: int, timeout: float) -> socket.socket:
    """A connected TCP socket to ``host:port`` within ``timeout`` seconds: its addresses in
    turn, a new attempt every :data:`_REDIAL_S` while none has answered. When every address
    refused, the last refusal is raised at once; else ``TimeoutError`` at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    found = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM),
                                   timeout)
    if not found:
        raise OSError(f"{host!r} resolves to no address")
    attempts: dict[asyncio.Future[None], tuple[socket.socket, int]] = {}
    refused: dict[int, OSError] = {}  # the last refusal, by address
    turn = 0
    try:
        while True:
            untried = [i for i in range(len(found)) if i not in refused]
            index = untried[turn % len(untried)]
            turn += 1
            family, kind, proto, _, address = found[index]
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            attempts[asyncio.ensure_future(loop.sock_connect(sock, address))] = (sock, index)
            while attempts:
                left = deadline - loop.time()
                if left <= 0:
                    raise asyncio.TimeoutError()
                done, _ = await asyncio.wait(attempts, timeout=min(_REDIAL_S, left),
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    break  # none answered yet: time for another attempt
                for ended in done:
                    ended_sock, ended_index = attempts.pop(ended)
                    error = ended.exception()
                    if error is None:
                        return ended_sock
                    ended_sock.close()
                    if not isinstance(error, OSError):
                        raise error
                    refused[ended_index] = error
            if not attempts and len(refused) == len(found):
                raise list(refused.values())[-1]
    finally:
        for attempt, (sock, _) in attempts.items():
            attempt.cancel()
            sock.close()


def _preview(data: bytes, limit: int = 40) -> str:
    shown = repr(bytes(data[:limit]))
    return f"{shown}{'...' if len(data) > limit else ''}, {len(data)} bytes"


# -- serving a Publisher ------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamRequest:
    """A remote client's REQUEST_STREAM, as a publisher factory given to :func:`serve` sees it.

    Attributes
    ----------
    route : str or None
        The route of its routing metadata, if any.
    data : bytes
        The request's data.
    metadata : bytes
        The request's raw metadata.
    """

    route: str | None
    data: bytes
    metadata: bytes


PublisherOrFactory = Publisher[Any] | Callable[[StreamRequest], Publisher[Any]]


def _default_encode(element: Any) -> Any:
    if isinstance(element, Payload):
        return element
    if isinstance(element, (bytes, bytearray, memoryview)):
        return Payload(bytes(element))
    if isinstance(element, str):
        return Payload(element.encode("utf-8"))
    raise TypeError(f"an element of type {type(element).__name__} cannot be sent as an RSocket "
                    "payload as it is: serve() sends bytes and str (UTF-8); give it "
                    "encode=<element -> bytes>")


class RSocketService:
    """A running RSocket server (TCP, or a Unix domain socket) answering request-streams
    from a Publisher; made by :func:`serve`. Close it (or use it as a context manager) to
    stop serving: the connections are closed and their subscriptions cancelled.

    Attributes
    ----------
    host : str
        The address it listens on (empty on a Unix domain socket).
    port : int or None
        The TCP port it listens on (the one chosen when ``port=0`` was asked for); ``None``
        on a Unix domain socket.
    path : str or None
        The Unix domain socket it listens on; ``None`` over TCP.
    addresses : list of str
        Every address it listens on: ``host:port``, and the loopback address of the other
        family at the same port when ``host`` covers this machine's loopback
        (``[::1]:port`` for ``127.0.0.1``), where the machine has one; or ``unix:path``.
    route : str or None
        The only route it answers (``None``: any).
    token : str or None
        The token every connection must present in its SETUP (``None``: a service made
        with ``authenticate=False``, which asks for none). Never shown by ``repr``.
    connections_refused : int
        Connections refused so far (no token or another, too many connections), or closed
        before their SETUP (none in time, or to make room: ``max_pending``).
    """

    def __init__(self, publisher_or_factory: PublisherOrFactory, route: str | None,
                 encode: Callable[[Any], Any] | None, prefetch: int,
                 keepalive_timeout: float = DEFAULT_SERVE_KEEPALIVE_TIMEOUT) -> None:
        if isinstance(publisher_or_factory, Publisher):
            publisher = publisher_or_factory
            self._factory: Callable[[StreamRequest], Publisher[Any]] = lambda request: publisher
        elif callable(publisher_or_factory):
            self._factory = publisher_or_factory
        else:
            raise TypeError("serve: expected a Publisher or a callable (StreamRequest -> "
                            f"Publisher), got {type(publisher_or_factory).__name__}")
        if type(prefetch) is not int or prefetch < 1:
            raise ValueError(f"serve: prefetch={prefetch!r} is not accepted: a positive int")
        if (isinstance(keepalive_timeout, bool) or not isinstance(keepalive_timeout, (int, float))
                or not keepalive_timeout > 0):
            raise ValueError(f"serve: keepalive_timeout={keepalive_timeout!r} is not accepted: "
                             "a positive number of seconds")
        self.keepalive_timeout = float(keepalive_timeout)
        self._watchdog: asyncio.Task[None] | None = None
        self.route = route
        self.host = ""
        self.port: int | None = None
        self.path: str | None = None
        self._path_id: tuple[int, int] | None = None
        self.addresses: list[str] = []
        self._encode = encode
        self.prefetch = prefetch
        self._loop_runner = LoopRunner(name="rsocket-serve")
        self._calls = ThreadRunner(max_workers=4, name="rsocket-serve-calls")
        self._gate: _listening.Gate | None = None
        self._opening: set[asyncio.Task[None]] = set()
        self._quiet = _listening.QuietLog(lambda: self.address)
        self._connections: set[Any] = set()
        self._closed = False
        self._lock = threading.Lock()
        self.streams_served = 0
        self.connections_refused = 0
        self.token: str | None = None
        self.max_payload_bytes = DEFAULT_MAX_PAYLOAD_BYTES
        self.max_connections = DEFAULT_MAX_CONNECTIONS
        self.max_streams = DEFAULT_MAX_STREAMS
        self.max_pending = DEFAULT_MAX_PENDING

    def _start(self, host: str, port: int, path: str | None) -> None:
        # Bound here, so that an address in use is the caller's OSError.
        if path is not None:
            sockets = [_listening.bind_unix(path)]
            self.path = path
            self._path_id = _listening.file_id(path)
            self.addresses = [f"unix:{path}"]
        else:
            sockets = _listening.bind_tcp(host, port)
            self.host, self.port = sockets[0].getsockname()[:2]
            self.addresses = [_listening.address_of(sock) for sock in sockets]
        self._loop_runner.acquire()
        self._dispatch = self._calls.acquire()
        try:
            asyncio.run_coroutine_threadsafe(self._listen(sockets),
                                             self._loop_runner.loop).result(30)
        except BaseException:
            if self._gate is None:
                for sock in sockets:
                    sock.close()
            self.close()
            raise

    async def _listen(self, sockets: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        self._gate = _listening.Gate(
            loop, sockets, self._first_frame, self._admit_socket,
            max_pending=self.max_pending, setup_timeout=SETUP_TIMEOUT,
            frame_limit=_SETUP_FRAME_LIMIT, linger=_REFUSED_LINGER_S, quiet=self._quiet,
            on_refused=self._refused_one)
        self._gate.start()
        self._watchdog = loop.create_task(self._watch())

    def _refused_one(self) -> None:
        self.connections_refused += 1

    def _first_frame(self, frame: bytes) -> tuple[int, str] | None:
        """Whether a connection's first frame admits it (the gate's question, before any
        rsocket-py object is made for the connection): ``None``, or why not."""
        refusal = _setup_refusal(self, _frame.parse_or_ignore(frame))
        return None if refusal is None else (int(refusal[0].value), refusal[1])

    def _admit_socket(self, sock: Any, received: bytes) -> None:
        task = self._loop_runner.loop.create_task(self._connect(sock, received))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    async def _connect(self, sock: Any, received: bytes) -> None:
        """Hand an admitted socket to rsocket-py, with what the gate read of it first."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        reader.feed_data(received)  # before the transport reads anything more
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
        except BaseException:
            sock.close()
            raise
        if self._closed:
            transport.abort()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        bounded = _BoundedTCP(reader, writer, _SETUP_FRAME_LIMIT,
                              lambda length: connection.frame_too_long(length))
        connection = _ServeConnection(self, bounded)
        self._connections.add(connection)

    async def _watch(self) -> None:
        # rsocket-py's server checks no KEEPALIVE: a client gone without closing (its
        # machine lost, a network partition) would hold its streams, and a publisher that
        # waits for every subscriber (a query's ForeachBatchPublisher), forever.
        while True:
            await asyncio.sleep(self.keepalive_timeout / 4)
            now = time.monotonic()
            for connection in list(self._connections):
                # Never less than two of the client's own KEEPALIVE intervals (from SETUP).
                allowed = max(self.keepalive_timeout, 2 * connection.keepalive_interval)
                silent = now - connection.last_keepalive
                if silent > allowed:
                    self._connections.discard(connection)
                    log.warning("RSocket service on %s: no KEEPALIVE from a client for %.1f s "
                                "(keepalive_timeout %g s): closing its connection",
                                self.address, silent, allowed)
                    # At once: a client gone silent may read nothing either, and a graceful
                    # close would wait for it.
                    connection.disconnect(f"no KEEPALIVE for {silent:.1f} s")

    @property
    def address(self) -> str:
        return self.addresses[0] if self.addresses else "(not listening)"

    def close(self, timeout: float = 10.0) -> None:
        """Stop listening, close every connection (cancelling its subscriptions) and the
        loop. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._loop_runner.running:
            try:
                asyncio.run_coroutine_threadsafe(self._shut(),
                                                 self._loop_runner.loop).result(timeout)
            except Exception:
                log.warning("closing the RSocket service on %s failed", self.address,
                            exc_info=True)
            self._loop_runner.release()
            self._calls.release()

    async def _shut(self) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.close()
        if self.path is not None and _listening.file_id(self.path) == self._path_id:
            # Only the socket this service made: whatever took its name since stays.
            try:
                os.unlink(self.path)
            except OSError:
                pass
        for task in list(self._opening):
            task.cancel()
        await asyncio.gather(*self._opening, return_exceptions=True)
        for connection in list(self._connections):
            try:
                await asyncio.wait_for(connection.close(), _CANCEL_WRITE_S)
            except Exception:
                # A client that reads nothing holds a graceful close: cut it.
                connection.guard_transport.abort()
                log.debug("closing an RSocket connection failed", exc_info=True)
        self._connections.clear()

    def __enter__(self) -> RSocketService:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RSocketService({self.address}, route={self.route!r})"

    # -- for the streams ---------------------------------------------------------------------

    def _publisher_for(self, request: StreamRequest) -> Publisher[Any]:
        publisher = self._factory(request)
        if not isinstance(publisher, Publisher):
            raise TypeError(f"the publisher factory returned {type(publisher).__name__}, not "
                            "a Publisher")
        return publisher

    def _payload(self, element: Any) -> Any:
        encode = self._encode
        if encode is None:
            return _default_encode(element)
        encoded = encode(element)
        return encoded if isinstance(encoded, Payload) else Payload(bytes(encoded))


def serve(publisher_or_factory: PublisherOrFactory, host: str = "127.0.0.1", port: int = 0,
          route: str | None = None, *, encode: Callable[[Any], Any] | None = None,
          prefetch: int = DEFAULT_PREFETCH,
          keepalive_timeout: float = DEFAULT_SERVE_KEEPALIVE_TIMEOUT,
          token: str | None = None, authenticate: bool = True,
          max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
          max_connections: int = DEFAULT_MAX_CONNECTIONS,
          max_streams: int = DEFAULT_MAX_STREAMS,
          max_pending: int = DEFAULT_MAX_PENDING,
          path: str | None = None) -> RSocketService:
    """Serve a Publisher as an RSocket request-stream over TCP (or a Unix domain socket),
    to clients that present its token.

    Every connection must present the service's token in its SETUP frame, as a bearer
    token of RSocket's authentication extension: composite metadata
    (``message/x.rsocket.composite-metadata.v0`` announced as the SETUP's metadata MIME
    type) holding a ``message/x.rsocket.authentication.v0`` entry of type ``bearer``
    (:class:`RSocketPublisher` does this with ``token=``; rsocket-js with
    ``encodeBearerAuthMetadata``; Spring with ``BearerTokenMetadata``). It is compared in
    constant time. A connection without it, with another, or whose first frame is not a
    SETUP, gets an ERROR frame (REJECTED_SETUP, INVALID_SETUP) saying so and is closed;
    the service serves the others on. ``127.0.0.1`` is reachable by every user of this
    machine, which is why the token is asked for there too.

    A loopback address is held in both families: on ``127.0.0.1`` (or ``localhost``,
    ``0.0.0.0``) the service also serves ``[::1]`` at the same port, and on ``::1`` (or
    ``::``) also ``127.0.0.1``, so that a client dialling ``localhost``, which may try
    either first, reaches this service and nobody else can listen there to be sent its
    token (:attr:`RSocketService.addresses`). On a machine without an IPv6 loopback
    nobody can listen on ``::1`` either, and only ``127.0.0.1`` is served. With
    ``port=0`` the port is one free on both.

    Connections that never send a SETUP cannot keep a client out: until its first frame
    is read and checked, a connection is no more than a socket and a small buffer, read
    without holding up accepting; at most ``max_pending`` of them wait at once, and one
    more closes the oldest of them, another user's first (on Linux, where the kernel says
    whose a loopback connection is), so another user's connections never close one of
    yours; a connection sends its SETUP within 10 s (:data:`SETUP_TIMEOUT`) or is closed.
    Refusals are logged one by one five times a minute at most; the rest, and connections
    closed before their SETUP, are counted in a line per minute.

    Every remote REQUEST_STREAM subscribes to the publisher (or to a new one from the
    factory), and the remote demand paces it: the initial request and each REQUEST_N
    become ``request(n)`` on that subscription, RSocket's unbounded ``2**31 - 1`` becoming
    unbounded demand; a remote CANCEL, or a closed connection, cancels it. Whatever the
    remote demand, the subscription is asked for at most ``prefetch`` elements ahead of
    those written to the socket (a payload counts once its frame is written, not when it
    is queued), so unbounded demand is served in steps, and a client that reads slowly
    holds the publisher back once the socket buffers are full: the process holds at most
    ``prefetch`` payloads per stream (and asyncio's 64 KiB write buffer); the kernel's
    send and receive buffers (a few MiB on Linux) hold the rest in flight. ``on_error``
    becomes an ERROR frame (APPLICATION_ERROR) with the error's type and message, and
    ``on_complete`` the stream's COMPLETE.

    Parameters
    ----------
    publisher_or_factory : Publisher or callable
        A Publisher every remote stream subscribes to, or ``factory(StreamRequest) ->
        Publisher`` called for each (a failure becomes the stream's ERROR).
    host : str
        The address to listen on (``127.0.0.1`` by default: this machine only, with
        ``[::1]`` at the same port as said above).
    port : int
        The port; 0 (default) picks a free one, see :attr:`RSocketService.port`.
    route : str, optional
        Answer only requests with this route (in composite routing metadata); others get
        an ERROR naming the route served. ``None`` answers any.
    encode : callable, optional
        ``encode(element) -> bytes`` (or an ``rsocket.payload.Payload``). Default: bytes
        as they are, ``str`` as UTF-8; any other element fails the stream, saying so.
    prefetch : int
        Elements asked of the local publisher ahead of those written to the socket
        (default 4096).
    keepalive_timeout : float
        Seconds without a KEEPALIVE frame from a client after which its connection is
        closed and its subscriptions cancelled (default 90; never less than twice the
        interval the client announced in SETUP). Checked every quarter of it.
    token : str, optional
        The token clients must present (at most 4096 bytes in UTF-8). Default: a random
        one (256 bits from :mod:`secrets`), read from :attr:`RSocketService.token`.
    authenticate : bool
        ``False`` serves every connection, asking for no token (then ``token`` must not be
        given): anyone who can reach ``host:port`` (on ``127.0.0.1``, every local user)
        reads the stream and paces the publisher. Default ``True``.
    max_payload_bytes : int
        The largest request payload taken from a client, whole or in fragments (default
        4 MiB); a longer frame, or more fragments in progress on one connection, cut that
        connection. Fragments of streams that are not open are dropped.
    max_connections : int
        Connections served at once (default 64); one more is refused (REJECTED_SETUP).
    max_streams : int
        Streams served at once on one connection (default 256); one more gets an ERROR.
    max_pending : int
        Connections whose SETUP is not read yet that wait at once (default 512, and never
        more than a quarter of the process's file descriptor limit); one more closes the
        oldest of them, as said above.
    path : str, optional
        Listen on a Unix domain socket at this absolute path instead of TCP (then
        ``host`` and ``port`` are not given); it must not exist, and is removed by
        :meth:`RSocketService.close`. Put it in a folder only you can enter (0700): then
        no other user can even connect. Clients: ``RSocketPublisher(path=...)``.

    Returns
    -------
    RSocketService
        Already listening; close it, or use it in a ``with`` block.

    Raises
    ------
    ValueError, TypeError
        For arguments not accepted.
    OSError
        When the address cannot be bound, or the loopback address of the other family is
        in use at the ``port`` asked for (see above).

    Notes
    -----
    Bounded against any client: a frame is refused as soon as its header announces more
    than ``max_payload_bytes`` plus 1 KiB (64 KiB before the SETUP is accepted), before
    it is read; at most ``max_payload_bytes`` of fragments are held per connection;
    frames other than the paced payloads waiting to be written to a client that reads
    nothing (KEEPALIVE answers, ERROR frames...) are at most :data:`MAX_QUEUED_FRAMES`
    (1024): one more cuts the connection. The payloads are paced by ``prefetch``.

    When the publisher's subscription has ``defer_confirmation()`` and ``confirm(count)``
    (a query's ``ForeachBatchPublisher``), an element counts as taken only once the client
    is known to have received it: once a stream's payloads are written, the connection
    sends a KEEPALIVE asking for an answer, which an RSocket client gives only after
    reading every frame before it; its answer confirms them. A client that dies first
    leaves them unconfirmed.

    Examples
    --------
    >>> from reactive_streams import RangePublisher, collect
    >>> with serve(RangePublisher(0, 3), encode=lambda i: str(i).encode()) as service:
    ...     collect(RSocketPublisher("127.0.0.1", service.port, decode=int,
    ...                              token=service.token), timeout=10)
    [0, 1, 2]
    """
    _check_endpoint("serve", host, port)
    if path is not None:
        _check_path("serve", path)
        if port != 0 or host != "127.0.0.1":
            raise ValueError("serve: give path (a Unix domain socket) or host and port, not "
                             "both")
    _check_route("serve", route)
    if encode is not None and not callable(encode):
        raise TypeError(f"serve: encode={encode!r} is not accepted: a callable (element -> "
                        "bytes), or None")
    if not isinstance(authenticate, bool):
        raise TypeError(f"serve: authenticate={authenticate!r} is not accepted: True (ask "
                        "for the token) or False (serve anyone)")
    if not authenticate and token is not None:
        raise ValueError("serve: authenticate=False serves anyone, asking for no token: "
                         "give token or authenticate=False, not both")
    _check_token("serve", token, "None for a random one")
    for name, value in (("max_payload_bytes", max_payload_bytes),
                        ("max_connections", max_connections), ("max_streams", max_streams),
                        ("max_pending", max_pending)):
        _check_positive_int("serve", name, value)
    if authenticate and token is None:
        token = secrets.token_urlsafe(_TOKEN_BYTES)
    service = RSocketService(publisher_or_factory, route, encode, prefetch, keepalive_timeout)
    service.token = token
    service.max_payload_bytes = max_payload_bytes
    service.max_connections = max_connections
    service.max_streams = max_streams
    service.max_pending = _listening.within_descriptors(max_pending)
    service._start(host, port, path)
    return service


def _setup_refusal(service: RSocketService, frame: Any) -> tuple[Any, str] | None:
    """Why a connection whose first frame is ``frame`` is refused (an RSocket error code and
    the reason), or ``None`` when it carries the service's token (or the service asks for
    none)."""
    if not isinstance(frame, _frame.SetupFrame):
        what = type(frame).__name__ if frame is not None else "a frame marked to be ignored"
        return (_error_codes.ErrorCode.INVALID_SETUP,
                f"the first frame must be SETUP, not {what}")
    if service.token is None:
        return None
    presented = _bearer_token(frame.metadata or b"") if (
        bytes(frame.metadata_encoding or b"") == COMPOSITE_METADATA.value.name) else None
    if presented is None:
        return (_error_codes.ErrorCode.REJECTED_SETUP,
                "the token was refused: none was presented (this service asks for a bearer "
                "token in the SETUP frame's composite metadata, "
                "message/x.rsocket.authentication.v0)")
    if not hmac.compare_digest(presented, service.token.encode("utf-8")):
        return (_error_codes.ErrorCode.REJECTED_SETUP,
                "the token was refused: it is not this service's token")
    return None


class _ServeConnection(_Guarded, _BaseServer):  # type: ignore[misc]
    """A client's connection to a service: admitted by its SETUP frame (the token, the
    connection cap), bounded as :class:`_Guarded` says, and noting when the client was
    last heard. It also sends the KEEPALIVE probes by which served streams learn what the
    client has read."""

    def __init__(self, service: RSocketService, transport: _BoundedTCP) -> None:
        self._service = service
        self._init_guard(transport, service.max_payload_bytes)
        self.admitted = False
        self.refused: str | None = None
        self.opened = time.monotonic()
        self.last_keepalive = self.opened  # the connection's start counts as one
        self.keepalive_interval = 0.0  # the client's, from its SETUP frame
        self._probe: tuple[bytes, dict[_ServedStream, int]] | None = None
        self._probe_waiting: set[_ServedStream] = set()
        self._probes_sent = 0
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(SETUP_TIMEOUT, self._setup_overdue)
        super().__init__(transport, handler_factory=lambda: _ServeHandler(service))

    # -- admission -------------------------------------------------------------------------

    def _setup_overdue(self) -> None:
        if not self.admitted:
            why = self.refused or f"no SETUP frame within {SETUP_TIMEOUT:g} s"
            self.disconnect(f"refused: {why}")

    def _violated(self, reason: str) -> None:
        self._deadline.cancel()
        if self.admitted:
            log.warning("RSocket service on %s: cut off %s: %s", self._service.address,
                        self.guard_transport.peer, reason)

    async def _handle_next_frame(self, frame: Any, handlers: Any) -> None:
        if not self.admitted:
            if self.refused is None:
                self._admit(frame)
            if not self.admitted:
                return  # before the SETUP was accepted, nothing is handled
        await super()._handle_next_frame(frame, handlers)

    def _admit(self, frame: Any) -> None:
        # The gate checked this frame already; checked again here, where it is parsed
        # again, so that nothing is handled on a frame that was not checked.
        service = self._service
        refusal = _setup_refusal(service, frame)
        if refusal is not None:
            self.refuse(*refusal)
            return
        admitted = sum(1 for c in service._connections if c.admitted)
        if admitted >= service.max_connections:
            self.refuse(_error_codes.ErrorCode.REJECTED_SETUP,
                        f"too many connections: this service takes at most "
                        f"{service.max_connections} at once (max_connections)")
            return
        self.admitted = True
        self._deadline.cancel()
        self.keepalive_interval = (frame.keep_alive_milliseconds or 0) / 1000
        self.guard_transport.limit = service.max_payload_bytes + _FRAME_HEADERS

    def refuse(self, code: Any, why: str) -> None:
        """Answer with an ERROR frame on stream 0, then half-close and read nothing more:
        the peer sees the ERROR and then the end of the connection."""
        self.refused = why
        self._service.connections_refused += 1
        self._service._quiet.warn("refused: too many connections",
                                  "refused a connection from %s: %s",
                                  self.guard_transport.peer, why)
        frame = _frame.ErrorFrame()
        frame.stream_id = 0
        frame.error_code = code
        frame.data = why.encode("utf-8")
        written = asyncio.get_running_loop().create_future()
        written.add_done_callback(lambda _: self.guard_transport.write_eof())
        frame.sent_future = written
        _BaseServer.send_frame(self, frame)  # not counted: the last frame it sends
        self.guard_transport.discarding = True
        self._deadline.cancel()
        self._deadline = asyncio.get_running_loop().call_later(_REFUSED_LINGER_S,
                                                               self._setup_overdue)

    # -- streams ---------------------------------------------------------------------------

    async def handle_request_stream(self, frame: Any) -> None:
        limit = self._service.max_streams
        if len(self._stream_control._streams) >= limit:
            if frame.stream_id not in self._stream_control._streams:
                self.send_error(frame.stream_id, RuntimeError(
                    f"too many streams: this service serves at most {limit} at once on one "
                    "connection (max_streams)"))
            return
        await super().handle_request_stream(frame)

    async def handle_keep_alive(self, frame: Any) -> None:
        self.last_keepalive = time.monotonic()
        probe = self._probe
        if probe is not None and not frame.flags_respond and bytes(frame.data or b"") == probe[0]:
            # The answer to a probe: the client's RSocket library read every frame written
            # before it, so each stream's payloads queued before it reached the client.
            self._probe = None
            for stream, handed in probe[1].items():
                stream.received(handed)
            if self._probe_waiting:
                self._send_probe()
            return
        await super().handle_keep_alive(frame)

    def probe(self, stream: _ServedStream) -> None:
        """Ask the client to answer a KEEPALIVE sent after ``stream``'s payloads so far."""
        self._probe_waiting.add(stream)
        if self._probe is None:
            self._send_probe()

    def _send_probe(self) -> None:
        self._probes_sent += 1
        data = _PROBE + str(self._probes_sent).encode()
        self._probe = (data, {s: s.handed for s in self._probe_waiting})
        self._probe_waiting.clear()
        self.send_frame(_frames.to_keepalive_frame(data))


class _ServeHandler(_BaseRequestHandler):  # type: ignore[misc]
    """One connection of a service; called on the loop's thread."""

    def __init__(self, service: RSocketService) -> None:
        super().__init__()
        self._service = service
        self._composite = False

    async def on_setup(self, data_encoding: bytes, metadata_encoding: bytes,
                       payload: Any) -> None:
        self._composite = metadata_encoding == COMPOSITE_METADATA.value.name

    async def request_stream(self, payload: Any) -> Any:
        metadata = bytes(payload.metadata or b"")
        route = _route_of(metadata) if self._composite and metadata else None
        service = self._service
        if service.route is not None and route != service.route:
            return _Refusal(RuntimeError(
                f"no stream on route {route!r} here: this server serves route "
                f"{service.route!r}"))
        request = StreamRequest(route, bytes(payload.data or b""), metadata)
        service.streams_served += 1
        return _ServedStream(service, request).remote_end

    async def on_close(self, rsocket: Any, exception: Exception | None = None) -> None:
        self._service._connections.discard(rsocket)


def _route_of(metadata: bytes) -> str | None:
    try:
        parsed = _composite.CompositeMetadata().parse(metadata)
    except Exception:
        return None
    for item in parsed.items:
        if isinstance(item, _routing.RoutingMetadata) and item.tags:
            tag = item.tags[0]
            return tag.decode("utf-8", "replace") if isinstance(tag, bytes) else str(tag)
    return None


class _Refusal:
    """An rsocket-py publisher that answers with an ERROR at once."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def subscribe(self, subscriber: Any) -> None:
        subscriber.on_subscribe(self)
        subscriber.on_error(self._error)

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


class _RemoteEnd:
    """What rsocket-py's responder sees of a served stream: its publisher and the remote
    subscriber's subscription (request/cancel come from the loop's thread)."""

    def __init__(self, stream: _ServedStream) -> None:
        self._stream = stream

    def subscribe(self, subscriber: Any) -> None:
        self._stream.remote = subscriber
        subscriber.on_subscribe(self)

    def request(self, n: int) -> None:
        self._stream.remote_request(n)

    def cancel(self) -> None:
        self._stream.remote_cancel()


class _ServedStream(SerialWorker, Subscriber[Any]):
    """A remote request-stream fed by a local subscription.

    Calls on the local subscription (§2.7: one at a time) are made by this worker's loop on
    the service's call threads, never on the event loop, so a synchronous publisher that
    signals from inside ``request`` does not hold up the connection. Elements travel to
    the event loop, where they are encoded and written in order.
    """

    def __init__(self, service: RSocketService, request: StreamRequest) -> None:
        super().__init__(service._dispatch)
        self._service = service
        self._request = request
        self._loop = service._loop_runner.loop
        self.remote: Any = None  # rsocket-py's StreamSubscriber (loop thread)
        self.remote_end = _RemoteEnd(self)
        # Guarded by self._lock:
        self._asked = 0  # remote demand in total (UNBOUNDED once unbounded)
        self._forwarded = 0  # requested from the local subscription in total
        self._received = 0  # elements the local publisher signalled
        self.handed = 0  # elements handed to the connection's send queue (loop thread)
        # Elements whose PAYLOAD frame is written to the socket (its sent future is done):
        # rsocket-py's send queue is unbounded, so only these free room under the prefetch.
        self._written = 0
        self._refill_scheduled = False
        self._cancel = False
        self._invalid: int | None = None
        self._ready: collections.deque[Any] = collections.deque()
        self._terminal: Terminal | None = None
        self._flush_pending = False
        # The publisher's subscription's confirm(count), when it counts an element as
        # taken only once confirmed (interface of ForeachBatchPublisher): the count the
        # client is known to have received is confirmed as probes come back.
        self._confirm: Callable[[int], None] | None = None
        self._confirmed = 0  # loop thread
        # Worker only:
        self._subscription: Subscription | None = None
        self._started = False
        self._cancelled = False
        # Loop only:
        self._remote_done = False

    # -- the remote side (loop thread) -------------------------------------------------------

    def remote_request(self, n: int) -> None:
        with self._lock:
            if n <= 0:
                self._invalid = n  # the local subscription answers it (§3.9)
            elif n >= UNBOUNDED_REQUEST_N:
                self._asked = UNBOUNDED
            else:
                self._asked = min(UNBOUNDED, self._asked + n)
        self._schedule()

    def remote_cancel(self) -> None:
        self._remote_done = True
        with self._lock:
            self._cancel = True
        self._schedule()

    # -- the worker: calls on the local subscription ------------------------------------------

    def _work(self) -> bool:
        if not self._started:
            self._started = True
            try:
                self._service._publisher_for(self._request).subscribe(self)
            except Exception as error:
                self._local_end(error)
                return False
        subscription = self._subscription
        if subscription is None or self._cancelled:
            return False
        with self._lock:
            cancel, invalid, self._invalid = self._cancel, self._invalid, None
            self._refill_scheduled = False
            n = 0
            if not cancel:
                room = self._service.prefetch - (self._forwarded - self._written)
                n = min(self._asked - self._forwarded, room)
                if n > 0:
                    self._forwarded += n
        if cancel:
            self._cancelled = True
            subscription.cancel()
            return False
        if invalid is not None:
            subscription.request(invalid)
        if n > 0:
            subscription.request(n)
        return False

    def _work_failed(self, error: BaseException) -> None:
        self._local_end(error)

    # -- the local subscriber (the publisher's threads) ---------------------------------------

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "the subscription", "§2.13")
        if self._subscription is not None:
            subscription.cancel()  # §2.5
            return
        defer = getattr(subscription, "defer_confirmation", None)
        confirm = getattr(subscription, "confirm", None)
        if callable(defer) and callable(confirm):
            # Before the first request: an element written to the socket is not yet
            # received (the client may die with it unread), so only a probe's answer
            # confirms it.
            defer()
            self._confirm = confirm
        self._subscription = subscription
        self._schedule()

    def on_next(self, element: Any) -> None:
        require_not_none(element, "the element", "§2.13")
        with self._lock:
            self._received += 1
            if self._received > self._forwarded:
                excess = True
            else:
                excess = False
                self._ready.append(element)
        if excess:
            self._local_end(RuntimeError(
                f"§1.1: the publisher signalled element #{self._received}, beyond the "
                f"{self._forwarded} requested"))
            with self._lock:
                self._cancel = True
            self._schedule()
            return
        self._wake()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "the error", "§2.13")
        self._local_end(error)

    def on_complete(self) -> None:
        self._local_end(COMPLETE)

    def _local_end(self, terminal: Terminal) -> None:
        with self._lock:
            if self._terminal is None:
                self._terminal = terminal
        self._wake()

    def _wake(self) -> None:
        with self._lock:
            if self._flush_pending:
                return
            self._flush_pending = True
        try:
            self._loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the loop is closed: the service was closed
            pass

    # -- writing (loop thread) -----------------------------------------------------------------

    def _flush(self) -> None:
        with self._lock:
            elements = list(self._ready)
            self._ready.clear()
            self._flush_pending = False
            terminal = self._terminal
        remote = self.remote
        if self._remote_done or remote is None:
            return
        for element in elements:
            try:
                payload = self._service._payload(element)
            except Exception as error:
                self._remote_done = True
                remote.on_error(RuntimeError(
                    f"element #{self.handed + 1} could not be encoded: "
                    f"{type(error).__name__}: {error}"))
                with self._lock:
                    self._cancel = True
                self._schedule()
                return
            # The frame is built here rather than by remote.on_next so that its sent
            # future tells when it is on the socket: that, not the send queue, frees room.
            frame = _frames.to_payload_frame(remote.stream_id, payload)
            frame.sent_future = self._loop.create_future()
            frame.sent_future.add_done_callback(self._sent)
            remote.socket.send_frame(frame)
            self.handed += 1
        if terminal is not None:
            self._remote_done = True
            if terminal is COMPLETE:
                remote.on_complete()
            else:
                assert isinstance(terminal, BaseException)
                remote.on_error(RuntimeError(f"{type(terminal).__name__}: {terminal}"))

    def _sent(self, _future: asyncio.Future[None]) -> None:
        # A payload reached the socket. Ask for more once half the prefetch is free, so
        # that requests go to the local subscription in steps, not one per payload.
        with self._lock:
            self._written += 1
            written = self._written
            refill = (not self._refill_scheduled and self._asked > self._forwarded
                      and self._forwarded - self._written <= self._service.prefetch // 2)
            if refill:
                self._refill_scheduled = True
        if refill:
            self._schedule()
        if self._confirm is not None and written == self.handed and written > self._confirmed:
            # Everything handed over is on the socket: ask the client to say it has read it.
            self.remote.socket.probe(self)

    def received(self, count: int) -> None:
        """The client has read this stream's first ``count`` payloads (a probe came back;
        loop thread)."""
        confirm = self._confirm
        if confirm is not None and count > self._confirmed:
            self._confirmed = count
            try:
                confirm(count)
            except Exception:
                log.warning("confirming %d elements to the served publisher failed", count,
                            exc_info=True)

