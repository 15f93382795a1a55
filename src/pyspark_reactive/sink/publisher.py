"""A streaming query's output as a Publisher: ``df.writeStream.foreachBatch(publisher)``.

Each micro-batch is fetched from the executors a partition at a time, as Arrow (one job
per partition, the next partition computed in the driver JVM while this one is read: see
:mod:`pyspark_reactive.sink.fetch`), cut into chunks of ``chunk_rows`` rows, and every
chunk is offered to every current subscriber through an
:class:`~reactive_streams.signalling.Emitter`, which signals only against demand, on a
thread of that subscription's own. The batch function returns to Spark once every
subscriber has taken the whole batch, so a slow subscriber delays the next micro-batch,
and the source, asked for nothing more, requests nothing more. Meanwhile the batch
function only waits, so it notices a stopping query within a tenth of a second, whatever
the subscribers are doing. Under Spark Connect the batches come through the transport of
:mod:`pyspark_reactive.sink.connect` instead (:meth:`ForeachBatchPublisher.deliver_arrow`).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, get_args

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from reactive_streams import Publisher, Subscriber, to_iterable
from reactive_streams.runners import ThreadRunner
from reactive_streams.signalling import COMPLETE, Emitter, Source, Terminal, require_not_none

from ..errors import PySparkReactiveError
from .fetch import Chunk, check_arrow_carries, chunks_of, fetch_arrow

__all__ = [
    "ELEMENT_TYPES",
    "Element",
    "ForeachBatchPublisher",
    "SparkConnectNotSupported",
    "WhenStalled",
    "WhenUnsubscribed",
]

log = logging.getLogger("pyspark_reactive.sink")

#: What an element of a published query is (``publish(element=...)``).
Element = Literal["row", "dict", "tuple", "arrow"]
#: What a batch does with no subscriber left (``when_unsubscribed=...``).
WhenUnsubscribed = Literal["wait", "stop"]
#: What a ``demand_timeout`` does (``when_stalled=...``).
WhenStalled = Literal["fail", "cancel"]
ELEMENT_TYPES: tuple[Element, ...] = get_args(Element)
WHEN_UNSUBSCRIBED: tuple[WhenUnsubscribed, ...] = get_args(WhenUnsubscribed)
WHEN_STALLED: tuple[WhenStalled, ...] = get_args(WhenStalled)
# How often a wait for subscribers or demand looks whether the query is being stopped.
_POLL_S = 0.1
# Most rows a subscription takes from its mailbox at a time, whatever its demand: after a
# stop, a subscriber still receives at most this many rows of the abandoned batch.
_STEP = 64
# Spark takes an error raised by a foreachBatch function for part of query.stop() (the query
# then ends without an exception) only when the error's text has a Py4J error for a Java
# interruption in it: StreamExecution.PROXY_ERROR, the same on 4.0 to 4.3. Its pattern
# recurses once per character after "calling", so the text must come last and stay short;
# a long one (a cancelled job's stack trace) overflows the stream thread's stack.
_STOP_MARK = ("py4j.protocol.Py4JJavaError: An error occurred while calling foreachBatch: "
              "java.lang.InterruptedException")

CONNECT_MESSAGE = (
    "a ForeachBatchPublisher cannot be given to foreachBatch under Spark Connect: there the "
    "batch function runs in a process on the server, where the subscribers of this process "
    "cannot be reached. Use publish(df, ...), which starts the query with a batch function "
    "that stages each micro-batch on the server for this process to fetch, and returns the "
    "publisher to subscribe to.")


class SparkConnectNotSupported(PySparkReactiveError, RuntimeError):
    """ForeachBatchPublisher was used with a Spark Connect session."""


class _DeliveryAborted(PySparkReactiveError, RuntimeError):
    """The batch can no longer be delivered: the stream ended, or nobody is left."""


class _QueryStopping(_DeliveryAborted):
    """The query is being stopped while its batch waits for subscribers or demand."""


class _Step(list):  # type: ignore[type-arg]
    """The elements of one pull, which remember how far the emitter iterated them.

    A subscription that ends part way through a step (a cancel, an ``on_next`` that
    raised) has taken only some of them; :meth:`signalled` tells how many, so that the
    next subscriber starts at the first element nobody took (finding 13). The position is
    read from the list's own iterator once, at the end, so the steady path pays one call
    per step and nothing per element.
    """

    __slots__ = ("_iterator",)

    def __iter__(self) -> Iterator[Any]:
        iterator = list.__iter__(self)
        self._iterator = iterator
        return iterator

    def signalled(self, batched: bool) -> int:
        """How many elements had ``on_next`` return (a ``batched`` subscriber: were handled).

        Called once the emitter's loop has stopped. A list iterator's ``__reduce__`` gives
        its position, or no position once it ran out, which it does only when the loop
        asked for an element past the last: every element was signalled then. Otherwise,
        on the plain path (Emitter._work) the element last taken from the iterator met the
        cancel (or raised in ``on_next``) and was not taken; on the batched path
        (SyncSubscriber._deliver) every element taken from the iterator was handled.
        """
        iterator = getattr(self, "_iterator", None)
        if iterator is None:
            return 0
        state = iterator.__reduce__()
        if len(state) < 3:
            return len(self)
        fetched = int(state[2])
        return fetched if batched else max(fetched - 1, 0)


class _Mailbox(Source[Any]):
    """One subscriber's place in the publisher's elements, numbered from the first.

    Elements are numbered across the publisher's life; the batch's thread appends chunks
    to the publisher's window, and this subscription's emitter pulls from it on the
    subscription's own thread. ``next`` is the next element to pull; ``done`` the first
    one this subscriber has not yet taken: for a plain subscriber, ``on_next`` returned for
    every element before it; for one that deferred confirmation, every element before it
    was confirmed. All fields are read and written holding the publisher's lock.
    """

    def __init__(self, publisher: ForeachBatchPublisher, runner: ThreadRunner,
                 subscriber: Subscriber[Any]) -> None:
        self.publisher = publisher
        self.runner = runner
        self.subscriber: Subscriber[Any] | None = subscriber  # named in a stall's error
        self.emitter: _Subscription | None = None
        # Whether the emitter hands this subscriber whole steps (SyncSubscriber._deliver),
        # read once: the emitter forgets it when it ends, before it closes this mailbox.
        self.batched = False
        self.start = self.next = self.done = 0
        # False while a subscriber that cancelled has not yet left: where this one starts
        # depends on what that one took (see place()).
        self.placed = False
        self.step: _Step | None = None  # the last pull's elements, from element step_base
        self.window: list[Any] | None = None  # the publisher's window, when chunk was found
        self.chunk: tuple[int, Sequence[Any], Any, int | None] = (0, (), None, None)
        self.step_base = 0
        self.deferred = False
        self.confirmed = 0  # cumulative, as confirm() gives it
        self.closed = False
        # This subscription's own end, before the stream's: a demand_timeout's error.
        self.failure: BaseException | None = None
        # For demand_timeout: pulls that took elements and confirmations that moved, as
        # last seen by the batch's thread, and since when it has seen this subscriber
        # hold the batch back without either.
        self.progress = 0
        self.progress_seen = 0
        self.stalled_since: float | None = None
        self.nudged = -1  # the position the batch's thread last woke the emitter at

    def pull(self, n: int) -> tuple[Sequence[Any], Terminal | None]:
        publisher = self.publisher
        changed = publisher._changed
        with changed:
            if not self.placed and not self.place():
                return (), None  # close() of the one leaving signals this emitter again
            low = self.next
            if not self.deferred:
                # The emitter pulls again only once every element of its last pull was
                # signalled (or it pulls no more: see close()).
                self.done = low
            if self.failure is not None or publisher._terminal is not None:
                # Not yet taken: withdrawn, so the terminal signal follows at once.
                self.step = None
                return (), publisher._terminal if self.failure is None else self.failure
            self.step_base = low
            end = publisher._end_at
            high = low + n
            base, items, make, _ = self.chunk
            if n and high <= base + len(items) and base <= low and \
                    self.window is publisher._window:
                # The common case: within the chunk of the last pull, while the window it
                # was found in stands (a window is replaced, never emptied in place, when
                # a batch begins or is withdrawn; trimming drops only chunks below every
                # subscriber's next).
                pieces = [(items[low - base:n + low - base], make)]
                self.next = high
            else:
                pieces = self._pieces(n, end) if n and low < end else []
            if pieces:
                self.progress += 1
                # On the subscription's thread, just before their on_next: what
                # publisher.batch_id answers there (see ForeachBatchPublisher.batch_id).
                publisher._delivering.batch_id = self.chunk[3]
            if self.next >= end:
                changed.notify_all()  # the batch's thread may offer more, or finish
        # Outside the lock; made at most one step (64) at a time, each element lives from
        # here to its on_next, which spares the garbage collector a chunk's worth of young
        # objects to trace (Rows are tuples it cannot untrack).
        if len(pieces) == 1:
            piece, make = pieces[0]
            step = _Step(piece if make is None else map(make, piece))
        else:
            step = _Step()
            for piece, make in pieces:
                step.extend(piece if make is None else map(make, piece))
        self.step = step
        return step, None

    def _pieces(self, n: int, end: int) -> list[tuple[Sequence[Any], Any]]:
        """Up to ``n`` elements from ``next`` on, across chunks; moves ``next``. Holding
        the lock."""
        publisher = self.publisher
        low = self.next
        pieces = []
        while n > 0 and low < end:
            index = bisect.bisect_right(publisher._bases, low) - 1
            if index < 0:
                break  # withdrawn (an abandoned batch)
            self.window = publisher._window
            base, items, make, _ = self.chunk = self.window[index]
            high = min(base + len(items), low + n)
            if high <= low:
                break
            pieces.append((items[low - base:high - base], make))
            n -= high - low
            low = high
        self.next = low
        return pieces

    def place(self) -> bool:
        """Start at the first element that no subscriber has taken, unless a subscriber
        that cancelled has yet to leave (then False). Holding the lock."""
        publisher = self.publisher
        if self.placed or publisher._terminal is not None:
            return True
        if any(m.leaving for _, m in publisher._outlets):
            return False
        self.start = self.next = self.done = publisher._taken_now()
        self.placed = True
        return True

    @property
    def leaving(self) -> bool:
        """Cancelled, and not yet closed: what it took is not known yet."""
        return not self.closed and self.emitter is not None and self.emitter.cancelled

    def close(self) -> None:
        # Called once, by the emitter, when the subscription ends (cancel or terminal).
        publisher = self.publisher
        with publisher._changed:
            self.leave()
            self.subscriber = None  # §3.13
            waiting = [e for e, m in publisher._outlets if not m.placed and not m.closed]
            publisher._changed.notify_all()
        for emitter in waiting:
            emitter.signal()  # they may start now
        self.runner.release()

    def leave(self) -> None:
        """Count what this subscriber took, for whoever comes next. Holding the lock."""
        if not self.deferred and self.step is not None:
            self.done = max(self.done, self.step_base + self.step.signalled(self.batched))
        self.closed = True
        publisher = self.publisher
        publisher._taken = max(publisher._taken, self.done)

    def skip_to(self, position: int) -> None:
        """Move past elements withdrawn with an abandoned batch. Holding the lock."""
        if self.placed and self.next < position:
            # Confirmations still count signalled elements, so start moves with next.
            self.start += position - self.next
            self.next = position
            if not self.deferred:
                self.done = position

    def defer(self) -> None:
        with self.publisher._changed:
            if self.next != self.start:
                raise RuntimeError(
                    "ForeachBatchPublisher: defer_confirmation() must be called before any "
                    "element is signalled (in on_subscribe, before the first request)")
            self.deferred = True

    def fail_batch(self, error: BaseException) -> None:
        publisher = self.publisher
        with publisher._changed:
            if publisher._batch_failure is None:
                publisher._batch_failure = (f"the subscriber {self.subscriber!r} failed it: "
                                            f"{error}")
            publisher._changed.notify_all()

    def confirm(self, count: int) -> None:
        if type(count) is not int or count < 0:
            raise ValueError(f"ForeachBatchPublisher: confirm(count={count!r}): count must be "
                             "a non-negative int, the elements received so far")
        publisher = self.publisher
        with publisher._changed:
            if not self.deferred:
                raise RuntimeError("ForeachBatchPublisher: confirm() without "
                                   "defer_confirmation() first")
            signalled = self.next - self.start
            if count > signalled:
                raise ValueError(f"ForeachBatchPublisher: confirm(count={count}) is more than "
                                 f"the {signalled} elements signalled to this subscriber")
            if count <= self.confirmed or self.closed:
                return  # §3.6-like: after the end a confirmation changes nothing
            self.confirmed = count
            self.done = self.start + count
            self.progress += 1
            if self.done >= publisher._end_at:
                publisher._changed.notify_all()


class _Subscription(Emitter[Any]):
    """The Subscription a ForeachBatchPublisher hands out: an Emitter over a mailbox, plus
    deferred confirmation for transports (INTERFACES.md, 1)."""

    def __init__(self, subscriber: Subscriber[Any], mailbox: _Mailbox,
                 dispatch: Any) -> None:
        super().__init__(subscriber, mailbox, dispatch=dispatch, chunk=_STEP)
        self._mailbox = mailbox

    def defer_confirmation(self) -> None:
        """From now on an element counts as taken once :meth:`confirm` covers it.

        For a transport (an RSocket service) whose ``on_next`` only sends the element on
        its way: call it in ``on_subscribe``, before the first ``request``. The batch
        then ends only once every element of it is confirmed, and elements signalled but
        not confirmed when this subscription ends go to the next subscriber.

        Raises
        ------
        RuntimeError
            When an element was already signalled.
        """
        self._mailbox.defer()

    def confirm(self, count: int) -> None:
        """The far end has received the first ``count`` elements signalled here.

        Cumulative since ``on_subscribe``; a count not above the last one is ignored, as
        is any after the subscription ended. Thread-safe; returns at once.

        Raises
        ------
        ValueError
            When ``count`` is not a non-negative int or exceeds the elements signalled.
        RuntimeError
            Without :meth:`defer_confirmation` first.
        """
        self._mailbox.confirm(count)

    def fail_batch(self, error: BaseException) -> None:
        """Fail the micro-batch under way, so that Spark does not commit it.

        For a subscriber that hands its elements on (a broker that refused some): the
        batch function raises ``error``'s text, the query fails, and a restart from its
        checkpoint delivers the batch again. Call :meth:`cancel` as well to leave.
        Thread-safe; returns at once. The publisher keeps the first such failure: the
        batch under way fails with it, or the next one if none is.
        """
        require_not_none(error, "the error", "§2.13")
        self._mailbox.fail_batch(error)

    def batch_scope(self) -> str | None:
        """Read in ``on_next``: ``"<query id>.<batch id>"`` of the element being signalled,
        the same when a restarted query delivers that batch again (``None`` before the
        first batch). A subscriber that numbers the elements it receives in each scope
        gives every row of a batch the same key in each delivery of it, provided it was
        subscribed from the batch's first row on."""
        publisher = self._mailbox.publisher
        batch_id = publisher.batch_id
        if batch_id is None:
            return None
        query = publisher.query
        return f"{batch_id}" if query is None else f"{query.id}.{batch_id}"


