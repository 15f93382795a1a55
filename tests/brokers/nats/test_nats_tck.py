"""The TCK as oracle for JetStreamPublisher and for what the built-in ``nats`` makes, against
a real nats-server: each publisher reads a durable consumer of its own (created by the
publisher) over a stream of 64 messages, with ``max_messages`` as the stream's length; an
endless stream is endless as far as a check reads. The failed publisher names a stream
the server does not have."""

from __future__ import annotations

import uuid
from typing import Any

import nats_server
import pytest

from pyspark_reactive.publishers.nats import nats_publisher
from pyspark_reactive.source.durability import FactoryOptions
from reactive_streams import Publisher
from reactive_streams.adapters.nats_jetstream import JetStreamPublisher
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import LONG_MAX, PublisherVerification

MESSAGES = 64


@pytest.fixture(scope="module")
def tck_stream(nats: nats_server.Server) -> str:
    name = f"TCK{uuid.uuid4().hex[:8]}"
    nats_server.create_stream(nats, name)
    nats_server.publish_json(nats, f"{name}.a", MESSAGES)
    return name


def _environment() -> TestEnvironment:
    return TestEnvironment(default_timeout_millis=3000, default_no_signals_timeout_millis=100,
                           default_poll_timeout_millis=20)


class TestJetStreamPublisher(PublisherVerification[Any]):
    """The adapter, acknowledging at on_next."""

    @pytest.fixture(autouse=True)
    def _server(self, nats: nats_server.Server, tck_stream: str) -> None:
        self.server, self.stream = nats, tck_stream

    def create_test_environment(self) -> TestEnvironment:
        return _environment()

    def stochastic_runs(self, default: int) -> int:
        return min(default, 3)  # each run is a connection

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return JetStreamPublisher(
            self.server.url, self.stream, f"tck-{uuid.uuid4().hex[:8]}", create_consumer=True,
            max_messages=None if elements == LONG_MAX else elements, fetch_timeout=1.0,
            **self.server.credentials)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return JetStreamPublisher(self.server.url, "NOSUCH", "c", **self.server.credentials)


class TestBuiltinNats(PublisherVerification[Any]):
    """``publisher=nats`` (message columns, acknowledged on durability), made from options
    as the source makes it."""

    @pytest.fixture(autouse=True)
    def _server(self, nats: nats_server.Server, tck_stream: str, tmp_path_factory: Any
                ) -> None:
        self.server, self.stream = nats, tck_stream
        self.password = tmp_path_factory.mktemp("nats") / "password"
        self.password.write_text(nats_server.PASSWORD)

    def create_test_environment(self) -> TestEnvironment:
        return _environment()

    def stochastic_runs(self, default: int) -> int:
        return min(default, 3)

    def _options(self, **given: str) -> FactoryOptions:
        return FactoryOptions({"url": self.server.url, "stream": self.stream,
                               "username": nats_server.USER,
                               "passwordFile": str(self.password), **given})

    def create_publisher(self, elements: int) -> Publisher[Any]:
        given = {"consumer": f"tck-{uuid.uuid4().hex[:8]}", "createConsumer": "true",
                 "fetchTimeoutMs": "1000"}
        if elements != LONG_MAX:
            given["maxMessages"] = str(elements)
        publisher: Publisher[Any] = nats_publisher(self._options(**given))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        publisher: Publisher[Any] = nats_publisher(self._options(consumer="nobody"))
        return publisher
