"""reactive_streams.adapters.aio: ``async for`` over any Publisher (bounded demand, every
way of leaving the loop cancels) and a Publisher over an async iterable, with the TCK as
oracle for both sides."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

import pytest
from rs_support import Recorder, Recording, Silent, reporting, run_python

from reactive_streams import (
    AsyncIterablePublisher,
    IterablePublisher,
    Publisher,
    RangePublisher,
    Subscriber,
    Subscription,
)
from reactive_streams.adapters.aio import IteratorSubscriber, from_async_iterable, iterate
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import PublisherVerification
from reactive_streams.tck.subscriber_blackbox import SubscriberBlackboxVerification
from reactive_streams.tck.subscriber_whitebox import (
    SubscriberWhiteboxVerification,
    WhiteboxSubscriberProbe,
)

T = TypeVar("T")

WAIT = 10.0  # seconds for something that must happen


# -- helpers ---------------------------------------------------------------------------------


async def wait_event(event: threading.Event) -> bool:
    """Wait for a thread's event from a coroutine without blocking the loop."""
    return await asyncio.to_thread(event.wait, WAIT)


def endless() -> Iterator[int]:
    i = 0
    while True:
        yield i
        i += 1


# -- iterate: demand -----------------------------------------------------------------------


def test_iterates_a_threaded_publisher_with_at_most_prefetch_elements_ahead() -> None:
    record = Recording(IterablePublisher(lambda: range(2000)))

    async def main() -> list[int]:
        taken = []
        async for x in iterate(record, prefetch=16):
            taken.append(x)
            if x % 100 == 0:
                await asyncio.sleep(0.001)  # a consumer slower than the publisher now and then
        return taken

    assert asyncio.run(main()) == list(range(2000))
    assert record.requests[0] == 16
    assert all(n == 8 for n in record.requests[1:]), record.requests  # batches of prefetch // 2
    assert 0 < record.max_in_flight <= 16
    assert record.requested <= 2000 + 16


def test_a_consumer_that_stops_taking_stops_the_demand() -> None:
    record = Recording(IterablePublisher(endless))

    async def main() -> None:
        elements = iterate(record, prefetch=10)
        for _ in range(7):
            await anext(elements)
        # The publisher has acted on every request: 15 delivered, 8 of them buffered.
        assert await asyncio.to_thread(
            record.wait_for, lambda: record.delivered == record.requested == 15, WAIT)
        # Now the consumer takes nothing: no request may come, from any thread. (Waiting
        # for a request that must not come has to end somewhere; 0.3 s is the window.)
        assert not await asyncio.to_thread(
            record.wait_for, lambda: record.requested > 15 or record.cancelled.is_set(), 0.3)
        await elements.aclose()

    asyncio.run(main())
    assert record.requests == [10, 5]  # the refill after the 5th element taken
    assert record.max_in_flight <= 10
    assert record.cancelled.is_set()


def test_prefetch_of_one_requests_one_at_a_time() -> None:
    record = Recording(RangePublisher(0, 5))

    async def main() -> list[int]:
        return [x async for x in iterate(record, prefetch=1)]

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]
    assert record.requests == [1] * 5
    assert record.max_in_flight == 1


@pytest.mark.parametrize("bad", [0, -3, 1.5, "8", None, True])
def test_prefetch_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"prefetch must be a positive int .* got "):
        iterate(RangePublisher(0, 1), prefetch=bad)
    with pytest.raises(ValueError, match="prefetch"):
        IteratorSubscriber(bad)


def test_signals_from_other_threads_reach_the_loop() -> None:
    threads: set[int] = set()

    class Spy(IteratorSubscriber[int]):
        def on_next(self, element: int) -> None:
            threads.add(threading.get_ident())
            super().on_next(element)

    async def main() -> list[int]:
        spy = Spy(prefetch=4)
        IterablePublisher(lambda: range(50)).subscribe(spy)
        async with spy:
            return [x async for x in spy]

    assert asyncio.run(main()) == list(range(50))
    assert threading.get_ident() not in threads  # delivered from the publisher's threads


# -- iterate: every way out cancels ----------------------------------------------------------


def test_break_inside_aclosing_cancels_at_once() -> None:
    record = Recording(IterablePublisher(endless))

    async def main() -> None:
        async with contextlib.aclosing(iterate(record, prefetch=4)) as elements:
            async for x in elements:
                if x == 2:
                    break
        assert record.cancelled.is_set()  # before the block is left

    asyncio.run(main())


