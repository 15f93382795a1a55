"""Reference publishers: a synchronous range, an iterable on a thread pool, and an async
iterable on an event loop. Each is only a :class:`~reactive_streams.signalling.Source`;
the shared :class:`~reactive_streams.signalling.Emitter` does the signalling.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from itertools import islice
from typing import Any, Generic, TypeVar

from .api import Publisher, Subscriber
from .runners import LoopRunner, Runner, ThreadRunner
from .signalling import COMPLETE, Emitter, Source, Terminal, require_not_none

__all__ = ["AsyncIterablePublisher", "IterablePublisher", "RangePublisher"]

T = TypeVar("T")

log = logging.getLogger("reactive_streams")


class RangePublisher(Publisher[int]):
    """Publishes ``start, start + 1, ..., start + count - 1`` to each subscriber.

    Synchronous and cold: every subscriber gets its own subscription over the whole
    range, and elements are signalled on the thread that calls ``request`` (a ``request``
    from inside ``on_next`` takes another turn of the same loop: bounded depth, §3.3).
    ``on_complete`` follows the last element without waiting for more demand.

    Parameters
    ----------
    start : int
        First element.
    count : int
        Number of elements, ``>= 0``.

    Raises
    ------
    TypeError, ValueError
        When ``start`` or ``count`` is not an int, or ``count`` is negative.

    Examples
    --------
    >>> from reactive_streams import RangePublisher, collect
    >>> collect(RangePublisher(5, 3))
    [5, 6, 7]
    """

    def __init__(self, start: int, count: int) -> None:
        for name, value in (("start", start), ("count", count)):
            if type(value) is not int:
                raise TypeError(f"RangePublisher: {name} must be an int, got {value!r}")
        if count < 0:
            raise ValueError(f"RangePublisher: count must be >= 0, got {count}")
        self.start = start
        self.count = count

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        Emitter(subscriber, _RangeSource(self.start, self.start + self.count)).start()

    def __repr__(self) -> str:
        return f"RangePublisher(start={self.start}, count={self.count})"


class _RangeSource(Source[int]):
    def __init__(self, start: int, stop: int) -> None:
        self.next = start
        self.stop = stop

    def pull(self, n: int) -> tuple[Sequence[int], Terminal | None]:
        low = self.next
        high = min(low + n, self.stop)
        self.next = high
        return range(low, high), (COMPLETE if high == self.stop else None)


IterableOrFactory = Iterable[T] | Callable[[], Iterable[T]]


class IterablePublisher(Publisher[T], Generic[T]):
    """Publishes the elements of an iterable, asynchronously, from an executor.

    Signals are sent from executor threads, not from the thread calling ``request``
    (unless the executor refuses work; then ``on_error`` is sent from the caller).
    Elements are taken from the iterator one at a time, only against demand, and each
    is signalled as soon as the iterator yields it, so an endless or slow iterator is
    fine. A ``next()`` that blocks holds one executor thread meanwhile, and ``cancel``
    takes effect once it returns. An exception raised by the iterator (or by calling the
    factory) becomes ``on_error``; ``None`` from the iterator becomes
    ``on_error(TypeError)`` (§2.13). On cancel, a generator is closed.

    Parameters
    ----------
    iterable_or_factory : iterable or callable returning an iterable
        A factory or a re-iterable (list, range, ...) gives every subscriber the whole
        sequence. A one-shot iterator (a generator, say) can serve one subscriber: later
        ones get ``on_error(RuntimeError)``.
    executor : concurrent.futures.Executor, optional
        Where to run. If omitted the publisher starts its own pool with its first live
        subscription and shuts it down when the last one ends.

    Examples
    --------
    >>> from reactive_streams import IterablePublisher, collect
    >>> collect(IterablePublisher(lambda: (x * x for x in range(4))), timeout=5)
    [0, 1, 4, 9]
    """

    def __init__(self, iterable_or_factory: IterableOrFactory[T],
                 executor: Executor | None = None) -> None:
        require_not_none(iterable_or_factory, "iterable_or_factory", "IterablePublisher")
        self._make: Callable[[], Iterable[T]] = _factory(
            iterable_or_factory, Iterable, lambda it: iter(it) is it, "IterablePublisher")
        self._runner: Runner = ThreadRunner(executor, name="iterable-publisher")

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        dispatch = self._runner.acquire()
        Emitter(subscriber, _IteratorSource(self._make, self._runner), dispatch).start()


class _IteratorSource(Source[T]):
    # Lazy: the emitter signals each element as next() returns it, in a tight loop over
    # up to a chunk of them, and settles demand once per chunk.
    lazy = True

    def __init__(self, make: Callable[[], Iterable[T]], runner: Runner) -> None:
        self._make: Callable[[], Iterable[T]] | None = make
        self._iterator: Iterator[T] | None = None
        self._runner = runner

    def pull(self, n: int) -> tuple[Iterable[T], Terminal | None]:
        if self._iterator is None:
            assert self._make is not None
            self._iterator = iter(self._make())  # may raise: the stream fails
            self._make = None
        if n == 0:
            return (), None
        return islice(self._iterator, n), None

    def close(self) -> None:
        iterator, self._iterator = self._iterator, None
        close = getattr(iterator, "close", None)
        try:
            if close is not None:
                close()  # run the generator's finally blocks on cancel
        finally:
            self._runner.release()


class AsyncIterablePublisher(Publisher[T], Generic[T]):
    """Publishes the elements of an async iterable, driven on an asyncio event loop.

    Each subscription runs one task that awaits the next element only while there is
    unfilled demand, so the iterator is never read ahead of what was requested. Signals
    are sent from the loop's thread. An exception from the iterator becomes
    ``on_error``. Cancel cancels the task; nothing more is pulled after it, even from an
    iterator that absorbs the cancellation, and the iterator is closed (``aclose``, so an
    async generator's ``finally`` runs) whenever its subscription ends.

    Parameters
    ----------
    async_iterable_or_factory : async iterable or callable returning one
        As for :class:`IterablePublisher`: a factory serves every subscriber; a one-shot
        async iterator serves the first.
    loop : asyncio.AbstractEventLoop, optional
        A loop to use. It may start running after the publisher is made, but it must be
        running (on some thread) when a subscriber subscribes: otherwise that subscriber
        gets ``on_subscribe`` and then ``on_error(RuntimeError)`` naming ``loop``. If
        omitted the publisher runs its own loop on a background thread while it has live
        subscriptions.

    Raises
    ------
    TypeError
        If ``loop`` is given and is not an ``asyncio.AbstractEventLoop``.
    ValueError
        If ``loop`` is closed.

    Examples
    --------
    >>> import asyncio
    >>> from reactive_streams import AsyncIterablePublisher, collect
    >>> async def ticks():
    ...     for i in range(3):
    ...         await asyncio.sleep(0)
    ...         yield i
    >>> collect(AsyncIterablePublisher(ticks), timeout=5)
    [0, 1, 2]
    """

    def __init__(self, async_iterable_or_factory: AsyncIterable[T] | Callable[[], AsyncIterable[T]],
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        require_not_none(async_iterable_or_factory, "async_iterable_or_factory",
                         "AsyncIterablePublisher")
        self._make: Callable[[], AsyncIterable[T]] = _factory(
            async_iterable_or_factory, AsyncIterable, lambda it: aiter(it) is it,
            "AsyncIterablePublisher")
        if loop is not None and not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError("AsyncIterablePublisher: loop must be an asyncio event loop "
                            "(asyncio.AbstractEventLoop, e.g. asyncio.get_running_loop()) or "
                            f"None for a loop of its own, got {type(loop).__name__}")
        if loop is not None and loop.is_closed():
            raise ValueError("AsyncIterablePublisher: loop is closed; pass an open event loop "
                             "that will be running when subscribers subscribe, or None for a "
                             "loop of its own")
        self._loop = loop
        self._runner = LoopRunner(loop, name="async-iterable-publisher")

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        if self._loop is not None and not self._loop.is_running():
            # Nothing would ever run on it: fail this subscriber now rather than leave it
            # waiting for an on_subscribe that never comes.
            state = "closed" if self._loop.is_closed() else "not running"
            Emitter(subscriber, _Failed(RuntimeError(
                f"AsyncIterablePublisher: the event loop given as loop is {state}; it must "
                "be running (on any thread) when a subscriber subscribes, or pass loop=None "
                "for a loop of its own"))).start()
            return
        dispatch = self._runner.acquire()
        source = _AsyncIteratorSource(self._make, self._runner)
        emitter = Emitter(subscriber, source, dispatch)
        source.emitter = emitter
        emitter.start()


class _Failed(Source[T]):
    """A stream that has failed before it began: ``on_error`` right after ``on_subscribe``."""

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        return (), self._error


class _AsyncIteratorSource(Source[T]):
    """Elements fetched by a task on the loop; every method runs on the loop's thread."""

    def __init__(self, make: Callable[[], AsyncIterable[T]], runner: LoopRunner) -> None:
        self._make = make
        self._runner = runner
        self._loop = runner.loop
        self.emitter: Emitter[T] | None = None
        self._ready: collections.deque[T] = collections.deque()
        self._terminal: Terminal | None = None
        self._wanted = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._signalled = False  # the emitter was told of elements it has not pulled yet

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        ready = self._ready
        if n >= len(ready):
            taken = list(ready)
            ready.clear()
        else:
            taken = [ready.popleft() for _ in range(n)]
        self._wanted = n - len(taken)
        self._signalled = False  # the next element fetched tells the emitter
        if self._task is None and self._terminal is None:
            self._task = self._loop.create_task(self._fetch())
        if self._wanted:
            self._wake.set()
        return taken, (self._terminal if not ready else None)

    async def _fetch(self) -> None:
        iterator: AsyncIterator[T] | None = None
        ready = self._ready
        try:
            iterator = aiter(self._make())
            await self._demand()
            async for element in iterator:
                if self._closed:
                    # §3.12: cancelled while this element was awaited, and the iterator
                    # absorbed the task's cancellation: pull nothing more.
                    return
                if element is None:
                    raise TypeError("§2.13: the async iterable produced None; elements must "
                                    "not be None")
                ready.append(element)
                if not self._signalled:
                    # Once per pull: the emitter takes everything ready when it runs.
                    self._signalled = True
                    self._notify()
                if self._wanted <= len(ready):
                    await self._demand()  # never read ahead of demand
            self._terminal = COMPLETE
        except asyncio.CancelledError:
            return  # close(): the subscription ended
        except Exception as exc:
            self._terminal = exc
        finally:
            if iterator is not None:
                await _aclose(iterator)
        self._notify()

    async def _demand(self) -> None:
        """Wait until the emitter wants more than is ready."""
        while self._wanted <= len(self._ready):
            self._wake.clear()
            await self._wake.wait()

    def _notify(self) -> None:
        if self.emitter is not None:
            self.emitter.signal()

    def close(self) -> None:
        task, self._task = self._task, None
        self.emitter = None
        self._closed = True
        if task is not None and not task.done():
            task.cancel()
            # The cancelled task finishes on the loop; release the loop after it.
            task.add_done_callback(lambda _: self._runner.release())
        else:
            self._runner.release()


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    """Close an async iterator that can be closed (an async generator's ``finally`` runs)."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception:  # e.g. RuntimeError: async generator ignored GeneratorExit
        log.exception("closing the async iterator %r failed", iterator)


def _factory(value: object, accepted: type, one_shot: Callable[[Any], bool],
             owner: str) -> Callable[[], Any]:
    """Turn an iterable-or-factory argument into a factory; a one-shot iterator serves once."""
    if isinstance(value, accepted):
        if not one_shot(value):
            return lambda: value
        claimed = threading.Lock()

        def once() -> object:
            if not claimed.acquire(blocking=False):
                raise RuntimeError(
                    f"{owner}: this iterator can be consumed only once and already has a "
                    "subscriber; pass a factory (a callable returning a fresh iterable) "
                    "to serve several subscribers")
            return value

        return once
    if callable(value):
        return value
    raise TypeError(f"{owner}: expected an iterable or a callable returning one, got "
                    f"{type(value).__name__}")
