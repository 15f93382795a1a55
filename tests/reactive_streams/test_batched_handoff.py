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