def test_break_without_aclosing_cancels_when_the_generator_is_finalised() -> None:
    record = Recording(IterablePublisher(endless))

    async def main() -> None:
        async for x in iterate(record, prefetch=4):
            if x == 2:
                break
        # The dropped generator is closed by the loop's async-generator finaliser.
        assert await wait_event(record.cancelled)

    asyncio.run(main())


def test_explicit_aclose_cancels_and_ends_the_iteration() -> None:
    record = Recording(IterablePublisher(endless))

    async def main() -> None:
        elements = iterate(record, prefetch=4)
        assert await anext(elements) == 0
        await elements.aclose()
        assert record.cancelled.is_set()
        with pytest.raises(StopAsyncIteration):
            await anext(elements)

    asyncio.run(main())


def test_cancelling_the_iterating_task_cancels_the_subscription() -> None:
    record = Recording(Silent())

    async def main() -> None:
        async def consume() -> None:
            async for _ in iterate(record, prefetch=4):
                pass

        task = asyncio.create_task(consume())
        assert await wait_event(record.subscribed)
        await asyncio.sleep(0)  # let the task reach its wait for an element
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert record.cancelled.is_set()

    asyncio.run(main())


def test_cancelling_a_task_waiting_on_an_iterator_subscriber_cancels_the_subscription() -> None:
    record = Recording(Silent())

    async def main() -> None:
        subscriber = IteratorSubscriber[int](prefetch=4)  # no generator's finally here
        record.subscribe(subscriber)

        async def consume() -> None:
            async for _ in subscriber:
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0)  # the task runs up to its wait in __anext__
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert record.cancelled.is_set()
        with pytest.raises(StopAsyncIteration):
            await anext(subscriber)

    asyncio.run(main())


def test_a_task_cancelled_in_the_loop_body_cancels_through_async_with() -> None:
    # As documented: outside __anext__ the cancellation does not reach the subscriber;
    # the async with block it leaves does.
    record = Recording(IterablePublisher(endless))

    async def main() -> None:
        body_waits = asyncio.Event()

        async def consume() -> None:
            async with IteratorSubscriber[int](prefetch=4) as elements:
                record.subscribe(elements)
                async for _ in elements:
                    body_waits.set()
                    await asyncio.Event().wait()  # the body awaits something else

        task = asyncio.create_task(consume())
        await body_waits.wait()
        assert not record.cancelled.is_set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert record.cancelled.is_set()

    asyncio.run(main())


def test_a_timeout_on_the_subscriber_cancels_the_subscription() -> None:
    record = Recording(Silent())

    async def main() -> None:
        subscriber = IteratorSubscriber[int](prefetch=2)
        record.subscribe(subscriber)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(subscriber), 0.05)
        assert record.cancelled.is_set()
        with pytest.raises(StopAsyncIteration):
            await anext(subscriber)

    asyncio.run(main())


def test_cancel_from_another_thread_wakes_the_waiting_consumer() -> None:
    async def main() -> list[int]:
        subscriber = IteratorSubscriber[int](prefetch=2)
        Silent().subscribe(subscriber)

        async def consume() -> list[int]:
            return [x async for x in subscriber]

        consumer = asyncio.create_task(consume())
        await asyncio.sleep(0)  # the consumer runs up to its wait for an element
        await asyncio.to_thread(subscriber.cancel)
        return await asyncio.wait_for(consumer, WAIT)

    assert asyncio.run(main()) == []


def test_cancel_twice_is_harmless() -> None:
    record = Recording(RangePublisher(0, 100))

    async def main() -> None:
        subscriber = IteratorSubscriber[int](prefetch=2)
        record.subscribe(subscriber)
        assert await anext(subscriber) == 0
        subscriber.cancel()
        subscriber.cancel()
        await subscriber.aclose()

    asyncio.run(main())
    assert record.cancelled.is_set()


# -- iterate: errors and violations ----------------------------------------------------------


class Boom(Exception):
    pass


def test_on_error_is_raised_after_the_elements_before_it() -> None:
    def failing() -> Iterator[int]:
        yield from range(3)
        raise Boom("the source broke")

    async def main() -> list[int]:
        taken: list[int] = []
        with pytest.raises(Boom, match="the source broke"):
            async for x in iterate(IterablePublisher(failing), prefetch=2):
                taken.append(x)
        return taken

    assert asyncio.run(main()) == [0, 1, 2]


