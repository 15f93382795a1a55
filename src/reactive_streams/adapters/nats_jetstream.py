"""A durable JetStream pull consumer as a Publisher, fetching no more than demand allows.

:class:`JetStreamPublisher` connects when subscribed to, binds to a durable pull consumer
of a stream and signals each message as a :class:`JetStreamMessage`. An asyncio loop on a
thread of the subscription's own speaks nats-py; it sends a pull request (JetStream's
``fetch``) for at most the demand not yet covered, so the server holds back the rest and
the consumer's backlog (``num_pending``), not this process, grows. A message is
acknowledged only once signalled (or, with ``acknowledge="on_durable"``, once the
subscriber said it is durable); what is not comes back after the consumer's ``AckWait``.
Needs nats-py (extra ``nats``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar
from urllib.parse import urlsplit

from ..api import UNBOUNDED, Publisher, Subscriber, Subscription
from ..errors import ReactiveStreamsError
from ..runners import ThreadRunner
from ..signalling import COMPLETE, Emitter, Source, Terminal, require_not_none
from ._confirming import BrokerRefused, ConfirmingSubscriber
from ._extras import require
from ._sessions import Counting, check_int, is_number
from .urls import redact_url

__all__ = ["DEFAULT_MAX_BATCH", "DEFAULT_MAX_MESSAGE_BYTES", "JetStreamError",
           "JetStreamMessage", "JetStreamPublisher", "JetStreamSubscriber", "SkipMessage",
           "check_urls"]

T = TypeVar("T")

log = logging.getLogger("reactive_streams.adapters.nats_jetstream")

#: The most messages one pull request asks for (the "cap" of ``fetch``).
DEFAULT_MAX_BATCH: Final = 1000
#: The default ``max_message_bytes``: nats-server's own default ``max_payload`` (1 MiB).
DEFAULT_MAX_MESSAGE_BYTES: Final = 2**20
#: What a message held beyond its data and headers costs (its record, its ack subject).
MESSAGE_OVERHEAD_BYTES: Final = 256
#: Statuses that end a pull request: no messages, request expired, a conflict (409:
#: max bytes reached, consumer deleted, leadership change, ...).
_ENDING_STATUSES: Final = frozenset({"404", "408", "409"})
#: The acknowledgement payloads of JetStream.
_ACK, _NAK, _IN_PROGRESS = b"+ACK", b"-NAK", b"+WPI"
_SCHEMES: Final = ("nats", "tls")
_DELIVER_POLICIES: Final = ("all", "new", "last", "last_per_subject")


@dataclass(frozen=True, slots=True)
class JetStreamMessage:
    """One message as the consumer delivered it.

    Attributes
    ----------
    subject : str
        The subject it was published to.
    data : bytes
    headers : dict of str to str
        Its headers (``Nats-Msg-Id`` among them when its producer set one); empty if none.
    stream_sequence : int
        Its sequence in the stream: the message's identity, the same at every delivery.
    consumer_sequence : int
        The consumer's count of deliveries at this one (a redelivery gets a new one).
    num_delivered : int
        How many times the consumer has delivered it: more than 1 is a redelivery.
    timestamp : float
        When the stream stored it, in seconds since the epoch (the server's clock).
    """

    subject: str
    data: bytes
    headers: dict[str, str]
    stream_sequence: int
    consumer_sequence: int
    num_delivered: int
    timestamp: float = field(compare=False)

    @property
    def redelivered(self) -> bool:
        return self.num_delivered > 1


class JetStreamError(ReactiveStreamsError, ConnectionError):
    """The server could not be reached, refused the credentials, lacks the stream or the
    consumer, or the connection was lost; the message names ``host:port`` (never a
    password or token)."""


class SkipMessage(ReactiveStreamsError):
    """Raised by a ``decode`` function to leave a message out instead of failing the stream.

    The message is not signalled and is acknowledged at once (JetStream acknowledges each
    message on its own), so it does not come again; it is counted in
    :attr:`JetStreamPublisher.skipped`.
    """


_SKIPPED: Final = object()


def check_urls(urls: str | Sequence[str]) -> list[str]:
    """The server URLs ``urls`` (one, a comma-separated list or a sequence), checked:
    ``nats://host:port`` or ``tls://host:port`` (port 4222 when left out).

    Examples
    --------
    >>> check_urls("nats://127.0.0.1:4222, tls://nats.example.com")
    ['nats://127.0.0.1:4222', 'tls://nats.example.com:4222']
    >>> check_urls("http://127.0.0.1:4222")
    Traceback (most recent call last):
    ...
    ValueError: url 'http://127.0.0.1:4222': nats://host:port or tls://host:port is accepted
    """
    given = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else list(urls)
    if not given or not all(isinstance(u, str) and u for u in given):
        raise ValueError(f"url {urls!r}: one or more nats://host:port URLs are needed")
    checked = []
    for url in given:
        shown = redact_url(url)
        try:
            parts = urlsplit(url)
            port = parts.port or 4222
        except ValueError:
            raise ValueError(f"url {shown!r}: a port from 1 to 65535 is needed") from None
        if parts.scheme not in _SCHEMES or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"url {shown!r}: nats://host:port or tls://host:port is "
                             f"accepted")
        if parts.username or parts.password:
            raise ValueError(f"url {shown!r}: credentials are not accepted in the URL (they "
                             f"would show in logs); give username/password or token")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        checked.append(f"{parts.scheme}://{host}:{port}")
    return checked


class JetStreamPublisher(Publisher[T], Generic[T]):
    """Publishes the messages of a durable JetStream pull consumer, fetched against demand.

    Each ``subscribe`` opens a connection of its own (on a thread of its own running an
    asyncio loop, so ``subscribe`` returns at once), binds to the durable consumer
    ``consumer`` of ``stream`` and signals each message (``decode(message)``, by default
    the :class:`JetStreamMessage` itself). The stream is endless unless ``max_messages``
    is given; ``cancel`` closes the connection.

    **Demand.** The subscription sends one pull request at a time, for
    ``min(demand not yet covered, max_batch)`` messages, and another only once that one
    ended (filled, or expired after ``fetch_timeout``): messages received plus those a
    request may still bring never exceed what was requested. So a slow subscriber holds
    the server back: the consumer's ``num_pending`` grows, and its ``num_ack_pending``
    (delivered, not yet acknowledged) holds at most the demand, plus what was signalled and
    awaits acknowledgement.

    **Acknowledgement.** ``acknowledge="on_next"``: a message is acknowledged as soon as
    ``on_next`` returns. ``"on_durable"``: only when :meth:`on_durable` says the first
    ``count`` elements signalled to the latest subscription are durable (the
    acknowledging-publisher protocol of the ``reactive`` Spark source). A message never
    acknowledged is delivered again by the consumer after its ``AckWait``: nothing is
    lost. While the subscription holds a message (waiting for demand or for
    ``on_durable``) it tells the server it is in progress every third of ``AckWait``, so
    the server does not give it to another puller of the consumer meanwhile; at cancel it
    gives back (NAK) every message it holds unacknowledged, to be delivered again at once.
    A redelivery of a message the subscription holds is dropped. The consumer's
    ``max_ack_pending`` must exceed what a reader holds unacknowledged (for the Spark
    source: ``maxRecordsPerTrigger`` with a write-ahead log, twice that without one), or
    the server stops delivering before a batch is full.

    **Bytes.** A message larger than ``max_message_bytes`` (data and headers) fails the
    stream, naming its stream sequence; the server's own ``max_payload`` (1 MiB by
    default) bounds every message anyway. With ``max_buffered_bytes``, each pull request
    carries JetStream's ``max_bytes``: the server ends a request's batch there, and the
    messages held beyond demand are bounded by it.

    Parameters
    ----------
    urls : str or sequence of str
        ``nats://host:port`` or ``tls://host:port`` (several: tried in turn).
    stream : str
    consumer : str
        The durable consumer's name.
    create_consumer : bool
        Create the consumer when it does not exist (a durable pull consumer with explicit
        acknowledgement, ``filter_subject``, ``deliver_policy``, ``ack_wait`` and
        ``max_ack_pending``); default False: a missing consumer fails the stream.
    filter_subject : str, optional
    deliver_policy : "all", "new", "last" or "last_per_subject"
        For a consumer created here; default "all".
    ack_wait : float
        Seconds, for a consumer created here (default 30).
    max_ack_pending : int, optional
        For a consumer created here (default: the server's, 1000 on 2.9).
    username, password, token : str, optional
    credentials_file : str, optional
        A ``.creds`` file (JWT and NKey seed).
    tls : bool or ssl.SSLContext
        True: TLS with the system's certificate authorities; a ``tls://`` URL implies it.
    max_batch : int
        The most messages a pull request asks for (default 1000).
    fetch_timeout : float
        Seconds a pull request waits for messages before it expires (default 5).
    max_message_bytes : int
        The largest message accepted (default 1 MiB).
    max_buffered_bytes : int, optional
        Each pull request's ``max_bytes`` (see **Bytes**); default None.
    connect_timeout : float
        Seconds, default 10.
    max_messages : int, optional
        Complete after this many elements.
    acknowledge : "on_next" or "on_durable"
    decode : callable, optional
        Turns each :class:`JetStreamMessage` into the element signalled. If it raises, the
        stream fails with that error (the message is not acknowledged); if it raises
        :class:`SkipMessage` the message is left out and acknowledged. Never None (§2.13).
    linger : float
        With ``acknowledge="on_durable"``: seconds the connection stays open after cancel
        while signalled messages wait for ``on_durable`` (default 10).

    Raises
    ------
    ValueError
        For a parameter that is not accepted (the message names it).
    MissingExtraError
        When nats-py is not installed (``pip install 'pyspark-reactive[nats]'``).

    Notes
    -----
    Errors reach the subscriber as ``on_error(JetStreamError)``, naming ``host:port``:
    the server is unreachable, refused the credentials, has no JetStream, no such stream
    or consumer, or the connection was lost (it is not reconnected: what was not
    acknowledged comes again to the next subscription).

    Examples
    --------
    >>> from reactive_streams.adapters.nats_jetstream import JetStreamPublisher
    >>> JetStreamPublisher("nats://127.0.0.1:4222", "ORDERS", "spark")
    JetStreamPublisher(['nats://127.0.0.1:4222'], stream='ORDERS', consumer='spark')
    """

    def __init__(self, urls: str | Sequence[str], stream: str, consumer: str, *,
                 create_consumer: bool = False, filter_subject: str | None = None,
                 deliver_policy: str = "all", ack_wait: float = 30.0,
                 max_ack_pending: int | None = None, username: str | None = None,
                 password: str | None = None, token: str | None = None,
                 credentials_file: str | None = None, tls: bool | ssl.SSLContext = False,
                 max_batch: int = DEFAULT_MAX_BATCH, fetch_timeout: float = 5.0,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 max_buffered_bytes: int | None = None, connect_timeout: float = 10.0,
                 max_messages: int | None = None,
                 acknowledge: Literal["on_next", "on_durable"] = "on_next",
                 decode: Callable[[JetStreamMessage], T] | None = None,
                 linger: float = 10.0) -> None:
        require("nats", "nats", "the nats publisher")
        self.urls = check_urls(urls)
        for name, value in (("stream", stream), ("consumer", consumer)):
            if not isinstance(value, str) or not value or any(
                    c in value for c in " \t\r\n.*>"):
                raise ValueError(f"{name} {value!r}: a name without spaces, '.', '*' or '>' "
                                 f"is needed")
        if filter_subject is not None and (not isinstance(filter_subject, str)
                                           or not filter_subject or " " in filter_subject):
            raise ValueError(f"filter_subject {filter_subject!r}: a subject (wildcards * "
                             f"and > accepted) is needed")
        if deliver_policy not in _DELIVER_POLICIES:
            raise ValueError(f"deliver_policy {deliver_policy!r}: one of "
                             f"{', '.join(_DELIVER_POLICIES)} is accepted")
        for name, number in (("ack_wait", ack_wait), ("fetch_timeout", fetch_timeout),
                             ("connect_timeout", connect_timeout)):
            if not (is_number(number) and number > 0):
                raise ValueError(f"{name} {number!r}: a positive number of seconds is needed")
        if not (is_number(linger) and linger >= 0):
            raise ValueError(f"linger {linger!r}: a number of seconds >= 0 is needed")
        check_int("max_batch", max_batch, 1, 1_000_000)
        check_int("max_message_bytes", max_message_bytes, 1, 2**31)
        if max_ack_pending is not None:
            check_int("max_ack_pending", max_ack_pending, 1, 2**31)
        if max_buffered_bytes is not None:
            check_int("max_buffered_bytes", max_buffered_bytes, 1, 2**62)
        if max_messages is not None:
            check_int("max_messages", max_messages, 0, 2**63 - 1)
        for name, secret in (("username", username), ("password", password),
                             ("token", token), ("credentials_file", credentials_file)):
            if secret is not None and not isinstance(secret, str):
                raise ValueError(f"{name}: a string or None is accepted, not "
                                 f"{type(secret).__name__}")
        if password is not None and username is None:
            raise ValueError("password: accepted only with a username")
        if token is not None and username is not None:
            raise ValueError("token: not accepted with a username (one way of "
                             "authenticating at a time)")
        if acknowledge not in ("on_next", "on_durable"):
            raise ValueError(f"acknowledge {acknowledge!r}: 'on_next' or 'on_durable' is "
                             f"accepted")
        if decode is not None and not callable(decode):
            raise ValueError(f"decode {decode!r}: a callable taking a JetStreamMessage, or "
                             f"None, is accepted")
        if not isinstance(tls, (bool, ssl.SSLContext)):
            raise ValueError(f"tls {tls!r}: True, False or an ssl.SSLContext is accepted")
        self.stream, self.consumer = stream, consumer
        self.create_consumer, self.filter_subject = bool(create_consumer), filter_subject
        self.deliver_policy, self.ack_wait = deliver_policy, float(ack_wait)
        self.max_ack_pending = max_ack_pending
        self.username, self.password, self.token = username, password, token
        self.credentials_file, self.tls = credentials_file, tls
        self.max_batch, self.fetch_timeout = max_batch, float(fetch_timeout)
        self.max_message_bytes, self.max_buffered_bytes = max_message_bytes, max_buffered_bytes
        self.connect_timeout, self.max_messages = float(connect_timeout), max_messages
        self.acknowledge, self.decode, self.linger = acknowledge, decode, float(linger)
        self._runner = ThreadRunner(max_workers=1, name="nats-signals")
        self._latest: _Session[T] | None = None

    @property
    def address(self) -> str:
        """The servers as ``host:port`` (comma-separated), as errors name them."""
        return ",".join(u.split("://", 1)[1] for u in self.urls)

    def __repr__(self) -> str:
        return (f"JetStreamPublisher({self.urls!r}, stream={self.stream!r}, "
                f"consumer={self.consumer!r})")

    @property
    def received(self) -> int:
        """Messages the latest subscription has received so far (redeliveries of messages
        it held not counted)."""
        session = self._latest
        return 0 if session is None else session.received

    @property
    def skipped(self) -> int:
        """Messages of the latest subscription that ``decode`` left out (SkipMessage)."""
        session = self._latest
        return 0 if session is None else session.skipped

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        session: _Session[T] = _Session(self)
        self._latest = session
        emitter: Emitter[T] = Emitter(_Counting(subscriber, session), session,
                                      self._runner.acquire())
        session.start(emitter)

    def on_durable(self, count: int) -> None:
        """The first ``count`` elements signalled to the latest subscription are durable:
        acknowledge them (with ``acknowledge="on_durable"``; otherwise they were at
        ``on_next``). After a cancel this waits (at most 2 s) until the acknowledgements
        are written and the connection closed, since the caller may end its process."""
        session = self._latest
        if session is not None and self.acknowledge == "on_durable":
            session.durable(count)

    def identity(self, element: Any) -> str | None:
        """A message's identity: its stream sequence (the same at every delivery), for
        ``JetStreamMessage`` elements; None for others."""
        if isinstance(element, JetStreamMessage):
            return str(element.stream_sequence)
        return None

    def pending(self) -> int | None:
        """The consumer's ``num_pending`` (messages not delivered yet) as the server tells
        it now, or None when the latest subscription cannot ask (not connected)."""
        session = self._latest
        return None if session is None else session.num_pending()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the latest subscription is bound to its consumer, or failed; True if
        bound."""
        session = self._latest
        return session is not None and session.ready.wait(timeout) and session.bound

    def wait_closed(self, timeout: float) -> bool:
        """Wait until the latest subscription's connection is closed (its
        acknowledgements written); True if it is."""
        session = self._latest
        if session is None:
            return True
        session.thread.join(timeout)
        return not session.thread.is_alive()


class _Tap(Subscription):
    """The emitter as the subscriber sees it: counts what is requested, for the pulls."""

    def __init__(self, subscription: Subscription, session: _Session[Any]) -> None:
        self._subscription = subscription
        self._session = session

    def request(self, n: int) -> None:
        if type(n) is int and n > 0:
            self._session.requested(n)
        self._subscription.request(n)

    def cancel(self) -> None:
        self._subscription.cancel()


class _Counting(Counting[T], Generic[T]):
    """The subscriber as the emitter sees it: tells the session each element it took and
    each request it made."""

    def __init__(self, subscriber: Subscriber[T], session: _Session[T]) -> None:
        super().__init__(subscriber, session)
        self._tapped = session

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscriber.on_subscribe(_Tap(subscription, self._tapped))


@dataclass(slots=True)
class _Held:
    """A message received and not yet acknowledged: its ack subject and when the server
    was last told it is in progress."""

    reply: str
    touched: float
    size: int


class _Session(Source[T], Generic[T]):
    """One subscription: its connection, its asyncio loop's thread, what it received.

    The loop's thread is the only one that touches nats-py. Other threads hand it work
    (acknowledgements, a request) through ``_acks`` and ``_kick``.
    """

    def __init__(self, publisher: JetStreamPublisher[T]) -> None:
        self.p = publisher
        self._lock = threading.Lock()
        self._buffer: deque[JetStreamMessage] = deque()  # received, not pulled
        self._held: dict[int, _Held] = {}  # stream sequence -> received, unacknowledged
        self._taking: deque[int] = deque()  # sequences pulled, not yet signalled
        self._awaiting: deque[tuple[int, int]] = deque()  # (count, sequence) signalled
        self._acks: deque[tuple[str, bytes]] = deque()  # (ack subject, what) to send
        self._requested = 0  # what the subscriber requested (capped at UNBOUNDED)
        self._in_flight = 0  # what the pull request under way may still bring
        self._buffered_bytes = 0
        self._signalled = 0
        self._durable = 0
        self.received = 0
        self.skipped = 0
        self._taken = 0
        self._terminal: Terminal | None = None
        self._closing = False
        self._closed_at = 0.0
        self._emitter: Emitter[T] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._client: Any = None
        self.ready = threading.Event()
        self.bound = False
        self._ack_wait = publisher.ack_wait
        self._last_touch = 0.0
        self._last_error: BaseException | None = None
        self._signal_due = False  # a signal to the emitter is scheduled on the loop
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"nats {publisher.address} {publisher.stream}/"
                                            f"{publisher.consumer}")
        self._released = False

    def start(self, emitter: Emitter[T]) -> None:
        self._emitter = emitter
        emitter.start()
        self.thread.start()

    # -- the emitter's side ----------------------------------------------------------------

    def requested(self, n: int) -> None:
        with self._lock:
            self._requested = min(self._requested + n, UNBOUNDED)
        self._kick()

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        limit = self.p.max_messages
        elements: list[Any] = []
        while True:
            with self._lock:
                want = n - len(elements)
                if limit is not None:
                    want = min(want, limit - self._taken)
                taken = [self._buffer.popleft() for _ in range(min(want, len(self._buffer)))]
                self._buffered_bytes -= sum(_size(m) for m in taken)
            decoded, bad = self._decode(taken)
            skipped_now = False
            with self._lock:
                if bad is not None:
                    back = taken[len(decoded):]
                    self._buffer.extendleft(reversed(back))
                    self._buffered_bytes += sum(_size(m) for m in back)
                    taken = taken[:len(decoded)]
                    self._terminal = bad
                got = []
                for message, element in zip(taken, decoded, strict=True):
                    if element is _SKIPPED:
                        held = self._held.pop(message.stream_sequence, None)
                        if held is not None:
                            self._acks.append((held.reply, _ACK))
                        self.skipped += 1
                        skipped_now = True
                    else:
                        self._taking.append(message.stream_sequence)
                        got.append(element)
                self._taken += len(got)
                terminal: Terminal | None = self._terminal
                if limit is not None and self._taken >= limit:
                    terminal = COMPLETE
            elements += got
            if skipped_now:
                self._kick()  # acknowledgements to send, and demand to pull again
            if len(got) == len(taken) or terminal is not None:
                return elements, terminal

    def _decode(self, taken: list[JetStreamMessage]) -> tuple[list[Any], BaseException | None]:
        decode = self.p.decode
        if decode is None:
            return list(taken), None
        elements: list[Any] = []
        for message in taken:
            try:
                element = decode(message)
            except SkipMessage as skip:
                # The first at WARNING, the rest at DEBUG (a shard may drop thousands of
                # redeliveries at once); close() says how many in all.
                first = not self.skipped and _SKIPPED not in elements
                log.log(logging.WARNING if first else logging.DEBUG,
                        "nats %s: message %d of stream %r was left out: %s", self.p.address,
                        message.stream_sequence, self.p.stream, skip)
                elements.append(_SKIPPED)
                continue
            except Exception as exc:
                error = ValueError(f"nats {self.p.address}: decoding message "
                                   f"{message.stream_sequence} of stream {self.p.stream!r} "
                                   f"(subject {message.subject!r}) failed: {exc!r}")
                error.__cause__ = exc
                return elements, error
            if element is None:
                return elements, TypeError(
                    f"§2.13: decode returned None for message {message.stream_sequence} of "
                    f"stream {self.p.stream!r}; raise SkipMessage to leave a message out")
            elements.append(element)
        return elements, None

    def signalled(self) -> None:
        with self._lock:
            sequence = self._taking.popleft()
            self._signalled += 1
            if self.p.acknowledge == "on_next" or self._signalled <= self._durable:
                held = self._held.pop(sequence, None)
                if held is not None:
                    self._acks.append((held.reply, _ACK))
                now = True
            else:
                self._awaiting.append((self._signalled, sequence))
                now = False
        if now:
            self._kick()

    def durable(self, count: int) -> None:
        with self._lock:
            self._durable = max(self._durable, count)
            while self._awaiting and self._awaiting[0][0] <= count:
                held = self._held.pop(self._awaiting.popleft()[1], None)
                if held is not None:
                    self._acks.append((held.reply, _ACK))
            closing = self._closing
        self._kick()
        if closing and threading.current_thread() is not self.thread:
            self.thread.join(2.0)  # the caller may end its process next

    def close(self) -> None:
        if self.skipped > 1:
            log.warning("nats %s: %d messages of stream %r were left out (acknowledged)",
                        self.p.address, self.skipped, self.p.stream)
        with self._lock:
            self._closing = True
            self._closed_at = time.monotonic()
            self._emitter = None
            released, self._released = self._released, True
        if not released:
            self.p._runner.release()
        self._kick()

    def num_pending(self) -> int | None:
        loop, client = self._loop, self._client
        if loop is None or client is None or not self.bound or loop.is_closed():
            return None

        async def ask() -> int:
            info = await client.jetstream().consumer_info(self.p.stream, self.p.consumer)
            return int(info.num_pending or 0)

        try:
            return asyncio.run_coroutine_threadsafe(ask(), loop).result(2.0)
        except Exception:
            return None

    # -- the loop's thread ----------------------------------------------------------------

    def _kick(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass  # the loop has ended

    def _fail(self, error: BaseException) -> None:
        self.ready.set()
        emitter = None
        with self._lock:
            if self._terminal is None and not self._closing:
                self._terminal = error
                emitter = self._emitter
        if emitter is not None:
            emitter.signal()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._main(loop))
        except Exception as exc:  # a bug here must not leave the subscriber waiting
            log.exception("nats %s: the client loop failed", self.p.address)
            self._fail(JetStreamError(f"nats {self.p.address}: the client loop failed: "
                                      f"{exc!r}"))
        finally:
            self.ready.set()
            self._loop = None
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wake = asyncio.Event()
        self._loop = loop
        client = await self._connect()
        if client is None:
            return
        self._client = client
        try:
            if await self._bind(client):
                self.bound = True
                self.ready.set()
                await self._pulls(client)
        finally:
            await self._close(client)

    async def _connect(self) -> Any:
        nats = require("nats", "nats", "the nats publisher")
        p = self.p
        options: dict[str, Any] = {
            "servers": p.urls, "connect_timeout": p.connect_timeout,
            "allow_reconnect": False, "max_reconnect_attempts": 0,
            "error_cb": self._on_error, "closed_cb": self._on_closed,
            "name": f"pyspark-reactive {p.stream}/{p.consumer}",
        }
        if p.username is not None:
            options["user"] = p.username
            if p.password is not None:
                options["password"] = p.password
        if p.token is not None:
            options["token"] = p.token
        if p.credentials_file is not None:
            options["user_credentials"] = p.credentials_file
        if isinstance(p.tls, ssl.SSLContext):
            options["tls"] = p.tls
        elif p.tls or any(u.startswith("tls://") for u in p.urls):
            options["tls"] = ssl.create_default_context()
        try:
            return await asyncio.wait_for(nats.connect(**options), p.connect_timeout + 1)
        except Exception as exc:
            why = _describe(exc, p)
            last = self._last_error
            if isinstance(exc, asyncio.TimeoutError) and last is not None:
                why = (f"no server answered within {p.connect_timeout:g} s (connect_timeout; "
                       f"{_describe(last, p)})")
            self._fail(JetStreamError(f"nats {p.address}: could not connect: {why}"))
            return None

    async def _on_error(self, error: Exception) -> None:
        self._last_error = error
        log.debug("nats %s: %s", self.p.address, _describe(error, self.p))

    async def _on_closed(self) -> None:
        if not self._closing:
            self._fail(JetStreamError(f"nats {self.p.address}: the connection was lost"))
        if self._wake is not None:
            self._wake.set()

    async def _bind(self, client: Any) -> bool:
        from nats.js import api
        from nats.js.errors import NotFoundError

        p = self.p
        js = client.jetstream()
        where = f"nats {p.address}"
        try:
            try:
                info = await js.consumer_info(p.stream, p.consumer, timeout=p.connect_timeout)
            except NotFoundError as missing:
                if getattr(missing, "err_code", None) == 10059:
                    self._fail(JetStreamError(f"{where}: the stream {p.stream!r} does not "
                                              f"exist"))
                    return False
                if not p.create_consumer:
                    self._fail(JetStreamError(
                        f"{where}: the stream {p.stream!r} has no consumer {p.consumer!r}; "
                        f"create it (a durable pull consumer), or let the publisher create "
                        f"it (create_consumer, the option createConsumer)"))
                    return False
                config = api.ConsumerConfig(
                    durable_name=p.consumer, ack_policy=api.AckPolicy.EXPLICIT,
                    deliver_policy=api.DeliverPolicy(p.deliver_policy),
                    ack_wait=p.ack_wait, max_ack_pending=p.max_ack_pending,
                    filter_subject=p.filter_subject)
                info = await js.add_consumer(p.stream, config, timeout=p.connect_timeout)
        except Exception as exc:
            self._fail(JetStreamError(f"{where}: could not bind to the consumer "
                                      f"{p.consumer!r} of stream {p.stream!r}: "
                                      f"{_describe(exc, p)}"))
            return False
        config = info.config
        if config.deliver_subject:
            self._fail(JetStreamError(f"{where}: the consumer {p.consumer!r} is a push "
                                      f"consumer; a pull consumer is needed"))
            return False
        if config.ack_policy not in (None, api.AckPolicy.EXPLICIT):
            self._fail(JetStreamError(
                f"{where}: the consumer {p.consumer!r} acknowledges with "
                f"{getattr(config.ack_policy, 'value', config.ack_policy)!r}; explicit "
                f"acknowledgement is needed (ack_policy explicit), or messages are "
                f"lost or acknowledged together"))
            return False
        if config.ack_wait:
            self._ack_wait = float(config.ack_wait)
        return True

    async def _pulls(self, client: Any) -> None:
        """Send pull requests within demand until closing; touch held messages."""
        p = self.p
        assert self._wake is not None
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{p.stream}.{p.consumer}"
        while True:
            await self._send_acks(client)
            with self._lock:
                if self._closing or self._terminal is not None:
                    break
                want = self._want()
                budget = self._byte_budget()
            if want > 0 and budget != 0:
                await self._request(client, subject, want, budget)
                continue
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self._touch_interval())
            except asyncio.TimeoutError:
                pass
            await self._touch(client)
        # Closing: let on_durable come for what was signalled, then give back the rest.
        while self.p.acknowledge == "on_durable":
            await self._send_acks(client)
            with self._lock:
                awaiting = bool(self._awaiting)
            left = self.p.linger - (time.monotonic() - self._closed_at)
            if not awaiting or left <= 0 or client.is_closed:
                break
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), min(left, self._touch_interval()))
            except asyncio.TimeoutError:
                pass
            await self._touch(client)
        with self._lock:
            self._acks.extend((held.reply, _NAK) for held in self._held.values())
            self._held.clear()
        await self._send_acks(client)

    def _want(self) -> int:
        """Under the lock: what one pull request may ask for now."""
        limit = self.p.max_messages
        open_demand = self._requested + self.skipped - self.received - self._in_flight
        if limit is not None:
            open_demand = min(open_demand, limit + self.skipped - self.received)
        return max(0, min(open_demand, self.p.max_batch))

    def _byte_budget(self) -> int | None:
        """Under the lock: the ``max_bytes`` of the next request (None: no budget; 0:
        none left until the subscriber takes some)."""
        budget = self.p.max_buffered_bytes
        if budget is None:
            return None
        return max(0, budget - self._buffered_bytes)

    def _touch_interval(self) -> float:
        return max(0.05, self._ack_wait / 3)

    async def _touch(self, client: Any) -> None:
        """Tell the server the messages held for a third of AckWait are in progress, so it
        does not deliver them again (to another puller) while they wait."""
        now = time.monotonic()
        if now - self._last_touch < self._touch_interval() / 2:
            return
        self._last_touch = now
        due = now - self._touch_interval()
        with self._lock:
            replies = [held.reply for held in self._held.values() if held.touched <= due]
            for held in self._held.values():
                if held.touched <= due:
                    held.touched = now
        for reply in replies:
            await client.publish(reply, _IN_PROGRESS)

    async def _send_acks(self, client: Any) -> None:
        with self._lock:
            acks, self._acks = self._acks, deque()
        if not acks or client.is_closed:
            return
        # Written out by nats-py's flusher; drain() at the end waits for the last ones.
        publish = client.publish
        for reply, what in acks:
            await publish(reply, what)

    async def _request(self, client: Any, subject: str, batch: int,
                       budget: int | None) -> None:
        """One pull request for ``batch`` messages: received into the buffer until the
        batch is filled or the server ends the request."""
        p = self.p
        assert self._wake is not None
        done = asyncio.Event()
        got = 0
        ended: list[str] = []

        async def on_message(msg: Any) -> None:
            nonlocal got
            headers = msg.headers or {}
            status = headers.get("Status")
            if status is not None and not msg.data:
                if status in _ENDING_STATUSES:
                    ended.append(f"{status} {headers.get('Description', '')}".strip())
                    done.set()
                return  # 100: a heartbeat or flow control
            got += 1
            self._received(msg)
            if got >= batch:
                done.set()

        inbox = client.new_inbox()
        subscription = await client.subscribe(inbox, cb=on_message, pending_msgs_limit=0,
                                              pending_bytes_limit=0)
        with self._lock:
            self._in_flight = batch
        try:
            request: dict[str, Any] = {"batch": batch,
                                       "expires": int(p.fetch_timeout * 1e9)}
            if budget is not None:
                request["max_bytes"] = budget
            await client.publish(subject, json.dumps(request).encode(), reply=inbox)
            deadline = time.monotonic() + p.fetch_timeout + 2.0
            while not done.is_set():
                with self._lock:
                    if self._closing or self._terminal is not None:
                        break
                left = deadline - time.monotonic()
                if left <= 0 or client.is_closed:
                    break
                self._wake.clear()
                waits = [asyncio.ensure_future(done.wait()),
                         asyncio.ensure_future(self._wake.wait())]
                _, rest = await asyncio.wait(waits, timeout=min(left, self._touch_interval()),
                                             return_when=asyncio.FIRST_COMPLETED)
                for waiting in rest:
                    waiting.cancel()
                await self._send_acks(client)
                await self._touch(client)
        finally:
            try:
                await subscription.unsubscribe()
            except Exception:
                pass  # the connection is closing
            with self._lock:
                self._in_flight = 0
        for why in ended:
            if why.startswith("409") and "MaxBytes" in why.replace(" ", ""):
                with self._lock:
                    empty = not self._buffer and not self._taking
                if empty:
                    self._fail(JetStreamError(
                        f"nats {p.address}: the next message of consumer {p.consumer!r} is "
                        f"larger than max_buffered_bytes ({budget} bytes) allows: raise it "
                        f"above the largest message"))
            elif why.startswith("409"):
                if "Consumer Deleted" in why or "Consumer is push based" in why:
                    self._fail(JetStreamError(f"nats {p.address}: the server ended the pull "
                                              f"request: {why}"))
                else:
                    # Exceeded MaxWaiting, a leadership change...: pull again, not at once.
                    log.warning("nats %s: the server ended a pull request: %s", p.address, why)
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), 0.5)
                    except asyncio.TimeoutError:
                        pass

    def _received(self, msg: Any) -> None:
        """A message of a pull request, on the loop's thread."""
        p = self.p
        reply = msg.reply or ""
        fields = _ack_fields(reply)
        if fields is None:
            self._fail(JetStreamError(f"nats {p.address}: a message without JetStream "
                                      f"metadata came to the pull request ({msg.subject!r})"))
            return
        delivered, sequence, consumer_sequence, stamp = fields
        raw = msg.headers
        headers = {str(k): str(v) for k, v in raw.items()} if raw else {}
        data = msg.data
        size = len(data) + (sum(len(k) + len(v) for k, v in headers.items()) if headers else 0)
        if size > p.max_message_bytes:
            self._fail(JetStreamError(
                f"nats {p.address}: message {sequence} of stream {p.stream!r} has {size} "
                f"bytes, more than max_message_bytes ({p.max_message_bytes}); it stays "
                f"unacknowledged (raise max_message_bytes to read it)"))
            return
        message = JetStreamMessage(msg.subject, data if type(data) is bytes else bytes(data),
                                   headers, sequence, consumer_sequence, delivered, stamp)
        with self._lock:
            held = self._held.get(sequence)
            if held is not None:
                # A redelivery of a message held here (AckWait passed meanwhile): dropped;
                # the newest delivery's subject acknowledges it.
                held.reply = reply
                self._in_flight -= 1
                return
            self._held[sequence] = _Held(reply, time.monotonic(), size)
            self._buffer.append(message)
            self._buffered_bytes += size + MESSAGE_OVERHEAD_BYTES
            self.received += 1
            self._in_flight -= 1
        # One signal for all the messages of one read from the socket, not one each: the
        # emitter's loop then pulls them together.
        if not self._signal_due and self._loop is not None:
            self._signal_due = True
            self._loop.call_soon(self._signal)

    def _signal(self) -> None:
        self._signal_due = False
        emitter = self._emitter
        if emitter is not None:
            emitter.signal()

    async def _close(self, client: Any) -> None:
        try:
            if not client.is_closed:
                await asyncio.wait_for(client.drain(), 5)
        except Exception:
            try:
                await client.close()
            except Exception:
                pass


