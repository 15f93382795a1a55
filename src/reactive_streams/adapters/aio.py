"""asyncio and Reactive Streams: ``async for`` over any Publisher, and a Publisher over any
async iterable. Both keep backpressure: the iterator requests only what its buffer of
``prefetch`` elements can hold, and the publisher reads its async iterable only on demand.
No extra is needed: asyncio is in the standard library.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from typing import Generic, TypeVar

from .._prefetching import DEFAULT_PREFETCH, PrefetchingSubscriber
from ..api import Publisher
from ..publishers import AsyncIterablePublisher
from ..signalling import require_not_none

__all__ = ["DEFAULT_PREFETCH", "IteratorSubscriber", "from_async_iterable", "iterate"]

T = TypeVar("T")

class IteratorSubscriber(PrefetchingSubscriber[T], Generic[T]):
    """A Subscriber that is consumed with ``async for``; :func:`iterate` is built on it.

    Use it directly when the Subscriber object itself is needed, say to subscribe it to a
    Processor, and :func:`iterate` otherwise. Signals may arrive on any thread: elements
    go into a buffer of at most ``prefetch`` and a waiting ``__anext__`` is woken through
    its event loop (``call_soon_threadsafe``).

    Demand: ``prefetch`` is requested in ``on_subscribe``; then, each time the consumer
    has taken ``max(1, prefetch // 2)`` elements, that many more are requested, so
    requested-and-not-received plus buffered never exceeds ``prefetch``. An element beyond
    demand (a publisher breaking §1.1) fails the iteration with ``RuntimeError``.

    The end of the stream ends the iteration (``StopAsyncIteration``) once the buffer is
    empty; ``on_error`` is raised from ``__anext__`` after the elements buffered before it,
    once, then the iteration ends. :meth:`cancel`, :meth:`aclose`, leaving an ``async
    with`` block, and cancelling a task waiting in ``__anext__`` all cancel the
    subscription (§3.7: any number of times) and drop what is buffered. A task cancelled
    while it awaits something else (in the loop body) does not touch the subscriber:
    iterate inside ``async with`` it so that leaving the block, for any reason, cancels.

    Parameters
    ----------
    prefetch : int
        Elements requested ahead of the consumer, a positive int.

    Raises
    ------
    ValueError
        If ``prefetch`` is not a positive int.

    Examples
    --------
    >>> import asyncio
    >>> from reactive_streams import RangePublisher
    >>> from reactive_streams.adapters.aio import IteratorSubscriber
    >>> async def main():
    ...     async with IteratorSubscriber(prefetch=4) as elements:
    ...         RangePublisher(0, 10).subscribe(elements)
    ...         return [x async for x in elements]
    >>> asyncio.run(main())
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    def __init__(self, prefetch: int = DEFAULT_PREFETCH) -> None:
        super().__init__(prefetch)
        self._waiter: asyncio.Future[None] | None = None

    def _wake_locked(self) -> Callable[[], None] | None:
        waiter, self._waiter = self._waiter, None
        return None if waiter is None else functools.partial(_wake, waiter)

    # -- consumer: the event loop's thread ---------------------------------------------------

    def __aiter__(self) -> IteratorSubscriber[T]:
        return self

    async def __anext__(self) -> T:
        while True:
            with self._lock:
                taken, element, refill = self._take_locked(StopAsyncIteration)
                if not taken:
                    if self._waiter is not None:
                        raise RuntimeError("IteratorSubscriber: __anext__ is already awaited "
                                           "by another task; consume it from one task at a "
                                           "time")
                    waiter = self._waiter = asyncio.get_running_loop().create_future()
            if taken:
                break
            try:
                await waiter
            except asyncio.CancelledError:
                self.cancel()  # the consuming task was cancelled: so is the subscription
                raise
        if refill:
            self._schedule()
        return element  # type: ignore[return-value] # taken: an element, never None

    async def aclose(self) -> None:
        """Cancel the subscription (as :meth:`cancel`)."""
        self.cancel()

    async def __aenter__(self) -> IteratorSubscriber[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.cancel()


def _wake(waiter: asyncio.Future[None] | None) -> None:
    """Resolve a waiting ``__anext__``'s future on its own loop, from any thread."""
    if waiter is None:
        return
    try:
        waiter.get_loop().call_soon_threadsafe(_resolve, waiter)
    except RuntimeError:
        pass  # the loop is closed: nobody waits any more


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # a cancelled waiter stays cancelled
        waiter.set_result(None)


def iterate(publisher: Publisher[T], prefetch: int = DEFAULT_PREFETCH) -> AsyncGenerator[T, None]:
    """Iterate over any Publisher with ``async for``, with bounded demand.

    The publisher is subscribed when the iteration starts (the first ``__anext__``). At
    most ``prefetch`` elements are requested ahead of the consumer: ``prefetch`` at first,
    then more in batches of ``max(1, prefetch // 2)`` as the consumer takes them (see
    :class:`IteratorSubscriber`). Signals may arrive on any thread.

    An ``on_error`` is raised in the ``async for`` after the elements that came before
    it. Leaving the loop early cancels the subscription: at once with
    ``contextlib.aclosing`` or an explicit ``aclose()``, else when the generator is
    finalised. Cancelling the task that iterates cancels the subscription at once while
    the task waits for an element; while the loop body awaits something else, the
    ``CancelledError`` leaves the loop as any exception does, so the subscription is
    cancelled as for leaving early (at once inside ``aclosing``).

    Parameters
    ----------
    publisher : Publisher
        Any publisher.
    prefetch : int
        Elements requested ahead of the consumer, a positive int.

    Returns
    -------
    AsyncGenerator
        The elements, in order.

    Raises
    ------
    ValueError
        If ``prefetch`` is not a positive int.
    TypeError
        If ``publisher`` is ``None``.

    Examples
    --------
    >>> import asyncio, contextlib
    >>> from reactive_streams import RangePublisher
    >>> from reactive_streams.adapters.aio import iterate
    >>> async def main():
    ...     async with contextlib.aclosing(iterate(RangePublisher(0, 1000), prefetch=8)) as xs:
    ...         async for x in xs:
    ...             if x == 3:
    ...                 break  # leaving the block cancels the subscription
    ...     return x
    >>> asyncio.run(main())
    3
    >>> iterate(RangePublisher(0, 1), prefetch=0)
    Traceback (most recent call last):
    ...
    ValueError: prefetch must be a positive int (elements requested ahead of the consumer, \
e.g. 256), got 0
    """
    require_not_none(publisher, "the publisher", "iterate")
    return _iterate(publisher, IteratorSubscriber[T](prefetch))


async def _iterate(publisher: Publisher[T],
                   subscriber: IteratorSubscriber[T]) -> AsyncGenerator[T, None]:
    try:
        publisher.subscribe(subscriber)
        async for element in subscriber:
            yield element
    finally:
        subscriber.cancel()  # break, aclose(), finalisation, task cancellation


def from_async_iterable(
        async_iterable_or_factory: AsyncIterable[T] | Callable[[], AsyncIterable[T]],
        *, loop: asyncio.AbstractEventLoop | None = None) -> Publisher[T]:
    """A Publisher over an async iterable, read only on demand.

    The same publisher as :class:`reactive_streams.AsyncIterablePublisher`: each
    subscription runs one task that awaits the next element only while requested elements
    are missing; an exception from the iterable becomes ``on_error``; cancel stops the
    task and closes the iterator (an async generator's ``finally`` runs).

    Parameters
    ----------
    async_iterable_or_factory : async iterable, or callable returning one
        A factory (an async generator function, say) serves every subscriber afresh; a
        one-shot async iterator serves the first subscriber only.
    loop : asyncio.AbstractEventLoop, optional
        The loop to read the iterable on; pass the loop the iterable belongs to
        (``asyncio.get_running_loop()``) when it uses that loop's objects (queues,
        streams). It may start running after this call, but must be running when a
        subscriber subscribes, or that subscriber gets ``on_error(RuntimeError)`` naming
        ``loop``. If omitted, the publisher runs a loop of its own on a thread while it
        has live subscriptions.

    Returns
    -------
    Publisher

    Raises
    ------
    TypeError
        If ``loop`` is not an asyncio event loop.
    ValueError
        If ``loop`` is closed.

    Examples
    --------
    >>> import asyncio
    >>> from reactive_streams import collect
    >>> from reactive_streams.adapters.aio import from_async_iterable
    >>> async def squares():
    ...     for i in range(4):
    ...         await asyncio.sleep(0)
    ...         yield i * i
    >>> collect(from_async_iterable(squares), timeout=5)
    [0, 1, 4, 9]
    """
    return AsyncIterablePublisher(async_iterable_or_factory, loop)
