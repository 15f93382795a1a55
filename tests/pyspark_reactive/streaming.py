"""Waiting on streaming queries by their events, never by sleeping.

:class:`ProgressWatch` is a ``StreamingQueryListener``: Spark posts every query's progress
and termination to it, and tests wait on a condition until what they need has happened.
Events are kept per query run (``runId``): a query restarted from the same checkpoint
keeps its ``id``, and each of its runs is watched on its own.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from pyspark_reactive.progress import source_offset
from pyspark_reactive.source.admission import ADMISSION_CONTROL

# ADMISSION_CONTROL: whether this pyspark has admission control for Python streaming
# sources (``pyspark.sql.streaming.datasource``: Spark 4.2+), told by the API as the
# connector tells it, never by the version number. Without it (Spark 4.0/4.1) Spark runs
# an ``availableNow`` query over a Python source as a single micro-batch.

#: The trigger (``writeStream.trigger(**UNTIL_DRAINED)``) of a test that reads a finite
#: publisher to its end: ``availableNow`` where it runs to the end (the query then ends by
#: itself), else the default trigger, and :meth:`ProgressWatch.wait_drained` stops it.
UNTIL_DRAINED: dict[str, Any] = {"availableNow": True} if ADMISSION_CONTROL else {}


class ProgressWatch(StreamingQueryListener):
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.progress: dict[str, list[Any]] = defaultdict(list)
        self.terminated: dict[str, str | None] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        with self._changed:
            self.progress[str(event.progress.runId)].append(event.progress)
            self._changed.notify_all()

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._changed:
            self.terminated[str(event.runId)] = event.exception
            self._changed.notify_all()

    def batch_sizes(self, query: StreamingQuery) -> list[int]:
        """Rows of each micro-batch that had any, in batch order."""
        with self._changed:
            events = list(self.progress[str(query.runId)])
        return [p.numInputRows for p in sorted(events, key=lambda p: p.batchId)
                if p.numInputRows > 0]

    def end_offset(self, query: StreamingQuery) -> int:
        """The reactive source's end offset of the query's latest reported batch."""
        with self._changed:
            events = list(self.progress[str(query.runId)])
        ends = [source_offset(p.sources[0].endOffset) for p in events if p.sources]
        return max((end for end in ends if end is not None), default=0)

    def rows(self, query: StreamingQuery) -> int:
        return sum(self.batch_sizes(query))

    def wait_for(self, query: StreamingQuery, done: Callable[[], bool],
                 timeout: float = 120.0, what: str = "the condition") -> None:
        """Wait until ``done()`` holds; fail at once if the query ends with an error."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done():
                run_id = str(query.runId)
                if self.terminated.get(run_id):
                    raise AssertionError(
                        f"query failed while waiting for {what}: {self.terminated[run_id]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                                         f"batches so far: {self.batch_sizes(query)}")
                self._changed.wait(left)

    def wait_rows(self, query: StreamingQuery, rows: int, timeout: float = 120.0) -> None:
        self.wait_for(query, lambda: self.rows(query) >= rows, timeout, f"{rows} rows")

    def wait_batches(self, query: StreamingQuery, batches: int, timeout: float = 120.0) -> None:
        self.wait_for(query, lambda: len(self.batch_sizes(query)) >= batches, timeout,
                      f"{batches} non-empty batches")

    def wait_drained(self, query: StreamingQuery, rows: int,
                     timeout: float = 120.0) -> str | None:
        """Wait for a query started with :data:`UNTIL_DRAINED` to end; return as
        :meth:`wait_terminated`. Without admission control it is stopped once it has read
        ``rows`` rows (failing at once if it fails first)."""
        if not ADMISSION_CONTROL:
            self.wait_rows(query, rows, timeout)
            query.stop()
        return self.wait_terminated(query, timeout)

    def wait_terminated(self, query: StreamingQuery, timeout: float = 120.0) -> str | None:
        """Wait for the query to end; return its exception text (None: ended cleanly)."""
        run_id = str(query.runId)
        with self._changed:
            if not self._changed.wait_for(lambda: run_id in self.terminated, timeout):
                raise AssertionError(f"query did not terminate within {timeout} s; batches: "
                                     f"{self.batch_sizes(query)}")
            return self.terminated[run_id]


def install(spark: SparkSession) -> ProgressWatch:
    watch = ProgressWatch()
    spark.streams.addListener(watch)
    return watch


def wait_input_rows(query: StreamingQuery, rows: int, timeout: float = 180.0) -> None:
    """Wait until ``query`` has read ``rows`` rows, by its own recent progress (which a
    Spark Connect client reads too, with no listener); fail at once if it ends first.

    Progress is reported once a batch is committed to the sink, so the rows are there."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        # The property, not progress["numInputRows"]: pyspark 4.0's progress read from
        # JSON (Spark Connect) holds None there and sums its sources' rows instead.
        read = sum(progress.numInputRows for progress in query.recentProgress)
        if read >= rows:
            return
        if not query.isActive:
            raise AssertionError(f"the query ended after {read} of {rows} rows: "
                                 f"{query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{read} of {rows} rows after {timeout} s")
        pause.wait(0.25)
