"""The Redis broker tests' fixtures: one redis-server (tests/peers/redis_server.py) for the
whole module group, on 127.0.0.1 on a free port, ended by its pid (tests/brokers/conftest.py
puts the connector's test helpers on the path)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from redis_server import RedisServer


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    with RedisServer(tls=True) as running:
        yield running


@pytest.fixture
def stream() -> str:
    """A stream key of the test's own."""
    return f"test-{uuid.uuid4().hex[:10]}"


# Spark's Python workers import this folder's test modules (a subscriber class defined in
# one travels to them by reference): the spark fixture keeps what PYTHONPATH holds.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), _HERE) if p)
