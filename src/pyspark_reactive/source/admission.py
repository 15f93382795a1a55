"""How much a micro-batch of the ``reactive`` source takes, and how long it waits to fill.

Spark 4.2+ has admission control for Python streaming sources
(``pyspark.sql.streaming.datasource``): ``latestOffset(start, limit)`` with a read limit, and
``SupportsTriggerAvailableNow``. Spark 4.0/4.1 have neither; the stand-ins here keep the
reader's bases the same on every line. :data:`ADMISSION_CONTROL` says which this pyspark is.
:class:`BatchBound` gives each batch its bound (``maxRecordsPerTrigger``, Spark's read
limit, the ``availableNow`` bound, ``availableNowMaxRecords`` for a first batch where Spark
has no admission control), and :class:`FillWait` how long it waits for the publisher
(``fillWaitMs``, judged by the publisher's rate; where that first batch is a whole run with
no write-ahead log, every row it requested, ``fillTimeoutMs``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from .demand_buffer import DemandBuffer
from .options import SourceOptions

__all__ = ["ADMISSION_CONTROL", "FIRST_RATE_LOOK_S", "QUIET_LOOK_S", "BatchBound", "FillWait",
           "ReadAllAvailable", "ReadMaxRows", "SupportsTriggerAvailableNow", "rows_owed"]

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources.
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.0/4.1: latestOffset() is called with no arguments.
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in so the reader's bases are the same on every Spark version."""

#: Whether this pyspark has admission control for Python streaming sources
#: (``pyspark.sql.streaming.datasource``: Spark 4.2+, and runtimes that back-ported
#: SPARK-55304). Without it Spark runs an ``availableNow`` trigger over a Python source as a
#: single micro-batch (it falls back to ``SingleBatchExecutor`` for any source that is not
#: ``SupportsTriggerAvailableNow``) and the source never learns which trigger runs. The API is
#: detected, never the version number; :func:`~pyspark_reactive.publish` reads this too.
ADMISSION_CONTROL = ReadMaxRows is not None

log = logging.getLogger("pyspark_reactive.source")

# How long the first batch looks at what follows a publisher's first element before it
# judges the publisher's rate (at 200 elements/s it sees about 4 more).
FIRST_RATE_LOOK_S = 0.02
# How often a wait for every requested row looks whether the publisher signalled anything:
# the quiet it measures may run this much past fillTimeoutMs, never short of it.
QUIET_LOOK_S = 0.25


class BatchBound:
    """How many elements each micro-batch of a query run may take.

    ``maxRecordsPerTrigger``, less where Spark's read limit says so (Spark 4.2+); an
    ``availableNow`` trigger's bound (:attr:`available_now_left`: what it may still take
    from the publisher, None for no bound); and, where Spark has no admission control, a
    first batch sized by an explicit ``availableNowMaxRecords``, whose demand window stays
    that batch's until Spark asks for a second one (:attr:`window_pending`).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # Elements an availableNow trigger may still take from the publisher (None: no
        # bound, any other trigger, or Spark 4.0/4.1, which never say availableNow).
        self.available_now_left: int | None = None
        # Without admission control an availableNow run is one micro-batch that the source
        # cannot tell from any other: an explicit availableNowMaxRecords sizes the first
        # batch of every run instead (None: not, or no longer). window_pending: the
        # demand window is still that batch's, until Spark asks for a second batch.
        self._first_batch_most: int | None = (
            options.available_now_max_records
            if not ADMISSION_CONTROL and options.available_now_explicit else None)
        self.window_pending = False

    def most(self, limit: Any) -> tuple[int, int | None]:
        """The bound of the batch Spark asks for with read limit ``limit``, and, for a
        run's first batch sized by ``availableNowMaxRecords``, that size (else None)."""
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
                     "first; without one, every element it requests, or the run fails "
                     "after fillTimeoutMs=%d of silence), and the publisher is asked for no "
                     "more until Spark asks for a second batch; later batches take up to "
                     "maxRecordsPerTrigger=%d", first, self.options.fill_timeout_ms,
                     self.options.max_records_per_trigger)
        return most, first

    def subscribed(self, buffer: DemandBuffer, first_batch: int | None) -> None:
        """Apply the bound to a new subscription's ``buffer``, before it subscribes;
        ``first_batch``: the demand window of a first batch sized by
        ``availableNowMaxRecords``."""
        self.window_pending = first_batch is not None
        if self.available_now_left is not None:
            buffer.limit_demand(self.available_now_left)

    def prepare_available_now(self, buffer: DemandBuffer | None) -> None:
        """Fix the bound of an ``availableNow`` trigger, which starts now.

        The trigger takes what the publisher has signalled by now (rows the log holds are
        offered anyway) plus at most ``availableNowMaxRecords`` more, and requests no more
        than that: a publisher that honours demand signals nothing beyond the bound. Rows
        it signals beyond it all the same (demand that was outstanding already) are kept
        in the log like any others. ``buffer``: the subscription's, None before it is made.
        """
        beyond = self.options.available_now_max_records
        if buffer is None:  # the usual case: Spark calls this first; subscribed() limits
            self.available_now_left = beyond
        else:
            self.available_now_left = buffer.buffered + beyond
            buffer.limit_demand(max(0, beyond - buffer.outstanding))
        log.info("reactive source: availableNow takes at most %d elements beyond the %d "
                 "held now, then ends (availableNowMaxRecords), or sooner if the publisher "
                 "completes or pauses for %d ms (the first element: up to "
                 "subscribeTimeoutMs)", beyond,
                 buffer.buffered if buffer else 0, self.options.fill_wait_ms)

    def took(self, taken: int) -> None:
        """A batch took ``taken`` elements from the publisher."""
        if self.available_now_left is not None:
            self.available_now_left -= taken
            if self.available_now_left == 0:
                log.info("reactive source: availableNow took the %d elements its bound "
                         "allows beyond those held when it started; this is its last "
                         "batch", self.options.available_now_max_records)


