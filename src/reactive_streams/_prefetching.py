"""The subscriber side of iteration over a Publisher, shared by ``async for``
(:class:`reactive_streams.adapters.aio.IteratorSubscriber`) and a plain ``for``
(:class:`reactive_streams.blocking.BlockingSubscriber`): a buffer of at most ``prefetch``
elements, refilled in halves as the consumer takes them. Each subclass says only how a
waiting consumer is woken (an asyncio future, a condition variable)."""

from __future__ import annotations

import collections
from abc import abstractmethod
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from .api import Subscriber, Subscription
from .signalling import COMPLETE, SerialWorker, Terminal, require_not_none

T = TypeVar("T")

#: Elements requested ahead of the consumer when no ``prefetch`` is given.
DEFAULT_PREFETCH: Final[int] = 256


def checked_prefetch(prefetch: object) -> int:
    """``prefetch`` itself if it is a positive int; otherwise ``ValueError`` saying so."""
    if type(prefetch) is not int or prefetch < 1:
        raise ValueError(f"prefetch must be a positive int (elements requested ahead of the "
                         f"consumer, e.g. {DEFAULT_PREFETCH}), got {prefetch!r}")
    return prefetch


class PrefetchingSubscriber(SerialWorker, Subscriber[T], Generic[T]):
    """Signals may arrive on any thread; the consumer takes elements with :meth:`_take_locked`.

    Demand: ``prefetch`` is requested in ``on_subscribe``; then, each time the consumer
    has taken ``max(1, prefetch // 2)`` elements, that many more, so requested-and-not-
    received plus buffered never exceeds ``prefetch``. An element beyond demand (a
    publisher breaking §1.1) ends the iteration with ``RuntimeError``. Calls on the
    subscription are serialised (§2.7) by the work-in-progress loop.
    """

    def __init__(self, prefetch: int = DEFAULT_PREFETCH) -> None:
        super().__init__()  # no dispatch: subscription calls run on the caller's thread
        self.prefetch = checked_prefetch(prefetch)
        self._refill_at = max(1, prefetch // 2)
        self._buffer: collections.deque[T] = collections.deque()
        self._subscription: Subscription | None = None
        self._outstanding = 0  # requested (or about to be) and not yet received
        self._taken = 0  # taken by the consumer since the last request
        self._to_request = 0  # decided, not yet passed to the subscription
        self._cancel_pending = False  # decided, not yet passed to the subscription
        self._cancelled = False
        self._terminal: Terminal | None = None

    @abstractmethod
    def _wake_locked(self) -> Callable[[], None] | None:
        """Called holding the lock when a waiting consumer may go on (an element, the end,
        a cancel): wake it, or return what wakes it, to be called once the lock is free."""

    # -- Subscriber: any thread ------------------------------------------------------------

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "on_subscribe's subscription", "§2.13")
        with self._lock:
            if self._subscription is not None or self._terminal is not None:
                second = True  # §2.5: one active subscription at a time
            else:
                second = False
                self._subscription = subscription
                if not self._cancelled:
                    self._outstanding = self._to_request = self.prefetch
        if second:
            subscription.cancel()
            return
        self._schedule()  # requests prefetch, or cancels if cancel() came first

    def on_next(self, element: T) -> None:
        require_not_none(element, "on_next's element", "§2.13")
        with self._lock:
            if self._cancelled or self._terminal is not None:
                return  # §2.8: elements may still arrive after cancel
            excess = self._outstanding == 0
            if excess:
                self._terminal = RuntimeError(
                    "§1.1: the publisher signalled an element beyond the demand of this "
                    f"iterator (prefetch={self.prefetch}); the subscription is cancelled")
                self._cancel_pending = True
            else:
                self._outstanding -= 1
                self._buffer.append(element)
            wake = self._wake_locked()
        if excess:
            self._schedule()
        if wake is not None:
            wake()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "on_error's error", "§2.13")
        self._end(error)

    def on_complete(self) -> None:
        self._end(COMPLETE)

    def _end(self, terminal: Terminal) -> None:
        with self._lock:
            if self._cancelled or self._terminal is not None:
                return
            self._terminal = terminal
            self._subscription = None  # §2.4: the subscription is over
            wake = self._wake_locked()
        if wake is not None:
            wake()

    # -- consumer ----------------------------------------------------------------------------

    def _take_locked(self, end: type[Exception]) -> tuple[bool, T | None, bool]:
        """Holding the lock: ``(True, element, refill)`` for the next element, ``(False,
        None, False)`` when the consumer must wait; at the end raises the stream's error
        (once) or ``end``. ``refill``: call :meth:`_schedule` once the lock is free."""
        if self._buffer:
            element = self._buffer.popleft()
            self._taken += 1
            refill = self._taken >= self._refill_at and self._subscription is not None \
                and not self._cancelled
            if refill:
                self._outstanding += self._taken
                self._to_request += self._taken
                self._taken = 0
            return True, element, refill
        terminal = self._terminal
        if terminal is not None or self._cancelled:
            self._cancelled = True  # the iteration is over: raise the error once
            self._terminal = COMPLETE
            if isinstance(terminal, BaseException):
                raise terminal
            raise end
        return False, None, False

    def cancel(self) -> None:
        """Cancel the subscription from any thread; returns at once, harmless if repeated.

        Buffered elements are dropped, and a waiting consumer's iteration ends.
        """
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = self._cancel_pending = True
            self._buffer.clear()
            wake = self._wake_locked()
        self._schedule()
        if wake is not None:
            wake()

    @property
    def buffered(self) -> int:
        """Elements received and not yet taken by the consumer."""
        return len(self._buffer)

    # -- calls on the subscription, serialised (§2.7) by the work-in-progress loop -----------

    def _work(self) -> bool:
        with self._lock:
            subscription = self._subscription
            if subscription is None:
                return False  # not subscribed yet (on_subscribe schedules again), or over
            cancel = self._cancel_pending
            if cancel:
                self._subscription = None
            n, self._to_request = self._to_request, 0
        if cancel:
            subscription.cancel()  # §3.5: returns at once
        elif n > 0:
            subscription.request(n)  # may deliver on_next inline: they only buffer
        return False

    def _work_failed(self, error: BaseException) -> None:
        # The subscription raised from request or cancel (breaking §3.15, §3.16): the
        # iteration fails with that error.
        with self._lock:
            self._subscription = None
            if self._terminal is None and not self._cancelled:
                self._terminal = error
            wake = self._wake_locked()
        if wake is not None:
            wake()
