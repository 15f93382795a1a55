"""RedeliveryFilter: on the driver's path, a redelivered message the write-ahead log holds
is dropped once, its demand asked for again, and acknowledged in its turn."""

from __future__ import annotations

from typing import Any

from pyspark_reactive.source.redeliveries import RedeliveryFilter
from reactive_streams import IterablePublisher, collect


class _Acknowledging(IterablePublisher[str]):
    """Letters whose identity is the letter; on_durable counts are recorded."""

    def __init__(self, letters: str) -> None:
        super().__init__(lambda: iter(letters))
        self.told: list[int] = []

    def identity(self, element: str) -> str:
        return element

    def on_durable(self, count: int) -> None:
        self.told.append(count)

    def position_key(self, element: str) -> str:
        return f"key-{element}"


def test_a_remembered_message_is_dropped_once_and_acknowledged_with_the_one_before() -> None:
    upstream = _Acknowledging("abxcx")
    filtered = RedeliveryFilter(upstream, {"x", "z"})
    assert collect(filtered, timeout=10) == ["a", "b", "c", "x"]  # the second x is new
    assert filtered.dropped == 1
    # The source counts the four it received; upstream signalled five.
    filtered.on_durable(2)
    filtered.on_durable(4)
    assert upstream.told == [3, 5]  # a, b and the dropped x; then c and the new x
    # What the filter does not change is the publisher's own.
    assert filtered.position_key("a") == "key-a" and filtered.identity("q") == "q"


def test_redeliveries_with_nothing_kept_waiting_are_acknowledged_at_once() -> None:
    # They are in the log already. Held until a kept element became durable, a broker
    # window full of them would never let another element come (a stall).
    upstream = _Acknowledging("xyab")
    filtered = RedeliveryFilter(upstream, {"x", "y"})
    assert collect(filtered, timeout=10) == ["a", "b"]
    assert upstream.told == [1, 2]
    filtered.on_durable(1)
    assert upstream.told == [1, 2, 3]


def test_a_redelivery_after_every_kept_element_was_durable_is_acknowledged_at_once() -> None:
    from reactive_streams import Subscriber, Subscription

    upstream = _Acknowledging("abx")

    import threading

    class Stepping(Subscriber[str]):
        subscription: Subscription
        changed = threading.Condition()
        received = 0

        def on_subscribe(self, subscription: Subscription) -> None:
            self.subscription = subscription

        def on_next(self, element: str) -> None:
            with self.changed:
                self.received += 1
                self.changed.notify_all()

        def wait_for(self, n: int) -> None:
            with self.changed:
                assert self.changed.wait_for(lambda: self.received >= n, 10)

        def on_error(self, error: BaseException) -> None:
            raise AssertionError(error)

        def on_complete(self) -> None:
            pass

    filtered = RedeliveryFilter(upstream, {"x"})
    stepping = Stepping()
    filtered.subscribe(stepping)
    stepping.subscription.request(2)   # a and b
    stepping.wait_for(2)
    filtered.on_durable(2)
    assert upstream.told == [2]
    told = threading.Event()
    upstream.on_durable = lambda count: (upstream.told.append(count), told.set())  # type: ignore[method-assign]
    stepping.subscription.request(1)   # x: a redelivery, with nothing kept waiting
    assert told.wait(10)
    assert upstream.told == [2, 3]


class _Marking(_Acknowledging):
    """Upper-case letters are the ones the broker sent before."""

    def identity(self, element: str) -> str:
        return element.lower()

    def redelivered(self, element: str) -> bool:
        return element.isupper()


def test_with_redelivered_only_a_message_sent_before_is_dropped() -> None:
    # A producer may reuse an id: a new message with a remembered id is kept.
    filtered = RedeliveryFilter(_Marking("xaX"), {"x"})
    assert collect(filtered, timeout=10) == ["x", "a"]


def test_demand_stays_what_the_subscriber_asked_for() -> None:
    from reactive_streams import Subscriber, Subscription

    received: list[Any] = []

    class Two(Subscriber[str]):
        def on_subscribe(self, subscription: Subscription) -> None:
            subscription.request(2)

        def on_next(self, element: str) -> None:
            received.append(element)

        def on_error(self, error: BaseException) -> None:
            raise AssertionError(error)

        def on_complete(self) -> None:
            pass

    RedeliveryFilter(_Acknowledging("xaybc"), {"x", "y"}).subscribe(Two())
    # Two requested: the drops were replaced, so exactly two arrive, and no third.
    assert received == ["a", "b"]
