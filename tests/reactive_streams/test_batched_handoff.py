"""Elements handed over in bulk keep the rules: each element is still its own on_next,
within demand (§1.1), serial (§1.3), and a cancel stops delivery at once (§3.12), on the
paths that batch internally: the lazy iterator source, AsyncSubscriber's queue, the
lock-free fast path of SyncSubscriber, and Emitter.offer (MapProcessor)."""

from __future__ import annotations

import asyncio
import collections
import random
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import pytest
from rs_support import Recorder

from reactive_streams import (
    AsyncIterablePublisher,
    AsyncSubscriber,
    IterablePublisher,
    MapProcessor,
    Publisher,
    RangePublisher,
    Subscription,
    SyncSubscriber,
)
from reactive_streams.signalling import Emitter, SerialWorker, Source, Terminal


class Produced:
    """Counts what an iterator has produced, and says when it was closed."""

    def __init__(self) -> None:
        self.count = 0
        self.closed = threading.Event()

    def ints(self, n: int) -> Iterator[int]:
        try:
            for i in range(n):
                self.count += 1
                yield i
        finally:
            self.closed.set()

    async def async_ints(self, n: int) -> AsyncIterator[int]:
        try:
            for i in range(n):
                self.count += 1
                yield i
                if i % 64 == 0:
                    await asyncio.sleep(0)
        finally:
            self.closed.set()


def test_each_element_is_signalled_as_it_is_produced_and_never_read_ahead() -> None:
    produced = Produced()
    lags: list[int] = []

    class Watch(Recorder):
        def handle(self, element: Any) -> None:
            # The iterator has produced exactly the elements signalled so far: none is
            # held back for the rest of a chunk, none read ahead of demand.
            lags.append(produced.count - len(self.elements))

    recorder = Watch(initial=300)  # several chunks' worth of requests below
    IterablePublisher(lambda: produced.ints(5000)).subscribe(recorder)
    recorder.wait_for_elements(300)
    recorder.request(2000)
    recorder.wait_for_elements(2300)
    assert set(lags) == {0}, f"produced minus signalled at on_next: {sorted(set(lags))}"
    assert produced.count == 2300, f"read {produced.count} for a demand of 2300"
    recorder.cancel()
    assert produced.closed.wait(5)
    recorder.assert_clean()


def _iterable(produced: Produced, n: int) -> Publisher[int]:
    return IterablePublisher(lambda: produced.ints(n))


def _async_iterable(produced: Produced, n: int) -> Publisher[int]:
    return AsyncIterablePublisher(lambda: produced.async_ints(n))


def _map_over_iterable(produced: Produced, n: int) -> Publisher[int]:
    processor: MapProcessor[int, int] = MapProcessor(lambda x: x, buffer_size=2048)
    IterablePublisher(lambda: produced.ints(n)).subscribe(processor)
    return processor


@pytest.mark.parametrize("make", [_iterable, _async_iterable, _map_over_iterable],
                         ids=["iterable", "async-iterable", "map-over-iterable"])
def test_cancel_inside_on_next_stops_delivery_in_the_middle_of_a_batch(
        make: Callable[[Produced, int], Publisher[int]]) -> None:
    produced = Produced()

    class CancelAtTen(Recorder):
        def handle(self, element: Any) -> None:
            if element == 10:
                self.cancel()  # §3.12: nothing more after this on_next returns

    recorder = CancelAtTen(initial=1000)  # one request: a batch of 1000 on its way
    make(produced, 100_000).subscribe(recorder)
    # The source is closed once the subscription has ended (§3.13), after its last signal.
    assert produced.closed.wait(10), "the cancelled subscription never closed its source"
    assert recorder.elements == list(range(11)), (
        f"§3.12: {len(recorder.elements)} elements signalled, 11 expected (cancel at 10)")
    recorder.assert_clean()


