"""A RabbitMQ queue as a Publisher, whose consumer window is the subscriber's demand.

:class:`RabbitMQPublisher` consumes a queue (AMQP 0-9-1, through pika) with manual
acknowledgements and a channel-wide ``basic.qos`` prefetch that follows demand: the broker
sends no more messages than the subscriber asked for (plus those signalled and not yet
acknowledged), so a slow subscriber leaves the backlog in the queue. A message is
acknowledged once signalled, or once the subscriber says it is durable (``on_durable``);
whatever was not acknowledged goes back to the queue when the connection closes or dies.
Needs pika (extra ``rabbitmq``).
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
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
from ._amqp_deliveries import Delivery, DeliveryReader
from ._confirming import BrokerRefused, ConfirmingSubscriber
from ._extras import require
from ._sessions import Counting, check_int, is_number

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "MAX_PREFETCH", "MESSAGE_OVERHEAD_BYTES",
           "RabbitMQError", "RabbitMQMessage", "RabbitMQPublisher", "RabbitMQSubscriber",
           "SkipMessage", "parse_url"]

T = TypeVar("T")

log = logging.getLogger("reactive_streams.adapters.rabbitmq")

#: The longest wait of the connection thread for network events (it wakes earlier for
#: any work handed to it).
_TICK: Final = 1.0
#: The default ``max_message_bytes`` (1 MiB), as the ``mqtt`` and ``websocket`` adapters'.
DEFAULT_MAX_MESSAGE_BYTES: Final = 2**20
#: The largest ``prefetch``: ``basic.qos``'s prefetch-count is a 16-bit field.
MAX_PREFETCH: Final = 65535
#: What a message held beyond demand costs besides its body, routing key and headers: the
#: RabbitMQMessage and pika's properties object, rounded up. Counted against
#: ``max_buffered_bytes`` so that a flood of empty messages meets the budget too.
MESSAGE_OVERHEAD_BYTES: Final = 512
_AMQP_PORT: Final = 5672
_AMQPS_PORT: Final = 5671
#: Read deliveries from the received bytes (_amqp_deliveries); False: through pika's
#: frames (the tests compare the two).
_READ_DELIVERIES = True


@dataclass(frozen=True, slots=True)
class RabbitMQMessage:
    """One message as the broker delivered it.

    Attributes
    ----------
    body : bytes
    routing_key : str
        The routing key it was published with.
    exchange : str
        The exchange it was published to ("" for the default exchange).
    redelivered : bool
        The broker delivered it before (to this consumer or another) and it was not
        acknowledged.
    delivery_tag : int
        Its tag on this subscription's channel (counted from 1).
    message_id : str or None
        The ``message_id`` property its producer set: the message's identity.
    headers : dict
        The ``headers`` property (empty without one).
    content_type : str or None
    timestamp : int or None
        The ``timestamp`` property its producer set (seconds since the epoch).
    received : float
        When this client received it (``time.time()``); not compared by ``==``.
    """

    body: bytes
    routing_key: str
    exchange: str
    redelivered: bool
    delivery_tag: int
    message_id: str | None = None
    headers: Mapping[str, Any] = field(default_factory=dict)
    content_type: str | None = None
    timestamp: int | None = None
    received: float = field(default=0.0, compare=False)


class RabbitMQError(ReactiveStreamsError, ConnectionError):
    """The broker was unreachable, refused the credentials, has no such queue, closed the
    channel or the connection, or sent a message over ``max_message_bytes``. The message
    names ``host:port`` (and the queue and virtual host where they matter), never the
    password."""


class SkipMessage(ReactiveStreamsError):
    """Raised by a ``decode`` function to leave a message out instead of failing the stream.

    The message is not signalled and is acknowledged in its turn (right after the element
    before it: at once with ``acknowledge="on_next"``, once that element is durable with
    ``"on_durable"``). Each one is logged at WARNING and counted in
    :attr:`RabbitMQPublisher.skipped`.
    """


_SKIPPED: Final = object()


@dataclass(frozen=True)
class _Address:
    host: str
    port: int
    vhost: str
    username: str | None
    password: str | None
    tls: bool


def parse_url(url: str) -> tuple[str, int, str, str | None, str | None, bool]:
    """``(host, port, vhost, username, password, tls)`` of an ``amqp://`` or ``amqps://``
    URL; raise ``ValueError`` (never showing the password) for anything else.

    The virtual host is the path, percent-decoded (``%2F`` is ``/``); without a path it is
    ``/``, as pika and the RabbitMQ URI spec take it.

    Examples
    --------
    >>> parse_url("amqp://spark:secret@mq.example.com/%2F")[:4]
    ('mq.example.com', 5672, '/', 'spark')
    >>> parse_url("amqps://mq.example.com:5999/orders")
    ('mq.example.com', 5999, 'orders', None, None, True)
    >>> parse_url("http://spark:secret@mq.example.com/")
    Traceback (most recent call last):
    ...
    ValueError: url 'http://spark:***@mq.example.com/': amqp://... or amqps://... is accepted
    """
    if not isinstance(url, str):
        raise ValueError(f"url: a string is needed, not {type(url).__name__}")
    shown = _hide_password(url)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ValueError(f"url {shown!r}: not a URL ({error})") from None
    if parts.scheme not in ("amqp", "amqps"):
        raise ValueError(f"url {shown!r}: amqp://... or amqps://... is accepted")
    if not parts.hostname:
        raise ValueError(f"url {shown!r}: a host is needed (amqp://host:port/vhost)")
    if parts.query or parts.fragment:
        raise ValueError(f"url {shown!r}: no query or fragment is accepted (give the "
                         f"other settings as parameters)")
    tls = parts.scheme == "amqps"
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    vhost = urllib.parse.unquote(path) if parts.path else "/"
    if parts.path == "/":
        vhost = ""  # amqp://host/ names the empty virtual host, per the URI spec
    username = urllib.parse.unquote(parts.username) if parts.username is not None else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return (parts.hostname, port or (_AMQPS_PORT if tls else _AMQP_PORT), vhost or "/",
            username, password, tls)


def _hide_password(url: str) -> str:
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, userinfo = head.partition("://")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{tail}"


def _held_bytes(message: RabbitMQMessage) -> int:
    """The bytes ``message`` holds while it waits for demand, as ``max_buffered_bytes``
    counts them: body, routing key and headers as Python holds them, and
    MESSAGE_OVERHEAD_BYTES for the rest."""
    headers = sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in message.headers.items())
    return (sys.getsizeof(message.body) + sys.getsizeof(message.routing_key) + headers
            + MESSAGE_OVERHEAD_BYTES)


class RabbitMQPublisher(Publisher[T], Generic[T]):
    """Publishes the messages of a RabbitMQ queue, taking them only against demand.

    Each ``subscribe`` opens a connection and a channel of its own, on a thread of its own
    (pika is not thread safe: every call on the connection is made there), checks that
    the queue exists (a passive ``queue.declare``), and consumes it with manual
    acknowledgements. The stream is endless unless ``max_messages`` is given; ``cancel``
    closes the connection.

    **The window is the demand.** The consumer's channel has a channel-wide ``basic.qos``
    prefetch (``global_qos=True``: pika's default, False, is RabbitMQ's per-consumer form,
    whose changes apply only to consumers started after them; the channel-wide form
    applies at once to the channel's consumer). It is kept at the messages delivered and
    not yet acknowledged plus the demand not yet met, so the broker sends no more than
    the subscriber asked for; the rest stays in the queue (``messages_ready`` grows). At
    least 1, since a prefetch of 0 means "no limit" in AMQP: with no demand one message
    may wait in memory. Never above ``prefetch``: the broker's count of this consumer's
    unacknowledged messages (``rabbitmqctl list_queues messages_unacknowledged``) is at
    most ``min(prefetch, max(1, signalled and not yet acknowledged + demand not yet
    met))``. Each change is a ``basic.qos`` sent before the acknowledgements that lower
    the count, so the broker never sees a wider window in between.

    **Acknowledgement.** ``acknowledge="on_next"``: a message is acknowledged once
    ``on_next`` returned. ``"on_durable"``: only when :meth:`on_durable` says the first
    ``count`` elements signalled to the latest subscription are durable: the
    acknowledging-publisher protocol of the ``reactive`` Spark source (see
    ``pyspark_reactive.source.durability``). Acknowledgements go out as one ``basic.ack``
    with ``multiple=True`` on the highest tag due, since messages are signalled in the
    order they were delivered. Messages not acknowledged when the connection closes (or
    dies) go back to the queue, marked redelivered: nothing is lost, and a message
    signalled but not yet acknowledged when a process died comes again. :meth:`identity`
    is the message's ``message_id``, which lets a consumer drop such a redelivery; without
    one, a redelivery cannot be told from a new message (at least once).

    **Bytes.** A message whose content header announces a body over ``max_message_bytes``
    fails the stream before its body is held: its body frames are dropped as they are read
    and the connection is closed, so the message goes back to the queue (give the broker's
    own ``max_message_size`` the same bound to refuse such messages at the producer). The
    messages delivered and not yet signalled hold at most ``max_buffered_bytes`` (each
    message's body, routing key and headers, plus :data:`MESSAGE_OVERHEAD_BYTES`): there
    the window stops opening to demand, so beyond the budget only what the window had
    already allowed may come (at most the demand then outstanding, each message at most
    ``max_message_bytes``).

    Parameters
    ----------
    queue : str
        The queue consumed. It must exist: the stream fails if it does not (this
        publisher declares nothing).
    url : str, optional
        ``amqp://user:password@host:port/vhost`` or ``amqps://...`` (TLS with the system's
        certificate authorities). The other connection parameters, when given, override
        its parts.
    host : str, optional
        Default ``127.0.0.1`` without a ``url``.
    port : int, optional
        Default 5672 (5671 with TLS).
    vhost : str, optional
        The virtual host, default ``/``.
    username, password : str, optional
        Default ``guest``/``guest`` without a ``url``, as pika's. A ``password`` needs a
        ``username``.
    tls : bool or ssl.SSLContext
        True: TLS with the system's certificate authorities and host name checking; an
        ``ssl.SSLContext``: TLS with that context.
    prefetch : int
        1 to 65535, default 1000: the most messages delivered and not yet acknowledged.
    max_message_bytes : int
        The largest message body accepted, default 1048576 (1 MiB).
    max_buffered_bytes : int, optional
        The most bytes held for messages delivered and not yet signalled before the window
        stops opening (at least 1). Default ``None``: only the window bounds them.
    connect_timeout : float
        Seconds to connect (TCP, TLS and AMQP handshake), default 10.
    heartbeat : int
        Seconds, default 60; 0 turns heartbeats off.
    max_messages : int, optional
        Complete after this many elements (taking no more from the broker).
    acknowledge : "on_next" or "on_durable"
    decode : callable, optional
        Turns each :class:`RabbitMQMessage` into the element signalled. If it raises, the
        stream fails (``ValueError`` naming the queue) and the message is not
        acknowledged; :class:`SkipMessage` leaves it out and acknowledges it. It must not
        return None (§2.13).
    linger : float
        With ``acknowledge="on_durable"``: seconds the connection stays open after cancel
        or completion while signalled messages wait for ``on_durable`` (default 10).
    consumer_tag : str, optional
        The consumer's tag as ``rabbitmqctl list_consumers`` shows it; default: the
        broker's.

    Raises
    ------
    ValueError
        For a parameter that is not accepted (the message names it; never the password).
    MissingExtraError
        When pika is not installed (``pip install 'pyspark-reactive[rabbitmq]'``).

    Notes
    -----
    Errors reach the subscriber as ``on_error(RabbitMQError)``: the host unreachable
    (naming ``host:port``), the credentials refused (naming the user), no such queue ("queue
    'x' not found in vhost '/'"), the channel or connection closed by the broker (with its
    reply code and text), a message over ``max_message_bytes``. A subscription is not
    reconnected: the stream fails, and since what was not signalled was not acknowledged,
    a new subscription gets it again.

    Examples
    --------
    >>> from reactive_streams.adapters.rabbitmq import RabbitMQPublisher
    >>> orders = RabbitMQPublisher("orders", url="amqp://spark:secret@127.0.0.1:5672/%2F")
    >>> orders
    RabbitMQPublisher('127.0.0.1:5672', vhost='/', queue='orders', prefetch=1000)
    """

    def __init__(self, queue: str, *, url: str | None = None, host: str | None = None,
                 port: int | None = None, vhost: str | None = None,
                 username: str | None = None, password: str | None = None,
                 tls: bool | ssl.SSLContext | None = None, prefetch: int = 1000,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 max_buffered_bytes: int | None = None, connect_timeout: float = 10.0,
                 heartbeat: int = 60, max_messages: int | None = None,
                 acknowledge: Literal["on_next", "on_durable"] = "on_next",
                 decode: Callable[[RabbitMQMessage], T] | None = None,
                 linger: float = 10.0, consumer_tag: str | None = None) -> None:
        require("pika", "rabbitmq", "the rabbitmq publisher")
        if not isinstance(queue, str) or not queue or len(queue.encode()) > 255:
            raise ValueError(f"queue {queue!r}: a queue name of 1 to 255 bytes is needed")
        if url is not None:
            u_host, u_port, u_vhost, u_user, u_password, u_tls = parse_url(url)
        else:
            u_host, u_port, u_vhost, u_user, u_password, u_tls = (
                "127.0.0.1", None, "/", None, None, False)
        host = u_host if host is None else host
        if not isinstance(host, str) or not host:
            raise ValueError(f"host {host!r}: a host name or address is needed")
        if tls is None:
            tls = u_tls
        if not isinstance(tls, (bool, ssl.SSLContext)):
            raise ValueError(f"tls {tls!r}: True, False or an ssl.SSLContext is accepted")
        if port is None:
            port = u_port if u_port is not None else (_AMQPS_PORT if tls else _AMQP_PORT)
        check_int("port", port, 1, 65535)
        vhost = u_vhost if vhost is None else vhost
        if not isinstance(vhost, str) or not vhost:
            raise ValueError(f"vhost {vhost!r}: a virtual host name is needed ('/' is the "
                             f"default one)")
        username = u_user if username is None else username
        password = u_password if password is None else password
        if username is not None and not isinstance(username, str):
            raise ValueError(f"username {username!r}: a string or None is accepted")
        if password is not None and not isinstance(password, str):
            raise ValueError("password: a string or None is accepted, not "
                             f"{type(password).__name__}")
        if password is not None and username is None:
            raise ValueError("password: accepted only with a username")
        check_int("prefetch", prefetch, 1, MAX_PREFETCH)
        check_int("max_message_bytes", max_message_bytes, 1, 2**31 - 1)
        if max_buffered_bytes is not None:
            check_int("max_buffered_bytes", max_buffered_bytes, 1, 2**63 - 1)
        if not (is_number(connect_timeout) and connect_timeout > 0):
            raise ValueError(f"connect_timeout {connect_timeout!r}: a positive number of "
                             f"seconds is needed")
        check_int("heartbeat", heartbeat, 0, 65535)
        if max_messages is not None:
            check_int("max_messages", max_messages, 0, 2**63 - 1)
        if acknowledge not in ("on_next", "on_durable"):
            raise ValueError(f"acknowledge {acknowledge!r}: 'on_next' or 'on_durable' is "
                             f"accepted")
        if decode is not None and not callable(decode):
            raise ValueError(f"decode {decode!r}: a callable taking a RabbitMQMessage, or "
                             f"None, is accepted")
        if not (is_number(linger) and linger >= 0):
            raise ValueError(f"linger {linger!r}: a number of seconds >= 0 is needed")
        if consumer_tag is not None and (not isinstance(consumer_tag, str) or not consumer_tag):
            raise ValueError(f"consumer_tag {consumer_tag!r}: a non-empty string or None")
        self.queue = queue
        self.host, self.port, self.vhost = host, port, vhost
        self.username, self.password = username, password
        self.tls = tls
        self.prefetch = prefetch
        self.max_message_bytes = max_message_bytes
        self.max_buffered_bytes = max_buffered_bytes
        self.connect_timeout = float(connect_timeout)
        self.heartbeat = heartbeat
        self.max_messages = max_messages
        self.acknowledge = acknowledge
        self.decode = decode
        self.linger = float(linger)
        self.consumer_tag = consumer_tag
        self._runner = ThreadRunner(max_workers=1, name="rabbitmq-signals")
        self._latest: _Session[T] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        return (f"RabbitMQPublisher({self.address!r}, vhost={self.vhost!r}, "
                f"queue={self.queue!r}, prefetch={self.prefetch})")

    @property
    def received(self) -> int:
        """Messages the latest subscription has received from the broker so far."""
        session = self._latest
        return 0 if session is None else session.received

    @property
    def skipped(self) -> int:
        """Messages of the latest subscription that ``decode`` left out (SkipMessage)."""
        session = self._latest
        return 0 if session is None else session.skipped

    def wait_consuming(self, timeout: float) -> bool:
        """Wait until the latest subscription consumes its queue (``basic.consume-ok``), or
        failed; True if it consumes."""
        session = self._latest
        return session is not None and session.consuming.wait(timeout) and (
            session.consume_ok)

    def wait_closed(self, timeout: float) -> bool:
        """Wait until the latest subscription's connection is closed (its
        acknowledgements written); True if it is."""
        session = self._latest
        if session is None:
            return True
        session.thread.join(timeout)
        return not session.thread.is_alive()

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        session: _Session[T] = _Session(self)
        self._latest = session
        emitter: Emitter[T] = Emitter(Counting(subscriber, session), session,
                                      self._runner.acquire())
        session.start(emitter)

    def on_durable(self, count: int) -> None:
        """The first ``count`` elements signalled to the latest subscription are durable:
        acknowledge their messages (with ``acknowledge="on_durable"``; otherwise they were
        acknowledged at ``on_next`` and this does nothing).

        Called by the ``reactive`` source from its log's thread; ``count`` only grows.
        After the subscription ended, the call waits (at most 2 s) until the
        acknowledgement is written and the connection closed, since the caller's process
        may end right after it.
        """
        session = self._latest
        if session is not None and self.acknowledge == "on_durable":
            session.durable(count)

    def identity(self, element: Any) -> str | None:
        """The message's identity: its ``message_id`` property (None without one)."""
        if isinstance(element, RabbitMQMessage):
            return element.message_id
        return None

    def pending(self) -> int | None:
        """The messages ready in the queue (not delivered to any consumer), from a passive
        ``queue.declare`` on the latest subscription's connection, plus those it holds and
        has not signalled; None when it cannot tell (no open connection, or no answer
        within 2 s)."""
        session = self._latest
        return None if session is None else session.pending()