class FillWait:
    """How long a micro-batch waits for the publisher to fill it (``fillWaitMs``), judged by
    the publisher's recent rate; ``orphaned`` ends a wait early when the JVM is gone."""

    def __init__(self, options: SourceOptions, orphaned: Callable[[], bool]) -> None:
        self.options = options
        self._orphaned = orphaned
        # When the last batch was cut (or the subscription made), and how many elements had
        # arrived by then: the publisher's recent rate, which tells whether waiting would
        # fill a batch.
        self._cut_at: float | None = None
        self._cut_received = 0
        # Whether this run's first availableNow batch has waited for a first element.
        self._first_waited = False

    def subscribed(self, at: float) -> None:
        """The subscription was made at ``at``: the rate of the first batch's wait counts
        from there."""
        self._cut_at, self._cut_received = at, 0

    def cut(self, buffer: DemandBuffer) -> None:
        """A batch was cut now."""
        self._cut_at, self._cut_received = time.monotonic(), buffer.received

    def wait_for_first(self, buffer: DemandBuffer) -> None:
        """Once per run, for an ``availableNow`` run or a first batch sized by
        ``availableNowMaxRecords``: wait up to ``subscribeTimeoutMs`` for one element.

        A live publisher (a broker, a socket) may take longer than ``fillWaitMs`` to
        connect and signal its first element; ending at ``fillWaitMs`` would make every
        ``availableNow`` run read nothing. The wait ends at the end of the stream too.
        """
        if not self._first_waited and buffer.buffered == 0:
            buffer.wait(1, self.options.subscribe_timeout_ms / 1000, self._orphaned)
        self._first_waited = True

    def wait_all(self, buffer: DemandBuffer, most: int,
                 interrupted: Callable[[], bool]) -> bool:
        """Wait until ``most`` elements are here or the stream ended, for as long as the
        publisher keeps signalling: False once it signalled nothing for ``fillTimeoutMs``.

        For a run's one batch without a write-ahead log, where Spark has no admission
        control: every element the publisher signals for what was requested must be in the
        batch, since the run ends with it and no log keeps the ones signalled later. A
        publisher slower than ``fillWaitMs`` is waited for; one that goes quiet with rows
        still requested fails the run (the caller raises) rather than lose them unseen.
        ``interrupted`` (SIGTERM, a JVM gone) ends the wait early, returning True.
        """
        quiet = self.options.fill_timeout_ms / 1000
        seen, since = buffer.received, time.monotonic()
        while True:
            left = since + quiet - time.monotonic()
            if left <= 0:
                return False
            if buffer.wait(most, min(left, QUIET_LOOK_S), interrupted) or interrupted():
                return True
            if buffer.received != seen:  # the publisher is still signalling: wait on
                seen, since = buffer.received, time.monotonic()

    def wait(self, buffer: DemandBuffer, most: int) -> None:
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


def rows_owed(options: SourceOptions, requested: int, buffer: DemandBuffer) -> RuntimeError:
    """The error that fails a run whose one batch (no admission control, no write-ahead
    log) waited ``fillTimeoutMs`` for rows it requested and the publisher went quiet."""
    here = buffer.buffered
    return RuntimeError(
        f"reactive source: this Spark runs an availableNow trigger over a Python source as "
        f"one micro-batch (it has no admission control for Python sources), and this run's "
        f"batch requested {requested} rows from the publisher (availableNowMaxRecords="
        f"{options.available_now_max_records}); the publisher signalled {here} of them, then "
        f"none for {options.fill_timeout_ms} ms (fillTimeoutMs={options.fill_timeout_ms}). "
        "Without walLocation, rows it signalled once the run had ended would be lost "
        f"unseen, so the run fails instead (the {here} rows received are not delivered). "
        "Set walLocation (the batch then takes what arrived within fillWaitMs and the log "
        "keeps later rows for the next run), a smaller availableNowMaxRecords, or a larger "
        "fillTimeoutMs. The source cannot tell the trigger on this Spark: a first batch "
        "under any trigger is sized and waited for this way when availableNowMaxRecords is "
        "given.")
