"""A Publisher from code that pushes: a client library's callbacks (paho's ``on_message``,
pika's ``basic_consume``, a vendor SDK's listener) or a plain thread.

:func:`create` calls your ``setup(sink)`` once per subscriber; your code calls
``sink.next(element)`` from any thread, ``sink.complete()`` or ``sink.error(exc)`` at the
end, and learns about demand through ``sink.on_request(...)`` and ``sink.requested``, so
it can pause the client while nobody asks and resume it when demand comes. What arrives
beyond demand is held in a buffer of ``buffer_size`` elements at most, and what does not
fit follows the ``overflow`` policy you choose: memory stays bounded whatever the client
does. The anchors elsewhere: Reactor's ``Flux.create`` (``FluxSink``, ``onRequest``,
``onCancel``, ``onDispose``) and RxJava's ``Flowable.create`` with a
``BackpressureStrategy``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ._overflow import (
    DEFAULT_BUFFER_SIZE,
    BufferOverflowError,
    Overflow,
    OverflowBuffer,
    OverflowSubscription,
    checked_policy,
)
from .api import UNBOUNDED, Publisher, Subscriber
from .signalling import COMPLETE, log, require_not_none

__all__ = ["BufferOverflowError", "Overflow", "PushPublisher", "Sink", "create"]

T = TypeVar("T")


class Sink(Generic[T]):
    """What ``setup`` receives: one subscription's way in. Every method may be called from
    any thread, at any time; after the end (completion, an error, a cancel) they do
    nothing.

    Elements are signalled to the subscriber one at a time (§1.3), on the thread that
    pushes (``next``) or the one that requests, whichever finds them ready: a slow
    ``on_next`` holds that thread. Give the publisher an
    :class:`~reactive_streams.AsyncSubscriber` (its own thread) where the client's
    callback thread must never wait.
    """

    def __init__(self, buffer: _PushBuffer[T]) -> None:
        self._buffer = buffer
        self._lock = threading.Lock()
        self._on_request: list[Callable[[int], object]] = []
        self._on_cancel: list[Callable[[], object]] = []
        self._on_dispose: list[Callable[[], object]] = []
        self._disposed = False

    def next(self, element: T) -> None:
        """Signal ``element`` when requested, or hold it (within ``buffer_size``), or apply
        the ``overflow`` policy. ``None`` fails the stream with ``TypeError`` (§2.13)."""
        self._buffer.push(element)

    def complete(self) -> None:
        """End the stream normally, after the elements held."""
        self._buffer.end(COMPLETE)

    def error(self, error: BaseException) -> None:
        """End the stream with ``error`` (``on_error``), after the elements held."""
        require_not_none(error, "the error", "§2.13")
        self._buffer.end(error)

    @property
    def requested(self) -> int:
        """Elements the subscriber asked for that no ``next`` has brought yet: how many
        may be pushed now without reaching the buffer (``UNBOUNDED`` for an unbounded
        request, 0 after the end)."""
        return self._buffer.wanted()

    @property
    def cancelled(self) -> bool:
        """True once the subscriber cancelled."""
        subscription = self._buffer.subscription
        return self._buffer.was_cancelled or (subscription is not None and subscription.cancelled)

    @property
    def dropped(self) -> int:
        """Elements dropped by the overflow policy so far."""
        return self._buffer.dropped

    def on_request(self, hook: Callable[[int], object]) -> Sink[T]:
        """Call ``hook(n)`` on each ``request(n)`` of the subscriber, on its thread, after
        the demand is counted (resume a paused client there). Demand requested before this
        call is passed to ``hook`` at once. Returns the sink."""
        with self._lock:
            self._on_request.append(hook)
        waiting = self.requested
        if waiting > 0:
            _call(hook, waiting)
        return self

    def on_cancel(self, hook: Callable[[], object]) -> Sink[T]:
        """Call ``hook()`` once if the subscriber cancels (at once if it has cancelled
        already). Returns the sink."""
        with self._lock:
            if not self._disposed:
                self._on_cancel.append(hook)
                return self
            cancelled = self._buffer.was_cancelled
        if cancelled:
            _call(hook)
        return self

    def on_dispose(self, hook: Callable[[], object]) -> Sink[T]:
        """Call ``hook()`` once when the subscription ends, for any reason (a cancel, the
        end of the stream, an overflow): close the client there. Called at once if it has
        ended already. Returns the sink."""
        with self._lock:
            if not self._disposed:
                self._on_dispose.append(hook)
                return self
        _call(hook)
        return self

    # -- from the subscription ----------------------------------------------------------------

    def _requested(self, n: int) -> None:
        with self._lock:
            hooks = list(self._on_request)
        for hook in hooks:
            _call(hook, n)

    def _ended(self, cancelled: bool) -> None:
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
            hooks = (self._on_cancel if cancelled else []) + self._on_dispose
            self._on_request.clear()
            self._on_cancel.clear()
            self._on_dispose.clear()
        for hook in hooks:
            _call(hook)


def _call(hook: Callable[..., object], *args: Any) -> None:
    # A hook's own failure must not break the subscription's signals (§2.13 protects the
    # subscriber's side; this is the producer's): logged with its traceback.
    try:
        hook(*args)
    except Exception:
        log.exception("create(): a sink hook %r raised; the stream goes on", hook)


class _PushBuffer(OverflowBuffer[T]):
    def __init__(self, capacity: int, overflow: Overflow) -> None:
        super().__init__(capacity, overflow)
        self.sink = Sink(self)
        self.was_cancelled = False

    def wanted(self) -> int:
        with self._changed:
            if self._closed or self._terminal is not None or self._failure is not None:
                return 0
            if self._requested >= UNBOUNDED:
                return UNBOUNDED
            return max(0, self._requested - self._taken - len(self._buffer))

    def _too_many(self) -> str:
        return (f"create(): the client pushed more than buffer_size={self.capacity} "
                "elements beyond the subscriber's demand (overflow='error'). Pause it while "
                "sink.requested is 0 and resume it in sink.on_request, raise buffer_size, "
                "or choose overflow='drop_oldest', 'drop_latest' or 'block'")

    def _would_deadlock(self) -> str:
        return ("create(): overflow='block' would deadlock: sink.next was called on the "
                "thread that subscribes or requests (inside setup, or inside a request), "
                "so nothing could free space while it waits. Push from the client's own "
                "thread, or choose overflow='error', 'drop_oldest' or 'drop_latest'")

    def _would_block_loop(self) -> str:
        return ("create(): overflow='block' would block an asyncio event loop: sink.next "
                "was called on a thread running one, and waiting there for demand would "
                "freeze the loop. Push from a thread of its own, or choose "
                "overflow='error', 'drop_oldest' or 'drop_latest'")

    def close(self) -> None:
        subscription = self.subscription
        self.was_cancelled = subscription is not None and subscription.cancelled
        super().close()

    def _dispose(self) -> None:
        # Once the stream has ended or failed (close follows a failure: the hooks run once).
        self.sink._ended(self.was_cancelled)


class _PushSubscription(OverflowSubscription[T], Generic[T]):
    def __init__(self, subscriber: Subscriber[T], buffer: _PushBuffer[T]) -> None:
        super().__init__(subscriber, buffer)
        self._sink = buffer.sink

    def request(self, n: int) -> None:
        # The hooks run on the requesting thread, marked as one that must never block in
        # sink.next (overflow='block' there fails the stream instead of hanging).
        counts = self._counts
        me = counts.enter()
        try:
            super().request(n)
            if type(n) is int and n > 0 and not self.done:
                self._sink._requested(n)
        finally:
            counts.leave(me)


class PushPublisher(Publisher[T], Generic[T]):
    """The Publisher :func:`create` returns; see there."""

    def __init__(self, setup: Callable[[Sink[T]], object], *, overflow: Overflow,
                 buffer_size: int = DEFAULT_BUFFER_SIZE) -> None:
        if not callable(setup):
            raise TypeError(f"create(): setup must be a callable taking the sink, got "
                            f"{type(setup).__name__}")
        checked_policy("create()", overflow, buffer_size, least=0)
        self.setup = setup
        self.overflow: Overflow = overflow
        self.buffer_size = buffer_size

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        buffer = _PushBuffer[T](self.buffer_size, self.overflow)
        subscription = _PushSubscription(subscriber, buffer)
        buffer.subscription = subscription
        subscription.start()  # on_subscribe first (§1.9), then the client is set up
        if subscription.done:
            return  # cancelled (or failed) in on_subscribe: no client to start
        me = buffer.enter()  # overflow='block' in setup, on this thread, would deadlock
        try:
            self.setup(buffer.sink)
        except Exception as error:  # a client that could not start: the stream fails
            buffer.end(error)
        finally:
            buffer.leave(me)

    def __repr__(self) -> str:
        return (f"create({getattr(self.setup, '__qualname__', self.setup)!r}, "
                f"overflow={self.overflow!r}, buffer_size={self.buffer_size})")


def create(setup: Callable[[Sink[T]], object], *, overflow: Overflow,
           buffer_size: int = DEFAULT_BUFFER_SIZE) -> PushPublisher[T]:
    """A Publisher from code that pushes: a client's callbacks, or a thread.

    For each subscriber, ``setup(sink)`` is called once, after ``on_subscribe``, on the
    subscribing thread; it starts the client (or the thread) and returns. The client then
    calls ``sink.next(element)`` for each element, from any thread, and ``sink.complete()``
    or ``sink.error(exc)`` at the end; ``setup`` raising fails the stream with that error.
    :class:`Sink` says how demand reaches your code: ``sink.requested`` (how many the
    subscriber still awaits), ``sink.on_request(hook)`` (called with each ``request(n)``:
    resume a paused client there), ``sink.on_cancel(hook)`` and ``sink.on_dispose(hook)``
    (the subscription has ended: stop and close the client there).

    Elements the subscriber requested are signalled at once; up to ``buffer_size`` more
    are held until it requests them. An element that finds that buffer full follows
    ``overflow``:

    ``"error"``
        The stream fails at once with :class:`BufferOverflowError`, which says what to
        do; the elements held are dropped and the dispose hooks run. With
        ``buffer_size=0`` any element beyond demand fails the stream: for a client that
        must honour demand exactly.
    ``"drop_latest"``
        The new element is dropped (counted in ``sink.dropped``); the held ones stay.
    ``"drop_oldest"``
        The oldest held element is dropped to make room for the new one; with
        ``buffer_size=1`` the subscriber gets the latest value whenever it asks (a
        sensor's reading, a price).
    ``"block"``
        ``sink.next`` waits, holding the pushing thread, until demand frees room (or the
        subscription ends): backpressure for a thread of yours that produces. Not on the
        thread that subscribes or requests, nor on an asyncio loop's thread: there the
        stream fails with ``RuntimeError`` saying so, rather than hang.

    Pausing the client while ``sink.requested`` is 0 (in its callback) and resuming it in
    ``on_request`` keeps the buffer small under every policy (what was in flight when the
    client paused still arrives): the broker's queue grows, not this process's memory.
    Check and pause under a lock that ``on_request`` takes too, as below, or a request
    between the check and the pause leaves the client paused with demand outstanding.
    The narrative page, with a paho client feeding Spark, is
    :doc:`/how-to/callback-client`.

    Parameters
    ----------
    setup : callable
        Called with the :class:`Sink` of each new subscription.
    overflow : {"error", "drop_oldest", "drop_latest", "block"}
        What to do with an element that finds the buffer full (no default: choose).
    buffer_size : int
        Elements held beyond demand, 0 or more (1,024 by default).

    Returns
    -------
    PushPublisher

    Raises
    ------
    ValueError
        If ``overflow`` or ``buffer_size`` is not one of the accepted values.
    TypeError
        If ``setup`` is not callable.

    Examples
    --------
    A thread that produces as fast as the subscriber asks (``"block"``):

    >>> import threading
    >>> from reactive_streams import collect, create
    >>> def setup(sink):
    ...     def produce():
    ...         for i in range(5):
    ...             sink.next(i * i)      # waits while nothing is requested
    ...         sink.complete()
    ...     threading.Thread(target=produce, daemon=True).start()
    >>> collect(create(setup, overflow="block", buffer_size=0), timeout=5)
    [0, 1, 4, 9, 16]

    A callback client, paused while nobody asks (``Client`` stands for yours):

    >>> def setup(sink):                                         # doctest: +SKIP
    ...     client, turn = Client(), threading.Lock()
    ...     def on_message(message):       # the client's thread
    ...         sink.next(message)
    ...         with turn:
    ...             if sink.requested == 0:
    ...                 client.pause()     # nobody asks: let the broker hold the rest
    ...     def on_request(n):
    ...         with turn:
    ...             client.resume()
    ...     sink.on_request(on_request)
    ...     client.start(on_message)
    ...     sink.on_dispose(client.close)  # after start: a cancel meanwhile closes it too
    >>> publisher = create(setup, overflow="error", buffer_size=100)  # doctest: +SKIP
    """
    return PushPublisher(setup, overflow=overflow, buffer_size=buffer_size)
