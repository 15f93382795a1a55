"""The TCK as oracle for the Redis publisher: the built-in ``redis`` (entries decoded to
rows, acknowledged on durability, read from the factory's options as the source makes
them) and the adapter acknowledging after ``on_next``, against the real redis-server."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis_server
from redis_server import RedisServer

from pyspark_reactive.publishers.redis import redis_publisher
from pyspark_reactive.source.durability import FactoryOptions
from reactive_streams import Publisher
from reactive_streams.adapters.redis_streams import RedisStreamPublisher
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import LONG_MAX, PublisherVerification

# A stream holds this many entries at most for a verification: one that asks for more
# (an endless stream) gets a stream that is endless as far as it reads.
ENTRIES_AT_MOST = 100


def _environment() -> TestEnvironment:
    return TestEnvironment(default_timeout_millis=1000, default_no_signals_timeout_millis=100,
                           default_poll_timeout_millis=20)


def _stream(server: RedisServer, elements: int) -> str:
    stream = f"tck-{uuid.uuid4().hex[:10]}"
    redis_server.create_group(server, stream, "g", "0")
    redis_server.add_json(server, stream, min(elements, ENTRIES_AT_MOST))
    return stream


class TestBuiltinRedis(PublisherVerification[Any]):
    """``publisher=redis`` (message columns, acknowledged on durability) with
    ``maxMessages`` as the stream's length; the failed publisher's group is missing."""

    @pytest.fixture(autouse=True)
    def _server(self, server: RedisServer) -> None:
        self.server = server

    def create_test_environment(self) -> TestEnvironment:
        return _environment()

    def stochastic_runs(self, default: int) -> int:
        return min(default, 3)  # each run connects to the server

    def _options(self, stream: str) -> dict[str, str]:
        return {"url": self.server.url, "stream": stream, "group": "g",
                "passwordFile": str(self.server.password_file)}

    def create_publisher(self, elements: int) -> Publisher[Any]:
        options = self._options(_stream(self.server, elements))
        if elements != LONG_MAX:
            options["maxMessages"] = str(elements)
        publisher: Publisher[Any] = redis_publisher(FactoryOptions(options))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        publisher: Publisher[Any] = redis_publisher(FactoryOptions(
            self._options("tck-no-such-stream")))
        return publisher


class TestRedisStreamPublisher(PublisherVerification[Any]):
    """The adapter alone, acknowledging after ``on_next``, reading 7 entries a read at
    most; the failed publisher gives a wrong password."""

    @pytest.fixture(autouse=True)
    def _server(self, server: RedisServer) -> None:
        self.server = server

    def create_test_environment(self) -> TestEnvironment:
        return _environment()

    def stochastic_runs(self, default: int) -> int:
        return min(default, 3)

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return RedisStreamPublisher(
            _stream(self.server, elements), "g", "c", port=self.server.port,
            password=self.server.password, max_buffered=7,
            max_messages=None if elements == LONG_MAX else elements)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return RedisStreamPublisher("tck-failed", "g", "c", port=self.server.port,
                                    password="wrong")
