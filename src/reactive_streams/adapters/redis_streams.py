"""A Redis stream's consumer group as a Publisher, reading only what demand asks for, and a
Subscriber that adds its elements to a stream exactly once.

:class:`RedisStreamPublisher` reads a stream as one consumer of a consumer group, with
``XREADGROUP ... COUNT n`` where ``n`` never exceeds the subscriber's outstanding demand,
so a slow subscriber holds the group back and the stream, not the reader's memory, grows.
It reads its own pending entries first (what it was given before and did not acknowledge),
may claim a dead consumer's (``XAUTOCLAIM``), and acknowledges (``XACK``) only after
``on_next`` or, with ``acknowledge="on_durable"``, once the subscriber says the entries are
durable. :class:`RedisStreamSubscriber` adds each element as an entry (``XADD``), at most
``window`` unconfirmed, each with a deduplication key so that a retried batch adds nothing
twice. Needs redis-py (extra ``redis``).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

from ..api import Publisher, Subscriber
from ..errors import ReactiveStreamsError
from ..runners import ThreadRunner
from ..signalling import COMPLETE, Emitter, Source, Terminal, require_not_none
from ._confirming import BrokerRefused, ConfirmingSubscriber
from ._extras import require
from ._sessions import Counting, check_int, is_number

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "ITEM_OVERHEAD_BYTES", "RedisEntry", "RedisError",
           "RedisStreamPublisher", "RedisStreamSubscriber", "SkipEntry", "entry_bytes",
           "parse_url"]

T = TypeVar("T")

log = logging.getLogger("reactive_streams.adapters.redis_streams")

#: The default ``max_message_bytes`` (1 MiB), as the mqtt and websocket adapters'.
DEFAULT_MAX_MESSAGE_BYTES: Final = 2**20
#: What each field name and value of an entry costs besides its bytes (the bytes object
#: and its place in the reply), counted against ``max_message_bytes`` so that an entry of
#: a million empty fields meets the bound as a large one does.
ITEM_OVERHEAD_BYTES: Final = 64
#: What an entry costs in a reply besides its fields: its ID and the arrays around it.
_ENTRY_OVERHEAD_BYTES: Final = 256
#: The most the replies of the other commands (XAUTOCLAIM's deleted IDs aside) may hold.
_SMALL_REPLY_BYTES: Final = 1 << 16
#: The longest wait of the reader for demand or acknowledgements before it looks again.
_TICK: Final = 1.0
_LONG_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class RedisEntry:
    """One stream entry as the group delivered it.

    Attributes
    ----------
    stream : str
    id : str
        The entry ID (``"1700000000000-0"``): the entry's identity, unique in its stream.
    fields : dict of bytes to bytes
        The entry's field names and values, in the order they were added.
    redelivered : bool
        True when it came from a consumer's pending entries (read before and not
        acknowledged: this consumer's own, or a dead one's claimed), not as a new entry.
    """

    stream: str
    id: str
    fields: dict[bytes, bytes] = field(hash=False)
    redelivered: bool = False

    @property
    def timestamp_ms(self) -> int:
        """The milliseconds since the epoch in the entry ID (when the server added it, for
        IDs the server chose)."""
        return int(self.id.partition("-")[0])


class RedisError(ReactiveStreamsError, ConnectionError):
    """The server could not be reached, refused the credentials or a command, or the
    connection was lost. The message names ``host:port`` and never shows a password."""


class SkipEntry(ReactiveStreamsError):
    """Raised by a ``decode`` function to leave an entry out instead of failing the stream.

    The entry is not signalled and is acknowledged in its turn (with ``"on_durable"``,
    once the element before it is durable). Each one is logged at WARNING and counted in
    :attr:`RedisStreamPublisher.skipped`.
    """


_SKIPPED: Final = object()


def entry_bytes(fields: Mapping[bytes, bytes]) -> int:
    """An entry's size as ``max_message_bytes`` counts it: the bytes of its field names and
    values, and :data:`ITEM_OVERHEAD_BYTES` for each of them.

    Examples
    --------
    >>> entry_bytes({b"payload": b'{"id": 1}'})
    144
    """
    total = 2 * ITEM_OVERHEAD_BYTES * len(fields)
    for name, value in fields.items():  # a loop, not sum() of a generator: once an entry
        total += len(name) + len(value)
    return total


def parse_url(url: object) -> tuple[str, int, int, str | None, str | None, bool]:
    """``(host, port, db, username, password, tls)`` of a ``redis://`` or ``rediss://`` URL;
    ``ValueError`` naming what is wrong otherwise (never showing a password).

    Examples
    --------
    >>> parse_url("rediss://reader@cache.example:6380/2")
    ('cache.example', 6380, 2, 'reader', None, True)
    >>> parse_url("http://cache.example")
    Traceback (most recent call last):
    ...
    ValueError: url 'http://cache.example': redis://host[:port][/db] or \