def test_range_cancel_inside_on_next_stops_delivery_in_the_middle_of_a_chunk() -> None:
    class CancelAtTen(Recorder):
        def handle(self, element: Any) -> None:
            if element == 10:
                self.cancel()

    recorder = CancelAtTen(initial=1000)
    RangePublisher(0, 100_000).subscribe(recorder)  # synchronous: returns at the end
    assert recorder.elements == list(range(11))
    recorder.assert_clean()


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Threads take turns on the GIL every microsecond or so instead of every 5 ms, so
    the short windows in which a handover could be lost are hit thousands of times."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class PushingSubscription(Subscription):
    """A publisher's side, driven by hand: elements go out on a thread of the test's own,
    only within what was requested."""

    def __init__(self) -> None:
        self.demand = threading.Semaphore(0)
        self.requested = 0
        self.cancelled = threading.Event()

    def request(self, n: int) -> None:
        self.requested += n  # the subscriber's calls are serial (§2.7)
        for _ in range(n):
            self.demand.release()

    def cancel(self) -> None:
        self.cancelled.set()


@pytest.mark.usefixtures("frequent_switches")
def test_async_subscriber_handles_every_element_once_in_order_across_idle_and_busy() -> None:
    """The publisher's thread starts the handling thread only when it is idle: over
    thousands of idle/busy turns (bursts of random size, threads switching every
    microsecond), no element is lost, repeated or reordered, and the handler never sees
    more than was requested."""
    total = 30_000
    seen: list[int] = []
    threads: set[int] = set()
    exceeded: list[str] = []
    subscription = PushingSubscription()

    class Keep(AsyncSubscriber[int]):
        def on_element(self, element: int) -> None:
            threads.add(threading.get_ident())
            seen.append(element)
            if len(seen) > subscription.requested:
                exceeded.append(f"§1.1: {len(seen)} handled for {subscription.requested}")

    subscriber = Keep(batch_size=64)
    subscriber.on_subscribe(subscription)
    rng = random.Random(13)

    def publish() -> None:
        sent = 0
        while sent < total:
            burst = min(rng.randint(1, 200), total - sent)
            for _ in range(burst):
                if not subscription.demand.acquire(timeout=10):
                    return  # stranded: the subscriber never asked for more
                subscriber.on_next(sent)
                sent += 1
            if rng.random() < 0.3:
                threading.Event().wait(0.0001)  # let the handling thread go idle
        subscriber.on_complete()

    publisher = threading.Thread(target=publish)
    publisher.start()
    publisher.join(60)
    assert subscriber.wait(10), (
        f"the subscriber handled {len(seen)} of {total} elements and then stalled")
    assert seen == list(range(total))
    assert not exceeded, exceeded[:3]
    assert threads and publisher.ident not in threads
    subscriber.join(0)


@pytest.mark.parametrize("batch_size", [2, 64], ids=["long-way", "lock-free-way"])
def test_sync_subscriber_cancel_from_another_thread_waits_for_the_running_on_element(
        batch_size: int) -> None:
    inside = threading.Event()
    release = threading.Event()
    finished_while_inside: list[bool] = []

    class Blocking(SyncSubscriber[int]):
        def on_element(self, element: int) -> None:
            inside.set()
            assert release.wait(5)

        def on_finished(self, error: BaseException | None) -> None:
            finished_while_inside.append(inside.is_set() and not release.is_set())

    subscriber = Blocking(batch_size=batch_size)
    subscription = PushingSubscription()
    subscriber.on_subscribe(subscription)
    worker = threading.Thread(target=subscriber.on_next, args=(0,))
    worker.start()
    assert inside.wait(5)
    subscriber.cancel()  # returns at once; on_element is still running
    assert not subscription.cancelled.is_set(), "§2.7: cancel() ran beside on_element"
    assert not subscriber.finished
    release.set()
    worker.join(5)
    assert subscription.cancelled.is_set()  # done by the signal's thread on its way out
    assert finished_while_inside == [False]


