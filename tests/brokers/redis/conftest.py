"""The Redis broker tests' fixtures: one redis-server (tests/peers/redis_server.py) for the
whole module group, on 127.0.0.1 on a free port, ended by its pid; the connector's test
helpers (``test_source``'s ``reactive``, ``streaming``'s ``ProgressWatch``) on the path."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest
from connector_tests import FOLDERS  # tests/peers: on the path through tests/conftest.py
from redis_server import RedisServer

for folder in reversed(FOLDERS):
    if folder not in sys.path:
        sys.path.insert(0, folder)


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
