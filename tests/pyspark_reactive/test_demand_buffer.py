"""The source's subscriber on its own: the demand window, and the TCK's blackbox
verification (it is a Subscriber the project ships)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from spark_publishers import Recording, RecordingPublisher

from pyspark_reactive.demand_buffer import DemandBuffer, PublisherError
from reactive_streams import IterablePublisher, RangePublisher, Subscriber
from reactive_streams.tck.subscriber_blackbox import SubscriberBlackboxVerification


class TestDemandBufferBlackbox(SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        return DemandBuffer(4)

    def trigger_request(self, subscriber: Subscriber[int]) -> None:
        # Taking a batch is what makes the buffer request more.
        assert isinstance(subscriber, DemandBuffer)
        subscriber.take(subscriber.capacity)

    def create_element(self, element: int) -> int:
        return element


class TestDemandBufferOnTheCallingThreadBlackbox(TestDemandBufferBlackbox):
    def create_subscriber(self) -> Subscriber[int]:
        return DemandBuffer(4, own_thread=False)


def test_each_take_requests_exactly_what_it_took(tmp_path: Any) -> None:
    record = str(tmp_path / "requests.jsonl")
    buffer = DemandBuffer(100)
    buffer.start(RecordingPublisher(RangePublisher(0, 250), record))
    assert buffer.take(100, wait=10) == list(range(100))
    assert buffer.take(30, wait=10) == list(range(100, 130))
    assert buffer.wait(100, timeout=10)
    assert buffer.buffered + buffer.outstanding == 100
    assert buffer.take(100) == list(range(130, 230))
    assert buffer.take(100, wait=10) == list(range(230, 250))
    assert buffer.completed
    buffer.close()
    assert Recording(record).requests == [100, 100, 30, 100]


def test_window_holds_while_an_async_publisher_fills_it() -> None:
    gate = threading.Semaphore(0)

    def elements() -> Any:
        for i in range(10_000):
            if i % 1000 == 0:
                gate.acquire()
            yield i

    buffer = DemandBuffer(700)
    buffer.start(IterablePublisher(elements))
    taken: list[int] = []
    for _ in range(20):
        gate.release()
        taken += buffer.take(700, wait=0.2)
        assert buffer.buffered + buffer.outstanding <= 700
    buffer.close()
    assert taken == list(range(len(taken)))
    assert buffer.max_outstanding <= 700


def test_more_elements_than_demand_ends_the_stream_with_an_error() -> None:
    buffer = DemandBuffer(2, own_thread=False)

    class Flood(RangePublisher):
        def subscribe(self, subscriber: Subscriber[int]) -> None:
            class Ignore:
                def request(self, n: int) -> None:
                    pass

                def cancel(self) -> None:
                    pass

            subscriber.on_subscribe(Ignore())  # type: ignore[arg-type]
            for i in range(3):
                subscriber.on_next(i)

    buffer.start(Flood(0, 0))
    assert buffer.take(5) == [0, 1]
    assert isinstance(buffer.error, PublisherError)
    assert "§1.1" in str(buffer.error)


def test_publisher_error_waits_until_the_elements_before_it_are_taken() -> None:
    def elements() -> Any:
        yield from range(3)
        raise OSError("disk gone")

    buffer = DemandBuffer(10)
    buffer.start(IterablePublisher(elements))
    assert buffer.wait(10, timeout=10)
    assert buffer.error is None
    assert buffer.take(10) == [0, 1, 2]
    assert isinstance(buffer.error, OSError)
    buffer.close()


@pytest.mark.parametrize("capacity", [0, -1, 2.5])
def test_capacity_must_be_a_positive_int(capacity: Any) -> None:
    with pytest.raises(ValueError, match="capacity must be an int >= 1"):
        DemandBuffer(capacity)
