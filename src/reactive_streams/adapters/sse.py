"""Server-Sent Events as a Publisher, read from the socket only as demand allows.

:class:`SsePublisher` opens ``GET url`` (``Accept: text/event-stream``) when subscribed to
and signals each event as an :class:`SseEvent`. A thread of the subscription's own reads
the response: it stops reading while ``max_buffered`` events (or ``max_buffered_bytes``)
wait for demand, so the kernel's receive buffer fills, TCP's window closes and the
server's writes block: a slow subscriber holds the server back, within what the sockets'
buffers hold (``receive_buffer`` bounds this side's). Events are resumed, not
acknowledged: the stream sends ``Last-Event-ID`` with the id of the last event read when it
reconnects after a dropped connection, and a new subscription starts after
``last_event_id``. Needs nothing beyond Python's ``http.client`` (extra ``sse`` is empty).
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from ..api import Publisher, Subscriber
from ..errors import ReactiveStreamsError
from ..runners import ThreadRunner
from ..signalling import COMPLETE, Emitter, Source, Terminal, require_not_none
from .urls import redact_url

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "EVENT_OVERHEAD_BYTES", "SseError", "SseEvent",
           "SsePublisher"]

T = TypeVar("T")

log = logging.getLogger("reactive_streams.adapters.sse")

#: The default ``max_event_bytes`` (1 MiB), as the other adapters' message limit.
DEFAULT_MAX_EVENT_BYTES: Final = 2**20
#: What an event read and held beyond demand costs besides its strings (its record, its
#: entry in the buffer), counted against ``max_buffered_bytes``.
EVENT_OVERHEAD_BYTES: Final = 256
#: The reconnection delay until the server sends ``retry:`` (the spec leaves it to the
#: client; browsers wait a few seconds).
DEFAULT_RETRY_S: Final = 3.0
#: The shortest reconnection delay, whatever ``retry:`` says.
MIN_RETRY_S: Final = 0.1


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One event as the server sent it.

    Attributes
    ----------
    data : str
        The ``data:`` lines, joined with newlines.
    event : str
        The ``event:`` type; ``"message"`` when the server gave none.
    id : str or None
        The last ``id:`` the stream set (the spec's last event id), or None before any.
    timestamp : float
        When this client read it, in seconds since the epoch; not compared by ``==``.
    """

    data: str
    event: str = "message"
    id: str | None = None
    timestamp: float = field(default=0.0, compare=False)


class SseError(ReactiveStreamsError, ConnectionError):
    """The event stream could not be opened or read: the message names the URL (without
    its query string or credentials) and why."""


class _Final(SseError):
    """An SseError that reconnecting cannot cure: refused credentials, a missing endpoint,
    a response that is no event stream, an event over the limit."""


