"""The one signalling core every publisher in this project uses.

:class:`SerialWorker` is a work-in-progress counter with a drain loop: whoever raises the
counter from 0 runs the loop, everyone else only records that there is more to do. That
serialises signals (§1.3) and turns ``request`` called from inside ``on_next`` into another
turn of the loop instead of a deeper stack (§3.3). :class:`Emitter` builds a Subscription
on it: demand accounting (§3.9, §3.17), cancellation (§3.5, §3.7), and the release of the
subscriber on cancel or terminal signal (§3.13). A publisher supplies only a
:class:`Source` that says which elements are ready.
"""

from __future__ import annotations

import logging
import operator
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Final, Generic, TypeVar

from .api import UNBOUNDED, Subscriber, Subscription

__all__ = [
    "COMPLETE",
    "Dispatch",
    "Emitter",
    "SerialWorker",
    "Source",
    "Terminal",
    "first_none",
    "require_not_none",
    "signal_violation",
]

T = TypeVar("T")

log = logging.getLogger("reactive_streams")

#: Runs a callable later, on some other thread or loop: ``executor.submit``,
#: ``loop.call_soon_threadsafe``. ``None`` where a dispatch is accepted means "run inline".
Dispatch = Callable[[Callable[[], None]], object]

#: Largest number of elements taken from a source in one step. Between steps the loop
#: re-reads demand, and an executor-driven loop hands its thread back (fairness).
CHUNK: Final[int] = 1024


class _Complete:
    """Marker for normal completion, the terminal state that is not an error."""

    _instance: _Complete | None = None

    def __new__(cls) -> _Complete:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "COMPLETE"


COMPLETE: Final = _Complete()

#: A terminal state: :data:`COMPLETE`, or the error the stream failed with.
Terminal = _Complete | BaseException


def require_not_none(value: object, what: str, rule: str) -> None:
    """Raise ``TypeError`` when ``value`` is ``None`` (§1.9, §2.13)."""
    if value is None:
        raise TypeError(f"{rule}: {what} must not be None")


def first_none(elements: Sequence[object]) -> int | None:
    """Index of the first ``None`` in ``elements`` (by identity, at C speed), or ``None``."""
    hits = map(operator.is_, elements, repeat(None))
    if any(hits):
        return next(i for i, e in enumerate(elements) if e is None)
    return None


def signal_violation(subscriber: object, signal: str, error: BaseException) -> None:
    """Report a subscriber that raised from a signal method (§2.13).

    The subscription is treated as cancelled by the caller; this makes the failure loud
    rather than swallowed: it is logged at ERROR with its traceback on the
    ``reactive_streams`` logger.
    """
    log.error(
        "§2.13: %r raised from %s; its subscription is treated as cancelled",
        subscriber,
        signal,
        exc_info=(type(error), error, error.__traceback__),
    )


