"""What the source does with elements as they arrive: convert them to Arrow and, with a
write-ahead log, make them durable in group commits, before any micro-batch takes them.

A thread of the intake's own takes the elements waiting in the
:class:`~pyspark_reactive.source.demand_buffer.DemandBuffer` at most every ``walSyncMs``
milliseconds, or as soon as ``walSyncRows`` wait, converts them and appends them to the log
as one segment; a micro-batch syncs whatever is left before Spark learns its end. So a
hard kill loses at most what arrived within the last sync interval (and the sync under way),
and each row is written once. Without a log the same thread only converts.

Offsets: the first element of this subscription has offset ``base``, the next ``base + 1``
and so on. Elements that are ``pyarrow.RecordBatch`` es (the buffer's Arrow mode) are
conformed to the schema column by column (:mod:`pyspark_reactive.source.arrow_elements`), and
offsets count their rows. A publisher that implements ``position_key`` and ``on_durable`` (see
:mod:`pyspark_reactive.source.durability`) hears about the rows made durable here.

**Elements that cannot become rows.** By default the first element that does not fit the
schema (or a :class:`~pyspark_reactive.source.rows.Undecodable` one) fails the query at its
offset, once the rows before it are taken. A publisher whose attribute
``skip_unfit_elements`` is true (the built-in ``mqtt`` with ``badPayloads=skip``) asks
for such elements to be left out instead: they get no offset (the next row takes the
offset they would have had), their demand is released at once, they count as durable
with the rows around them (so ``on_durable`` acknowledges them in their turn), and the
source logs, once per batch, how many it left out and why for the first few. Chunks
convert column-wise as usual; only a chunk with a bad element is looked at in smaller
pieces, so a stream of bad elements costs a few conversions of 64 elements each.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .arrow_elements import (
    ArrowElementError,
    ArrowElements,
    first_record_batch,
    record_batch_among_rows,
)
from .demand_buffer import DemandBuffer
from .redeliveries import IDENTITIES_METADATA, IDENTITY_WINDOW, RECENT_IDENTITIES
from .rows import RowConversionError, RowConverter
from .wal import WalEntry, WriteAheadLog

__all__ = ["Intake", "Segment"]

log = logging.getLogger("pyspark_reactive.source")

#: Elements converted at once right after one that did not fit (doubled while they fit).
_SKIP_CHUNK = 64
#: Elements left out that the per-batch log line describes.
_SHOWN_LEFT_OUT = 3


@dataclass
class Segment:
    """Rows for offsets ``start`` to ``end``: in memory (``table``) or in the log."""

    start: int
    end: int
    table: pa.Table | None = None
    entry: WalEntry | None = None


class Intake:
    """Converts (and logs) a subscription's elements as they arrive.

    Parameters
    ----------
    buffer : DemandBuffer
        The subscription's buffer; elements are taken with ``hold()``.
    converter : RowConverter
    schema : pyarrow.Schema
    wal : WriteAheadLog or None
    base : int
        The offset of this subscription's first element.
    sync_ms, sync_rows : int
        Group commit bounds: at most ``sync_ms`` between syncs while elements wait, and
        a sync as soon as ``sync_rows`` wait.
    publisher : object
        The publisher, asked for ``position_key`` and told ``on_durable`` when it has them.
    """

    def __init__(self, buffer: DemandBuffer, converter: RowConverter, schema: pa.Schema,
                 wal: WriteAheadLog | None, base: int, *, sync_ms: int, sync_rows: int,
                 publisher: Any) -> None:
        self.buffer = buffer
        self.converter = converter
        self.schema = schema
        self.wal = wal
        self.base = base
        self.sync_s = sync_ms / 1000
        self.synced = 0  # elements of this subscription converted (and logged)
        self.segments: list[Segment] = []  # this run's, uncommitted, in offset order
        # The element that did not fit (or was of the other kind than the stream's).
        self.error: RowConversionError | ArrowElementError | None = None
        self.arrow = ArrowElements(schema, getattr(publisher, "arrow_batches", False) is True)
        self._first: Any = None  # the stream's first row element, for messages
        self.acknowledged = 0  # what on_durable was last told
        self._durable = 0  # elements of this subscription durable, for on_durable
        # Elements that cannot become rows are left out, not failing the query.
        self.skip_unfit = getattr(publisher, "skip_unfit_elements", False) is True
        self._publisher = publisher
        self.consumed = 0  # elements of this subscription converted (or left out)
        self.skipped = 0  # elements left out in all
        self._unreported = 0  # left out since the last log line
        self._first_unreported: list[RowConversionError] = []
        # Without a log: (offset after a group commit's rows, elements consumed by then),
        # for on_durable once Spark commits that far; the latest one it committed.
        self._marks: deque[tuple[int, int]] = deque()
        self._last_mark = (base, 0)
        self._committed = base
        # Elements taken from the buffer whose group commit failed: retried first, and no
        # later element gets an offset before them.
        self._pending: list[Any] = []
        self._position_key: Callable[[Any], Any] | None = getattr(
            publisher, "position_key", None)
        self._on_durable: Callable[[int], Any] | None = getattr(publisher, "on_durable", None)
        # With a log, an acknowledging publisher's message identities are kept with the rows
        # (see pyspark_reactive.source.redeliveries): the newest ones, for the file a
        # commit writes.
        self._identity: Callable[[Any], Any] | None = (
            getattr(publisher, "identity", None)
            if wal is not None and self._on_durable is not None else None)
        self._recent: deque[str] = deque(maxlen=IDENTITY_WINDOW)
        self._recent_changed = False
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._nudge = buffer.nudge_when(sync_rows)
        # pyarrow imports pandas on its first conversion from Python objects (0.3 s on a
        # quiet machine, over 1.3 s on a loaded one): paid here, before the subscription,
        # so the first group commit is as prompt as the others.
        pa.array([], type=pa.int64())
        self._thread = threading.Thread(target=self._run, name="reactive-source-wal",
                                        daemon=True)
        self._thread.start()

    @property
    def end(self) -> int:
        """The offset after the last converted (and, with a log, durable) element."""
        return self.base + self.synced

    # -- syncing -------------------------------------------------------------------------

    def _run(self) -> None:
        next_sync = time.monotonic() + self.sync_s
        while not self._stopping.is_set():
            self._nudge.wait(max(0.0, next_sync - time.monotonic()))
            self._nudge.clear()
            next_sync = time.monotonic() + self.sync_s
            if self._stopping.is_set():
                break
            try:
                self.sync()
            except Exception:
                # The rows stay pending and are retried at the next sync; the next batch
                # syncs on the runner's main thread, where a failure fails the query.
                log.exception("reactive source: a group commit to the write-ahead log failed; "
                              "its %d rows are kept in memory and retried",
                              len(self._pending))
                self._stopping.wait(self.sync_s)
            self._tell_durable()

    def sync(self, elements: list[Any] | None = None, timeout: float = -1) -> None:
        """Convert (and log) the elements waiting in the buffer, then ``elements``.

        Elements of a group commit that failed are kept and written first next time; the
        failure is raised. ``timeout`` bounds the wait for a group commit under way on the
        log's thread (-1: no bound); past it, nothing is written and a ``TimeoutError``
        is raised.
        """
        if not self._lock.acquire(timeout=timeout):
            raise TimeoutError(f"the write-ahead log's thread has been writing for more than "
                               f"{timeout:.0f} s")
        try:
            pending = self._pending
            pending += self.buffer.hold()
            # Those held here still hold demand (drain() released the others).
            held = len(pending)
            if elements:
                pending += elements
            if pending and self.error is not None:
                log.warning("reactive source: %d elements after the one that did not fit "
                            "(offset %d) are not kept", len(pending), self.error.offset)
                self._pending = []
            elif pending:
                self._append(pending, held)
                self._pending = []
            if threading.current_thread() is not self._thread:
                self._report_left_out()  # once per batch: Spark's calls come here
        finally:
            self._lock.release()

    def _convert(self, elements: list[Any], start: int
                 ) -> tuple[pa.Table, int, RowConversionError | ArrowElementError | None,
                            list[tuple[int, RowConversionError]]]:
        """The rows of the longest good prefix of ``elements``, how many elements that is
        (left-out ones included), the error for the element after it, and the elements
        left out (index, why)."""
        if self.buffer.arrow:
            batches, arrow_error = self.arrow.convert(elements, start)
            return (pa.Table.from_batches(batches, schema=self.schema), len(batches),
                    arrow_error, [])
        if self._first is None:
            self._first = elements[0]
        mixed = first_record_batch(elements)
        if mixed == 0:
            return (self.schema.empty_table(), 0,
                    record_batch_among_rows(start, self._first), [])
        rows = elements if mixed is None else elements[:mixed]
        batch, error = self.converter.convert(rows, start)
        left_out: list[tuple[int, RowConversionError]] = []
        batches = [batch]
        good = batch.num_rows
        if error is not None and self.skip_unfit:
            good = self._skip_unfit(rows, start, batches, left_out, error)
            error = None
        table = pa.Table.from_batches(batches, schema=self.schema)
        if error is None and mixed is not None:
            return table, mixed, record_batch_among_rows(start + table.num_rows,
                                                         self._first), left_out
        return table, good, error, left_out

    def _skip_unfit(self, elements: list[Any], start: int, batches: list[pa.RecordBatch],
                    left_out: list[tuple[int, RowConversionError]],
                    error: RowConversionError) -> int:
        """Convert the rest of ``elements`` leaving out those that do not fit, from the
        first bad one (``error``; ``batches`` holds the rows before it); return how many
        elements that consumed: all of them.

        After a bad element the rest goes in chunks of _SKIP_CHUNK, doubled while they
        fit: a bad element costs a conversion of at most one chunk, not of the rest.
        """
        rows = sum(batch.num_rows for batch in batches)
        position = rows  # the index of the element that did not fit
        while True:
            # It never gets an offset: the next row takes the one it would have had.
            left_out.append((position, error))
            position += 1
            chunk = _SKIP_CHUNK
            next_error: RowConversionError | None = None
            while position < len(elements):
                batch, next_error = self.converter.convert(
                    elements[position:position + chunk], start + rows)
                batches.append(batch)
                rows += batch.num_rows
                position += batch.num_rows
                if next_error is not None:
                    break
                chunk *= 2
            if next_error is None:
                return len(elements)
            error = next_error

    def _append(self, elements: list[Any], held: int | None = None) -> None:
        """Convert (and log) ``elements``; the first ``held`` of them (default: all) still
        hold demand in the buffer, released here for those left out."""
        start = self.end
        table, good, error, left_out = self._convert(elements, start)
        if error is not None:
            # The rows before the bad element stay; the error fails the query once a batch
            # reaches it (recorded once they are written: a failed write retries them).
            dropped = len(elements) - good - 1
            if dropped:
                log.warning("reactive source: the query fails at offset %d; the %d elements "
                            "after it in the same group are not kept", error.offset, dropped)
        # on_durable counts elements, left-out ones included (in Arrow mode: rows).
        consumed = self.consumed + (table.num_rows if self.buffer.arrow else good)
        if table.num_rows == 0:
            # Nothing to write: a bad first element, RecordBatches with no rows, or
            # elements that were all left out.
            if error is not None:
                self.error = error
            self._consumed(start, consumed, left_out, held)
            return
        end = start + table.num_rows
        if self.wal is not None:
            key = self._key(elements[good - 1])
            entry = WalEntry(start, end)
            schema = self.schema
            identities = self._identities(elements[:good])
            if identities:
                schema = schema.with_metadata({**(schema.metadata or {}),
                                               IDENTITIES_METADATA: json.dumps(identities)})
            self.wal.write(entry, table.to_batches(), schema, key)
            if identities:
                self._recent.extend(identities)
                self._recent_changed = True
        self.segments.append(Segment(start, end, table))
        self.synced += table.num_rows
        self._consumed(end, consumed, left_out, held)
        if error is not None:
            self.error = error

    def _consumed(self, end: int, consumed: int, left_out: list[tuple[int, RowConversionError]],
                  held: int | None) -> None:
        """Under the lock, once the rows up to offset ``end`` are kept: ``consumed``
        elements are converted or left out; note and release those left out."""
        if consumed == self.consumed:
            return
        self.consumed = consumed
        if self.wal is not None:
            self._durable = consumed  # everything before is in the log
        elif end <= self._committed:
            # Left out after Spark committed every row before them: nothing to wait for.
            self._durable = max(self._durable, consumed)
            self._last_mark = (end, consumed)
        else:
            self._marks.append((end, consumed))
        if not left_out:
            return
        self.skipped += len(left_out)
        self._unreported += len(left_out)
        room = _SHOWN_LEFT_OUT - len(self._first_unreported)
        self._first_unreported += [error for _, error in left_out[:max(0, room)]]
        # Their demand goes back at once (no batch takes them); not for elements drained
        # at the end, whose demand drain() released.
        release = len(left_out) if held is None else sum(
            1 for index, _ in left_out if index < held)
        if release:
            self.buffer.release(release)

    def _report_left_out(self) -> None:
        """Under the lock: log the elements left out since the last line (one line a
        batch, not one an element: a stream of bad elements must not flood the log)."""
        if not self._unreported:
            return
        first = "; ".join(str(error) for error in self._first_unreported)
        log.warning("reactive source: left out %d element%s that cannot become rows (%d in "
                    "all since the query run started), as %r asks (badPayloads=skip); a left "
                    "out element takes no offset, it is acknowledged with the rows around it. "
                    "The first: %s", self._unreported, "" if self._unreported == 1 else "s",
                    self.skipped, self._publisher, first)
        self._unreported = 0
        self._first_unreported = []

    def _identities(self, elements: list[Any]) -> list[str]:
        """The identities of ``elements`` that have one (none in Arrow mode)."""
        identity = self._identity
        if identity is None or self.buffer.arrow:
            return []
        found = []
        for element in elements:
            try:
                value = identity(element)
            except Exception:
                log.exception("reactive source: the publisher's identity() raised; none kept")
                continue
            if value is not None:
                found.append(str(value))
        return found

    def remember(self, identities: list[str]) -> None:
        """Identities the log held when this run subscribed, oldest first (the newest of
        those committed before, then its segments'): the newest of them are kept in the
        file the next commit writes."""
        if self._identity is None or not identities:
            return
        with self._lock:
            self._recent.extend(identities)  # before this run's: at most the newest stay
            self._recent_changed = True

    def _key(self, element: Any) -> str | None:
        if self._position_key is None:
            return None
        try:
            key = self._position_key(element)
        except Exception:
            log.exception("reactive source: the publisher's position_key raised; no key kept")
            return None
        return None if key is None else str(key)

    def _tell_durable(self) -> None:
        # On the log's thread (or once more after it stopped), never under the lock: an
        # acknowledgement upstream may take its time without holding up a batch.
        count = self._durable
        if self._on_durable is None or count <= self.acknowledged:
            return
        self.acknowledged = count
        try:
            self._on_durable(count)
        except Exception:
            log.exception("reactive source: the publisher's on_durable(%d) raised", count)

    # -- Spark's side --------------------------------------------------------------------

    def snapshot(self) -> list[Segment]:
        """This run's uncommitted segments, in offset order."""
        with self._lock:
            return list(self.segments)

    def committed(self, end: int) -> None:
        """Spark committed up to ``end``: drop those rows; without a log they are durable."""
        with self._lock:
            if self._identity is not None and self._recent_changed and self.wal is not None:
                # Before the log deletes the committed segments, whose identities these are.
                self.wal.put(RECENT_IDENTITIES, json.dumps(list(self._recent)).encode())
                self._recent_changed = False
            self.segments = [s for s in self.segments if s.end > end]
            if self.wal is None:
                self._committed = max(self._committed, end)
                marks = self._marks
                while marks and marks[0][0] <= end:
                    self._last_mark = marks.popleft()
                at, count = self._last_mark
                # Partway into the next group: as many elements as rows at least (one
                # left out among them waits for the rest of its group).
                upto = marks[0][1] if marks else self.consumed
                self._durable = max(self._durable, min(count + end - at, upto))
        self._nudge.set()  # the log's thread tells the publisher

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the log's thread (what waits in the buffer stays there)."""
        self._stopping.set()
        self._nudge.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def finish(self, elements: list[Any], timeout: float = 5.0) -> None:
        """Log what is left once the log's thread has stopped, and say so to the publisher."""
        self.sync(elements, timeout=timeout)
        if not self._thread.is_alive():
            self._tell_durable()
