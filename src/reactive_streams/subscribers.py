"""Reference subscribers: override one method that handles an element.

Both request demand in batches and refill when half the batch is consumed.
:class:`SyncSubscriber` handles signals on the publisher's thread; :class:`AsyncSubscriber`
hands them to a thread of its own so that slow handling never blocks the publisher (§2.2).
:func:`collect` gathers a whole stream into a list.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Executor
from itertools import islice
from typing import Any, Generic, TypeVar

from .api import UNBOUNDED, Publisher, Subscriber, Subscription
from .runners import ThreadRunner
from .signalling import SerialWorker, require_not_none, signal_violation

__all__ = ["AsyncSubscriber", "SyncSubscriber", "collect"]

T = TypeVar("T")

#: A ``_slow_at`` above any outstanding demand: every element takes the long way.
_ALWAYS = UNBOUNDED

#: Marks the end of a chunk in SyncSubscriber._deliver.
_END: Any = object()


class _BatchingSubscriber(Subscriber[T], Generic[T]):
    """Demand in batches, the user's element handler, and a way to wait for the end."""

    def __init__(self, batch_size: int) -> None:
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"{type(self).__name__}: batch_size must be an int >= 1, "
                             f"got {batch_size!r}")
        self.batch_size = batch_size
        self._refill_at = batch_size // 2  # outstanding demand at which to ask for more
        self._subscription: Subscription | None = None
        self._outstanding = 0
        self._stopped = False  # cancelled, or a terminal signal handled
        # Set by cancel() on any thread; acted on by the thread handling signals (§2.7).
        self._cancel_requested = False
        # An element after which the outstanding demand is at or below this takes the
        # long way (_handle_next): _refill_at while subscribed, so the refill is made
        # there; _ALWAYS when anything else is due (no subscription yet, cancel
        # requested, stopped). One comparison per element instead of four checks.
        self._slow_at = _ALWAYS
        self._finished = threading.Event()
        self._error: BaseException | None = None

    # -- for users -------------------------------------------------------------------------

    def on_element(self, element: T) -> bool | None:
        """Handle one element. Return ``False`` to cancel the subscription.

        An exception raised here cancels the subscription and ends the subscriber with
        that error (it is not raised to the publisher, §2.13).
        """
        raise NotImplementedError(f"{type(self).__name__} must override on_element")

    def on_finished(self, error: BaseException | None) -> None:
        """Called once at the end: ``error`` is ``None`` after completion or a cancel."""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the end of the stream; return whether it ended within ``timeout``."""
        return self._finished.wait(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the end of the stream; raise its error, or ``TimeoutError``."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"{type(self).__name__}: the stream did not end within "
                               f"{timeout} s")
        if self._error is not None:
            raise self._error

    @property
    def finished(self) -> bool:
        """True once the stream ended, by terminal signal, cancel, or handler error."""
        return self._finished.is_set()

    @property
    def outstanding(self) -> int:
        """Demand requested and not yet handled (for :class:`AsyncSubscriber` this includes
        elements received and still queued). Counted down before ``on_element`` runs."""
        return self._outstanding

    # -- signal handling, on whatever thread the subclass chooses ---------------------------

    def _handle_subscribe(self, subscription: Subscription) -> None:
        if self._subscription is not None or self._stopped:
            subscription.cancel()  # §2.5: one active subscription at a time
            return
        self._subscription = subscription
        if self._cancel_requested:
            self._stop(None)  # cancelled before the subscription arrived
            return
        self._outstanding = self.batch_size
        self._slow_at = self._refill_at
        if self._cancel_requested:  # cancel() raised _slow_at before this lowered it
            self._slow_at = _ALWAYS
        subscription.request(self.batch_size)

    def _handle_next(self, element: T) -> None:
        """An element, the long way: every check, and the refill."""
        if self._stopped:
            return  # §2.8: elements may still arrive after cancel
        if self._cancel_requested:
            self._stop(None)
            return
        self._outstanding -= 1
        try:
            keep = self.on_element(element)
        except BaseException as exc:
            self._stop(exc)
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: not ours to absorb
            return
        self._after_element(keep)

    def _after_element(self, keep: bool | None) -> None:
        """Cancel when the handler asked to, or refill when half the batch is used."""
        if self._stopped:
            return
        if keep is False or self._cancel_requested:
            self._stop(None)
        elif self._outstanding <= self._refill_at:
            more = self.batch_size - self._outstanding
            self._outstanding += more
            assert self._subscription is not None
            self._subscription.request(more)

    def _handle_terminal(self, error: BaseException | None) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._slow_at = _ALWAYS
        self._subscription = None  # §2.4: the subscription is over
        self._end(error)

    def _stop(self, error: BaseException | None) -> None:
        """Cancel from inside the handler's thread and end with ``error``."""
        if self._stopped:
            return
        self._stopped = True
        self._slow_at = _ALWAYS
        subscription, self._subscription = self._subscription, None
        try:
            if subscription is not None:
                subscription.cancel()
        finally:
            self._end(error)  # even if cancel() raised, breaking §3.15

    def _end(self, error: BaseException | None) -> None:
        self._error = error
        try:
            self.on_finished(error)
        except Exception as exc:
            signal_violation(self, "on_finished", exc)
        finally:
            self._finished.set()


