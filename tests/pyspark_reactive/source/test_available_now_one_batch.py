"""No row lost by an ``availableNow`` run that Spark runs as one micro-batch.

Spark 4.0/4.1 (no admission control for Python sources: ``ADMISSION_CONTROL`` false) run
``availableNow`` over a Python source as a single micro-batch. With an explicit
``availableNowMaxRecords`` and no ``walLocation`` that batch takes every row it requested,
however slowly the publisher signals them, or fails the run after ``fillTimeoutMs`` of
silence; with ``walLocation`` it is cut as any batch and the log keeps the rows signalled
later. The publisher here hands its elements out once, like a queue, so a row signalled to
a run that has ended would show as handed out and never delivered. Spark 4.2+ takes a run
in batches up to its bound; the same tests hold there, with its own end of a run.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from spark_publishers import handed_out
from streaming import ProgressWatch
from test_source import _kept_in_log, queries, reactive, to_memory, watch

from pyspark_reactive.source.admission import ADMISSION_CONTROL
from pyspark_reactive.source.wal import WriteAheadLog
from reactive_streams import Publisher, Subscriber, Subscription

pytestmark = pytest.mark.spark_lines
__all__ = ["queries", "watch"]  # fixtures shared with test_source.py

TRICKLE = "test_available_now_one_batch:trickle"


class _Trickle(Subscription):
    """Signals the next ints against demand, one every ``gap`` s, from a thread of its own;
    each is appended to ``path`` before it is signalled. After ``stall_after`` elements (None:
    never) it signals nothing more, with demand outstanding, until cancelled."""

    def __init__(self, subscriber: Subscriber[int], path: str, gap: float,
                 stall_after: int | None) -> None:
        self._subscriber = subscriber
        self._path = path
        self._next = max(handed_out(path), default=-1) + 1
        self._gap = gap
        self._left = stall_after
        self._demand = 0
        self._cancelled = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="trickle", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, n: int) -> None:
        with self._changed:
            self._demand += n
            self._changed.notify_all()

    def cancel(self) -> None:
        with self._changed:
            self._cancelled = True
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._cancelled or (
                    self._demand > 0 and self._left != 0))
                # The publisher's own pace, not a test's wait: it is what makes it slow.
                if self._cancelled or self._changed.wait_for(lambda: self._cancelled,
                                                             self._gap):
                    return
                self._demand -= 1
                if self._left is not None:
                    self._left -= 1
                element, self._next = self._next, self._next + 1
            with open(self._path, "a") as handle:  # handed out, as a queue marks it
                handle.write(f"{element}\n")
            self._subscriber.on_next(element)


class _TricklePublisher(Publisher[int]):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = options

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        stall = self.options.get("stallAfter")
        subscription = _Trickle(subscriber, self.options["emittedTo"],
                                int(self.options["gapMs"]) / 1000,
                                None if stall is None else int(stall))
        subscriber.on_subscribe(subscription)
        subscription.start()


def trickle(options: Mapping[str, str]) -> Publisher[int]:
    """Endless ints, each handed out once across query runs (recorded in ``emittedTo``),
    one every ``gapMs``; after ``stallAfter`` of them, none."""
    return _TricklePublisher(options)


def values(spark: SparkSession, name: str) -> list[int]:
    return sorted(r.value for r in spark.table(name).collect())


def test_a_run_takes_every_row_it_requested_from_a_publisher_slower_than_fill_wait(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # 12 rows 150 ms apart, no walLocation. Where the run is one batch, each row comes
    # later than fillWaitMs after the one before. Spark 4.2+ ends a run once a batch finds
    # nothing for fillWaitMs, so there the fill wait is the longer one.
    emitted = tmp_path / "emitted"
    df = reactive(spark, publisher=TRICKLE, emittedTo=emitted, gapMs=150,
                  availableNowMaxRecords=12, maxRecordsPerTrigger=5,
                  fillWaitMs=1000 if ADMISSION_CONTROL else 100
                  ).schema("value BIGINT").load()
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is None
    # Every row the publisher handed out is delivered, and it handed out the bound.
    assert values(spark, name) == handed_out(emitted) == list(range(12))
    sizes = watch.batch_sizes(query)
    if ADMISSION_CONTROL:
        assert sum(sizes) == 12 and max(sizes) <= 5, sizes
    else:
        # One batch took them all; before, it was cut after fillWaitMs with the first
        # row or two, and the rest, signalled within demand, were lost with the run.
        assert sizes == [12], sizes


def test_a_publisher_quiet_with_rows_requested_fails_the_one_batch_run_naming_the_option(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    emitted = tmp_path / "emitted"
    df = reactive(spark, publisher=TRICKLE, emittedTo=emitted, gapMs=10, stallAfter=3,
                  availableNowMaxRecords=10, fillWaitMs=100,
                  fillTimeoutMs=1000).schema("value BIGINT").load()
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    error = watch.wait_terminated(query)
    assert handed_out(emitted) == [0, 1, 2]
    if ADMISSION_CONTROL:
        # Spark 4.2+ ends a run once the publisher gives nothing for fillWaitMs.
        assert error is None
        assert values(spark, name) == [0, 1, 2]
    else:
        # Rows it might still signal would reach a run that has ended: the run fails,
        # saying so, rather than lose them unseen.
        assert error is not None
        assert "requested 10 rows" in error and "signalled 3 of them" in error, error
        assert "fillTimeoutMs=1000" in error and "walLocation" in error, error


def test_with_a_log_the_rows_signalled_after_the_one_batch_are_kept(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # With walLocation the one batch is cut as any batch (fillWaitMs, by the publisher's
    # rate); what the publisher signals after it is kept in the log for the next run.
    emitted, wal = tmp_path / "emitted", tmp_path / "wal"
    output = tmp_path / "out"
    df = reactive(spark, publisher=TRICKLE, emittedTo=emitted, gapMs=50,
                  availableNowMaxRecords=12, maxRecordsPerTrigger=12, fillWaitMs=200,
                  walLocation=wal).schema("value BIGINT").load()
    query = (df.writeStream.format("parquet").option("path", str(output))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    queries.append(query)
    assert watch.wait_terminated(query) is None
    # The runner keeps what it holds in the log as it exits, holding the log's lock.
    released = WriteAheadLog(str(wal))
    released.lock(timeout=30)
    released.unlock()
    sink = sorted(r.value for r in spark.read.parquet(str(output)).collect())
    kept = _kept_in_log(wal, watch.end_offset(query))
    given = handed_out(emitted)
    assert sink and sorted(sink + kept) == given, (sink, kept, given)
    assert given == list(range(len(given))) and len(given) <= 12
