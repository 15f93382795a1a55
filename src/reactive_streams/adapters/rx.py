"""ReactiveX and Reactive Streams: an Observable as a Publisher, with a bounded buffer and
an explicit overflow policy for the items the subscriber has not asked for, and a
Publisher as an Observable that requests in batches. Needs the extra ``rx`` (the
``reactivex`` library, version 4 or later).
"""

from __future__ import annotations

import threading
from typing import Final, Generic, TypeVar

from .._overflow import (
    DEFAULT_BUFFER_SIZE,
    BufferOverflowError,
    Overflow,
    OverflowBuffer,
    OverflowSubscription,
    checked_policy,
)
from ._extras import require

require("reactivex", "rx", "reactive_streams.adapters.rx")

import reactivex  # noqa: E402 - after require(), which names the extra when it is missing
from reactivex import abc as rx_abc  # noqa: E402
from reactivex.disposable import Disposable  # noqa: E402
from reactivex.scheduler import CurrentThreadScheduler  # noqa: E402

from ..api import Publisher, Subscriber  # noqa: E402
from ..signalling import COMPLETE, require_not_none, signal_violation  # noqa: E402
from ..subscribers import SyncSubscriber  # noqa: E402

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_BUFFER_SIZE",
    "BufferOverflowError",
    "ObservablePublisher",
    "ObservableSubscription",
    "Overflow",
    "from_observable",
    "to_observable",
]

T = TypeVar("T")

#: Items requested at a time by :func:`to_observable` when no ``batch`` is given.
DEFAULT_BATCH: Final[int] = 256


def from_observable(observable: reactivex.Observable[T], *, overflow: Overflow,
                    buffer_size: int = DEFAULT_BUFFER_SIZE) -> ObservablePublisher[T]:
    """A Publisher over a ReactiveX Observable, with a bounded buffer for items beyond demand.

    An Observable pushes items whether or not anyone asked for them. Each subscription to
    the publisher subscribes to the observable once; items the subscriber has requested
    are signalled at once, and up to ``buffer_size`` items beyond that are held until it
    requests more. What happens to an item that arrives when that buffer is full is the
    ``overflow`` policy:

    ``"error"``
        The subscriber gets ``on_error(BufferOverflowError)`` (naming the overflow and the
        buffer size) at once, without the buffered items, and the observable's
        subscription is disposed.
    ``"drop_oldest"``
        The oldest buffered item is dropped to make room for the new one. That item may
        be one the subscriber had already requested, when the signal loop had not yet
        taken it from the buffer (it is busy on another thread); the demand is then met
        by a later item.
    ``"drop_latest"``
        The new item is dropped; the buffer keeps the items it holds.
    ``"block"``
        The observable's ``on_next`` waits, holding the thread that emits, until the
        subscriber's demand frees space (or it cancels). Only valid where the observable
        emits on a thread that never requests from this subscription
        (``subscribe_on``/``observe_on`` a ``NewThreadScheduler``, ``reactivex.interval``
        on one, a subject fed by a thread of yours that does not request): a thread
        blocked in ``on_next`` cannot request the demand it waits for, so if no other
        thread requests, it waits forever. Two such cases are detected, and the
        subscriber gets ``on_error(RuntimeError)`` saying so (the stream fails: the item
        that did not fit and the buffered ones are counted in ``dropped``):
        ``on_next`` on the thread that is subscribing or requesting, during that call
        (a synchronous observable such as a plain ``reactivex.range``), and ``on_next``
        on a thread running an asyncio event loop (holding it would freeze the loop,
        and deadlock if the loop also consumes). A thread that requested earlier and
        feeds a subject later is not detected (it might be freed by a request from
        another thread, and refusing every thread that ever requested would refuse a
        subscriber that requests from ``on_next`` on the observable's thread): it hangs.

    Dropped items are counted: :attr:`ObservableSubscription.dropped` for one
    subscription, :attr:`ObservablePublisher.dropped` for all of them. The observable's
    ``on_completed`` and ``on_error`` become ``on_complete`` and ``on_error`` after the
    buffered items have been signalled (so they wait for the demand those items need).
    Cancelling the subscription disposes the observable's subscription, also while a
    synchronous observable is still emitting inside ``subscribe`` (the observable is
    subscribed through the current thread's trampoline, as Rx's own sources do, so its
    disposable is known before its first item). Signals are sent
    from the thread that requests or the thread the observable emits on, one at a time
    (§1.3). A ``None`` item fails the stream with ``TypeError`` (§2.13).

    Parameters
    ----------
    observable : reactivex.Observable
        The source; subscribed once per subscription to the publisher.
    overflow : {"error", "drop_oldest", "drop_latest", "block"}
        What to do with an item that finds the buffer full (no default: choose).
    buffer_size : int
        Items held beyond demand, a positive int.

    Returns
    -------
    ObservablePublisher

    Raises
    ------
    ValueError
        If ``overflow`` or ``buffer_size`` is not one of the accepted values.
    TypeError
        If ``observable`` is not a ``reactivex.Observable``.

    Examples
    --------
    >>> import reactivex
    >>> from reactive_streams import collect
    >>> from reactive_streams.adapters.rx import from_observable
    >>> collect(from_observable(reactivex.of(1, 2, 3), overflow="error", buffer_size=8))
    [1, 2, 3]

    Items pushed before any demand wait in the buffer; with ``drop_oldest`` and a buffer
    of 2, only the last two of five remain:

    >>> from reactivex.subject import Subject
    >>> from reactive_streams import Subscriber
    >>> class Printer(Subscriber[int]):
    ...     def on_subscribe(self, subscription): self.subscription = subscription
    ...     def on_next(self, element): print(element)
    ...     def on_error(self, error): print(error)
    ...     def on_complete(self): print("done")
    >>> ticks = Subject()
    >>> publisher = from_observable(ticks, overflow="drop_oldest", buffer_size=2)
    >>> printer = Printer()
    >>> publisher.subscribe(printer)
    >>> for i in range(5):
    ...     ticks.on_next(i)  # nothing requested yet
    >>> ticks.on_completed()
    >>> printer.subscription.request(10)
    3
    4
    done
    >>> publisher.dropped
    3
    """
    return ObservablePublisher(observable, overflow=overflow, buffer_size=buffer_size)