class _Session(Source[T], Generic[T]):
    """One subscription's connection: its thread, and the messages it received.

    The connection thread is the only one that calls pika. Other threads change the
    state under the lock and wake it with ``add_callback_threadsafe``.
    """

    def __init__(self, publisher: RabbitMQPublisher[T]) -> None:
        self.p = publisher
        self._lock = threading.Lock()
        self._buffer: deque[RabbitMQMessage] = deque()  # delivered, not yet pulled
        self._sizes: deque[int] = deque()  # each buffered message's _held_bytes
        self._buffered_bytes = 0
        self._woken = False  # a wake of the connection thread is on its way
        self._arrived = False  # pika delivered messages since the emitter's last signal
        self._taking: deque[tuple[int, bool]] = deque()  # (tag, skipped) pulled
        self._awaiting: deque[tuple[int, int]] = deque()  # (sequence, tag) signalled
        self._ack_upto = 0  # the highest delivery tag due for acknowledgement
        self._acked = 0  # the highest delivery tag acknowledged (connection thread)
        self._delivered = 0  # messages delivered (the highest tag)
        self._credit = 0  # demand not yet met by delivered messages: the window's opening
        self._signalled = 0
        self._durable = 0
        self._taken = 0
        self.received = 0
        self.skipped = 0
        self._terminal: Terminal | None = None
        self._closing = False
        self._closed_at = 0.0
        self._emitter: Emitter[T] | None = None
        self._connection: Any = None
        self._released = False
        self.consuming = threading.Event()
        self.consume_ok = False
        self._ready_count: int | None = None
        self._oversized: RabbitMQError | None = None
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"rabbitmq {publisher.address} {publisher.queue}")

    def start(self, emitter: Emitter[T]) -> None:
        self._emitter = emitter
        emitter.start()
        self.thread.start()

    # -- the emitter's side ----------------------------------------------------------------

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        limit = self.p.max_messages
        elements: list[Any] = []
        while True:  # again while decode left messages out and more wait
            with self._lock:
                want = n - len(elements)
                if limit is not None:
                    want = min(want, limit - self._taken)
                count = min(want, len(self._buffer))
                taken = [self._buffer.popleft() for _ in range(count)]
                sizes = [self._sizes.popleft() for _ in range(count)]
                self._buffered_bytes -= sum(sizes)
            decoded, bad = self._decode(taken)
            with self._lock:
                if bad is not None:
                    back = taken[len(decoded):]
                    back_sizes = sizes[len(decoded):]
                    self._buffer.extendleft(reversed(back))
                    self._sizes.extendleft(reversed(back_sizes))
                    self._buffered_bytes += sum(back_sizes)
                    taken = taken[:len(decoded)]
                    self._terminal = bad
                got = [e for e in decoded if e is not _SKIPPED]
                self._taking.extend((m.delivery_tag, e is _SKIPPED)
                                    for m, e in zip(taken, decoded, strict=True))
                self._taken += len(got)
                self.skipped += len(decoded) - len(got)
                self._settle_skipped()
                terminal: Terminal | None = self._terminal
                if limit is not None and self._taken >= limit:
                    terminal = COMPLETE
            elements += got
            if len(got) == len(taken) or terminal is not None:
                break
        self._open_window(len(elements))
        return elements, terminal

    def _open_window(self, signalling: int) -> None:
        """Set the window's opening to the demand not met by what is held (the emitter's
        outstanding demand, less the ``signalling`` elements it is about to deliver)."""
        emitter = self._emitter
        demand = 0 if emitter is None else max(0, emitter.demand - signalling)
        with self._lock:
            credit = max(0, demand - len(self._buffer))
            limit = self.p.max_messages
            if limit is not None:
                credit = min(credit, max(0, limit - self._taken - len(self._buffer)))
            budget = self.p.max_buffered_bytes
            if budget is not None and self._buffered_bytes >= budget:
                credit = 0
            changed = credit != self._credit
            self._credit = credit
        if changed:
            self._wake()

    def _decode(self, taken: list[RabbitMQMessage]) -> tuple[list[Any], BaseException | None]:
        decode = self.p.decode
        if decode is None:
            return list(taken), None
        elements: list[Any] = []
        skipped = self.skipped
        for message in taken:
            try:
                element = decode(message)
            except SkipMessage as skip:
                skipped += 1
                log.warning("rabbitmq %s: a message of queue %r was left out (%d so far): %s",
                            self.p.address, self.p.queue, skipped, skip)
                elements.append(_SKIPPED)
                continue
            except Exception as exc:
                error = ValueError(f"rabbitmq {self.p.address}: decoding a message of queue "
                                   f"{self.p.queue!r} failed: {exc!r}")
                error.__cause__ = exc
                return elements, error
            if element is None:
                return elements, TypeError(
                    f"§2.13: decode returned None for a message of queue {self.p.queue!r} "
                    f"(body {message.body[:40]!r}); raise SkipMessage to leave one out")
            elements.append(element)
        return elements, None

    def _acknowledge(self, tag: int, sequence: int) -> bool:
        """Under the lock: acknowledge up to ``tag`` once the first ``sequence`` elements
        are signalled (on_next) or durable (on_durable); True if due now."""
        if self.p.acknowledge == "on_next" or sequence <= self._durable:
            self._ack_upto = max(self._ack_upto, tag)
            return True
        self._awaiting.append((sequence, tag))
        return False

    def _settle_skipped(self) -> bool:
        now = False
        while self._taking and self._taking[0][1]:
            tag, _ = self._taking.popleft()
            now = self._acknowledge(tag, self._signalled) or now
        return now

    def signalled(self) -> None:
        """The subscriber's on_next returned for the oldest element pulled."""
        with self._lock:
            tag, _ = self._taking.popleft()
            self._signalled += 1
            wake = self._acknowledge(tag, self._signalled)
            wake = self._settle_skipped() or wake
        if wake:
            self._wake()

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._closed_at = time.monotonic()
            self._emitter = None
            self._credit = 0
            released, self._released = self._released, True
        if not released:
            self.p._runner.release()
        self._wake()

    def durable(self, count: int) -> None:
        with self._lock:
            self._durable = max(self._durable, count)
            while self._awaiting and self._awaiting[0][0] <= count:
                self._ack_upto = max(self._ack_upto, self._awaiting.popleft()[1])
            closing = self._closing
        self._wake()
        if closing and threading.current_thread() is not self.thread:
            self.thread.join(2.0)

    def pending(self) -> int | None:
        answered = threading.Event()

        def ask() -> None:
            try:
                frame = self._channel.queue_declare(self.p.queue, passive=True)
                self._ready_count = int(frame.method.message_count)
            except Exception:  # an answer for planning only
                self._ready_count = None
            answered.set()

        self._ready_count = None
        if not self._call(ask) or not answered.wait(2.0):
            return None
        ready = self._ready_count
        if ready is None:
            return None
        with self._lock:
            return ready + len(self._buffer)

    # -- the connection thread ------------------------------------------------------------

    def _call(self, work: Callable[[], None]) -> bool:
        connection = self._connection
        if connection is None:
            return False
        try:
            connection.add_callback_threadsafe(work)
        except Exception:  # closed, or closing: nothing to wake
            return False
        return True

    def _wake(self) -> None:
        # One wake on its way is enough: the connection thread clears the flag before it
        # reads the state, so a change made after that wakes it again.
        if self._woken:
            return
        self._woken = True
        if not self._call(_nothing):
            self._woken = False

    def _fail(self, error: BaseException) -> None:
        self.consuming.set()
        emitter = None
        with self._lock:
            if self._terminal is None and not self._closing:
                self._terminal = error
                emitter = self._emitter
        if emitter is not None:
            emitter.signal()

    def _run(self) -> None:
        connection = None
        try:
            connection = self._connect()
            if connection is not None:
                self._connection = connection
                self._consume(connection)
        except Exception as exc:
            self._fail(self._error(exc))
        finally:
            self._connection = None
            self.consuming.set()
            if connection is not None:
                try:
                    if connection.is_open:
                        connection.close()
                except Exception:  # already lost: unacknowledged messages are requeued
                    pass

    def _parameters(self) -> Any:
        p = self.p
        return _parameters(p.host, p.port, p.vhost, p.username, p.password, p.tls,
                           p.connect_timeout, p.heartbeat, f"reactive-streams {p.queue}")

    def _connect(self) -> Any:
        pika = require("pika", "rabbitmq", "the rabbitmq publisher")
        return pika.BlockingConnection(self._parameters())

    def _error(self, exc: BaseException) -> RabbitMQError:
        """A RabbitMQError naming host:port (and the user or queue where it matters) for
        what pika raised; never the password."""
        import pika.exceptions as pe  # type: ignore[import-untyped]

        p = self.p
        where = f"rabbitmq {p.address}"
        user = p.username if p.username is not None else "guest"
        if isinstance(exc, RabbitMQError):
            return exc
        if isinstance(exc, (pe.ProbableAuthenticationError, pe.AuthenticationError)) or (
                isinstance(exc, pe.ConnectionClosedByBroker) and exc.reply_code == 403):
            error = RabbitMQError(f"{where}: the broker refused the credentials of user "
                                  f"{user!r} for vhost {p.vhost!r} ({_reason(exc)})")
        elif isinstance(exc, pe.ProbableAccessDeniedError):
            error = RabbitMQError(f"{where}: user {user!r} may not use vhost {p.vhost!r} (or "
                                  f"it does not exist): {_reason(exc)}")
        elif isinstance(exc, pe.ChannelClosedByBroker) and exc.reply_code == 404:
            error = RabbitMQError(f"{where}: queue {p.queue!r} not found in vhost "
                                  f"{p.vhost!r} ({exc.reply_text})")
        elif isinstance(exc, pe.ChannelClosedByBroker):
            error = RabbitMQError(f"{where}: the broker closed the channel consuming queue "
                                  f"{p.queue!r}: {exc.reply_code} {exc.reply_text}")
        elif isinstance(exc, pe.ConnectionClosedByBroker):
            error = RabbitMQError(f"{where}: the broker closed the connection: "
                                  f"{exc.reply_code} {exc.reply_text}")
        elif isinstance(exc, (pe.AMQPConnectionError, OSError)) and not self.consuming.is_set():
            # OSError: pika raises a TLS handshake's error (a certificate refused) as it is.
            error = RabbitMQError(f"{where}: could not connect: {_reason(exc)}")
        elif isinstance(exc, pe.AMQPError):
            error = RabbitMQError(f"{where}: the connection was lost: {_reason(exc)}")
        else:
            log.error("rabbitmq %s: the connection thread failed", p.address,
                      exc_info=(type(exc), exc, exc.__traceback__))
            error = RabbitMQError(f"{where}: the connection thread failed: {exc!r}")
        error.__cause__ = exc
        return error

    def _consume(self, connection: Any) -> None:
        p = self.p
        channel = connection.channel()
        self._channel = channel
        self._bound_bodies(channel)
        try:
            channel.queue_declare(p.queue, passive=True)
        except Exception as exc:
            self._fail(self._error(exc))
            return
        window = self._window()
        # Channel-wide (global_qos=True): a change applies to this consumer at once.
        channel.basic_qos(prefetch_count=window, global_qos=True)
        impl = channel._impl
        qos_sent = [False]  # a basic.qos is on its way, its qos-ok not yet read

        def qos_ok(frame: Any) -> None:
            qos_sent[0] = False
            connection.add_callback_threadsafe(_nothing)  # ends process_data_events' wait

        def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
            # Only the deliveries left to pika (see _amqp_deliveries) come this way.
            try:
                self._received([(body if type(body) is bytes else bytes(body),
                                 method.routing_key, method.exchange,
                                 bool(method.redelivered), method.delivery_tag,
                                 properties.message_id, properties.headers or {},
                                 properties.content_type, properties.timestamp)],
                               signal=False)
                self._arrived = True  # signalled once process_data_events returns
            finally:
                reader.pika_delivered()

        # Deliveries are read from the received bytes rather than through pika's frames
        # and events (see _amqp_deliveries); the rest of the protocol stays pika's.
        reader = DeliveryReader(impl.connection, impl, p.max_message_bytes, self._received)
        if _READ_DELIVERIES:
            reader.install()
        channel.basic_consume(p.queue, on_message, auto_ack=False,
                              **({"consumer_tag": p.consumer_tag} if p.consumer_tag else {}))
        self.consume_ok = True
        self.consuming.set()
        while True:
            self._woken = False  # before reading the state (see _wake)
            with self._lock:
                closing = self._closing
                ack_upto = self._ack_upto
                awaiting = bool(self._awaiting)
            wanted = self._window(ack_upto)
            if wanted != window and not qos_sent[0]:
                # Without waiting for its qos-ok, but before the acknowledgements it
                # allows: the broker takes a channel's frames in order, so it never sees
                # a wider window in between. One at a time: pika would hold back a second
                # one until the first's qos-ok, and let acknowledgements pass it.
                qos_sent[0] = True
                impl.basic_qos(prefetch_count=wanted, global_qos=True, callback=qos_ok)
                window = wanted
            if ack_upto > self._acked and wanted == window:
                channel.basic_ack(ack_upto, multiple=True)
                self._acked = ack_upto
            if closing and ack_upto <= self._acked and not (
                    p.acknowledge == "on_durable" and awaiting
                    and time.monotonic() - self._closed_at < p.linger):
                return
            connection.process_data_events(time_limit=_TICK)
            if self._arrived:
                # One signal for all the messages pika dispatched in this turn (those read
                # from the bytes directly were signalled as they were handed over).
                self._arrived = False
                emitter = self._emitter
                if emitter is not None:
                    emitter.signal()
            oversized = self._oversized
            if oversized is not None:
                # Only now, after the messages delivered before it were dispatched: they
                # are signalled before the error (and acknowledged as due before the
                # connection closes, once the stream's end closes the session).
                self._oversized = None
                self._fail(oversized)

    def _received(self, deliveries: list[Delivery], signal: bool = True) -> None:
        """Keep messages the broker delivered (on the connection thread) and, unless told
        not to, signal the emitter: the direct reader hands over each run of deliveries in
        a read of the socket, within pika's wait for network events, which nothing else
        ends."""
        now = time.time()
        messages = [RabbitMQMessage(*values, received=now) for values in deliveries]
        sizes = [_held_bytes(message) for message in messages]
        with self._lock:
            self._buffer.extend(messages)
            self._sizes.extend(sizes)
            self._buffered_bytes += sum(sizes)
            self._delivered = max(self._delivered, messages[-1].delivery_tag)
            self.received += len(messages)
            self._credit = max(0, self._credit - len(messages))
            emitter = self._emitter if signal else None
        if emitter is not None:
            emitter.signal()

    def _window(self, ack_upto: int | None = None) -> int:
        """The prefetch wanted now: the messages delivered and not acknowledged (once
        ``ack_upto`` is), plus the opening; at least 1, at most ``prefetch``."""
        with self._lock:
            acked = self._acked if ack_upto is None else max(self._acked, ack_upto)
            unacked = self._delivered - acked
            return max(1, min(self.p.prefetch, unacked + self._credit))

    def _bound_bodies(self, channel: Any) -> None:
        """Fail the stream on a content header announcing a body over
        ``max_message_bytes``, and drop that body's frames as they are read, so pika never
        assembles it in memory."""
        import pika.frame  # type: ignore[import-untyped]

        impl = channel._impl
        handle = impl._handle_content_frame  # pika 1.x
        limit = self.p.max_message_bytes
        dropping = [False]

        def bounded(frame_value: Any) -> None:
            if dropping[0]:
                return
            if isinstance(frame_value, pika.frame.Header) and frame_value.body_size > limit:
                dropping[0] = True
                self._oversized = (RabbitMQError(
                    f"rabbitmq {self.p.address}: a message of queue {self.p.queue!r} has a "
                    f"body of {frame_value.body_size} bytes, over max_message_bytes "
                    f"({limit}); the connection is closed before reading it, and the "
                    f"message goes back to the queue"))
                return
            handle(frame_value)

        impl._handle_content_frame = bounded


