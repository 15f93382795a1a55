"""MqttPublisher against a real mosquitto on 127.0.0.1: the TCK, the bound on what is read
beyond demand, acknowledgement and redelivery by a persistent session, and the errors.

The broker (tests/peers/mosquitto.py) runs for the module on free ports and is ended by
its pid. Each test uses topics and client ids of its own.
"""

from __future__ import annotations

import os
import re
import resource
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import mosquitto
import pytest
from rs_support import Recorder, wait_until

from reactive_streams import Publisher, collect
from reactive_streams.adapters.mqtt import (
    MESSAGE_OVERHEAD_BYTES,
    MqttError,
    MqttMessage,
    MqttPublisher,
    SkipMessage,
)
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import PublisherVerification

#: The TCK's finite publishers are retained messages, one per topic, published up front;
#: a longer stream (the TCK asks for INT_MAX elements once, and reads 11) gets this many
#: and is endless as far as the check can tell.
TCK_RETAINED_AT_MOST = 64


@pytest.fixture(scope="module")
def broker() -> Iterator[mosquitto.Broker]:
    with mosquitto.Broker() as running:
        yield running


def _topic(name: str) -> str:
    return f"{name}/{uuid.uuid4().hex[:8]}"


def _subscribed(publisher: MqttPublisher[Any], recorder: Recorder) -> None:
    publisher.subscribe(recorder)
    assert publisher.wait_subscribed(10), f"no SUBACK; errors {recorder.errors}"


def _received(publisher: MqttPublisher[Any], count: int) -> None:
    # No event reports a message read and held (it is not yet signalled): poll.
    wait_until(lambda: publisher.received >= count, 10, f"{count} messages read "
               f"(read {publisher.received})")


def _ended(publisher: MqttPublisher[Any], timeout: float = 5.0) -> None:
    """The latest subscription's network thread has ended (joined, not polled)."""
    session = publisher._latest
    assert session is not None
    session._thread.join(timeout)
    assert not session._thread.is_alive(), f"the network thread still runs after {timeout} s"


#: How long a test watches for messages that must not be read. No event can say "nothing
#: more will come": the socket holds unread messages (the broker sent them all before
#: publish() returned), and a network loop that read beyond its bound would read them
#: within a turn (milliseconds), so this is many turns.
NOTHING_MORE_S = 0.3


class TestMqttPublisherTck(PublisherVerification[MqttMessage]):
    """Finite streams are ``elements`` retained messages (one per subtopic) and
    ``max_messages=elements``; the failed publisher connects to the broker's listener
    that refuses everyone."""

    broker: mosquitto.Broker

    @pytest.fixture(autouse=True)
    def _broker(self, broker: mosquitto.Broker) -> None:
        self.broker = broker

    def create_test_environment(self) -> TestEnvironment:
        # Connecting and receiving the retained messages takes a few milliseconds.
        return TestEnvironment(default_timeout_millis=1000,
                               default_no_signals_timeout_millis=200,
                               default_poll_timeout_millis=50)

    def stochastic_runs(self, default: int) -> int:
        return min(default, 3)  # each run connects to the broker

    def create_publisher(self, elements: int) -> Publisher[MqttMessage]:
        topic = _topic("tck")
        if elements:
            for i in range(min(elements, TCK_RETAINED_AT_MOST)):
                mosquitto.publish(self.broker.host, self.broker.port, f"{topic}/{i}",
                                  [str(i)], retain=True)
        return MqttPublisher(self.broker.host, f"{topic}/#", port=self.broker.port,
                             max_messages=elements)

    def create_failed_publisher(self) -> Publisher[MqttMessage] | None:
        return MqttPublisher(self.broker.host, "tck/failed", port=self.broker.closed_port)


