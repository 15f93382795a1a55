"""A bounded buffer between a producer that pushes (an Observable, a client's callbacks, a
thread) and an :class:`~reactive_streams.signalling.Emitter`, with an explicit overflow
policy for what arrives beyond the subscriber's demand and ``buffer_size``. Shared by
:func:`reactive_streams.adapters.rx.from_observable` and :func:`reactive_streams.create`;
each subclass names its producer in the messages and says how the producer is released.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Sequence
from typing import Final, Generic, Literal, TypeVar, get_args

from .api import UNBOUNDED, Subscriber
from .errors import ReactiveStreamsError
from .signalling import Emitter, Source, Terminal

T = TypeVar("T")

#: What happens to an element that arrives when the buffer beyond demand is full.
Overflow = Literal["error", "drop_oldest", "drop_latest", "block"]
OVERFLOW_POLICIES: Final[tuple[str, ...]] = get_args(Overflow)

#: Elements held beyond demand when no ``buffer_size`` is given.
DEFAULT_BUFFER_SIZE: Final[int] = 1024


class BufferOverflowError(ReactiveStreamsError, RuntimeError):
    """A producer under ``overflow="error"`` pushed more elements than the subscriber
    requested plus ``buffer_size``."""


def checked_policy(what: str, overflow: object, buffer_size: object, least: int = 1) -> None:
    """``ValueError`` naming ``what`` for an ``overflow`` or ``buffer_size`` not accepted."""
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"{what}: overflow must be one of "
                         f"{', '.join(map(repr, OVERFLOW_POLICIES))}, got {overflow!r}")
    if type(buffer_size) is not int or buffer_size < least:
        kind = "a positive int" if least == 1 else f"an int >= {least}"
        raise ValueError(f"{what}: buffer_size must be {kind} (elements held beyond "
                         f"demand), got {buffer_size!r}")


class OverflowSubscription(Emitter[T], Generic[T]):
    """The common :class:`~reactive_streams.signalling.Emitter`, which also tells its
    :class:`OverflowBuffer` about demand and counts what the overflow policy dropped."""

    def __init__(self, subscriber: Subscriber[T], source: OverflowBuffer[T]) -> None:
        super().__init__(subscriber, source)
        self._counts = source

    @property
    def dropped(self) -> int:
        """Elements of this subscription dropped by the overflow policy."""
        return self._counts.dropped

    def request(self, n: int) -> None:
        counts = self._counts
        me = counts.enter()  # blocking in push on this thread would deadlock
        try:
            if type(n) is int and n > 0 and not self.done:
                counts.add_demand(n)
            super().request(n)
        finally:
            counts.leave(me)


class OverflowBuffer(Source[T]):
    """The bounded buffer of one subscription; see :func:`reactive_streams.create` for the
    policies. A subclass names its producer (:meth:`_too_many`, :meth:`_would_deadlock`,
    :meth:`_would_block_loop`) and releases it (:meth:`_dispose`)."""

    #: Who pushes, in messages: "the producer pushed None", ...
    producer = "the producer pushed"

    def __init__(self, capacity: int, overflow: Overflow) -> None:
        self.subscription: OverflowSubscription[T] | None = None
        self.capacity = capacity
        self.overflow = overflow
        self.dropped = 0
        self._changed = threading.Condition(threading.Lock())
        self._blocked = 0  # producers waiting for room (overflow='block')
        self._buffer: collections.deque[T] = collections.deque()
        # Capacity is buffer_size plus the demand not yet taken from the buffer, so only
        # elements beyond demand count against buffer_size.
        self._requested = 0
        self._taken = 0
        self._terminal: Terminal | None = None  # from the producer: after the buffer
        self._failure: BaseException | None = None  # overflow, misuse: at once
        self._closed = False
        self._inside: set[int] = set()  # threads that must never block in push

    # -- what a subclass says ----------------------------------------------------------------

    def _too_many(self) -> str:
        """The message of ``overflow="error"``."""
        return (f"more than buffer_size={self.capacity} elements beyond the subscriber's "
                "demand (overflow='error')")

    def _would_deadlock(self) -> str:
        """The message for ``overflow="block"`` on a thread that subscribes or requests."""
        return ("overflow='block' would deadlock: the producer pushed on the thread that "
                "subscribes or requests")

    def _would_block_loop(self) -> str:
        """The message for ``overflow="block"`` on a thread running an asyncio loop."""
        return "overflow='block' would block the asyncio event loop the producer pushed on"

    def _dispose(self) -> None:
        """Release the producer (once the stream has ended or failed); called unlocked."""

    def _dropped_one(self) -> None:
        """Count one element dropped by the policy; called holding the lock."""
        self.dropped += 1

    # -- demand, from the subscription -------------------------------------------------------

    def enter(self) -> int | None:
        """Mark the calling thread as one whose blocking in :meth:`push` would deadlock;
        returns what :meth:`leave` takes (``None`` when it was marked already)."""
        me = threading.get_ident()
        if me in self._inside:
            return None
        self._inside.add(me)
        return me

    def leave(self, me: int | None) -> None:
        if me is not None:
            self._inside.discard(me)

    def add_demand(self, n: int) -> None:
        with self._changed:
            self._requested = min(self._requested + n, UNBOUNDED)
            if self._blocked:
                self._changed.notify_all()  # more demand: more room for it

    # -- the producer: any thread ----------------------------------------------------------

    def _room(self) -> bool:
        """Whether an element fits now; call with the lock held."""
        if self._requested >= UNBOUNDED:
            return True
        return len(self._buffer) < self.capacity + (self._requested - self._taken)

    def push(self, item: T) -> None:
        """An element from the producer: buffered, or what the policy says."""
        if item is None:
            self.fail(TypeError(f"§2.13: {self.producer} None; elements must not be None"),
                      dropped=0, at_once=False)
            return
        failure: BaseException | None = None
        with self._changed:
            if self._closed or self._terminal is not None or self._failure is not None:
                return
            if self._room():
                self._buffer.append(item)
            elif self.overflow == "drop_oldest":
                if self._buffer:
                    self._buffer.popleft()
                    self._buffer.append(item)
                self._dropped_one()  # with no buffer at all, the new one is the oldest
            elif self.overflow == "drop_latest":
                self._dropped_one()
                return  # nothing new to signal
            elif self.overflow == "error":
                failure = BufferOverflowError(self._too_many())
            elif threading.get_ident() in self._inside:
                failure = RuntimeError(self._would_deadlock())
            elif asyncio._get_running_loop() is not None:
                failure = RuntimeError(self._would_block_loop())
            else:
                self._blocked += 1
                while not self._room() and not self._ended():
                    self._changed.wait()  # woken by pull, request, the end and close
                self._blocked -= 1
                if self._ended():
                    return  # the stream ended meanwhile: nothing follows its end
                self._buffer.append(item)
        if failure is not None:
            self.fail(failure, dropped=1)  # the element that did not fit, and the buffer
            return
        self._signal()

    def _ended(self) -> bool:
        """Whether nothing more may be buffered; call with the lock held."""
        return self._closed or self._terminal is not None or self._failure is not None

    def end(self, terminal: Terminal) -> None:
        """The producer's end: ``COMPLETE`` or its error, signalled after the buffer."""
        with self._changed:
            if self._ended():
                return
            self._terminal = terminal
            self._changed.notify_all()  # a blocked producer returns: the stream has ended
        self._signal()

    def fail(self, error: BaseException, dropped: int, at_once: bool = True) -> None:
        """Fail the stream: at once, dropping the buffer, or after it."""
        with self._changed:
            if self._closed or self._terminal is not None or self._failure is not None:
                return
            if at_once:
                dropped += len(self._buffer)
                self._buffer.clear()
                self._failure = error
            else:
                self._terminal = error
            self._changed.notify_all()  # a blocked producer returns: the stream has ended
            self.dropped += dropped
            self._count(dropped)
        self._dispose()
        self._signal()

    def _count(self, dropped: int) -> None:
        """Count ``dropped`` elements of a failure (a subclass adds its totals)."""

    def _signal(self) -> None:
        subscription = self.subscription
        if subscription is not None:
            me = self.enter()  # the loop may run here and signal the subscriber
            try:
                subscription.signal()
            finally:
                self.leave(me)

    # -- Source: the emitter's loop --------------------------------------------------------

    def pull(self, n: int) -> tuple[Sequence[T], Terminal | None]:
        with self._changed:
            if self._failure is not None:
                return (), self._failure
            buffer = self._buffer
            taken = [buffer.popleft() for _ in range(min(n, len(buffer)))]
            if taken:
                self._taken += len(taken)
                if self._blocked:
                    self._changed.notify_all()  # room for it
            return taken, (None if buffer else self._terminal)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._buffer.clear()
            self._changed.notify_all()  # a blocked producer returns
        self.subscription = None
        self._dispose()
