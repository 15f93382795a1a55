"""Every reference publisher (and the processor, seen as a publisher) against the rules
that matter most: demand (§1.1), order, one terminal signal (§1.7), bounded recursion
(§3.3), illegal requests (§3.9), null subscriber (§1.9) and release on cancel (§3.13)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rs_support import Recorder

from reactive_streams import (
    AsyncIterablePublisher,
    IterablePublisher,
    MapProcessor,
    Publisher,
    RangePublisher,
)


async def _count(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i
        if i % 64 == 0:
            await asyncio.sleep(0)  # really suspend now and then


def _mapped_range(n: int) -> Publisher[int]:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=16)
    RangePublisher(0, n).subscribe(processor)
    return processor


def _mapped_iterable(n: int) -> Publisher[int]:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=16)
    IterablePublisher(lambda: range(n)).subscribe(processor)
    return processor


_shared_pool = ThreadPoolExecutor(4, thread_name_prefix="test-borrowed")

#: Each builds a publisher of the elements 0 .. n-1.
PUBLISHERS: dict[str, Callable[[int], Publisher[Any]]] = {
    "range": lambda n: RangePublisher(0, n),
    "iterable": lambda n: IterablePublisher(lambda: range(n)),
    "iterable-borrowed-executor": lambda n: IterablePublisher(lambda: iter(range(n)),
                                                              executor=_shared_pool),
    "async-iterable": lambda n: AsyncIterablePublisher(lambda: _count(n)),
    "map-over-range": _mapped_range,
    "map-over-iterable": _mapped_iterable,
}

each_publisher = pytest.mark.parametrize("make", list(PUBLISHERS.values()), ids=list(PUBLISHERS))


def _poll(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Check, until a deadline, a condition that no event announces (garbage collection,
    a pool shutting down); everything that a signal announces is waited for on it."""
    tick = threading.Event()
    deadline = timeout / 0.005
    while not condition():
        deadline -= 1
        if deadline < 0:
            return False
        tick.wait(0.005)
    return True


