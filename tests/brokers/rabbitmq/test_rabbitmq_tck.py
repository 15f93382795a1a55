"""The TCK as oracle for RabbitMQPublisher and for what the built-in ``rabbitmq`` returns,
against the real node: each stream is a fresh queue holding the messages the verification
asks for, read with ``max_messages`` as the stream's length; the failed publisher names a
queue that does not exist."""

from __future__ import annotations

from typing import Any

import pytest
from rabbitmq_server import Node, publish_json

from pyspark_reactive.publishers.rabbitmq import rabbitmq_publisher
from pyspark_reactive.source.durability import FactoryOptions
from reactive_streams import Publisher
from reactive_streams.adapters.rabbitmq import RabbitMQPublisher
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import LONG_MAX, PublisherVerification

# A queue stands for a finite stream: an "endless" one holds this many, as far as a
# verification reads.
QUEUED_AT_MOST = 64
_COMPETING = ("§1.11 is optional: a queue's subscribers are competing consumers, each "
              "message goes to one of them (no multicast)")


class _Verification(PublisherVerification[Any]):
    node: Node

    @pytest.fixture(autouse=True)
    def _node(self, node: Node) -> None:
        self.node = node

    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=2000,
                               default_no_signals_timeout_millis=100,
                               default_poll_timeout_millis=20)

    def stochastic_runs(self, default: int) -> int:
        return min(default, 3)  # each run is a connection

    # Subscribers of one queue are competing consumers: each message goes to one of them,
    # so the optional multicast checks (§1.11) would only wait out their timeouts.
    def test_optional_spec111_registered_subscribers_must_receive_on_next_or_on_complete_signals(
            self) -> None:
        pytest.skip(_COMPETING)

    def test_optional_spec111_multicast_must_produce_the_same_elements_in_the_same_sequence_to_all_of_its_subscribers_when_requesting_one_by_one(  # noqa: E501
            self) -> None:
        pytest.skip(_COMPETING)

    def test_optional_spec111_multicast_must_produce_the_same_elements_in_the_same_sequence_to_all_of_its_subscribers_when_requesting_many_upfront(  # noqa: E501
            self) -> None:
        pytest.skip(_COMPETING)

    def test_optional_spec111_multicast_must_produce_the_same_elements_in_the_same_sequence_to_all_of_its_subscribers_when_requesting_many_upfront_and_complete_as_expected(  # noqa: E501
            self) -> None:
        pytest.skip(_COMPETING)

    def _queue(self, elements: int) -> str:
        queue = self.node.declare_queue()
        publish_json(self.node, queue, min(elements, QUEUED_AT_MOST))
        return queue


class TestRabbitMQPublisher(_Verification):
    def create_publisher(self, elements: int) -> Publisher[Any]:
        limit = None if elements == LONG_MAX else elements
        return RabbitMQPublisher(self._queue(elements), url=self.node.url, max_messages=limit)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return RabbitMQPublisher("tck-no-such-queue", url=self.node.url)


class TestBuiltinRabbitMQ(_Verification):
    """``publisher=rabbitmq`` (message columns, acknowledged on durability)."""

    def create_publisher(self, elements: int) -> Publisher[Any]:
        options = {"url": self.node.url, "queue": self._queue(elements),
                   "walLocation": "/unused"}
        if elements != LONG_MAX:
            options["maxMessages"] = str(elements)
        publisher: Publisher[Any] = rabbitmq_publisher(FactoryOptions(options))
        return publisher

    def create_failed_publisher(self) -> Publisher[Any] | None:
        publisher: Publisher[Any] = rabbitmq_publisher(FactoryOptions(
            {"url": self.node.url, "queue": "tck-no-such-queue", "walLocation": "/unused"}))
        return publisher
