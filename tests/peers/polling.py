"""Waiting for a state that signals nothing: the one polling wait of the tests, importable
from every test folder (``tests/peers`` is on the path)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds, failing after ``timeout`` seconds with ``what``.

    Only for states that no event or condition reports (another thread's stack, a
    service's event loop, say); everything else is waited for on its event.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # never set: a wait that cannot be cut short
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        pause.wait(0.002)