def test_sync_subscriber_cancel_from_another_thread_between_elements_acts_at_once() -> None:
    class Count(SyncSubscriber[int]):
        count = 0

        def on_element(self, element: int) -> None:
            self.count += 1

    subscriber = Count(batch_size=64)
    subscription = PushingSubscription()
    subscriber.on_subscribe(subscription)
    for i in range(3):
        subscriber.on_next(i)
    canceller = threading.Thread(target=subscriber.cancel)
    canceller.start()
    canceller.join(5)
    # No further signal comes: the cancel must not wait for one.
    assert subscription.cancelled.is_set() and subscriber.finished
    subscriber.on_next(3)  # §2.8: accepted after cancel, and not handled
    assert subscriber.count == 3


class Queue(Source[int]):
    """Elements put by the test; pulled in order."""

    def __init__(self) -> None:
        self.ready: list[int] = []

    def pull(self, n: int) -> tuple[Sequence[int], Terminal | None]:
        taken, self.ready = self.ready[:n], self.ready[n:]
        return taken, None


def test_offer_signals_only_within_demand_and_never_nests_a_request() -> None:
    class RequestsOneMore(Recorder):
        nesting = 0
        deepest = 0

        def handle(self, element: Any) -> None:
            self.nesting += 1
            self.deepest = max(self.deepest, self.nesting)
            if element < 3:
                self.request(1)  # §3.3: served after this on_next returns
            self.nesting -= 1

    source = Queue()
    recorder = RequestsOneMore()
    emitter = Emitter(recorder, source)
    emitter.start()
    assert not emitter.offer(0), "offered before any demand (§1.1)"
    recorder.request(1)
    caller = threading.get_ident()
    source.ready = [1, 2, 3, 4]  # what the loop finds once offer() has signalled 0
    assert emitter.offer(0)
    # 0 by offer; its request(1) then 1 from the queue, whose request(1) brings 2, whose
    # request(1) brings 3; 3 asks for nothing: demand is used up.
    assert recorder.elements == [0, 1, 2, 3]
    assert emitter.demand == 0 and not emitter.offer(9)
    assert recorder.deepest == 1, f"§3.3: on_next nested {recorder.deepest} deep"
    assert recorder.signal_threads == {caller}
    emitter.cancel()
    assert not emitter.offer(9)
    recorder.assert_clean()


def test_offer_refuses_while_the_loop_runs_on_another_thread() -> None:
    entered = threading.Event()
    release = threading.Event()

    class Slow(Recorder):
        def handle(self, element: Any) -> None:
            entered.set()
            assert release.wait(5)

    source = Queue()
    source.ready = [0]
    recorder = Slow()
    emitter = Emitter(recorder, source)
    emitter.start()
    loop = threading.Thread(target=recorder.request, args=(5,))
    loop.start()  # the loop signals 0 on that thread and is held there
    assert entered.wait(5)
    assert not emitter.offer(1), "offer() signalled beside the running loop (§1.3)"
    source.ready.append(1)
    emitter.signal()  # what a source does when offer() refuses
    release.set()
    loop.join(5)
    assert recorder.elements == [0, 1]
    recorder.assert_clean()


def test_work_handed_over_while_the_loop_stops_is_found_by_its_last_look() -> None:
    """_schedule_if_idle does not tell a running loop; the loop must find the work
    (_pending) after lowering its counter. Each item here is handed over exactly in that
    window: after the loop's last look at the queue, while it still holds the counter."""
    handed_over = 50

    class Worker(SerialWorker):
        def __init__(self) -> None:
            super().__init__()
            self.items: collections.deque[int] = collections.deque()
            self.done: list[int] = []

        def put(self, item: int) -> None:
            self.items.append(item)
            self._schedule_if_idle()

        def _pending(self) -> bool:
            return bool(self.items)

        def _work(self) -> bool:
            while self.items:
                self.done.append(self.items.popleft())
            if len(self.done) <= handed_over:
                self.put(len(self.done))  # the counter is raised: nobody is told
            return False

    worker = Worker()
    worker.put(0)
    assert worker.done == list(range(handed_over + 1)), (
        f"handled {worker.done[-3:]}...: the item handed over after the loop's last look "
        "was stranded")


