"""reactive_streams.blocking: a plain ``for`` loop over any Publisher, with bounded demand
(a slow loop holds the publisher back), every way of leaving the loop cancelling, and the
TCK as oracle for its subscriber (consumed by a thread of its own)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import pytest
from rs_support import Idle, Silent, reporting

from reactive_streams import Publisher, RangePublisher, Subscriber, Subscription, to_iterable
from reactive_streams.blocking import BlockingSubscriber
from reactive_streams.signalling import COMPLETE, Emitter, Source, Terminal
from reactive_streams.tck.subscriber_blackbox import SubscriberBlackboxVerification
from reactive_streams.tck.subscriber_whitebox import (
    SubscriberWhiteboxVerification,
    WhiteboxSubscriberProbe,
)

WAIT = 10.0  # seconds for something that must happen


class Counting(Publisher[int]):
    """0, 1, 2, ... up to ``count`` (endless without), signalled on the requesting thread;
    records how many were pulled, and each subscription's end (``cancelled``)."""

    def __init__(self, count: int | None = None, error: BaseException | None = None) -> None:
        self.count, self.error = count, error
        self.pulled = 0
        self.cancelled = threading.Event()
        self.subscriptions = 0

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        self.subscriptions += 1
        publisher = self

        class Numbers(Source[int]):
            def __init__(self) -> None:
                self.next = 0

            def pull(self, n: int) -> tuple[Iterable[int], Terminal | None]:
                stop = self.next + n if publisher.count is None else min(
                    self.next + n, publisher.count)
                taken = range(self.next, stop)
                self.next = stop
                publisher.pulled += len(taken)
                ended = publisher.count is not None and stop == publisher.count
                return taken, ((publisher.error or COMPLETE) if ended else None)

            def close(self) -> None:
                if publisher.count is None or self.next < publisher.count:
                    publisher.cancelled.set()

        Emitter(subscriber, Numbers()).start()


def test_a_loop_takes_every_element_in_order_and_each_iter_subscribes_anew() -> None:
    publisher = Counting(count=1000)
    numbers = to_iterable(publisher, prefetch=16)
    assert list(numbers) == list(range(1000))
    assert [x for x in numbers if x % 100 == 0] == list(range(0, 1000, 100))
    assert publisher.subscriptions == 2


def test_the_publisher_never_runs_more_than_prefetch_ahead_of_a_slow_loop() -> None:
    publisher = Counting()  # endless
    ahead = []
    for taken, _ in enumerate(to_iterable(publisher, prefetch=10), start=1):
        ahead.append(publisher.pulled - taken)
        if taken == 500:
            break
    assert max(ahead) == 10  # received-and-not-taken: up to prefetch, never beyond
    assert min(ahead) >= 0
    assert publisher.pulled <= 500 + 10


def test_break_cancels_the_subscription_as_the_loop_ends() -> None:
    publisher = Counting()
    for x in to_iterable(publisher, prefetch=4):
        if x == 3:
            break
    # The loop's iterator is dropped as the loop ends (CPython): no gc.collect() needed.
    assert publisher.cancelled.is_set()


def test_close_and_a_with_block_cancel_at_once() -> None:
    publisher = Counting()
    with iter(to_iterable(publisher, prefetch=4)) as numbers:
        assert next(numbers) == 0
        assert numbers.buffered <= 3
    assert publisher.cancelled.is_set()
    assert list(numbers) == []  # a closed iteration is over
    again = Counting()
    it = iter(to_iterable(again))
    it.close()
    it.close()  # harmless if repeated
    assert again.cancelled.is_set()


def test_an_error_is_raised_in_the_loop_after_the_elements_before_it() -> None:
    failing = Counting(count=5, error=ConnectionError("the feed went away"))
    seen: list[int] = []
    with pytest.raises(ConnectionError, match="the feed went away"):
        for x in to_iterable(failing, prefetch=2):
            seen.append(x)
    assert seen == [0, 1, 2, 3, 4]


def test_a_slow_publisher_makes_next_wait_and_a_timeout_says_so() -> None:
    class Later(Publisher[int]):
        def subscribe(self, subscriber: Subscriber[int]) -> None:
            class Once(Subscription):
                def request(self, n: int) -> None:
                    threading.Timer(0.3, lambda: (subscriber.on_next(7),
                                                  subscriber.on_complete())).start()

                def cancel(self) -> None:
                    pass

            subscriber.on_subscribe(Once())

    numbers = iter(to_iterable(Later(), prefetch=1, timeout=0.05))
    with pytest.raises(TimeoutError, match="timeout=0.05"):
        next(numbers)
    waited = iter(to_iterable(Later(), prefetch=1, timeout=WAIT))
    assert list(waited) == [7]  # a timeout only bounds a wait: the element came


def test_close_from_another_thread_ends_a_waiting_loop() -> None:
    subscriber = BlockingSubscriber[int](prefetch=2)
    Silent().subscribe(subscriber)
    threading.Timer(0.2, subscriber.close).start()
    assert list(subscriber) == []


def test_an_element_beyond_demand_ends_the_loop_with_an_error() -> None:
    class Flood(Publisher[int]):
        def subscribe(self, subscriber: Subscriber[int]) -> None:
            subscriber.on_subscribe(Idle())  # demand is ignored: 3 come anyway
            for i in range(3):
                subscriber.on_next(i)

    with pytest.raises(RuntimeError, match=r"§1\.1.*prefetch=2"):
        list(to_iterable(Flood(), prefetch=2))


@pytest.mark.parametrize("bad", [0, -1, 1.5, "8", None])
def test_a_prefetch_that_is_not_a_positive_int_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="prefetch must be a positive int"):
        to_iterable(RangePublisher(0, 1), prefetch=bad)


def test_a_negative_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="timeout must be None"):
        to_iterable(RangePublisher(0, 1), timeout=-1)


# -- TCK: the subscriber, consumed by a thread of its own ------------------------------------


def consume(subscriber: BlockingSubscriber[Any], probe: WhiteboxSubscriberProbe[Any] | None,
            cancelled: threading.Event | None = None) -> None:
    def run() -> None:
        try:
            for element in subscriber:
                if probe is not None:
                    probe.register_on_next(element)
        except Exception as error:
            if probe is not None:
                probe.register_on_error(error)
            return
        if probe is not None and not (cancelled is not None and cancelled.is_set()):
            probe.register_on_complete()

    threading.Thread(target=run, name="tck-blocking-consumer", daemon=True).start()


class TestBlockingSubscriberBlackbox(SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        subscriber = BlockingSubscriber[int](prefetch=4)
        consume(subscriber, None)
        return subscriber

    def create_element(self, element: int) -> int:
        return element


class TestBlockingSubscriberPrefetchOneBlackbox(TestBlockingSubscriberBlackbox):
    def create_subscriber(self) -> Subscriber[int]:
        subscriber = BlockingSubscriber[int](prefetch=1)
        consume(subscriber, None)
        return subscriber


class TestBlockingSubscriberWhitebox(SubscriberWhiteboxVerification[int]):
    prefetch = 4

    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        subscriber, cancelled = reporting(BlockingSubscriber[int], probe, self.prefetch)
        consume(subscriber, probe, cancelled)
        return subscriber

    def create_element(self, element: int) -> int:
        return element


class TestBlockingSubscriberPrefetchOneWhitebox(TestBlockingSubscriberWhitebox):
    prefetch = 1