def _parameters(host: str, port: int, vhost: str, username: str | None,
                password: str | None, tls: bool | ssl.SSLContext, connect_timeout: float,
                heartbeat: int, name: str) -> Any:
    """pika's connection parameters: one attempt, the timeouts given, TLS as asked."""
    pika = require("pika", "rabbitmq", "the rabbitmq adapter")
    ssl_options = None
    if tls:
        context = tls if isinstance(tls, ssl.SSLContext) else ssl.create_default_context()
        ssl_options = pika.SSLOptions(context, server_hostname=host)
    credentials = (pika.PlainCredentials(username, password or "", erase_on_connect=True)
                   if username is not None else pika.ConnectionParameters.DEFAULT_CREDENTIALS)
    return pika.ConnectionParameters(
        host=host, port=port, virtual_host=vhost, credentials=credentials,
        ssl_options=ssl_options, connection_attempts=1, retry_delay=0,
        socket_timeout=connect_timeout, stack_timeout=connect_timeout,
        blocked_connection_timeout=None, heartbeat=heartbeat,
        client_properties={"connection_name": name})


def _nothing() -> None:
    """Wakes the connection thread (its work is read from the session's state)."""


def _reason(exc: BaseException) -> str:
    for arg in exc.args:  # pika wraps the socket's error in a connector's
        inner = getattr(arg, "exception", None)
        if isinstance(inner, BaseException):
            return _reason(inner)
        if isinstance(arg, BaseException):
            return _reason(arg)
    text = str(exc) or type(exc).__name__
    return text if len(text) < 400 else text[:400] + "..."


