"""SyncSubscriber, AsyncSubscriber and collect: batched demand, cancellation, errors."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from reactive_streams import (
    AsyncIterablePublisher,
    AsyncSubscriber,
    IterablePublisher,
    RangePublisher,
    Subscription,
    SyncSubscriber,
    collect,
)


class ManualSubscription(Subscription):
    """Records what the subscriber under test asks for."""

    def __init__(self) -> None:
        self.requests: list[int] = []
        self.cancelled = threading.Event()

    def request(self, n: int) -> None:
        self.requests.append(n)

    def cancel(self) -> None:
        self.cancelled.set()


class Keep(SyncSubscriber[Any]):
    def __init__(self, batch_size: int = 8, stop_at: Any = None, fail_at: Any = None) -> None:
        super().__init__(batch_size)
        self.seen: list[Any] = []
        self.stop_at = stop_at
        self.fail_at = fail_at
        self.finished_with: list[BaseException | None] = []

    def on_element(self, element: Any) -> bool:
        if element == self.fail_at:
            raise LookupError(f"cannot handle {element}")
        self.seen.append(element)
        return element != self.stop_at

    def on_finished(self, error: BaseException | None) -> None:
        self.finished_with.append(error)


class AsyncKeep(AsyncSubscriber[Any]):
    def __init__(self, batch_size: int = 8, gate: threading.Event | None = None) -> None:
        super().__init__(batch_size=batch_size)
        self.seen: list[Any] = []
        self.threads: set[int] = set()
        self.gate = gate

    def on_element(self, element: Any) -> None:
        self.threads.add(threading.get_ident())
        if self.gate is not None:
            assert self.gate.wait(10)
        self.seen.append(element)


@pytest.mark.parametrize("batch_size", [1, 2, 7, 8, 64])
def test_demand_is_requested_in_batches_and_refilled_at_half(batch_size: int) -> None:
    subscriber = Keep(batch_size=batch_size)
    subscription = ManualSubscription()
    subscriber.on_subscribe(subscription)
    assert subscription.requests == [batch_size]
    delivered = 0
    for i in range(10 * batch_size):
        assert delivered < sum(subscription.requests), "the test delivered beyond demand"
        subscriber.on_next(i)
        delivered += 1
        outstanding = sum(subscription.requests) - delivered
        assert outstanding == subscriber.outstanding
        # Refilled to a full batch as soon as half of it has arrived, never beyond.
        assert batch_size // 2 < outstanding <= batch_size, (
            f"{outstanding} outstanding for a batch of {batch_size}")
    assert subscriber.seen == list(range(10 * batch_size))
    assert len(subscription.requests) > 1  # refills happened


def test_returning_false_cancels_and_finishes() -> None:
    subscriber = Keep(stop_at=3)
    RangePublisher(0, 100).subscribe(subscriber)
    subscriber.join(timeout=5)
    assert subscriber.seen == [0, 1, 2, 3]
    assert subscriber.finished_with == [None]


def test_handler_error_cancels_and_is_raised_by_join() -> None:
    subscriber = Keep(fail_at=5)
    subscription = ManualSubscription()
    subscriber.on_subscribe(subscription)
    for i in range(8):
        subscriber.on_next(i)  # §2.13: never raises to the publisher
    assert subscription.cancelled.is_set()
    assert subscriber.seen == [0, 1, 2, 3, 4]
    with pytest.raises(LookupError, match="cannot handle 5"):
        subscriber.join(timeout=1)


def test_stream_error_is_raised_by_join() -> None:
    def failing() -> Any:
        yield 1
        raise ConnectionError("peer gone")

    subscriber = Keep()
    IterablePublisher(failing).subscribe(subscriber)
    with pytest.raises(ConnectionError):
        subscriber.join(timeout=5)
    assert subscriber.seen == [1]


def test_second_subscription_is_cancelled() -> None:
    subscriber = Keep()
    first, second = ManualSubscription(), ManualSubscription()
    subscriber.on_subscribe(first)
    subscriber.on_subscribe(second)  # §2.5
    assert second.cancelled.is_set() and not first.cancelled.is_set()
    assert second.requests == []


@pytest.mark.parametrize("kind", [Keep, AsyncKeep])
def test_none_arguments_raise_type_error(kind: type) -> None:
    subscriber = kind()
    with pytest.raises(TypeError, match="§2.13"):
        subscriber.on_subscribe(None)
    subscriber.on_subscribe(ManualSubscription())
    with pytest.raises(TypeError, match="§2.13"):
        subscriber.on_next(None)
    with pytest.raises(TypeError, match="§2.13"):
        subscriber.on_error(None)
    subscriber.on_complete()  # end it, so an AsyncSubscriber's thread stops
    subscriber.join(timeout=5)


def test_join_times_out_with_a_clear_error() -> None:
    subscriber = Keep()
    subscriber.on_subscribe(ManualSubscription())
    with pytest.raises(TimeoutError, match="did not end within 0.01"):
        subscriber.join(timeout=0.01)


def test_async_subscriber_handles_elements_on_its_own_thread() -> None:
    subscriber = AsyncKeep(batch_size=16)
    RangePublisher(0, 500).subscribe(subscriber)  # signals arrive on this thread
    subscriber.join(timeout=10)
    assert subscriber.seen == list(range(500))
    assert threading.get_ident() not in subscriber.threads
    assert len(subscriber.threads) == 1


def test_async_subscriber_never_blocks_the_publisher() -> None:
    gate = threading.Event()
    subscriber = AsyncKeep(batch_size=4, gate=gate)
    subscription = ManualSubscription()
    subscriber.on_subscribe(subscription)
    for i in range(4):  # the handler is stuck on the gate; on_next must still return
        subscriber.on_next(i)
    assert subscriber.queued >= 3
    gate.set()
    subscriber.on_complete()
    subscriber.join(timeout=10)
    assert subscriber.seen == [0, 1, 2, 3]


def test_async_subscriber_stops_its_thread_at_the_end() -> None:
    subscriber = AsyncKeep()
    RangePublisher(0, 10).subscribe(subscriber)
    subscriber.join(timeout=5)
    assert not subscriber._runner.running


def test_async_subscriber_cancel_from_outside_drops_queued_elements() -> None:
    gate = threading.Event()
    subscriber = AsyncKeep(batch_size=4, gate=gate)
    subscription = ManualSubscription()
    subscriber.on_subscribe(subscription)
    for i in range(3):
        subscriber.on_next(i)  # 0 is being handled (held at the gate); 1 and 2 queue
    subscriber.cancel()  # returns at once, although the handler is busy
    gate.set()
    subscriber.join(timeout=5)
    assert subscription.cancelled.wait(5)
    subscriber.on_next(3)  # §2.8: still accepted after cancel, and ignored
    assert subscriber.seen in ([], [0])  # never the queued 1 and 2


def test_async_subscriber_whose_handling_raises_cancels_ends_and_stops_its_thread(
        caplog: pytest.LogCaptureFixture) -> None:
    class RaisesOnRefill(ManualSubscription):
        def request(self, n: int) -> None:
            super().request(n)
            if len(self.requests) == 2:  # breaks §3.16: request must return normally
                raise RuntimeError("publisher bug in request()")

    subscriber = AsyncKeep(batch_size=2)
    subscription = RaisesOnRefill()
    with caplog.at_level(logging.ERROR, logger="reactive_streams"):
        subscriber.on_subscribe(subscription)
        subscriber.on_next(0)  # handled on the subscriber's thread: the refill raises
        assert subscriber.wait(5), "the subscriber never ended after its handling raised"
        with pytest.raises(RuntimeError, match="publisher bug in request"):
            subscriber.join(timeout=0)
        assert subscription.cancelled.is_set()
        subscriber.on_next(1)  # §2.8: late signals are still accepted, and dropped
        subscriber.on_complete()
    assert subscriber.seen == [0] and subscriber.queued == 0
    assert not subscriber._runner.running
    (handler,) = subscriber.threads
    thread = next((t for t in threading.enumerate() if t.ident == handler), None)
    if thread is not None:
        thread.join(5)
        assert not thread.is_alive(), "the subscriber's thread is still alive"
    assert any(r.exc_info is not None for r in caplog.records
               if r.name == "reactive_streams"), "the exception was not logged"
    assert "publisher bug in request()" in caplog.text  # with its traceback


def test_async_subscriber_cancelled_before_on_subscribe_cancels_the_subscription() -> None:
    subscriber = AsyncKeep()
    subscriber.cancel()
    publisher = IterablePublisher(lambda: range(10))
    publisher.subscribe(subscriber)
    subscriber.join(timeout=5)
    assert subscriber.seen == []
    # The publisher's subscription was cancelled, so it released its pool.
    deadline = threading.Event()
    for _ in range(200):
        if not publisher._runner.running:
            break
        deadline.wait(0.01)
    assert not publisher._runner.running


def test_sync_subscriber_cancel_from_another_thread_keeps_subscription_calls_serial() -> None:
    inside = threading.Event()
    release = threading.Event()

    class Blocking(Keep):
        def on_element(self, element: Any) -> bool:
            if element == 0:
                inside.set()
                assert release.wait(5)
            return super().on_element(element)

    subscriber = Blocking(batch_size=2)
    subscription = ManualSubscription()
    subscriber.on_subscribe(subscription)
    worker = threading.Thread(target=subscriber.on_next, args=(0,))
    worker.start()
    assert inside.wait(5)
    subscriber.cancel()  # must not touch the subscription while on_next is running
    assert not subscription.cancelled.is_set()
    release.set()
    worker.join(5)
    assert subscription.cancelled.is_set()  # done by the signal's thread on its way out
    assert subscriber.finished


def test_collect_returns_every_element_in_order() -> None:
    assert collect(IterablePublisher(lambda: iter(range(3000))), timeout=10) == \
        list(range(3000))


def test_collect_raises_the_stream_error() -> None:
    async def failing() -> AsyncIterator[int]:
        yield 1
        raise ArithmeticError("bad sum")

    with pytest.raises(ArithmeticError, match="bad sum"):
        collect(AsyncIterablePublisher(failing), timeout=5)


def test_collect_times_out_even_inside_a_synchronous_publisher() -> None:
    endless = RangePublisher(0, 10**15)
    with pytest.raises(TimeoutError, match="did not end within 0.2 s"):
        collect(endless, timeout=0.2)


def test_collect_times_out_on_a_silent_asynchronous_publisher() -> None:
    async def silent() -> AsyncIterator[int]:
        await asyncio.Event().wait()
        yield 0

    with pytest.raises(TimeoutError, match=r"\(0 elements received\)"):
        collect(AsyncIterablePublisher(silent), timeout=0.2)


@pytest.mark.parametrize("bad", [0, -3, 2.0, None])
def test_bad_batch_size_is_rejected(bad: Any) -> None:
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        Keep(batch_size=bad)