class SyncSubscriber(_BatchingSubscriber[T], Generic[T]):
    """A subscriber that handles every signal on the thread that sends it.

    Override :meth:`on_element` (and optionally :meth:`on_finished`). Handling must be
    quick: it runs on the publisher's thread.

    Parameters
    ----------
    batch_size : int
        Demand requested at a time; refilled when half of it has arrived.

    Examples
    --------
    >>> from reactive_streams import RangePublisher, SyncSubscriber
    >>> class Sum(SyncSubscriber[int]):
    ...     total = 0
    ...     def on_element(self, element):
    ...         self.total += element
    >>> s = Sum(batch_size=8)
    >>> RangePublisher(1, 100).subscribe(s)
    >>> s.join(timeout=5); s.total
    5050
    """

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__(batch_size)
        # Held while the subscription is called (request, cancel) and while a signal
        # other than a plain element is handled. A cancel() from another thread takes it
        # only if it is free; otherwise the signal's thread does the cancelling on its
        # way out, so calls on the subscription stay serial (§2.7) and cancel() never
        # blocks.
        self._guard = threading.RLock()
        # True while on_element runs on the signal's thread without the guard. cancel()
        # raises _slow_at and then reads this; on_next sets this and then reads
        # _slow_at: one of the two sees the other, so a cancel() from another thread
        # never ends the subscriber while on_element is running.
        self._busy = False

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "on_subscribe's subscription", "§2.13")
        with self._guard:
            self._handle_subscribe(subscription)
        self._cancel_if_requested()

    def on_next(self, element: T) -> None:
        if element is None:
            raise TypeError("§2.13: on_next's element must not be None")
        # The common case takes no lock: one element, handled, demand counted.
        self._busy = True
        left = self._outstanding - 1
        if left <= self._slow_at:  # a refill is due, or more than handling the element
            self._busy = False
            with self._guard:
                self._handle_next(element)
            self._cancel_if_requested()
            return
        self._outstanding = left
        try:
            keep = self.on_element(element)
        except BaseException as exc:
            self._handler_raised(exc)
            return
        self._busy = False
        if keep is False or left <= self._slow_at:  # or cancel() came meanwhile
            with self._guard:
                self._after_element(keep)
            self._cancel_if_requested()

    def _handler_raised(self, error: BaseException) -> None:
        """on_element raised outside the guard: cancel, end with ``error`` (§2.13)."""
        self._busy = False
        with self._guard:
            self._stop(error)
        if not isinstance(error, Exception):
            raise error  # KeyboardInterrupt, SystemExit: not ours to absorb

    #: The ``on_next`` that :meth:`_deliver` stands for. An emitter hands this subscriber
    #: whole chunks only while ``type(subscriber).on_next is _batched_on_next``, so a
    #: subclass that overrides ``on_next`` gets every ``on_next`` call.
    _batched_on_next = on_next

    def _deliver(self, elements: Iterable[T]) -> int:
        """Handle ``elements`` in order, exactly as that many :meth:`on_next` calls would.

        The fast path of :class:`~reactive_streams.signalling.Emitter`: one call per chunk
        instead of one per element. Each element is counted against the outstanding demand
        before ``on_element`` sees it, refills are requested at the same points, and a
        cancel (``on_element`` returning False or raising, :meth:`cancel` from any thread)
        stops the delivery after the element being handled (§2.7, §3.12). The caller
        delivers only within its demand (§1.1), from elements already produced: no code
        of anyone else's may run between two elements (iterating ``elements`` included),
        since a cancel() from another thread meanwhile waits for the next element or the
        end of the chunk.

        Returns the number of elements taken from ``elements``; fewer than it holds only
        once this subscriber has stopped (and so cancelled the subscription). Raises
        ``TypeError`` at a ``None`` element (§2.13), after handling the ones before it, and
        whatever iterating ``elements`` raises.
        """
        on_element = self.on_element
        it = iter(elements)
        count = 0
        # Raised for the whole chunk; see on_next for how it pairs with cancel().
        self._busy = True
        try:
            while True:
                # Elements that go the short way, as on_next's one comparison would sort
                # them: until a refill is due. A cancel is looked for after each one.
                room = self._outstanding - 1 - self._slow_at
                if room > 0:
                    before = self._outstanding
                    for element in islice(it, room):
                        if element is None:
                            raise TypeError("§2.13: on_next's element must not be None")
                        self._outstanding -= 1
                        try:
                            keep = on_element(element)
                        except BaseException as exc:
                            self._handler_raised(exc)
                            return count + before - self._outstanding
                        if keep is False or self._cancel_requested:
                            break
                    else:
                        count += before - self._outstanding
                        room = 0  # the run is over: the next element, if any, the long way
                    if room:  # the handler cancelled, or cancel() came meanwhile
                        count += before - self._outstanding
                        self._busy = False
                        with self._guard:
                            self._after_element(keep)
                        self._cancel_if_requested()
                        if self._stopped:
                            return count
                        self._busy = True
                        continue
                element = next(it, _END)
                if element is _END:
                    return count
                if element is None:
                    raise TypeError("§2.13: on_next's element must not be None")
                count += 1
                self._busy = False
                with self._guard:
                    self._handle_next(element)  # the refill is made here
                self._cancel_if_requested()
                if self._stopped:
                    return count
                self._busy = True
        finally:
            # Lowered before the last look at the cancel flag: a cancel() that saw it
            # still raised left the cancelling to this thread.
            self._busy = False
            self._cancel_if_requested()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "on_error's error", "§2.13")
        with self._guard:
            self._handle_terminal(error)

    def on_complete(self) -> None:
        with self._guard:
            self._handle_terminal(None)

    def cancel(self) -> None:
        """Cancel from any thread; returns at once, even while a signal is handled."""
        self._cancel_requested = True
        self._slow_at = _ALWAYS
        if not self._busy:  # else on_next sees _slow_at on its way out
            self._cancel_if_requested()

    def _cancel_if_requested(self) -> None:
        if self._cancel_requested and not self._stopped and \
                self._guard.acquire(blocking=False):
            try:
                self._stop(None)
            finally:
                self._guard.release()


