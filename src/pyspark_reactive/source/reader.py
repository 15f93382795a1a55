"""``spark.readStream.format("reactive")``: any Publisher as a micro-batch stream.

The publisher and its subscription live in Spark's source runner process (see DESIGN.md):
:class:`ReactiveStreamReader` subscribes there on the first ``latestOffset``. Each
``latestOffset`` cuts a batch of at most ``maxRecordsPerTrigger`` rows from the
:class:`~pyspark_reactive.source.demand_buffer.DemandBuffer`, which at once requests as many more,
converts the rows to Arrow, writes them to the write-ahead log when there is one, and
returns the end offset. ``partitions`` ships the batch's Arrow rows inside the partitions,
so ``read`` on the executors only decodes them. An ``availableNow`` trigger (Spark 4.2+)
takes at most ``availableNowMaxRecords`` elements beyond those the source holds when it
starts, and requests no more than that, so the query ends on an endless publisher too.

Where Spark has no admission control for Python sources (:data:`ADMISSION_CONTROL` false:
Spark 4.0/4.1), it runs an ``availableNow`` trigger as a single micro-batch and never tells
the source which trigger runs; an ``availableNowMaxRecords`` given explicitly then sizes the
first batch of every query run (see :class:`~pyspark_reactive.source.options.SourceOptions`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .._testing.faults import crash_point
from .admission import ADMISSION_CONTROL, ReadMaxRows, SupportsTriggerAvailableNow
from .demand_buffer import DemandBuffer
from .durability import FactoryOptions, ResumePoint
from .intake import Intake, Segment
from .options import (
    BUILTIN_PUBLISHERS,
    SHIPPED_FACTORY,
    CaseInsensitiveOptions,
    SourceOptions,
    check_wal_location,
    describe,
    parse_source_options,
    resolve_factory,
)
from .rows import RowConverter, arrow_schema
from .wal import WalDamaged, WriteAheadLog

__all__ = ["DEFAULT_SCHEMA", "ArrowPartition", "DefaultSource", "ReactiveStreamReader",
           "read_stream"]

log = logging.getLogger("pyspark_reactive.source")

DEFAULT_SCHEMA = "value STRING"
# Spark warns when a task is larger than 1 MiB; rows travel inside the partitions.
PARTITION_BYTES = 1 << 20
# How long a restarted run waits for the stopped one to release the write-ahead log.
WAL_LOCK_TIMEOUT_S = 30.0

Factory = Callable[[Mapping[str, str]], Any]


class DefaultSource(DataSource):
    """The ``reactive`` streaming data source.

    Found by Spark under the name ``reactive`` with no ``register`` call once the package
    is installed; ``spark.dataSource.register(DefaultSource)`` works too. Options are
    validated when the DataFrame is created (``load()``), before any query starts.

    Examples
    --------
    >>> df = (spark.readStream.format("reactive")               # doctest: +SKIP
    ...       .option("publisher", "range").option("maxRecordsPerTrigger", 500).load())
    """

    # A factory shipped with the class by read_stream(); None: the "publisher" option.
    _shipped_factory: Factory | None = None

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        shipped = type(self)._shipped_factory is not None
        self.source_options = parse_source_options(options, shipped_factory=shipped)
        if not shipped:
            factory = resolve_factory(self.source_options.publisher)
            if self.source_options.publisher.lower() in BUILTIN_PUBLISHERS:
                # Built-in publishers are ours and cheap to make: making one checks its
                # options now, not once the query runs.
                factory(CaseInsensitiveOptions(self.source_options.raw))
        if self.source_options.wal_location is not None:
            check_wal_location(self.source_options.wal_location)

    @classmethod
    def name(cls) -> str:
        return "reactive"

    def schema(self) -> str:
        # Spark asks only when no .schema(...) was given; the schema option (a DDL string)
        # lets load() check every option with a schema of one's own (README: Bad input).
        if self.source_options.schema is not None:
            return self.source_options.schema
        if type(self)._shipped_factory is not None:
            return DEFAULT_SCHEMA
        # A factory (built-in or the user's) may say what its elements look like.
        default = getattr(resolve_factory(self.source_options.publisher), "default_schema",
                          None)
        if default is None:
            return DEFAULT_SCHEMA
        ddl: str = default(CaseInsensitiveOptions(self.source_options.raw))
        return ddl

    def streamReader(self, schema: StructType) -> ReactiveStreamReader:
        return ReactiveStreamReader(self.source_options, schema, type(self)._shipped_factory)


class ArrowPartition(InputPartition):
    """A slice of a micro-batch: its rows as an Arrow IPC stream."""

    def __init__(self, start: int, rows: int, payload: bytes) -> None:
        super().__init__(start)
        self.start = start
        self.rows = rows
        self.payload = payload

    def batches(self) -> Iterator[pa.RecordBatch]:
        yield from ipc.open_stream(self.payload)

    def __repr__(self) -> str:
        return f"ArrowPartition(start={self.start}, rows={self.rows}, bytes={len(self.payload)})"


class ReactiveStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of the ``reactive`` source; its live state exists only in the runner.

    Offsets are ``{"offset": n}``, the count of elements since the stream began.
    """

    def __init__(self, options: SourceOptions, schema: StructType,
                 factory: Factory | None) -> None:
        self.options = options
        self.schema = schema
        self._factory = factory
        self._run: _QueryRun | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Tasks get a copy for read(): no subscription, no threads, no factory.
        state = self.__dict__.copy()
        state["_run"] = None
        state["_factory"] = None
        return state

    def _live(self) -> _QueryRun:
        if self._run is None:
            self._run = _QueryRun(self.options, self.schema, self._factory)
        return self._run

    def initialOffset(self) -> dict[str, int]:
        # Asked by a fresh query, but also by a restarted one whose first batch was
        # planned and not committed (the checkpoint records a batch's end, not its
        # start): latest() tells the two apart.
        return {"offset": 0}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.options.max_records_per_trigger)

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: Any = None) -> dict[str, int]:
        return {"offset": self._live().latest(_offset(start), limit)}

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Spark 4.2+ shows this as the source's "latestOffset" in query progress: how far
        # the publisher has got, so latestOffset - endOffset is what the source holds,
        # and "complete" once the publisher completed and everything it sent was taken
        # (publish_on_demand ends its runs on it).
        run = self._run
        reported = None if run is None else run.reported()
        if run is None or reported is None:
            return None
        return {"offset": reported, **({"complete": True} if run.completed() else {})}

    def prepareForTriggerAvailableNow(self) -> None:
        # Spark 4.2+ calls this first, when an availableNow trigger starts. A push-based
        # publisher has no "latest data" to point at, so the bound is a count: what the
        # source holds now plus availableNowMaxRecords. latestOffset returns its start
        # once that is taken (or the publisher pauses for fillWaitMs, or completes), and
        # the query ends.
        self._live().prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self._live().partitions(_offset(start), _offset(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ArrowPartition)
        crash_point("read")
        return partition.batches()

    def commit(self, end: dict[str, Any]) -> None:
        self._live().commit(_offset(end))

    def stop(self) -> None:
        if self._run is not None:
            self._run.stop()


def _offset(offset: Mapping[str, Any] | None) -> Any:
    if offset is None:
        return None
    value = offset.get("offset")
    if type(value) is not int or value < 0:
        raise ValueError(f"reactive source: offset {offset!r} is not {{'offset': n}} with n >= 0")
    return value


# How long the first batch looks at what follows a publisher's first element before it
# judges the publisher's rate (at 200 elements/s it sees about 4 more).
FIRST_RATE_LOOK_S = 0.02


class _QueryRun:
    """Everything one query run holds in the runner: subscription, rows, the log."""

    def __init__(self, options: SourceOptions, schema: StructType,
                 factory: Factory | None) -> None:
        self.options = options
        self.schema = schema
        self.converter = RowConverter(schema)
        self.arrow_schema = arrow_schema(schema)
        self.factory = factory
        self.buffer: DemandBuffer | None = None
        self.intake: Intake | None = None
        self.cursor: int | None = None  # where the next batch starts (Spark 4.0/4.1)
        # Elements an availableNow trigger may still take from the publisher (None: no
        # bound, any other trigger, or Spark 4.0/4.1, which never say availableNow).
        self.available_now_left: int | None = None
        # Without admission control an availableNow run is one micro-batch that the source
        # cannot tell from any other: an explicit availableNowMaxRecords sizes the first
        # batch of every run instead (None: not, or no longer). _window_pending: the
        # demand window is still that batch's, until Spark asks for a second batch.
        self._first_batch_most: int | None = (
            options.available_now_max_records
            if not ADMISSION_CONTROL and options.available_now_explicit else None)
        self._window_pending = False
        # Whether this run's first availableNow batch has waited for a first element.
        self._first_waited = False
        self.parent = os.getppid()
        self._fresh_checked = False
        self._tail_checked = False
        self._claimed = False
        self._planned = False  # partitions() called in this run
        self._busy = False
        self._terminating = False
        self._subscribing_since: float | None = None
        self._released = 0  # elements of this subscription offered in a batch
        # When the last batch was cut (or the subscription made), and how many elements had
        # arrived by then: the publisher's recent rate, which tells whether waiting would
        # fill a batch.
        self._cut_at: float | None = None
        self._cut_received = 0
        self.wal: WriteAheadLog | None = None
        if options.wal_location is not None:
            self.wal = WriteAheadLog(options.wal_location)
            self.wal.lock(WAL_LOCK_TIMEOUT_S)
            self.wal.set_aside_torn()
        else:
            log.warning("reactive source: no walLocation, so rows the publisher signalled but "
                        "Spark has not yet processed are lost if the query stops or fails "
                        "(at-most-once for them); set walLocation for exactly-once. %s",
                        describe(options))
        # Rows a stopped run left in the log that this run has not committed yet.
        self.recovered: list[Segment] = [
            Segment(entry.start, entry.end, entry=entry)
            for entry in (self.wal.entries() if self.wal else [])]
        self._install_sigterm()

    # -- Spark's calls -------------------------------------------------------------------

    @contextlib.contextmanager
    def _calling(self) -> Iterator[None]:
        # A SIGTERM arriving during one of Spark's calls waits for it (its rows may be
        # half logged), then shuts down.
        self._busy = True
        try:
            yield
        finally:
            self._busy = False
            if self._terminating:
                self._shutdown_and_exit()

    def latest(self, start: int | None, limit: Any) -> int:
        with self._calling():
            end = self._latest(start, limit)
            crash_point("latest")
            return end

    def _latest(self, start: int | None, limit: Any) -> int:
        if not self._planned and (start == 0 or (start is None and self.cursor is None)):
            # A restarted query first plans again the batch its checkpoint recorded
            # (partitions()); one asked for a batch from the stream's beginning before
            # that starts from a checkpoint that has recorded no batch. (Spark 4.0/4.1
            # pass no start and call this before initialOffset().)
            self.starting_fresh()
        if start is None:  # Spark 4.0/4.1
            # No cursor: nothing planned yet in this run, so the checkpoint recorded no
            # batch (starting_fresh() refused a log another checkpoint holds): offset 0.
            start = 0 if self.cursor is None else self.cursor
        self.cursor = start
        self._check_tail(start)
        most = self.options.max_records_per_trigger
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            most = max(1, min(most, limit.max_rows))
        first = self._first_batch_most
        if first is not None:
            self._first_batch_most = None  # this run's first batch only
            most = first
            log.info("reactive source: this Spark has no admission control for Python "
                     "sources, so it runs availableNow as one micro-batch and cannot tell "
                     "the source which trigger runs: this run's first batch takes up to "
                     "availableNowMaxRecords=%d elements (rows kept in the write-ahead log "
                     "first), and the publisher is asked for no more until Spark asks for "
                     "a second batch; later batches take up to maxRecordsPerTrigger=%d",
                     first, self.options.max_records_per_trigger)
        recovered_end = self._recovered_end()
        if start < recovered_end:
            # Rows a stopped run left in the log that Spark has not planned yet: offer
            # them before anything new (availableNowMaxRecords=0 takes nothing new, not
            # nothing: these batches take up to maxRecordsPerTrigger).
            self.cursor = min(start + (most or self.options.max_records_per_trigger),
                              recovered_end)
            return self.cursor
        if first == 0:
            return start  # this run's first batch may take nothing new
        intake = self.intake
        if intake is not None and start < intake.base + self._released:
            # Rows this run offered before and Spark asks for again: offer them again.
            self.cursor = min(start + most, intake.base + self._released)
            return self.cursor
        if intake is not None and intake.error is not None and start >= intake.end:
            raise intake.error
        if self.available_now_left == 0:
            return start  # the availableNow bound is reached: no batch, the query ends
        buffer, intake = self._subscribed(start, most if first is not None else None)
        if self._window_pending and first is None:
            # Spark asks for a second batch: the window is maxRecordsPerTrigger from now on,
            # with limit_demand(0) lifted in the same step (the intake's thread may be
            # releasing elements it left out meanwhile).
            self._window_pending = False
            buffer.reopen(self.options.max_records_per_trigger)
        if self.available_now_left is not None:
            most = min(most, self.available_now_left)
        if self.available_now_left is not None or first is not None:
            if not self._first_waited and buffer.buffered == 0:
                # A live publisher (a broker, a socket) may take longer than fillWaitMs to
                # connect and signal its first element; ending at fillWaitMs would make
                # every availableNow run read nothing. The first wait of a run lasts up to
                # subscribeTimeoutMs, for one element (or the end of the stream).
                buffer.wait(1, self.options.subscribe_timeout_ms / 1000, self._orphaned)
            self._first_waited = True
        self._fill(buffer, most)
        self._check_orphaned()
        try:
            intake.sync()  # the batch's rows are durable before Spark learns its end
        except Exception as error:
            where = (f"writing to the write-ahead log at {self.wal.location!r}"
                     if self.wal is not None else "converting the rows")
            raise RuntimeError(
                f"reactive source: {where} failed: {type(error).__name__}: {error}. The rows "
                "not yet written are lost with this run unless the publisher resumes or "
                "redelivers; free space or fix the location's permissions, then restart "
                "the query") from error
        taken = min(most, intake.end - start)
        if taken <= 0:
            self._check_subscribed(buffer)
            if intake.error is not None:
                raise intake.error
            if buffer.error is not None:
                raise _publisher_failed(self.options, buffer.error)
            return start
        self._released += taken
        if first is not None:
            # Without admission control this batch may be the whole availableNow run:
            # request nothing more until Spark asks for another (as 4.2+ would not).
            buffer.limit_demand(0)
        buffer.release(taken)
        self._cut_at, self._cut_received = time.monotonic(), buffer.received
        if self.available_now_left is not None:
            self.available_now_left -= taken
            if self.available_now_left == 0:
                log.info("reactive source: availableNow took the %d elements its bound "
                         "allows beyond those held when it started; this is its last "
                         "batch", self.options.available_now_max_records)
        self.cursor = start + taken
        return self.cursor

    def _fill(self, buffer: DemandBuffer, most: int) -> None:
        """Wait up to ``fillWaitMs`` for the batch to fill, only while waiting pays.

        With nothing buffered it waits for a first element. With rows already here it waits
        for ``most`` only when the publisher's rate since the last batch was cut would fill
        the batch within what is left of ``fillWaitMs``: a slow stream's rows then go at
        once instead of waiting for rows that cannot come in time (the wait would only add
        to their latency), while a fast one still gives full batches. Before the first
        batch the rate counts from the publisher's first element, and after a quiet spell
        from the element that ended it (with a short look at what follows), so neither a
        slow start nor a pause passes for a slow stream.
        """
        left = self.options.fill_wait_ms / 1000
        since, before = self._cut_at or 0.0, self._cut_received
        if before == 0 and buffer.first_at is not None:
            # No batch cut yet: the publisher's start (its factory, connecting, its first
            # element) is not its rate; count from its first element.
            since, before = buffer.first_at, buffer.first_rows
        if buffer.buffered == 0:
            began = time.monotonic()
            buffer.wait(1, left, self._orphaned)
            now = time.monotonic()
            left = max(0.0, left - (now - began))
            # What came after a quiet spell (or first of all): the spell is not the rate;
            # count from now, without what just came.
            since, before = now, buffer.received - buffer.buffered
        if buffer.buffered >= most or left <= 0:
            return
        look = min(left, FIRST_RATE_LOOK_S - (time.monotonic() - since))
        if look > 0:
            # Too soon after the start to tell a rate: look at what follows first.
            buffer.wait(most, look, self._orphaned)
            left -= look
        buffered = buffer.buffered
        if buffered >= most or left <= 0:
            return
        elapsed = time.monotonic() - since
        arrived = buffer.received - before
        if arrived <= 0 or (most - buffered) * elapsed / arrived > left:
            return
        buffer.wait(most, left, self._orphaned)

    def partitions(self, start: int, end: int) -> list[InputPartition]:
        with self._calling():
            return self._partitions(start, end)

    def _partitions(self, start: int, end: int) -> list[InputPartition]:
        self._planned = True
        # Spark 4.0/4.1 tell a restarted run where the stream stands only here.
        self.cursor = max(self.cursor or 0, end)
        if end <= start:
            return []
        if self.wal is not None and not self._claimed:
            # Spark records a batch's offsets in its checkpoint before it plans the
            # batch: from now on a checkpoint refers to this log (see starting_fresh).
            self.wal.claim(start)
            self._claimed = True
        table = self._rows(start, end)
        if table is None and self.wal is not None:
            raise RuntimeError(
                f"reactive source: the write-ahead log at {self.wal.location!r} has no "
                f"rows for offsets [{start}, {end}): its entries were removed or belong to "
                "another query; restore them or start from a new checkpoint")
        if table is None:
            log.warning("reactive source: the rows for offsets [%d, %d) are gone (no "
                        "walLocation, or its entries were deleted); that batch is empty",
                        start, end)
            return []
        return _split(table, start, self.options.num_partitions)

    def prepare_available_now(self) -> None:
        """Fix the bound of an ``availableNow`` trigger, which starts now.

        The trigger takes what the publisher has signalled by now (rows the log holds are
        offered anyway) plus at most ``availableNowMaxRecords`` more, and requests no more
        than that: a publisher that honours demand signals nothing beyond the bound. Rows
        it signals beyond it all the same (demand that was outstanding already) are kept
        in the log like any others.
        """
        beyond = self.options.available_now_max_records
        buffer = self.buffer
        if buffer is None:  # the usual case: Spark calls this first; _subscribed limits
            self.available_now_left = beyond
        else:
            self.available_now_left = buffer.buffered + beyond
            buffer.limit_demand(max(0, beyond - buffer.outstanding))
        log.info("reactive source: availableNow takes at most %d elements beyond the %d "
                 "held now, then ends (availableNowMaxRecords), or sooner if the publisher "
                 "completes or pauses for %d ms (the first element: up to "
                 "subscribeTimeoutMs)", beyond,
                 buffer.buffered if buffer else 0, self.options.fill_wait_ms)

    def starting_fresh(self) -> None:
        """Refuse a write-ahead log that a checkpoint other than this query's refers to.

        Called when Spark shows that the query's checkpoint has recorded no batch. A log
        claimed by a checkpoint (see :meth:`WriteAheadLog.claim`) holds another query's
        stream; offering its rows, or cutting this stream into it, would mix the two. A
        log never claimed holds only rows that no checkpoint has planned (a query stopped
        before its first batch was recorded): this query takes them over, in order.

        One window is left: a run killed after Spark recorded a batch's offsets and before
        it planned the batch leaves a log its checkpoint refers to but has not claimed.
        """
        if self._fresh_checked or self.wal is None:
            return
        self._fresh_checked = True
        committed = self.wal.committed()
        if committed is None:
            if self.recovered:
                log.info("reactive source: taking over %d rows that a stopped run left in "
                         "the write-ahead log before any checkpoint planned them",
                         sum(s.end - s.start for s in self.recovered))
            return
        pending = sum(s.end - s.start for s in self.recovered)
        raise RuntimeError(
            f"reactive source: walLocation {self.wal.location!r} holds the "
            f"write-ahead log of another checkpoint (committed up to offset {committed}, "
            f"{pending} rows not yet committed), but this query starts from a checkpoint "
            "that has recorded no batch. A write-ahead log belongs to one checkpoint: give "
            "this query a walLocation of its own (for example beside its "
            "checkpointLocation), restart the other query with its own checkpoint, or "
            "delete that directory to start over (its uncommitted rows are then lost)")

    def commit(self, end: int) -> None:
        with self._calling():
            self.recovered = [s for s in self.recovered if s.end > end]
            if self.intake is not None:
                self.intake.committed(end)
            if self.wal is not None:
                self.wal.commit(end)

    def stop(self) -> None:
        # Spark sends SIGTERM and closes the runner's socket, whose end makes the runner
        # call stop(); a SIGTERM arriving during this shutdown must wait for it to finish
        # (its exit would cut short the logging of the rows held), then exit.
        with self._calling():
            self._shutdown()

    # -- rows ----------------------------------------------------------------------------

    def _recovered_end(self) -> int:
        return self.recovered[-1].end if self.recovered else 0

    def _check_tail(self, start: int) -> None:
        """Set aside damaged segments Spark was never told about (from ``start`` on).

        Segments of the log are renamed into place only once whole, so one that does not
        read holds no rows Spark learned of only if it lies beyond the batches Spark
        recorded. It is set aside with everything after it (offsets stay contiguous), with
        a warning. A damaged segment Spark was told about fails the batch that reads it.
        """
        if self._tail_checked or self.wal is None:
            return
        self._tail_checked = True
        for index, segment in enumerate(self.recovered):
            # The segment holding start too: Spark learned of its rows before start only,
            # which it has committed, or planned again already (then they were read).
            if segment.end <= start or segment.entry is None or (
                    segment.start < start and segment.table is not None):
                continue
            try:
                segment.table = self.wal.read(segment.entry)
            except WalDamaged as error:
                dropped = self.recovered[index:]
                self.recovered = self.recovered[:index]
                moved = [self.wal.set_aside(s.entry.name) for s in dropped if s.entry]
                log.warning("reactive source: %s. Spark was never told about its rows, so it "
                            "and the %d segments after it (offsets [%d, %d), %d rows) are set "
                            "aside: %s", error, len(dropped) - 1, dropped[0].start,
                            dropped[-1].end, dropped[-1].end - dropped[0].start,
                            ", ".join(moved))
                return

    def _rows(self, start: int, end: int) -> pa.Table | None:
        segments = list(self.recovered)
        if self.intake is not None:
            segments += self.intake.snapshot()
        pieces = []
        position = start
        while position < end:
            found = next((s for s in segments if s.start <= position < s.end), None)
            if found is None:
                return None
            if found.table is not None:
                rows = found.table
            else:
                assert self.wal is not None and found.entry is not None
                try:
                    rows = self.wal.read(found.entry)
                except WalDamaged as error:
                    raise RuntimeError(
                        f"reactive source: {error}. Spark planned a batch from these rows "
                        f"(offsets [{start}, {end})), so the query cannot go on without "
                        "them: restore the file, or start from a new checkpoint and "
                        "walLocation (its rows are then lost)") from error
                found.table = rows
            upto = min(end, found.end)
            pieces.append(rows.slice(position - found.start, upto - position))
            position = upto
        return pa.concat_tables(pieces)

    # -- the subscription ----------------------------------------------------------------

    def _subscribed(self, start: int, first_batch: int | None = None
                    ) -> tuple[DemandBuffer, Intake]:
        """The subscription, made on the first call; ``first_batch``: the demand window of
        a first batch sized by availableNowMaxRecords (Spark without admission control)."""
        if self.buffer is not None and self.intake is not None:
            return self.buffer, self.intake
        base = max(start, self._recovered_end())
        key = None
        if self.wal is not None and self.recovered and self.recovered[-1].entry is not None:
            key = self.wal.key(self.recovered[-1].entry)
        options = FactoryOptions(self.options.raw, ResumePoint(base, key), self.schema)
        factory = self.factory or resolve_factory(self.options.publisher)
        name = ("the factory given to read_stream()" if self.factory
                else f"the factory of publisher={self.options.publisher!r}")
        try:
            publisher = factory(options)
        except Exception as error:
            raise RuntimeError(f"reactive source: {name} raised {type(error).__name__}: "
                               f"{error}; no publisher, so no rows") from error
        if not callable(getattr(publisher, "subscribe", None)):
            raise TypeError(f"reactive source: {name} returned {type(publisher).__name__}, "
                            "not a Publisher (an object with subscribe(subscriber))")
        buffer = DemandBuffer(first_batch or self.options.max_records_per_trigger)
        self._window_pending = first_batch is not None
        if self.available_now_left is not None:
            buffer.limit_demand(self.available_now_left)
        self.buffer = buffer
        self._released = 0
        self.intake = Intake(buffer, self.converter, self.arrow_schema, self.wal, base,
                             sync_ms=self.options.wal_sync_ms,
                             sync_rows=self.options.wal_sync_rows,
                             publisher=publisher)
        log.info("reactive source: subscribing to %r from offset %d (%s)", publisher, base,
                 describe(self.options))
        self._subscribing_since = time.monotonic()
        # The rate of the first batch's wait counts from here.
        self._cut_at, self._cut_received = self._subscribing_since, 0
        buffer.start(publisher)
        return buffer, self.intake

    def _check_subscribed(self, buffer: DemandBuffer) -> None:
        if buffer.subscribed or self._subscribing_since is None:
            return
        waited = time.monotonic() - self._subscribing_since
        if waited * 1000 >= self.options.subscribe_timeout_ms:
            raise RuntimeError(
                f"reactive source: the publisher ({_name(self.options)}) did not call "
                f"on_subscribe within {waited:.1f} s of subscribe() (subscribeTimeoutMs="
                f"{self.options.subscribe_timeout_ms}); a Publisher must "
                "call on_subscribe first (§1.9)")

    def reported(self) -> int | None:
        """How far the publisher has got: the offset after the last element received.
        Elements left out (``badPayloads=skip``) take no offset, so they do not count."""
        if self.intake is None or self.buffer is None:
            return self.cursor
        return self.intake.base + self.buffer.received - self.intake.skipped

    def completed(self) -> bool:
        """Whether the publisher completed and every element it sent was taken."""
        return self.buffer is not None and self.buffer.completed

    def _orphaned(self) -> bool:
        return os.getppid() != self.parent

    def _check_orphaned(self) -> None:
        if self._orphaned():
            log.warning("reactive source: the JVM that started this runner is gone; stopping")
            self._shutdown_and_exit()

    # -- stopping ------------------------------------------------------------------------

    def _install_sigterm(self) -> None:
        # Spark ends the runner with SIGTERM rather than stop(). Only the main thread may
        # install handlers; the runner calls us there.
        try:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:
            log.debug("not on the main thread: no SIGTERM handler")

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self._terminating:
            return  # a repeated SIGTERM must not cut short the shutdown under way
        self._terminating = True
        if not self._busy:  # else the call under way finishes its batch, then exits
            self._shutdown_and_exit()

    def _shutdown(self) -> None:
        buffer, self.buffer = self.buffer, None
        intake = self.intake
        if buffer is None or intake is None:
            if self.wal is not None:
                self.wal.unlock()
            return
        buffer.cancel(timeout=1.0)
        # The log's thread stops first: it takes elements from the buffer too.
        intake.stop()
        left = buffer.drain()
        buffer.close()
        if self.wal is not None:
            # Rows the publisher signalled that Spark never saw: the log keeps them, and
            # the restarted query is offered them after those it already knows of.
            try:
                intake.finish(left)
            except Exception:
                log.exception("reactive source: could not keep %d buffered rows in the "
                              "write-ahead log at %s; they are lost", buffer.count(left),
                              self.wal.location)
            else:
                if left:
                    log.info("reactive source: kept %d buffered rows in the write-ahead log",
                             buffer.count(left))
            self.wal.unlock()
        else:
            lost = buffer.count(left) + intake.end - (intake.base + self._released)
            if lost:
                log.warning("reactive source: %d buffered rows are lost (no walLocation)",
                            lost)

    def _shutdown_and_exit(self) -> None:
        self._terminating = True
        self._shutdown()
        logging.shutdown()
        sys.stderr.flush()
        # Not sys.exit: a publisher thread blocked in its own code must not keep the
        # runner alive once the subscription is cancelled and the rows are safe.
        os._exit(0)


def _name(options: SourceOptions) -> str:
    return "read_stream()" if options.publisher == SHIPPED_FACTORY else options.publisher


def _publisher_failed(options: SourceOptions, error: BaseException) -> BaseException:
    """The error latestOffset raises for the publisher's ``on_error``: its message first.

    Spark shows the formatted traceback of what the runner raised, and Python formats an
    exception's causes before it: raised ``from error``, a library's traceback behind the
    publisher's error (25 lines of websockets and asyncio for a refused connection) would
    come before what happened. So the cause is not chained but follows the message, as
    text: the first line the user reads says what failed, the library's traceback comes
    after it.
    """
    message = (f"reactive source: the publisher ({_name(options)}) signalled on_error: "
               f"{type(error).__name__}: {error}")
    if error.__traceback__ is not None or error.__cause__ is not None or (
            error.__context__ is not None and not error.__suppress_context__):
        told = "".join(traceback.format_exception(error)).rstrip("\n")
        message += f"\n\nThe publisher's error, after its causes:\n{told}"
    failure = RuntimeError(message)
    failure.__suppress_context__ = True
    return failure


def _split(table: pa.Table, start: int, count: int | None) -> list[InputPartition]:
    rows = table.num_rows
    if count is None:
        count = max(1, math.ceil(table.nbytes / PARTITION_BYTES))
    count = max(1, min(count, rows))
    size = math.ceil(rows / count)
    partitions: list[InputPartition] = []
    for offset in range(0, rows, size):
        piece = table.slice(offset, size)
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, table.schema) as writer:
            for batch in piece.to_batches():
                writer.write_batch(batch)
        partitions.append(ArrowPartition(start + offset, piece.num_rows,
                                         sink.getvalue().to_pybytes()))
    return partitions


