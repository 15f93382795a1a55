"""A plain ``for`` loop over any Publisher, with bounded demand: the blocking twin of
:func:`reactive_streams.adapters.aio.iterate`.

:func:`to_iterable` gives an iterable whose every ``iter()`` subscribes anew; the loop
requests at most ``prefetch`` elements ahead of itself and more only as it takes them, so
a slow loop slows the publisher. :class:`BlockingSubscriber` is the Subscriber underneath,
for when the Subscriber object itself is needed (to subscribe it to a Processor, say).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from ._prefetching import DEFAULT_PREFETCH, PrefetchingSubscriber, checked_prefetch
from .api import Publisher
from .signalling import require_not_none

__all__ = ["DEFAULT_PREFETCH", "BlockingIterable", "BlockingSubscriber", "to_iterable"]

T = TypeVar("T")


def _checked_timeout(timeout: float | None) -> float | None:
    """``timeout`` itself if it is ``None`` or seconds >= 0; otherwise ``ValueError``."""
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be None (wait for ever) or seconds >= 0, "
                         f"got {timeout!r}")
    return timeout


class BlockingSubscriber(PrefetchingSubscriber[T], Iterator[T], Generic[T]):
    """A Subscriber that is consumed with a plain ``for`` loop (``next()`` blocks).

    Signals may arrive on any thread; elements go into a buffer of at most ``prefetch``,
    and a thread waiting in ``next()`` is woken. Demand: ``prefetch`` is requested in
    ``on_subscribe``; then, each time the loop has taken ``max(1, prefetch // 2)``
    elements, that many more, so requested-and-not-received plus buffered never exceeds
    ``prefetch``. An element beyond demand (a publisher breaking §1.1) ends the loop with
    ``RuntimeError``.

    The end of the stream ends the loop (``StopIteration``) once the buffer is empty;
    ``on_error`` is raised from ``next()`` after the elements buffered before it, once,
    then the loop ends. :meth:`close` (or :meth:`cancel`, or leaving a ``with`` block)
    cancels the subscription (§3.7: any number of times), drops what is buffered and ends
    a ``next()`` waiting on another thread.

    ``next()`` may be called from any thread, several at once (each element goes to one
    of them), but not from a thread the publisher needs in order to signal: from inside
    another subscriber's ``on_next`` of a publisher that signals on the requesting thread,
    or on the asyncio loop a publisher signals on, ``next()`` waits for an element only
    that thread could deliver, for ever (or until ``timeout``); iterate with ``async for``
    (:func:`~reactive_streams.adapters.aio.iterate`) there instead.

    Parameters
    ----------
    prefetch : int
        Elements requested ahead of the loop, a positive int.
    timeout : float, optional
        Longest wait of one ``next()`` for an element, in seconds; past it ``next()``
        raises ``TimeoutError`` and the subscription stays as it is (call ``next()`` again
        to go on waiting, :meth:`close` to end it). ``None``, the default, waits for ever.

    Raises
    ------
    ValueError
        If ``prefetch`` is not a positive int, or ``timeout`` is negative.

    Examples
    --------
    >>> from reactive_streams import RangePublisher
    >>> from reactive_streams.blocking import BlockingSubscriber
    >>> with BlockingSubscriber(prefetch=4) as elements:
    ...     RangePublisher(0, 10).subscribe(elements)
    ...     print(list(elements))
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    def __init__(self, prefetch: int = DEFAULT_PREFETCH, timeout: float | None = None) -> None:
        super().__init__(prefetch)
        self.timeout = _checked_timeout(timeout)
        self._ready = threading.Condition(self._lock)

    def _wake_locked(self) -> Callable[[], None] | None:
        self._ready.notify_all()
        return None

    def __iter__(self) -> BlockingSubscriber[T]:
        return self

    def __next__(self) -> T:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        with self._lock:
            while True:
                taken, element, refill = self._take_locked(StopIteration)
                if taken:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(
                        f"no element within timeout={self.timeout} s; call next() again "
                        "to go on waiting, close() to end the subscription")
                self._ready.wait(left)  # then look again, whether woken or timed out
        if refill:
            self._schedule()
        return element  # type: ignore[return-value] # taken: an element, never None

    def close(self) -> None:
        """Cancel the subscription (as :meth:`cancel`)."""
        self.cancel()

    def __enter__(self) -> BlockingSubscriber[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cancel()


class _Iteration(Iterator[T], Generic[T]):
    """One ``iter()`` of a :class:`BlockingIterable`: the loop's handle on its subscriber.

    The publisher holds the subscriber, never this handle, so when the loop drops the
    handle (``break``, an exception, the end of a function) the handle is collected and
    the subscription cancelled; :meth:`close` or a ``with`` block cancels at once.
    """

    def __init__(self, publisher: Publisher[T], prefetch: int, timeout: float | None) -> None:
        self._subscriber = BlockingSubscriber[T](prefetch, timeout)
        self._close = weakref.finalize(self, self._subscriber.cancel)
        publisher.subscribe(self._subscriber)

    def __iter__(self) -> _Iteration[T]:
        return self

    def __next__(self) -> T:
        return next(self._subscriber)

    def close(self) -> None:
        """Cancel the subscription; harmless if repeated."""
        self._close()

    def __enter__(self) -> _Iteration[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._close()

    @property
    def buffered(self) -> int:
        """Elements received and not yet taken by the loop."""
        return self._subscriber.buffered


class BlockingIterable(Iterable[T], Generic[T]):
    """What :func:`to_iterable` returns: each ``iter()`` subscribes to the publisher anew."""

    def __init__(self, publisher: Publisher[T], prefetch: int = DEFAULT_PREFETCH,
                 timeout: float | None = None) -> None:
        require_not_none(publisher, "the publisher", "to_iterable")
        self.publisher = publisher
        self.prefetch = checked_prefetch(prefetch)
        self.timeout = _checked_timeout(timeout)

    def __iter__(self) -> _Iteration[T]:
        return _Iteration(self.publisher, self.prefetch, self.timeout)

    def __repr__(self) -> str:
        return f"to_iterable({self.publisher!r}, prefetch={self.prefetch})"


def to_iterable(publisher: Publisher[T], prefetch: int = DEFAULT_PREFETCH,
                timeout: float | None = None) -> BlockingIterable[T]:
    """Iterate over any Publisher with a plain ``for`` loop, with bounded demand.

    Each ``iter()`` of the result (each ``for`` loop over it) subscribes to the publisher
    anew, when the loop starts. At most ``prefetch`` elements are requested ahead of the
    loop: ``prefetch`` at first, then more in batches of ``max(1, prefetch // 2)`` as the
    loop takes them, so a slow loop holds the publisher back (see
    :class:`BlockingSubscriber`). Signals may arrive on any thread; the loop may run on
    any thread but one the publisher needs in order to signal (see
    :class:`BlockingSubscriber`).

    An ``on_error`` is raised in the loop after the elements that came before it. Leaving
    the loop early cancels the subscription: at once inside ``with iter(...) as it:`` or
    with its ``close()``, else when the loop's iterator is collected (in CPython, as the
    loop ends).

    The anchors elsewhere: RxJava's ``Flowable.blockingIterable(bufferSize)``, Reactor's
    ``Flux.toIterable(batchSize)``; the ``async for`` twin is
    :func:`~reactive_streams.adapters.aio.iterate`.

    Parameters
    ----------
    publisher : Publisher
        Any publisher.
    prefetch : int
        Elements requested ahead of the loop, a positive int.
    timeout : float, optional
        Longest wait for one element, in seconds (``TimeoutError`` past it); ``None``
        waits for ever.

    Returns
    -------
    BlockingIterable
        An iterable of the elements, in order.

    Raises
    ------
    ValueError
        If ``prefetch`` is not a positive int, or ``timeout`` is negative.
    TypeError
        If ``publisher`` is ``None``.

    Examples
    --------
    >>> from reactive_streams import RangePublisher
    >>> from reactive_streams.blocking import to_iterable
    >>> for x in to_iterable(RangePublisher(0, 1_000_000), prefetch=8):
    ...     if x == 3:
    ...         break  # the loop's iterator is dropped: the subscription is cancelled
    >>> x
    3
    >>> squares = to_iterable(RangePublisher(0, 4))
    >>> [x * x for x in squares], [x * x for x in squares]  # each loop subscribes anew
    ([0, 1, 4, 9], [0, 1, 4, 9])
    >>> to_iterable(RangePublisher(0, 1), prefetch=0)
    Traceback (most recent call last):
    ...
    ValueError: prefetch must be a positive int (elements requested ahead of the consumer, \
e.g. 256), got 0
    """
    return BlockingIterable(publisher, prefetch, timeout)