class AsyncSubscriber(SerialWorker, _BatchingSubscriber[T], Generic[T]):
    """A subscriber that queues signals and handles them, in order, on its own thread.

    The publisher's thread only enqueues (§2.2), so :meth:`on_element` may be slow. The
    queue never holds more than one batch of elements plus the terminal signal, since the
    publisher may not send more than was requested (§1.1). Elements are handed over in
    bulk: the publisher's thread appends to a queue and starts the handling thread only
    when it is idle; that thread handles everything queued before it stops.

    Parameters
    ----------
    batch_size : int
        Demand requested at a time; refilled when half of it has been handled.
    executor : concurrent.futures.Executor, optional
        Where signals are handled (serially, whatever the executor's size). If omitted the
        subscriber starts one thread at ``on_subscribe`` and stops it at the end.

    Examples
    --------
    >>> from reactive_streams import AsyncSubscriber, RangePublisher
    >>> class Printer(AsyncSubscriber[int]):
    ...     def on_element(self, element):
    ...         print(element)
    >>> p = Printer(batch_size=2)
    >>> RangePublisher(0, 3).subscribe(p)
    >>> p.join(timeout=5)
    0
    1
    2
    """

    def __init__(self, batch_size: int = 64, *, executor: Executor | None = None) -> None:
        SerialWorker.__init__(self)
        _BatchingSubscriber.__init__(self, batch_size)
        if executor is not None and not isinstance(executor, Executor):
            raise TypeError("AsyncSubscriber: executor must be a concurrent.futures.Executor, "
                            f"got {type(executor).__name__}")
        self._runner = ThreadRunner(executor, max_workers=1, name="async-subscriber")
        # Elements, in order; every other signal goes to _signals. A terminal signal
        # is handled after the elements queued before it (§1.3: they were sent first).
        self._elements: collections.deque[T] = collections.deque()
        self._signals: collections.deque[tuple[str, Any]] = collections.deque()
        self._holds_runner = False

    @property
    def queued(self) -> int:
        """Signals received and not yet handled."""
        return len(self._elements) + len(self._signals)

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "on_subscribe's subscription", "§2.13")
        with self._lock:
            if not self._holds_runner and not self._stopped:
                self._holds_runner = True
                self._dispatch = self._runner.acquire()
        self._enqueue("subscribe", subscription)

    def on_next(self, element: T) -> None:
        if element is None:
            raise TypeError("§2.13: on_next's element must not be None")
        self._elements.append(element)
        if not self._wip:  # the handling thread is idle: start it (_schedule_if_idle)
            self._schedule()

    #: The ``on_next`` an emitter may do inline (``Emitter``: append to ``_elements``,
    #: then ``_schedule()`` when ``_wip`` is 0, per element, after its own None check):
    #: only while ``type(subscriber).on_next is _inlined_on_next``, so a subclass
    #: overriding ``on_next`` gets every call.
    _inlined_on_next = on_next

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "on_error's error", "§2.13")
        self._enqueue("error", error)

    def on_complete(self) -> None:
        self._enqueue("complete", None)

    def cancel(self) -> None:
        """Cancel from any thread; returns at once. Elements still queued are not handled."""
        self._cancel_requested = True
        self._slow_at = _ALWAYS  # the queued elements are dropped, not handled
        self._enqueue("cancel", None)

    def _enqueue(self, kind: str, value: Any) -> None:
        self._signals.append((kind, value))
        self._schedule()

    def _pending(self) -> bool:
        return bool(self._elements)

    def _work(self) -> bool:
        signals = self._signals
        while True:
            while signals:
                kind, value = signals.popleft()
                if kind == "subscribe":
                    self._handle_subscribe(value)  # even when stopped: §2.5 cancels it
                elif self._stopped:
                    continue
                elif kind == "cancel":
                    self._stop(None)
                else:
                    self._handle_elements()  # the ones sent before the terminal signal
                    self._handle_terminal(value if kind == "error" else None)
            if not self._elements:
                break
            self._handle_elements()
        if self._stopped:
            self._elements.clear()  # §2.8: late elements are accepted and dropped
            self._release_runner()
        return False

    def _handle_elements(self) -> None:
        """Handle every element queued, in one go; the hot loop of the handling thread."""
        elements = self._elements
        popleft = elements.popleft
        on_element = self.on_element
        while elements:
            left = self._outstanding - 1
            if left <= self._slow_at:  # a refill is due, or more than handling the element
                if self._stopped:
                    elements.clear()
                    return
                self._handle_next(popleft())
                continue
            element = popleft()
            self._outstanding = left
            try:
                keep = on_element(element)
            except BaseException as exc:
                self._stop(exc)
                if not isinstance(exc, Exception):
                    raise  # KeyboardInterrupt, SystemExit: not ours to absorb
                return
            if keep is False:
                self._stop(None)

    def _work_failed(self, error: BaseException) -> None:
        # Handling a signal raised outside on_element (a subscription that raised from
        # request, breaking §3.16): cancel, end with that error, give the thread back.
        try:
            self._stop(error)
        finally:
            self._release_runner()
        self._work()  # what is still queued is dropped; a second subscription cancelled (§2.5)

    def _release_runner(self) -> None:
        with self._lock:
            holds, self._holds_runner = self._holds_runner, False
            self._dispatch = None  # late signals are handled inline, and dropped
        if holds:
            self._runner.release()


