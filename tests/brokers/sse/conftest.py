"""The SSE tests' server: sse-starlette under uvicorn (tests/peers/sse_server.py), one per
test session, on a thread of the test process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sse_server import SseServer


@pytest.fixture(scope="session")
def sse_server() -> Iterator[SseServer]:
    with SseServer() as server:
        yield server
