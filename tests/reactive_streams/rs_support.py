"""Test helpers: a subscriber that records every signal and checks the spec as it goes, a
publisher wrapper that records every request and cancel, and small waiting helpers."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from polling import wait_until as wait_until  # the one polling wait, re-exported

from reactive_streams import Publisher, Subscriber, Subscription
from reactive_streams._prefetching import PrefetchingSubscriber
from reactive_streams.tck.subscriber_whitebox import SubscriberPuppet, WhiteboxSubscriberProbe

T = TypeVar("T")
S = TypeVar("S", bound=PrefetchingSubscriber[Any])


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


# -- a publisher that records what its subscriber asks of it -------------------------------


class Recording(Publisher[T]):
    """Wraps a publisher; records every request and cancel of its (one) subscription.

    ``max_in_flight`` is the largest value, at any request, of requested-and-not-delivered
    plus what the subscriber reports as ``buffered`` (an iterator's buffer): the elements
    ahead of the consumer. ``changed`` is notified at every request, cancel and element.
    """

    def __init__(self, inner: Publisher[T]) -> None:
        self.inner = inner
        self.lock = threading.RLock()  # a subscriber may request from inside on_next
        self.changed = threading.Condition(self.lock)
        self.requests: list[int] = []
        self.requested = 0
        self.delivered = 0
        self.max_in_flight = 0
        self.cancelled = threading.Event()
        self.subscribed = threading.Event()
        self.downstream: Subscriber[T] | None = None

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        self.downstream = subscriber
        self.inner.subscribe(_Tap(self, subscriber))

    def ahead(self) -> int:
        buffered = getattr(self.downstream, "buffered", 0)
        return self.requested - self.delivered + buffered

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate`` (of the counts) holds, for at most ``timeout`` seconds;
        returns whether it does. Checked at every request, cancel and element."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)


class _TapSubscription(Subscription):
    def __init__(self, record: Recording[Any], inner: Subscription) -> None:
        self.record = record
        self.inner = inner

    def request(self, n: int) -> None:
        record = self.record
        with record.lock:
            record.requests.append(n)
            record.requested += n
            record.max_in_flight = max(record.max_in_flight, record.ahead())
            record.changed.notify_all()
        self.inner.request(n)

    def cancel(self) -> None:
        self.record.cancelled.set()
        with self.record.changed:
            self.record.changed.notify_all()
        self.inner.cancel()


class _Tap(Subscriber[T]):
    def __init__(self, record: Recording[T], downstream: Subscriber[T]) -> None:
        self.record = record
        self.downstream = downstream

    def on_subscribe(self, subscription: Subscription) -> None:
        self.downstream.on_subscribe(_TapSubscription(self.record, subscription))
        self.record.subscribed.set()

    def on_next(self, element: T) -> None:
        # Counted and buffered under the lock, so a request sees both or neither.
        with self.record.lock:
            self.record.delivered += 1
            self.downstream.on_next(element)
            self.record.changed.notify_all()

    def on_error(self, error: BaseException) -> None:
        self.downstream.on_error(error)

    def on_complete(self) -> None:
        self.downstream.on_complete()


# -- waiting and processes ------------------------------------------------------------------


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that finds only ``src`` besides the venv."""
    src = Path(__file__).resolve().parents[2] / "src"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})


class PrefetchPuppet(SubscriberPuppet):
    """The TCK's puppet for a subscriber that iterates (``async for``, a plain ``for``):
    ``trigger_request`` does nothing, honestly: the subscriber requests ``prefetch`` at once
    and again as its consumer takes elements, which the consumer always does, so demand is
    outstanding until the subscription ends."""

    def __init__(self, subscriber: PrefetchingSubscriber[Any], cancelled: threading.Event) -> None:
        self.subscriber = subscriber
        self.cancelled = cancelled

    def trigger_request(self, elements: int) -> None:
        pass

    def signal_cancel(self) -> None:
        self.cancelled.set()
        self.subscriber.cancel()


def reporting(base: type[S], probe: WhiteboxSubscriberProbe[Any],
              prefetch: int) -> tuple[S, threading.Event]:
    """An instance of a subclass of ``base`` (an iterating subscriber) that hands the
    whitebox probe a :class:`PrefetchPuppet` at ``on_subscribe``, and the event set when
    the TCK cancels through the puppet."""
    cancelled = threading.Event()

    class Reporting(base):  # type: ignore[valid-type,misc]
        def on_subscribe(self, subscription: Subscription) -> None:
            super().on_subscribe(subscription)
            probe.register_on_subscribe(PrefetchPuppet(self, cancelled))

    return Reporting(prefetch), cancelled


class Idle(Subscription):
    """A subscription that takes requests and cancels and does nothing with them."""

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


class Silent(Publisher[int]):
    """Subscribes and never signals anything more: a stream that is waiting for data."""

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        subscriber.on_subscribe(Idle())
