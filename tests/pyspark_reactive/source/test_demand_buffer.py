"""The source's subscriber on its own: the demand window, and the TCK's blackbox
verification (it is a Subscriber the project ships)."""

from __future__ import annotations

import inspect
import sys
import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from spark_publishers import Recording, RecordingPublisher

from pyspark_reactive.source.arrow_elements import arrow_batches
from pyspark_reactive.source.demand_buffer import DemandBuffer, PublisherError
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


def test_the_nudge_is_set_once_per_hold_not_once_per_element() -> None:
    # Setting an Event takes a lock: once per element it made every on_next past the
    # threshold about four times slower while the log's thread was converting.
    buffer = DemandBuffer(100, own_thread=False)
    buffer.on_subscribe(_Silent())
    nudge = buffer.nudge_when(5)
    for i in range(4):
        buffer.on_next(i)
    assert not nudge.is_set()
    buffer.on_next(4)
    assert nudge.is_set()
    nudge.clear()
    for i in range(5, 20):
        buffer.on_next(i)
    assert not nudge.is_set(), "set again before its holder took what was there"
    assert buffer.hold() == list(range(20))
    for i in range(20, 24):
        buffer.on_next(i)
    assert not nudge.is_set()
    buffer.on_next(24)
    assert nudge.is_set()
    buffer.close()


def test_a_waiting_taker_is_woken_as_its_threshold_is_crossed() -> None:
    buffer = DemandBuffer(1000, own_thread=False)
    buffer.on_subscribe(_Silent())
    woke = threading.Event()

    def wait() -> None:
        if buffer.wait(500, timeout=30):
            woke.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    # Wait for the taker to be waiting, by its own flag, not by sleeping.
    deadline = time.monotonic() + 10
    while not buffer._wanted and time.monotonic() < deadline:
        time.sleep(0.001)
    for i in range(499):
        buffer.on_next(i)
    assert not woke.wait(0.05)
    began = time.monotonic()
    buffer.on_next(499)
    assert woke.wait(10)
    waiter.join(10)
    assert time.monotonic() - began < 5, "woken by the wait's timeout, not by the element"
    buffer.close()


# -- Arrow mode: RecordBatch elements, counted in rows --------------------------------------

def _batch(values: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(values, pa.int64())], names=["value"])


def _batches(sizes: list[int]) -> list[pa.RecordBatch]:
    batches, first = [], 0
    for size in sizes:
        batches.append(_batch(range(first, first + size)))
        first += size
    return batches


def _values(batches: list[pa.RecordBatch]) -> list[int]:
    return [v for batch in batches for v in batch.column(0).to_pylist()]


# pyarrow's first pa.array() imports pandas (about a second): not within a TCK timeout.
_batch([0])


class TestDemandBufferArrowBlackbox(SubscriberBlackboxVerification[pa.RecordBatch]):
    def create_subscriber(self) -> Subscriber[pa.RecordBatch]:
        return DemandBuffer(4, arrow=True)

    def trigger_request(self, subscriber: Subscriber[pa.RecordBatch]) -> None:
        assert isinstance(subscriber, DemandBuffer)
        subscriber.take(subscriber.capacity)

    def create_element(self, element: int) -> pa.RecordBatch:
        return _batch([element])


def test_arrow_batches_are_requested_one_at_a_time_and_taken_in_rows(tmp_path: Any) -> None:
    record = str(tmp_path / "requests.jsonl")
    sizes = [7, 3, 12, 1, 0, 9, 8]
    buffer = DemandBuffer(10)
    buffer.start(arrow_batches(RecordingPublisher(
        IterablePublisher(_batches(sizes)), record)))
    taken: list[pa.RecordBatch] = []
    cuts: list[int] = []
    while sum(cuts) < sum(sizes):
        assert buffer.wait(10, timeout=10)
        # Below capacity a batch is requested; none beyond it: rows stay under capacity
        # plus one batch.
        assert buffer.buffered < 10 + max(sizes)
        batch = buffer.take(10)
        cuts.append(sum(b.num_rows for b in batch))
        taken += batch
    assert buffer.wait(1, timeout=10) and buffer.completed
    buffer.close()
    assert _values(taken) == list(range(sum(sizes)))
    assert cuts == [10, 10, 10, 10]
    seen = Recording(record)
    assert set(seen.requests) == {1}
    assert seen.max_outstanding == 1 and buffer.max_outstanding == 1
    assert buffer.received == sum(sizes) and buffer.arrow


def test_the_first_element_decides_arrow_mode_when_not_declared() -> None:
    buffer = DemandBuffer(5)
    buffer.start(IterablePublisher(_batches([3, 4, 2])))
    assert buffer.wait(5, timeout=10)
    assert buffer.arrow
    taken = buffer.take(5) + buffer.take(5, wait=10)
    assert [b.num_rows for b in taken] == [3, 2, 2, 2]
    assert _values(taken) == list(range(9))
    assert buffer.completed
    buffer.close()