class SerialWorker(ABC):
    """Runs :meth:`_work` on one thread at a time, again until no request for work is left.

    ``_schedule()`` may be called from any thread, including from inside ``_work``: the
    call returns at once when a loop is already running, and that loop takes one more
    turn. With a ``dispatch`` the loop runs there; without one it runs on the calling
    thread. If ``dispatch`` refuses (an executor already shut down), the loop runs inline
    after :meth:`_dispatch_failed` has been told why.

    An exception raised by ``_work`` ends that turn. It is logged at ERROR with its
    traceback on the ``reactive_streams`` logger (a dispatch such as ``executor.submit``
    would keep it in a future nobody reads) and handed to :meth:`_work_failed`, which
    brings the subclass to a terminal state. The worker stays usable: work scheduled
    meanwhile gets its turn, and later ``_schedule()`` calls run the loop again. The
    exception is not raised to whoever scheduled the work, except ``KeyboardInterrupt``
    and other non-``Exception`` errors, which are re-raised after the counter is reset.
    """

    def __init__(self, dispatch: Dispatch | None = None) -> None:
        self._lock = threading.Lock()
        self._wip = 0
        self._dispatch = dispatch

    def _schedule(self) -> None:
        with self._lock:
            self._wip += 1
            if self._wip != 1:
                return
        self._run()

    def _schedule_if_idle(self) -> None:
        """:meth:`_schedule` for work that :meth:`_pending` reports, without a lock when busy.

        A loop already running or scheduled is not told: it finds the work through
        ``_pending()`` before it stops. So a producer handing over many items (elements
        appended to a queue) pays for one read of the counter per item, and the loop is
        started only on the transition from idle to busy.
        """
        if not self._wip:
            self._schedule()

    def _run(self) -> None:
        """Start the loop; the caller holds the work-in-progress counter."""
        if self._dispatch is None:
            self._drain()
            return
        try:
            self._dispatch(self._drain)
        except BaseException as exc:  # e.g. RuntimeError: cannot schedule new futures
            self._dispatch_failed(exc)
            self._drain()

    def _drain(self) -> None:
        missed = 1
        while True:
            try:
                more = self._work()
            except BaseException as exc:
                self._loop_raised(exc)
                if not isinstance(exc, Exception):
                    with self._lock:
                        self._wip = 0  # leave the loop, releasing the counter
                    raise  # KeyboardInterrupt, SystemExit: not ours to absorb
                more = False
            if more and self._dispatch is not None:
                # Hand the thread back and continue in a fresh task; the counter stays
                # raised, so nobody else starts a loop meanwhile.
                self._run()
                return
            with self._lock:
                self._wip -= missed
                missed = self._wip
            if missed == 0:
                # Work handed over by _schedule_if_idle while the counter was raised: the
                # producer wrote it before reading the counter, and the counter was
                # lowered before this read, so one of the two sees the other.
                if not self._pending():
                    return
                with self._lock:
                    if self._wip:
                        return  # someone else raised the counter and runs the loop
                    self._wip = missed = 1

    def _loop_raised(self, error: BaseException) -> None:
        log.error("the signal loop of %r raised; the failure goes to its _work_failed", self,
                  exc_info=(type(error), error, error.__traceback__))
        try:
            self._work_failed(error)
        except Exception:
            log.exception("%r failed to handle the failure of its signal loop", self)

    @abstractmethod
    def _work(self) -> bool:
        """One turn of the loop. Return True to yield the dispatcher with work left."""

    def _pending(self) -> bool:
        """Whether work handed over by :meth:`_schedule_if_idle` is waiting.

        Asked after the counter has dropped to 0; True takes the loop round again. Only a
        worker that calls ``_schedule_if_idle`` needs it.
        """
        return False

    def _dispatch_failed(self, error: BaseException) -> None:  # noqa: B027 - optional hook
        """``dispatch`` refused the loop; it will run inline once."""

    def _work_failed(self, error: BaseException) -> None:  # noqa: B027 - optional hook
        """``_work`` raised ``error`` (already logged); still serial with the loop's turns.

        Override to reach a terminal state: fail the subscription, release threads.
        """


class Source(ABC, Generic[T]):
    """Where an :class:`Emitter` takes its elements from; a publisher implements this.

    All calls come from the emitter's loop, one at a time, so a source needs no lock for
    state only the loop touches. A source that receives elements from elsewhere (another
    thread, an event loop) calls :meth:`Emitter.signal` when some are ready.

    A source whose ``lazy`` is True produces its elements while they are signalled: for
    ``n > 0`` its ``pull`` returns an iterator, and the loop signals each element as soon
    as the iterator yields it (an iterator that blocks delays only the elements after
    it). Such an iterator may yield ``None`` (the stream fails with ``TypeError``, §2.13)
    or raise (the stream fails with that error); one that ends before ``n`` elements
    ends the stream (``on_complete``). Its ``pull(0)`` answers as an eager source's does.
    """

    #: True when ``pull(n)`` for ``n > 0`` returns an iterator producing the elements.
    lazy: bool = False

    @abstractmethod
    def pull(self, n: int) -> tuple[Iterable[T], Terminal | None]:
        """Return up to ``n`` elements ready now, and the terminal state if it is known.

        ``n`` may be 0: then only the terminal state is asked for. The terminal state is
        signalled after the returned elements. Raising is the same as returning the
        exception as the terminal state. Elements are a sequence and never ``None``,
        except from a :attr:`lazy` source (see the class).
        """

    def close(self) -> None:
        """Release resources; called exactly once, on cancel or terminal signal."""


