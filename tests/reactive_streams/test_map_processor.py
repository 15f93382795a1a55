"""MapProcessor: bounded buffer, multicast, error propagation (§4.2), upstream cancel."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from rs_support import Recorder

from reactive_streams import (
    IterablePublisher,
    MapProcessor,
    Publisher,
    RangePublisher,
    Subscriber,
    Subscription,
)


class Watched(Publisher[int]):
    """Wraps a publisher and records what its single subscriber requests and cancels."""

    def __init__(self, inner: Publisher[int]) -> None:
        self.inner = inner
        self.requested = 0
        self.cancelled = threading.Event()
        self.subscribed = False

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        watched = self

        class Spy(Subscriber[int]):
            def on_subscribe(self, subscription: Subscription) -> None:
                class Tap(Subscription):
                    def request(self, n: int) -> None:
                        watched.requested += n
                        subscription.request(n)

                    def cancel(self) -> None:
                        watched.cancelled.set()
                        subscription.cancel()

                watched.subscribed = True
                subscriber.on_subscribe(Tap())

            def on_next(self, element: int) -> None:
                subscriber.on_next(element)

            def on_error(self, error: BaseException) -> None:
                subscriber.on_error(error)

            def on_complete(self) -> None:
                subscriber.on_complete()

        self.inner.subscribe(Spy())


def test_upstream_demand_is_bounded_by_the_buffer() -> None:
    upstream = Watched(RangePublisher(0, 1000))
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x * 10, buffer_size=8)
    upstream.subscribe(processor)
    assert upstream.requested == 0  # nothing before the first subscriber

    class Slow(Recorder):
        worst = 0

        def handle(self, element: Any) -> None:
            # Everything upstream was asked for, beyond what reached us, sits in the
            # buffer or is in flight: it may never exceed the buffer size.
            self.worst = max(self.worst, upstream.requested - len(self.elements))

    slow = Slow()
    processor.subscribe(slow)
    for _ in range(1000):
        slow.request(1)
    slow.wait_done()
    assert slow.elements == [x * 10 for x in range(1000)]
    assert slow.worst <= 8, f"upstream ran {slow.worst} ahead of a buffer of 8"
    assert processor.buffered == 0
    slow.assert_clean()


def test_subscribers_present_from_the_start_get_the_same_elements() -> None:
    processor: MapProcessor[int, str] = MapProcessor(str, buffer_size=4)
    first, second = Recorder(), Recorder()
    processor.subscribe(first)
    processor.subscribe(second)
    IterablePublisher(lambda: range(20)).subscribe(processor)
    first.request(100)
    second.request(100)
    first.wait_done()
    second.wait_done()
    assert first.elements == second.elements == [str(x) for x in range(20)]
    assert first.completions == second.completions == 1


def test_a_late_subscriber_starts_at_the_next_element() -> None:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=4)
    early, late = Recorder(initial=3), Recorder()
    processor.subscribe(early)
    upstream = _ManualUpstream()
    processor.on_subscribe(upstream)
    for i in range(3):
        processor.on_next(i)
    processor.subscribe(late)
    late.request(10)
    early.request(10)
    for i in range(3, 6):
        processor.on_next(i)
    processor.on_complete()
    assert early.elements == [0, 1, 2, 3, 4, 5]
    assert late.elements == [3, 4, 5] and late.completions == 1


def test_the_slowest_subscriber_holds_back_upstream() -> None:
    upstream = Watched(RangePublisher(0, 100))
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=6)
    fast, slow = Recorder(initial=100), Recorder()
    processor.subscribe(fast)
    processor.subscribe(slow)
    upstream.subscribe(processor)
    assert len(fast.elements) <= 6 and upstream.requested <= 6
    slow.request(100)
    fast.wait_done()
    slow.wait_done()
    assert fast.elements == slow.elements == list(range(100))


def test_fn_error_reaches_every_subscriber_and_cancels_upstream() -> None:
    upstream = Watched(RangePublisher(0, 100))

    def fragile(x: int) -> int:
        if x == 3:
            raise ZeroDivisionError("x == 3")
        return x

    processor: MapProcessor[int, int] = MapProcessor(fragile, buffer_size=4)
    a, b = Recorder(initial=10), Recorder(initial=10)
    processor.subscribe(a)
    processor.subscribe(b)
    upstream.subscribe(processor)
    a.wait_done()
    b.wait_done()
    assert upstream.cancelled.is_set()
    for r in (a, b):
        assert r.elements == [0, 1, 2]
        assert [type(e) for e in r.errors] == [ZeroDivisionError]
        r.assert_clean()


def test_elements_arriving_after_an_fn_error_are_dropped() -> None:
    calls: list[int] = []

    def fragile(x: int) -> int:
        calls.append(x)
        if x == 1:
            raise ZeroDivisionError("x == 1")
        return x

    processor: MapProcessor[int, int] = MapProcessor(fragile, buffer_size=8)
    r = Recorder(initial=8)
    processor.subscribe(r)
    upstream = _ManualUpstream()
    processor.on_subscribe(upstream)
    for i in range(5):  # upstream may still deliver a few after its cancel (§3.12)
        processor.on_next(i)
    assert upstream.cancelled and calls == [0, 1]
    assert processor.upstream_demand >= 0
    assert r.elements == [0] and [type(e) for e in r.errors] == [ZeroDivisionError]


def test_fn_returning_none_is_an_error() -> None:
    processor: MapProcessor[int, Any] = MapProcessor(lambda x: None if x == 1 else x)
    r = Recorder(initial=5)
    processor.subscribe(r)
    RangePublisher(0, 5).subscribe(processor)
    r.wait_done()
    assert r.elements == [0] and "§2.13" in str(r.errors[0])


def test_upstream_error_is_propagated() -> None:
    def failing() -> Any:
        yield 1
        raise OSError("source broke")

    processor: MapProcessor[int, int] = MapProcessor(lambda x: x)
    r = Recorder(initial=5)
    processor.subscribe(r)
    IterablePublisher(failing).subscribe(processor)
    r.wait_done()
    assert r.elements == [1] and str(r.errors[0]) == "source broke"


def test_error_follows_only_the_elements_already_requested() -> None:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=10)
    r = Recorder(initial=1)
    processor.subscribe(r)
    subscription = _ManualUpstream()
    processor.on_subscribe(subscription)
    for i in range(5):
        processor.on_next(i)  # buffered for r, which asked for 1
    processor.on_error(EOFError("cut"))
    assert r.elements == [0] and [type(e) for e in r.errors] == [EOFError]


def _fail_during_first_on_next(failure: Callable[[], None]) -> Recorder:
    """A subscriber that, inside its first on_next, has ``failure`` run on another thread
    and waits for it to return, so the failure lands while requested elements are still
    buffered."""
    failed = threading.Event()

    def fail() -> None:
        failure()
        failed.set()

    class FailsOnFirst(Recorder):
        def handle(self, element: Any) -> None:
            if len(self.elements) == 1:
                threading.Thread(target=fail).start()
                assert failed.wait(10), "the failing signal did not return"

    return FailsOnFirst()


def test_upstream_error_follows_every_requested_element_beyond_a_chunk() -> None:
    # As the review found it: 3,000 elements buffered and requested (several of the
    # emitter's chunks), upstream fails during the first on_next. §4.2 propagates the
    # error, after everything that was requested.
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=5000)
    r = _fail_during_first_on_next(lambda: processor.on_error(EOFError("cut")))
    processor.subscribe(r)
    processor.on_subscribe(_ManualUpstream())
    for i in range(3000):
        processor.on_next(i)
    r.request(3000)
    r.wait_done()
    assert len(r.elements) == 3000, (
        f"requested 3000 buffered elements, received {len(r.elements)} before on_error")
    assert r.elements == list(range(3000)) and [type(e) for e in r.errors] == [EOFError]
    r.assert_clean()


def test_fn_error_follows_the_requested_elements_mapped_before_it() -> None:
    def fragile(x: int) -> int:
        if x == 3000:
            raise ZeroDivisionError("x == 3000")
        return x

    processor: MapProcessor[int, int] = MapProcessor(fragile, buffer_size=5000)
    r = _fail_during_first_on_next(lambda: processor.on_next(3000))  # fn raises
    processor.subscribe(r)
    upstream = _ManualUpstream()
    processor.on_subscribe(upstream)
    for i in range(3000):
        processor.on_next(i)
    r.request(2500)  # not all of the backlog: the error follows what was asked for
    r.wait_done()
    assert upstream.cancelled
    assert len(r.elements) == 2500, (
        f"requested 2500 mapped elements, received {len(r.elements)} before on_error")
    assert r.elements == list(range(2500))
    assert [type(e) for e in r.errors] == [ZeroDivisionError]
    r.assert_clean()


def test_upstream_raising_from_request_fails_the_processor_and_is_cancelled(
        caplog: pytest.LogCaptureFixture) -> None:
    class RaisingUpstream(_ManualUpstream):
        def request(self, n: int) -> None:
            raise RuntimeError("upstream bug in request()")  # breaks §3.16

    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=4)
    r = Recorder(initial=4)
    processor.subscribe(r)
    upstream = RaisingUpstream()
    with caplog.at_level(logging.ERROR, logger="reactive_streams"):
        processor.on_subscribe(upstream)  # §2.13: returns normally all the same
    r.wait_done()
    assert [str(e) for e in r.errors] == ["upstream bug in request()"]
    assert upstream.cancelled
    assert "upstream bug in request()" in caplog.text
    late = Recorder()
    processor.subscribe(late)  # the processor has ended, with that error
    assert [type(e) for e in late.errors] == [RuntimeError]


def test_completion_waits_for_the_backlog() -> None:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=10)
    r = Recorder(initial=1)
    processor.subscribe(r)
    processor.on_subscribe(_ManualUpstream())
    for i in range(3):
        processor.on_next(i)
    processor.on_complete()
    assert r.completions == 0 and processor.buffered == 2
    r.request(2)
    assert r.elements == [0, 1, 2] and r.completions == 1


def test_last_subscriber_cancelling_cancels_upstream() -> None:
    upstream = Watched(IterablePublisher(lambda: iter(range(10**9))))
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=4)
    a, b = Recorder(initial=2), Recorder(initial=2)
    processor.subscribe(a)
    processor.subscribe(b)
    upstream.subscribe(processor)
    a.wait_for_elements(2)
    b.wait_for_elements(2)
    a.cancel()
    assert not upstream.cancelled.is_set()
    b.cancel()
    assert upstream.cancelled.wait(5)
    late = Recorder()
    processor.subscribe(late)
    late.wait_done()
    assert "last subscriber" in str(late.errors[0])


def test_second_upstream_subscription_is_cancelled() -> None:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x)
    first, second = _ManualUpstream(), _ManualUpstream()
    processor.on_subscribe(first)
    processor.on_subscribe(second)  # §2.5
    assert second.cancelled and not first.cancelled


def test_subscriber_arriving_after_completion_is_completed() -> None:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x)
    RangePublisher(0, 0).subscribe(processor)
    r = Recorder()
    processor.subscribe(r)
    assert r.completions == 1


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"fn": 3}, TypeError, "fn must be callable"),
    ({"fn": str, "buffer_size": 0}, ValueError, "buffer_size must be an int >= 1"),
    ({"fn": str, "buffer_size": "8"}, ValueError, "buffer_size"),
])
def test_bad_arguments(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        MapProcessor(**kwargs)


class _ManualUpstream(Subscription):
    def __init__(self) -> None:
        self.requested = 0
        self.cancelled = False

    def request(self, n: int) -> None:
        self.requested += n

    def cancel(self) -> None:
        self.cancelled = True