class SsePublisher(Publisher[T], Generic[T]):
    """Publishes the events of a Server-Sent Events endpoint, reading only against demand.

    Each ``subscribe`` opens a connection of its own, on a thread of its own (so
    ``subscribe`` returns at once). The stream is endless unless ``max_events`` is given
    or the server answers 204 No Content (the spec's "stop reconnecting"), which completes
    it; ``cancel`` closes the connection.

    **Backpressure.** At most ``max_buffered`` events (and ``max_buffered_bytes``) are
    read beyond demand; then the thread stops reading, the socket's receive buffer fills
    and the server's writes block. Beyond the subscription's own count, the kernel's
    buffers hold what the server already wrote: ``receive_buffer`` sets this side's
    (``SO_RCVBUF``), the server's send buffer is the server's.

    **Resuming.** A dropped connection (or a read that sees nothing for ``read_timeout``,
    servers' comments and pings included) is opened again after the server's ``retry:``
    (default 3 s) with ``Last-Event-ID`` set to the id of the last event read, so a server
    that honours it goes on with the next event: nothing is lost or repeated. Only after
    ``give_up_after`` seconds without a working connection does the stream fail. A new
    subscription sends ``last_event_id`` (or :attr:`resume_from`, when set).

    Parameters
    ----------
    url : str
        An ``http://`` or ``https://`` URL.
    headers : mapping of str to str, optional
        Sent with every request (an ``Authorization`` header, say); never logged or shown.
    last_event_id : str, optional
        Sent as ``Last-Event-ID`` by the first connection of a subscription.
    tls : ssl.SSLContext, optional
        For ``https://``; default: the system's certificate authorities.
    max_event_bytes : int
        The longest line and the largest event (its data, id and type), default 1 MiB;
        a longer one fails the stream (at least 64).
    max_buffered : int
        The most events read and held beyond demand (at least 1), default 64.
    max_buffered_bytes : int, optional
        The most bytes held for them (each event's strings and
        :data:`EVENT_OVERHEAD_BYTES`), default None: only ``max_buffered`` bounds them.
    receive_buffer : int, optional
        The socket's ``SO_RCVBUF`` in bytes; default the system's (which grows itself).
    connect_timeout : float
        Seconds to connect and get the response's headers, default 10.
    read_timeout : float
        Seconds a connection may send nothing while events are wanted before it is
        opened again, default 60.
    give_up_after : float
        Seconds of failed reconnections before the stream fails, default 60.
    max_events : int, optional
        Complete after this many elements.
    decode : callable, optional
        Turns each :class:`SseEvent` into the element signalled; must not return None.

    Raises
    ------
    ValueError
        For a parameter that is not accepted (the message names it).

    Examples
    --------
    >>> SsePublisher("https://example.com/stream?token=secret")
    SsePublisher('https://example.com/stream?...')
    """

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None,
                 last_event_id: str | None = None, tls: ssl.SSLContext | None = None,
                 max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, max_buffered: int = 64,
                 max_buffered_bytes: int | None = None, receive_buffer: int | None = None,
                 connect_timeout: float = 10.0, read_timeout: float = 60.0,
                 give_up_after: float = 60.0, max_events: int | None = None,
                 decode: Callable[[SseEvent], T] | None = None) -> None:
        problem = url_problem(url)
        if problem is not None:
            raise ValueError(f"url {redact_url(str(url))!r}: {problem}")
        self.url = url
        self._parts = urllib.parse.urlsplit(url)
        headers = dict(headers or {})
        for name, value in headers.items():
            if not (isinstance(name, str) and isinstance(value, str)) or any(
                    c in name + value for c in "\r\n") or not _latin1(value) or not (
                    name.isascii() and name and not any(c in name for c in ' :\t')):
                raise ValueError(f"headers: names and values are strings without line "
                                 f"breaks, in Latin-1 as HTTP sends them (the header "
                                 f"{str(name)[:40]!r} is not; its value is not shown)")
        self.headers = headers
        if last_event_id is not None and (not isinstance(last_event_id, str)
                                          or any(c in last_event_id for c in "\r\n\0")):
            raise ValueError("last_event_id: a string without line breaks or NUL is "
                             "accepted")
        if tls is not None and not isinstance(tls, ssl.SSLContext):
            raise ValueError(f"tls {tls!r}: an ssl.SSLContext or None is accepted")
        _check_int("max_event_bytes", max_event_bytes, 64)
        _check_int("max_buffered", max_buffered, 1)
        for name, optional in (("max_buffered_bytes", max_buffered_bytes),
                               ("receive_buffer", receive_buffer), ("max_events", max_events)):
            if optional is not None:
                _check_int(name, optional, 0 if name == "max_events" else 1)
        for name, seconds in (("connect_timeout", connect_timeout),
                              ("read_timeout", read_timeout),
                              ("give_up_after", give_up_after)):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
                    0 < seconds < float("inf")):
                raise ValueError(f"{name} {seconds!r}: a positive number of seconds is "
                                 f"accepted")
        if decode is not None and not callable(decode):
            raise ValueError(f"decode {decode!r}: a callable taking an SseEvent, or None")
        self.last_event_id = last_event_id
        self.resume_from: str | None = None
        self.tls = tls
        self.max_event_bytes, self.max_buffered = max_event_bytes, max_buffered
        self.max_buffered_bytes, self.receive_buffer = max_buffered_bytes, receive_buffer
        self.connect_timeout, self.read_timeout = float(connect_timeout), float(read_timeout)
        self.give_up_after, self.max_events = float(give_up_after), max_events
        self.decode = decode
        self._runner = ThreadRunner(max_workers=1, name="sse-signals")
        self._latest: _Stream[T] | None = None

    def __repr__(self) -> str:
        return f"SsePublisher({redact_url(self.url)!r})"

    @property
    def received(self) -> int:
        """Events the latest subscription has read so far (signalled or waiting)."""
        stream = self._latest
        return 0 if stream is None else stream.received

    @property
    def connections(self) -> int:
        """Connections the latest subscription has opened (1, plus each reconnection)."""
        stream = self._latest
        return 0 if stream is None else stream.connections

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        stream: _Stream[T] = _Stream(self)
        self._latest = stream
        stream.start(Emitter(subscriber, stream, self._runner.acquire()))


def url_problem(url: object) -> str | None:
    """Why ``url`` cannot be read as an event stream, or None."""
    if not isinstance(url, str) or not url.strip():
        return "an http:// or https:// URL is needed"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError as error:
        return f"not a URL ({error})"
    if parts.scheme not in ("http", "https"):
        return "an http:// or https:// URL is needed"
    if any(ord(c) <= 0x20 or ord(c) >= 0x7F for c in url):
        return ("spaces, control and non-ASCII characters must be percent-encoded (as "
                "%20)")
    if not parts.hostname:
        return "the URL names no host"
    return None


