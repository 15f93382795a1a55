"""The write-ahead log as one query run of the source uses it.

A run locks the log (a restarted run waits for the stopped one to finish writing), takes
over the rows a stopped run left there (:attr:`RunLog.recovered`, offered before anything
new), refuses a log that another checkpoint refers to, sets aside damaged segments that
Spark was never told about, claims the log for its checkpoint when Spark plans a batch,
reads a planned batch's rows, and deletes what Spark committed. Without ``walLocation``
there is no log: the run warns once, and rows Spark has not processed are lost with it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pyarrow as pa

from .intake import Segment
from .options import SourceOptions, describe
from .wal import WalDamaged, WriteAheadLog

__all__ = ["WAL_LOCK_TIMEOUT_S", "RunLog"]

log = logging.getLogger("pyspark_reactive.source")

# How long a restarted run waits for the stopped one to release the write-ahead log.
WAL_LOCK_TIMEOUT_S = 30.0


class RunLog:
    """The run's write-ahead log (``wal``, None without ``walLocation``) and the rows a
    stopped run left in it that this run has not committed yet (``recovered``)."""

    def __init__(self, options: SourceOptions) -> None:
        self._fresh_checked = False
        self._tail_checked = False
        self._claimed = False
        self.wal: WriteAheadLog | None = None
        if options.wal_location is not None:
            self.wal = WriteAheadLog(options.wal_location,
                                     owner_check=options.wal_owner_check)
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

    def recovered_end(self) -> int:
        """The offset after the rows a stopped run left (0 when it left none)."""
        return self.recovered[-1].end if self.recovered else 0

    def resume_key(self) -> str | None:
        """The position key of the last element a stopped run left, for the publisher's
        :class:`~pyspark_reactive.source.durability.ResumePoint`."""
        if self.wal is not None and self.recovered and self.recovered[-1].entry is not None:
            return self.wal.key(self.recovered[-1].entry)
        return None

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

    def check_tail(self, start: int) -> None:
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

    def planned(self, start: int, end: int, live: Sequence[Segment]) -> pa.Table | None:
        """The rows of the batch Spark plans for offsets ``[start, end)``, from what a
        stopped run left and this run's ``live`` segments; None, with a warning, where
        there is no log and the rows are gone.

        The first plan claims the log for the query's checkpoint: Spark records a batch's
        offsets in its checkpoint before it plans the batch, so from now on a checkpoint
        refers to this log (see :meth:`starting_fresh`).
        """
        if self.wal is not None and not self._claimed:
            self.wal.claim(start)
            self._claimed = True
        table = self._rows(start, end, [*self.recovered, *live])
        if table is None and self.wal is not None:
            raise RuntimeError(
                f"reactive source: the write-ahead log at {self.wal.location!r} has no "
                f"rows for offsets [{start}, {end}): its entries were removed or belong to "
                "another query; restore them or start from a new checkpoint")
        if table is None:
            log.warning("reactive source: the rows for offsets [%d, %d) are gone (no "
                        "walLocation, or its entries were deleted); that batch is empty",
                        start, end)
        return table

    def _rows(self, start: int, end: int, segments: Sequence[Segment]) -> pa.Table | None:
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

    def commit(self, end: int) -> None:
        """Spark committed up to ``end``: forget those rows, and delete them from the log."""
        self.recovered = [s for s in self.recovered if s.end > end]
        if self.wal is not None:
            self.wal.commit(end)

    def release(self) -> None:
        """Let the next run have the log (see :meth:`WriteAheadLog.lock`)."""
        if self.wal is not None:
            self.wal.unlock()
