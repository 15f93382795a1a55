"""The source's subscriber: it holds what the publisher signalled until a micro-batch takes
it, and keeps ``buffered + outstanding demand <= capacity`` at every moment.

Demand is issued in whole batches: ``capacity`` on subscribe, then, each time a batch is
taken, exactly as many as were taken. The source's write-ahead log takes elements out as
they arrive (:meth:`DemandBuffer.hold`) without releasing their demand; a micro-batch
releases it (:meth:`DemandBuffer.release`) when it takes them. A publisher that keeps up
therefore sees one ``request(capacity)`` per micro-batch. :meth:`DemandBuffer.limit_demand`
caps what is requested from then on (an ``availableNow`` trigger's bound),
:meth:`DemandBuffer.resize` changes the window, and :meth:`DemandBuffer.reopen` does both
at once (lifts the cap and sets the window: a first batch sized otherwise gives way to the
usual one). Calls on the subscription are made on one thread of the buffer's own (§2.7), so
a synchronous publisher fills the next batch while Spark processes the current one.

**Locks.** ``_demand`` then ``_releasing``, never the other way round. The allowance and
the window (``capacity``) are written under both, so a reader holding either sees them
consistent: row mode requests under ``_releasing`` (:meth:`DemandBuffer.release` is called
by the taking thread and by the intake's), Arrow mode under ``_demand``. No call on the
subscription is made under either lock: demand is counted under them and issued after.

**Arrow mode.** A publisher whose elements are ``pyarrow.RecordBatch`` es declares it
(``arrow_batches = True``, see :mod:`pyspark_reactive.source.arrow_elements`), or its first element
shows it. The buffer then counts rows, not elements: ``capacity``, ``buffered``,
``received``, ``take`` and ``release`` are in rows, while demand is still in elements
(§1.1): one batch at a time, requested whenever fewer than ``capacity`` rows are buffered
and none is outstanding, so the rows buffered stay below ``capacity`` plus one batch.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pyarrow as pa

from reactive_streams import Publisher, Subscriber, Subscription
from reactive_streams.signalling import require_not_none

from ..errors import PySparkReactiveError

__all__ = ["DemandBuffer", "PublisherError"]

log = logging.getLogger(__name__)

_RecordBatch = pa.RecordBatch
_NEVER = 2**63  # a count never reached


class PublisherError(PySparkReactiveError, RuntimeError):
    """The publisher broke the specification (for example, more elements than demand)."""


def _rows_of(element: Any) -> int:
    # In Arrow mode an element that is not a RecordBatch stands for one row: it is kept
    # (the intake names it in the error that fails the query at its offset).
    return element.num_rows if type(element) is _RecordBatch else 1


class DemandBuffer(Subscriber[Any]):
    """Buffers a publisher's elements against a fixed demand window.

    Parameters
    ----------
    capacity : int
        The window: buffered elements plus outstanding demand never exceed it. In Arrow
        mode it counts rows (see the module's docstring).
    own_thread : bool
        Make calls on the subscription from a thread of the buffer's own (default). When
        false they are made on the calling thread.
    arrow : bool, optional
        Whether elements are ``pyarrow.RecordBatch`` es (Arrow mode) or rows; by default a
        publisher that declares ``arrow_batches`` or else the first element decides.

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

    def __init__(self, capacity: int, *, own_thread: bool = True,
                 arrow: bool | None = None) -> None:
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
        # In Arrow mode _received and _released count rows, and _requested elements.
        self._requested = 0
        self._received = 0
        self._released = 0
        # None until the first element (or a declaring publisher) decides; True: Arrow.
        self._arrow: bool | None = arrow
        # Elements (Arrow mode: rows) taken out of _elements by hold, take and drain: what
        # waits here is _received - _popped.
        self._popped = 0
        # Arrow mode: batches received. Both threads that request there (the signalling
        # one and the taking one) decide under _demand.
        self._batches = 0
        self._demand = threading.Lock()
        # Row mode: release() is called by the taking thread and by the intake's thread
        # (for elements it left out), so its counting and requesting are serialised.
        self._releasing = threading.Lock()
        # hold()'s caller asks to be woken when this many elements wait here (0: never):
        # the event is set when _received reaches _nudge_mark, which is then put out of
        # reach until the next hold() (one set() per hold, not one per element).
        self._nudge = threading.Event()
        self._nudge_at = 0
        self._nudge_mark = _NEVER
        # Demand that may still be requested (None: any). In Arrow mode: rows that may
        # still arrive before no more batches are requested.
        self._allowance: int | None = None
        self.max_outstanding = 0  # the most demand ever outstanding, for tests and logs
        # time.monotonic() of the first element's arrival (None before it, and in a buffer
        # made with arrow=False): a rate measured from it leaves out the publisher's start.
        self.first_at: float | None = None
        self.first_rows = 0  # the rows the first element brought (1, or its batch's)
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
        # Whether an element must take the rare path: until a row stream is known, and
        # once it is sealed, ended or cancelled (written after each of those).
        self._rare = arrow is not False
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
        if self._arrow:
            self._refill()
            return
        # The window, less what a reopen() that saw the subscription already requested.
        with self._releasing:
            more = self._request(self.capacity - (self._requested - self._released))
        self._issue(more)

    def on_next(self, element: Any) -> None:
        if element is None:
            require_not_none(element, "the element", "§2.13")
        # Written before _rare is read, and drain() writes _sealed and _rare before it
        # reads this: whichever comes second sees the other, so an element is drained or
        # refused.
        self._signalling += 1
        try:
            if self._rare:
                self._on_next_rare(element)
                return
            # The path of every element of a row stream: no lock, no notify unless a
            # waiter's threshold is crossed (once per wait).
            received = self._received + 1
            if received > self._requested:
                self._too_many(received)
                return
            self._received = received
            elements = self._elements
            elements.append(element)
            if self._drained:
                self._behind_drain()
            wanted = self._wanted
            if wanted and received - self._released >= wanted:
                self._wake()
            if received >= self._nudge_mark:
                self._nudge_now()
        finally:
            self._signalling -= 1
            if self._sealed:
                with self._changed:
                    self._changed.notify_all()

    def _on_next_rare(self, element: Any) -> None:
        if self._sealed:
            self._refuse()
            return
        if self._completed or self._terminal is not None:
            self._late(element)
            return
        if self._arrow is None:
            self._decide(element)
        if self._cancelled and threading.get_ident() == self._calls_thread:
            # A synchronous publisher signalling inside request() on the demand thread,
            # where the queued cancel would wait behind it: cancel right here (serial,
            # §2.7), so it stops within this element.
            subscription = self._subscription
            if subscription is not None:
                self._call(subscription.cancel)
        # Kept even after cancel (§3.12 lets a few arrive late): the source's shutdown
        # drains the buffer once the cancel is made, and logs what it holds.
        if self._arrow:
            self._accept_batch(element)
            return
        received = self._received + 1
        if received > self._requested:
            self._too_many(received)
            return
        self._received = received
        self._elements.append(element)
        if self._drained:
            self._behind_drain()
        self._wake()
        if received >= self._nudge_mark:
            self._nudge_now()

    def _decide(self, element: Any) -> None:
        # The first element of a publisher that did not declare its kind decides it.
        self.first_at = time.monotonic()
        self.first_rows = _rows_of(element)
        if type(element) is not _RecordBatch:
            self._arrow = False
            # Cleared first, then checked: a cancel, drain or end writes its own flag
            # before _rare, so one racing with this is seen here or writes last.
            self._rare = False
            if self.ended or self._sealed:
                self._rare = True
            return
        log.warning("the publisher's first element is a pyarrow.RecordBatch, so this stream "
                    "counts rows; it did not declare it (arrow_batches = True, see "
                    "pyspark_reactive.arrow_batches), so the %d elements of "
                    "demand already requested are batches, and may bring that many batches "
                    "(rows far beyond capacity %d) before demand counts rows", self._requested,
                    self.capacity)
        with self._demand, self._releasing:
            allowance = self._allowance
            if allowance is not None:
                # Arrow mode counts the allowance as rows arrive, not as demand is made.
                self._allowance = allowance + self._requested
            self._arrow = True

    def _accept_batch(self, element: Any) -> None:
        batches = self._batches + 1
        if batches > self._requested:
            self._too_many(batches)
            return
        self._batches = batches
        rows = _rows_of(element)
        if batches == 1 and self.first_at is None:
            self.first_at, self.first_rows = time.monotonic(), rows
        with self._demand:
            if self._allowance is not None:
                self._allowance = max(0, self._allowance - rows)
            self._received += rows
            self._elements.append(element)
            if self._drained:
                self._behind_drain()
        self._wake()
        if self._received >= self._nudge_mark:
            self._nudge_now()
        self._refill()

    def _too_many(self, received: int) -> None:
        # §1.1: more elements than demand. The element is dropped; the error ends the
        # stream once what was received in time has been taken.
        self._fail(PublisherError(
            f"§1.1: the publisher signalled {received} elements for a total demand "
            f"of {self._requested}"))

    def _behind_drain(self) -> None:
        # Under way for longer than drain() waited: what it appended is behind the
        # drain, so it is refused like a later element.
        left = _take_all(self._elements)
        if left:
            self._received -= self.count(left)
            self._refuse()

    def _wake(self) -> None:
        # Wakes a waiting taker; clearing _wanted makes it once per wait (what is buffered
        # only grows until the taker itself takes).
        if self._wanted:
            self._wanted = 0
            with self._changed:
                self._changed.notify_all()

    def _nudge_now(self) -> None:
        # A hold() racing with this may have its new mark overwritten; the event set here
        # makes its caller hold() again at once, which puts the mark back.
        self._nudge_mark = _NEVER
        self._nudge.set()

    def _popped_out(self, count: int) -> None:
        self._popped += count
        if self._nudge_at:
            self._nudge_mark = self._popped + self._nudge_at

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
                self._rare = True
            self._changed.notify_all()

    def _fail(self, error: BaseException) -> None:
        self._end(error)
        self.cancel(timeout=0)

    # -- the taking side (the source runner's main thread) ---------------------------------

    def start(self, publisher: Publisher[Any]) -> None:
        """Subscribe to ``publisher``; demand for ``capacity`` follows on_subscribe.

        A publisher whose attribute ``arrow_batches`` is true signals
        ``pyarrow.RecordBatch`` es: the buffer counts rows from the start and requests one
        batch at a time (see the module's docstring).
        """
        if self._arrow is None and getattr(publisher, "arrow_batches", False) is True:
            self._arrow = True
        publisher.subscribe(self)

    def _note_calls_thread(self) -> None:
        self._calls_thread = threading.get_ident()

    @property
    def arrow(self) -> bool | None:
        """Whether elements are RecordBatches counted in rows (None: not known yet)."""
        return self._arrow

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
        """Demand requested and not yet met (in Arrow mode: batches)."""
        return self._requested - (self._batches if self._arrow else self._received)

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

    def _exhausted(self) -> bool:
        # Arrow mode: past limit_demand's allowance with no batch outstanding, no more
        # rows can come.
        return bool(self._arrow) and self._allowance == 0 and self.outstanding == 0

    def wait(self, wanted: int, timeout: float, interrupted: Any = None) -> bool:
        """Wait until ``wanted`` elements are buffered, held ones included (or as many as can
        still come, after :meth:`limit_demand`) or the stream ended.

        ``interrupted`` is an optional callable checked about once a second; a true result
        ends the wait early (the source uses it to notice that its parent is gone).
        """
        wanted = max(1, min(wanted, self.capacity))
        allowance = self._allowance  # read once: the intake's release() may change it
        if allowance is not None and not self._arrow:
            # Past limit_demand's allowance, elements that will never be requested never
            # come: wait only for those that can.
            wanted = min(wanted, self.buffered + self.outstanding + allowance)
        deadline = time.monotonic() + timeout
        with self._changed:
            try:
                while self.buffered < wanted and not self.ended and not self._exhausted():
                    left = deadline - time.monotonic()
                    if left <= 0 or (interrupted is not None and interrupted()):
                        break
                    # Set under the lock, read by on_next without it: an element counted
                    # before this line is seen by the check below, one counted after it
                    # sees _wanted and notifies (it needs the lock, so once we wait).
                    self._wanted = wanted
                    if self.buffered >= wanted:
                        break
                    self._changed.wait(min(left, 1.0))
            finally:
                self._wanted = 0
            return self.buffered >= wanted or self.ended or self._exhausted()

    def limit_demand(self, more: int | None) -> None:
        """Request at most ``more`` elements beyond those requested so far (``None``: lift
        the limit; what was not requested meanwhile is not made up for, see :meth:`reopen`).

        Demand that ``take`` (or ``on_subscribe``) would issue beyond the allowance is not
        requested, so a publisher that honours demand (§1.1) signals nothing past it. Call
        it from the taking thread, or before :meth:`start`. In Arrow mode ``more`` counts
        rows: batches are requested until that many rows have arrived (the last may bring
        more).
        """
        if more is not None and (type(more) is not int or more < 0):
            raise ValueError(f"DemandBuffer: more must be an int >= 0 or None, got {more!r}")
        with self._demand, self._releasing:
            self._allowance = more

    def resize(self, capacity: int) -> None:
        """Keep ``buffered + outstanding <= capacity`` from now on.

        What the new window has room for is requested at once (within
        :meth:`limit_demand`'s allowance); a smaller window is reached as elements are
        taken, since :meth:`release` then requests only what it has room for. Call it from
        the taking thread.
        """
        self._window(capacity, lift=False)

    def reopen(self, capacity: int) -> None:
        """Lift :meth:`limit_demand`'s allowance and make the window ``capacity``, at once,
        and request what the new window has room for.

        The source's first batch sized by ``availableNowMaxRecords`` (Spark without
        admission control) is cut with ``limit_demand(0)``; when Spark asks for a second
        batch this reopens the usual window. One step under the buffer's locks, so a
        :meth:`release` on another thread (the intake's, for elements it left out) sees
        either the old allowance and window or the new ones, never a mix. Call it from the
        taking thread.
        """
        self._window(capacity, lift=True)

    def _window(self, capacity: int, lift: bool) -> None:
        if type(capacity) is not int or capacity < 1:
            raise ValueError(f"DemandBuffer: capacity must be an int >= 1, got {capacity!r}")
        more = 0
        with self._demand, self._releasing:  # drain()'s order
            if lift:
                self._allowance = None
            self.capacity = capacity
            arrow = self._arrow
            if (not arrow and not self.ended and not self._sealed
                    and self._subscription is not None):
                # Row mode (or not known yet): what the window has room for. Before
                # on_subscribe, on_subscribe requests the window.
                more = self._request(capacity - (self._requested - self._released))
        if arrow:
            if not self.ended:
                self._refill()
            return
        self._issue(more)

    def take(self, most: int, wait: float = 0.0) -> list[Any]:
        """Take up to ``most`` buffered elements, waiting up to ``wait`` s for ``most``.

        Demand for as many as were taken is requested at once, so the publisher refills
        while the caller works. In Arrow mode ``most`` counts rows and the last batch
        taken is sliced at ``most`` (its rest stays first in line).
        """
        if wait > 0:
            self.wait(most, wait)
        if self._arrow:
            taken, rows = self._take_rows(most)
            self.release(rows)
            return taken
        elements = self._elements
        count = min(most, len(elements))
        taken = [elements.popleft() for _ in range(count)]
        self._popped_out(count)
        self.release(len(taken))
        return taken

    def _take_rows(self, most: int) -> tuple[list[Any], int]:
        elements = self._elements
        taken: list[Any] = []
        rows = 0
        with self._demand:
            while rows < most and elements:
                element = elements.popleft()
                count = _rows_of(element)
                if rows + count > most:
                    keep = most - rows
                    elements.appendleft(element.slice(keep))
                    element, count = element.slice(0, keep), keep
                taken.append(element)
                rows += count
            self._popped_out(rows)
        return taken, rows

    def hold(self) -> list[Any]:
        """Take every element here without releasing its demand (see :meth:`release`)."""
        if not self._arrow:
            held = _take_all(self._elements)
            self._popped_out(len(held))
            return held
        with self._demand:
            held = _take_all(self._elements)
            self._popped_out(self.count(held))
        return held

    def release(self, count: int) -> None:
        """Count ``count`` held elements (in Arrow mode: rows) as taken and request more.

        Thread-safe for row streams (the source's intake releases the elements it left
        out while the taking thread releases a batch).
        """
        if count <= 0:
            return
        if self._arrow:
            with self._releasing:  # the intake's thread may release too
                self._released += count
            if not self.ended:
                self._refill()
            return
        with self._releasing:
            self._released += count
            more = 0
            if not self.ended:
                # As many as were taken, or fewer after resize() made the window smaller.
                more = self._request(
                    min(count, self.capacity - (self._requested - self._released)))
        self._issue(more)

    def count(self, elements: list[Any]) -> int:
        """How many rows ``elements`` (as :meth:`hold` or :meth:`drain` returned them) hold:
        their number, or in Arrow mode the sum of their rows."""
        return sum(map(_rows_of, elements)) if self._arrow else len(elements)

    def nudge_when(self, waiting: int) -> threading.Event:
        """An event set once ``waiting`` elements (Arrow mode: rows) are here, for a thread
        that holds them."""
        self._nudge_at = max(1, waiting)
        self._nudge_mark = self._popped + self._nudge_at
        return self._nudge

    def drain(self, settle: float = 1.0) -> list[Any]:
        """Take everything buffered and seal the buffer (used when stopping).

        An ``on_next`` under way is waited for (up to ``settle`` s) and its element is
        among those returned; any element signalled later is refused: counted in
        :attr:`refused` and logged, so none is kept where nobody reads it. Nothing more
        is requested.
        """
        self._sealed = True
        self._rare = True
        if self._signalling:
            deadline = time.monotonic() + settle
            with self._changed:
                while self._signalling and (left := deadline - time.monotonic()) > 0:
                    self._changed.wait(left)
            if self._signalling:
                log.warning("an on_next was still under way %.1f s after the source began to "
                            "drain its buffer; its element will be refused", settle)
        with self._demand:
            drained = _take_all(self._elements)
            count = self.count(drained)
            self._popped_out(count)
            with self._releasing:
                self._released += count  # taken for good: nothing more is requested
            self._drained = True
        return drained

    def _request(self, n: int) -> int:
        # Row mode, under _releasing: count up to n more as requested, within the
        # allowance, and return how many; the caller issues them (_issue) once it has let
        # go of the locks (a synchronous publisher signals inside request()).
        allowance = self._allowance  # read once; written only under _releasing here
        if allowance is not None:
            n = min(n, allowance)
            if n <= 0:
                return 0
            self._allowance = allowance - n
        elif n <= 0:
            return 0
        self._requested += n
        self.max_outstanding = max(self.max_outstanding, self._requested - self._received)
        return n

    def _refill(self) -> None:
        # Arrow mode: one batch at a time, while fewer than capacity rows are buffered.
        with self._demand:
            if (self.ended or self._requested > self._batches
                    or self._received - self._released >= self.capacity
                    or self._allowance == 0):
                return
            self._requested += 1
            self.max_outstanding = max(self.max_outstanding, self._requested - self._batches)
        self._issue(1)

    def _issue(self, n: int) -> None:
        subscription = self._subscription
        if n <= 0 or subscription is None:
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
        self._rare = True
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
