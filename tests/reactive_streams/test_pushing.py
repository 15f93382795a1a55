"""reactive_streams.create: a Publisher from code that pushes, with demand reaching it
(``on_request``, ``requested``) and an explicit overflow policy for what it pushes beyond
demand; the TCK as oracle under each policy, with a thread that produces."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from rs_support import Recorder

from reactive_streams import Publisher, Subscription, collect, create
from reactive_streams.pushing import BufferOverflowError, Sink
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import PublisherVerification

WAIT = 10.0  # seconds for something that must happen


def paced(count: int | None) -> Any:
    """``setup`` of a thread that pushes 0, 1, 2, ... (``count`` of them, endless without)
    only while the subscriber awaits elements, pausing while ``sink.requested`` is 0 and
    resuming in ``on_request``: the pattern the docs show for a callback client."""
    def setup(sink: Sink[int]) -> None:
        wake = threading.Event()
        sink.on_request(lambda n: wake.set())
        sink.on_dispose(wake.set)

        def produce() -> None:
            i = 0
            while count is None or i < count:
                while sink.requested == 0 and not sink.cancelled:
                    wake.wait(1.0)
                    wake.clear()
                if sink.cancelled:
                    return
                sink.next(i)
                i += 1
            sink.complete()

        threading.Thread(target=produce, name="paced-producer", daemon=True).start()
    return setup


def eager(count: int, done: threading.Event | None = None) -> Any:
    """``setup`` of a thread that pushes ``count`` elements at once, whatever the demand."""
    def setup(sink: Sink[int]) -> None:
        def produce() -> None:
            for i in range(count):
                sink.next(i)
            sink.complete()
            if done is not None:
                done.set()

        threading.Thread(target=produce, name="eager-producer", daemon=True).start()
    return setup


class PushVerification(PublisherVerification[int]):
    overflow: Any = "error"
    buffer_size = 0

    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=500,
                               default_no_signals_timeout_millis=50)

    def create_publisher(self, elements: int) -> Publisher[int]:
        return create(paced(elements), overflow=self.overflow, buffer_size=self.buffer_size)

    def create_failed_publisher(self) -> Publisher[int] | None:
        def setup(sink: Sink[int]) -> None:
            raise ConnectionRefusedError("the client could not reach its broker")
        return create(setup, overflow=self.overflow, buffer_size=self.buffer_size)

    def stochastic_runs(self, default: int) -> int:
        return 20


class TestCreateErrorAtOnce(PushVerification):
    overflow, buffer_size = "error", 0


class TestCreateBoundedBuffer(PushVerification):
    overflow, buffer_size = "error", 16


class TestCreateDropLatest(PushVerification):
    overflow, buffer_size = "drop_latest", 16


class TestCreateKeepLatest(PushVerification):
    overflow, buffer_size = "drop_oldest", 1


class TestCreateBlock(PushVerification):
    overflow, buffer_size = "block", 0

    def create_publisher(self, elements: int) -> Publisher[int]:
        # A thread that pushes as fast as it can: sink.next waits for demand.
        def setup(sink: Sink[int]) -> None:
            def produce() -> None:
                i = 0
                while i < elements and not sink.cancelled:
                    sink.next(i)
                    i += 1
                sink.complete()

            threading.Thread(target=produce, name="blocking-producer", daemon=True).start()
        return create(setup, overflow="block", buffer_size=0)


# -- each policy with a client that pushes whatever the demand ------------------------------


def test_error_fails_the_stream_once_the_buffer_beyond_demand_is_full() -> None:
    disposed = threading.Event()

    def setup(sink: Sink[int]) -> None:
        sink.on_dispose(disposed.set)
        eager(10)(sink)

    recorder = Recorder(1)
    create(setup, overflow="error", buffer_size=2).subscribe(recorder)
    recorder.wait_done(WAIT)
    [error] = recorder.errors
    assert isinstance(error, BufferOverflowError)
    assert "buffer_size=2" in str(error) and "sink.on_request" in str(error)
    assert recorder.elements == [0]  # requested, so signalled at once; 1 and 2 were held
    assert disposed.wait(WAIT)


def test_drop_latest_keeps_what_it_holds_and_counts_the_rest() -> None:
    done = threading.Event()
    subscriptions: list[Sink[int]] = []

    def setup(sink: Sink[int]) -> None:
        subscriptions.append(sink)
        eager(10, done)(sink)

    recorder = Recorder(0)
    create(setup, overflow="drop_latest", buffer_size=3).subscribe(recorder)
    assert done.wait(WAIT)
    recorder.request(100)
    recorder.wait_done(WAIT)
    assert recorder.elements == [0, 1, 2] and recorder.completions == 1
    assert subscriptions[0].dropped == 7


def test_drop_oldest_with_a_buffer_of_one_gives_the_latest_value() -> None:
    done = threading.Event()
    recorder = Recorder(0)
    create(eager(10, done), overflow="drop_oldest", buffer_size=1).subscribe(recorder)
    assert done.wait(WAIT)
    recorder.request(1)
    recorder.wait_done(WAIT)
    assert recorder.elements == [9] and recorder.completions == 1


def test_block_holds_the_producer_within_demand_and_buffer() -> None:
    ahead: list[int] = []
    pushed = [0]

    def setup(sink: Sink[int]) -> None:
        def produce() -> None:
            for i in range(50):
                sink.next(i)
                pushed[0] = i + 1
            sink.complete()

        threading.Thread(target=produce, daemon=True).start()

    class Slow(Recorder):
        def handle(self, element: Any) -> None:
            ahead.append(pushed[0] - len(self.elements))
            self.request(1)

    recorder = Slow(1)
    collected_from = create(setup, overflow="block", buffer_size=2)
    collected_from.subscribe(recorder)
    recorder.wait_done(WAIT)
    assert recorder.elements == list(range(50))
    assert max(ahead) <= 2 + 1  # the buffer, and the one requested in flight


def test_block_on_the_subscribing_thread_fails_rather_than_hangs() -> None:
    def setup(sink: Sink[int]) -> None:
        for i in range(3):
            sink.next(i)  # nothing requested yet, on the thread that subscribes

    recorder = Recorder(0)
    create(setup, overflow="block", buffer_size=1).subscribe(recorder)
    recorder.wait_done(WAIT)
    [error] = recorder.errors
    assert isinstance(error, RuntimeError) and "would deadlock" in str(error)


# -- the sink's hooks -------------------------------------------------------------------------


def test_on_request_gets_each_request_and_what_was_requested_before_it() -> None:
    seen: list[int] = []
    sinks: list[Sink[int]] = []

    def setup(sink: Sink[int]) -> None:
        sinks.append(sink)
        sink.on_request(seen.append)  # the subscriber requested 3 in on_subscribe

    recorder = Recorder(3)
    create(setup, overflow="error", buffer_size=0).subscribe(recorder)
    recorder.request(5)
    assert seen == [3, 5]
    assert sinks[0].requested == 8
    sinks[0].next(1)
    assert sinks[0].requested == 7


def test_a_cancel_runs_on_cancel_then_on_dispose_once_and_later_pushes_do_nothing() -> None:
    calls: list[str] = []
    sinks: list[Sink[int]] = []

    def setup(sink: Sink[int]) -> None:
        sinks.append(sink)
        sink.on_cancel(lambda: calls.append("cancel")).on_dispose(lambda: calls.append("dispose"))

    recorder = Recorder(1)
    create(setup, overflow="error", buffer_size=0).subscribe(recorder)
    assert recorder.subscription is not None
    recorder.subscription.cancel()
    recorder.subscription.cancel()
    sinks[0].next(1)
    assert calls == ["cancel", "dispose"]
    assert sinks[0].cancelled and sinks[0].requested == 0 and recorder.elements == []
    late: list[str] = []
    sinks[0].on_dispose(lambda: late.append("at once"))
    assert late == ["at once"]


def test_completion_runs_on_dispose_only_after_the_held_elements() -> None:
    calls: list[str] = []

    def setup(sink: Sink[int]) -> None:
        sink.on_cancel(lambda: calls.append("cancel")).on_dispose(lambda: calls.append("dispose"))
        sink.next(1)
        sink.next(2)
        sink.complete()

    recorder = Recorder(0)
    create(setup, overflow="error", buffer_size=2).subscribe(recorder)
    assert calls == [] and not recorder.completions == 1  # held until requested
    recorder.request(2)
    recorder.wait_done(WAIT)
    assert recorder.elements == [1, 2] and recorder.completions == 1 and calls == ["dispose"]


def test_a_setup_that_raises_fails_the_stream_with_its_error() -> None:
    def setup(sink: Sink[int]) -> None:
        raise ConnectionRefusedError("no broker at 127.0.0.1:1")

    with pytest.raises(ConnectionRefusedError, match="no broker"):
        collect(create(setup, overflow="error"), timeout=WAIT)


def test_a_hook_that_raises_is_logged_and_the_stream_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    def setup(sink: Sink[int]) -> None:
        sink.on_request(lambda n: 1 / 0)
        sink.next(7)
        sink.complete()

    assert collect(create(setup, overflow="error", buffer_size=1), timeout=WAIT) == [7]
    assert "a sink hook" in caplog.text and "ZeroDivisionError" in caplog.text


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"overflow": "buffer"}, "overflow must be one of 'error', 'drop_oldest'"),
    ({"overflow": "error", "buffer_size": -1}, "buffer_size must be an int >= 0"),
    ({"overflow": "error", "buffer_size": 1.5}, "buffer_size must be an int >= 0"),
])
def test_a_policy_not_accepted_is_refused_naming_it(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create(lambda sink: None, **kwargs)


def test_a_setup_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="setup must be a callable"):
        create("paho", overflow="error")  # type: ignore[arg-type]


def test_none_pushed_fails_the_stream_with_type_error() -> None:
    def setup(sink: Sink[Any]) -> None:
        sink.next(None)

    recorder = Recorder(1)
    create(setup, overflow="error").subscribe(recorder)
    recorder.wait_done(WAIT)
    assert isinstance(recorder.errors[0], TypeError) and "§2.13" in str(recorder.errors[0])


def test_every_signal_comes_one_at_a_time_within_demand() -> None:
    recorder = Recorder(0)
    create(paced(None), overflow="error", buffer_size=0).subscribe(recorder)
    assert isinstance(recorder.subscription, Subscription)
    for _ in range(20):
        recorder.request(7)
    recorder.wait_for_elements(140)
    recorder.cancel()
    assert recorder.elements[:140] == list(range(140))
    recorder.assert_clean()


def test_block_in_an_on_request_hook_fails_rather_than_hangs() -> None:
    def setup(sink: Sink[int]) -> None:
        def push_more(n: int) -> None:
            for i in range(n + 1):  # one beyond demand, on the requesting thread
                sink.next(i)
        sink.on_request(push_more)

    recorder = Recorder(0)
    create(setup, overflow="block", buffer_size=0).subscribe(recorder)
    requester = threading.Thread(target=recorder.request, args=(1,), daemon=True)
    requester.start()
    requester.join(WAIT)
    assert not requester.is_alive(), "request(1) hung in the on_request hook"
    recorder.wait_done(WAIT)
    [error] = recorder.errors
    assert isinstance(error, RuntimeError) and "would deadlock" in str(error)


def test_a_cancel_in_on_subscribe_starts_no_client() -> None:
    started: list[Sink[int]] = []

    class CancelAtOnce(Recorder):
        def on_subscribe(self, subscription: Subscription) -> None:
            super().on_subscribe(subscription)
            subscription.cancel()

    create(started.append, overflow="error").subscribe(CancelAtOnce(0))
    assert started == []


def test_on_cancel_registered_after_the_cancel_runs_at_once() -> None:
    sinks: list[Sink[int]] = []
    recorder = Recorder(0)
    create(sinks.append, overflow="error").subscribe(recorder)
    recorder.cancel()
    calls: list[str] = []
    sinks[0].on_cancel(lambda: calls.append("cancel")).on_dispose(lambda: calls.append("dispose"))
    assert calls == ["cancel", "dispose"]


def test_a_producer_blocked_when_the_stream_ends_returns_and_adds_nothing() -> None:
    sinks: list[Sink[int]] = []
    recorder = Recorder(0)
    create(sinks.append, overflow="block", buffer_size=0).subscribe(recorder)
    producer = threading.Thread(target=sinks[0].next, args=(1,), daemon=True)
    producer.start()
    producer.join(0.2)
    assert producer.is_alive()  # no demand: it waits
    sinks[0].complete()
    producer.join(WAIT)
    assert not producer.is_alive(), "the blocked producer did not return at the end"
    recorder.request(1)
    recorder.wait_done(WAIT)
    assert recorder.elements == [] and recorder.completions == 1
