"""The source's subscriber on its own: the demand window, and the TCK's blackbox
verification (it is a Subscriber the project ships)."""

from __future__ import annotations

import inspect
import sys
import threading
import time
from typing import Any

import pytest
from spark_publishers import Recording, RecordingPublisher

from pyspark_reactive.demand_buffer import DemandBuffer, PublisherError
from reactive_streams import IterablePublisher, RangePublisher, Subscriber, Subscription
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


def test_limit_demand_caps_what_is_requested_from_then_on(tmp_path: Any) -> None:
    record = str(tmp_path / "requests.jsonl")
    buffer = DemandBuffer(100)
    buffer.limit_demand(250)  # an availableNow bound, set before subscribing
    buffer.start(RecordingPublisher(RangePublisher(0, 10_000), record))
    taken = []
    for _ in range(4):
        # A wait ends once what can still come has come: these take no 10 s.
        began = time.monotonic()
        taken += buffer.take(100, wait=10)
        assert time.monotonic() - began < 5
    assert taken == list(range(250))
    assert buffer.outstanding == 0 and buffer.buffered == 0
    buffer.close()
    assert Recording(record).requests == [100, 100, 50]
    with pytest.raises(ValueError, match="more must be an int >= 0"):
        buffer.limit_demand(-1)


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


class _Paused:
    """Holds the signalling thread at one point inside ``DemandBuffer.on_next`` (found by
    tracing that thread), so a test can run the source's shutdown exactly then."""

    def __init__(self, where: str) -> None:
        self.where = where  # "entry": on entering on_next; "append": just before the append
        self.reached = threading.Event()
        self.go = threading.Event()
        source, first = inspect.getsourcelines(DemandBuffer)
        self.append_line = first + next(
            i for i, line in enumerate(source) if "elements.append(element)" in line)

    def trace(self, frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != inspect.getsourcefile(DemandBuffer):
            return None
        if self.where == "entry" and event == "call" and frame.f_code.co_name == "on_next":
            self._hold()
        return self.trace_lines

    def trace_lines(self, frame: Any, event: str, arg: Any) -> Any:
        if (self.where == "append" and event == "line"
                and frame.f_lineno == self.append_line):
            self._hold()
        return self.trace_lines

    def _hold(self) -> None:
        if not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(10), "the test never released the signalling thread"


class _Silent(Subscription):
    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


@pytest.mark.parametrize("where", ["entry", "append"])
def test_an_on_next_under_way_at_drain_is_drained_or_refused_never_lost(where: str) -> None:
    # The source's shutdown: cancel, drain, close. An on_next already running when the
    # drain starts must end up in what drain() returns or be refused visibly.
    buffer = DemandBuffer(10, own_thread=False)
    buffer.on_subscribe(_Silent())
    buffer.on_next("before")
    paused = _Paused(where)

    def signal() -> None:
        sys.settrace(paused.trace)
        try:
            buffer.on_next("under way")
        finally:
            sys.settrace(None)

    signaller = threading.Thread(target=signal)
    signaller.start()
    assert paused.reached.wait(10)
    buffer.cancel()
    drained: list[Any] = []
    drainer = threading.Thread(target=lambda: drained.extend(buffer.drain()))
    drainer.start()
    # Paused before the append, the drain must wait for it (it has 1 s); at the entry
    # it may not, and the element is then refused.
    drainer.join(0.2)
    paused.go.set()
    signaller.join(10)
    drainer.join(10)
    buffer.on_next("after the drain")
    buffer.close()
    assert buffer.buffered == 0, "an element was kept after drain() where nobody reads it"
    if where == "append":  # under way before the seal: waited for, and drained
        assert (drained, buffer.refused) == (["before", "under way"], 1)
    else:  # not yet counted as signalling: the seal refuses it
        assert (drained, buffer.refused) == (["before"], 2)
