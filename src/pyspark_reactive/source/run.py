"""One query run of the source in Spark's runner: what Spark's calls do with the parts.

:class:`QueryRun` is made on the first call that needs it (the reader's ``_live()``) and
holds the run's parts: the write-ahead log as this run uses it
(:class:`~pyspark_reactive.source.run_log.RunLog`), the subscription, made on the first
``latestOffset`` (:class:`~pyspark_reactive.source.upstream.Upstream`), each batch's bound
and its wait to fill (:class:`~pyspark_reactive.source.admission.BatchBound`,
:class:`~pyspark_reactive.source.admission.FillWait`), and how the run ends
(:class:`~pyspark_reactive.source.termination.Termination`). ``latestOffset`` offers first
what a stopped run left in the log, then what this run offered before and Spark asks for
again, then cuts a new batch from the buffer, durable before Spark learns its end.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from .._testing.faults import crash_point
from .admission import ADMISSION_CONTROL, BatchBound, FillWait, rows_owed
from .demand_buffer import DemandBuffer
from .durability import ResumePoint
from .options import SourceOptions
from .partitions import split
from .redeliveries import RedeliveryFilter, remembered_identities
from .rows import RowConverter, arrow_schema
from .run_log import RunLog
from .termination import Termination
from .upstream import Factory, Upstream, make_publisher

__all__ = ["QueryRun"]

log = logging.getLogger("pyspark_reactive.source")


class QueryRun:
    """Everything one query run holds in the runner, and Spark's calls on it. Offsets are
    counts of elements since the stream began."""

    def __init__(self, options: SourceOptions, schema: StructType,
                 factory: Factory | None) -> None:
        self.options = options
        self.schema = schema
        self.converter = RowConverter(schema)
        self.arrow_schema = arrow_schema(schema)
        self.factory = factory
        # The parent process is the runner's now, before any wait for the log's lock.
        self.termination = Termination(self._shutdown)
        self.log = RunLog(options)
        self.bound = BatchBound(options)
        self.fill = FillWait(options, self.termination.orphaned)
        self.upstream: Upstream | None = None
        self.cursor: int | None = None  # where the next batch starts (Spark 4.0/4.1)
        self._planned = False  # partitions() called in this run
        self.termination.install()

    # -- Spark's calls -------------------------------------------------------------------

    def latest(self, start: int | None, limit: Any) -> int:
        with self.termination.calling():
            end = self._latest(start, limit)
            crash_point("latest")
            return end

    def _latest(self, start: int | None, limit: Any) -> int:
        if not self._planned and (start == 0 or (start is None and self.cursor is None)):
            # A restarted query first plans again the batch its checkpoint recorded
            # (partitions()); one asked for a batch from the stream's beginning before
            # that starts from a checkpoint that has recorded no batch. (Spark 4.0/4.1
            # pass no start and call this before initialOffset().)
            self.log.starting_fresh()
        if start is None:  # Spark 4.0/4.1
            # No cursor: nothing planned yet in this run, so the checkpoint recorded no
            # batch (starting_fresh() refused a log another checkpoint holds): offset 0.
            start = 0 if self.cursor is None else self.cursor
        self.cursor = start
        self.log.check_tail(start)
        most, first = self.bound.most(limit)
        recovered_end = self.log.recovered_end()
        if start < recovered_end:
            # Rows a stopped run left in the log that Spark has not planned yet: offer
            # them before anything new (availableNowMaxRecords=0 takes nothing new, not
            # nothing: these batches take up to maxRecordsPerTrigger).
            self.cursor = min(start + (most or self.options.max_records_per_trigger),
                              recovered_end)
            return self.cursor
        if first == 0:
            return start  # this run's first batch may take nothing new
        upstream = self.upstream
        if upstream is not None and start < upstream.released_end:
            # Rows this run offered before and Spark asks for again: offer them again.
            self.cursor = min(start + most, upstream.released_end)
            return self.cursor
        if upstream is not None and upstream.intake.error is not None and (
                start >= upstream.intake.end):
            raise upstream.intake.error
        if self.bound.available_now_left == 0:
            return start  # the availableNow bound is reached: no batch, the query ends
        upstream = self._subscribed(start, most if first is not None else None)
        buffer, intake = upstream.buffer, upstream.intake
        if self.bound.window_pending and first is None:
            # Spark asks for a second batch: the window is maxRecordsPerTrigger from now on,
            # with limit_demand(0) lifted in the same step (the intake's thread may be
            # releasing elements it left out meanwhile).
            self.bound.window_pending = False
            buffer.reopen(self.options.max_records_per_trigger)
        if self.bound.available_now_left is not None:
            most = min(most, self.bound.available_now_left)
        if self.bound.available_now_left is not None or first is not None:
            self.fill.wait_for_first(buffer)
        # Without admission control (Spark 4.0/4.1) Spark runs availableNow as one
        # micro-batch and cannot tell the source: the first batch a run cuts from its
        # subscription may be the whole run, and without a log rows still requested when
        # it is cut would be signalled to a run that has ended, and lost.
        whole_run = (not ADMISSION_CONTROL and upstream.released == 0
                     and self.log.wal is None)
        if first is not None and self.log.wal is None:
            # The run's bound, given explicitly, with no log to keep late rows: the batch
            # takes every row it requested (once a first one came), or the run fails.
            if buffer.buffered and not self.fill.wait_all(buffer, most,
                                                          self.termination.ending):
                raise rows_owed(self.options, most, buffer)
        else:
            self.fill.wait(buffer, most)
        self.termination.check_orphaned()
        try:
            intake.sync()  # the batch's rows are durable before Spark learns its end
        except Exception as error:
            where = (f"writing to the write-ahead log at {self.log.wal.location!r}"
                     if self.log.wal is not None else "converting the rows")
            raise RuntimeError(
                f"reactive source: {where} failed: {type(error).__name__}: {error}. The rows "
                "not yet written are lost with this run unless the publisher resumes or "
                "redelivers; free space or fix the location's permissions, then restart "
                "the query") from error
        taken = min(most, intake.end - start)
        if taken <= 0:
            upstream.check_subscribed()
            if intake.error is not None:
                raise intake.error
            failure = upstream.failure()
            if failure is not None:
                raise failure
            return start
        upstream.released += taken
        if first is not None or whole_run:
            # This batch may be the whole availableNow run: request nothing more until
            # Spark asks for another (as 4.2+ would not), when the window opens again.
            # (With a log and no explicit bound the refill goes on: the log keeps it.)
            buffer.limit_demand(0)
            self.bound.window_pending = True
            if first is None and buffer.outstanding:
                log.warning(
                    "reactive source: this Spark runs an availableNow trigger over a Python "
                    "source as one micro-batch and cannot tell the source which trigger "
                    "runs; this query run's first batch was cut after fillWaitMs with rows "
                    "still requested from the publisher. If the trigger is availableNow, "
                    "rows the publisher signals for them after the run ends are lost "
                    "(no walLocation; the runner logs how many as it stops): give "
                    "availableNowMaxRecords, whose batch takes every row it requests, or "
                    "walLocation, which keeps them for the next run")
        buffer.release(taken)
        self.fill.cut(buffer)
        self.bound.took(taken)
        self.cursor = start + taken
        return self.cursor

    def partitions(self, start: int, end: int) -> list[InputPartition]:
        with self.termination.calling():
            self._planned = True
            # Spark 4.0/4.1 tell a restarted run where the stream stands only here.
            self.cursor = max(self.cursor or 0, end)
            if end <= start:
                return []
            live = self.upstream.intake.snapshot() if self.upstream is not None else []
            table = self.log.planned(start, end, live)
            if table is None:
                return []
            return split(table, start, self.options.num_partitions)

    def prepare_available_now(self) -> None:
        """An ``availableNow`` trigger starts now: fix its bound (see
        :meth:`BatchBound.prepare_available_now`)."""
        self.bound.prepare_available_now(
            self.upstream.buffer if self.upstream is not None else None)

    def commit(self, end: int) -> None:
        with self.termination.calling():
            if self.upstream is not None:
                self.upstream.intake.committed(end)
            self.log.commit(end)

    def stop(self) -> None:
        # Spark sends SIGTERM and closes the runner's socket, whose end makes the runner
        # call stop(); a SIGTERM arriving during this shutdown must wait for it to finish
        # (its exit would cut short the logging of the rows held), then exit.
        with self.termination.calling():
            self._shutdown()

    # -- the subscription ----------------------------------------------------------------

    def _subscribed(self, start: int, first_batch: int | None = None) -> Upstream:
        """The subscription, made on the first call; ``first_batch``: the demand window of
        a first batch sized by availableNowMaxRecords (Spark without admission control)."""
        if self.upstream is not None:
            return self.upstream
        base = max(start, self.log.recovered_end())
        publisher = make_publisher(self.options, self.schema, self.factory,
                                   ResumePoint(base, self.log.resume_key()))
        wal = self.log.wal
        remembered: list[str] = []
        if (wal is not None and callable(getattr(publisher, "identity", None))
                and callable(getattr(publisher, "on_durable", None))
                and getattr(publisher, "arrow_batches", False) is not True):
            # Messages the log holds that the broker sends again: dropped. (Arrow mode
            # counts rows, not messages: no identities there.)
            remembered = remembered_identities(wal)
            publisher = RedeliveryFilter(publisher, remembered)
        buffer = DemandBuffer(first_batch or self.options.max_records_per_trigger)
        self.bound.subscribed(buffer, first_batch)
        upstream = self.upstream = Upstream(self.options, publisher, buffer, self.converter,
                                            self.arrow_schema, self.log.wal, base)
        # Kept on in the file the next commit writes: the previous run's segments that
        # this run's commits delete keep their identities there.
        upstream.intake.remember(remembered)
        # The rate of the first batch's wait counts from the subscription.
        self.fill.subscribed(upstream.start())
        return upstream

    def reported(self) -> int | None:
        """How far the publisher has got: the offset after the last element received
        (where this run stands, before it subscribes)."""
        if self.upstream is None:
            return self.cursor
        return self.upstream.reported()

    def completed(self) -> bool:
        """Whether the publisher completed and every element it sent was taken."""
        return self.upstream is not None and self.upstream.buffer.completed

    # -- stopping ------------------------------------------------------------------------

    def _shutdown(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.stop()
        self.log.release()
