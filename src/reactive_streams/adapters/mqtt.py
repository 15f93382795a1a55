"""An MQTT 5 (or 3.1.1) subscription as a Publisher, taking from the broker only what demand
allows.

:class:`MqttPublisher` connects when subscribed to, subscribes to a topic filter and
signals each message as an :class:`MqttMessage`. A thread of the subscription's own drives
paho's network loop: it stops reading the socket while ``max_buffered`` messages wait
for demand, so the broker meets TCP backpressure, and with manual acknowledgement and the
MQTT 5 Receive Maximum a QoS 1 message is acknowledged only once it was signalled (or, with
``acknowledge="on_durable"``, once the subscriber said it is durable), so a persistent
session redelivers whatever was not. Needs paho-mqtt (extra ``mqtt``).
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

from ..api import Publisher, Subscriber
from ..errors import ReactiveStreamsError
from ..runners import ThreadRunner
from ..signalling import COMPLETE, Emitter, Source, Terminal, require_not_none
from ._extras import require
from ._sessions import Counting, check_int, is_number

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "MESSAGE_OVERHEAD_BYTES", "PROTOCOLS", "MqttError",
           "MqttMessage", "MqttPublisher", "SkipMessage", "check_topic_filter"]

T = TypeVar("T")

log = logging.getLogger("reactive_streams.adapters.mqtt")

#: The longest wait of the network loop in ``select`` (it wakes earlier for any work).
_TICK: Final = 1.0
#: Packets read in one turn of the network loop before it looks at its other work.
_BURST: Final = 512
#: The MQTT versions spoken (``protocol``): 5, and 3.1.1 for brokers without MQTT 5.
PROTOCOLS: Final = ("5", "3.1.1")
#: The default ``max_message_bytes`` (1 MiB), as the ``websocket`` adapter's.
DEFAULT_MAX_MESSAGE_BYTES: Final = 2**20
#: The largest packet MQTT can frame: a fixed header of 5 bytes and 268,435,455 more.
_MQTT_MAX_PACKET: Final = 268_435_460
#: The smallest ``max_message_bytes`` accepted: a broker's CONNACK, SUBACK and the like
#: must fit (a few dozen bytes with an assigned client id and a reason string).
_MIN_PACKET: Final = 512
#: What a message read and held beyond demand costs besides its topic and payload strings:
#: the MqttMessage, its entry in the buffer, its timestamp and packet id (188 bytes on
#: CPython 3.11 and 3.12), rounded up for the allocator. Counted against
#: ``max_buffered_bytes`` so that a flood of empty messages meets the budget too.
MESSAGE_OVERHEAD_BYTES: Final = 256


@dataclass(frozen=True, slots=True)
class MqttMessage:
    """One message as the broker delivered it.

    Attributes
    ----------
    topic : str
        The topic it was published to (not the filter subscribed to).
    payload : bytes
    qos : int
        The QoS it was delivered with: the lower of the publisher's and the subscription's.
    retain : bool
        True for a retained message sent because the subscription was made.
    timestamp : float
        When this client received it, in seconds since the epoch (``time.time()``); not
        compared by ``==``, so the same message received twice compares equal.
    """

    topic: str
    payload: bytes
    qos: int
    retain: bool
    timestamp: float = field(compare=False)


class MqttError(ReactiveStreamsError, ConnectionError):
    """The broker refused the connection or the subscription, or the connection was lost.

    The message names ``host:port`` (and the topic filter for a refused subscription) and
    the MQTT reason code with its name.
    """


class SkipMessage(ReactiveStreamsError):
    """Raised by a ``decode`` function to leave a message out instead of failing the stream.

    The message is not signalled; a QoS 1 message is acknowledged in its turn (right
    after the element before it: at once with ``acknowledge="on_next"``, once that element
    is durable with ``"on_durable"``), so a persistent session does not send it again.
    Each one is logged at WARNING with the exception's message and counted in
    :attr:`MqttPublisher.skipped`.
    """


#: What _decode gives for a message that decode left out.
_SKIPPED: Final = object()


def _held_bytes(message: MqttMessage) -> int:
    """The bytes ``message`` holds while it waits for demand, as ``max_buffered_bytes``
    counts them: its topic and payload as Python stores them (a topic of 60,000 ASCII
    characters holds 60,049 bytes, and four bytes a character with one emoji among them),
    and MESSAGE_OVERHEAD_BYTES for the rest of its record."""
    return sys.getsizeof(message.topic) + sys.getsizeof(message.payload) + (
        MESSAGE_OVERHEAD_BYTES)


def check_topic_filter(topic: object) -> str:
    """Return ``topic`` if it is a valid MQTT topic filter, else raise ``ValueError``.

    ``+`` matches one level and must fill it; ``#`` matches the rest and must be the last
    level; ``$share/<group>/<filter>`` subscribes as one of a group.

    Examples
    --------
    >>> check_topic_filter("sensors/+/temperature")
    'sensors/+/temperature'
    >>> check_topic_filter("sensors/#/x")
    Traceback (most recent call last):
    ...
    ValueError: topic filter 'sensors/#/x': '#' must be the whole last level (as in 'a/#')
    """
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"topic filter {topic!r}: a non-empty string is needed")
    if "\0" in topic or len(topic.encode("utf-8")) > 65535:
        raise ValueError(f"topic filter {topic!r}: no NUL character and at most 65535 "
                         f"bytes of UTF-8 are accepted")
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise ValueError(f"topic filter {topic!r}: '#' must be the whole last level "
                             f"(as in 'a/#')")
        if "+" in level and level != "+":
            raise ValueError(f"topic filter {topic!r}: '+' must be a whole level "
                             f"(as in 'a/+/b')")
    return topic


class MqttPublisher(Publisher[T], Generic[T]):
    """Publishes the messages of an MQTT 5 subscription, taking them only against demand.

    Each ``subscribe`` opens a connection of its own (on a thread of its own, so
    ``subscribe`` returns at once), subscribes to ``topic`` and signals each message
    (``decode(message)``, by default the :class:`MqttMessage` itself). The stream is
    endless unless ``max_messages`` is given; ``cancel`` disconnects.

    **Backpressure.** The subscription holds at most ``max_buffered`` (by default
    ``receive_maximum``) messages beyond demand: then it stops reading the socket until
    demand takes some, so the broker's TCP send blocks (which is all that holds back
    QoS 0). For QoS 1 the client also sends ``receive_maximum`` as the MQTT 5 Receive
    Maximum, and acknowledges a message only once it was signalled (or durable), so a
    broker that honours it has no more than that many unacknowledged messages on the way.
    Beyond the subscription's own count, the operating system's socket buffers may hold
    what the broker already wrote.

    **Bytes.** The client sends ``max_message_bytes`` as the MQTT 5 Maximum Packet Size, so
    the broker never sends it a larger packet: a larger message is *discarded by the
    broker* for this subscription (MQTT 5 requires it, and says nothing to the client;
    mosquitto logs it at most), so raise ``max_message_bytes`` above the largest message
    the topic carries. A broker that sends a larger packet all the same is disconnected
    as soon as the packet's length is read, before its body is, and the stream fails. The
    messages read beyond demand hold at most ``max_buffered_bytes`` (plus the one message
    that crossed it), counting for each its topic and payload as Python holds them and
    :data:`MESSAGE_OVERHEAD_BYTES` for its record, so that long topics or a flood of empty
    messages meet the budget as large payloads do: reading pauses there as it does at
    ``max_buffered`` messages, whichever comes first. paho holds nothing of a message
    beyond the packet it is reading: a PUBLISH above the QoS this subscription allows
    (QoS 2 always, which paho would keep until the broker's PUBREL) fails the stream and
    closes the connection before paho takes it.

    While reading is paused the client still sends the broker PINGREQs, so the connection
    stays up however long demand takes; their answers wait behind the unread messages, so
    while messages keep arriving the client takes them as the sign of a live broker
    instead. A broker that stops answering is noticed by paho's keepalive check once
    there is nothing left to read (within two ``keepalive``), and, while reading is
    paused, only when TCP reports the connection broken (a PINGREQ cannot be written).

    **Acknowledgement.** ``acknowledge="on_next"``: a QoS 1 message is acknowledged
    (PUBACK) as soon as ``on_next`` returns. ``"on_durable"``: only when
    :meth:`on_durable` says the first ``count`` elements signalled to the latest
    subscription are durable; that is the acknowledging-publisher protocol of the
    ``reactive`` Spark source (see ``pyspark_reactive.source.durability``). Either way the
    acknowledgements go out in the order the messages arrived, as MQTT requires, and a
    message never acknowledged is redelivered by a persistent session (``client_id``,
    ``clean_start=False``, ``session_expiry`` > 0) when it reconnects: nothing is lost;
    what was signalled and not yet acknowledged when a process died comes again.

    Parameters
    ----------
    host : str
    topic : str
        A topic filter: ``+`` and ``#`` wildcards and ``$share/<group>/...`` are accepted.
    port : int
        Default 1883.
    qos : int
        0 (at most once) or 1 (at least once; acknowledged as above). QoS 2 is refused:
        paho holds a QoS 2 message in memory between PUBREC and PUBREL, so a crash there
        loses it, which defeats its purpose. A broker that sends a PUBLISH above the QoS
        granted is cut off (see Notes).
    client_id : str
        Empty (default): the broker assigns one and the session cannot be resumed.
    clean_start : bool, optional
        Default: True without a ``client_id``, False with one (resume the session). A
        resumed session keeps the subscriptions its earlier connections made: another
        ``topic`` with the same ``client_id`` is added to them, and the old topic's
        messages keep coming. When the topic changes, use a new ``client_id`` (or
        ``clean_start=True``, which drops every message the session had queued).
    session_expiry : int, optional
        Seconds the broker keeps the session after a disconnect. Default: 0 without a
        ``client_id``, 86400 (a day) with one. ``0xFFFFFFFF`` never expires.
    username, password : str, optional
        A ``password`` needs a ``username``.
    tls : bool or ssl.SSLContext
        True: TLS with the system's certificate authorities and host name checking;
        an ``ssl.SSLContext``: TLS with that context. Default False (plain TCP).
    receive_maximum : int
        1 to 65535, default 100: the broker's window of unacknowledged QoS 1 messages
        (the MQTT 5 Receive Maximum).
    max_buffered : int, optional
        The most messages read and held beyond demand (at least 1); default
        ``receive_maximum``.
    max_message_bytes : int
        The largest MQTT packet accepted, sent as the MQTT 5 Maximum Packet Size: a
        message's payload plus its topic and a few bytes of header. Default 1048576
        (1 MiB); 512 to 268435460 (MQTT's own limit). The broker discards larger
        messages for this client without a word (see **Bytes**).
    max_buffered_bytes : int, optional
        The most bytes held for messages read beyond demand before reading pauses (at
        least 1): each message's topic and payload as Python holds them, and
        :data:`MESSAGE_OVERHEAD_BYTES` (256) for the rest of its record. Default
        ``None``: only ``max_buffered`` bounds them (up to ``max_buffered`` x
        (``max_message_bytes`` + 256), and up to four times the topic's bytes for a topic
        Python holds as four bytes a character).
    keepalive : int
        Seconds, default 60.
    connect_timeout : float
        Seconds to wait for the TCP connection and for the CONNACK, default 10.
    max_messages : int, optional
        Complete after this many elements (taking no more from the broker; messages
        ``decode`` left out do not count).
    acknowledge : "on_next" or "on_durable"
    decode : callable, optional
        Turns each :class:`MqttMessage` into the element signalled. If it raises, the
        stream fails with that error (wrapped in ``ValueError`` naming the topic), and
        the message is not acknowledged; if it raises :class:`SkipMessage`, the message
        is left out and acknowledged instead. It must not return None (§2.13).
    protocol : "5" or "3.1.1"
        The MQTT version, default ``"5"``. ``"3.1.1"`` reads brokers without MQTT 5
        (RabbitMQ's MQTT plugin before 3.13, ActiveMQ Classic). It has no Receive
        Maximum: the broker's own window of unacknowledged QoS 1 messages applies
        (RabbitMQ's ``mqtt.prefetch``, 10 by default), and the read pause
        (``max_buffered``, ``max_buffered_bytes``) bounds this client's memory as with
        MQTT 5. It has no Maximum Packet Size: the broker sends messages of any size, and
        one over ``max_message_bytes`` fails the stream (the connection is closed once
        the packet's length is read, before its body is), where an MQTT 5 broker would
        discard it. It has no session expiry (``session_expiry`` must be None: the broker
        keeps a session that is not clean by its own settings), no retain handling (a
        resumed session gets retained messages again) and no reason codes beyond the
        CONNACK's return codes.
    linger : float
        With ``acknowledge="on_durable"``: seconds the connection stays open after cancel
        or completion while signalled messages wait for ``on_durable`` (default 10; the
        reactive source makes its last call within a second or two as it stops).

    Raises
    ------
    ValueError
        For a parameter that is not accepted (the message names it).
    MissingExtraError
        When paho-mqtt is not installed (``pip install 'pyspark-reactive[mqtt]'``).

    Notes
    -----
    Errors reach the subscriber as ``on_error(MqttError)``: the broker refused the
    connection (bad credentials: reason code 134 or 135) or the subscription (SUBACK
    reason code >= 128), or the connection was lost; each message names ``host:port``
    and the reason. A broker that breaks the protocol in a way that would hold memory
    outside the budget fails the stream too, and the connection is closed: a packet over
    ``max_message_bytes``, a SUBACK granting more than ``qos``, or a PUBLISH above the
    QoS this subscription allows (the one granted; in a resumed session, whose earlier
    subscriptions it cannot know, at most 1). A subscription is not reconnected: the
    stream fails instead (§1.4: at once, without waiting for demand, so messages read but
    not yet signalled are not), and since what was not signalled was not acknowledged, a
    new subscription with the same persistent session gets it again and carries on where
    it stopped.

    Examples
    --------
    >>> from reactive_streams.adapters.mqtt import MqttPublisher
    >>> readings = MqttPublisher("127.0.0.1", "sensors/#", client_id="reader-1")
    >>> readings
    MqttPublisher('127.0.0.1:1883', 'sensors/#', qos=1, client_id='reader-1')
    """

    def __init__(self, host: str, topic: str, *, port: int = 1883, qos: int = 1,
                 client_id: str = "", clean_start: bool | None = None,
                 session_expiry: int | None = None, username: str | None = None,
                 password: str | None = None, tls: bool | ssl.SSLContext = False,
                 receive_maximum: int = 100, max_buffered: int | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 max_buffered_bytes: int | None = None, keepalive: int = 60,
                 connect_timeout: float = 10.0, max_messages: int | None = None,
                 acknowledge: Literal["on_next", "on_durable"] = "on_next",
                 decode: Callable[[MqttMessage], T] | None = None,
                 linger: float = 10.0, protocol: str = "5") -> None:
        require("paho.mqtt.client", "mqtt", "the mqtt publisher")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol {protocol!r}: '5' (MQTT 5) or '3.1.1' is accepted")
        if not isinstance(host, str) or not host:
            raise ValueError(f"host {host!r}: a host name or address is needed")
        self.topic = check_topic_filter(topic)
        check_int("port", port, 1, 65535)
        if qos not in (0, 1) or isinstance(qos, bool):
            raise ValueError(f"qos {qos!r}: 0 or 1 is accepted (QoS 2 is not: paho keeps a "
                             f"QoS 2 message in memory between PUBREC and PUBREL, so a crash "
                             f"there loses it)")
        if not isinstance(client_id, str):
            raise ValueError(f"client_id {client_id!r}: a string is needed")
        clean = (not client_id) if clean_start is None else clean_start
        if not isinstance(clean, bool):
            raise ValueError(f"clean_start {clean_start!r}: True or False is accepted")
        if protocol == "3.1.1" and not clean and not client_id:
            raise ValueError("clean_start: True without a client_id with protocol='3.1.1' "
                             "(an MQTT 3.1.1 broker keeps a session only for a client id)")
        if protocol == "3.1.1" and session_expiry is not None:
            raise ValueError("session_expiry: None with protocol='3.1.1' (MQTT 3.1.1 has no "
                             "session expiry: a broker keeps a session that is not clean "
                             "for as long as its own settings say)")
        expiry = (86400 if client_id else 0) if session_expiry is None else session_expiry
        check_int("session_expiry", expiry, 0, 0xFFFFFFFF)
        check_int("receive_maximum", receive_maximum, 1, 65535)
        buffered = receive_maximum if max_buffered is None else max_buffered
        check_int("max_buffered", buffered, 1, 2**63 - 1)
        check_int("max_message_bytes", max_message_bytes, _MIN_PACKET, _MQTT_MAX_PACKET)
        if max_buffered_bytes is not None:
            check_int("max_buffered_bytes", max_buffered_bytes, 1, 2**63 - 1)
        check_int("keepalive", keepalive, 0, 65535)
        if not (is_number(linger) and linger >= 0):
            raise ValueError(f"linger {linger!r}: a number of seconds >= 0 is needed")
        if not (is_number(connect_timeout) and connect_timeout > 0):
            raise ValueError(f"connect_timeout {connect_timeout!r}: a positive number of "
                             f"seconds is needed")
        if username is not None and not isinstance(username, str):
            raise ValueError(f"username {username!r}: a string or None is accepted")
        if password is not None and not isinstance(password, str):
            raise ValueError("password: a string or None is accepted, not "
                             f"{type(password).__name__}")
        if password is not None and username is None:
            # MQTT sends a password only with a user name: it would be dropped unseen.
            raise ValueError("password: accepted only with a username (MQTT sends no "
                             "password without one)")
        if decode is not None and not callable(decode):
            raise ValueError(f"decode {decode!r}: a callable taking an MqttMessage, or None, "
                             f"is accepted")
        if max_messages is not None:
            check_int("max_messages", max_messages, 0, 2**63 - 1)
        if acknowledge not in ("on_next", "on_durable"):
            raise ValueError(f"acknowledge {acknowledge!r}: 'on_next' or 'on_durable' is "
                             f"accepted")
        if not (isinstance(tls, (bool, ssl.SSLContext))):
            raise ValueError(f"tls {tls!r}: True, False or an ssl.SSLContext is accepted")
        self.host, self.port, self.qos = host, port, qos
        self.client_id, self.clean_start, self.session_expiry = client_id, clean, expiry
        self.username, self.password, self.tls = username, password, tls
        self.receive_maximum, self.keepalive = receive_maximum, keepalive
        self.max_buffered = buffered
        self.max_message_bytes = max_message_bytes
        self.max_buffered_bytes = max_buffered_bytes
        self.connect_timeout, self.max_messages = float(connect_timeout), max_messages
        self.acknowledge = acknowledge
        self.decode = decode
        self.linger = float(linger)
        self.protocol = protocol
        self._runner = ThreadRunner(max_workers=1, name="mqtt-signals")
        self._latest: _Session[T] | None = None

    @property
    def received(self) -> int:
        """Messages the latest subscription has read from the broker so far (signalled or
        waiting for demand): what backpressure bounds."""
        session = self._latest
        return 0 if session is None else session.received

    @property
    def skipped(self) -> int:
        """Messages of the latest subscription that ``decode`` left out (SkipMessage)."""
        session = self._latest
        return 0 if session is None else session.skipped

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        who = f", client_id={self.client_id!r}" if self.client_id else ""
        version = "" if self.protocol == "5" else f", protocol={self.protocol!r}"
        return (f"MqttPublisher({self.address!r}, {self.topic!r}, qos={self.qos}{who}"
                f"{version})")

    def wait_subscribed(self, timeout: float) -> bool:
        """Wait until the broker has acknowledged the latest subscription (SUBACK), or it
        failed; True if acknowledged. Messages published from then on reach it."""
        session = self._latest
        return session is not None and session.subscribed.wait(timeout) and (
            session.granted)

    def wait_closed(self, timeout: float) -> bool:
        """Wait until the latest subscription's connection is closed (after a cancel or
        the stream's end), its acknowledgements written; True if it is."""
        session = self._latest
        if session is None:
            return True
        session._thread.join(timeout)
        return not session._thread.is_alive()

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        session: _Session[T] = _Session(self)
        self._latest = session
        emitter: Emitter[T] = Emitter(Counting(subscriber, session), session,
                                      self._runner.acquire())
        session.start(emitter)

    def on_durable(self, count: int) -> None:
        """The first ``count`` elements signalled to the latest subscription are durable:
        acknowledge the QoS 1 messages among them (with ``acknowledge="on_durable"``;
        otherwise they were acknowledged at ``on_next`` already and this does nothing).

        Called by the ``reactive`` source from its log's thread; ``count`` only grows. After
        the subscription was cancelled or completed, the call waits (at most 2 s) until the
        acknowledgements are written and the client has disconnected, since the caller's
        process may end right after it.
        """
        session = self._latest
        if session is not None and self.acknowledge == "on_durable":
            session.durable(count)


class _Session(Source[T], Generic[T]):
    """One subscription's connection: the network loop's thread and the messages it read.

    The network thread is the only one that touches the paho client. Other threads hand
    it acknowledgements through ``_acks`` and wake it through a socket pair.
    """

    def __init__(self, publisher: MqttPublisher[T]) -> None:
        self.p = publisher
        self._lock = threading.Lock()
        self._buffer: deque[tuple[MqttMessage, int]] = deque()  # (message, mid) read
        # (qos, mid, skipped) pulled, not yet signalled (or, if skipped, acknowledged)
        self._taking: deque[tuple[int, int, bool]] = deque()
        self._awaiting: deque[tuple[int, int]] = deque()  # (sequence, mid) signalled, QoS 1
        self._acks: deque[int] = deque()  # mids for the network thread to acknowledge
        self._signalled = 0  # elements signalled (the sequence of on_durable)
        self._durable = 0  # the highest count on_durable was told
        self.received = 0  # messages read from the broker
        self._buffered_bytes = 0  # _held_bytes of the messages in _buffer
        self.skipped = 0  # messages decode left out
        self.subscribed = threading.Event()  # SUBACK arrived, or the stream failed
        self.granted = False  # the SUBACK granted the subscription
        # The highest QoS a PUBLISH may carry: what was asked for, then what the SUBACK
        # granted; 1 in a resumed session, whose earlier subscriptions may carry QoS 1
        # (see _refuse_qos_above_grant).
        self._qos_ceiling = publisher.qos if publisher.clean_start else 1
        self._taken = 0  # messages pulled (for max_messages)
        self._terminal: Terminal | None = None
        self._closing = False
        self._closed_at = 0.0
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._emitter: Emitter[T] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"mqtt {publisher.address} {publisher.topic}")
        self._released = False

    def start(self, emitter: Emitter[T]) -> None:
        self._emitter = emitter
        emitter.start()
        self._thread.start()

    # -- the emitter's side (its loop, one call at a time) ------------------------------

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        limit = self.p.max_messages
        elements: list[Any] = []
        wake = took = False
        while True:  # again while decode left messages out and more wait
            with self._lock:
                want = n - len(elements)
                if limit is not None:
                    want = min(want, limit - self._taken)
                wake = wake or not self._room()
                taken = [self._buffer.popleft() for _ in range(min(want, len(self._buffer)))]
                self._buffered_bytes -= sum(_held_bytes(message) for message, _ in taken)
            # Decoded outside the lock, so the network thread is not held up meanwhile.
            decoded, bad = self._decode(taken)
            with self._lock:
                if bad is not None:
                    # The message that failed and those after it stay unsignalled (and so
                    # unacknowledged); the stream fails after the ones before it.
                    back = taken[len(decoded):]
                    self._buffer.extendleft(reversed(back))
                    self._buffered_bytes += sum(_held_bytes(message) for message, _ in back)
                    taken = taken[:len(decoded)]
                    self._terminal = bad
                got = [element for element in decoded if element is not _SKIPPED]
                self._taking.extend((message.qos, mid, element is _SKIPPED)
                                    for (message, mid), element in zip(taken, decoded, strict=True))
                self._taken += len(got)
                self.skipped += len(decoded) - len(got)
                acked = self._settle_skipped()
                # A failure is signalled after the elements pulled with it, and without
                # waiting for demand (§1.4); what is still read and not signalled is not
                # acknowledged, so a persistent session redelivers it.
                terminal: Terminal | None = self._terminal
                if limit is not None and self._taken >= limit:
                    terminal = COMPLETE
            elements += got
            took = took or bool(taken)
            if acked:
                self._wake()
            if len(got) == len(taken) or terminal is not None:
                break
        if wake and took:
            self._wake()  # reading was paused for want of room
        return elements, terminal

    def _decode(self, taken: list[tuple[MqttMessage, int]]
                ) -> tuple[list[Any], BaseException | None]:
        """The elements (or _SKIPPED) of ``taken`` in order, up to the first that failed,
        and its error."""
        decode = self.p.decode
        if decode is None:
            return [message for message, _ in taken], None
        elements: list[Any] = []
        skipped = self.skipped  # only pull (the emitter's loop) changes it
        for message, _ in taken:
            try:
                element = decode(message)
            except SkipMessage as skip:
                skipped += 1
                log.warning("mqtt %s: a message of topic %r was left out (%d so far): %s",
                            self.p.address, message.topic, skipped, skip)
                elements.append(_SKIPPED)
                continue
            except Exception as exc:
                error = ValueError(f"mqtt {self.p.address}: decoding a message of topic "
                                   f"{message.topic!r} failed: {exc!r}")
                error.__cause__ = exc
                return elements, error
            if element is None:
                return elements, TypeError(
                    f"§2.13: decode returned None for a message of topic {message.topic!r} "
                    f"(payload {message.payload[:40]!r}); raise SkipMessage to leave a "
                    f"message out")
            elements.append(element)
        return elements, None

    def _acknowledge(self, mid: int, sequence: int) -> bool:
        """Under the lock: acknowledge a QoS 1 message once the first ``sequence``
        elements are (signalled, with on_next; durable, with on_durable); True if now."""
        # With on_durable: the source may have said this element is durable already (its
        # log's thread can run while on_next is still under way) and never repeats a
        # count, so a covered element is acknowledged now.
        if self.p.acknowledge == "on_next" or sequence <= self._durable:
            self._acks.append(mid)
            return True
        self._awaiting.append((sequence, mid))
        return False

    def _settle_skipped(self) -> bool:
        """Under the lock: the messages left out at the head of ``_taking`` (every element
        before them was signalled) are acknowledged in their turn; True if any now."""
        now = False
        while self._taking and self._taking[0][2]:
            qos, mid, _ = self._taking.popleft()
            if qos > 0:
                now = self._acknowledge(mid, self._signalled) or now
        return now

    def signalled(self) -> None:
        """The subscriber's on_next returned for the oldest element pulled."""
        with self._lock:
            qos, mid, _ = self._taking.popleft()
            self._signalled += 1
            wake = qos > 0 and self._acknowledge(mid, self._signalled)
            wake = self._settle_skipped() or wake
        if wake:
            self._wake()

    def close(self) -> None:
        # Cancel, completion or failure: stop reading, acknowledge what is due, disconnect.
        with self._lock:
            self._closing = True
            self._closed_at = time.monotonic()
            self._emitter = None
            released, self._released = self._released, True
        if not released:
            self.p._runner.release()
        self._wake()

    # -- on_durable ---------------------------------------------------------------------

    def durable(self, count: int) -> None:
        with self._lock:
            self._durable = max(self._durable, count)
            while self._awaiting and self._awaiting[0][0] <= count:
                self._acks.append(self._awaiting.popleft()[1])
            closing = self._closing
        self._wake()
        if closing and threading.current_thread() is not self._thread:
            # The caller may end its process next: let the acknowledgements go out.
            self._thread.join(2.0)

    # -- the network thread -------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already awake (the pair is full), or the thread has ended

    def _room(self) -> bool:
        # Under the lock. Read only while fewer than max_buffered messages wait, holding
        # less than max_buffered_bytes, and never more than max_messages in all.
        if self._closing:
            return False
        waiting = len(self._buffer)
        limit = self.p.max_messages
        if limit is not None and self._taken + waiting >= limit:
            return False
        budget = self.p.max_buffered_bytes
        if budget is not None and self._buffered_bytes >= budget:
            return False
        return waiting < self.p.max_buffered

    def _fail(self, error: BaseException) -> None:
        self.subscribed.set()
        emitter = None
        with self._lock:
            if self._terminal is None and not self._closing:
                self._terminal = error
                emitter = self._emitter
        if emitter is not None:
            emitter.signal()

    def _run(self) -> None:
        client = None
        try:
            client = self._connect()
            if client is not None:
                self._loop(client)
        except Exception as exc:  # a bug here must not leave the subscriber waiting
            log.exception("mqtt %s: the network loop failed", self.p.address)
            self._fail(MqttError(f"mqtt {self.p.address}: the network loop failed: {exc!r}"))
        finally:
            if client is not None:
                sock = client.socket()
                if sock is not None:
                    try:
                        sock.close()
                    except OSError:
                        pass
            self._wake_r.close()
            self._wake_w.close()

    def _connect(self) -> Any:
        mqtt = require("paho.mqtt.client", "mqtt", "the mqtt publisher")
        from paho.mqtt.enums import CallbackAPIVersion
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties
        from paho.mqtt.subscribeoptions import SubscribeOptions

        p = self.p
        v5 = p.protocol == "5"
        if v5:
            client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=p.client_id,
                                 protocol=mqtt.MQTTv5, manual_ack=True)
        else:
            # MQTT 3.1.1: the session's fate is the CONNECT's clean session flag.
            client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=p.client_id,
                                 protocol=mqtt.MQTTv311, clean_session=p.clean_start,
                                 manual_ack=True)
        client.connect_timeout = p.connect_timeout
        if p.username is not None:
            client.username_pw_set(p.username, p.password)
        if isinstance(p.tls, ssl.SSLContext):
            client.tls_set_context(p.tls)
        elif p.tls:
            client.tls_set()
        self._connack: Any = None

        def on_connect(client: Any, userdata: Any, flags: Any, reason: Any,
                       properties: Any) -> None:
            self._connack = reason
            if reason.is_failure:
                self._fail(MqttError(f"mqtt {p.address}: the broker refused the connection: "
                                     f"{reason} (reason code {reason.value})"))
                return
            if not v5:
                # MQTT 3.1.1 has no retain handling: a resumed session's subscription gets
                # the topic's retained messages again.
                client.subscribe(p.topic, qos=p.qos)
                return
            # Retain handling 1: retained messages only when the subscription is new, so
            # a resumed session does not get them again.
            client.subscribe(p.topic, options=SubscribeOptions(qos=p.qos, retainHandling=1))

        def on_subscribe(client: Any, userdata: Any, mid: int, reasons: Any,
                         properties: Any) -> None:
            self.granted = not any(reason.is_failure or reason.value > p.qos
                                   for reason in reasons)
            self.subscribed.set()
            for reason in reasons:
                if reason.is_failure:
                    self._fail(MqttError(
                        f"mqtt {p.address}: the broker refused the subscription to "
                        f"{p.topic!r}: {reason} (reason code {reason.value})"))
                elif reason.value > p.qos:
                    # MQTT 5 3.9.3: the granted QoS is at most the one asked for.
                    self._fail(MqttError(
                        f"mqtt {p.address}: the broker granted QoS {reason.value} for "
                        f"{p.topic!r}, more than the QoS {p.qos} asked for (qos); a "
                        f"protocol error, so the connection is closed"))
                    continue
                elif p.clean_start:
                    # A new session has this subscription only: nothing may come above it.
                    self._qos_ceiling = reason.value
                if reason.value < p.qos:
                    log.warning("mqtt %s: the broker granted QoS %d for %r, not %d: its "
                                "messages are not acknowledged nor redelivered", p.address,
                                reason.value, p.topic, p.qos)

        def on_message(client: Any, userdata: Any, message: Any) -> None:
            record = MqttMessage(message.topic, bytes(message.payload), message.qos,
                                 bool(message.retain), time.time())
            with self._lock:
                self._buffer.append((record, message.mid))
                self._buffered_bytes += _held_bytes(record)
                self.received += 1
                emitter = self._emitter
            if emitter is not None:
                emitter.signal()

        def on_disconnect(client: Any, userdata: Any, flags: Any, reason: Any,
                          properties: Any) -> None:
            if not self._closing:
                self._fail(MqttError(f"mqtt {p.address}: the connection was lost: {reason} "
                                     f"(reason code {getattr(reason, 'value', reason)})"))

        def on_socket_close(client: Any, userdata: Any, sock: Any) -> None:
            if self._closing:
                _close_gracefully(sock)

        client.on_connect = on_connect
        client.on_socket_close = on_socket_close
        client.on_subscribe = on_subscribe
        client.on_message = on_message
        client.on_disconnect = on_disconnect
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        properties.ReceiveMaximum = p.receive_maximum
        # MQTT 5 3.1.2.11.4: the broker must not send a larger packet (it discards a
        # larger message for this client); _bound_packets holds a broker that does.
        properties.MaximumPacketSize = p.max_message_bytes
        # With MQTT 3.1.1, which has no Maximum Packet Size, a larger message fails the
        # stream here rather than being discarded by the broker.
        self._bound_packets(client)
        self._refuse_qos_above_grant(client)
        if p.session_expiry:
            properties.SessionExpiryInterval = p.session_expiry
        try:
            if v5:
                client.connect(p.host, p.port, keepalive=p.keepalive,
                               clean_start=p.clean_start, properties=properties)
            else:
                # No Receive Maximum either: the broker's own window of unacknowledged
                # QoS 1 messages applies, and the read pause (max_buffered,
                # max_buffered_bytes) is what bounds this client's memory.
                client.connect(p.host, p.port, keepalive=p.keepalive)
        except (OSError, ValueError) as exc:
            self._fail(MqttError(f"mqtt {p.address}: could not connect: {exc}"))
            return None
        return client

    def _bound_packets(self, client: Any) -> None:
        """Refuse a packet longer than ``max_message_bytes`` before its body is read.

        paho reads a packet's length, then the whole body into memory (up to MQTT's
        256 MiB) with ``recv(what is left of the packet)``: the first body read asks for
        the whole remaining length, so one comparison per read catches a packet over
        the limit before any of it is held. (Reads of the fixed header ask for 1 byte.)
        """
        recv = client._sock_recv  # paho 2.x (pinned < 3)
        limit = self.p.max_message_bytes
        address = self.p.address

        def bounded_recv(size: int) -> Any:
            if size > limit:
                self._fail(MqttError(
                    f"mqtt {address}: the broker sent a packet of more than {limit} bytes, "
                    f"past the Maximum Packet Size this client sent (max_message_bytes); "
                    f"the connection is closed before reading it"))
                raise OSError(f"a packet of more than {limit} bytes")
            return recv(size)

        client._sock_recv = bounded_recv

    def _refuse_qos_above_grant(self, client: Any) -> None:
        """Close the connection on a PUBLISH above the QoS granted, before paho takes it.

        paho answers a QoS 2 PUBLISH with PUBREC and keeps the message in its own
        ``_in_messages`` until the broker's PUBREL, out of this session's sight (on_message
        comes only then), so a broker that never releases them could fill memory past
        ``max_buffered_bytes``: 65,535 packet ids of up to ``max_message_bytes`` each. This
        client subscribes with QoS 0 or 1 only, so such a PUBLISH breaks MQTT 5 3.8.4 (the
        QoS sent is at most the one granted) and the stream fails on it; the packet was
        read (it is within ``max_message_bytes``) and is dropped unanswered. A QoS 1
        PUBLISH on a QoS 0 subscription is refused the same way, but only in a new session
        (``clean_start``): a resumed one may hold subscriptions of earlier connections that
        carry QoS 1 (its queued messages and overlapping filters, MQTT 5 3.3.4).
        """
        from paho.mqtt.enums import MQTTErrorCode

        handle = client._handle_publish  # paho 2.x (pinned < 3)
        p = self.p

        def guarded_handle() -> Any:
            qos = (client._in_packet["command"] & 0x06) >> 1  # MQTT 5 3.3.1.2
            ceiling = self._qos_ceiling
            if qos <= ceiling:
                return handle()
            allowed = ("the option qos, or a lower QoS the broker granted" if p.clean_start
                       else "at most 1 in a resumed session, whose earlier subscriptions are "
                       "unknown; if another client subscribed with this client_id at QoS 2, "
                       "use a new client_id or clean_start=True")
            why = ("paho would hold it in memory, outside max_buffered_bytes, until the "
                   "broker released it" if qos == 2 else "a protocol error, MQTT 5 3.8.4")
            self._fail(MqttError(
                f"mqtt {p.address}: the broker sent a PUBLISH with QoS {qos}, above the "
                f"QoS {ceiling} this subscription allows ({allowed}); {why}: the "
                f"connection is closed and the message not taken"))
            return MQTTErrorCode.MQTT_ERR_PROTOCOL

        client._handle_publish = guarded_handle

    def _loop(self, client: Any) -> None:
        # selectors, not select.select: that refuses descriptors >= 1024, which a process
        # holding many files or sockets (a Spark driver) hands out.
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_r, selectors.EVENT_READ)
            self._turns(client, selector)

    def _turns(self, client: Any, selector: selectors.BaseSelector) -> None:
        from paho.mqtt.enums import MQTTErrorCode

        p = self.p
        deadline = time.monotonic() + p.connect_timeout
        last_ping = time.monotonic()
        watched: tuple[Any, int] = (None, 0)  # the socket registered, and for what
        while True:
            with self._lock:
                reading = self._room()
                closing = self._closing
                acks, self._acks = self._acks, deque()
                awaiting = bool(self._awaiting)
            for mid in acks:
                client.ack(mid, 1)
            if self._connack is None and time.monotonic() > deadline:
                self._fail(MqttError(f"mqtt {p.address}: no CONNACK within "
                                     f"{p.connect_timeout:g} s"))
                return
            if self._connack is not None and self._connack.is_failure:
                return  # on_connect failed the stream
            if closing and not (p.acknowledge == "on_durable" and awaiting
                                and time.monotonic() - self._closed_at < p.linger):
                self._disconnect(client)
                return
            sock = client.socket()
            if sock is None:
                self._fail(MqttError(f"mqtt {p.address}: the connection was lost"))
                return
            pending = reading and getattr(sock, "pending", lambda: 0)() > 0
            events = ((selectors.EVENT_READ if reading else 0)
                      | (selectors.EVENT_WRITE if client.want_write() else 0))
            watched = _watch(selector, watched, sock, events)
            # An error here is not "nothing to read": it fails the stream (in _run).
            ready = selector.select(0 if pending else _TICK)
            readable = False
            for key, mask in ready:
                if key.fileobj is self._wake_r:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                elif mask & selectors.EVENT_READ:
                    readable = True
            rc = MQTTErrorCode.MQTT_ERR_SUCCESS
            if reading and (pending or readable):
                before = self.received  # written on this thread only (on_message)
                rc = self._read_burst(client)
                if self.received != before:
                    _ping_answered(client)
            if rc == MQTTErrorCode.MQTT_ERR_SUCCESS and client.want_write():
                rc = client.loop_write()
            if rc == MQTTErrorCode.MQTT_ERR_SUCCESS:
                if reading:
                    # Only now: the socket was drained, so a PINGRESP was read if sent.
                    rc = client.loop_misc()
                    last_ping = time.monotonic()
                elif p.keepalive and time.monotonic() - last_ping >= p.keepalive / 2:
                    # Paused: paho's keepalive check would close the connection for
                    # want of reading, so ping the broker ourselves (paho has no public
                    # call for a PINGREQ), which keeps the broker from closing it. The
                    # PINGRESP waits behind what we do not read; see _ping_answered.
                    send_ping = getattr(client, "_send_pingreq", None)
                    rc = send_ping() if send_ping is not None else client.loop_misc()
                    last_ping = time.monotonic()
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                if not self._closing:
                    self._fail(MqttError(f"mqtt {p.address}: the connection was lost: "
                                         f"{_error_string(rc)}"))
                return

    def _read_burst(self, client: Any) -> Any:
        from paho.mqtt.enums import MQTTErrorCode

        sock = client.socket()
        for _ in range(_BURST):
            with self._lock:
                if not self._room():
                    break
                before = self.received
            rc = client.loop_read()
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                return rc
            with self._lock:
                progressed = self.received != before
            if not progressed and not (sock is not None
                                       and getattr(sock, "pending", lambda: 0)() > 0):
                break  # nothing more to read now, or a packet other than PUBLISH
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def _disconnect(self, client: Any) -> None:
        # What was read and not signalled is not acknowledged: a persistent session has
        # the broker send it again at the next connection.
        if self._connack is None or self._connack.is_failure or client.socket() is None:
            return
        client.disconnect()
        deadline = time.monotonic() + 2.0
        while client.socket() is not None and client.want_write():
            if time.monotonic() > deadline:
                break
            try:
                with selectors.DefaultSelector() as selector:
                    selector.register(client.socket(), selectors.EVENT_WRITE)
                    selector.select(0.1)
            except (OSError, ValueError):
                break  # the socket is gone: nothing more can be written
            client.loop_write()


def _ping_answered(client: Any) -> None:
    """Messages were just read: the broker is alive, so stop waiting for a PINGRESP.

    paho closes the connection when a PINGRESP has not come within ``keepalive`` of its
    PINGREQ. After reading was paused, the PINGRESP sits behind every message the broker
    wrote meanwhile, and a slow subscriber may take longer than ``keepalive`` to read up
    to it; messages arriving meanwhile prove the connection live, as a PINGRESP would.
    A broker that stops sending is still found: with nothing to read, paho pings again
    after ``keepalive`` and closes if no answer comes within another.
    """
    if getattr(client, "_ping_t", 0):
        client._ping_t = 0  # paho 2.x (pinned < 3): the time of the unanswered PINGREQ


def _watch(selector: selectors.BaseSelector, watched: tuple[Any, int], sock: Any,
           events: int) -> tuple[Any, int]:
    """Register ``sock`` with ``selector`` for ``events`` (none: unregister it); return
    what is registered now."""
    old_sock, old_events = watched
    if old_sock is sock and old_events == events:
        return watched
    if old_sock is not None and old_events:
        selector.unregister(old_sock)
    if events:
        selector.register(sock, events)
    return sock, events


def _close_gracefully(sock: Any, timeout: float = 2.0) -> None:
    """Before paho closes the socket after our DISCONNECT: end our side and read until the
    broker closes its own. Closing a socket with unread data (the messages reading was
    paused for) sends a TCP reset, and the broker may then discard the acknowledgements
    and the DISCONNECT it had not read yet."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(sock, selectors.EVENT_READ)
        except (OSError, ValueError):
            return
        while (left := deadline - time.monotonic()) > 0:
            try:
                if not selector.select(left) or not sock.recv(65536):
                    return
            except (BlockingIOError, ssl.SSLWantReadError):
                continue
            except (OSError, ValueError):
                return


def _error_string(rc: Any) -> str:
    mqtt = require("paho.mqtt.client", "mqtt", "the mqtt publisher")
    return f"{mqtt.error_string(rc)} (paho error {int(rc)})"