def test_async_subscriber_finds_elements_that_arrive_as_its_thread_stops() -> None:
    handed_over = 20
    all_seen = threading.Event()

    class Injecting(AsyncSubscriber[int]):
        def __init__(self) -> None:
            super().__init__(batch_size=64)
            self.seen: list[int] = []

        def on_element(self, element: int) -> None:
            self.seen.append(element)
            if len(self.seen) == handed_over + 1:
                all_seen.set()

        def _work(self) -> bool:
            more = super()._work()
            if len(self.seen) <= handed_over:
                # The publisher sends the next element just as this thread is done with
                # the queue and still holds the counter: on_next does not start it.
                sender = threading.Thread(target=self.on_next, args=(len(self.seen),))
                sender.start()
                sender.join(5)
            return more

    subscriber = Injecting()
    subscriber.on_subscribe(PushingSubscription())  # its turn sends 0, and so on
    assert all_seen.wait(10), (
        f"handled {subscriber.seen}: an element that arrived as the handling thread "
        "stopped was stranded")
    assert subscriber.seen == list(range(handed_over + 1))
    subscriber.on_complete()
    subscriber.join(5)


# -- SyncSubscriber's chunk path: Emitter -> SyncSubscriber._deliver --------------------------


class SpySubscription(Subscription):
    """Passes calls on to the emitter and records every request."""

    def __init__(self, inner: Subscription) -> None:
        self.inner = inner
        self.requests: list[int] = []

    def request(self, n: int) -> None:
        self.requests.append(n)
        self.inner.request(n)

    def cancel(self) -> None:
        self.inner.cancel()


class Watched(SyncSubscriber[int]):
    """Records each element, the outstanding demand it saw, the requests made, and checks
    §1.1 at every element; ``stop_at``/``how`` make it cancel or raise at one element."""

    def __init__(self, batch_size: int, stop_at: int | None = None, how: str = "") -> None:
        super().__init__(batch_size)
        self.stop_at, self.how = stop_at, how
        self.elements: list[int] = []
        self.seen_outstanding: list[int] = []
        self.finished_with: list[BaseException | None] = []
        self.spy: SpySubscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.spy = SpySubscription(subscription)
        super().on_subscribe(self.spy)

    def on_element(self, element: int) -> bool | None:
        assert self.spy is not None
        self.elements.append(element)
        self.seen_outstanding.append(self.outstanding)
        assert len(self.elements) <= sum(self.spy.requests), (
            f"§1.1: element {len(self.elements)} signalled for a demand of "
            f"{sum(self.spy.requests)}")
        if element == self.stop_at:
            if self.how == "return False":
                return False
            if self.how == "cancel()":
                self.cancel()
            if self.how == "raise":
                raise ValueError(f"handler failed at {element}")
        return None

    def on_finished(self, error: BaseException | None) -> None:
        self.finished_with.append(error)


class WatchedOnNext(Watched):
    """The same, with on_next overridden: every element must come through on_next."""

    on_next_calls = 0

    def on_next(self, element: int) -> None:
        self.on_next_calls += 1
        super().on_next(element)


def _range(n: int) -> Publisher[int]:
    return RangePublisher(0, n)


def _lazy(n: int) -> Publisher[int]:
    return IterablePublisher(range(n))


def test_the_chunk_path_is_taken_only_while_on_next_is_the_subscribers_own() -> None:
    assert Emitter(Watched(8), Queue())._deliver is not None
    assert Emitter(WatchedOnNext(8), Queue())._deliver is None
    subscriber = WatchedOnNext(batch_size=16)
    RangePublisher(0, 1000).subscribe(subscriber)
    subscriber.join(5)
    assert subscriber.on_next_calls == 1000, "an overridden on_next missed elements"
    assert subscriber.elements == list(range(1000))