def read_stream(spark: Any, factory: Factory, schema: StructType | str | None = None,
                **options: Any) -> DataFrame:
    """A streaming DataFrame of the publisher that ``factory`` makes.

    The factory travels to Spark's source runner with the data source (pickled with
    cloudpickle), so a lambda or closure defined in a notebook works. It is called once
    per query run, in the runner, with the options as a mapping.

    Parameters
    ----------
    spark : SparkSession
    factory : callable
        ``factory(options) -> Publisher``; must be picklable by cloudpickle.
    schema : StructType or str, optional
        The rows' schema (a DDL string such as ``"id BIGINT, name STRING"`` works);
        default ``value STRING``.
    **options
        Any option of the ``reactive`` source except ``publisher``; values are turned
        into strings.

    Returns
    -------
    DataFrame
        A streaming DataFrame.

    Raises
    ------
    TypeError
        When ``factory`` is not callable or cannot be pickled.
    OptionError
        For an option whose value is not accepted.

    Examples
    --------
    >>> from reactive_streams import RangePublisher
    >>> df = read_stream(spark, lambda opts: RangePublisher(0, 10),  # doctest: +SKIP
    ...                  schema="value BIGINT", maxRecordsPerTrigger=5)
    """
    import uuid

    if not callable(factory):
        raise TypeError(f"read_stream: factory must be callable, got {type(factory).__name__}")
    text_options = {str(k): str(v) for k, v in options.items()}
    # Validate here too, so the error is a plain Python one raised in the caller's process.
    parse_source_options(text_options, shipped_factory=True)
    name = f"reactive_{uuid.uuid4().hex[:12]}"
    source = type(f"ReactiveSource_{name}", (DefaultSource,), {
        "_shipped_factory": staticmethod(factory),
        "name": classmethod(lambda cls: name),
        "__module__": __name__,
    })
    try:
        spark.dataSource.register(source)
    except Exception as error:
        if "pickl" in str(error).lower():
            raise TypeError(f"read_stream: the factory cannot be pickled for Spark's source "
                            f"runner: {error}") from error
        raise
    reader = spark.readStream.format(name).options(**text_options)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load()
