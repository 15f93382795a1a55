"""reactive_streams.adapters.rx: an Observable as a Publisher under each overflow policy,
with real threads producing and exact counts of what was dropped; a Publisher as an
Observable that requests in batches; the TCK as oracle for the publisher side; and the
error that names the extra when reactivex is missing."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import reactivex
from reactivex import operators as ops
from reactivex.scheduler import NewThreadScheduler
from reactivex.subject import Subject
from rs_support import Recorder, Recording, run_python, wait_until

from reactive_streams import UNBOUNDED, IterablePublisher, Publisher, RangePublisher
from reactive_streams.adapters.rx import (
    BufferOverflowError,
    ObservableSubscription,
    Overflow,
    from_observable,
    to_observable,
)
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import PublisherVerification

WAIT = 10.0  # seconds for something that must happen


class Boom(Exception):
    pass


class Producer(threading.Thread):
    """Pushes ``items`` into ``subject`` from a thread of its own, then ``end`` (default:
    on_completed). ``returned`` counts the on_next calls that have returned."""

    def __init__(self, subject: Subject[int], items: range,
                 end: Callable[[], None] | None = None) -> None:
        super().__init__(name="rx-producer", daemon=True)
        self.subject = subject
        self.items = items
        self.end = end or subject.on_completed
        self.returned = 0
        self.changed = threading.Condition()

    def run(self) -> None:
        for i in self.items:
            self.subject.on_next(i)
            with self.changed:
                self.returned += 1
                self.changed.notify_all()
        self.end()

    def wait_returned(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.returned >= count, WAIT), self.returned

    def waiting_in_on_next(self) -> bool:
        """Whether the producer waits on the adapter's condition inside its ``_on_next``."""
        frame = sys._current_frames().get(self.ident or -1)
        if frame is None or frame.f_code.co_name != "wait":
            return False
        while frame is not None:
            if frame.f_code.co_name == "_on_next" and frame.f_code.co_filename.endswith("rx.py"):
                return True
            frame = frame.f_back
        return False

    def assert_held_in_on_next(self, returned: int) -> None:
        """The producer, having returned from ``returned`` on_next calls, waits in the next
        one (no event says so: its stack is polled)."""
        wait_until(self.waiting_in_on_next, WAIT, "the producer waiting in on_next")
        assert self.returned == returned


def produce(subject: Subject[int], items: range,
            end: Callable[[], None] | None = None) -> Producer:
    producer = Producer(subject, items, end)
    producer.start()
    return producer


def subscribed(publisher: Publisher[Any], initial: int = 0) -> Recorder:
    recorder = Recorder(initial=initial)
    publisher.subscribe(recorder)
    assert recorder.subscribed.wait(WAIT)
    return recorder


def subscription_of(recorder: Recorder) -> ObservableSubscription[Any]:
    assert isinstance(recorder.subscription, ObservableSubscription)
    return recorder.subscription


# -- from_observable: the overflow policies, with a thread producing -----------------------


@pytest.mark.parametrize(("overflow", "kept"), [
    ("drop_oldest", [7, 8, 9]),  # each new item pushes the oldest out
    ("drop_latest", [2, 3, 4]),  # each new item is turned away
])
def test_drop_policies_keep_buffer_size_items_and_count_the_rest(overflow: Overflow,
                                                                 kept: list[int]) -> None:
    subject: Subject[int] = Subject()
    publisher = from_observable(subject, overflow=overflow, buffer_size=3)
    recorder = subscribed(publisher, initial=2)
    produce(subject, range(10)).join(WAIT)
    # 0 and 1 were requested; 2..9 found 3 places between them.
    assert recorder.elements == [0, 1]
    assert subscription_of(recorder).dropped == 5 and publisher.dropped == 5
    recorder.request(10)
    recorder.wait_done()
    assert recorder.elements == [0, 1, *kept] and recorder.completions == 1
    recorder.assert_clean()


def test_error_fails_at_once_naming_the_buffer_and_disposes_the_observable() -> None:
    subject: Subject[int] = Subject()
    disposed = threading.Event()
    publisher = from_observable(subject.pipe(ops.finally_action(disposed.set)),
                                overflow="error", buffer_size=3)
    recorder = subscribed(publisher, initial=2)
    produce(subject, range(10)).join(WAIT)
    # No further request is needed for the error: it comes when item 5 finds no room.
    recorder.wait_done()
    assert recorder.elements == [0, 1]
    [error] = recorder.errors
    assert isinstance(error, BufferOverflowError)
    assert "buffer_size=3" in str(error) and "overflow='error'" in str(error)
    assert disposed.wait(WAIT)
    assert not subject.observers  # the observable's subscription is gone
    # Item 5 and the three buffered (2, 3, 4) were dropped; 6..9 found nobody.
    assert subscription_of(recorder).dropped == 4 and publisher.dropped == 4
    recorder.assert_clean()