class RabbitMQSubscriber(ConfirmingSubscriber[T], Generic[T]):
    """Publishes each element to a RabbitMQ exchange, requesting more only as the broker
    confirms.

    Each element becomes one persistent message (``delivery_mode=2``; ``encode(element)``:
    bytes as they are, ``str`` as UTF-8, a Spark ``Row`` or anything else as JSON) with
    the ``message_id`` property set to its key (see
    :class:`~reactive_streams.adapters._confirming.ConfirmingSubscriber`: the query, batch,
    partition and row under Spark), published with ``mandatory=True`` on a channel in
    confirm mode. At most ``window`` messages are unconfirmed; more is requested only once
    the broker confirmed (``basic.ack``) every message sent, and a ``basic.nack``, a
    returned message (no queue is bound for its routing key) or a lost connection stops
    the subscriber with :class:`BrokerRefused`, so Spark does not commit the batch.

    **At least once.** RabbitMQ does not deduplicate: a retried batch publishes its rows
    again, with the same ``message_id`` each, so the queue may hold a row twice; a
    consumer dropping repeated ``message_id`` values (the ``rabbitmq`` source with
    ``shards`` does, within its identity window) sees every row once.

    Parameters
    ----------
    routing_key : str
        The routing key (with the default exchange ``""``: the queue's name).
    exchange : str
        Default ``""``, the default exchange.
    url, host, port, vhost, username, password, tls, connect_timeout, heartbeat
        As :class:`RabbitMQPublisher`'s.
    encode : callable, optional
        Element to bytes.
    content_type : str, optional
        The ``content_type`` property; default ``application/json`` when elements are
        encoded as JSON, none otherwise.
    window : int
        The most messages unconfirmed (default 256).
    prefix : str
        Put before every ``message_id``: give each query writing to one queue its own.

    Examples
    --------
    >>> from reactive_streams.adapters.rabbitmq import RabbitMQSubscriber
    >>> RabbitMQSubscriber("orders", url="amqp://spark@127.0.0.1/%2F", prefix="q1-")
    RabbitMQSubscriber('127.0.0.1:5672', vhost='/', exchange='', routing_key='orders')
    """

    def __init__(self, routing_key: str, *, exchange: str = "", url: str | None = None,
                 host: str | None = None, port: int | None = None, vhost: str | None = None,
                 username: str | None = None, password: str | None = None,
                 tls: bool | ssl.SSLContext | None = None, connect_timeout: float = 10.0,
                 heartbeat: int = 60, encode: Callable[[T], bytes] | None = None,
                 content_type: str | None = None, window: int = 256,
                 prefix: str = "") -> None:
        require("pika", "rabbitmq", "the rabbitmq subscriber")
        super().__init__(window=window, prefix=prefix)
        # The publisher checks the connection's parameters the same way.
        checked: RabbitMQPublisher[Any] = RabbitMQPublisher(
            routing_key or "-", url=url, host=host, port=port, vhost=vhost,
            username=username, password=password, tls=tls,
            connect_timeout=connect_timeout, heartbeat=heartbeat)
        if not isinstance(routing_key, str) or len(routing_key.encode()) > 255:
            raise ValueError(f"routing_key {routing_key!r}: a string of at most 255 bytes")
        if not isinstance(exchange, str) or len(exchange.encode()) > 255:
            raise ValueError(f"exchange {exchange!r}: a string of at most 255 bytes")
        if encode is not None and not callable(encode):
            raise ValueError(f"encode {encode!r}: a callable or None is accepted")
        self.routing_key, self.exchange = routing_key, exchange
        self.host, self.port, self.vhost = checked.host, checked.port, checked.vhost
        self.username, self.password, self.tls = (checked.username, checked.password,
                                                  checked.tls)
        self.connect_timeout, self.heartbeat = checked.connect_timeout, checked.heartbeat
        self.encode, self.content_type = encode, content_type
        self._connection: Any = None
        self._channel: Any = None
        self._confirmed_upto = 0  # every publish up to this sequence number is confirmed
        self._singles: set[int] = set()
        self._refused: list[str] = []
        self._sent = 0

    def __repr__(self) -> str:
        return (f"RabbitMQSubscriber({self.address!r}, vhost={self.vhost!r}, "
                f"exchange={self.exchange!r}, routing_key={self.routing_key!r})")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _open(self) -> None:
        pika = require("pika", "rabbitmq", "the rabbitmq subscriber")
        import pika.exceptions as pe

        where = f"rabbitmq {self.address}"
        try:
            self._connection = pika.BlockingConnection(_parameters(
                self.host, self.port, self.vhost, self.username, self.password, self.tls,
                self.connect_timeout, self.heartbeat, f"reactive-streams to {self.routing_key}"))
        except (pe.ProbableAuthenticationError, pe.AuthenticationError) as exc:
            raise BrokerRefused(f"{where}: the broker refused the credentials of user "
                                f"{self.username or 'guest'!r} ({_reason(exc)})") from None
        except (pe.AMQPError, OSError) as exc:
            raise BrokerRefused(f"{where}: could not connect: {_reason(exc)}") from None
        channel = self._connection.channel()
        impl = channel._impl  # confirms counted as they come, not one round trip each
        selected = threading.Event()
        impl.add_on_return_callback(self._on_return)
        def on_selected(frame: Any) -> None:
            selected.set()
            self._connection.add_callback_threadsafe(_nothing)  # ends the wait below

        impl.confirm_delivery(self._on_confirm, callback=on_selected)
        while not selected.is_set():
            self._connection.process_data_events(_TICK)
        self._channel = channel

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        if type(method).__name__ == "Nack":
            self._refused.append(f"the broker refused message {method.delivery_tag} "
                                 f"(basic.nack)")
        if method.multiple:
            self._confirmed_upto = max(self._confirmed_upto, method.delivery_tag)
        else:
            self._singles.add(method.delivery_tag)
        while self._confirmed_upto + 1 in self._singles:
            self._confirmed_upto += 1
            self._singles.discard(self._confirmed_upto)
        if self._confirmed_upto >= self._sent or self._refused:
            self._end_wait()

    def _on_return(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        self._refused.append(f"the broker returned message_id {properties.message_id!r}: "
                             f"{method.reply_code} {method.reply_text} (exchange "
                             f"{method.exchange!r}, routing key {method.routing_key!r})")
        self._end_wait()

    def _end_wait(self) -> None:
        """Called by pika on the connection's thread: a confirm or a return is not an event
        that ends ``process_data_events``' wait, a callback is."""
        connection = self._connection
        if connection is not None:
            connection.add_callback_threadsafe(_nothing)

    def _payload(self, element: T) -> tuple[bytes, str | None]:
        if self.encode is not None:
            return self.encode(element), self.content_type
        if isinstance(element, (bytes, bytearray, memoryview)):
            return bytes(element), self.content_type
        if isinstance(element, str):
            return element.encode(), self.content_type
        as_dict = getattr(element, "asDict", None)  # a Spark Row
        value = as_dict(recursive=True) if callable(as_dict) else element
        return (json.dumps(value, default=str).encode(),
                self.content_type or "application/json")

    def _send(self, elements: Sequence[tuple[str, T]]) -> None:
        pika = require("pika", "rabbitmq", "the rabbitmq subscriber")
        impl = self._channel._impl
        for key, element in elements:
            body, content_type = self._payload(element)
            properties = pika.BasicProperties(delivery_mode=2, message_id=key,
                                              content_type=content_type)
            impl.basic_publish(self.exchange, self.routing_key, body, properties,
                               mandatory=True)
            self._sent += 1
        wait = max(30.0, self.connect_timeout)
        deadline = time.monotonic() + wait
        try:
            while self._confirmed_upto < self._sent and not self._refused:
                if time.monotonic() > deadline:
                    raise BrokerRefused(f"rabbitmq {self.address}: "
                                        f"{self._sent - self._confirmed_upto} messages not "
                                        f"confirmed within {wait:g} s")
                self._connection.process_data_events(_TICK)
        except BrokerRefused:
            raise
        except Exception as exc:
            raise BrokerRefused(f"rabbitmq {self.address}: the connection failed with "
                                f"{self._sent - self._confirmed_upto} messages "
                                f"unconfirmed: {_reason(exc)}") from None
        if self._refused:
            raise BrokerRefused(f"rabbitmq {self.address}: {self._refused[0]}"
                                + (f" (and {len(self._refused) - 1} more)"
                                   if len(self._refused) > 1 else ""))

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                if connection.is_open:
                    connection.close()
            except Exception:  # lost already
                pass