rediss://host[:port][/db] (TLS) is accepted, not the scheme 'http'
    """
    accepted = "redis://host[:port][/db] or rediss://host[:port][/db] (TLS) is accepted"
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"url {url!r}: {accepted}")
    parts = urllib.parse.urlsplit(url.strip())
    shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"url {shown!r}: {accepted}, not the scheme {parts.scheme!r}")
    try:
        port = parts.port or 6379
    except ValueError:
        raise ValueError(f"url {shown!r}: {accepted}; the port is not a number from 1 to "
                         f"65535") from None
    if not parts.hostname:
        raise ValueError(f"url {shown!r}: {accepted}; the host is missing")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise ValueError(f"url {shown!r}: {accepted}; the path is a database number, not "
                         f"{path!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"url {shown!r}: {accepted}, without ?query or #fragment")
    username = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password else None
    return (parts.hostname, port, int(path or 0), username, password,
            parts.scheme == "rediss")


class RedisStreamPublisher(Publisher[T], Generic[T]):
    """Publishes a Redis stream's entries as one consumer of a consumer group, read only
    against demand.

    Each ``subscribe`` opens a connection of its own, read by a thread of its own (so
    ``subscribe`` returns at once), and signals each entry (``decode(entry)``, by default
    the :class:`RedisEntry` itself). The stream is endless unless ``max_messages`` is
    given; ``cancel`` stops reading within ``block_ms``.

    **Order of reading.** First the consumer's own pending entries (``XREADGROUP ... 0``:
    what it was given before and never acknowledged, such as the entries a killed process
    held), then, with ``claim_idle_ms``, the group's entries pending for longer than that
    with any consumer (``XAUTOCLAIM``: a dead consumer's), then new entries (``>``), waiting
    at most ``block_ms`` a read (``BLOCK``) so a cancel is noticed promptly. With
    ``claim_idle_ms`` the claim is made again every ``claim_idle_ms`` while reading.

    **Backpressure.** Each read asks for ``COUNT`` = the outstanding demand not yet met
    by what was read, and at most ``max_buffered``; with no demand nothing is read. So the
    group holds, pending for this consumer, at most the entries signalled and not yet
    acknowledged plus ``min(demand, max_buffered)`` read and not yet signalled; the rest
    stays in the stream (the group's ``lag``).

    **Bytes.** One reply holds at most ``COUNT`` entries of at most ``max_message_bytes``
    each (see :func:`entry_bytes`) and 256 bytes of framing an entry: the connection's
    parser counts the bulk strings of a reply as it reads them, and closes the connection
    before reading a field larger than ``max_message_bytes`` or past that budget. An entry
    above ``max_message_bytes`` fails the stream (it stays pending: raise the bound, or
    ``XACK``/``XDEL`` it).

    **Acknowledgement.** ``acknowledge="on_next"``: ``XACK`` once ``on_next`` returned
    (sent in batches, by the reading thread, before its next read). ``"on_durable"``: only
    when :meth:`on_durable` says the first ``count`` elements signalled to the latest
    subscription are durable, on the caller's thread, as the ``reactive`` source expects
    (``pyspark_reactive.source.durability``). An entry never acknowledged stays in the
    group's pending entries list and comes again when this consumer subscribes again (or
    is claimed by another consumer with ``claim_idle_ms``): nothing is lost; what was
    signalled and not yet acknowledged when a process died comes again, with the same ID
    (:meth:`identity`).

    Parameters
    ----------
    stream, group, consumer : str
        The stream's key, the consumer group and this reader's consumer name in it.
    url : str, optional
        ``redis://[user[:password]@]host[:port][/db]``, or ``rediss://`` for TLS; given,
        it replaces ``host``, ``port``, ``db`` (and ``username``/``password`` when it
        carries them).
    host : str
        Default ``"127.0.0.1"``.
    port : int
        Default 6379.
    db : int
        The database number, default 0.
    username, password : str, optional
        Redis 6 ACL user (``None``: the ``default`` user) and its password.
    tls : bool
        TLS with the system's certificate authorities (or ``ca_certs``), checking the
        host name.
    ca_certs : str, optional
        A PEM file of certificate authorities to check the server's certificate against;
        implies ``tls``.
    create_group : bool
        Create the group (``XGROUP CREATE ... MKSTREAM``) at ``start_id`` when it is
        missing; default False: a missing stream or group fails the stream.
    start_id : str
        Where a created group starts: ``"$"`` (default: entries added from now on) or
        ``"0"`` (the whole stream), or an entry ID.
    claim_idle_ms : int, optional
        Claim the group's entries pending for longer than this with any consumer.
    max_buffered : int
        The most entries one read asks for and the most held read and not yet signalled
        (default 100).
    max_message_bytes : int
        The largest entry accepted (:func:`entry_bytes`), default 1 MiB.
    block_ms : int
        The longest wait of one read for new entries (default 500): how long a cancel may
        take to be noticed by the reading thread.
    connect_timeout : float
        Seconds for the TCP (and TLS) connection, default 10.
    max_messages : int, optional
        Complete after this many elements (entries ``decode`` left out do not count).
    acknowledge : "on_next" or "on_durable"
    decode : callable, optional
        Turns each :class:`RedisEntry` into the element signalled. If it raises, the
        stream fails (wrapped in ``ValueError`` naming the entry) and the entry is not
        acknowledged; :class:`SkipEntry` leaves it out, acknowledged in its turn. It must
        not return None (§2.13).

    Raises
    ------
    ValueError
        For a parameter that is not accepted (the message names it).
    MissingExtraError
        When redis-py is not installed (``pip install 'pyspark-reactive[redis]'``).

    Notes
    -----
    Errors reach the subscriber as ``on_error(RedisError)``, naming ``host:port``: the
    server could not be reached, refused the credentials (the password is never shown),
    the stream or group is missing (``NOGROUP``), a command was refused (an ACL's
    ``NOPERM``), or the connection was lost. A subscription does not reconnect; since what
    was not acknowledged stays pending, a new subscription carries on where it stopped.

    Examples
    --------
    >>> from reactive_streams.adapters.redis_streams import RedisStreamPublisher
    >>> orders = RedisStreamPublisher("orders", "billing", "reader-1", port=6380)
    >>> orders
    RedisStreamPublisher('127.0.0.1:6380', stream='orders', group='billing', consumer='reader-1')
    """

    def __init__(self, stream: str, group: str, consumer: str, *, url: str | None = None,
                 host: str = "127.0.0.1", port: int = 6379, db: int = 0,
                 username: str | None = None, password: str | None = None,
                 tls: bool = False, ca_certs: str | None = None, create_group: bool = False,
                 start_id: str = "$", claim_idle_ms: int | None = None,
                 max_buffered: int = 100,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, block_ms: int = 500,
                 connect_timeout: float = 10.0, max_messages: int | None = None,
                 acknowledge: Literal["on_next", "on_durable"] = "on_next",
                 decode: Callable[[RedisEntry], T] | None = None) -> None:
        require("redis", "redis", "the redis publisher")
        for name, value in (("stream", stream), ("group", group), ("consumer", consumer)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} {value!r}: a non-empty string is needed")
        if url is not None:
            u_host, port, db, u_user, u_password, u_tls = parse_url(url)
            host = u_host
            username = u_user if u_user is not None else username
            password = u_password if u_password is not None else password
            tls = tls or u_tls
        if not isinstance(host, str) or not host:
            raise ValueError(f"host {host!r}: a host name or address is needed")
        check_int("port", port, 1, 65535)
        check_int("db", db, 0, 2**31 - 1)
        if username is not None and not isinstance(username, str):
            raise ValueError(f"username {username!r}: a string or None is accepted")
        if password is not None and not isinstance(password, str):
            raise ValueError("password: a string or None is accepted, not "
                             f"{type(password).__name__}")
        if not isinstance(tls, bool):
            raise ValueError(f"tls {tls!r}: True or False is accepted")
        if ca_certs is not None and not isinstance(ca_certs, str):
            raise ValueError(f"ca_certs {ca_certs!r}: a path or None is accepted")
        if not isinstance(create_group, bool):
            raise ValueError(f"create_group {create_group!r}: True or False is accepted")
        if not _is_start_id(start_id):
            raise ValueError(f"start_id {start_id!r}: '$', '0' or an entry ID such as "
                             f"'1700000000000-0' is accepted")
        if claim_idle_ms is not None:
            check_int("claim_idle_ms", claim_idle_ms, 1, _LONG_MAX)
        check_int("max_buffered", max_buffered, 1, 1_000_000)
        check_int("max_message_bytes", max_message_bytes, 1024, 2**31 - 1)
        check_int("block_ms", block_ms, 1, 600_000)
        if not (is_number(connect_timeout) and connect_timeout > 0):
            raise ValueError(f"connect_timeout {connect_timeout!r}: a positive number of "
                             f"seconds is needed")
        if max_messages is not None:
            check_int("max_messages", max_messages, 0, _LONG_MAX)
        if acknowledge not in ("on_next", "on_durable"):
            raise ValueError(f"acknowledge {acknowledge!r}: 'on_next' or 'on_durable' is "
                             f"accepted")
        if decode is not None and not callable(decode):
            raise ValueError(f"decode {decode!r}: a callable taking a RedisEntry, or None, "
                             f"is accepted")
        self.stream, self.group, self.consumer = stream, group, consumer
        self.host, self.port, self.db = host, port, db
        self.username, self.password = username, password
        self.tls, self.ca_certs = tls or ca_certs is not None, ca_certs
        self.create_group, self.start_id = create_group, start_id
        self.claim_idle_ms = claim_idle_ms
        self.max_buffered, self.max_message_bytes = max_buffered, max_message_bytes
        self.block_ms, self.connect_timeout = block_ms, float(connect_timeout)
        self.max_messages, self.acknowledge, self.decode = max_messages, acknowledge, decode
        self._runner = ThreadRunner(max_workers=1, name="redis-signals")
        self._latest: _Session[T] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.address!r}, stream={self.stream!r}, "
                f"group={self.group!r}, consumer={self.consumer!r})")

    @property
    def received(self) -> int:
        """Entries the latest subscription has read so far (signalled or waiting)."""
        session = self._latest
        return 0 if session is None else session.received

    @property
    def skipped(self) -> int:
        """Entries of the latest subscription that ``decode`` left out (SkipEntry)."""
        session = self._latest
        return 0 if session is None else session.skipped

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        session: _Session[T] = _Session(self)
        self._latest = session
        emitter: Emitter[T] = Emitter(Counting(subscriber, session), session,
                                      self._runner.acquire())
        session.start(emitter)

    def wait_closed(self, timeout: float) -> bool:
        """Wait until the latest subscription's reading thread has ended (after a cancel or
        the stream's end); True if it has."""
        session = self._latest
        if session is None:
            return True
        session.thread.join(timeout)
        return not session.thread.is_alive()

    def on_durable(self, count: int) -> None:
        """The first ``count`` elements signalled to the latest subscription are durable:
        ``XACK`` their entries now, on this thread (with ``acknowledge="on_durable"``;
        otherwise they were acknowledged after ``on_next`` and this does nothing). A
        failed ``XACK`` is logged: those entries stay pending and come again."""
        session = self._latest
        if session is not None and self.acknowledge == "on_durable":
            session.durable(count)

    def identity(self, element: Any) -> str | None:
        """The entry ID of an element that is a :class:`RedisEntry` (else None): what a
        shard of the ``reactive`` source remembers to drop a redelivery."""
        return element.id if isinstance(element, RedisEntry) else None

    def pending(self) -> int | None:
        """What the latest subscription has not signalled yet: the entries it read and
        holds, plus the group's ``lag`` (entries not yet delivered to any consumer of the
        group, from ``XINFO GROUPS``); None when Redis cannot tell the lag (after
        deletions in the stream) or the server cannot be asked."""
        session = self._latest
        return None if session is None else session.pending()


def _is_start_id(value: object) -> bool:
    if value in ("$", "0"):
        return True
    if not isinstance(value, str):
        return False
    ms, _, seq = value.partition("-")
    return ms.isdigit() and (seq == "" or seq.isdigit())


class _TooLarge(ReactiveStreamsError):
    """Raised by the bounded parser to stop reading a reply (the connection is closed)."""


class _Limits:
    """What the reading connection's parser accepts of the reply being read."""

    def __init__(self, max_item: int) -> None:
        self.max_item = max_item
        self.left = _SMALL_REPLY_BYTES
        self.budget = _SMALL_REPLY_BYTES

    def expect(self, budget: int) -> None:
        self.left = self.budget = budget


def _bounded_parser(limits: _Limits) -> type:
    """A RESP2 parser that refuses a bulk string above ``limits.max_item`` and a reply
    above ``limits.budget`` before reading their bytes from the socket."""
    from redis._parsers.resp2 import _RESP2Parser

    class BoundedParser(_RESP2Parser):
        def on_connect(self, connection: Any) -> None:
            super().on_connect(connection)  # type: ignore[no-untyped-call]
            buffer: Any = self._buffer
            read = buffer.read

            max_item = limits.max_item

            def bounded_read(length: int, *args: Any, **kwargs: Any) -> Any:
                left = limits.left = limits.left - length - ITEM_OVERHEAD_BYTES
                if length > max_item or left < 0:
                    if length > max_item:
                        raise _TooLarge(f"a field of {length} bytes, more than "
                                        f"max_message_bytes ({max_item})")
                    raise _TooLarge(f"a reply of more than {limits.budget} bytes (COUNT x "
                                    f"(max_message_bytes + {_ENTRY_OVERHEAD_BYTES}))")
                return read(length, *args, **kwargs)

            buffer.read = bounded_read

    return BoundedParser


class _Session(Source[T], Generic[T]):
    """One subscription: the reading thread, its connection and the entries it read.

    Only the reading thread uses the reading connection. Acknowledgements go through a
    second connection pool (``_acker``), from the reading thread (``on_next``) or the
    caller of ``on_durable``, one flush at a time.
    """

    def __init__(self, publisher: RedisStreamPublisher[T]) -> None:
        self.p = publisher
        self._cond = threading.Condition()
        self._buffer: deque[RedisEntry] = deque()  # read, not yet pulled
        self._wanted = 0  # demand not met by what was pulled, as of the last pull
        # (id, skipped) pulled, not yet signalled (or, if skipped, settled)
        self._taking: deque[tuple[str, bool]] = deque()
        self._awaiting: deque[tuple[int, str]] = deque()  # (sequence, id) signalled
        self._acks: list[str] = []  # IDs to XACK
        self._held: set[str] = set()  # IDs read and not yet acknowledged (claims skip them)
        self._signalled = 0
        self._durable = 0
        self._taken = 0
        self.received = 0
        self.skipped = 0
        self._terminal: Terminal | None = None
        self._closing = False
        self._released = False
        self._emitter: Emitter[T] | None = None
        self._limits = _Limits(publisher.max_message_bytes)
        self._ack_lock = threading.Lock()
        self._acker: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"redis {publisher.address} {publisher.stream}")

    def start(self, emitter: Emitter[T]) -> None:
        self._emitter = emitter
        emitter.start()
        self.thread.start()

    # -- the emitter's side ---------------------------------------------------------------

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        limit = self.p.max_messages
        elements: list[Any] = []
        while True:  # again while decode left entries out and more wait
            with self._cond:
                want = n - len(elements)
                if limit is not None:
                    want = min(want, limit - self._taken)
                taken = [self._buffer.popleft() for _ in range(min(want, len(self._buffer)))]
            decoded, bad = self._decode(taken)
            with self._cond:
                if bad is not None:
                    # The entry that failed and those after it stay unsignalled (pending).
                    self._buffer.extendleft(reversed(taken[len(decoded):]))
                    taken = taken[:len(decoded)]
                    self._terminal = bad
                got = [element for element in decoded if element is not _SKIPPED]
                self._taking.extend((entry.id, element is _SKIPPED)
                                    for entry, element in zip(taken, decoded, strict=True))
                self._taken += len(got)
                self.skipped += len(decoded) - len(got)
                self._settle_skipped()
                terminal: Terminal | None = self._terminal
                if limit is not None and self._taken >= limit:
                    terminal = COMPLETE
                elements += got
                done = len(got) == len(taken) or terminal is not None
                if done:
                    # The demand these elements leave unmet, which the reader reads for:
                    # the emitter's whole outstanding demand (n is at most a chunk of it),
                    # read now, while it is settled (the emitter subtracts what it
                    # delivers only after the chunk, so a later look would count the
                    # elements being delivered as unmet and read beyond demand).
                    emitter = self._emitter
                    outstanding = emitter.demand if emitter is not None else n
                    self._wanted = 0 if terminal is not None else max(
                        0, max(outstanding, n) - len(elements))
                    self._cond.notify_all()
            if done:
                return elements, terminal

    def _decode(self, taken: list[RedisEntry]) -> tuple[list[Any], BaseException | None]:
        decode = self.p.decode
        if decode is None:
            return list(taken), None
        elements: list[Any] = []
        skipped = self.skipped
        for entry in taken:
            try:
                element = decode(entry)
            except SkipEntry as skip:
                skipped += 1
                log.warning("redis %s: the entry %s of %r was left out (%d so far): %s",
                            self.p.address, entry.id, entry.stream, skipped, skip)
                elements.append(_SKIPPED)
                continue
            except Exception as exc:
                error = ValueError(f"redis {self.p.address}: decoding the entry {entry.id} "
                                   f"of {entry.stream!r} failed: {exc!r}")
                error.__cause__ = exc
                return elements, error
            if element is None:
                return elements, TypeError(
                    f"§2.13: decode returned None for the entry {entry.id} of "
                    f"{entry.stream!r}; raise SkipEntry to leave an entry out")
            elements.append(element)
        return elements, None

    def _acknowledge(self, entry_id: str, sequence: int) -> None:
        """Under the lock: acknowledge ``entry_id`` once the first ``sequence`` elements
        are (signalled, with on_next; durable, with on_durable)."""
        if self.p.acknowledge == "on_next" or sequence <= self._durable:
            self._acks.append(entry_id)
        else:
            self._awaiting.append((sequence, entry_id))

    def _settle_skipped(self) -> None:
        while self._taking and self._taking[0][1]:
            entry_id, _ = self._taking.popleft()
            self._acknowledge(entry_id, self._signalled)

    def signalled(self) -> None:
        """The subscriber's on_next returned for the oldest element pulled."""
        with self._cond:
            entry_id, _ = self._taking.popleft()
            self._signalled += 1
            self._acknowledge(entry_id, self._signalled)
            self._settle_skipped()
            # Told durable before it was signalled (a redelivery the source dropped and
            # acknowledged at once): nothing else would send its XACK soon.
            late = self.p.acknowledge == "on_durable" and bool(self._acks)
        if late:
            self._flush_acks()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._emitter = None
            released, self._released = self._released, True
            self._cond.notify_all()
        if not released:
            self.p._runner.release()
        if self.p.acknowledge == "on_next":
            # The last on_next calls came after the reading thread's last flush, maybe.
            self._flush_acks()
            if not self.thread.is_alive():
                self._close_acker()

    # -- acknowledgements -----------------------------------------------------------------

    def durable(self, count: int) -> None:
        with self._cond:
            self._durable = max(self._durable, count)
            while self._awaiting and self._awaiting[0][0] <= count:
                self._acks.append(self._awaiting.popleft()[1])
        self._flush_acks()
        with self._cond:
            finished = self._closing and not self.thread.is_alive()
        if finished:
            self._close_acker()

    def _flush_acks(self) -> None:
        with self._ack_lock:
            with self._cond:
                acks, self._acks = self._acks, []
            if not acks:
                return
            try:
                client = self._ack_client()
                for first in range(0, len(acks), 10_000):
                    client.xack(self.p.stream, self.p.group, *acks[first:first + 10_000])
            except Exception as exc:
                # They stay pending: the group delivers them again (a duplicate, never a loss).
                log.warning("redis %s: acknowledging %d entries of %r failed (they stay "
                            "pending and come again): %s", self.p.address, len(acks),
                            self.p.stream, _describe(exc, self.p))
                return
            with self._cond:
                self._held.difference_update(acks)

    def _ack_client(self) -> Any:
        if self._acker is None:
            self._acker = _client(self.p, None, self.p.connect_timeout)
        return self._acker

    def _close_acker(self) -> None:
        with self._ack_lock:
            acker, self._acker = self._acker, None
        if acker is not None:
            acker.close()

    def pending(self) -> int | None:
        with self._cond:
            held = len(self._buffer)
        try:
            with self._ack_lock:
                groups = self._ack_client().xinfo_groups(self.p.stream)
        except Exception as exc:
            log.info("redis %s: the group's lag is unknown: %s", self.p.address,
                     _describe(exc, self.p))
            return None
        for group in groups:
            name = group.get("name")
            if (name.decode(errors="replace") if isinstance(name, bytes) else name) == (
                    self.p.group):
                lag = group.get("lag")
                return None if lag is None else int(lag) + held
        return None

    # -- the reading thread ---------------------------------------------------------------

    def _fail(self, error: BaseException) -> None:
        emitter = None
        with self._cond:
            if self._terminal is None and not self._closing:
                self._terminal = error
                emitter = self._emitter
        if emitter is not None:
            emitter.signal()

    def _run(self) -> None:
        client = None
        try:
            client = _client(self.p, _bounded_parser(self._limits),
                             self.p.connect_timeout)
            self._read(client)
        except Exception as exc:
            self._fail(_error(exc, self.p))
        finally:
            try:
                self._flush_acks()
            finally:
                if client is not None:
                    client.close()
                with self._cond:
                    idle = not self._awaiting or self.p.acknowledge == "on_next"
                if idle:
                    self._close_acker()

    def _read(self, client: Any) -> None:
        p = self.p
        if p.create_group:
            try:
                client.xgroup_create(p.stream, p.group, id=p.start_id, mkstream=True)
            except Exception as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        else:
            # §1.4: a missing stream or group (or refused credentials) fails the stream at
            # once, before any demand.
            self._check_group(client)
        phase = "pending"
        cursor = "0"
        next_claim = 0.0
        while True:
            if p.acknowledge == "on_next":
                self._flush_acks()
            with self._cond:
                while not self._closing and self._terminal is None and self._count() == 0:
                    self._cond.wait(_TICK)
                    if p.acknowledge == "on_next" and self._acks:
                        break
                if self._closing or self._terminal is not None:
                    return
                count = self._count()
            if count == 0:
                continue
            if phase == "pending":
                entries = self._xreadgroup(client, count, cursor, block=None)
                if entries:
                    cursor = entries[-1][0]
                else:
                    phase = "claim" if p.claim_idle_ms is not None else "new"
                    cursor = "0-0"
                self._take(client, entries, redelivered=True)
            elif phase == "claim":
                cursor, entries = self._claim(client, count, cursor)
                self._take(client, entries, redelivered=True)
                if cursor == "0-0":
                    phase = "new"
                    next_claim = time.monotonic() + (p.claim_idle_ms or 0) / 1000
            elif p.claim_idle_ms is not None and time.monotonic() >= next_claim:
                phase, cursor = "claim", "0-0"
            else:
                entries = self._xreadgroup(client, count, ">", block=p.block_ms)
                self._take(client, entries, redelivered=False)

    def _check_group(self, client: Any) -> None:
        import redis.exceptions as errors

        p = self.p
        try:
            groups = client.xinfo_groups(p.stream)
        except errors.ResponseError as exc:
            if str(exc).startswith("NOPERM"):
                return  # a user allowed to read but not to inspect: XREADGROUP will tell
            if "no such key" in str(exc).lower():
                raise errors.ResponseError(f"NOGROUP the stream {p.stream!r} does not "
                                           f"exist") from None
            raise
        names = {_text(group.get("name")) for group in groups}
        if p.group not in names:
            raise errors.ResponseError(f"NOGROUP the stream {p.stream!r} has no group "
                                       f"{p.group!r}")

    def _count(self) -> int:
        """Under the lock: how many entries the next read may ask for."""
        held = len(self._buffer)
        count = min(self._wanted, self.p.max_buffered) - held
        limit = self.p.max_messages
        if limit is not None:
            count = min(count, limit - self._taken - held)
        return max(count, 0)

    def _xreadgroup(self, client: Any, count: int, start: str,
                    block: int | None) -> list[tuple[str, Any]]:
        p = self.p
        self._limits.expect(count * (p.max_message_bytes + _ENTRY_OVERHEAD_BYTES) + 4096)
        reply = client.xreadgroup(p.group, p.consumer, {p.stream: start}, count=count,
                                  block=block)
        self._limits.expect(_SMALL_REPLY_BYTES)
        if not reply:
            return []
        return [(_text(entry_id), fields) for entry_id, fields in reply[0][1]]

    def _claim(self, client: Any, count: int, cursor: str) -> tuple[str, list[tuple[str, Any]]]:
        p = self.p
        # XAUTOCLAIM also lists (and drops from the pending list) up to COUNT x 10 deleted
        # IDs, each a short bulk string.
        self._limits.expect(count * (p.max_message_bytes + _ENTRY_OVERHEAD_BYTES)
                            + count * 10 * (ITEM_OVERHEAD_BYTES + 48) + 4096)
        reply = client.xautoclaim(p.stream, p.group, p.consumer, p.claim_idle_ms or 0,
                                  start_id=cursor, count=count)
        self._limits.expect(_SMALL_REPLY_BYTES)
        after, claimed = reply[0], reply[1]
        deleted = reply[2] if len(reply) > 2 else []
        if deleted:
            log.warning("redis %s: %d pending entries of %r were deleted from the stream "
                        "before they were acknowledged (XAUTOCLAIM dropped them): %s",
                        p.address, len(deleted), p.stream,
                        ", ".join(_text(i) for i in deleted[:5]))
        with self._cond:
            held = set(self._held)
        # An entry this subscription holds (read, waiting to be durable) was claimed back
        # from itself: it is not a new delivery.
        return _text(after), [(_text(i), f) for i, f in claimed if _text(i) not in held]

    def _take(self, client: Any, entries: list[tuple[str, Any]], redelivered: bool) -> None:
        p = self.p
        kept: list[RedisEntry] = []
        gone: list[str] = []
        for entry_id, fields in entries:
            if fields is None:  # deleted from the stream while pending
                gone.append(entry_id)
                continue
            # redis-py made the dict (pairs_to_dict): kept as it is, not copied.
            record = RedisEntry(p.stream, entry_id, fields, redelivered)
            size = entry_bytes(fields)
            if size > p.max_message_bytes:
                kept_ids = [entry.id for entry in kept]
                with self._cond:
                    self._buffer.extend(kept)
                    self._held.update(kept_ids)
                    self.received += len(kept)
                raise _TooLarge(f"the entry {entry_id} of {p.stream!r} has {size} bytes "
                                f"(entry_bytes), more than max_message_bytes "
                                f"({p.max_message_bytes}); it stays pending: raise "
                                f"max_message_bytes, or XACK or XDEL it")
            kept.append(record)
        if gone:
            log.warning("redis %s: %d pending entries of %r were deleted from the stream "
                        "before they were acknowledged; acknowledged now: %s", p.address,
                        len(gone), p.stream, ", ".join(gone[:5]))
            client.xack(p.stream, p.group, *gone)
        if not kept:
            return
        with self._cond:
            self._buffer.extend(kept)
            self._held.update(entry.id for entry in kept)
            self.received += len(kept)
            emitter = self._emitter
        if emitter is not None:
            emitter.signal()


