"""ConfirmingSubscriber, the common part of the broker subscribers: it requests only as the
broker confirms, keys every element, and stops, cancelling, when the broker refuses.

The broker here is a list behind a gate the test opens (the real brokers' subscribers are
tested against the brokers in tests/brokers)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from reactive_streams import IterablePublisher, Subscription
from reactive_streams.adapters._confirming import BrokerRefused, ConfirmingSubscriber


class _Gated(ConfirmingSubscriber[int]):
    """Confirms each call of _send only once the test lets it; refuses at ``refuse_at``."""

    def __init__(self, window: int, refuse_at: int | None = None) -> None:
        super().__init__(window=window, prefix="p-")
        self.sent: list[tuple[str, int]] = []
        self.gate = threading.Semaphore(0)
        self.refuse_at = refuse_at
        self.closed = threading.Event()
        self.calls = 0

    def _open(self) -> None:
        pass

    def _send(self, elements: Sequence[tuple[str, int]]) -> None:
        self.calls += 1
        assert self.gate.acquire(timeout=10), "the test never let this call confirm"
        if self.refuse_at is not None and self.refuse_at < len(self.sent) + len(elements):
            raise BrokerRefused(f"refused element {self.refuse_at}")
        self.sent.extend(elements)

    def _close(self) -> None:
        self.closed.set()


class _Recording(Subscription):
    """Counts demand and takes confirmations and fail_batch, as publish()'s does."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.requested = 0
        self.confirmed = 0
        self.deferred = False
        self.cancelled = threading.Event()
        self.failed: BaseException | None = None

    def request(self, n: int) -> None:
        with self.changed:
            self.requested += n
            self.changed.notify_all()

    def wait_requested(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.requested >= n, timeout=10), (
                f"demand stayed at {self.requested}, below {n}")

    def cancel(self) -> None:
        self.cancelled.set()

    def defer_confirmation(self) -> None:
        self.deferred = True

    def confirm(self, count: int) -> None:
        self.confirmed = count

    def fail_batch(self, error: BaseException) -> None:
        self.failed = error

    def batch_scope(self) -> str:
        return "q.7"


def test_never_more_than_the_window_is_requested_and_unconfirmed() -> None:
    sink = _Gated(window=4)
    subscription = _Recording()
    sink.on_subscribe(subscription)
    assert subscription.deferred
    subscription.wait_requested(4)
    for n in range(4):
        sink.on_next(n)
    # Nothing confirmed yet: no more demand than the window.
    assert subscription.requested == 4
    for n in range(4, 10):
        sink.gate.release()  # the broker confirms what was sent
        subscription.wait_requested(n + 1)
        # What was requested and not yet confirmed is the window, never more.
        assert subscription.requested - sink.confirmed <= 4
        sink.on_next(n)
    sink.on_complete()
    for _ in range(10):
        sink.gate.release()
    sink.wait_done(timeout=10)
    assert [e for _, e in sink.sent] == list(range(10))
    assert [k for k, _ in sink.sent][:2] == ["p-q.7.0", "p-q.7.1"]
    assert subscription.confirmed == 10
    assert sink.closed.is_set()


def test_a_refusal_cancels_fails_the_batch_and_is_raised_by_wait_done() -> None:
    sink = _Gated(window=2, refuse_at=3)
    subscription = _Recording()
    sink.on_subscribe(subscription)
    for n in range(4):
        subscription.wait_requested(n + 1)
        sink.on_next(n)
        sink.gate.release()
    assert subscription.cancelled.wait(10)
    with pytest.raises(BrokerRefused, match="refused element 3"):
        sink.wait_done(timeout=10)
    assert isinstance(subscription.failed, BrokerRefused)
    assert subscription.confirmed < 4  # the refused element was never confirmed
    assert sink.closed.is_set()


def test_keys_number_the_elements_of_each_scope_and_differ_between_subscriptions() -> None:
    first, second = _Gated(window=8), _Gated(window=8)
    for sink in (first, second):
        for _ in range(3):
            sink.gate.release()
        IterablePublisher(lambda: iter(range(3))).subscribe(sink)
        sink.wait_done(timeout=10)
    keys = [k for k, _ in first.sent]
    assert [k.rsplit(".", 1)[1] for k in keys] == ["0", "1", "2"]
    # Without a batch_scope, each subscription numbers in a scope of its own.
    assert not set(keys) & {k for k, _ in second.sent}


def test_the_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window 0"):
        _Gated(window=0)



def test_a_second_subscription_is_cancelled_even_after_the_first_ended() -> None:
    sink = _Gated(window=8)
    for _ in range(3):
        sink.gate.release()
    IterablePublisher(lambda: iter([1, 2, 3])).subscribe(sink)
    sink.wait_done(timeout=10)
    again = _Recording()
    sink.on_subscribe(again)
    # §2.5: it serves one stream; a second would start from the first's end, unsent.
    assert again.cancelled.is_set() and again.requested == 0