def test_items_within_demand_never_count_against_the_buffer() -> None:
    subject: Subject[int] = Subject()
    publisher = from_observable(subject, overflow="error", buffer_size=1)
    recorder = subscribed(publisher, initial=1000)
    produce(subject, range(1000)).join(WAIT)
    recorder.wait_done()
    assert recorder.elements == list(range(1000)) and recorder.errors == []
    assert publisher.dropped == 0
    recorder.assert_clean()


def test_unbounded_demand_never_drops() -> None:
    subject: Subject[int] = Subject()
    publisher = from_observable(subject, overflow="drop_latest", buffer_size=1)
    recorder = subscribed(publisher, initial=UNBOUNDED)
    produce(subject, range(500)).join(WAIT)
    recorder.wait_done()
    assert recorder.elements == list(range(500)) and publisher.dropped == 0


def test_block_holds_the_producing_thread_until_demand_frees_space() -> None:
    subject: Subject[int] = Subject()
    publisher = from_observable(subject, overflow="block", buffer_size=2)
    recorder = subscribed(publisher)
    producer = produce(subject, range(10))
    # 0 and 1 fill the buffer; the producer's on_next(2) waits for room.
    producer.assert_held_in_on_next(returned=2)
    assert recorder.elements == []
    recorder.request(1)  # 0 leaves the buffer: 2 gets in, 3 waits
    producer.wait_returned(3)
    producer.assert_held_in_on_next(returned=3)
    assert recorder.elements == [0]
    recorder.request(100)
    producer.join(WAIT)
    assert not producer.is_alive()
    recorder.wait_done()
    assert recorder.elements == list(range(10)) and publisher.dropped == 0
    recorder.assert_clean()


def test_cancel_releases_a_blocked_producer_and_disposes() -> None:
    subject: Subject[int] = Subject()
    disposed = threading.Event()
    publisher = from_observable(subject.pipe(ops.finally_action(disposed.set)),
                                overflow="block", buffer_size=1)
    recorder = subscribed(publisher)
    producer = produce(subject, range(5))
    producer.assert_held_in_on_next(returned=1)
    recorder.cancel()
    producer.join(WAIT)
    assert not producer.is_alive()  # woken by the cancel; what it pushes next is ignored
    assert disposed.wait(WAIT)
    assert recorder.elements == [] and recorder.terminals == 0


def test_block_on_the_subscribing_thread_is_refused_not_a_deadlock() -> None:
    # reactivex.range emits at subscription, on the thread that subscribes.
    publisher = from_observable(reactivex.range(0, 10), overflow="block", buffer_size=2)
    recorder = subscribed(publisher)
    recorder.wait_done()
    [error] = recorder.errors
    assert isinstance(error, RuntimeError) and "overflow='block' would deadlock" in str(error)
    assert recorder.elements == []
    assert publisher.dropped == 3  # the item that did not fit, and the two buffered


def test_block_on_an_event_loop_thread_is_refused_not_a_frozen_loop() -> None:
    subject: Subject[int] = Subject()
    publisher = from_observable(subject, overflow="block", buffer_size=2)
    recorder = subscribed(publisher)  # requests nothing

    async def feed() -> None:
        for i in range(3):  # 2 fill the buffer; the third would hold the loop's thread
            subject.on_next(i)

    loop_thread = threading.Thread(target=asyncio.run, args=(feed(),), daemon=True)
    loop_thread.start()
    loop_thread.join(WAIT)
    assert not loop_thread.is_alive(), "the event loop's thread is held in on_next"
    recorder.wait_done()
    [error] = recorder.errors
    assert isinstance(error, RuntimeError)
    assert "overflow='block' would block an asyncio event loop" in str(error)
    assert recorder.elements == [] and publisher.dropped == 3


