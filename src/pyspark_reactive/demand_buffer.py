"""The source's subscriber: it holds what the publisher signalled until a micro-batch takes
it, and keeps ``buffered + outstanding demand <= capacity`` at every moment.

Demand is issued in whole batches: ``capacity`` on subscribe, then, each time a batch is
taken, exactly as many as were taken. The source's write-ahead log takes elements out as
they arrive (:meth:`DemandBuffer.hold`) without releasing their demand; a micro-batch
releases it (:meth:`DemandBuffer.release`) when it takes them. A publisher that keeps up
therefore sees one ``request(capacity)`` per micro-batch. :meth:`DemandBuffer.limit_demand`
caps what is requested from then on (an ``availableNow`` trigger's bound). Calls on the
subscription are made on one thread of the buffer's own (§2.7), so a synchronous publisher
fills the next batch while Spark processes the current one.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from reactive_streams import Publisher, Subscriber, Subscription
from reactive_streams.signalling import require_not_none

__all__ = ["DemandBuffer", "PublisherError"]

log = logging.getLogger(__name__)


class PublisherError(RuntimeError):
    """The publisher broke the specification (for example, more elements than demand)."""


class DemandBuffer(Subscriber[Any]):
    """Buffers a publisher's elements against a fixed demand window.

    Parameters
    ----------
    capacity : int
        The window: buffered elements plus outstanding demand never exceed it.
    own_thread : bool
        Make calls on the subscription from a thread of the buffer's own (default). When
        false they are made on the calling thread.

    Examples
    --------
    >>> from reactive_streams import RangePublisher
    >>> buffer = DemandBuffer(3)
    >>> buffer.start(RangePublisher(0, 5))
    >>> buffer.take(3, wait=5.0)
    [0, 1, 2]
    >>> buffer.take(3, wait=5.0)
    [3, 4]
    >>> buffer.completed
    True
    >>> buffer.close()
    """

    def __init__(self, capacity: int, *, own_thread: bool = True) -> None:
        if type(capacity) is not int or capacity < 1:
            raise ValueError(f"DemandBuffer: capacity must be an int >= 1, got {capacity!r}")
        self.capacity = capacity
        self._elements: collections.deque[Any] = collections.deque()
        self._changed = threading.Condition()
        self._wanted = 0  # a taker waits until this many are buffered (0: nobody waits)
        self._subscription: Subscription | None = None
        self._subscribed = threading.Event()
        # Each counter has one writer: _requested and _released the thread that takes,
        # _received the thread that signals (§1.3 makes on_next serial). Reads are
        # GIL-atomic. Received and not released: held, here or by hold()'s caller.
        self._requested = 0
        self._received = 0
        self._released = 0
        # hold()'s caller asks to be woken when this many elements wait here (0: never).
        self._nudge = threading.Event()
        self._nudge_at = 0
        self._allowance: int | None = None  # demand that may still be requested (None: any)
        self.max_outstanding = 0  # the most demand ever outstanding, for tests and logs
        self._terminal: BaseException | None = None
        self._completed = False
        self._cancelled = False
        # drain() seals the buffer: an on_next under way then is waited for and its
        # element drained; one that starts later is refused and counted, never kept
        # where nobody reads it. _signalling has one writer, the signalling thread.
        self._signalling = 0
        self._sealed = False
        self._drained = False  # drain() has taken what it returns
        self.refused = 0  # elements signalled after drain(), not kept (logged)
        self.late = 0  # elements signalled after on_complete/on_error (§1.7), not kept
        self._calls_thread: int | None = None
        # The thread starts with the first call submitted; close() stops it.
        self._calls = ThreadPoolExecutor(
            1, thread_name_prefix="reactive-source-demand",
            initializer=self._note_calls_thread) if own_thread else None

    # -- the Subscriber side (the publisher's threads) -------------------------------------

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "the subscription", "§2.13")
        if self._subscription is not None or self._cancelled:
            # §2.5: a second subscription (or one after cancel) is cancelled at once.
            subscription.cancel()
            return
        self._subscription = subscription
        self._subscribed.set()
        self._request(self.capacity)

    def on_next(self, element: Any) -> None:
        require_not_none(element, "the element", "§2.13")
        # Written before _sealed is read, and drain() writes _sealed before it reads this:
        # whichever comes second sees the other, so an element is drained or refused.
        self._signalling += 1
        try:
            if self._sealed:
                self._refuse()
                return
            if self._completed or self._terminal is not None:
                self._late(element)
                return
            self._accept(element)
            if self._drained and self._elements:
                # Under way for longer than drain() waited: what it appended is behind
                # the drain, so it is refused like a later element.
                self._received -= len(self._elements)
                self._elements.clear()
                self._refuse()
        finally:
            self._signalling -= 1
            if self._sealed:
                with self._changed:
                    self._changed.notify_all()

    def _accept(self, element: Any) -> None:
        # Kept even after cancel (§3.12 lets a few arrive late): the source's shutdown
        # drains the buffer once the cancel is made, and logs what it holds.
        if self._cancelled and threading.get_ident() == self._calls_thread:
            # A synchronous publisher signalling inside request() on the demand thread,
            # where the queued cancel would wait behind it: cancel right here (serial,
            # §2.7), so it stops within this element.
            subscription = self._subscription
            if subscription is not None:
                self._call(subscription.cancel)
        self._received += 1
        if self._received > self._requested:
            # §1.1: more elements than demand. The element is dropped; the error ends the
            # stream once what was received in time has been taken.
            self._fail(PublisherError(
                f"§1.1: the publisher signalled {self._received} elements for a total demand "
                f"of {self._requested}"))
            self._received -= 1  # not kept, so not received
            return
        elements = self._elements
        elements.append(element)
        if self._wanted and self._received - self._released >= self._wanted:
            with self._changed:
                self._changed.notify_all()
        if self._nudge_at and len(elements) >= self._nudge_at:
            self._nudge.set()

    def _refuse(self) -> None:
        # §3.12: signals may still come for a while after cancel; once the buffer has
        # been drained nobody would read them, so they are counted and reported instead.
        self.refused += 1
        if self.refused == 1:
            log.warning("the publisher signalled an element after the source had drained its "
                        "buffer (it had cancelled, §3.12); it is not kept. Elements refused "
                        "this way are counted in DemandBuffer.refused")

    def _late(self, element: Any) -> None:
        # §1.7: nothing may follow a terminal signal. The element is not a row.
        self.late += 1
        if self.late == 1:
            log.warning("the publisher signalled an element after its terminal signal "
                        "(§1.7 forbids it); it is not kept (%.80r). Such elements are "
                        "counted in DemandBuffer.late", element)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "the error", "§2.13")
        self._end(error)

    def on_complete(self) -> None:
        self._end(None)

    def _end(self, error: BaseException | None) -> None:
        with self._changed:
            if self._terminal is None and not self._completed:
                if error is None:
                    self._completed = True
                else:
                    self._terminal = error
            self._changed.notify_all()

    def _fail(self, error: BaseException) -> None:
        self._end(error)
        self.cancel(timeout=0)

    # -- the taking side (the source runner's main thread) ---------------------------------

    def start(self, publisher: Publisher[Any]) -> None:
        """Subscribe to ``publisher``; demand for ``capacity`` follows on_subscribe."""
        publisher.subscribe(self)

    def _note_calls_thread(self) -> None:
        self._calls_thread = threading.get_ident()

    @property
    def buffered(self) -> int:
        """Elements received and not yet taken (here, or held by :meth:`hold`'s caller)."""
        return self._received - self._released

    @property
    def subscribed(self) -> bool:
        """Whether the publisher has called ``on_subscribe``."""
        return self._subscribed.is_set()

    @property
    def received(self) -> int:
        """Elements received in all."""
        return self._received

    @property
    def outstanding(self) -> int:
        """Demand requested and not yet met."""
        return self._requested - self._received

    @property
    def completed(self) -> bool:
        """Whether ``on_complete`` arrived and everything received has been taken."""
        return self._completed and not self.buffered

    @property
    def ended(self) -> bool:
        """Whether a terminal signal arrived (or the buffer cancelled)."""
        return self._completed or self._terminal is not None or self._cancelled

    @property
    def error(self) -> BaseException | None:
        """The publisher's error, once everything received before it has been taken."""
        return None if self.buffered else self._terminal

    def wait(self, wanted: int, timeout: float, interrupted: Any = None) -> bool:
        """Wait until ``wanted`` elements are buffered, held ones included (or as many as can
        still come, after :meth:`limit_demand`) or the stream ended.

        ``interrupted`` is an optional callable checked about once a second; a true result
        ends the wait early (the source uses it to notice that its parent is gone).
        """
        wanted = max(1, min(wanted, self.capacity))
        if self._allowance is not None:
            # Past limit_demand's allowance, elements that will never be requested never
            # come: wait only for those that can.
            wanted = min(wanted, self.buffered + self.outstanding + self._allowance)
        deadline = time.monotonic() + timeout
        with self._changed:
            self._wanted = wanted
            try:
                while self.buffered < wanted and not self.ended:
                    left = deadline - time.monotonic()
                    if left <= 0 or (interrupted is not None and interrupted()):
                        break
                    self._changed.wait(min(left, 1.0))
            finally:
                self._wanted = 0
            return self.buffered >= wanted or self.ended

    def limit_demand(self, more: int) -> None:
        """Request at most ``more`` elements beyond those requested so far.

        Demand that ``take`` (or ``on_subscribe``) would issue beyond the allowance is not
        requested, so a publisher that honours demand (§1.1) signals nothing past it. Call
        it from the taking thread, or before :meth:`start`.
        """
        if type(more) is not int or more < 0:
            raise ValueError(f"DemandBuffer: more must be an int >= 0, got {more!r}")
        self._allowance = more

    def take(self, most: int, wait: float = 0.0) -> list[Any]:
        """Take up to ``most`` buffered elements, waiting up to ``wait`` s for ``most``.

        Demand for as many as were taken is requested at once, so the publisher refills
        while the caller works.
        """
        if wait > 0:
            self.wait(most, wait)
        elements = self._elements
        count = min(most, len(elements))
        taken = [elements.popleft() for _ in range(count)]
        self.release(len(taken))
        return taken

    def hold(self) -> list[Any]:
        """Take every element here without releasing its demand (see :meth:`release`)."""
        return _take_all(self._elements)

    def release(self, count: int) -> None:
        """Count ``count`` held elements as taken and request as many more."""
        if count <= 0:
            return
        self._released += count
        if not self.ended:
            self._request(count)

    def nudge_when(self, waiting: int) -> threading.Event:
        """An event set once ``waiting`` elements are here, for a thread that holds them."""
        self._nudge_at = max(1, waiting)
        return self._nudge

    def drain(self, settle: float = 1.0) -> list[Any]:
        """Take everything buffered and seal the buffer (used when stopping).

        An ``on_next`` under way is waited for (up to ``settle`` s) and its element is
        among those returned; any element signalled later is refused: counted in
        :attr:`refused` and logged, so none is kept where nobody reads it. Nothing more
        is requested.
        """
        self._sealed = True
        if self._signalling:
            deadline = time.monotonic() + settle
            with self._changed:
                while self._signalling and (left := deadline - time.monotonic()) > 0:
                    self._changed.wait(left)
            if self._signalling:
                log.warning("an on_next was still under way %.1f s after the source began to "
                            "drain its buffer; its element will be refused", settle)
        drained = _take_all(self._elements)
        self._released += len(drained)  # taken for good: nothing more is requested
        self._drained = True
        return drained

    def _request(self, n: int) -> None:
        if self._allowance is not None:
            n = min(n, self._allowance)
            self._allowance -= n
            if n == 0:
                return
        self._requested += n
        self.max_outstanding = max(self.max_outstanding, self._requested - self._received)
        subscription = self._subscription
        if subscription is None:
            return  # on_subscribe requests the whole window
        if self._calls is None:
            subscription.request(n)
        else:
            self._calls.submit(self._call, subscription.request, n)

    def _call(self, method: Any, *args: Any) -> None:
        try:
            method(*args)
        except BaseException as error:  # §3.5/§3.6 allow no raise from request or cancel
            log.exception("the publisher's subscription raised from %s", method.__name__)
            self._end(error)

    def cancel(self, timeout: float = 2.0) -> None:
        """Cancel the subscription (idempotent); wait up to ``timeout`` s for it to be made."""
        if self._cancelled:
            return
        self._cancelled = True
        with self._changed:
            self._changed.notify_all()
        subscription, calls = self._subscription, self._calls
        if subscription is None:
            return  # on_subscribe cancels what arrives later (§2.5 branch)
        if calls is None or threading.get_ident() == self._calls_thread:
            # Inside a request() on the demand thread (a synchronous publisher signalling
            # there): calling cancel right here is still serial.
            self._call(subscription.cancel)
            return
        # The same thread as every request, so calls stay serial (§2.7).
        done = calls.submit(self._call, subscription.cancel)
        if timeout > 0:
            try:
                done.result(timeout)
            except FutureTimeout:  # not the builtin TimeoutError before Python 3.11
                log.warning("cancel did not complete within %.1f s", timeout)

    def close(self) -> None:
        """Cancel if still live and stop the demand thread."""
        if not self.ended:
            self.cancel()
        calls, self._calls = self._calls, None
        if calls is not None:
            calls.shutdown(wait=False)


def _take_all(elements: collections.deque[Any]) -> list[Any]:
    # on_next appends while this pops: take what is there, never more.
    taken = []
    try:
        for _ in range(len(elements)):
            taken.append(elements.popleft())
    except IndexError:  # another taker got there first
        pass
    return taken