def _text(value: Any) -> str:
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


def _client(p: RedisStreamPublisher[Any], parser: type | None, connect_timeout: float) -> Any:
    """A redis-py client for ``p`` that does not retry (an error fails the stream) and
    reads within ``block_ms`` plus ``connect_timeout``."""
    redis = require("redis", "redis", "the redis publisher")
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    kwargs: dict[str, Any] = dict(
        host=p.host, port=p.port, db=p.db, username=p.username, password=p.password,
        socket_connect_timeout=connect_timeout,
        socket_timeout=p.block_ms / 1000 + connect_timeout, protocol=2,
        retry=Retry(NoBackoff(), 0), max_connections=1)
    if parser is not None:
        kwargs["parser_class"] = parser
    if p.tls:
        kwargs.update(connection_class=redis.SSLConnection, ssl_ca_certs=p.ca_certs,
                      ssl_cert_reqs="required", ssl_check_hostname=True)
    pool = redis.ConnectionPool(**kwargs)
    return redis.Redis(connection_pool=pool)


def _describe(exc: BaseException, p: RedisStreamPublisher[Any]) -> str:
    text = str(exc)
    if p.password:
        text = text.replace(p.password, "(hidden)")
    return text


def _error(exc: BaseException, p: RedisStreamPublisher[Any]) -> BaseException:
    """The error the stream fails with for ``exc``, naming host:port, never the password."""
    import redis.exceptions as errors

    where = f"redis {p.address}"
    user = f"user {p.username!r}" if p.username else "the default user"
    text = _describe(exc, p)
    if isinstance(exc, _TooLarge):
        error: BaseException = RedisError(f"{where}: {text}; the connection is closed")
    elif isinstance(exc, errors.AuthenticationError) or "NOAUTH" in text or (
            "WRONGPASS" in text):
        error = RedisError(f"{where}: the server refused the credentials of {user} "
                           f"({'a password was given' if p.password else 'no password'}): "
                           f"check the username and the password")
    elif isinstance(exc, errors.ResponseError) and text.startswith("NOGROUP"):
        error = RedisError(
            f"{where}: no stream {p.stream!r} with a consumer group {p.group!r} ({text}); "
            f"create it with XGROUP CREATE {p.stream} {p.group} $ MKSTREAM, or have the "
            f"reader create it (create_group, the option createGroup)")
    elif isinstance(exc, errors.ResponseError) and text.startswith("NOPERM"):
        error = RedisError(f"{where}: the server refused a command to {user}: {text}")
    elif isinstance(exc, errors.ResponseError) and "WRONGTYPE" in text:
        error = RedisError(f"{where}: the key {p.stream!r} is not a stream ({text})")
    elif isinstance(exc, (errors.ConnectionError, errors.TimeoutError, OSError)):
        error = RedisError(f"{where}: could not connect, or the connection was lost: {text}")
    elif isinstance(exc, errors.RedisError):
        error = RedisError(f"{where}: {type(exc).__name__}: {text}")
    else:
        log.error("redis %s: the reading thread failed", p.address, exc_info=exc)
        error = RedisError(f"{where}: the reading thread failed: {type(exc).__name__}: {text}")
    error.__cause__ = None
    return error