class Emitter(SerialWorker, Subscription, Generic[T]):
    """A Subscription that delivers a :class:`Source`'s elements to one subscriber.

    Parameters
    ----------
    subscriber : Subscriber
        Receives ``on_subscribe`` first (§1.9), then elements within demand (§1.1) and at
        most one terminal signal (§1.7), never two signals at once (§1.3).
    source : Source
        Supplies elements; see :class:`Source`.
    dispatch : callable, optional
        Where signals are sent from (see :class:`SerialWorker`). ``None`` sends them on
        the thread whose call made them possible: ``request``, ``start`` or ``signal``.
    chunk : int
        Largest number of elements pulled from the source in one step.

    Examples
    --------
    >>> from reactive_streams.signalling import COMPLETE, Emitter, Source
    >>> class Letters(Source[str]):
    ...     def __init__(self): self.left = list("abc")
    ...     def pull(self, n):
    ...         taken, self.left = self.left[:n], self.left[n:]
    ...         return taken, (None if self.left else COMPLETE)
    >>> from reactive_streams import collect, Publisher
    >>> class LettersPublisher(Publisher[str]):
    ...     def subscribe(self, subscriber):
    ...         Emitter(subscriber, Letters()).start()
    >>> collect(LettersPublisher())
    ['a', 'b', 'c']
    """

    def __init__(
        self,
        subscriber: Subscriber[T],
        source: Source[T],
        dispatch: Dispatch | None = None,
        chunk: int = CHUNK,
    ) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        super().__init__(dispatch)
        self._subscriber: Subscriber[T] | None = subscriber
        self._source: Source[T] | None = source
        self._chunk = chunk
        self._demand = 0
        self._subscribed = False
        # Set by cancel() and by §2.13 violations.
        self._cancelled = False
        # Read once per element by the loop: set with _cancelled or _failure, so that
        # either one stops a delivery under way.
        self._halt = False
        # Terminal state reached and everything released; later calls do nothing.
        self._done = False
        self._failure: BaseException | None = None
        # §2.13 aside, a subscriber of ours handles a whole chunk in one call while its
        # on_next is the one that call stands for (a subclass overriding on_next gets
        # every on_next call): see SyncSubscriber._deliver.
        batched = getattr(type(subscriber), "_batched_on_next", None)
        self._deliver: Callable[[Iterable[T]], int] | None = \
            getattr(subscriber, "_deliver", None) \
            if batched is not None and type(subscriber).on_next is batched else None
        # A subscriber of ours whose on_next is an append to a queue and a look at its
        # loop's counter (AsyncSubscriber): a lazy source's loop does exactly that itself,
        # per element, sparing a call per element (see AsyncSubscriber._inlined_on_next).
        inlined = getattr(type(subscriber), "_inlined_on_next", None)
        self._inline: SerialWorker | None = \
            subscriber if inlined is not None and type(subscriber).on_next is inlined \
            and isinstance(subscriber, SerialWorker) else None

    # -- used by publishers --------------------------------------------------------------

    def start(self) -> None:
        """Signal ``on_subscribe``, then whatever the subscriber asks for."""
        self._schedule()

    def signal(self) -> None:
        """Tell the loop that the source has new elements or a terminal state.

        Call it from any thread, after the source holds what ``pull`` will return: a
        client's callback that appended a message, a thread that set the end. The loop
        then pulls what demand allows, at once on this thread if it is idle (no
        ``dispatch``), or in its next turn if it runs elsewhere; a call while nothing is
        requested only has the terminal state asked for (``pull(0)``). Calls after the
        subscription ended do nothing. :func:`reactive_streams.create` does this for a
        client that pushes, with a bounded buffer.

        Examples
        --------
        >>> import collections
        >>> from reactive_streams.signalling import Emitter, Source
        >>> from reactive_streams import Publisher, to_iterable
        >>> class Inbox(Source[str]):
        ...     def __init__(self): self.messages = collections.deque()
        ...     def pull(self, n):
        ...         ready = min(n, len(self.messages))
        ...         return [self.messages.popleft() for _ in range(ready)], None
        >>> class InboxPublisher(Publisher[str]):
        ...     def subscribe(self, subscriber):
        ...         self.inbox = Inbox()
        ...         self.emitter = Emitter(subscriber, self.inbox)
        ...         self.emitter.start()
        >>> publisher = InboxPublisher()
        >>> messages = iter(to_iterable(publisher, prefetch=2))
        >>> publisher.inbox.messages.append("hello")   # a callback, on any thread
        >>> publisher.emitter.signal()                  # then wakes the loop
        >>> next(messages)
        'hello'
        """
        if not self._done:
            self._schedule()

    def offer(self, element: T) -> bool:
        """Signal ``element`` now, on this thread, if nothing stands before it.

        For a source that is handed elements one by one (a processor's upstream): when
        the loop is idle, subscribed, not halted and there is demand, ``element`` is
        signalled at once, as the loop would (§1.1, §1.3: the loop's counter is held
        meanwhile), without being queued and pulled. Otherwise nothing is done and False
        is returned: the source then queues the element and calls :meth:`signal`. The
        caller must hold no element of this subscription back (its queue is empty), and
        the emitter must signal inline (no ``dispatch``).
        """
        if self._dispatch is not None:
            return False
        with self._lock:
            demand = self._demand
            if self._wip or demand == 0 or self._halt or self._done or not self._subscribed:
                return False
            self._wip = 1
            if demand != UNBOUNDED:
                self._demand = demand - 1
        try:
            subscriber = self._subscriber
            assert subscriber is not None
            try:
                subscriber.on_next(element)
            except BaseException as exc:
                self._violated(subscriber, "on_next", exc)
        finally:
            with self._lock:
                self._wip -= 1
                more = self._wip != 0
            if more:
                self._run()  # a request, cancel or signal came meanwhile: the loop runs
        return True

    @property
    def demand(self) -> int:
        """Outstanding demand: requested and not yet delivered."""
        return self._demand

    @property
    def cancelled(self) -> bool:
        """True once the subscriber cancelled or broke §2.13."""
        return self._cancelled

    @property
    def done(self) -> bool:
        """True once the subscription has ended and released everything."""
        return self._done

    # -- Subscription ----------------------------------------------------------------------

    def request(self, n: int) -> None:
        if type(n) is not int or n <= 0:
            self._fail_request(n)
            return
        with self._lock:
            if self._done:
                return  # §3.6: a NOP once the subscription has ended
            demand = self._demand + n
            # §3.17: demand is capped at UNBOUNDED, never overflows.
            self._demand = demand if demand < UNBOUNDED else UNBOUNDED
            self._wip += 1
            if self._wip != 1:
                return  # §3.3: a running loop takes another turn; no recursion
        self._run()

    def cancel(self) -> None:
        # §3.5, §3.7: idempotent, thread-safe, returns at once; the loop releases.
        with self._lock:
            if self._cancelled or self._done:
                return
            self._cancelled = True
            self._halt = True
            self._wip += 1
            if self._wip != 1:
                return
        self._run()

    # -- the loop ----------------------------------------------------------------------------

    def _fail_request(self, n: object) -> None:
        # §3.9: a non-positive request is an error signalled through on_error, never raised
        if isinstance(n, int) and not isinstance(n, bool):
            error: BaseException = ValueError(
                f"§3.9: request(n) needs n > 0, got {n} (non-positive requests are illegal)"
            )
        else:
            error = TypeError(f"§3.9: request(n) needs a positive int, got {type(n).__name__}")
        with self._lock:
            if self._done:
                return
            if self._failure is None:
                self._failure = error
                self._halt = True  # §3.9: fail now, even in the middle of a delivery
        self._schedule()

    def _dispatch_failed(self, error: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = RuntimeError(f"the publisher's executor refused work: {error!r}")
                self._halt = True

    def _work(self) -> bool:
        if self._done:
            return False
        subscriber = self._subscriber
        source = self._source
        assert subscriber is not None and source is not None
        if not self._subscribed:
            self._subscribed = True
            try:
                subscriber.on_subscribe(self)
            except BaseException as exc:
                self._violated(subscriber, "on_subscribe", exc)
                return False
        if self._halt:
            self._halted()
            return False
        chunk = self._chunk
        lazy = source.lazy
        on_next = subscriber.on_next
        deliver = self._deliver
        delivered = 0  # in this turn, for the fairness hand-back below
        while True:
            demand = self._demand
            wanted = demand if demand < chunk else chunk
            try:
                elements, terminal = source.pull(wanted)
            except BaseException as exc:  # the source failed: the stream fails
                elements, terminal = (), exc
            if deliver is not None and wanted and not lazy:
                # The whole chunk in one call, each element handled as an on_next would
                # handle it; at most `wanted` elements (§1.1), settled against demand below.
                # Not for a lazy source: its iterator runs between elements, and a
                # subscriber in the middle of a chunk leaves a cancel() from another
                # thread to the chunk's thread, which would wait for the next element.
                try:
                    count = deliver(elements)
                except BaseException as exc:
                    # A None element (§2.13; a source breaking its contract), or
                    # iterating the sequence raised: the stream fails with it. Or the
                    # handler raised a KeyboardInterrupt after cancelling: not ours to
                    # absorb.
                    if self._halt:
                        self._halted()
                        if not isinstance(exc, Exception):
                            raise
                        return False
                    count, terminal = 0, exc
            elif lazy and wanted:
                # Each element is signalled as soon as the source produces it; the count
                # is settled against demand once per chunk (§1.1: at most `wanted`).
                count = 0
                violation: BaseException | None = None
                inline = self._inline
                append = None if inline is None else inline._elements.append  # type: ignore[attr-defined]
                try:
                    for element in elements:
                        if element is None:
                            terminal = TypeError(
                                "§2.13: the source produced None (the elements before it "
                                "were signalled); elements must not be None")
                            break
                        if self._halt:
                            break  # §3.12: stop signalling as soon as cancel is seen
                        try:
                            if append is None:
                                on_next(element)
                            else:  # AsyncSubscriber.on_next, inline
                                append(element)
                                if not inline._wip:  # type: ignore[union-attr]
                                    inline._schedule()  # type: ignore[union-attr]
                        except BaseException as exc:
                            violation = exc
                            break
                        count += 1
                    else:
                        if count < wanted and terminal is None:
                            terminal = COMPLETE  # the source ended before the chunk did
                except BaseException as exc:  # raised by the source's iterator
                    terminal = exc
                if violation is not None:
                    self._violated(subscriber, "on_next", violation)
                    return False
            else:
                if elements:
                    try:
                        for element in elements:
                            if self._halt:
                                break  # §3.12: stop signalling as soon as cancel is seen
                            on_next(element)
                    except BaseException as exc:
                        self._violated(subscriber, "on_next", exc)
                        return False
                count = len(elements)  # type: ignore[arg-type]
            if self._halt:
                self._halted()
                return False
            if count and demand != UNBOUNDED:
                with self._lock:
                    # §3.17: unbounded demand is never used up (it may have become
                    # unbounded while this chunk was being delivered).
                    if self._demand != UNBOUNDED:
                        self._demand -= count
            if terminal is not None:
                self._terminate(terminal)
                return False
            if count < wanted or wanted == 0:
                return False  # nothing more ready now, or no demand: wait for a signal
            delivered += count
            if self._dispatch is not None and delivered >= CHUNK:
                return True  # give other work on the dispatcher a turn

    def _work_failed(self, error: BaseException) -> None:
        # A bug in the loop or the source, not the subscriber's (§2.13 is handled in
        # _work): the stream fails with it, and everything is released (§3.13).
        if not self._done:
            self._terminate(None if self._cancelled else error)

    def _halted(self) -> None:
        """Cancelled (nothing more is signalled) or failed (on_error is signalled)."""
        self._terminate(None if self._cancelled else self._failure)

    def _violated(self, subscriber: Subscriber[T], signal: str, error: BaseException) -> None:
        # §2.13: a subscriber that raises is considered cancelled, and the error reported.
        self._cancelled = self._halt = True
        signal_violation(subscriber, signal, error)
        self._terminate(None)
        if not isinstance(error, Exception):
            raise error  # KeyboardInterrupt, SystemExit: not ours to absorb

    def _terminate(self, terminal: Terminal | None) -> None:
        subscriber, source = self._subscriber, self._source
        with self._lock:
            self._done = True
        # §3.13: drop the subscriber (and the source, which may refer to it) for good.
        self._subscriber = None
        self._deliver = None
        self._inline = None
        self._source = None
        if source is not None:
            try:
                source.close()
            except Exception:
                log.exception("closing the source %r failed", source)
        if terminal is None or subscriber is None or self._cancelled:
            return
        try:
            if isinstance(terminal, BaseException):
                subscriber.on_error(terminal)
            else:
                subscriber.on_complete()
        except BaseException as exc:
            signal_violation(subscriber, "on_error" if terminal is not COMPLETE else "on_complete",
                             exc)
            if not isinstance(exc, Exception):
                raise