class ObservablePublisher(Publisher[T], Generic[T]):
    """The Publisher :func:`from_observable` returns; see there for the overflow policies.

    Parameters
    ----------
    observable, overflow, buffer_size
        As for :func:`from_observable`, which checks them the same way (``TypeError``
        for an observable that is not one, ``ValueError`` for the other two).

    Examples
    --------
    >>> import reactivex
    >>> from reactive_streams import collect
    >>> from reactive_streams.adapters.rx import ObservablePublisher
    >>> publisher = ObservablePublisher(reactivex.of(1, 2), overflow="error", buffer_size=4)
    >>> collect(publisher), publisher.dropped
    ([1, 2], 0)
    """

    def __init__(self, observable: reactivex.Observable[T], *, overflow: Overflow,
                 buffer_size: int = DEFAULT_BUFFER_SIZE) -> None:
        if not isinstance(observable, reactivex.Observable):
            raise TypeError("from_observable: observable must be a reactivex.Observable, got "
                            f"{type(observable).__name__}")
        checked_policy("from_observable", overflow, buffer_size)
        self.observable = observable
        self.overflow: Overflow = overflow
        self.buffer_size = buffer_size
        self._lock = threading.Lock()
        self._dropped = 0

    @property
    def dropped(self) -> int:
        """Items dropped by the overflow policy, over every subscription so far."""
        return self._dropped

    def _count_dropped(self, n: int) -> None:
        with self._lock:
            self._dropped += n

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        source = _ObserverSource(self)
        subscription = ObservableSubscription(subscriber, source)
        source.subscription = subscription
        subscription.start()  # on_subscribe first (§1.9), then the observable
        source.connect(self.observable)

    def __repr__(self) -> str:
        return (f"from_observable({self.observable!r}, overflow={self.overflow!r}, "
                f"buffer_size={self.buffer_size})")