def test_arrow_limit_demand_counts_rows_as_they_arrive(tmp_path: Any) -> None:
    record = str(tmp_path / "requests.jsonl")
    buffer = DemandBuffer(100)
    buffer.limit_demand(25)
    buffer.start(arrow_batches(RecordingPublisher(
        IterablePublisher(_batches([10] * 100)), record)))
    began = time.monotonic()
    # Waits only for what can come: three batches bring 30 >= 25 rows, then no request.
    assert buffer.wait(100, timeout=10)
    assert time.monotonic() - began < 5
    assert buffer.buffered == 30 and buffer.outstanding == 0
    assert _values(buffer.take(100)) == list(range(30))
    buffer.close()
    assert Recording(record).requests == [1, 1, 1]


def test_more_batches_than_demand_ends_the_stream_with_an_error() -> None:
    # Full after the first batch (5 rows of 5), so no second one is requested.
    buffer = DemandBuffer(5, own_thread=False, arrow=True)

    class Flood(RangePublisher):
        def subscribe(self, subscriber: Subscriber[Any]) -> None:
            subscriber.on_subscribe(_Silent())
            for batch in _batches([5, 5]):
                subscriber.on_next(batch)

    buffer.start(Flood(0, 0))
    assert _values(buffer.take(100)) == list(range(5))
    assert isinstance(buffer.error, PublisherError)
    assert "§1.1: the publisher signalled 2 elements for a total demand of 1" in str(
        buffer.error)


def test_arrow_drain_counts_rows() -> None:
    buffer = DemandBuffer(100, own_thread=False, arrow=True)
    buffer.on_subscribe(_Silent())
    buffer.on_next(_batches([4])[0])
    assert buffer.buffered == 4
    buffer.cancel()
    assert _values(buffer.drain()) == [0, 1, 2, 3]
    assert buffer.buffered == 0
    buffer.on_next(_batches([2])[0])
    assert buffer.buffered == 0 and buffer.refused == 1
    buffer.close()


def test_the_first_element_s_arrival_and_rows_are_recorded() -> None:
    rows = DemandBuffer(10, own_thread=False)
    rows.on_subscribe(_Silent())
    assert rows.first_at is None
    began = time.monotonic()
    rows.on_next("a")
    rows.on_next("b")
    assert rows.first_at is not None and began <= rows.first_at <= time.monotonic()
    assert rows.first_rows == 1
    batches = DemandBuffer(100, own_thread=False, arrow=True)
    batches.on_subscribe(_Silent())
    batches.on_next(_batch([1, 2, 3]))
    assert batches.first_at is not None and batches.first_rows == 3
    rows.close()
    batches.close()


# -- the window and the allowance, changed while elements come and go -----------------------

class _Counting(Subscription):
    """A subscription that only adds up what was requested (the test signals)."""

    def __init__(self) -> None:
        self.total = 0
        self.cancelled = False

    def request(self, n: int) -> None:
        self.total += n

    def cancel(self) -> None:
        self.cancelled = True


class _Window(RuleBasedStateMachine):
    """What the source and its intake do to a buffer, in any order: take, hold, release
    what was held (the intake's left-out elements), limit_demand and resize; each mode
    adds how elements arrive, reopen, and its invariant."""

    arrow = False

    def __init__(self) -> None:
        super().__init__()
        self.buffer = DemandBuffer(10, own_thread=False, arrow=self.arrow)
        self.subscription = _Counting()
        self.buffer.on_subscribe(self.subscription)
        self.taken: list[Any] = []
        self.held = 0  # held by hold()'s caller and not yet released (Arrow: rows)
        self.capacity = 10
        self.most_requested: int | None = None  # what limit_demand allows in all

    @rule(n=st.integers(1, 30))
    def take(self, n: int) -> None:
        self.taken += self.buffer.take(n)

    @rule()
    def hold(self) -> None:
        held = self.buffer.hold()
        self.taken += held  # in order: nothing before them is still here
        self.held += self.buffer.count(held)

    @rule(n=st.integers(1, 30))
    def release(self, n: int) -> None:
        n = min(n, self.held)
        self.held -= n
        self.buffer.release(n)

    @rule(more=st.none() | st.integers(0, 30))
    def limit_demand(self, more: int | None) -> None:
        self.buffer.limit_demand(more)
        self.most_requested = None if more is None else self.buffer._requested + more

    @rule(capacity=st.integers(1, 30))
    def resize(self, capacity: int) -> None:
        self.buffer.resize(capacity)
        self.capacity = capacity

    def teardown(self) -> None:
        self.buffer.close()