@pytest.mark.parametrize("make", [_range, _lazy], ids=["range", "iterable"])
@pytest.mark.parametrize("batch_size", [1, 2, 7, 64, 1024])
def test_the_chunk_path_requests_and_counts_as_on_next_does(
        make: Callable[[int], Publisher[int]], batch_size: int) -> None:
    """Same elements, same requests at the same elements, same outstanding demand seen by
    each on_element, one completion after the last element: chunk path == on_next path."""
    n = 5000
    fast, slow = Watched(batch_size), WatchedOnNext(batch_size)
    for subscriber in (fast, slow):
        make(n).subscribe(subscriber)
        subscriber.join(10)
    assert fast.elements == slow.elements == list(range(n))
    assert fast.spy is not None and slow.spy is not None
    assert fast.spy.requests == slow.spy.requests
    assert fast.spy.requests[0] == batch_size and max(fast.spy.requests) <= batch_size
    assert fast.seen_outstanding == slow.seen_outstanding
    assert min(fast.seen_outstanding) >= 0
    assert fast.finished_with == slow.finished_with == [None]
    assert slow.on_next_calls == n


@pytest.mark.parametrize("how", ["return False", "cancel()", "raise"])
@pytest.mark.parametrize("stop_at", [0, 100, 511, 512, 1023])
def test_a_cancel_from_on_element_stops_the_chunk_at_once(how: str, stop_at: int) -> None:
    produced = Produced()
    subscriber = Watched(1024, stop_at=stop_at, how=how)
    IterablePublisher(lambda: produced.ints(100_000)).subscribe(subscriber)
    assert produced.closed.wait(10), "the cancelled subscription never closed its source"
    assert subscriber.wait(5)
    assert subscriber.elements == list(range(stop_at + 1)), (
        f"§3.12: {len(subscriber.elements)} elements handled, {stop_at + 1} expected")
    # The lazy loop looks for a cancel after its iterator produced the next element.
    assert produced.count <= stop_at + 2, "the source was read on after the cancel"
    assert len(subscriber.finished_with) == 1
    error = subscriber.finished_with[0]
    if how == "raise":
        assert isinstance(error, ValueError) and str(error) == f"handler failed at {stop_at}"
    else:
        assert error is None

    ranged = Watched(1024, stop_at=stop_at, how=how)
    RangePublisher(0, 100_000).subscribe(ranged)  # synchronous: returns at the end
    assert ranged.elements == list(range(stop_at + 1))
    assert len(ranged.finished_with) == 1


class Listed(Source[Any]):
    """An eager source handing out a list (or what ``make`` makes of it) at the first pull."""

    def __init__(self, elements: list[Any], make: Callable[[list[Any]], Any] = list) -> None:
        self.elements, self.make = elements, make

    def pull(self, n: int) -> tuple[Sequence[Any], Terminal | None]:
        assert n >= len(self.elements) or n == 0
        taken, self.elements = self.elements, []
        return self.make(taken), None


class BreaksAt(list):  # type: ignore[type-arg]
    """A sequence whose iteration raises after ``at`` elements."""

    at = 0

    def __iter__(self) -> Iterator[Any]:
        yield from self[:self.at]
        raise OSError("the source broke")


@pytest.mark.parametrize("at", [300, 511])  # in a run of short-way elements; at a refill
@pytest.mark.parametrize("bad", ["None", "raise"])
def test_a_chunk_failing_in_the_middle_ends_after_the_elements_before_it(
        bad: str, at: int) -> None:
    subscriber = Watched(1024)
    elements: list[Any] = list(range(1000))
    if bad == "None":
        elements[at] = None  # an eager source breaking its contract: §2.13 still holds
        source = Listed(elements)
    else:
        BreaksAt.at = at
        source = Listed(elements, BreaksAt)
    emitter = Emitter(subscriber, source)
    assert emitter._deliver is not None
    emitter.start()
    assert subscriber.wait(5)
    assert subscriber.elements == list(range(at))
    [error] = subscriber.finished_with
    if bad == "None":
        assert isinstance(error, TypeError) and "§2.13" in str(error)
    else:
        assert isinstance(error, OSError) and str(error) == "the source broke"