def test_reads_at_most_receive_maximum_beyond_demand_qos1(broker: mosquitto.Broker) -> None:
    topic = _topic("demand1")
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(
        broker.host, topic, port=broker.port, receive_maximum=10)
    recorder = Recorder(initial=5)
    _subscribed(publisher, recorder)
    mosquitto.publish(broker.host, broker.port, topic, [str(i) for i in range(200)])
    recorder.wait_for_elements(5)
    # The publisher fills its room of 10 beyond the demand of 5, then stops reading.
    _received(publisher, 15)
    time.sleep(NOTHING_MORE_S)  # watching for more than the bound: nothing may arrive
    assert publisher.received == 15, f"read {publisher.received} for a demand of 5 + 10"
    assert len(recorder.elements) == 5
    recorder.request(50)
    recorder.wait_for_elements(55)
    _received(publisher, 65)
    time.sleep(NOTHING_MORE_S)
    assert publisher.received == 65, f"read {publisher.received} for a demand of 55 + 10"
    recorder.request(1000)
    recorder.wait_for_elements(200)
    assert [m.payload for m in recorder.elements] == [str(i).encode() for i in range(200)]
    recorder.cancel()
    assert not recorder.violations and not recorder.errors


def test_qos0_meets_tcp_backpressure(broker: mosquitto.Broker) -> None:
    topic = _topic("demand0")
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(
        broker.host, topic, port=broker.port, qos=0, receive_maximum=10)
    recorder = Recorder(initial=5)
    _subscribed(publisher, recorder)
    mosquitto.publish(broker.host, broker.port, topic, [str(i) for i in range(2000)], qos=0)
    recorder.wait_for_elements(5)
    _received(publisher, 15)
    time.sleep(NOTHING_MORE_S)
    # The rest waits in the broker or the sockets' buffers, not in the publisher.
    assert publisher.received == 15
    recorder.request(10_000)
    recorder.wait_for_elements(100)
    recorder.cancel()
    assert all(m.qos == 0 for m in recorder.elements)
    assert not recorder.violations and not recorder.errors


def test_a_pause_longer_than_keepalive_keeps_the_connection(broker: mosquitto.Broker) -> None:
    # Reading is paused (a demand of 1, room for 2 more), so paho's own keepalive check
    # would close the connection after 2 s, and the broker after 1.5 s without a packet.
    topic = _topic("keepalive")
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(
        broker.host, topic, port=broker.port, receive_maximum=2, keepalive=1)
    recorder = Recorder(initial=1)
    _subscribed(publisher, recorder)
    mosquitto.publish(broker.host, broker.port, topic, [str(i) for i in range(20)])
    _received(publisher, 3)
    time.sleep(2.5)  # the pause under test: 2.5 keepalives with reading paused
    assert publisher.received == 3 and not recorder.errors, recorder.errors
    recorder.request(19)
    recorder.wait_for_elements(20)
    assert [m.payload for m in recorder.elements] == [str(i).encode() for i in range(20)]
    recorder.cancel()
    assert not recorder.errors and not recorder.violations


def test_tls_with_the_broker_s_certificate_authority(tmp_path: Any) -> None:
    with mosquitto.Broker(tmp_path, tls=True) as own:
        assert own.tls_port is not None
        context = ssl.create_default_context(cafile=str(own.ca_file))
        topic = _topic("tls")
        publisher: MqttPublisher[MqttMessage] = MqttPublisher(
            own.host, topic, port=own.tls_port, tls=context, receive_maximum=5)
        recorder = Recorder(initial=3)
        _subscribed(publisher, recorder)
        mosquitto.publish(own.host, own.port, topic, [b"%d" % i for i in range(300)])
        recorder.wait_for_elements(3)
        _received(publisher, 8)
        assert publisher.received == 8  # the bound holds over TLS too
        recorder.request(297)
        recorder.wait_for_elements(300)
        assert [m.payload for m in recorder.elements] == [b"%d" % i for i in range(300)]
        recorder.cancel()
        # Without the authority the broker's certificate is refused.
        with pytest.raises(MqttError, match="could not connect: .*CERTIFICATE_VERIFY_FAILED"):
            collect(MqttPublisher(own.host, topic, port=own.tls_port, tls=True), timeout=10)


def _session(broker: mosquitto.Broker, topic: str, client_id: str,
             **options: Any) -> MqttPublisher[MqttMessage]:
    return MqttPublisher(broker.host, topic, port=broker.port, client_id=client_id,
                         receive_maximum=5, **options)