class _RowWindow(_Window):
    """A row stream's buffer: demand issued never takes ``buffered + outstanding`` past
    the window, never exceeds the allowance, and is all made on the subscription."""

    def __init__(self) -> None:
        super().__init__()
        self.signalled = 0
        self.before = 0  # _requested before the rule

    def window(self) -> int:
        return self.buffer._requested - self.buffer._released

    @rule(n=st.integers(0, 30))
    def signal(self, n: int) -> None:
        for _ in range(min(n, self.buffer.outstanding)):
            self.buffer.on_next(self.signalled)
            self.signalled += 1

    @rule(capacity=st.integers(1, 30))
    def reopen(self, capacity: int) -> None:
        self.buffer.reopen(capacity)
        self.capacity, self.most_requested = capacity, None
        # The allowance is lifted and what the window has room for is requested at once.
        assert self.window() >= capacity

    @invariant()
    def demand_keeps_the_window_and_the_allowance(self) -> None:
        buffer = self.buffer
        assert buffer.capacity == self.capacity
        assert self.subscription.total == buffer._requested, "counted and not requested"
        assert buffer.buffered + buffer.outstanding == self.window()
        if buffer._requested > self.before:
            # Demand issued by this rule fits the window; a smaller window (resize,
            # reopen) is reached as elements are taken, without new demand meanwhile.
            assert self.window() <= self.capacity
        if self.most_requested is not None:
            assert buffer._requested <= self.most_requested
        assert self.taken == list(range(len(self.taken)))
        self.before = buffer._requested


class _ArrowWindow(_Window):
    """The same in Arrow mode: rows counted, one batch at a time, requested only while
    fewer rows than the window are buffered and the allowance (in rows) is not used up."""

    arrow = True
    most_rows = 6

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0

    @rule(rows=st.integers(0, most_rows))
    def signal(self, rows: int) -> None:
        if self.buffer.outstanding:
            self.buffer.on_next(_batch(range(self.rows, self.rows + rows)))
            self.rows += rows

    @rule(capacity=st.integers(1, 30))
    def reopen(self, capacity: int) -> None:
        self.buffer.reopen(capacity)
        self.capacity = capacity
        buffer = self.buffer
        assert buffer._allowance is None
        # Room in the window and nothing outstanding: a batch is requested at once.
        assert buffer.outstanding == 1 or buffer.buffered >= capacity

    @invariant()
    def one_batch_at_a_time_within_the_window(self) -> None:
        buffer = self.buffer
        assert buffer.capacity == self.capacity
        assert self.subscription.total == buffer._requested
        assert buffer.outstanding in (0, 1)
        if buffer.outstanding:
            # Requested while fewer than capacity rows were buffered (then the window
            # may have shrunk, and held rows may have been taken since).
            assert buffer._received - buffer._released < 30 + self.most_rows
        assert _values(self.taken) == list(range(len(_values(self.taken))))


_settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestRowWindow = _RowWindow.TestCase
TestRowWindow.settings = _settings
TestArrowWindow = _ArrowWindow.TestCase
TestArrowWindow.settings = _settings


def test_release_on_another_thread_while_the_window_reopens() -> None:
    # The source's runner cuts a first batch (limit_demand(0)) and reopens the window when
    # Spark asks for a second, while the intake's thread releases elements it left out
    # (badPayloads=skip). A release that saw the allowance change half way raised a
    # TypeError inside the intake (its log entry already written: rows twice) or issued
    # demand past the window. Real threads; a tiny switch interval makes them interleave
    # inside the buffer's methods.
    capacity, rounds = 500, 150
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(rounds):
            subscription = _Counting()
            buffer = DemandBuffer(capacity, own_thread=False)
            buffer.on_subscribe(subscription)
            for i in range(capacity):
                buffer.on_next(i)
            held = buffer.hold()  # the intake holds them, then leaves them out one by one
            errors: list[BaseException] = []
            together = threading.Barrier(2, timeout=10)

            def leave_out(buffer: DemandBuffer = buffer, held: list[Any] = held,
                          errors: list[BaseException] = errors,
                          together: threading.Barrier = together) -> None:
                try:
                    together.wait()
                    for _ in held:
                        buffer.release(1)
                except BaseException as error:
                    errors.append(error)

            intake = threading.Thread(target=leave_out)
            intake.start()
            together.wait()
            deadline = time.monotonic() + 10
            while intake.is_alive() and time.monotonic() < deadline:
                buffer.limit_demand(0)
                buffer.reopen(capacity)
            intake.join(10)
            assert not intake.is_alive(), "the intake's releases did not finish in 10 s"
            assert errors == [], errors
            # Every release seen whole: what was counted was requested, and the window,
            # reopened last, is exactly full (no demand lost, none beyond it).
            assert subscription.total == buffer._requested
            assert buffer.buffered == 0
            assert buffer.outstanding == capacity, buffer.outstanding
            assert buffer.max_outstanding <= capacity
            buffer.close()
    finally:
        sys.setswitchinterval(interval)


def test_reopen_before_on_subscribe_is_the_window_on_subscribe() -> None:
    buffer = DemandBuffer(10, own_thread=False)
    buffer.limit_demand(0)
    buffer.reopen(25)
    subscription = _Counting()
    buffer.on_subscribe(subscription)
    assert subscription.total == 25 and buffer.outstanding == 25
    with pytest.raises(ValueError, match="capacity must be an int >= 1"):
        buffer.reopen(0)
    buffer.close()