def collect(publisher: Publisher[T], timeout: float | None = None,
            batch_size: int = 1024) -> list[T]:
    """Subscribe to ``publisher``, take every element, and return them as a list.

    Parameters
    ----------
    publisher : Publisher
        A finite publisher.
    timeout : float, optional
        Seconds to wait for the end of the stream. When it passes, the subscription is
        cancelled (also from inside a synchronous publisher's loop) and ``TimeoutError``
        is raised.
    batch_size : int
        Demand requested at a time.

    Returns
    -------
    list
        The elements in the order received.

    Raises
    ------
    BaseException
        The error the publisher signalled.
    TimeoutError
        If the stream did not end within ``timeout``.

    Examples
    --------
    >>> from reactive_streams import RangePublisher, collect
    >>> collect(RangePublisher(0, 5), timeout=5)
    [0, 1, 2, 3, 4]
    """
    require_not_none(publisher, "the publisher", "collect")
    deadline = None if timeout is None else time.monotonic() + timeout
    collector = _Collector[T](batch_size, deadline)
    publisher.subscribe(collector)
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not collector._finished.wait(remaining) or collector.timed_out:
        collector.cancel()
        raise TimeoutError(f"collect: {publisher!r} did not end within {timeout} s "
                           f"({len(collector.elements)} elements received)")
    collector.join()
    return collector.elements


class _Collector(SyncSubscriber[T], Generic[T]):
    def __init__(self, batch_size: int, deadline: float | None) -> None:
        super().__init__(batch_size)
        self.elements: list[T] = []
        self.deadline = deadline
        self.timed_out = False

    def on_element(self, element: T) -> bool:
        self.elements.append(element)
        # Checked once a refill is due, so even a synchronous publisher's loop can stop.
        if self.deadline is not None and self._outstanding <= self.batch_size // 2 and \
                time.monotonic() > self.deadline:
            self.timed_out = True
            return False
        return True