class ObservableSubscription(OverflowSubscription[T], Generic[T]):
    """The Subscription an :class:`ObservablePublisher` gives each subscriber: the common
    :class:`~reactive_streams.signalling.Emitter`, which also tells the buffer about
    demand and counts what the overflow policy dropped.

    Created by :meth:`ObservablePublisher.subscribe`, never by users; a subscriber gets
    it in ``on_subscribe``.

    Parameters
    ----------
    subscriber : Subscriber
        The subscriber it signals.
    source : _ObserverSource
        The subscription's bounded buffer.

    Examples
    --------
    >>> import reactivex
    >>> from reactive_streams import Subscriber
    >>> from reactive_streams.adapters.rx import from_observable
    >>> class Keep(Subscriber[int]):
    ...     def on_subscribe(self, subscription): self.subscription = subscription
    ...     def on_next(self, element): pass
    ...     def on_error(self, error): pass
    ...     def on_complete(self): pass
    >>> keep = Keep()
    >>> from_observable(reactivex.of(1, 2, 3), overflow="drop_latest",
    ...                 buffer_size=1).subscribe(keep)
    >>> keep.subscription.dropped  # nothing requested: 1 is held, 2 and 3 dropped
    2
    """


class _ObserverSource(OverflowBuffer[T]):
    """The bounded buffer between the observable's observer and the emitter's loop."""

    producer = "the observable emitted"

    def __init__(self, publisher: ObservablePublisher[T]) -> None:
        super().__init__(publisher.buffer_size, publisher.overflow)
        self.publisher = publisher
        self._disposable: rx_abc.DisposableBase | None = None

    def _too_many(self) -> str:
        return (f"from_observable: the observable emitted more than buffer_size="
                f"{self.capacity} items beyond the subscriber's demand (overflow="
                "'error'); its subscription is disposed. Raise buffer_size, or choose "
                "overflow='drop_oldest', 'drop_latest' or 'block'")

    def _would_deadlock(self) -> str:
        return ("from_observable: overflow='block' would deadlock: the observable "
                "emitted on the thread that subscribes to it or requests from it, so "
                "nothing could free space while it waits. Emit on a thread of its own "
                "(subscribe_on(NewThreadScheduler())), or choose overflow='error', "
                "'drop_oldest' or 'drop_latest'")

    def _would_block_loop(self) -> str:
        return ("from_observable: overflow='block' would block an asyncio event loop: "
                "the observable emitted on a thread running one, and waiting there for "
                "demand would freeze the loop (and deadlock it if the loop consumes "
                "this stream). Emit on a thread of its own, or choose overflow='error', "
                "'drop_oldest' or 'drop_latest'")

    def _dropped_one(self) -> None:
        super()._dropped_one()
        self.publisher._count_dropped(1)

    def _count(self, dropped: int) -> None:
        if dropped:
            self.publisher._count_dropped(dropped)

    def connect(self, observable: reactivex.Observable[T]) -> None:
        with self._changed:
            if self._closed:
                return  # cancelled in on_subscribe: never subscribe to the observable
        me = self.enter()  # a synchronous observable emits on this thread, in this call
        try:
            trampoline = CurrentThreadScheduler.singleton()
            if trampoline.schedule_required():
                # Subscribe inside a trampoline, as Rx's own sources do: a synchronous
                # observable (range, of, repeat_value) then queues its items on it, so
                # subscribe() hands back the disposable before the first item, and a
                # cancel or an overflow error during the run can dispose it. The thread
                # stays marked until the trampoline has run everything.
                def subscribe(_: rx_abc.SchedulerBase, __: object = None) -> None:
                    self._subscribe(observable)

                trampoline.schedule(subscribe)
            else:
                self._subscribe(observable)  # within a trampoline already: items queue on it
        finally:
            self.leave(me)

    def _subscribe(self, observable: reactivex.Observable[T]) -> None:
        try:
            disposable = observable.subscribe(self._on_next, self._on_error,
                                              self._on_completed)
        except Exception as exc:  # an observable that raises instead of signalling
            self._on_error(exc)
            return
        with self._changed:
            if not self._closed:
                self._disposable = disposable
                return
        disposable.dispose()  # ended while subscribing

    # -- the observer: the observable's thread ---------------------------------------------

    def _on_next(self, item: T) -> None:
        self.push(item)

    def _on_error(self, error: Exception) -> None:
        self.end(error)

    def _on_completed(self) -> None:
        self.end(COMPLETE)

    def _dispose(self) -> None:
        with self._changed:
            disposable, self._disposable = self._disposable, None
        if disposable is not None:
            disposable.dispose()


