"""The NATS JetStream tests' fixtures: one nats-server with JetStream for the session
(tests/peers/nats_server.py), a fresh stream per test, and the Spark helpers of
tests/pyspark_reactive (the progress listener, query bookkeeping), which
tests/brokers/conftest.py puts on the path."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import nats_server
import pytest


@pytest.fixture(scope="session")
def nats() -> Iterator[nats_server.Server]:
    with nats_server.Server() as running:
        yield running


@pytest.fixture
def stream(nats: nats_server.Server) -> str:
    """A new stream on file storage, subjects ``<name>.>``."""
    name = f"S{uuid.uuid4().hex[:10]}"
    nats_server.create_stream(nats, name)
    return name


@pytest.fixture
def password_file(tmp_path: Path) -> str:
    path = tmp_path / "password"
    path.write_text(nats_server.PASSWORD + "\n")
    path.chmod(0o600)
    return str(path)