def _connect_with_buffer(host: str, port: int, receive_buffer: int,
                         timeout: float) -> socket.socket:
    """A TCP connection whose ``SO_RCVBUF`` is set before it connects (the window is agreed
    in the handshake), trying each address of ``host`` in turn, as
    ``socket.create_connection`` does."""
    failure: OSError | None = None
    for family, socket_type, proto, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, socket_type, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as error:
            sock.close()
            failure = error
    raise failure if failure is not None else OSError(f"no address for {host!r}")


def _latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _check_int(name: str, value: object, low: int) -> None:
    if type(value) is not int or value < low:
        raise ValueError(f"{name} {value!r}: a whole number >= {low} is accepted")


def _held_bytes(event: SseEvent) -> int:
    return (len(event.data) + len(event.event) + len(event.id or "")
            + EVENT_OVERHEAD_BYTES)


class _Stream(Source[T], Generic[T]):
    """One subscription: the reading thread, the events it read, and the emitter's pulls."""

    def __init__(self, publisher: SsePublisher[T]) -> None:
        self.p = publisher
        self._lock = threading.Condition()
        self._buffer: deque[SseEvent] = deque()
        self._buffered_bytes = 0
        self._terminal: Terminal | None = None
        self._closing = False
        self._taken = 0
        self.received = 0
        self.connections = 0
        self._last_id = publisher.resume_from if publisher.resume_from is not None else (
            publisher.last_event_id)
        self._retry = DEFAULT_RETRY_S
        self._emitter: Emitter[T] | None = None
        self._connection: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sse {redact_url(publisher.url)}")

    def start(self, emitter: Emitter[T]) -> None:
        self._emitter = emitter
        emitter.start()
        self._thread.start()

    # -- the emitter's side ---------------------------------------------------------------

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        limit = self.p.max_events
        with self._lock:
            want = n if limit is None else min(n, limit - self._taken)
            taken = [self._buffer.popleft() for _ in range(min(max(want, 0), len(self._buffer)))]
            self._buffered_bytes -= sum(_held_bytes(event) for event in taken)
            self._taken += len(taken)
            terminal = self._terminal if not self._buffer else None
            if limit is not None and self._taken >= limit:
                terminal = COMPLETE
            if taken:
                self._lock.notify_all()  # room again for the reading thread
        decode = self.p.decode
        if decode is None:
            return taken, terminal  # type: ignore[return-value]
        try:
            return [decode(event) for event in taken], terminal
        except Exception as error:
            raise ValueError(f"sse {redact_url(self.p.url)}: decode failed for the event "
                             f"with id {taken[0].id!r} or one after it: {error}") from error

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._emitter = None
            connection = self._connection
            self._lock.notify_all()
        _shut(connection)
        self.p._runner.release()

    # -- the reading thread ---------------------------------------------------------------

    def _run(self) -> None:
        failing_since: float | None = None
        last_error: BaseException | None = None
        try:
            while not self._stopped():
                try:
                    response = self._open()
                    if response is None:
                        self._end(COMPLETE)  # 204: the server says the stream is over
                        return
                    failing_since, last_error = None, None
                    self._read(response)  # returns when the server closes the response
                    if self._stopped():
                        return
                    log.info("sse %s: the server closed the stream; reconnecting in %g s "
                             "after event %r", redact_url(self.p.url), self._retry,
                             self._last_id)
                except _Final as error:
                    self._end(error)
                    return
                except SseError as error:
                    last_error = error
                except (OSError, http.client.HTTPException) as error:
                    if self._stopped():
                        return
                    last_error = SseError(f"sse {redact_url(self.p.url)}: "
                                          f"{type(error).__name__}: {error}")
                delay = self._retry
                if last_error is not None:
                    now = time.monotonic()
                    failing_since = failing_since if failing_since is not None else now
                    left = failing_since + self.p.give_up_after - now
                    if left <= 0:
                        self._end(SseError(f"{last_error} (no working connection for "
                                           f"give_up_after={self.p.give_up_after:g} s)"))
                        return
                    delay = min(delay, left)
                    log.warning("%s; reconnecting in %g s", last_error, delay)
                with self._lock:
                    self._lock.wait_for(lambda: self._closing, timeout=delay)
        except Exception as error:  # a bug here must not leave the subscriber waiting
            log.exception("sse %s: the reading thread failed", redact_url(self.p.url))
            # Its type only: a library's message may quote the request (a header).
            self._end(SseError(f"sse {redact_url(self.p.url)}: the reading thread failed: "
                               f"{type(error).__name__} (see the log)"))
        finally:
            with self._lock:
                connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    def _stopped(self) -> bool:
        with self._lock:
            return self._closing or self._terminal is not None

    def _end(self, terminal: Terminal) -> None:
        with self._lock:
            if self._terminal is None and not self._closing:
                self._terminal = terminal
            emitter = self._emitter
        if emitter is not None:
            emitter.signal()

    def _open(self) -> http.client.HTTPResponse | None:
        p, parts = self.p, self.p._parts
        shown = redact_url(p.url)
        if parts.scheme == "https":
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=p.connect_timeout,
                context=p.tls or ssl.create_default_context())
        else:
            connection = http.client.HTTPConnection(parts.hostname or "", parts.port,
                                                    timeout=p.connect_timeout)
        with self._lock:
            if self._closing:
                return None
            old, self._connection = self._connection, connection
        if old is not None:
            old.close()
        if p.receive_buffer is not None:
            # Before connecting: the window is agreed in the handshake.
            connection.sock = _connect_with_buffer(
                parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80),
                p.receive_buffer, p.connect_timeout)
            if parts.scheme == "https":
                context = p.tls or ssl.create_default_context()
                connection.sock = context.wrap_socket(connection.sock,
                                                      server_hostname=parts.hostname)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache", **p.headers}
        if self._last_id is not None:
            headers["Last-Event-ID"] = self._last_id
        self.connections += 1
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        if response.status == 204:
            return None
        if response.status in (401, 403):
            raise _Final(f"sse {shown}: the server refused the credentials: HTTP "
                         f"{response.status} {response.reason} (the headers are not shown)")
        if response.status != 200:
            # A server error may pass; a missing endpoint or a bad request does not.
            kind_of = SseError if response.status >= 500 else _Final
            raise kind_of(f"sse {shown}: HTTP {response.status} {response.reason}, not 200 "
                          f"with an event stream")
        kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "text/event-stream":
            raise _Final(f"sse {shown}: the response's Content-Type is {kind or 'none'!r}, "
                         f"not text/event-stream")
        if connection.sock is not None:
            connection.sock.settimeout(p.read_timeout)
        return response

    def _read(self, response: http.client.HTTPResponse) -> None:
        """Read events until the server closes the response; the parsing is the spec's
        (html.spec.whatwg.org, server-sent events), with LF or CRLF line ends."""
        limit = self.p.max_event_bytes
        data: list[str] = []
        size = 0
        event_type = ""
        # The spec's last event ID buffer: it becomes the stream's last event id (sent
        # when reconnecting) only once its event is complete, so an event cut off by a
        # dropped connection is asked for again rather than skipped.
        id_buffer = self._last_id
        while True:
            if not self._wait_for_room():
                return
            raw = response.readline(limit + 2)
            if not raw:
                return  # the server ended the response
            content = raw[:-1] if raw.endswith(b"\n") else raw
            if content.endswith(b"\r"):
                content = content[:-1]
            if len(content) > limit:
                raise _Final(f"sse {redact_url(self.p.url)}: a line longer than "
                             f"max_event_bytes={limit}")
            line = content.decode("utf-8", errors="replace")
            if not line:
                self._last_id = id_buffer
                if data:
                    self._dispatch(SseEvent("\n".join(data), event_type or "message",
                                            id_buffer, time.time()))
                data, size, event_type = [], 0, ""
                continue
            if line.startswith(":"):
                continue  # a comment: servers' keep-alives
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                size += len(value) + 1
                if size > limit:
                    raise _Final(f"sse {redact_url(self.p.url)}: an event larger than "
                                 f"max_event_bytes={limit}")
                data.append(value)
            elif name == "event":
                event_type = value
            elif name == "id":
                if "\0" not in value:
                    id_buffer = value
            elif name == "retry" and value.isascii() and value.isdigit():
                # At least a tenth of a second: retry 0 would reconnect in a busy loop.
                self._retry = max(int(value) / 1000, MIN_RETRY_S)

    def _wait_for_room(self) -> bool:
        """Wait while the buffer is full (reading paused: TCP holds the server back);
        False once the stream is closing."""
        p = self.p
        with self._lock:
            def room() -> bool:
                if self._closing or self._terminal is not None:
                    return True
                if p.max_events is not None and self._taken + len(self._buffer) >= (
                        p.max_events):
                    return False
                if p.max_buffered_bytes is not None and self._buffered_bytes >= (
                        p.max_buffered_bytes):
                    return False
                return len(self._buffer) < p.max_buffered
            self._lock.wait_for(room)
            return not (self._closing or self._terminal is not None)

    def _dispatch(self, event: SseEvent) -> None:
        with self._lock:
            self._buffer.append(event)
            self._buffered_bytes += _held_bytes(event)
            self.received += 1
            emitter = self._emitter
        if emitter is not None:
            emitter.signal()


def _shut(connection: Any) -> None:
    """Unblock a read of ``connection`` from another thread."""
    sock = getattr(connection, "sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
