"""The shared signalling core, driven through small sources written for each rule."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from rs_support import Recorder

from reactive_streams import UNBOUNDED
from reactive_streams.signalling import (
    CHUNK,
    COMPLETE,
    Emitter,
    SerialWorker,
    Source,
    Terminal,
    first_none,
)


class Counting(Source[int]):
    """0, 1, 2, ... up to ``stop`` (or forever); counts pulls and closes."""

    def __init__(self, stop: int | None = None) -> None:
        self.next = 0
        self.stop = stop
        self.closed = 0
        self.pulls: list[int] = []

    def pull(self, n: int) -> tuple[Sequence[int], Terminal | None]:
        self.pulls.append(n)
        high = self.next + n if self.stop is None else min(self.next + n, self.stop)
        out = range(self.next, high)
        self.next = high
        return out, (COMPLETE if high == self.stop else None)

    def close(self) -> None:
        self.closed += 1


class Pushed(Source[int]):
    """Elements appended from other threads; ``Emitter.signal`` announces them."""

    def __init__(self) -> None:
        self.ready: list[int] = []
        self.lock = threading.Lock()
        self.terminal: Terminal | None = None

    def pull(self, n: int) -> tuple[Sequence[int], Terminal | None]:
        with self.lock:
            taken, self.ready = self.ready[:n], self.ready[n:]
            return taken, (self.terminal if not self.ready else None)


def test_unbounded_demand_is_never_used_up() -> None:
    recorder = Recorder()
    emitter = Emitter(recorder, Counting(stop=3 * CHUNK))
    emitter.start()
    recorder.request(UNBOUNDED)
    assert len(recorder.elements) == 3 * CHUNK and recorder.completions == 1
    recorder.assert_clean()


def test_demand_is_capped_at_unbounded_and_counted_down_below_it() -> None:
    recorder = Recorder()
    capped = Emitter(recorder, Pushed())  # nothing ready: demand just accumulates
    capped.start()
    for n in (UNBOUNDED // 2, UNBOUNDED // 2, 1):  # §3.17: cumulative to exactly MAX
        capped.request(n)
    assert capped.demand == UNBOUNDED
    capped.request(UNBOUNDED)
    assert capped.demand == UNBOUNDED and recorder.errors == []

    bounded = Emitter(Recorder(), Counting(stop=100))
    bounded.start()
    bounded.request(7)
    assert bounded.demand == 0  # 7 delivered, 7 used up
    bounded.request(UNBOUNDED - 1)
    bounded.request(UNBOUNDED - 1)
    assert bounded.done


def test_demand_made_unbounded_during_a_chunk_stays_unbounded() -> None:
    class Greedy(Recorder):
        def handle(self, element: Any) -> None:
            if element == 0:
                self.request(UNBOUNDED)

    source = Pushed()
    source.ready = [0, 1, 2]
    recorder = Greedy()
    emitter = Emitter(recorder, source)
    emitter.start()
    recorder.request(3)
    assert recorder.elements == [0, 1, 2]
    assert emitter.demand == UNBOUNDED


def test_illegal_request_during_an_unbounded_delivery_fails_the_stream_at_once() -> None:
    class Rogue(Recorder):
        def handle(self, element: Any) -> None:
            if element == 9:
                assert self.subscription is not None
                self.subscription.request(0)  # §3.9, while unbounded demand is served

    recorder = Rogue()
    Emitter(recorder, Counting()).start()  # endless: only the error can stop it
    recorder.request(UNBOUNDED)
    assert len(recorder.elements) == 10
    assert [type(e) for e in recorder.errors] == [ValueError]


def test_request_with_a_non_int_is_signalled_as_type_error() -> None:
    recorder = Recorder()
    Emitter(recorder, Counting(stop=5)).start()
    assert recorder.subscription is not None
    recorder.subscription.request(1.5)  # type: ignore[arg-type]
    assert len(recorder.errors) == 1 and isinstance(recorder.errors[0], TypeError)
    assert "§3.9" in str(recorder.errors[0])


def test_source_failure_becomes_on_error_and_closes_the_source_once() -> None:
    class Failing(Counting):
        def pull(self, n: int) -> tuple[Sequence[int], Terminal | None]:
            if self.next >= 4:
                raise OSError("disk gone")
            return super().pull(min(n, 4))  # fewer than asked: "nothing more ready now"

    source = Failing()
    recorder = Recorder(initial=10)
    Emitter(recorder, source).start()
    recorder.request(1)  # a later pull raises, at the latest on this signal
    assert recorder.elements == [0, 1, 2, 3]
    assert [type(e) for e in recorder.errors] == [OSError]
    assert source.closed == 1


def test_subscriber_raising_from_on_next_is_cancelled_and_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    class Raising(Recorder):
        def handle(self, element: Any) -> None:
            if element == 2:
                raise RuntimeError("subscriber bug")

    source = Counting(stop=100)
    recorder = Raising()
    Emitter(recorder, source).start()
    with caplog.at_level(logging.ERROR, logger="reactive_streams"):
        recorder.request(10)
        recorder.request(10)  # a NOP now: the subscription is treated as cancelled
    assert recorder.elements == [0, 1, 2]
    assert recorder.terminals == 0
    assert source.closed == 1
    assert any("§2.13" in r.getMessage() and "on_next" in r.getMessage()
               for r in caplog.records)
    assert "subscriber bug" in caplog.text  # the traceback is logged, not swallowed


def test_subscriber_raising_from_on_subscribe_gets_nothing_more(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Recorder):
        def on_subscribe(self, subscription: Any) -> None:
            super().on_subscribe(subscription)
            subscription.request(3)
            raise ValueError("cannot start")

    source = Counting(stop=10)
    recorder = Broken()
    with caplog.at_level(logging.ERROR, logger="reactive_streams"):
        Emitter(recorder, source).start()
    assert recorder.elements == [] and recorder.terminals == 0
    assert source.closed == 1
    assert "on_subscribe" in caplog.text


def test_subscriber_raising_from_on_complete_is_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Recorder):
        def on_complete(self) -> None:
            raise ValueError("late bug")

    with caplog.at_level(logging.ERROR, logger="reactive_streams"):
        Emitter(Broken(initial=5), Counting(stop=2)).start()
    assert "on_complete" in caplog.text and "late bug" in caplog.text


def test_refused_dispatch_fails_the_stream_inline() -> None:
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    recorder = Recorder()
    emitter = Emitter(recorder, Counting(stop=10), dispatch=pool.submit)
    emitter.start()  # on_subscribe must still arrive, then the failure
    assert recorder.subscribed.is_set()
    assert [type(e) for e in recorder.errors] == [RuntimeError]
    assert "refused" in str(recorder.errors[0])


class FailsOnce(SerialWorker):
    """A worker whose first turn raises; later turns are counted."""

    def __init__(self, dispatch: Any) -> None:
        super().__init__(dispatch)
        self.turns = 0
        self.failures: list[BaseException] = []
        self.failed = threading.Event()
        self.ran_again = threading.Event()

    def _work(self) -> bool:
        self.turns += 1
        if self.turns == 1:
            raise LookupError("bug in the first turn")
        self.ran_again.set()
        return False

    def _work_failed(self, error: BaseException) -> None:
        self.failures.append(error)
        self.failed.set()


def test_a_loop_raising_on_a_pool_is_logged_and_leaves_the_worker_usable(
        caplog: pytest.LogCaptureFixture) -> None:
    # The dispatch discards what the pool returns, so nothing but the worker itself can
    # report the exception; and its in-progress counter must not stay raised.
    with ThreadPoolExecutor(1) as pool, \
            caplog.at_level(logging.ERROR, logger="reactive_streams"):
        worker = FailsOnce(pool.submit)
        worker._schedule()
        assert worker.failed.wait(5), "the failure of the loop was not handed to the worker"
        assert [type(e) for e in worker.failures] == [LookupError]
        worker._schedule()  # the counter went down: a new loop runs
        assert worker.ran_again.wait(5), "the worker never ran again after its loop raised"
    records = [r for r in caplog.records if r.name == "reactive_streams"]
    assert records and records[0].exc_info is not None, "logged without its traceback"
    assert "bug in the first turn" in caplog.text


def test_an_emitter_whose_loop_raises_on_a_pool_fails_the_subscription_and_releases(
        caplog: pytest.LogCaptureFixture) -> None:
    class NotASequence(Counting):
        def pull(self, n: int) -> tuple[Sequence[int], Terminal | None]:
            elements, terminal = super().pull(n)
            # Breaks the Source contract (a Sequence): len() fails inside the loop.
            return (iter(elements) if elements else elements), terminal  # type: ignore[return-value]

    source = NotASequence(stop=100)
    recorder = Recorder()
    with ThreadPoolExecutor(2) as pool, \
            caplog.at_level(logging.ERROR, logger="reactive_streams"):
        emitter = Emitter(recorder, source, dispatch=pool.submit)
        emitter.start()
        assert recorder.subscribed.wait(5)
        recorder.request(3)
        recorder.wait_done(timeout=5)
    assert recorder.elements == [0, 1, 2]
    assert [type(e) for e in recorder.errors] == [TypeError]
    assert emitter.done and source.closed == 1  # §3.13: released
    recorder.assert_clean()
    assert any(r.exc_info is not None for r in caplog.records
               if r.name == "reactive_streams"), "the loop's exception was not logged"


def test_signals_are_serialised_when_requests_and_pushes_race() -> None:
    """§1.3 under load: elements pushed from one thread, requests from three more."""
    for _ in range(20):
        with ThreadPoolExecutor(3) as pool:
            source = Pushed()
            recorder = Recorder()
            emitter = Emitter(recorder, source, dispatch=pool.submit)
            emitter.start()
            assert recorder.subscribed.wait(5)
            go = threading.Barrier(4)

            def push(go: threading.Barrier, source: Pushed, emitter: Emitter[int]) -> None:
                go.wait()
                for i in range(300):
                    with source.lock:
                        source.ready.append(i)
                    emitter.signal()
                with source.lock:
                    source.terminal = COMPLETE
                emitter.signal()

            def ask(go: threading.Barrier, recorder: Recorder) -> None:
                go.wait()
                for _ in range(100):
                    recorder.request(1)

            threads = [threading.Thread(target=push, args=(go, source, emitter))] + [
                threading.Thread(target=ask, args=(go, recorder)) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            recorder.wait_done()
            recorder.assert_clean()
            assert recorder.elements == list(range(300))


def test_an_endless_subscription_does_not_starve_others_on_the_same_dispatcher() -> None:
    with ThreadPoolExecutor(1) as pool:
        first, second = Recorder(), Recorder()
        e1 = Emitter(first, Counting(), dispatch=pool.submit)
        e2 = Emitter(second, Counting(), dispatch=pool.submit)
        e1.start()
        e2.start()
        assert first.subscribed.wait(5) and second.subscribed.wait(5)
        first.request(UNBOUNDED)  # would hold the only thread forever without yielding
        second.request(5)
        second.wait_for_elements(5)
        first.wait_for_elements(3 * CHUNK)  # and the first keeps going meanwhile
        assert e1.demand == UNBOUNDED
        e1.cancel()
        e2.cancel()


def test_cancel_from_many_threads_closes_once_and_is_idempotent() -> None:
    source = Counting()
    recorder = Recorder(initial=3)
    emitter = Emitter(recorder, source)
    emitter.start()
    threads = [threading.Thread(target=emitter.cancel) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert source.closed == 1 and emitter.done and emitter.cancelled
    recorder.request(5)  # §3.6: a NOP after cancel
    assert recorder.elements == [0, 1, 2] and recorder.terminals == 0


def test_terminal_signal_needs_no_demand() -> None:
    recorder = Recorder()
    Emitter(recorder, Counting(stop=0)).start()
    assert recorder.completions == 1 and recorder.elements == []


@pytest.mark.parametrize(("elements", "expected"), [
    ([], None), ([1, 2], None), ([None], 0), ([1, 2, None, None], 2), ([0, "", (), None], 3)])
def test_first_none_finds_none_by_identity(elements: list[Any], expected: int | None) -> None:
    assert first_none(elements) == expected


def test_first_none_does_not_compare_elements() -> None:
    class Touchy:
        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared")

        __hash__ = object.__hash__

    assert first_none([Touchy(), Touchy()]) is None


def test_request_from_on_subscribe_is_served_after_on_subscribe_returns() -> None:
    order: list[str] = []

    class Eager(Recorder):
        def on_subscribe(self, subscription: Any) -> None:
            super().on_subscribe(subscription)
            self.request(2)
            order.append("on_subscribe returned")

        def handle(self, element: Any) -> None:
            order.append(f"on_next {element}")

    Emitter(Eager(), Counting(stop=10)).start()
    assert order == ["on_subscribe returned", "on_next 0", "on_next 1"]


def _drive(make_source: Callable[[], Source[int]], requests: list[int]) -> Recorder:
    recorder = Recorder()
    Emitter(recorder, make_source()).start()
    for n in requests:
        recorder.request(n)
    return recorder


def test_pulls_never_ask_for_more_than_demand_or_a_chunk() -> None:
    source = Counting()
    recorder = Recorder()
    Emitter(recorder, source).start()
    for n in (1, 5, CHUNK + 3):
        recorder.request(n)
    assert max(source.pulls) <= CHUNK
    assert sum(source.pulls) == 1 + 5 + CHUNK + 3
    assert len(recorder.elements) == sum(source.pulls)
    recorder.cancel()


def test_counting_is_exact_over_many_small_requests() -> None:
    recorder = _drive(lambda: Counting(stop=10_000), [3] * 4000)
    assert recorder.elements == list(range(10_000)) and recorder.completions == 1
    recorder.assert_clean()