def test_a_persistent_session_redelivers_what_was_not_signalled(
        broker: mosquitto.Broker) -> None:
    topic, client_id = _topic("ack"), f"ack-{uuid.uuid4().hex[:8]}"
    first = _session(broker, topic, client_id)
    recorder = Recorder(initial=3)
    _subscribed(first, recorder)
    mosquitto.publish(broker.host, broker.port, topic, [str(i) for i in range(10)])
    recorder.wait_for_elements(3)
    _received(first, 8)  # 3 signalled (acknowledged), 5 held
    recorder.cancel()
    _ended(first)

    again = collect(_session(broker, topic, client_id, max_messages=7), timeout=20)
    assert [m.payload for m in again] == [str(i).encode() for i in range(3, 10)]


def test_on_durable_acknowledges_exactly_the_first_count(broker: mosquitto.Broker) -> None:
    topic, client_id = _topic("durable"), f"durable-{uuid.uuid4().hex[:8]}"
    payloads = [str(i).encode() for i in range(10)]
    first = _session(broker, topic, client_id, acknowledge="on_durable", linger=0.2)
    recorder = Recorder(initial=4)
    _subscribed(first, recorder)
    mosquitto.publish(broker.host, broker.port, topic, payloads)
    recorder.wait_for_elements(4)
    first.on_durable(2)
    recorder.cancel()  # 3 and 4 were signalled, never durable: after linger, disconnect
    session = first._latest
    assert session is not None
    session._thread.join(5)
    assert not session._thread.is_alive()

    second = _session(broker, topic, client_id, acknowledge="on_durable")
    recorder = Recorder(initial=3)
    # No wait for the SUBACK: the resumed session's messages come first, and reading
    # pauses once 5 wait beyond the demand of 3, before the SUBACK is read.
    second.subscribe(recorder)
    recorder.wait_for_elements(3)
    assert [m.payload for m in recorder.elements] == payloads[2:5]
    recorder.cancel()
    session = second._latest
    assert session is not None
    wait_until(lambda: session._closing, 10, "the cancel reached the session")
    # As the reactive source does: the last on_durable comes after cancel; its
    # acknowledgements go out and the client disconnects before it returns.
    began = time.monotonic()
    second.on_durable(3)
    assert not session._thread.is_alive() and time.monotonic() - began < 2

    again = collect(_session(broker, topic, client_id, max_messages=5), timeout=20)
    assert [m.payload for m in again] == payloads[5:]


class _DurableInOnNext(Recorder):
    """Says each element durable from inside its on_next, as the reactive source's log
    thread may (it runs as soon as the element is in the source's buffer, before on_next
    returns) and, like it, never repeats a count."""

    def __init__(self, publisher: MqttPublisher[Any], initial: int) -> None:
        super().__init__(initial)
        self.publisher = publisher

    def handle(self, element: Any) -> None:
        self.publisher.on_durable(len(self.elements))


def test_on_durable_before_on_next_returns_still_acknowledges(
        broker: mosquitto.Broker) -> None:
    topic, client_id = _topic("early"), f"early-{uuid.uuid4().hex[:8]}"
    first = _session(broker, topic, client_id, acknowledge="on_durable", linger=30)
    recorder = _DurableInOnNext(first, initial=10)
    _subscribed(first, recorder)
    mosquitto.publish(broker.host, broker.port, topic, [str(i) for i in range(10)])
    recorder.wait_for_elements(10)
    recorder.cancel()
    # Every element was durable, so none waits: the client disconnects at once, not
    # after the linger of 30 s, and the session redelivers nothing.
    _ended(first, timeout=5)
    mosquitto.publish(broker.host, broker.port, topic, [b"marker"])
    again = collect(_session(broker, topic, client_id, max_messages=1), timeout=20)
    assert [m.payload for m in again] == [b"marker"]


def _skip_x(message: MqttMessage) -> MqttMessage:
    if message.payload.startswith(b"x"):
        raise SkipMessage(f"payload {message.payload!r}")
    return message