def _size(message: JetStreamMessage) -> int:
    headers = message.headers
    return len(message.data) + (sum(len(k) + len(v) for k, v in headers.items()) if headers
                                else 0) + MESSAGE_OVERHEAD_BYTES


def _ack_fields(reply: str) -> tuple[int, int, int, float] | None:
    """(num_delivered, stream sequence, consumer sequence, timestamp in seconds) from a
    JetStream message's ack subject, ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream
    seq>.<consumer seq>.<ns>.<pending>`` (or the form with a domain and an account hash
    after ``$JS.ACK``); None for another subject.

    Examples
    --------
    >>> _ack_fields("$JS.ACK.ORDERS.spark.2.17.40.1700000000000000000.5")
    (2, 17, 40, 1700000000.0)
    """
    tokens = reply.split(".")
    if len(tokens) == 9:
        at = 4
    elif len(tokens) >= 11:
        at = 6
    else:
        return None
    if tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    try:
        return (int(tokens[at]), int(tokens[at + 1]), int(tokens[at + 2]),
                int(tokens[at + 3]) / 1e9)
    except ValueError:
        return None


def _describe(error: BaseException, publisher: Any) -> str:
    """What went wrong, without any secret the publisher (or subscriber) was given."""
    text = str(error) or type(error).__name__
    if "Authorization Violation" in text or "Authentication" in text:
        text = "the server refused the credentials (Authorization Violation)"
    elif type(error).__name__ == "NoServersError":
        text = "no server answered (refused or unreachable)"
    elif type(error).__name__ == "NoRespondersError" and isinstance(
            publisher, JetStreamSubscriber):
        text = "no stream takes the subject (no responders)"
    elif type(error).__name__ in ("NoRespondersError", "ServiceUnavailableError"):
        text = "JetStream did not answer: is it enabled on the server (-js)?"
    elif isinstance(error, asyncio.TimeoutError) or type(error).__name__ == "TimeoutError":
        text = "timed out"
    for secret in (publisher.password, publisher.token):
        if secret:
            text = text.replace(secret, "***")
    return text