@each_publisher
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.integers(min_value=0, max_value=300),
    requests=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=24),
    threads=st.integers(min_value=1, max_value=4),
)
def test_random_concurrent_requests_respect_demand_order_and_one_terminal(
        make: Callable[[int], Publisher[Any]], size: int, requests: list[int],
        threads: int) -> None:
    publisher = make(size)
    recorder = Recorder()
    publisher.subscribe(recorder)
    assert recorder.subscribed.wait(5)

    start = threading.Barrier(threads)

    def requester(share: list[int]) -> None:
        start.wait()
        for n in share:
            recorder.request(n)

    workers = [threading.Thread(target=requester, args=(requests[i::threads],))
               for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

    asked = sum(requests)
    expected = min(asked, size)
    recorder.wait_for_elements(expected)
    recorder.assert_clean()
    assert recorder.elements == list(range(expected))  # order kept

    if asked < size:  # now ask for the rest: the stream must end exactly
        recorder.request(size - asked)
    recorder.wait_for_elements(size)
    if not recorder.done.is_set():
        # An iterator only shows it is exhausted when asked for one more element.
        recorder.request(1)
    recorder.wait_done()
    assert recorder.elements == list(range(size))
    assert (recorder.completions, recorder.errors) == (1, [])
    recorder.assert_clean()


def _frame_depth() -> int:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back  # type: ignore[assignment]
    return depth


@each_publisher
def test_request_one_from_on_next_does_not_grow_the_stack(
        make: Callable[[int], Publisher[Any]]) -> None:
    total = 100_000
    probes = {1, 1_000, total - 1}
    depths: dict[int, int] = {}

    class OneByOne(Recorder):
        nesting = 0
        deepest = 0

        def handle(self, element: Any) -> None:
            self.nesting += 1
            self.deepest = max(self.deepest, self.nesting)
            if element in probes:
                depths[element] = _frame_depth()
            self.request(1)  # §3.2: synchronous request from on_next
            self.nesting -= 1

    recorder = OneByOne(initial=1)
    make(total).subscribe(recorder)
    recorder.wait_done(timeout=60)
    recorder.assert_clean()
    assert len(recorder.elements) == total
    assert recorder.deepest == 1, f"§3.3: on_next nested {recorder.deepest} deep"
    assert len(set(depths.values())) == 1, f"§3.3: stack depth grew: {depths}"


@each_publisher
@pytest.mark.parametrize("n", [0, -1, -(2**63)])
def test_non_positive_request_is_signalled_as_value_error(
        make: Callable[[int], Publisher[Any]], n: int) -> None:
    recorder = Recorder()
    make(10).subscribe(recorder)
    assert recorder.subscribed.wait(5)
    assert recorder.subscription is not None
    recorder.subscription.request(n)  # §3.9: must not raise
    recorder.wait_done()
    assert len(recorder.errors) == 1 and isinstance(recorder.errors[0], ValueError), (
        f"§3.9: expected on_error(ValueError), got errors={recorder.errors} "
        f"completions={recorder.completions}")
    assert "§3.9" in str(recorder.errors[0])
    recorder.assert_clean()


@each_publisher
def test_subscribe_none_raises_type_error(make: Callable[[int], Publisher[Any]]) -> None:
    with pytest.raises(TypeError, match="§1.9"):
        make(3).subscribe(None)  # type: ignore[arg-type]


@each_publisher
def test_cancel_releases_the_subscriber(make: Callable[[int], Publisher[Any]]) -> None:
    publisher = make(1_000_000)
    recorder = Recorder(initial=5)
    publisher.subscribe(recorder)
    recorder.wait_for_elements(5)
    released = threading.Event()
    weakref.finalize(recorder, released.set)
    # Hold the subscription, as a publisher's own bookkeeping might: it must still let go
    # of the subscriber.
    subscription = recorder.subscription
    recorder.cancel()
    recorder.cancel()  # §3.7: idempotent
    del recorder
    # §3.13: the publisher must drop its reference; nothing signals that, so collect and
    # look again until a deadline.
    assert _poll(lambda: gc.collect() >= 0 and released.is_set()), (
        "§3.13: the subscriber was still referenced after cancel")
    assert subscription is not None


@each_publisher
def test_demand_accumulates_to_unbounded_without_error(
        make: Callable[[int], Publisher[Any]]) -> None:
    recorder = Recorder()
    make(50).subscribe(recorder)
    assert recorder.subscribed.wait(5)
    for _ in range(10):  # §3.17: 10 x (2**63 - 2) must not overflow into an error
        recorder.request(2**63 - 2)
    recorder.wait_done()
    assert recorder.elements == list(range(50))
    assert (recorder.completions, recorder.errors) == (1, [])
    recorder.assert_clean()


def test_range_signals_on_the_requesting_thread() -> None:
    recorder = Recorder()
    RangePublisher(3, 4).subscribe(recorder)
    recorder.request(10)
    assert recorder.signal_threads == {threading.get_ident()}
    assert recorder.elements == [3, 4, 5, 6] and recorder.completions == 1


def test_range_completes_without_further_demand() -> None:
    recorder = Recorder()
    RangePublisher(0, 3).subscribe(recorder)
    recorder.request(3)  # exactly the remaining elements: on_complete follows (§1.5)
    assert recorder.completions == 1


@pytest.mark.parametrize(("start", "count", "error"), [
    (0, -1, ValueError), (0.5, 3, TypeError), (0, "3", TypeError), (0, None, TypeError)])
def test_range_rejects_bad_arguments(start: Any, count: Any, error: type) -> None:
    with pytest.raises(error, match="RangePublisher"):
        RangePublisher(start, count)


def test_iterable_publisher_signals_from_its_executor_not_the_requester() -> None:
    recorder = Recorder(initial=100)
    IterablePublisher(range(10)).subscribe(recorder)
    recorder.wait_done()
    assert threading.get_ident() not in recorder.signal_threads
    assert recorder.elements == list(range(10))


def test_iterator_error_becomes_on_error_after_the_elements_before_it() -> None:
    def failing() -> Any:
        yield 1
        yield 2
        raise KeyError("boom")

    recorder = Recorder(initial=10)
    IterablePublisher(failing).subscribe(recorder)
    recorder.wait_done()
    assert recorder.elements == [1, 2]
    assert len(recorder.errors) == 1 and isinstance(recorder.errors[0], KeyError)


def test_factory_error_becomes_on_error() -> None:
    def broken() -> list[int]:
        raise OSError("cannot open")

    recorder = Recorder(initial=1)
    IterablePublisher(broken).subscribe(recorder)
    recorder.wait_done()
    assert isinstance(recorder.errors[0], OSError)


def test_none_element_fails_the_stream_with_type_error() -> None:
    recorder = Recorder(initial=10)
    IterablePublisher([1, None, 3]).subscribe(recorder)
    recorder.wait_done()
    assert recorder.elements == [1]
    assert isinstance(recorder.errors[0], TypeError) and "§2.13" in str(recorder.errors[0])


def test_one_shot_iterator_refuses_a_second_subscriber() -> None:
    publisher = IterablePublisher(iter([1, 2, 3]))
    first, second = Recorder(initial=5), Recorder(initial=5)
    publisher.subscribe(first)
    first.wait_done()
    publisher.subscribe(second)
    second.wait_done()
    assert first.elements == [1, 2, 3] and first.completions == 1
    assert isinstance(second.errors[0], RuntimeError)
    assert "factory" in str(second.errors[0])


def test_re_iterable_serves_every_subscriber_the_whole_sequence() -> None:
    publisher = IterablePublisher([1, 2, 3])
    for _ in range(3):
        recorder = Recorder(initial=5)
        publisher.subscribe(recorder)
        recorder.wait_done()
        assert recorder.elements == [1, 2, 3]


def test_cancel_closes_the_generator() -> None:
    closed = threading.Event()

    def endless() -> Any:
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    recorder = Recorder(initial=3)
    IterablePublisher(endless).subscribe(recorder)
    recorder.wait_for_elements(3)
    recorder.cancel()
    assert closed.wait(5), "the generator was not closed on cancel"


def test_owned_pool_is_shut_down_when_the_last_subscription_ends() -> None:
    publisher = IterablePublisher(lambda: range(5))
    recorders = [Recorder(initial=10) for _ in range(3)]
    for r in recorders:
        publisher.subscribe(r)
    for r in recorders:
        r.wait_done()
    assert _poll(lambda: not publisher._runner.running)
    again = Recorder(initial=10)  # a new subscription starts a new pool
    publisher.subscribe(again)
    again.wait_done()
    assert again.elements == [0, 1, 2, 3, 4]


def test_borrowed_executor_is_never_shut_down() -> None:
    with ThreadPoolExecutor(2) as pool:
        recorder = Recorder(initial=10)
        IterablePublisher(lambda: range(3), executor=pool).subscribe(recorder)
        recorder.wait_done()
        assert pool.submit(lambda: 42).result(5) == 42


def test_async_iterable_is_not_read_ahead_of_demand() -> None:
    produced: list[int] = []

    async def tracked() -> AsyncIterator[int]:
        for i in range(100):
            produced.append(i)
            yield i

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        recorder = Recorder(initial=3)
        AsyncIterablePublisher(tracked, loop=loop).subscribe(recorder)
        recorder.wait_for_elements(3)
        recorder.request(2)
        recorder.wait_for_elements(5)
        for _ in range(10):  # give a read-ahead every chance to happen on the loop
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(5)
        # The generator body runs up to the yield of the element it hands out: no further.
        assert produced == [0, 1, 2, 3, 4]
        recorder.cancel()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_cancel_stops_pulling_an_async_generator_that_absorbs_it_and_closes_it() -> None:
    started = 0  # pulls the generator began: one per anext()
    at_cancel: list[int] = []
    closed = threading.Event()

    async def stubborn() -> AsyncIterator[int]:
        nonlocal started
        try:
            for i in itertools.count():
                started += 1
                if i >= 3:
                    try:
                        await asyncio.sleep(3600)  # where the cancellation lands
                    except asyncio.CancelledError:
                        pass  # absorbed: the generator carries on
                yield i
        finally:
            closed.set()

    class CancelsAtThird(Recorder):
        def handle(self, element: Any) -> None:
            if element == 2:
                at_cancel.append(started)
                self.cancel()  # with demand left, the task is awaiting element 3

    publisher = AsyncIterablePublisher(stubborn)
    recorder = CancelsAtThird(initial=8)
    publisher.subscribe(recorder)
    recorder.wait_for_elements(3)
    assert closed.wait(5), "the async generator was not closed (aclose) after cancel"
    assert started == at_cancel[0], (
        f"§3.12: {started - at_cancel[0]} more pulls began after cancel")
    assert recorder.elements == [0, 1, 2] and recorder.terminals == 0
    # No subscription is live: the loop the publisher owns stops, and its thread ends.
    assert _poll(lambda: not publisher._runner.running), "the loop runner was not released"
    (loop_ident,) = recorder.signal_threads
    loop_thread = next((t for t in threading.enumerate() if t.ident == loop_ident), None)
    if loop_thread is not None:
        loop_thread.join(5)
        assert not loop_thread.is_alive(), "the publisher's loop thread is still alive"


def test_each_element_is_signalled_as_soon_as_the_iterator_yields_it() -> None:
    second_wanted = threading.Event()

    def slow() -> Any:
        yield 1
        # Blocks until the test has seen 1: holding 1 back would deadlock here.
        assert second_wanted.wait(10), "element 1 was held back"
        yield 2

    recorder = Recorder(initial=100)
    IterablePublisher(slow).subscribe(recorder)
    recorder.wait_for_elements(1)
    second_wanted.set()
    recorder.wait_done()
    assert recorder.elements == [1, 2] and recorder.completions == 1


def test_async_iterable_on_a_borrowed_loop() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        recorder = Recorder(initial=10)
        AsyncIterablePublisher(lambda: _count(4), loop=loop).subscribe(recorder)
        recorder.wait_done()
        assert recorder.elements == [0, 1, 2, 3]
        assert recorder.signal_threads == {thread.ident}
        assert loop.is_running()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_async_iterator_error_becomes_on_error() -> None:
    async def failing() -> AsyncIterator[int]:
        yield 7
        raise ValueError("async boom")

    recorder = Recorder(initial=5)
    AsyncIterablePublisher(failing).subscribe(recorder)
    recorder.wait_done()
    assert recorder.elements == [7]
    assert str(recorder.errors[0]) == "async boom"