def test_skipped_messages_are_acknowledged_in_their_turn(
        broker: mosquitto.Broker, caplog: pytest.LogCaptureFixture) -> None:
    topic, client_id = _topic("skip"), f"skip-{uuid.uuid4().hex[:8]}"
    payloads = [b"x0", b"1", b"x2", b"x3", b"4", b"5", b"x6", b"7"]
    first = _session(broker, topic, client_id, acknowledge="on_durable", linger=0.2,
                     decode=_skip_x)
    recorder = Recorder(initial=10)
    _subscribed(first, recorder)
    with caplog.at_level("WARNING", logger="reactive_streams.adapters.mqtt"):
        mosquitto.publish(broker.host, broker.port, topic, payloads)
        recorder.wait_for_elements(4)
    assert [m.payload for m in recorder.elements] == [b"1", b"4", b"5", b"7"]
    assert first.skipped == 4
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records] == [
        f"a message of topic '{topic}' was left out ({i} so far): payload {p!r}"
        for i, p in enumerate([b"x0", b"x2", b"x3", b"x6"], 1)]
    # Durable: "1" and "4". Acknowledged with them, in order: x0 (before anything), x2 and
    # x3 (after "1"); x6 waits for "5", which is not durable.
    first.on_durable(2)
    recorder.cancel()
    _ended(first)
    again = collect(_session(broker, topic, client_id, max_messages=3), timeout=20)
    assert [m.payload for m in again] == [b"5", b"x6", b"7"]


class _Paced(Recorder):
    """Once ``pace`` is set, asks for one element more that many seconds after each."""

    pace: float | None = None

    def handle(self, element: Any) -> None:
        pace = self.pace
        if pace is not None:
            time.sleep(pace)  # the slow subscriber under test
            self.request(1)


def test_slow_reading_after_a_pause_keeps_the_connection(broker: mosquitto.Broker) -> None:
    # keepalive=1. A pause of reading longer than keepalive/2 sends the client's own
    # PINGREQ; the broker writes its PINGRESP behind the messages already on the way, and
    # reading those at 10 a second takes longer than a keepalive. paho closes a
    # connection whose PINGRESP is a keepalive late ("Keep alive timeout"), unless the
    # messages read meanwhile count as the broker's sign of life.
    topic = _topic("slow")
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(
        broker.host, topic, port=broker.port, keepalive=1, receive_maximum=100,
        max_buffered=2)
    recorder = _Paced(initial=2)
    _subscribed(publisher, recorder)
    mosquitto.publish(broker.host, broker.port, topic, [str(i) for i in range(100)])
    recorder.wait_for_elements(2)
    _received(publisher, 4)
    time.sleep(0.75)  # the pause under test: 0.75 keepalive with reading paused
    recorder.pace = 0.1
    recorder.request(1)
    recorder.wait_for_elements(2 + 25, timeout=20)  # 2.5 s of slow reading
    assert not recorder.errors, recorder.errors
    recorder.pace = None
    recorder.request(100)
    recorder.wait_for_elements(100)
    assert [m.payload for m in recorder.elements] == [str(i).encode() for i in range(100)]
    recorder.cancel()
    assert not recorder.errors and not recorder.violations


def test_descriptors_beyond_1024(broker: mosquitto.Broker) -> None:
    # select.select refuses descriptors >= 1024 (FD_SETSIZE), which a process holding
    # many files or sockets (a Spark driver) hands out. Hold every free descriptor below
    # 1024 while the publisher makes its sockets, so they get higher ones.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    topic = _topic("fds")
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(broker.host, topic,
                                                          port=broker.port)
    recorder = Recorder(initial=10)
    held: list[int] = []
    try:
        while not held or held[-1] < 1023:
            held.append(os.open(os.devnull, os.O_RDONLY))
        publisher.subscribe(recorder)
        assert publisher.wait_subscribed(10), f"no SUBACK; errors {recorder.errors}"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    session = publisher._latest
    assert session is not None and session._wake_r.fileno() >= 1024
    mosquitto.publish(broker.host, broker.port, topic, [str(i) for i in range(10)])
    recorder.wait_for_elements(10)
    recorder.cancel()
    assert not recorder.errors