@pytest.mark.parametrize("end", ["cancel", "overflow"])
def test_a_synchronous_observable_stops_when_the_subscription_ends(end: str) -> None:
    emitted = 0

    def count(_: int) -> None:
        nonlocal emitted
        emitted += 1

    observable = reactivex.range(0, 100_000).pipe(ops.do_action(count))
    publisher = from_observable(observable, overflow="error", buffer_size=4)
    recorder = Recorder(initial=10 if end == "cancel" else 2)
    if end == "cancel":
        recorder.handle = lambda element: (  # type: ignore[method-assign]
            recorder.cancel() if element == 2 else None)
    publisher.subscribe(recorder)  # the range runs inside this call
    # The observable is disposed when the subscription ends, not left to run to its end.
    if end == "cancel":
        assert recorder.elements == [0, 1, 2] and recorder.terminals == 0
        assert emitted == 3
    else:
        assert recorder.elements == [0, 1]
        assert [type(e) for e in recorder.errors] == [BufferOverflowError]
        assert emitted == 2 + 4 + 1  # the demand, the buffer, the item that did not fit
    recorder.assert_clean()


def test_an_endless_synchronous_observable_is_disposed_on_cancel() -> None:
    recorder = Recorder(initial=3)
    recorder.handle = lambda element: (  # type: ignore[method-assign]
        recorder.cancel() if len(recorder.elements) == 3 else None)
    publisher = from_observable(reactivex.repeat_value(7), overflow="drop_latest",
                                buffer_size=4)
    subscribing = threading.Thread(target=publisher.subscribe, args=(recorder,), daemon=True)
    subscribing.start()
    subscribing.join(WAIT)
    assert not subscribing.is_alive(), "subscribe() still runs the cancelled observable"
    assert recorder.elements == [7, 7, 7] and recorder.terminals == 0


def test_block_with_an_observable_on_a_thread_of_its_own_delivers_everything() -> None:
    observable = reactivex.range(0, 3000).pipe(ops.subscribe_on(NewThreadScheduler()))
    publisher = from_observable(observable, overflow="block", buffer_size=4)
    recorder = Recorder(initial=8)
    # One more for each element received: 8 outstanding all along, the producer held
    # back. Set before subscribing: the range emits on its own thread from then on.
    recorder.handle = lambda element: recorder.request(1)  # type: ignore[method-assign]
    publisher.subscribe(recorder)
    recorder.wait_done()
    assert recorder.elements == list(range(3000)) and publisher.dropped == 0
    recorder.assert_clean()


def test_interval_on_a_scheduler_is_cancelled_and_disposed() -> None:
    disposed = threading.Event()
    observable = reactivex.interval(0.001, scheduler=NewThreadScheduler()).pipe(
        ops.finally_action(disposed.set))
    publisher = from_observable(observable, overflow="drop_oldest", buffer_size=2)
    recorder = subscribed(publisher, initial=5)
    recorder.wait_for_elements(5)
    recorder.cancel()
    assert disposed.wait(WAIT)
    assert recorder.elements == [0, 1, 2, 3, 4]
    recorder.assert_clean()


# -- from_observable: terminal signals, None, arguments ----------------------------------------


def test_on_error_comes_after_the_buffered_items() -> None:
    subject: Subject[int] = Subject()
    recorder = subscribed(from_observable(subject, overflow="error", buffer_size=8))
    produce(subject, range(3), lambda: subject.on_error(Boom("upstream broke"))).join(WAIT)
    assert recorder.elements == [] and not recorder.done.is_set()  # waits for demand
    recorder.request(10)
    recorder.wait_done()
    assert recorder.elements == [0, 1, 2]
    assert [str(e) for e in recorder.errors] == ["upstream broke"]
    recorder.assert_clean()


def test_a_none_item_fails_the_stream_after_the_items_before_it() -> None:
    recorder = subscribed(from_observable(reactivex.of(1, None, 3), overflow="error",
                                          buffer_size=8), initial=10)
    recorder.wait_done()
    assert recorder.elements == [1]
    [error] = recorder.errors
    assert isinstance(error, TypeError) and "§2.13" in str(error)


def test_each_subscription_subscribes_to_the_observable() -> None:
    subscriptions = []
    observable = reactivex.defer(lambda _: subscriptions.append(1) or reactivex.of(1, 2, 3))
    publisher = from_observable(observable, overflow="error", buffer_size=4)
    first, second = subscribed(publisher, 10), subscribed(publisher, 10)
    first.wait_done()
    second.wait_done()
    assert first.elements == second.elements == [1, 2, 3]
    assert len(subscriptions) == 2


@pytest.mark.parametrize("bad", ["drop", "ERROR", None, 1])
def test_overflow_must_be_a_known_policy(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"overflow must be one of 'error', 'drop_oldest', "
                                         r"'drop_latest', 'block', got "):
        from_observable(reactivex.empty(), overflow=bad)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "16", True])
