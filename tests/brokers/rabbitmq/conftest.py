"""The RabbitMQ broker tests' fixtures: one RabbitMQ node for the test process
(tests/peers/rabbitmq_server.py's shared node, with MQTT and AMQPS), on 127.0.0.1 on free
ports, ended by its pid (and its epmd's) after the session; a fresh queue per test; the
connector's test helpers (``test_source``'s ``reactive``, ``streaming``'s
``ProgressWatch``) on the path."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest
import rabbitmq_server
from connector_tests import FOLDERS  # tests/peers: on the path through tests/conftest.py

for folder in reversed(FOLDERS):
    if folder not in sys.path:
        sys.path.insert(0, folder)


@pytest.fixture(scope="session")
def node() -> Iterator[rabbitmq_server.Node]:
    began = time.monotonic()
    running = rabbitmq_server.shared_node()
    print(f"\nRabbitMQ node {running.name} listening after {running.started_in:.1f} s "
          f"(fixture {time.monotonic() - began:.1f} s)")
    try:
        yield running
    finally:
        rabbitmq_server.release_shared_node()


@pytest.fixture
def queue(node: rabbitmq_server.Node) -> str:
    """A durable queue of the test's own, empty."""
    return node.declare_queue()