def test_the_error_is_raised_once_then_the_iteration_is_over() -> None:
    async def main() -> None:
        subscriber = IteratorSubscriber[int]()
        subscriber.on_subscribe(_NoSubscription())
        subscriber.on_error(Boom("once"))
        with pytest.raises(Boom):
            await anext(subscriber)
        with pytest.raises(StopAsyncIteration):
            await anext(subscriber)

    asyncio.run(main())


class _NoSubscription(Subscription):
    def __init__(self) -> None:
        self.requests: list[int] = []
        self.cancels = 0

    def request(self, n: int) -> None:
        self.requests.append(n)

    def cancel(self) -> None:
        self.cancels += 1


def test_elements_beyond_demand_fail_the_iteration_and_cancel() -> None:
    subscription = _NoSubscription()

    async def main() -> list[int]:
        subscriber = IteratorSubscriber[int](prefetch=1)
        subscriber.on_subscribe(subscription)
        subscriber.on_next(1)
        subscriber.on_next(2)  # §1.1: only 1 was requested
        taken = []
        with pytest.raises(RuntimeError, match=r"§1.1: .*beyond the demand.*prefetch=1"):
            async for x in subscriber:
                taken.append(x)
        return taken

    assert asyncio.run(main()) == [1]
    assert subscription.requests == [1] and subscription.cancels == 1


def test_a_second_subscription_is_cancelled() -> None:
    first, second = _NoSubscription(), _NoSubscription()
    subscriber = IteratorSubscriber[int](prefetch=3)
    subscriber.on_subscribe(first)
    subscriber.on_subscribe(second)
    assert (first.requests, first.cancels) == ([3], 0)
    assert (second.requests, second.cancels) == ([], 1)


def test_two_tasks_cannot_wait_on_one_iterator() -> None:
    async def main() -> None:
        subscriber = IteratorSubscriber[int]()
        Silent().subscribe(subscriber)
        waiting = asyncio.create_task(anext(subscriber))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="already awaited"):
            await anext(subscriber)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())


# -- from_async_iterable -------------------------------------------------------------------


def test_from_async_iterable_is_the_async_iterable_publisher() -> None:
    async def nothing() -> AsyncIterator[int]:
        return
        yield

    assert isinstance(from_async_iterable(nothing), AsyncIterablePublisher)


def test_from_async_iterable_reads_only_on_demand_and_closes_on_cancel() -> None:
    produced = 0
    closed = threading.Event()

    async def numbers() -> AsyncIterator[int]:
        nonlocal produced
        try:
            for i in range(100):
                produced += 1
                yield i
        finally:
            closed.set()

    recorder = Recorder(initial=3)
    from_async_iterable(numbers).subscribe(recorder)
    recorder.wait_for_elements(3)
    assert recorder.elements == [0, 1, 2]
    assert produced == 3  # nothing read ahead of demand
    recorder.cancel()
    assert closed.wait(WAIT)  # the async generator's finally ran
    assert produced == 3 and recorder.terminals == 0
    recorder.assert_clean()


def test_from_async_iterable_error_becomes_on_error_after_the_elements() -> None:
    async def failing() -> AsyncIterator[int]:
        yield 1
        raise Boom("async source broke")

    recorder = Recorder(initial=10)
    from_async_iterable(failing).subscribe(recorder)
    recorder.wait_done()
    assert recorder.elements == [1]
    assert [str(e) for e in recorder.errors] == ["async source broke"]
    recorder.assert_clean()


def test_round_trip_on_one_loop() -> None:
    """An async generator published on the running loop, iterated on the same loop."""

    async def main() -> list[int]:
        async def letters() -> AsyncIterator[str]:
            for c in "reactive":
                await asyncio.sleep(0)
                yield c

        publisher = from_async_iterable(letters, loop=asyncio.get_running_loop())
        return [ord(c) async for c in iterate(publisher, prefetch=3)]

    assert asyncio.run(main()) == [ord(c) for c in "reactive"]


def test_from_async_iterable_loop_must_be_an_event_loop() -> None:
    async def one() -> AsyncIterator[int]:
        yield 1

    with pytest.raises(TypeError, match=r"loop must be an asyncio event loop .*got str"):
        from_async_iterable(one, loop="the loop")  # type: ignore[arg-type]
    closed = asyncio.new_event_loop()
    closed.close()
    with pytest.raises(ValueError, match="loop is closed"):
        from_async_iterable(one, loop=closed)


