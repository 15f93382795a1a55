"""The TCK as oracle for what the built-in publishers' factories return (``rsocket``,
``mqtt``, ``websocket``, and ``range``'s shards): made from options as the source makes
them, against the real peers of tests/peers on 127.0.0.1. The adapters themselves are verified in
tests/reactive_streams; this checks the built-ins' own layer on top (decoding to rows,
acknowledging on durability) keeps every rule. No Spark session is needed."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import mosquitto
import pytest
from rsocket_peer import CountingServer
from websocket_server import WebSocketServer

from pyspark_reactive import Shard
from pyspark_reactive.publishers.mqtt import mqtt_publisher
from pyspark_reactive.publishers.range import range_publisher
from pyspark_reactive.publishers.rsocket import rsocket_publisher
from pyspark_reactive.publishers.websocket import websocket_publisher
from pyspark_reactive.source.durability import FactoryOptions
from reactive_streams import Publisher
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import LONG_MAX, PublisherVerification

# Retained messages stand for a finite MQTT stream: one per subtopic, so a verification
# that asks for more (an endless stream) gets an MQTT stream that is endless as far as it
# reads.
RETAINED_AT_MOST = 64


def _closed_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port: int = listener.getsockname()[1]
        return port


def _fast_environment(timeout_millis: int) -> TestEnvironment:
    return TestEnvironment(default_timeout_millis=timeout_millis,
                           default_no_signals_timeout_millis=100,
                           default_poll_timeout_millis=20)


class TestBuiltinRangeShard(PublisherVerification[Any]):
    """``publisher=range`` read in shards: shard 1 of 2 (odd integers), which can tell
    what it has not signalled (``pending()``); ``count`` twice the elements."""

    def create_publisher(self, elements: int) -> Publisher[Any]:
        given = {} if elements == LONG_MAX else {"count": str(2 * elements)}
        publisher: Publisher[Any] = range_publisher(FactoryOptions(given, shard=Shard(1, 2)))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return None  # a range cannot fail: the two failed-publisher checks skip


class TestBuiltinRSocket(PublisherVerification[Any]):
    """``publisher=rsocket`` with ``format=text``; the request's data is the count."""

    peer: CountingServer

    @classmethod
    def setup_class(cls) -> None:
        cls.peer = CountingServer()

    @classmethod
    def teardown_class(cls) -> None:
        cls.peer.close()

    def create_test_environment(self) -> TestEnvironment:
        return _fast_environment(3000)

    def stochastic_runs(self, default: int) -> int:
        return min(default, 5)  # each run is a connection

    def create_publisher(self, elements: int) -> Publisher[Any]:
        publisher: Publisher[Any] = rsocket_publisher(FactoryOptions(
            {"host": "127.0.0.1", "port": str(self.peer.port), "data": str(elements),
             "format": "text"}))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        publisher: Publisher[Any] = rsocket_publisher(FactoryOptions(
            {"host": "127.0.0.1", "port": str(_closed_port())}))
        return publisher


class TestBuiltinRSocketOverAUnixSocket(PublisherVerification[Any]):
    """``publisher=rsocket`` with ``socketPath`` (what ``expose()`` gives) against
    ``serve(path=...)``, with its token in a ``tokenFile``."""

    folder: str
    service: Any

    @classmethod
    def setup_class(cls) -> None:
        from reactive_streams import RangePublisher
        from reactive_streams.adapters.rsocket import serve

        cls.folder = tempfile.mkdtemp()
        cls.service = serve(lambda request: RangePublisher(0, min(int(request.data), 2**62)),
                            encode=lambda i: str(i).encode(),
                            path=os.path.join(cls.folder, "socket"))
        with open(os.path.join(cls.folder, "token"), "w", encoding="utf-8") as file:
            file.write(cls.service.token)

    @classmethod
    def teardown_class(cls) -> None:
        cls.service.close()
        shutil.rmtree(cls.folder, ignore_errors=True)

    def create_test_environment(self) -> TestEnvironment:
        return _fast_environment(3000)

    def stochastic_runs(self, default: int) -> int:
        return min(default, 5)  # each run is a connection

    def create_publisher(self, elements: int) -> Publisher[Any]:
        publisher: Publisher[Any] = rsocket_publisher(FactoryOptions(
            {"socketPath": self.service.path, "data": str(elements), "format": "text",
             "tokenFile": os.path.join(self.folder, "token")}))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        publisher: Publisher[Any] = rsocket_publisher(FactoryOptions(
            {"socketPath": os.path.join(self.folder, "nobody-listens")}))
        return publisher


@pytest.fixture(scope="module")
def websocket_server() -> Iterator[WebSocketServer]:
    with WebSocketServer() as running:
        yield running


class TestBuiltinWebSocket(PublisherVerification[Any]):
    """``publisher=websocket`` (``format=text``) on ``/count/<n>``: n messages, then a
    normal close; the failed publisher's handshake is refused."""

    @pytest.fixture(autouse=True)
    def _server(self, websocket_server: WebSocketServer) -> None:
        self.server = websocket_server

    def create_test_environment(self) -> TestEnvironment:
        return _fast_environment(5000)

    def stochastic_runs(self, default: int) -> int:
        return min(default, 5)

    def create_publisher(self, elements: int) -> Publisher[Any]:
        count = "inf" if elements == LONG_MAX else str(elements)
        publisher: Publisher[Any] = websocket_publisher(FactoryOptions(
            {"url": f"{self.server.url}/count/{count}"}))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        publisher: Publisher[Any] = websocket_publisher(FactoryOptions(
            {"url": f"{self.server.url}/reject"}))
        return publisher


@pytest.fixture(scope="module")
def broker() -> Iterator[mosquitto.Broker]:
    with mosquitto.Broker() as running:
        yield running


class TestBuiltinMqtt(PublisherVerification[Any]):
    """``publisher=mqtt`` (message columns, QoS 1 acknowledged on durability) over
    retained messages, with ``maxMessages`` as the stream's length; the failed publisher
    connects to the broker's listener that refuses everyone."""

    @pytest.fixture(autouse=True)
    def _broker(self, broker: mosquitto.Broker) -> None:
        self.broker = broker

    def create_test_environment(self) -> TestEnvironment:
        return _fast_environment(2000)

    def stochastic_runs(self, default: int) -> int:
        return min(default, 3)  # each run connects to the broker

    def create_publisher(self, elements: int) -> Publisher[Any]:
        topic = f"tck-builtin/{uuid.uuid4().hex[:8]}"
        for i in range(min(elements, RETAINED_AT_MOST)):
            mosquitto.publish(self.broker.host, self.broker.port, f"{topic}/{i}", [str(i)],
                              retain=True)
        options = {"host": self.broker.host, "port": str(self.broker.port),
                   "topic": f"{topic}/#"}
        if elements != LONG_MAX:
            options["maxMessages"] = str(elements)
        publisher: Publisher[Any] = mqtt_publisher(FactoryOptions(options))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        publisher: Publisher[Any] = mqtt_publisher(FactoryOptions(
            {"host": self.broker.host, "port": str(self.broker.closed_port),
             "topic": "tck-builtin/failed"}))
        return publisher