def test_cancel_from_another_thread_at_the_end_of_a_chunk_is_not_lost() -> None:
    """A cancel() that comes after the chunk's last element was handled, while the
    subscriber still counts as busy, is acted on by the chunk's thread on its way out."""
    at_end = threading.Event()
    release = threading.Event()

    class EndsSlowly(list):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[Any]:
            yield from list.__iter__(self)
            at_end.set()
            assert release.wait(5)

    subscriber = Watched(1024)
    emitter = Emitter(subscriber, Listed(list(range(10)), EndsSlowly))
    publisher = threading.Thread(target=emitter.start)
    publisher.start()
    assert at_end.wait(5)
    subscriber.cancel()  # returns at once; the chunk's thread does the cancelling
    release.set()
    publisher.join(5)
    assert subscriber.wait(5), "the cancel was lost: nothing more comes to act on it"
    assert emitter.cancelled and subscriber.elements == list(range(10))
    assert subscriber.finished_with == [None]


def test_cancel_from_another_thread_during_a_chunk_stops_after_the_running_element() -> None:
    inside = threading.Event()
    release = threading.Event()

    class Blocking(Watched):
        def on_element(self, element: int) -> bool | None:
            super().on_element(element)
            if element == 100:
                inside.set()
                assert release.wait(5)
            return None

    subscriber = Blocking(1024)
    publisher = threading.Thread(target=RangePublisher(0, 100_000).subscribe,
                                 args=(subscriber,))
    publisher.start()
    assert inside.wait(5)
    subscriber.cancel()  # returns at once; on_element(100) is still running
    assert not subscriber.finished, "§2.7: cancel() ended the subscriber beside on_element"
    release.set()
    publisher.join(5)
    assert subscriber.wait(5)
    assert subscriber.elements == list(range(101))
    assert subscriber.finished_with == [None]


# -- Emitter -> AsyncSubscriber: a lazy source's loop does AsyncSubscriber.on_next inline --


def test_an_async_subscriber_gets_each_element_as_the_iterator_produces_it() -> None:
    """The inlined on_next appends and starts the handling thread when it is idle: a
    generator that waits for each element to be handled before producing the next one
    runs to its end (an element held back, or a handling thread not started, stalls it),
    with a batch of 4 (refills of 2) the stream crosses idle and busy turns throughout."""
    total = 50
    handled: list[int] = []
    turn = threading.Semaphore(0)

    class Paced(AsyncSubscriber[int]):
        def on_element(self, element: int) -> None:
            handled.append(element)
            turn.release()

    subscriber = Paced(batch_size=4)

    def paced() -> Iterator[int]:
        for i in range(total):
            yield i
            if not turn.acquire(timeout=10):
                return  # stalled: the element was not handled
        return

    IterablePublisher(paced).subscribe(subscriber)
    assert subscriber.wait(20), f"stalled after {len(handled)} of {total}"
    assert handled == list(range(total))
    assert subscriber._error is None


def test_a_subclass_overriding_on_next_gets_every_on_next_from_a_lazy_source() -> None:
    calls: list[int] = []

    class Overriding(AsyncSubscriber[int]):
        def on_next(self, element: int) -> None:
            calls.append(element)
            super().on_next(element)

        def on_element(self, element: int) -> None:
            pass

    subscriber = Overriding(batch_size=8)
    IterablePublisher(range(100)).subscribe(subscriber)
    assert subscriber.wait(10)
    assert calls == list(range(100))


def test_a_lazy_source_into_an_async_subscriber_stays_within_demand_and_stops_at_cancel() -> None:
    """§1.1 and §3.12 on the inlined path: with a handler slower than the iterator, the
    queue never holds more than was requested, and a cancel from the handler's thread
    stops the iterator within the elements already requested."""
    produced = Produced()
    seen: list[int] = []
    most_queued: list[int] = [0]

    class Slow(AsyncSubscriber[int]):
        def on_element(self, element: int) -> None:
            most_queued[0] = max(most_queued[0], self.queued)
            seen.append(element)
            if element == 300:
                self.cancel()

    subscriber = Slow(batch_size=16)
    IterablePublisher(lambda: produced.ints(100_000)).subscribe(subscriber)
    assert produced.closed.wait(10), "the iterator was not closed after the cancel"
    assert subscriber.wait(10)
    assert seen == list(range(301))
    assert most_queued[0] <= 16
    # Requested at most 301 + 16 (a refill of 8 in flight) elements, never beyond.
    assert produced.count <= 301 + 16