def test_from_async_iterable_on_a_loop_not_running_fails_the_subscriber() -> None:
    async def one() -> AsyncIterator[int]:
        yield 1

    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    try:
        publisher = from_async_iterable(one, loop=loop)  # legitimate: it may run later
        refused = Recorder(initial=1)
        publisher.subscribe(refused)  # not running yet: refused now, not left waiting
        refused.wait_done()
        [error] = refused.errors
        assert isinstance(error, RuntimeError)
        assert "loop is not running" in str(error) and refused.elements == []
        runner.start()
        served = Recorder(initial=5)
        loop.call_soon_threadsafe(publisher.subscribe, served)  # once it runs
        served.wait_done()
        assert served.elements == [1] and served.completions == 1
        served.assert_clean()
        refused.assert_clean()
    finally:
        if runner.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            runner.join(WAIT)
        loop.close()


# -- the package stays free of pyspark and of every adapter library --------------------------


def test_importing_the_package_and_aio_loads_no_spark_and_no_adapter_library() -> None:
    code = (
        "import sys\n"
        "import reactive_streams, reactive_streams.adapters, reactive_streams.adapters.aio\n"
        "banned = ('pyspark', 'pyspark_reactive', 'pyarrow', 'pandas', 'reactivex', "
        "'rsocket', 'paho', 'websockets')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(banned)))\n")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# -- TCK: the publisher over an async iterable -------------------------------------------------


class SourceUnavailableError(Exception):
    pass


class TestFromAsyncIterablePublisher(PublisherVerification[int]):
    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=200,
                               default_no_signals_timeout_millis=20)

    def create_publisher(self, elements: int) -> Publisher[int]:
        async def count() -> AsyncIterator[int]:
            for i in range(elements):
                yield i

        return from_async_iterable(count)

    def create_failed_publisher(self) -> Publisher[int] | None:
        def unavailable() -> AsyncIterator[int]:
            raise SourceUnavailableError("the source of this publisher is unavailable")

        return from_async_iterable(unavailable)

    def stochastic_runs(self, default: int) -> int:
        return 20


# -- TCK: the iterator's subscriber, consumed by a task on a loop of its own -----------------


class ConsumerLoop:
    """One event loop on a thread for a verification class; each subscriber under test
    gets a task there that takes its elements (the consumer that makes it request)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tck-consumer",
                                       daemon=True)
        self.thread.start()

    def consume(self, subscriber: IteratorSubscriber[T],
                report: WhiteboxSubscriberProbe[T] | None = None,
                cancelled: threading.Event | None = None) -> None:
        async def run() -> None:
            try:
                async for element in subscriber:
                    if report is not None:
                        report.register_on_next(element)
            except Exception as error:
                if report is not None:
                    report.register_on_error(error)
                return
            if report is not None and not (cancelled is not None and cancelled.is_set()):
                report.register_on_complete()

        asyncio.run_coroutine_threadsafe(run(), self.loop)

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


class WithConsumerLoop:
    consumers: ConsumerLoop

    @classmethod
    def setup_class(cls) -> None:
        super().setup_class()  # type: ignore[misc]
        cls.consumers = ConsumerLoop()

    @classmethod
    def teardown_class(cls) -> None:
        cls.consumers.close()
        super().teardown_class()  # type: ignore[misc]


class TestIteratorSubscriberBlackbox(WithConsumerLoop, SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        subscriber = IteratorSubscriber[int](prefetch=4)
        self.consumers.consume(subscriber)
        return subscriber

    def create_element(self, element: int) -> int:
        return element


class TestIteratorSubscriberPrefetchOneBlackbox(WithConsumerLoop,
                                                SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        subscriber = IteratorSubscriber[int](prefetch=1)
        self.consumers.consume(subscriber)
        return subscriber

    def create_element(self, element: int) -> int:
        return element


class TestIteratorSubscriberWhitebox(WithConsumerLoop, SubscriberWhiteboxVerification[int]):
    prefetch = 4

    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        subscriber, cancelled = reporting(IteratorSubscriber[int], probe, self.prefetch)
        self.consumers.consume(subscriber, probe, cancelled)
        return subscriber

    def create_element(self, element: int) -> int:
        return element


class TestIteratorSubscriberPrefetchOneWhitebox(TestIteratorSubscriberWhitebox):
    prefetch = 1