class JetStreamSubscriber(ConfirmingSubscriber[T], Generic[T]):
    """Publishes each element to a JetStream subject, requesting more only as the stream
    acknowledges.

    Each element becomes one message (``encode(element)``: bytes as they are, ``str`` as
    UTF-8, anything else as JSON) published to ``subject`` with the header
    ``Nats-Msg-Id`` set to its key (see
    :class:`~reactive_streams.adapters._confirming.ConfirmingSubscriber`: the query, batch,
    partition and row under Spark). At most ``window`` messages are unacknowledged; each
    publish acknowledgement (PubAck) is awaited before more is requested, and a missing
    or negative one (no stream takes the subject, a limit refused it, the connection
    failed, ``ack_timeout`` passed) stops the subscriber with :class:`BrokerRefused`.
    A retried batch publishes its rows again with the same ``Nats-Msg-Id``: the stream
    drops them as duplicates within its ``duplicate_window`` (2 minutes by default), so
    every row is in the stream once. A thread of the subscription's own runs the asyncio
    loop nats-py speaks on.

    Parameters
    ----------
    urls : str or sequence of str
    subject : str
        The subject published to (one a stream takes).
    stream : str, optional
        The stream expected to take it (the header ``Nats-Expected-Stream``): a message
        another stream would take is refused.
    encode : callable, optional
        Element to bytes.
    username, password, token, credentials_file, tls, connect_timeout
        As :class:`JetStreamPublisher`'s.
    ack_timeout : float
        Seconds to wait for a publish acknowledgement (default 10).
    window : int
        The most elements unacknowledged (default 256).
    prefix : str
        Put before every ``Nats-Msg-Id``: give each query writing into one stream its own.

    Examples
    --------
    >>> from reactive_streams.adapters.nats_jetstream import JetStreamSubscriber
    >>> JetStreamSubscriber("nats://127.0.0.1:4222", "orders.new", prefix="q1-")
    JetStreamSubscriber(['nats://127.0.0.1:4222'], 'orders.new')
    """

    def __init__(self, urls: str | Sequence[str], subject: str, *,
                 stream: str | None = None, encode: Callable[[T], bytes] | None = None,
                 username: str | None = None, password: str | None = None,
                 token: str | None = None, credentials_file: str | None = None,
                 tls: bool | ssl.SSLContext = False, connect_timeout: float = 10.0,
                 ack_timeout: float = 10.0, window: int = 256, prefix: str = "") -> None:
        require("nats", "nats", "the nats subscriber")
        super().__init__(window=window, prefix=prefix)
        self.urls = check_urls(urls)
        if not isinstance(subject, str) or not subject or any(c in subject for c in " *>"):
            raise ValueError(f"subject {subject!r}: a subject without wildcards is needed")
        if encode is not None and not callable(encode):
            raise ValueError(f"encode {encode!r}: a callable or None is accepted")
        for name, number in (("connect_timeout", connect_timeout),
                             ("ack_timeout", ack_timeout)):
            if not (is_number(number) and number > 0):
                raise ValueError(f"{name} {number!r}: a positive number of seconds is needed")
        if password is not None and username is None:
            raise ValueError("password: accepted only with a username")
        self.subject, self.stream, self.encode = subject, stream, encode
        self.username, self.password, self.token = username, password, token
        self.credentials_file, self.tls = credentials_file, tls
        self.connect_timeout, self.ack_timeout = float(connect_timeout), float(ack_timeout)
        self.duplicates = 0  # messages the stream had already (a retried batch's)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._client: Any = None
        self._js: Any = None

    def __repr__(self) -> str:
        return f"JetStreamSubscriber({self.urls!r}, {self.subject!r})"

    @property
    def address(self) -> str:
        return ",".join(u.split("://", 1)[1] for u in self.urls)

    def _call(self, work: Any, timeout: float) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def _open(self) -> None:
        nats = require("nats", "nats", "the nats subscriber")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._loop_thread = threading.Thread(target=loop.run_forever, daemon=True,
                                             name=f"nats {self.address} {self.subject}")
        self._loop_thread.start()

        async def quiet(error: Exception) -> None:
            log.debug("nats %s: %s", self.address, error)

        options: dict[str, Any] = {"servers": self.urls, "connect_timeout":
                                   self.connect_timeout, "allow_reconnect": False,
                                   "max_reconnect_attempts": 0, "error_cb": quiet}
        if self.username is not None:
            options["user"] = self.username
            if self.password is not None:
                options["password"] = self.password
        if self.token is not None:
            options["token"] = self.token
        if self.credentials_file is not None:
            options["user_credentials"] = self.credentials_file
        if isinstance(self.tls, ssl.SSLContext):
            options["tls"] = self.tls
        elif self.tls or any(u.startswith("tls://") for u in self.urls):
            options["tls"] = ssl.create_default_context()
        try:
            self._client = self._call(nats.connect(**options), self.connect_timeout + 2)
        except Exception as exc:
            raise BrokerRefused(f"nats {self.address}: could not connect: "
                                f"{_describe(exc, self)}") from None
        self._js = self._client.jetstream(timeout=self.ack_timeout)

    def _payload(self, element: T) -> bytes:
        if self.encode is not None:
            return self.encode(element)
        if isinstance(element, (bytes, bytearray, memoryview)):
            return bytes(element)
        if isinstance(element, str):
            return element.encode()
        return json.dumps(element, default=str).encode()

    def _send(self, elements: Sequence[tuple[str, T]]) -> None:
        headers = [{"Nats-Msg-Id": key} for key, _ in elements]
        if self.stream is not None:
            for header in headers:
                header["Nats-Expected-Stream"] = self.stream
        payloads = [self._payload(element) for _, element in elements]
        js = self._js

        async def publish_all() -> list[Any]:
            return await asyncio.gather(*(
                js.publish(self.subject, payload, headers=header, timeout=self.ack_timeout)
                for payload, header in zip(payloads, headers, strict=True)),
                return_exceptions=True)

        acks = self._call(publish_all(), self.ack_timeout + 5)
        for (key, _), ack in zip(elements, acks, strict=True):
            if isinstance(ack, BaseException):
                raise BrokerRefused(f"nats {self.address}: the message {key!r} to "
                                    f"{self.subject!r} was not acknowledged: "
                                    f"{_describe(ack, self)}")
            if ack.duplicate:
                self.duplicates += 1

    def _close(self) -> None:
        loop, client = self._loop, self._client
        if loop is None:
            return
        try:
            if client is not None and not client.is_closed:
                self._call(client.drain(), 5)
        except Exception:
            pass
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(5)
            if not loop.is_running():
                loop.close()
            self._loop = None