class ForeachBatchPublisher(Publisher[Any]):
    """A Publisher of a streaming query's rows; give it to ``writeStream.foreachBatch``.

    Every current subscriber receives every row of each micro-batch, in order, never more
    than it requested. A row counts as taken by a subscriber once its ``on_next`` has
    returned. The batch function returns to Spark only when every current subscriber has
    taken the whole batch, so the slowest subscriber sets the pace of the query. A
    subscriber that arrives while a batch is being delivered starts at the first row that
    no subscriber has taken: after one that cancelled part way, exactly where that one
    stopped, so each row goes to at least one subscriber and, from one sole subscriber to
    the next, to exactly one. One that arrives after the stream ended gets the terminal
    signal at once.

    A transport whose ``on_next`` only sends a row on its way (a remote client's
    connection) calls ``subscription.defer_confirmation()`` in ``on_subscribe``, before
    its first ``request``, and then ``subscription.confirm(count)`` (from any thread) with
    the number of rows signalled to it that the far end has received. Its rows count as
    taken only once confirmed: the batch waits for them (``demand_timeout`` applies to a
    subscriber that confirms nothing), and rows not confirmed when it leaves go to the
    next subscriber, so they may reach the far end twice (at-least-once for rows in
    flight), never not at all. This process keeps the batch's unconfirmed rows meanwhile.

    Each subscription signals on a thread of its own (§1.3: one signal at a time), never
    on the thread Spark calls the batch function on, which only waits. So however slow a
    subscriber is, even one whose ``on_next`` blocks until ``query.stop()`` has returned,
    ``query.stop()`` returns within about 0.1 s plus Spark's own shutdown: the batch
    under way is abandoned and not committed (a restart with the same checkpoint delivers
    it again), the query ends without an exception, and each subscriber receives at most
    64 more elements of that batch (ones it had requested and its thread had already
    taken), then ``on_complete``.

    A publisher serves one run of one query: give each ``start()`` a new one (as
    :func:`publish` does). A second run, or a second query, fails at its first batch
    with an error that says so.

    Parameters
    ----------
    element : {"row", "dict", "tuple", "arrow"}
        What an element is: a ``pyspark.sql.Row`` (default), a dict, a tuple, or a
        ``pyarrow.RecordBatch`` of up to ``chunk_rows`` rows (then demand counts batches).
    chunk_rows : int
        Rows offered at a time. Whatever the batch's size, this process holds one Arrow
        batch as Spark sends it (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows,
        10,000 by default) plus one chunk, and the driver JVM the partition being read
        and the next one, which it computes meanwhile.
    when_unsubscribed : {"wait", "stop"}
        With no subscriber left (or none yet), ``"wait"`` (default) holds the batch until
        one subscribes, losing nothing. ``"stop"`` ends the query once its last
        subscriber has cancelled: the batch under way fails, so the query terminates
        with an exception saying why, and that batch is not committed (a restart with
        the same checkpoint delivers it again).
    demand_timeout : float, optional
        Bounds the wait for a subscriber that stops requesting: once rows of the batch
        have waited this many seconds for a subscriber that has received all it
        requested and requests no more, ``when_stalled`` applies (checked about every
        0.1 s). ``None`` (default) waits as long as the subscriber takes: a slow
        subscriber is backpressure, not a fault, and waiting loses nothing
        (``query.stop()`` still ends the query at once). A subscriber busy in ``on_next``
        with rows it requested is not stalled, however long it takes.
    when_stalled : {"fail", "cancel"}
        What a ``demand_timeout`` does. ``"fail"`` (default) fails the batch, so the
        query terminates with an exception naming the subscriber and the timeout, every
        subscriber gets ``on_error`` with it, and the batch is not committed (a restart
        delivers it again): nothing is lost. ``"cancel"`` cancels that subscription
        alone: its subscriber gets ``on_error`` with a ``TimeoutError`` naming the
        timeout, and the others go on with the batch (that subscriber misses the rest of
        the stream).

    Raises
    ------
    ValueError
        For an ``element``, ``chunk_rows``, ``when_unsubscribed``, ``demand_timeout`` or
        ``when_stalled`` not accepted.
    RuntimeError
        From the batch function, so that Spark does not commit the batch: when the query
        is stopping (Spark takes it for part of the stop), and, failing the query with a
        message that says why, when the stream was ended by :meth:`complete` or
        :meth:`fail`, with ``when_unsubscribed="stop"``, after a ``demand_timeout`` with
        ``when_stalled="fail"``, or in a query run other than the one the publisher
        serves.

    Notes
    -----
    A query that fails, in a batch (a UDF that raises on a row, a lost fetch) or
    anywhere else, ends the stream: every subscriber gets ``on_error`` with the query's
    exception, which carries the cause, after the rows of the failed batch it had
    already received (at most 64 more once the failure is known).

    ``foreachBatch`` is at-least-once per batch. Spark commits a batch only once the batch
    function has returned, that is once every subscriber has taken all of it; a batch
    that fails or is stopped part way is not committed. A restart from the same
    checkpoint (with a new publisher) first runs that batch again, with the same batch id
    and, for a deterministic query over a replayable source, the same rows in the same
    order, and delivers it whole. So the only rows a subscriber can see twice are those of
    the last batch the previous run delivered rows of, which a subscriber of that run may
    have received in part. To drop them, keep with your output the last batch id and
    the count of its rows handled (:attr:`batch_id`, read in ``on_next``, is the batch of
    that very element), and in the new run skip that many rows of that batch id; where
    the order within a batch is not deterministic (a shuffle), drop by a key of the row.

    Examples
    --------
    >>> publisher = ForeachBatchPublisher(element="dict")              # doctest: +SKIP
    >>> query = df.writeStream.foreachBatch(publisher).start()         # doctest: +SKIP
    >>> publisher.subscribe(subscriber)                                # doctest: +SKIP
    """

    def __init__(self, element: Element = "row", chunk_rows: int = 1024,
                 when_unsubscribed: WhenUnsubscribed = "wait", demand_timeout: float | None = None,
                 when_stalled: WhenStalled = "fail") -> None:
        if element not in ELEMENT_TYPES:
            raise ValueError(f"ForeachBatchPublisher: element={element!r} is not accepted: "
                             f"one of {', '.join(ELEMENT_TYPES)}")
        if type(chunk_rows) is not int or chunk_rows < 1:
            raise ValueError(f"ForeachBatchPublisher: chunk_rows={chunk_rows!r} is not "
                             "accepted: a positive int")
        if when_unsubscribed not in WHEN_UNSUBSCRIBED:
            raise ValueError(f"ForeachBatchPublisher: when_unsubscribed={when_unsubscribed!r} "
                             f"is not accepted: one of {', '.join(WHEN_UNSUBSCRIBED)}")
        if not (demand_timeout is None or (
                isinstance(demand_timeout, (int, float)) and not isinstance(demand_timeout, bool)
                and 0 < demand_timeout < float("inf"))):
            raise ValueError(f"ForeachBatchPublisher: demand_timeout={demand_timeout!r} is not "
                             "accepted: None (wait as long as the subscriber takes) or a "
                             "positive number of seconds")
        if when_stalled not in WHEN_STALLED:
            raise ValueError(f"ForeachBatchPublisher: when_stalled={when_stalled!r} is not "
                             f"accepted: one of {', '.join(WHEN_STALLED)}")
        self.element = element
        self.chunk_rows = chunk_rows
        self.when_unsubscribed = when_unsubscribed
        self.demand_timeout = None if demand_timeout is None else float(demand_timeout)
        self.when_stalled = when_stalled
        self.query: Any = None
        self._batch_id: int | None = None
        self._delivering = threading.local()  # per subscription thread: see batch_id
        self.rows_delivered = 0
        # The first failure a subscriber gave with fail_batch (its text): it fails the
        # batch under way, or the next.
        self._batch_failure: str | None = None
        self._changed = threading.Condition()
        self._outlets: list[tuple[_Subscription, _Mailbox]] = []
        # The elements on offer: chunks (first element's number, elements, what makes each
        # as it is taken, batch id), from the first element that a subscriber may still
        # need up to _end_at, the number the next element offered gets. _bases holds each
        # chunk's first number, to find an element's chunk.
        self._window: list[tuple[int, Sequence[Any], Callable[[Any], Any] | None, int | None]] = []
        self._bases: list[int] = []
        self._end_at = 0
        # Of the batch under way: elements before this were taken by some subscriber
        # that has since left (see _taken_now()).
        self._taken = 0
        self._terminal: Terminal | None = None
        self._ended_by = ""  # why the stream ended, for the error of a later batch
        self._watcher: threading.Thread | None = None
        self._active, self._active_at = True, float("-inf")  # see _query_active()
        self._had_subscriber = False
        self._schemas: dict[tuple[str, ...], pa.Schema] = {}  # see fetch_arrow
        # A transport's wait for its own threads once the query has ended (the Spark
        # Connect pump's cleanup), so that subscribers learn of the end only after it.
        self.transport_end: Callable[[], None] | None = None

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Spark Connect pickles the foreachBatch function to run it on the server, where
        # this publisher's subscribers are out of reach. Raising here would reach the user
        # as Connect's generic "cannot serialize" error; what travels instead fails the
        # first batch (uncommitted, so nothing is lost) with the reason and the remedy.
        return _Unreachable, (CONNECT_MESSAGE,)

    # -- Publisher ------------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber[Any]) -> None:
        require_not_none(subscriber, "the subscriber", "§1.9")
        # The subscription's own thread, released when it ends (cancel or terminal signal).
        runner = ThreadRunner(max_workers=1, name="reactive-sink-subscription")
        mailbox = _Mailbox(self, runner, subscriber)
        emitter = _Subscription(subscriber, mailbox, runner.acquire())
        mailbox.emitter = emitter
        mailbox.batched = emitter._deliver is not None
        with self._changed:
            if self._terminal is None:
                # A late subscriber starts at the first element no subscriber has taken
                # (finding 13: after a subscriber left part way, nothing twice).
                mailbox.place()
                self._outlets.append((emitter, mailbox))
                self._had_subscriber = True
                self._changed.notify_all()
        # §1.9: on_subscribe is the emitter's first signal, even if a batch has already
        # offered rows; after the end, the terminal signal follows it.
        emitter.start()

    def __iter__(self) -> Iterator[Any]:
        """``for row in publisher``: the query's rows in a plain loop, with backpressure.

        Each loop subscribes anew (a subscriber like any other) and requests at most
        ``DEFAULT_PREFETCH`` (256) elements ahead of itself, more only as it takes them,
        so a slow loop holds the query back: a batch is committed only once the loop has
        taken all of it. An error of the query is raised in the loop after the rows before
        it; ``break`` (or leaving a ``with iter(publisher) as rows:`` block) cancels the
        subscription, after which ``when_unsubscribed`` applies. For another prefetch or a
        timeout per row, use :func:`reactive_streams.to_iterable`.

        Examples
        --------
        >>> for row in publish(df, trigger={"availableNow": True}):   # doctest: +SKIP
        ...     print(row.value)
        """
        return iter(to_iterable(self))

    @property
    def batch_id(self) -> int | None:
        """The id of the micro-batch being delivered (``None`` before the first).

        Read in ``on_next``, it is the batch of the element being signalled, even when
        the query has moved on to the next batch while that subscriber still works
        through the last rows it took of this one. Read anywhere else, it is the batch
        the query is delivering now.
        """
        seen: int | None = getattr(self._delivering, "batch_id", None)
        return self._batch_id if seen is None else seen

    @property
    def subscribers(self) -> int:
        """Subscribers currently attached."""
        with self._changed:
            return sum(1 for _, mailbox in self._outlets if not mailbox.closed)

    # -- ending the stream ------------------------------------------------------------------

    def complete(self) -> None:
        """Signal ``on_complete`` to every subscriber, now and later (idempotent).

        Rows on offer and not yet taken are withdrawn. The query, if it is still running,
        fails at its next batch (or the one under way), which has nobody to go to; stop
        the query instead to end the stream with it."""
        self._end(COMPLETE, "complete() was called")

    def fail(self, error: BaseException) -> None:
        """Signal ``on_error(error)`` to every subscriber, now and later.

        As for :meth:`complete`, a query still running fails at its next batch."""
        require_not_none(error, "the error", "§2.13")
        self._end(error, f"fail({error!r}) was called")

    def watch(self, query: Any) -> threading.Thread:
        """End the stream when ``query`` ends: ``on_complete``, or ``on_error`` with its
        exception. Returns the (daemon) thread that waits for it.

        :func:`publish` calls this, and so does the first batch of a query that was given
        the publisher directly; call it yourself to end the stream of a query that stops
        before its first batch. Watching the same run again returns the same thread.

        Raises
        ------
        RuntimeError
            When the publisher already serves another query, or another run of it.
        """
        with self._changed:
            if self.query is not None:
                if self._watcher is not None and str(self.query.runId) == str(query.runId):
                    return self._watcher
                raise RuntimeError(f"ForeachBatchPublisher: {self._one_run()}")
            self.query = query

            def wait() -> None:
                why = f"query {query.id} (run {query.runId}) ended"
                try:
                    query.awaitTermination()
                except Exception as error:
                    self._transport_ended()
                    self._end(error, why)
                    return
                failure = query.exception()
                self._transport_ended()
                self._end(COMPLETE if failure is None else failure, why)

            self._watcher = threading.Thread(target=wait, daemon=True,
                                             name=f"reactive-sink-watch-{query.id}")
            self._watcher.start()
            return self._watcher

    def _transport_ended(self) -> None:
        wait = self.transport_end
        if wait is not None:
            try:
                wait()
            except Exception:
                log.warning("ForeachBatchPublisher: waiting for the transport to end failed",
                            exc_info=True)

    def _one_run(self) -> str:
        query = self.query
        return (f"this publisher serves query {query.id} (run {query.runId}) and no other: "
                "a ForeachBatchPublisher publishes one run of one query. Make a new one for "
                "each start() (publish(df) does) and subscribe to that")

    def _end(self, terminal: Terminal, why: str) -> None:
        with self._changed:
            if self._terminal is not None:
                return
            self._terminal = terminal
            self._ended_by = why
            outlets = list(self._outlets)
            self._outlets.clear()
            # Not yet taken: withdrawn (each pull now answers the terminal signal at once).
            self._window, self._bases = [], []
            self._changed.notify_all()
        for emitter, _ in outlets:
            emitter.signal()

    # -- foreachBatch -----------------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Deliver one micro-batch; called by Spark's ``foreachBatch``."""
        _refuse_connect(batch)
        self._deliver(batch_id, lambda: self._admit(batch), lambda: self._chunks(batch))

    def deliver_arrow(self, batch_id: int, batches: Iterable[pa.RecordBatch]) -> None:
        """Deliver one micro-batch given as Arrow record batches, fetched lazily.

        The Spark Connect transport calls this in the client (see ``sink.connect``); it
        returns once every subscriber has taken the batch.

        Raises
        ------
        RuntimeError
            When the batch cannot be delivered; its text says why (a stopping query's in
            the words Spark takes for part of a stop).
        """
        def admit() -> None:
            with self._changed:
                self._check_stream()

        def chunks() -> Iterator[Chunk]:
            for record_batch in batches:
                yield from chunks_of(record_batch, self.element, self.chunk_rows)

        self._deliver(batch_id, admit, chunks)

    def _deliver(self, batch_id: int, admit: Callable[[], None],
                 chunks: Callable[[], Iterable[Chunk]]) -> None:
        # Raising keeps Spark from committing a batch that was not delivered.
        try:
            admit()
            self._begin(batch_id)
            rows = 0
            for chunk in chunks():
                rows += self._offer(chunk)
            self._wait(finished=True)
            self.rows_delivered += rows
        except _QueryStopping:
            self._abandon()
            raise _stopped(batch_id) from None
        except _DeliveryAborted as abort:
            self._abandon()
            raise RuntimeError(f"ForeachBatchPublisher: batch {batch_id} was not delivered: "
                               f"{abort}") from None
        except Exception:
            self._abandon()
            if self.query is not None and not self.query.isActive:
                # Such as a fetch of a partition, cancelled by the stop.
                raise _stopped(batch_id) from None
            raise

    def _admit(self, batch: DataFrame) -> None:
        """Refuse a batch of another query run, or one that nobody can receive."""
        query = self.query
        if query is None:
            self._find_query(batch)
        elif _local_property(batch, "spark.jobGroup.id") not in (None, str(query.runId)):
            # Spark runs each batch of a query run in a job group named after the run.
            raise _DeliveryAborted(self._one_run())
        with self._changed:
            self._check_stream()

    def _begin(self, batch_id: int) -> None:
        with self._changed:
            self._batch_id = batch_id
            # Elements of an abandoned batch, if any, are gone: everyone starts here.
            self._window, self._bases = [], []
            self._taken = self._end_at
            for _, mailbox in self._outlets:
                mailbox.skip_to(self._end_at)

    def _abandon(self) -> None:
        """Withdraw the batch's elements not yet pulled: no subscriber gets more of them."""
        with self._changed:
            self._window, self._bases = [], []
            outlets = list(self._outlets)
        for emitter, _ in outlets:
            emitter.signal()  # an emitter waiting for demand sees the end, if known

    def _taken_now(self) -> int:
        """The first element that no subscriber, here or gone, has taken. Holding the lock."""
        taken = self._taken
        for _, mailbox in self._outlets:
            if mailbox.placed and not mailbox.closed and mailbox.done > taken:
                taken = mailbox.done
        return taken

    def _offer(self, chunk: Chunk) -> int:
        """Offer ``chunk`` to the subscribers and wait until each has pulled all of it;
        returns its rows."""
        items, make = chunk
        with self._changed:
            self._window.append((self._end_at, items, make, self._batch_id))
            self._bases.append(self._end_at)
            self._end_at += len(items)
            outlets = list(self._outlets)
        # The emitters deliver on their subscriptions' threads; this one only waits, so
        # it sees a stop however long a subscriber takes. The next chunk is made once all
        # of this one is pulled: made meanwhile, it would contend for the GIL with the
        # subscribers' threads, which costs them more than it saves.
        for emitter, _ in outlets:
            emitter.signal()
        self._wait(finished=False)
        return sum(len(e) for e in items) if self.element == "arrow" else len(items)

    def _wait(self, finished: bool) -> None:
        """Wait until every subscriber has pulled every element on offer, or, when
        ``finished``, until every element on offer is taken: by every subscriber here,
        and, of those who left, by one at least. Raises :class:`_DeliveryAborted` when the
        batch cannot be delivered."""
        while True:
            woken = []
            with self._changed:
                self._check_stream()
                if self._batch_failure is not None:
                    raise _DeliveryAborted(self._batch_failure)
                end = self._end_at
                if not finished and self._outlets and all(
                        m.next >= end and m.placed and not m.closed for _, m in self._outlets):
                    self._trim()  # the common case, once per chunk: everyone pulled it
                    return
                self._outlets = [(e, m) for e, m in self._outlets if not m.closed]
                # One not yet placed takes part once it is; until then it holds nothing.
                outlets = [(e, m) for e, m in self._outlets if m.placed]
                if finished:
                    if self._taken_now() >= end and all(m.done >= end for _, m in outlets):
                        return
                elif outlets and all(m.next >= end for _, m in outlets):
                    self._trim()
                    return
                if (not self._outlets and self.when_unsubscribed == "stop"
                        and self._had_subscriber):
                    self._stop_query("its last subscriber cancelled")  # raises
                for emitter, mailbox in outlets:
                    if (finished and not mailbox.deferred and mailbox.done < mailbox.next
                            and mailbox.next >= end and mailbox.nudged != mailbox.next):
                        # Its last step was pulled; the emitter tells that it was signalled
                        # by pulling again, which it may not do unasked.
                        mailbox.nudged = mailbox.next
                        woken.append(emitter)
                woken += self._stalled(outlets)  # raises when they fail the batch
                if not woken:
                    self._changed.wait(_POLL_S)
            for emitter in woken:
                emitter.signal()  # a pull, or a cancelled subscriber's on_error

    def _trim(self) -> None:
        """Let go of chunks no subscriber can be given any more. Holding the lock."""
        window = self._window
        if not window:
            return
        low = min([self._taken_now()]
                  + [m.next for _, m in self._outlets if m.placed and not m.closed])
        if window[0][0] + len(window[0][1]) > low:
            return
        drop = 0
        for base, items, _, _ in self._window:
            if base + len(items) > low:
                break
            drop += 1
        if drop:
            del self._window[:drop], self._bases[:drop]

    def _stalled(self, outlets: list[tuple[_Subscription, _Mailbox]]) -> list[_Subscription]:
        """Apply ``demand_timeout`` to the subscribers that the batch waits for.

        A subscriber is stalled while it holds the batch back (elements wait for it with
        no demand outstanding, or, having deferred confirmation, it has all it was
        offered and has not confirmed all) and has neither taken nor confirmed any since
        the last look; it has timed out once that has lasted ``demand_timeout`` seconds.
        With ``when_stalled="fail"`` this raises :class:`_DeliveryAborted`; with
        ``"cancel"`` it ends those subscriptions with an error and returns their
        emitters, to be signalled. Called holding the lock.
        """
        timeout = self.demand_timeout
        if timeout is None:
            return []
        now = time.monotonic()
        end = self._end_at
        timed_out = []
        for emitter, mailbox in outlets:
            moved = mailbox.progress != mailbox.progress_seen
            mailbox.progress_seen = mailbox.progress
            if mailbox.next < end:
                holds = emitter.demand == 0
            else:
                holds = mailbox.deferred and mailbox.done < end
            if mailbox.closed or not holds or moved:
                mailbox.stalled_since = None
            elif mailbox.stalled_since is None:
                mailbox.stalled_since = now
            elif now - mailbox.stalled_since >= timeout:
                timed_out.append((emitter, mailbox))
        if not timed_out:
            return []
        what = (f"requested no row for demand_timeout={timeout:g} s while rows of batch "
                f"{self._batch_id} waited for it")
        if any(mailbox.deferred for _, mailbox in timed_out):
            what = (f"requested or confirmed no row for demand_timeout={timeout:g} s while "
                    f"rows of batch {self._batch_id} waited for it")
        if self.when_stalled == "fail":
            names = ", ".join(repr(mailbox.subscriber) for _, mailbox in timed_out)
            raise _DeliveryAborted(f"the subscriber {names} {what} (when_stalled='fail')")
        for _, mailbox in timed_out:
            log.warning("ForeachBatchPublisher: cancelling %r: it %s (when_stalled='cancel')",
                        mailbox.subscriber, what)
            mailbox.failure = TimeoutError(
                f"ForeachBatchPublisher: this subscriber {what}, so its subscription is "
                "cancelled (when_stalled='cancel'); the other subscribers go on")
            # Gone for the batch: the others need not wait for it, and what it did not
            # take goes to the next subscriber.
            mailbox.leave()
        self._changed.notify_all()
        return [emitter for emitter, _ in timed_out]

    def _find_query(self, batch: DataFrame) -> None:
        # Given to foreachBatch directly: the query calling us is named by a property of
        # the stream's thread, which py4j pins this callback to. Watching it lets
        # query.stop() end a wait for subscribers, and subscribers learn of the end.
        query = None
        try:
            query_id = _local_property(batch, "sql.streaming.queryId")
            # The batch's own session is a clone that does not list the query; the
            # session that started it does.
            for session in (SparkSession.getActiveSession(), batch.sparkSession):
                if query is None and query_id and session is not None:
                    query = session.streams.get(query_id)
        except Exception:  # pragma: no cover - depends on Spark internals
            log.debug("could not find the query calling foreachBatch", exc_info=True)
            return
        if query is not None and self.query is None:
            self.watch(query)

    def _check_stream(self) -> None:
        """Raise :class:`_DeliveryAborted` when the batch can no longer be delivered."""
        if not self._query_active():
            raise _QueryStopping()
        if self._terminal is not None:
            raise _DeliveryAborted(
                f"the publisher's stream has already ended ({self._ended_by}), so no "
                "subscriber can receive it. End the stream by stopping the query instead: "
                "its subscribers then get on_complete (or on_error) when it ends")

    def _query_active(self) -> bool:
        """Whether the query runs, asked of Spark at most every ``_POLL_S`` seconds: under
        Spark Connect each answer is a round trip, and this is asked for every chunk."""
        query = self.query
        if query is None:
            return True
        now = time.monotonic()
        if now - self._active_at >= _POLL_S:
            self._active = bool(query.isActive)
            self._active_at = now
        return self._active

    def _stop_query(self, why: str) -> None:
        # Failing the batch is what stops the query without committing the batch; a clean
        # query.stop() would wait for this very call to return first.
        log.warning("ForeachBatchPublisher: ending the query: %s", why)
        raise _DeliveryAborted(f"{why} (when_unsubscribed='stop')")

    def _chunks(self, batch: DataFrame) -> Iterator[Chunk]:
        check_arrow_carries(batch.schema)
        for record_batch in fetch_arrow(batch, self._schemas):
            yield from chunks_of(record_batch, self.element, self.chunk_rows)


class _Unreachable:
    """What a pickled ForeachBatchPublisher becomes: a batch function that refuses."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __call__(self, batch: Any, batch_id: int) -> None:
        raise SparkConnectNotSupported(self.message)


def _stopped(batch_id: int) -> RuntimeError:
    return RuntimeError(f"ForeachBatchPublisher: batch {batch_id} was not delivered: the "
                        f"query is stopping ({_STOP_MARK})")


def _local_property(batch: DataFrame, key: str) -> str | None:
    value: str | None = batch.sparkSession.sparkContext.getLocalProperty(key)
    return value


def _is_connect(obj: Any) -> bool:
    return type(obj).__module__.startswith("pyspark.sql.connect")


def _refuse_connect(df: Any) -> None:
    if _is_connect(df):
        raise SparkConnectNotSupported(CONNECT_MESSAGE)