#: Adds one entry unless its deduplication key names one already: atomic (a script runs
#: whole, and Redis 7 writes its effects to the append-only file as one MULTI/EXEC), so a
#: retried batch finds the key of every entry the first attempt added and adds it again
#: never. KEYS: the stream, the deduplication key; ARGV: the key's time to live (seconds),
#: then the entry's field names and values. Returns the entry ID (the earlier one for a
#: repeat), and whether it was added now.
_ADD_ONCE: Final = """
local earlier = redis.call('GET', KEYS[2])
if earlier then return {earlier, 0} end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
redis.call('SET', KEYS[2], id, 'EX', ARGV[1])
return {id, 1}
"""


def _default_encode(element: Any, field: str) -> Mapping[Any, Any]:
    import json

    if isinstance(element, Mapping):
        return element
    if isinstance(element, (bytes, bytearray, memoryview, str)):
        return {field: bytes(element) if not isinstance(element, str) else element}
    as_dict = getattr(element, "asDict", None)  # a pyspark Row
    value = as_dict(recursive=True) if callable(as_dict) else element
    return {field: json.dumps(value, default=str, separators=(",", ":"))}


class RedisStreamSubscriber(ConfirmingSubscriber[T], Generic[T]):
    """Adds each element to a Redis stream as an entry, exactly once, requesting more only
    as the server replies.

    Its thread sends what ``on_next`` queued (at most ``window`` elements) in one pipeline
    and requests as many more once every reply came (see
    :class:`~reactive_streams.adapters._confirming.ConfirmingSubscriber`). An error reply
    or a lost connection stops the stream: the subscriber cancels and :meth:`wait_done`
    raises :class:`~reactive_streams.adapters._confirming.BrokerRefused`, which fails the
    batch (``publish``) or the task (``SubscriberForeachWriter``), so Spark runs it again.

    **Exactly once.** Every element has a key that a retried batch gives it again (the
    query, batch, partition and the element's place in it, under Spark). The entry is
    added by a server-side script that first looks the key up (``GET``), and adds the entry
    (``XADD``) and the key (``SET ... EX dedup_ttl``, holding the entry ID) only if it is
    not there, as one atomic step. A retried batch therefore adds only what the failed
    attempt did not, in its order; repeats count in :attr:`repeated`. The keys are
    ``{<stream>}:dedup:<prefix><key>`` (the stream's name as a hash tag, so they live in
    the stream's slot in a cluster), and live ``dedup_ttl`` seconds: a batch retried
    later than that is added again.

    Parameters
    ----------
    stream : str
        The stream's key.
    url, host, port, db, username, password, tls, ca_certs
        The server, as :class:`RedisStreamPublisher` takes them.
    encode : callable, optional
        ``encode(element) -> mapping`` of the entry's field names to values (str, bytes,
        int or float). Default: a mapping as it is; bytes or str as the field ``field``; a
        pyspark ``Row`` (and anything else) as JSON in the field ``field``.
    field : str
        The field of the default ``encode``, default ``"payload"`` (what the ``redis``
        source's ``format=json`` reads).
    dedup_ttl : int
        Seconds a deduplication key lives, default 86400 (a day).
    maxlen : int, optional
        Trim the stream to about this many entries as entries are added (``MAXLEN ~``);
        default None: never trimmed.
    window : int
        The most elements requested and not yet confirmed, default 256.
    prefix : str
        Put before every key: give each query writing into the same stream its own.
    connect_timeout : float
        Seconds for the connection, default 10.

    Examples
    --------
    >>> from reactive_streams.adapters.redis_streams import RedisStreamSubscriber
    >>> RedisStreamSubscriber("orders", port=6380)
    RedisStreamSubscriber('127.0.0.1:6380', stream='orders')
    """

    def __init__(self, stream: str, *, url: str | None = None, host: str = "127.0.0.1",
                 port: int = 6379, db: int = 0, username: str | None = None,
                 password: str | None = None, tls: bool = False, ca_certs: str | None = None,
                 encode: Callable[[T], Mapping[Any, Any]] | None = None,
                 field: str = "payload", dedup_ttl: int = 86400, maxlen: int | None = None,
                 window: int = 256, prefix: str = "", connect_timeout: float = 10.0) -> None:
        super().__init__(window=window, prefix=prefix)
        # The publisher's checks of the server's parameters, and its connection settings.
        self._server: RedisStreamPublisher[Any] = RedisStreamPublisher(
            stream, "-", "-", url=url, host=host, port=port, db=db, username=username,
            password=password, tls=tls, ca_certs=ca_certs, connect_timeout=connect_timeout,
            block_ms=1)
        if encode is not None and not callable(encode):
            raise ValueError(f"encode {encode!r}: a callable returning the entry's fields, "
                             f"or None, is accepted")
        if not isinstance(field, str) or not field:
            raise ValueError(f"field {field!r}: a non-empty string is needed")
        check_int("dedup_ttl", dedup_ttl, 1, 2**31 - 1)
        if maxlen is not None:
            check_int("maxlen", maxlen, 1, _LONG_MAX)
        self.stream, self.field = stream, field
        self.encode = encode
        self.dedup_ttl, self.maxlen = dedup_ttl, maxlen
        self.added = 0
        self.repeated = 0
        self._client: Any = None
        self._script: Any = None
        tag = stream if "{" not in stream else stream.replace("{", "(").replace("}", ")")
        self._dedup = "{" + tag + "}:dedup:"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._server.address!r}, stream={self.stream!r})"

    def _open(self) -> None:
        try:
            self._client = _client(self._server, None, self._server.connect_timeout)
            self._script = self._client.register_script(_ADD_ONCE)
            self._client.ping()
        except Exception as exc:
            raise _error(exc, self._server) from None

    def _fields(self, element: T) -> list[Any]:
        encode = self.encode
        fields = encode(element) if encode is not None else _default_encode(element,
                                                                            self.field)
        if not fields:
            raise ValueError(f"redis: an entry needs at least one field; {element!r} gave "
                             f"none")
        flat: list[Any] = []
        for name, value in fields.items():
            flat += [name, value]
        return flat

    def _send(self, elements: Sequence[tuple[str, T]]) -> None:
        p = self._server
        pipe = self._client.pipeline(transaction=False)
        for key, element in elements:
            self._script(keys=[self.stream, self._dedup + key],
                         args=[self.dedup_ttl, *self._fields(element)], client=pipe)
        if self.maxlen is not None:
            pipe.xtrim(self.stream, maxlen=self.maxlen, approximate=True)
        try:
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:
            raise BrokerRefused(f"redis {p.address}: adding {len(elements)} entries to "
                                f"{self.stream!r} failed: {_error(exc, p)}") from None
        for (key, _), reply in zip(elements, replies, strict=False):
            if isinstance(reply, Exception):
                raise BrokerRefused(f"redis {p.address}: the server refused the entry "
                                    f"{key!r} for {self.stream!r}: {_error(reply, p)}")
            if int(reply[1]):
                self.added += 1
            else:
                self.repeated += 1

    def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()
