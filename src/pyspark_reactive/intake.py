"""What the source does with elements as they arrive: convert them to Arrow and, with a
write-ahead log, make them durable in group commits, before any micro-batch takes them.

A thread of the intake's own takes the elements waiting in the
:class:`~pyspark_reactive.demand_buffer.DemandBuffer` at most every ``walSyncMs``
milliseconds, or as soon as ``walSyncRows`` wait, converts them and appends them to the log
as one segment; a micro-batch syncs whatever is left before Spark learns its end. So a
hard kill loses at most what arrived within the last sync interval (and the sync under way),
and each row is written once. Without a log the same thread only converts.

Offsets: the first element of this subscription has offset ``base``, the next ``base + 1``
and so on. Elements that are ``pyarrow.RecordBatch`` es (the buffer's Arrow mode) are
conformed to the schema column by column (:mod:`pyspark_reactive.arrow_elements`), and
offsets count their rows. A publisher that implements ``position_key`` and ``on_durable`` (see
:mod:`pyspark_reactive.durability`) hears about the rows made durable here.
"""

from __future__ import annotations

import logging
import threading
import time
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
from .rows import RowConversionError, RowConverter
from .wal import WalEntry, WriteAheadLog

__all__ = ["Intake", "Segment"]

log = logging.getLogger("pyspark_reactive.source")


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
        # Elements taken from the buffer whose group commit failed: retried first, and no
        # later element gets an offset before them.
        self._pending: list[Any] = []
        self._position_key: Callable[[Any], Any] | None = getattr(
            publisher, "position_key", None)
        self._on_durable: Callable[[int], Any] | None = getattr(publisher, "on_durable", None)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._nudge = buffer.nudge_when(sync_rows)
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
            if elements:
                pending += elements
            if not pending:
                return
            if self.error is not None:
                log.warning("reactive source: %d elements after the one that did not fit "
                            "(offset %d) are not kept", len(pending), self.error.offset)
                self._pending = []
                return
            self._append(pending)
            self._pending = []
        finally:
            self._lock.release()

    def _convert(self, elements: list[Any], start: int
                 ) -> tuple[pa.Table, int, RowConversionError | ArrowElementError | None]:
        """The rows of the longest good prefix of ``elements``, how many elements that is,
        and the error for the element after it."""
        if self.buffer.arrow:
            batches, arrow_error = self.arrow.convert(elements, start)
            return pa.Table.from_batches(batches, schema=self.schema), len(batches), arrow_error
        if self._first is None:
            self._first = elements[0]
        mixed = first_record_batch(elements)
        if mixed == 0:
            return (self.schema.empty_table(), 0,
                    record_batch_among_rows(start, self._first))
        batch, error = self.converter.convert(
            elements if mixed is None else elements[:mixed], start)
        if error is None and mixed is not None:
            return (pa.Table.from_batches([batch], schema=self.schema), mixed,
                    record_batch_among_rows(start + mixed, self._first))
        return pa.Table.from_batches([batch], schema=self.schema), batch.num_rows, error

    def _append(self, elements: list[Any]) -> None:
        start = self.end
        table, good, error = self._convert(elements, start)
        if error is not None:
            # The rows before the bad element stay; the error fails the query once a batch
            # reaches it (recorded once they are written: a failed write retries them).
            dropped = len(elements) - good - 1
            if dropped:
                log.warning("reactive source: the query fails at offset %d; the %d elements "
                            "after it in the same group are not kept", error.offset, dropped)
        if table.num_rows == 0:
            # Nothing to write: a bad first element, or RecordBatches with no rows.
            if error is not None:
                self.error = error
            return
        end = start + table.num_rows
        if self.wal is not None:
            key = self._key(elements[good - 1])
            entry = WalEntry(start, end)
            self.wal.write(entry, table.to_batches(), self.schema, key)
        self.segments.append(Segment(start, end, table))
        self.synced += table.num_rows
        if self.wal is not None:
            self._durable = self.synced
        if error is not None:
            self.error = error

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
            self.segments = [s for s in self.segments if s.end > end]
            if self.wal is None:
                self._durable = max(self._durable, min(self.synced, end - self.base))
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