def to_observable(publisher: Publisher[T], *,
                  batch: int = DEFAULT_BATCH) -> reactivex.Observable[T]:
    """A ReactiveX Observable over a Publisher, requesting in batches.

    Each subscription to the observable subscribes to the publisher once and requests
    ``batch`` items, then, each time the outstanding demand has fallen to ``batch // 2``,
    ``batch - batch // 2`` more (3 at a time for a batch of 5, 1 for a batch of 1), so at
    most ``batch`` are outstanding. ``on_complete`` and ``on_error`` become
    ``on_completed`` and ``on_error``; disposing cancels the subscription. Items are
    emitted on the publisher's threads; use ``observe_on`` to move them.

    Parameters
    ----------
    publisher : Publisher
        The source; subscribed once per subscription to the observable.
    batch : int
        Items requested at a time, a positive int.

    Returns
    -------
    reactivex.Observable

    Raises
    ------
    ValueError
        If ``batch`` is not a positive int.

    Examples
    --------
    >>> from reactivex import operators as ops
    >>> from reactive_streams import RangePublisher
    >>> from reactive_streams.adapters.rx import to_observable
    >>> to_observable(RangePublisher(0, 10), batch=4).pipe(
    ...     ops.map(lambda x: x * x), ops.sum()).run()
    285
    """
    require_not_none(publisher, "the publisher", "to_observable")
    if type(batch) is not int or batch < 1:
        raise ValueError(f"to_observable: batch must be a positive int (items requested at a "
                         f"time), got {batch!r}")

    def subscribe(observer: rx_abc.ObserverBase[T],
                  scheduler: rx_abc.SchedulerBase | None = None) -> rx_abc.DisposableBase:
        subscriber = _ObserverSubscriber(observer, batch)

        def start(_: rx_abc.SchedulerBase, __: object = None) -> None:
            if subscriber.observer is not None:  # not disposed meanwhile
                publisher.subscribe(subscriber)

        # Subscribe to the publisher once this call has returned (through the trampoline,
        # as Rx sources do): by then every Rx subscription downstream holds its disposable,
        # so a take(n) downstream reaches the publisher as a cancel at once.
        (scheduler or CurrentThreadScheduler.singleton()).schedule(start)
        return Disposable(subscriber.dispose)

    return reactivex.create(subscribe)


class _ObserverSubscriber(SyncSubscriber[T], Generic[T]):
    """Emits to an observer; the batching and a cancel safe from any thread are
    :class:`~reactive_streams.SyncSubscriber`'s."""

    def __init__(self, observer: rx_abc.ObserverBase[T], batch: int) -> None:
        super().__init__(batch)
        self.observer: rx_abc.ObserverBase[T] | None = observer
        self._emit_failed: BaseException | None = None

    def on_element(self, element: T) -> None:
        assert self.observer is not None
        try:
            self.observer.on_next(element)
        except BaseException as exc:
            self._emit_failed = exc  # the observer's own failure: not passed back to it
            raise

    def on_finished(self, error: BaseException | None) -> None:
        observer, self.observer = self.observer, None
        if observer is None:
            return  # disposed
        if self._emit_failed is not None:
            signal_violation(observer, "on_next", self._emit_failed)
        elif error is None:
            observer.on_completed()
        elif isinstance(error, Exception):
            observer.on_error(error)

    def dispose(self) -> None:
        self.observer = None
        self.cancel()

