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


def test_leading_redeliveries_are_acknowledged_with_the_first_kept_one() -> None:
    upstream = _Acknowledging("xyab")
    filtered = RedeliveryFilter(upstream, {"x", "y"})
    assert collect(filtered, timeout=10) == ["a", "b"]
    filtered.on_durable(1)
    assert upstream.told == [3]


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