def test_buffer_size_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"buffer_size must be a positive int .*, got "):
        from_observable(reactivex.empty(), overflow="error", buffer_size=bad)


def test_the_observable_must_be_an_observable() -> None:
    with pytest.raises(TypeError, match="observable must be a reactivex.Observable, got list"):
        from_observable([1, 2], overflow="error")  # type: ignore[arg-type]


# -- to_observable ---------------------------------------------------------------------------


@pytest.mark.parametrize(("batch", "refill"), [(4, 2), (5, 3), (1, 1)])
def test_to_observable_requests_in_batches(batch: int, refill: int) -> None:
    # As documented: batch, then batch - batch // 2 each time demand falls to batch // 2.
    record = Recording(RangePublisher(0, 20))
    assert to_observable(record, batch=batch).pipe(ops.to_list()).run() == list(range(20))
    assert record.requests[0] == batch and set(record.requests[1:]) == {refill}
    assert record.max_in_flight <= batch


def test_to_observable_from_a_threaded_publisher() -> None:
    record = Recording(IterablePublisher(lambda: range(1000)))
    total = to_observable(record, batch=16).pipe(ops.sum()).run()
    assert total == sum(range(1000)) and record.max_in_flight <= 16


def test_dispose_cancels_the_subscription() -> None:
    def endless() -> Iterator[int]:
        i = 0
        while True:
            yield i
            i += 1

    record = Recording(IterablePublisher(endless))
    assert to_observable(record, batch=8).pipe(ops.take(5), ops.to_list()).run() == \
        [0, 1, 2, 3, 4]
    assert record.cancelled.wait(WAIT)
    assert record.requested <= 5 + 8


def test_to_observable_passes_the_error_on() -> None:
    def failing() -> Iterator[int]:
        yield 1
        raise Boom("publisher broke")

    seen: list[Any] = []
    done = threading.Event()
    to_observable(IterablePublisher(failing)).subscribe(
        seen.append, lambda e: (seen.append(e), done.set()), done.set)
    assert done.wait(WAIT)
    assert seen[0] == 1 and isinstance(seen[1], Boom) and len(seen) == 2


def test_each_observer_gets_its_own_subscription() -> None:
    observable = to_observable(RangePublisher(0, 3), batch=2)
    assert observable.pipe(ops.to_list()).run() == [0, 1, 2]
    assert observable.pipe(ops.to_list()).run() == [0, 1, 2]


@pytest.mark.parametrize("bad", [0, -2, 1.0, None])
def test_batch_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"batch must be a positive int .*, got "):
        to_observable(RangePublisher(0, 1), batch=bad)


def test_round_trip() -> None:
    publisher = from_observable(reactivex.range(0, 50).pipe(
        ops.subscribe_on(NewThreadScheduler())), overflow="block", buffer_size=4)
    assert to_observable(publisher, batch=3).pipe(ops.to_list()).run() == list(range(50))


# -- the extra --------------------------------------------------------------------------------


def test_without_reactivex_the_import_error_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['reactivex'] = None  # as if not installed\n"
        "import reactive_streams.adapters.aio  # needs no extra\n"
        "try:\n"
        "    import reactive_streams.adapters.rx\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n")
    result = run_python(code)
    assert result.stdout.startswith("MissingExtraError reactive_streams.adapters.rx needs "
                                    "'reactivex', which is not installed: pip install "
                                    "'pyspark-reactive[rx]'"), result.stdout


# -- TCK: from_observable -------------------------------------------------------------------


class SourceUnavailableError(Exception):
    pass


class FromObservableVerification(PublisherVerification[int]):
    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=300,
                               default_no_signals_timeout_millis=20)

    def create_failed_publisher(self) -> Publisher[int] | None:
        return from_observable(reactivex.throw(SourceUnavailableError("unavailable")),
                               overflow="error", buffer_size=4)

    def stochastic_runs(self, default: int) -> int:
        return 20


class TestFromSynchronousRange(FromObservableVerification):
    """A plain range emits everything at subscription: it must fit the buffer."""

    def create_publisher(self, elements: int) -> Publisher[int]:
        return from_observable(reactivex.range(0, elements), overflow="error", buffer_size=32)

    def max_elements_from_publisher(self) -> int:
        return 32


class TestFromRangeOnAThreadBlocking(FromObservableVerification):
    """A range emitting on a thread of its own, held back by demand: any length."""

    def create_publisher(self, elements: int) -> Publisher[int]:
        observable = reactivex.range(0, elements).pipe(ops.subscribe_on(NewThreadScheduler()))
        return from_observable(observable, overflow="block", buffer_size=4)
