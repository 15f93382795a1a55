"""Test helpers: a subscriber that records every signal and checks the spec as it goes."""

from __future__ import annotations

import threading
from typing import Any

from reactive_streams import Subscriber, Subscription


class Recorder(Subscriber[Any]):
    """Records signals; flags overlapping signals (§1.3), excess elements (§1.1) and
    anything after a terminal signal (§1.7). Requests are made with :meth:`request`,
    which counts them before asking, so the element count is always comparable."""

    def __init__(self, initial: int = 0) -> None:
        self.initial = initial
        self.subscription: Subscription | None = None
        self.elements: list[Any] = []
        self.requested = 0
        self.errors: list[BaseException] = []
        self.completions = 0
        self.violations: list[str] = []
        self.signal_threads: set[int] = set()
        self.done = threading.Event()
        self.subscribed = threading.Event()
        self._busy = threading.Lock()
        self._count_lock = threading.Lock()
        self._changed = threading.Condition()

    # -- driving ----------------------------------------------------------------------------

    def request(self, n: int) -> None:
        with self._count_lock:
            self.requested += n
        assert self.subscription is not None
        self.subscription.request(n)

    def cancel(self) -> None:
        assert self.subscription is not None
        self.subscription.cancel()

    # -- signals ------------------------------------------------------------------------------

    def _enter(self, signal: str) -> None:
        if not self._busy.acquire(blocking=False):
            self.violations.append(f"§1.3: {signal} overlapped another signal")
            self._busy.acquire()
        self.signal_threads.add(threading.get_ident())
        if self.done.is_set():
            self.violations.append(f"§1.7: {signal} after a terminal signal")

    def _leave(self) -> None:
        self._busy.release()
        with self._changed:
            self._changed.notify_all()

    def wait_for_elements(self, count: int, timeout: float = 10.0) -> None:
        """Wait until ``count`` elements (or a terminal signal) have arrived."""
        with self._changed:
            arrived = self._changed.wait_for(
                lambda: len(self.elements) >= count or self.done.is_set(), timeout)
        assert arrived and len(self.elements) >= count, (
            f"received {len(self.elements)} of {count} elements within {timeout} s "
            f"(errors={self.errors}, completions={self.completions})")

    def on_subscribe(self, subscription: Subscription) -> None:
        self._enter("on_subscribe")
        try:
            if self.subscription is not None:
                self.violations.append("§1.9: on_subscribe twice")
            self.subscription = subscription
            self.subscribed.set()
            if self.initial:
                self.request(self.initial)
        finally:
            self._leave()

    def on_next(self, element: Any) -> None:
        self._enter("on_next")
        try:
            self.elements.append(element)
            if len(self.elements) > self.requested:
                self.violations.append(
                    f"§1.1: received {len(self.elements)} on_next for a total demand of "
                    f"{self.requested}")
            self.handle(element)
        finally:
            self._leave()

    def handle(self, element: Any) -> None:
        """Hook for subclasses: runs inside on_next."""

    def on_error(self, error: BaseException) -> None:
        self._enter("on_error")
        try:
            self.errors.append(error)
            self.done.set()
        finally:
            self._leave()

    def on_complete(self) -> None:
        self._enter("on_complete")
        try:
            self.completions += 1
            self.done.set()
        finally:
            self._leave()

    # -- checks -----------------------------------------------------------------------------

    @property
    def terminals(self) -> int:
        return self.completions + len(self.errors)

    def wait_done(self, timeout: float = 10.0) -> None:
        assert self.done.wait(timeout), (
            f"no terminal signal within {timeout} s; received {len(self.elements)} elements "
            f"for a demand of {self.requested}")

    def assert_clean(self) -> None:
        assert not self.violations, self.violations
