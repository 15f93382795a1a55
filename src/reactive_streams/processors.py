"""Reference processor: map elements through a function, with a bounded buffer."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .api import Processor, Subscriber, Subscription
from .signalling import COMPLETE, Emitter, SerialWorker, Source, Terminal, require_not_none

__all__ = ["MapProcessor"]

T = TypeVar("T")
R = TypeVar("R")


class MapProcessor(Processor[T, R], Generic[T, R]):
    """Applies ``fn`` to each element and multicasts the results to its subscribers.

    Upstream demand is bounded by the buffer: the processor requests from upstream only
    while the slowest subscriber's backlog plus the outstanding upstream demand leaves
    room in ``buffer_size``, refilling when half of it is free. Nothing is requested before
    the first subscriber arrives. A subscriber that joins later starts at the next
    element that arrives from upstream. An element goes straight to a subscriber that has
    demand and nothing queued, on the thread that delivered it from upstream; otherwise
    it waits in that subscriber's backlog, which is signalled in chunks as demand comes.

    Errors are propagated (§4.2): an upstream ``on_error``, or an exception raised by
    ``fn`` (which also cancels upstream), reaches every subscriber after the elements it
    had already requested. Completion reaches each subscriber after its backlog. When the
    last subscriber cancels, the processor cancels upstream; a subscriber arriving after
    that gets ``on_error``.

    Parameters
    ----------
    fn : callable
        Maps one element; must not return ``None`` (§2.13).
    buffer_size : int
        Largest number of elements held for any one subscriber, ``>= 1``.

    Examples
    --------
    >>> from reactive_streams import MapProcessor, RangePublisher, collect
    >>> doubled = MapProcessor(lambda x: 2 * x, buffer_size=4)
    >>> RangePublisher(0, 5).subscribe(doubled)
    >>> collect(doubled, timeout=5)
    [0, 2, 4, 6, 8]
    """

    def __init__(self, fn: Callable[[T], R], buffer_size: int = 256) -> None:
        if not callable(fn):
            raise TypeError(f"MapProcessor: fn must be callable, got {type(fn).__name__}")
        if type(buffer_size) is not int or buffer_size < 1:
            raise ValueError(f"MapProcessor: buffer_size must be an int >= 1, got {buffer_size!r}")
        self._fn = fn
        self.buffer_size = buffer_size
        self._lock = threading.Lock()
        self._upstream: Subscription | None = None
        self._outlets: list[_Outlet[R]] = []
        self._fanout: tuple[_Outlet[R], ...] = ()  # _outlets as on_next reads it
        self._refill_room = max(1, buffer_size // 2)  # free room that makes a request
        # Upstream demand not yet answered is _asked - _received: _asked is written under
        # the lock by the upstream link, _received only by on_next (upstream's signals
        # are serial, §1.3), so on_next needs no lock for it.
        self._asked = 0
        self._received = 0
        self._terminal: Terminal | None = None
        self._cancel_upstream = False
        # Every request/cancel to upstream goes through this one loop, whichever
        # subscriber's thread asked for it, so those calls are serial (§2.7).
        self._link = _UpstreamLink(self)

    # -- introspection ---------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """The largest backlog held for one subscriber."""
        with self._lock:
            return max((len(o.queue) for o in self._outlets), default=0)

    @property
    def upstream_demand(self) -> int:
        """Requested from upstream and not yet received.

        ``buffered + upstream_demand <= buffer_size`` whenever both are read at once
        (see :meth:`snapshot`)."""
        with self._lock:
            return self._asked - self._received

    def snapshot(self) -> tuple[int, int]:
        """``(buffered, upstream_demand)`` read together, for progress displays."""
        with self._lock:
            return (max((len(o.queue) for o in self._outlets), default=0),
                    self._asked - self._received)

    # -- Subscriber side: signals from upstream, serial (§1.3) -----------------------------

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "on_subscribe's subscription", "§2.13")
        with self._lock:
            refuse = self._upstream is not None or self._terminal is not None
            if not refuse:
                self._upstream = subscription
        if refuse:
            subscription.cancel()  # §2.5: a second subscription is cancelled
            return
        self._link.schedule()

    def on_next(self, element: T) -> None:
        if element is None:
            raise TypeError("§2.13: on_next's element must not be None")
        if self._terminal is not None:
            return  # ended (fn failed, or no subscriber left): late elements are dropped
        try:
            mapped = self._fn(element)
            if mapped is None:
                raise TypeError(f"§2.13: MapProcessor's fn returned None for {element!r}; "
                                "elements must not be None")
        except Exception as exc:
            self._finish(exc, cancel_upstream=True)
            return
        outlets = self._fanout
        for outlet in outlets:
            # Straight to the subscriber when nothing is queued before it and it has
            # demand; else queued, and its emitter takes the queue in chunks.
            if outlet.queue or not outlet.emitter.offer(mapped):
                outlet.queue.append(mapped)
                outlet.emitter.signal()
        # Counted after the element is delivered or queued, so that the room computed by
        # _upstream_call meanwhile is, if anything, too small; this check, and the one
        # after each pull, ask again when the room may have reached the refill mark.
        self._received += 1
        if outlets and self.buffer_size - len(outlets[0].queue) - self._asked + \
                self._received >= self._refill_room:
            self._link.schedule()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "on_error's error", "§2.13")
        self._finish(error, cancel_upstream=False)  # §4.2: propagate

    def on_complete(self) -> None:
        self._finish(COMPLETE, cancel_upstream=False)

    # -- Publisher side ------------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber[R]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        outlet = _Outlet(self)
        outlet.emitter = Emitter(subscriber, outlet)
        with self._lock:
            self._outlets.append(outlet)
            self._fanout = tuple(self._outlets)
        outlet.emitter.start()
        self._link.schedule()

    # -- internals -------------------------------------------------------------------------------

    def _finish(self, terminal: Terminal, cancel_upstream: bool) -> None:
        with self._lock:
            if self._terminal is not None:
                return
            self._terminal = terminal
            if cancel_upstream:
                self._cancel_upstream = True
            else:
                self._upstream = None  # upstream ended by itself
            outlets = tuple(self._outlets)
        if cancel_upstream:
            self._link.schedule()
        for outlet in outlets:
            outlet.emitter.signal()

    def _upstream_call(self) -> tuple[Subscription, int] | None:
        """What to tell upstream now: ``(subscription, n)`` to request n, n == 0 to cancel."""
        with self._lock:
            upstream = self._upstream
            if upstream is None:
                return None
            if self._cancel_upstream:
                self._upstream = None
                return upstream, 0
            if self._terminal is not None or not self._outlets:
                return None
            backlog = max(len(o.queue) for o in self._outlets)
            room = self.buffer_size - backlog - (self._asked - self._received)
            if room < self._refill_room:
                return None  # refill when half the buffer is free
            self._asked += room
            return upstream, room

    def _take(self, outlet: _Outlet[R], n: int) -> tuple[Sequence[R], Terminal | None]:
        # No lock: only this outlet's emitter loop takes from its queue, and the terminal
        # state is read before the elements, so every element sent before it (§1.3: on
        # the upstream's signals, before the terminal one) is in the queue by then.
        terminal = self._terminal
        queue = outlet.queue
        if n >= len(queue):
            taken = list(queue)
            for _ in taken:
                queue.popleft()  # not clear(): on_next may be appending meanwhile
        else:
            taken = [queue.popleft() for _ in range(n)]
        if queue and (terminal is COMPLETE or n > 0):
            # Complete only after the whole backlog. An error follows the elements
            # requested before it (§4.2): a full pull may have been cut at the
            # emitter's chunk, with demand left. The emitter then pulls again, and a
            # pull of 0 means that demand is used up.
            terminal = None
        # Ask upstream for more only if the room may have reached the refill mark: this
        # backlog is a lower bound of the largest one (_upstream_call has the exact
        # count). One read of each, no lock, for most elements.
        if taken and self.buffer_size - len(queue) - self._asked + self._received >= \
                self._refill_room:
            self._link.schedule()
        return taken, terminal

    def _remove(self, outlet: _Outlet[R]) -> None:
        with self._lock:
            self._outlets.remove(outlet)
            self._fanout = tuple(self._outlets)
            last = not self._outlets and self._terminal is None
            if last:
                self._cancel_upstream = True
                self._terminal = RuntimeError(
                    "MapProcessor: upstream was cancelled when its last subscriber left")
        # Cancels upstream after the last subscriber, or asks for more: the slowest
        # subscriber may have been this one.
        self._link.schedule()


class _UpstreamLink(SerialWorker):
    """Makes the processor's calls to its upstream subscription, one at a time."""

    def __init__(self, processor: MapProcessor[Any, Any]) -> None:
        super().__init__()
        self.processor = processor

    def schedule(self) -> None:
        self._schedule()

    def _work(self) -> bool:
        call = self.processor._upstream_call()
        if call is not None:
            upstream, n = call
            if n:
                upstream.request(n)
            else:
                upstream.cancel()
        return False

    def _work_failed(self, error: BaseException) -> None:
        # Upstream raised from request or cancel (breaking §3.16 or §3.15): the processor
        # fails with that error (§4.2) and cancels upstream on the loop's next turn.
        self.processor._finish(error, cancel_upstream=True)


class _Outlet(Source[R], Generic[R]):
    """One subscriber's backlog, drained by its own emitter."""

    emitter: Emitter[R]

    def __init__(self, processor: MapProcessor[Any, R]) -> None:
        self.processor = processor
        self.queue: collections.deque[R] = collections.deque()

    def pull(self, n: int) -> tuple[Sequence[R], Terminal | None]:
        return self.processor._take(self, n)

    def close(self) -> None:
        self.processor._remove(self)