def _read_packet(conn: socket.socket) -> tuple[int, bytes]:
    """One MQTT control packet: its first byte and its body."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            assert chunk, "the client closed the connection"
            data += chunk
        return data

    first = exactly(1)[0]
    length, shift = 0, 0
    while True:
        byte = exactly(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return first, exactly(length)


def test_connect_carries_receive_maximum_and_the_session() -> None:
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    # A listener that is not a broker: it reads the CONNECT and closes.
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        publisher: MqttPublisher[MqttMessage] = MqttPublisher(
            "127.0.0.1", "t", port=server.getsockname()[1], client_id="rm-check",
            receive_maximum=321, session_expiry=77, keepalive=9)
        recorder = Recorder()
        publisher.subscribe(recorder)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            first, body = _read_packet(conn)
    assert first >> 4 == 1, f"packet type {first >> 4}, not CONNECT"
    assert body[:7] == b"\x00\x04MQTT\x05", body[:7]  # MQTT 5
    flags, keepalive = body[7], int.from_bytes(body[8:10], "big")
    assert not flags & 0x02 and keepalive == 9  # clean start off: resume the session
    properties, _ = Properties(PacketTypes.CONNECT).unpack(body[10:])
    assert properties.ReceiveMaximum == 321
    assert properties.SessionExpiryInterval == 77
    # MQTT 5: the broker must not send this client a larger packet (finding 5 of issue 19).
    assert properties.MaximumPacketSize == 2**20
    recorder.wait_done()
    assert recorder.errors and "127.0.0.1" in str(recorder.errors[0])


def test_the_broker_discards_messages_over_max_message_bytes(
        broker: mosquitto.Broker) -> None:
    # Sent as the MQTT 5 Maximum Packet Size: the broker drops the larger message for
    # this client (and says nothing); without it, the 2,000 bytes would come first.
    topic = _topic("size")
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(
        broker.host, topic, port=broker.port, max_message_bytes=1024)
    recorder = Recorder(initial=10)
    _subscribed(publisher, recorder)
    mosquitto.publish(broker.host, broker.port, topic, [b"x" * 2000, b"small"])
    recorder.wait_for_elements(1)
    assert [m.payload for m in recorder.elements] == [b"small"]
    recorder.cancel()
    assert not recorder.errors and not recorder.violations


def test_reads_at_most_max_buffered_bytes_beyond_demand(broker: mosquitto.Broker) -> None:
    topic = _topic("bytes")
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(
        broker.host, topic, port=broker.port, receive_maximum=100,
        max_buffered_bytes=25_000)
    recorder = Recorder()
    _subscribed(publisher, recorder)
    mosquitto.publish(broker.host, broker.port, topic, [b"%05d" % i + b"y" * 9995
                                                        for i in range(10)])
    # 10,000 bytes each: the third crosses the budget, and reading pauses there.
    _received(publisher, 3)
    time.sleep(NOTHING_MORE_S)  # watching for more than the bound: nothing may arrive
    assert publisher.received == 3, f"read {publisher.received} x 10,000 bytes for 25,000"
    recorder.request(10)
    recorder.wait_for_elements(10)
    assert [m.payload[:5] for m in recorder.elements] == [b"%05d" % i for i in range(10)]
    recorder.cancel()
    assert not recorder.errors and not recorder.violations


def test_a_broker_sending_a_packet_over_the_limit_is_cut_off_before_its_body() -> None:
    # A broker that ignores the Maximum Packet Size: paho would read the whole announced
    # 200 MiB into memory; the client refuses the packet once its length is read.
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        publisher: MqttPublisher[MqttMessage] = MqttPublisher(
            "127.0.0.1", "t", port=server.getsockname()[1], max_message_bytes=4096)
        recorder = Recorder(initial=1)
        publisher.subscribe(recorder)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            assert _read_packet(conn)[0] >> 4 == 1  # CONNECT
            conn.sendall(b"\x20\x03\x00\x00\x00")  # CONNACK: accepted, no properties
            length, header = 200 << 20, bytearray(b"\x30")  # PUBLISH, QoS 0
            while True:
                length, digit = divmod(length, 128)
                header.append(digit | (0x80 if length else 0))
                if not length:
                    break
            conn.sendall(bytes(header) + b"\x00\x01t" + b"z" * 65536)
            recorder.wait_done()
    assert len(recorder.errors) == 1 and isinstance(recorder.errors[0], MqttError)
    assert "a packet of more than 4096 bytes" in str(recorder.errors[0])
    assert publisher.received == 0


def test_topic_bytes_and_a_per_message_overhead_count_against_max_buffered_bytes(
        broker: mosquitto.Broker) -> None:
    # Whoever may publish to the topic chooses the topic's length (up to 64 KiB) and may
    # send empty payloads (issue 27, finding 6): a budget of payload bytes alone would
    # hold none of them back, and reading would stop only at max_buffered (100 here).
    base = _topic("topics")
    long_topic = f"{base}/" + "a" * 4000
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(
        broker.host, f"{base}/#", port=broker.port, receive_maximum=100,
        max_buffered_bytes=10_000)
    recorder = Recorder()
    _subscribed(publisher, recorder)
    mosquitto.publish(broker.host, broker.port, long_topic, [b""] * 10)
    # Over 4,000 bytes each: the third crosses the budget, and reading pauses there.
    _received(publisher, 3)
    time.sleep(NOTHING_MORE_S)  # watching for more than the bound: nothing may arrive
    assert publisher.received == 3, f"read {publisher.received} x 4,000-byte topics for 10,000"
    recorder.request(10)
    recorder.wait_for_elements(10)
    assert all(m.topic == long_topic and m.payload == b"" for m in recorder.elements)

    # Short topics, empty payloads: each still holds its record, MESSAGE_OVERHEAD_BYTES.
    short = f"{base}/s"
    mosquitto.publish(broker.host, broker.port, short, [b""] * 100)
    _received(publisher, 11)
    time.sleep(NOTHING_MORE_S)
    held, most = publisher.received - 10, 10_000 // MESSAGE_OVERHEAD_BYTES + 1
    assert held <= most, f"read {held} empty messages for 10,000 bytes (at most {most})"
    recorder.request(100)
    recorder.wait_for_elements(110)
    recorder.cancel()
    assert not recorder.errors and not recorder.violations


def _packet(first: int, body: bytes) -> bytes:
    length, header = len(body), bytearray([first])
    while True:
        length, digit = divmod(length, 128)
        header.append(digit | (0x80 if length else 0))
        if not length:
            return bytes(header) + body


def _publish(qos: int, mid: int, payload: bytes = b"p") -> bytes:
    """A PUBLISH of ``qos`` to the topic ``t/x``, with no properties."""
    packet_id = mid.to_bytes(2, "big") if qos else b""
    return _packet(0x30 | qos << 1, b"\x00\x03t/x" + packet_id + b"\x00" + payload)


def _not_a_broker(conn: socket.socket, granted: int, sent: list[bytes],
                  until: int | None = None) -> list[int]:
    """Answer the client's CONNECT and SUBSCRIBE (granting ``granted``) as a broker would,
    send ``sent``, then return the types of the packets the client sends until it closes
    the connection (or sends a packet of type ``until``)."""
    conn.settimeout(10)
    assert _read_packet(conn)[0] >> 4 == 1  # CONNECT
    conn.sendall(b"\x20\x03\x00\x00\x00")  # CONNACK: accepted, no properties
    kind, body = _read_packet(conn)
    assert kind >> 4 == 8, f"packet type {kind >> 4}, not SUBSCRIBE"
    conn.sendall(_packet(0x90, body[:2] + b"\x00" + bytes([granted])))  # SUBACK
    seen: list[int] = []
    for packet in sent:
        try:
            conn.sendall(packet)
        except (ConnectionResetError, BrokenPipeError):
            # The client closed the connection while packets were still coming (a client
            # that refuses the first one may close before the rest is sent): what it sent
            # before is read below, as far as the reset left it.
            break
    while until not in seen:
        try:
            seen.append(_read_packet(conn)[0] >> 4)
        except (AssertionError, ConnectionResetError):
            break  # the client closed the connection
    return seen


@pytest.mark.parametrize("options, granted, qos, message", [
    # QoS 2: paho would answer PUBREC and keep each message until a PUBREL that a hostile
    # broker never sends, outside max_buffered_bytes (issue 27, finding 5).
    ({}, 1, 2, "QoS 2, above the QoS 1 this subscription allows (the option qos, or a "
               "lower QoS the broker granted); paho would hold it in memory, outside "
               "max_buffered_bytes"),
    ({"client_id": "resumed", "clean_start": False}, 1, 2,
     "QoS 2, above the QoS 1 this subscription allows (at most 1 in a resumed session"),
    ({}, 0, 1, "QoS 1, above the QoS 0 this subscription allows"),
    ({"qos": 0}, 0, 1, "QoS 1, above the QoS 0 this subscription allows"),
], ids=["qos2", "qos2-resumed-session", "qos1-granted-0", "qos1-asked-0"])
def test_a_publish_above_the_granted_qos_closes_the_connection(
        options: dict[str, Any], granted: int, qos: int, message: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        publisher: MqttPublisher[MqttMessage] = MqttPublisher(
            "127.0.0.1", "t/#", port=server.getsockname()[1], **options)
        recorder = Recorder(initial=10)
        publisher.subscribe(recorder)
        with server.accept()[0] as conn:
            answered = _not_a_broker(conn, granted, [_publish(qos, mid, b"z" * 1000)
                                                     for mid in range(1, 51)])
        recorder.wait_done()
    assert len(recorder.errors) == 1 and isinstance(recorder.errors[0], MqttError)
    assert message in str(recorder.errors[0]), recorder.errors[0]
    assert "the connection is closed and the message not taken" in str(recorder.errors[0])
    # Neither PUBREC (5) nor PUBACK (4): the message was not taken; nor any element.
    assert not {4, 5} & set(answered), answered
    assert publisher.received == 0 and not recorder.elements


def test_a_grant_above_the_qos_asked_for_fails_the_stream() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        port = server.getsockname()[1]
        publisher: MqttPublisher[MqttMessage] = MqttPublisher("127.0.0.1", "t/#", port=port,
                                                              qos=0)
        recorder = Recorder(initial=1)
        publisher.subscribe(recorder)
        with server.accept()[0] as conn:
            _not_a_broker(conn, 2, [])
        recorder.wait_done()
    assert [str(e) for e in recorder.errors] == [
        f"mqtt 127.0.0.1:{port}: the broker granted QoS 2 for 't/#', "
        f"more than the QoS 0 asked for (qos); a protocol error, so the connection is "
        f"closed"]
    assert not publisher.wait_subscribed(0)


def test_a_resumed_session_takes_qos_1_on_a_qos_0_subscription() -> None:
    # Its earlier connections may have subscribed with QoS 1 (MQTT 5 3.3.4): messages
    # queued for them are lawful, and are acknowledged like any other.
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        publisher: MqttPublisher[MqttMessage] = MqttPublisher(
            "127.0.0.1", "t/#", port=server.getsockname()[1], qos=0, client_id="resumed")
        recorder = Recorder(initial=1)
        publisher.subscribe(recorder)
        with server.accept()[0] as conn:
            answered = _not_a_broker(conn, 0, [_publish(1, 7)], until=4)
            recorder.wait_for_elements(1)
            recorder.cancel()
            assert _read_packet(conn)[0] >> 4 == 14  # DISCONNECT, so no error follows
        _ended(publisher)
    assert answered[-1] == 4  # PUBACK
    assert [(m.qos, m.payload) for m in recorder.elements] == [(1, b"p")]
    assert not recorder.errors and not recorder.violations


def test_retained_messages_and_the_message_record(broker: mosquitto.Broker) -> None:
    topic = _topic("retained")
    mosquitto.publish(broker.host, broker.port, f"{topic}/a", [b"\x00\xff"], retain=True)
    before = time.time()
    [message] = collect(MqttPublisher(broker.host, f"{topic}/+", port=broker.port,
                                      max_messages=1, decode=None), timeout=10)
    assert message.topic == f"{topic}/a" and message.payload == b"\x00\xff"
    assert message.retain and message.qos == 1
    assert before - 1 <= message.timestamp <= time.time()


def test_decode_and_its_failure(broker: mosquitto.Broker) -> None:
    topic = _topic("decode")
    mosquitto.publish(broker.host, broker.port, f"{topic}/1", [b"12"], retain=True)
    assert collect(MqttPublisher(broker.host, f"{topic}/#", port=broker.port,
                                 max_messages=1, decode=lambda m: int(m.payload)),
                   timeout=10) == [12]
    mosquitto.publish(broker.host, broker.port, f"{topic}/2", [b"x"], retain=True)
    with pytest.raises(ValueError, match=f"decoding a message of topic '{topic}/2'"):
        collect(MqttPublisher(broker.host, f"{topic}/2", port=broker.port,
                              decode=lambda m: int(m.payload)), timeout=10)


def test_errors_name_the_broker_and_the_reason(broker: mosquitto.Broker) -> None:
    with pytest.raises(MqttError, match=rf"127\.0\.0\.1:{broker.closed_port}: the broker "
                                        r"refused the connection: Not authorized \(reason "
                                        r"code 135\)"):
        collect(MqttPublisher(broker.host, "x", port=broker.closed_port), timeout=10)
    port = mosquitto.free_port()
    with pytest.raises(MqttError, match=rf"127\.0\.0\.1:{port}: could not connect"):
        collect(MqttPublisher(broker.host, "x", port=port), timeout=10)


def test_a_lost_connection_fails_the_stream(tmp_path: Any) -> None:
    own = mosquitto.Broker(tmp_path).start()
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(own.host, "lost", port=own.port)
    recorder = Recorder(initial=1)
    try:
        _subscribed(publisher, recorder)
    finally:
        own.stop()
    assert recorder.done.wait(10)
    [error] = recorder.errors
    assert isinstance(error, MqttError) and f"{own.host}:{own.port}" in str(error)


@pytest.mark.parametrize("options, message", [
    ({"topic": "a/#/b"}, "'#' must be the whole last level"),
    ({"topic": "a/b+"}, "'+' must be a whole level"),
    ({"topic": ""}, "a non-empty string"),
    ({"qos": 2}, "0 or 1 is accepted"),
    ({"receive_maximum": 0}, "receive_maximum 0: an integer from 1 to 65535"),
    ({"port": 70000}, "port 70000"),
    ({"acknowledge": "later"}, "'on_next' or 'on_durable'"),
    ({"tls": "yes"}, "True, False or an ssl.SSLContext"),
    ({"decode": "json"}, "decode 'json': a callable taking an MqttMessage"),
    ({"linger": True}, "linger True: a number of seconds"),
    ({"connect_timeout": True}, "connect_timeout True: a positive number of seconds"),
    ({"username": 42}, "username 42: a string or None"),
    ({"username": "u", "password": b"p"}, "password: a string or None is accepted, not bytes"),
    ({"password": "p"}, "password: accepted only with a username"),
])
def test_parameters_are_checked(options: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"topic": "t", **options}
    with pytest.raises(ValueError, match=re.escape(message)):
        MqttPublisher("127.0.0.1", arguments.pop("topic"), **arguments)


def test_subscribe_returns_before_connecting() -> None:
    # Nothing listens on this port; subscribe must still return at once.
    publisher: MqttPublisher[MqttMessage] = MqttPublisher(
        "127.0.0.1", "t", port=mosquitto.free_port())
    recorder = Recorder()
    before = set(threading.enumerate())
    began = time.monotonic()
    publisher.subscribe(recorder)
    assert time.monotonic() - began < 0.5
    assert recorder.done.wait(10) and recorder.errors
    # The publisher's own threads (the network loop, the signalling thread) end with it.
    wait_until(lambda: not set(threading.enumerate()) - before, 5,
               f"the publisher's threads end: "
               f"{[t.name for t in set(threading.enumerate()) - before]}")
