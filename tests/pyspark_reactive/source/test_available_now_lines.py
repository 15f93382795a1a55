"""``availableNow`` on every Spark line, by what the line's pyspark offers.

With admission control for Python sources (``pyspark.sql.streaming.datasource``: Spark
4.2+) an ``availableNow`` run is bounded by ``availableNowMaxRecords``, in batches of
``maxRecordsPerTrigger``. Without it (Spark 4.0/4.1) Spark runs ``availableNow`` over a
Python source as a single micro-batch (MicroBatchExecution falls back to
SingleBatchExecutor for a source that is not SupportsTriggerAvailableNow) and the source
never learns the trigger: a run reads one batch, ``availableNowMaxRecords`` given
explicitly sizes each run's first batch, and ``publish()`` warns. The tests detect the
API as the code does (``ADMISSION_CONTROL``), never the version number. Runs in a row
with a write-ahead log: test_source.py's
``test_available_now_runs_in_a_row_end_on_an_endless_queue_and_lose_nothing``.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from polling import wait_until
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamReader, StreamingQuery
from spark_publishers import Recording, handed_out
from streaming import ProgressWatch
from test_source import queries, to_memory, watch
from test_source import reactive as _reactive

from pyspark_reactive import AvailableNowWarning, publish
from pyspark_reactive.source.admission import ADMISSION_CONTROL
from pyspark_reactive.source.wal import WriteAheadLog
from reactive_streams import Subscriber, Subscription

pytestmark = pytest.mark.spark_lines
__all__ = ["queries", "watch"]  # fixtures shared with test_source.py


def reactive(spark: SparkSession, **options: Any) -> DataStreamReader:
    return _reactive(spark, **options).schema("value BIGINT")


def values(spark: SparkSession, name: str) -> list[int]:
    return sorted(r.value for r in spark.table(name).collect())


class Collect(Subscriber[Any]):
    """Takes everything; ``done`` once the stream ends."""

    def __init__(self) -> None:
        self.elements: list[Any] = []
        self.error: BaseException | None = None
        self.done = threading.Event()

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(2**63 - 1)

    def on_next(self, element: Any) -> None:
        self.elements.append(element)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def on_complete(self) -> None:
        self.done.set()


def test_an_available_now_run_without_admission_control_reads_one_batch(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", count=1000,
                  recordTo=record, maxRecordsPerTrigger=300, fillWaitMs=30000).load()
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is None
    if ADMISSION_CONTROL:
        assert watch.batch_sizes(query) == [300, 300, 300, 100]
        assert values(spark, name) == list(range(1000))
    else:
        # One micro-batch of maxRecordsPerTrigger, then the query ends; the rest stays
        # with the publisher: without a log, nothing more is requested for a next batch
        # (rows signalled for it would be lost with the run).
        assert watch.batch_sizes(query) == [300]
        assert values(spark, name) == list(range(300))
        assert Recording(record).requests == [300]


def test_explicit_available_now_max_records_bounds_the_run_on_every_line(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # An endless publisher: only the bound ends the run.
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", recordTo=record,
                  maxRecordsPerTrigger=300, availableNowMaxRecords=1000,
                  fillWaitMs=30000).load()
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is None
    assert values(spark, name) == list(range(1000))
    # Both lines ask the publisher for exactly the bound, never more.
    seen = Recording(record)
    assert sum(seen.requests) == 1000, seen.requests
    if ADMISSION_CONTROL:
        assert watch.batch_sizes(query) == [300, 300, 300, 100]
        assert seen.max_outstanding <= 300
    else:
        # The whole run is one batch of availableNowMaxRecords, requested at once.
        assert watch.batch_sizes(query) == [1000]
        assert seen.requests == [1000]


def test_without_admission_control_the_option_sizes_the_first_batch_whatever_the_trigger(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", recordTo=record,
                  maxRecordsPerTrigger=100, availableNowMaxRecords=250,
                  fillWaitMs=30000).load()
    query, _ = to_memory(df, queries, tmp_path)  # the default (processing-time) trigger
    watch.wait_batches(query, 4)
    query.stop()
    sizes = watch.batch_sizes(query)[:4]
    seen = Recording(record)
    if ADMISSION_CONTROL:
        # The source sees the trigger: the option is availableNow's alone.
        assert sizes == [100] * 4
        assert set(seen.requests) == {100} and seen.max_outstanding <= 100
    else:
        # The source cannot tell this trigger from availableNow: the first batch is sized
        # by the option, then the window is maxRecordsPerTrigger again; the publisher is
        # asked for nothing between the first batch and Spark's request for a second.
        assert sizes == [250, 100, 100, 100], sizes
        assert seen.requests[:3] == [250, 100, 100], seen.requests
        assert set(seen.requests[1:]) == {100}
        assert seen.max_outstanding <= 250


def test_the_one_batch_waits_for_a_publisher_slower_to_start_than_fill_wait(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # A scheduled availableNow run over a publisher that takes longer than fillWaitMs to
    # connect (a broker, a socket) must not read nothing: with the option given, a run's
    # first batch waits up to subscribeTimeoutMs for a first element on every line.
    df = reactive(spark, publisher="spark_publishers:slow_start", delayMs=6000, count=40,
                  fillWaitMs=100, availableNowMaxRecords=40).load()
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is None
    assert values(spark, name) == list(range(40))


def test_publish_warns_where_available_now_runs_one_batch(
        spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=1000, maxRecordsPerTrigger=300,
                  fillWaitMs=30000).load()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        publisher = publish(df, element="tuple", trigger={"availableNow": True},
                            checkpointLocation=tmp_path / "checkpoint")
    subscriber = Collect()
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(120) and subscriber.error is None, subscriber.error
    told = [w for w in caught if issubclass(w.category, AvailableNowWarning)]
    if ADMISSION_CONTROL:
        assert told == []
        assert len(subscriber.elements) == 1000
    else:
        [warning] = told
        text = str(warning.message)
        assert "Python data source reactive:" in text
        assert "single micro-batch" in text and "maxRecordsPerTrigger" in text
        assert "availableNowMaxRecords" in text and "Spark 4.2" in text
        assert warning.filename == __file__, "it points at the call of publish()"
        assert len(subscriber.elements) == 300


def test_publish_does_not_warn_for_sources_that_run_available_now_in_full(
        spark: SparkSession, tmp_path: Path) -> None:
    # Files (like Kafka) support availableNow on every line: no warning, every row.
    data = tmp_path / "data"
    spark.range(25).write.parquet(str(data))
    df = spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).parquet(str(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        publisher = publish(df, element="tuple", trigger={"availableNow": True},
                            checkpointLocation=tmp_path / "checkpoint")
        other = publish(reactive(spark, publisher="range", count=5).load(), element="tuple",
                        checkpointLocation=tmp_path / "checkpoint-processing-time")
    subscriber = Collect()
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(120) and subscriber.error is None, subscriber.error
    assert sorted(e[0] for e in subscriber.elements) == list(range(25))
    running = Collect()
    other.subscribe(running)
    other.query.processAllAvailable()  # its source runner is up before it is stopped
    other.query.stop()
    assert sorted(e[0] for e in running.elements) == list(range(5))
    assert [w for w in caught if issubclass(w.category, AvailableNowWarning)] == []


def test_the_demand_window_of_a_first_batch_gives_way_to_max_records(tmp_path: Path) -> None:
    # What the source does with a first batch sized by availableNowMaxRecords (no Spark).
    from spark_publishers import RecordingPublisher

    from pyspark_reactive.source.demand_buffer import DemandBuffer
    from reactive_streams import RangePublisher

    record = str(tmp_path / "requests.jsonl")
    buffer = DemandBuffer(250)
    buffer.start(RecordingPublisher(RangePublisher(0, 10_000), record))
    assert buffer.wait(250, timeout=10)
    buffer.limit_demand(0)  # the first batch is cut: nothing more until a second is asked
    assert buffer.take(250) == list(range(250))
    assert buffer.outstanding == 0 and Recording(record).requests == [250]
    buffer.reopen(100)  # Spark asks for a second batch: the window is 100 from now on
    assert buffer.take(100, wait=10) == list(range(250, 350))
    assert buffer.wait(100, timeout=10)
    assert buffer.buffered + buffer.outstanding == 100
    buffer.close()
    assert Recording(record).requests == [250, 100, 100]


def test_a_smaller_window_is_reached_as_elements_are_taken(tmp_path: Path) -> None:
    from spark_publishers import RecordingPublisher

    from pyspark_reactive.source.demand_buffer import DemandBuffer
    from reactive_streams import RangePublisher

    record = str(tmp_path / "requests.jsonl")
    buffer = DemandBuffer(250)
    buffer.start(RecordingPublisher(RangePublisher(0, 10_000), record))
    assert buffer.wait(250, timeout=10)
    buffer.resize(100)  # 250 buffered: nothing is requested until fewer than 100 are
    assert buffer.take(100) == list(range(100))
    assert Recording(record).requests == [250]
    assert buffer.take(100) == list(range(100, 200))  # 50 left: room for 50 more
    assert buffer.wait(100, timeout=10)
    assert buffer.buffered + buffer.outstanding == 100
    assert buffer.take(100) == list(range(200, 300))
    assert buffer.wait(100, timeout=10)
    buffer.close()
    assert Recording(record).requests == [250, 50, 100]
    with pytest.raises(ValueError, match="capacity must be an int >= 1"):
        buffer.resize(0)


def test_available_now_max_records_0_still_offers_the_rows_kept_in_the_log(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # A stopped run leaves rows in the write-ahead log; a next run with
    # availableNowMaxRecords=0 takes nothing new from the publisher, but the rows kept in
    # the log come first on every line, in a batch of up to maxRecordsPerTrigger.
    emitted_to, wal = tmp_path / "emitted.txt", tmp_path / "wal"
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options: dict[str, Any] = dict(publisher="spark_publishers:queue", emittedTo=emitted_to,
                                   maxRecordsPerTrigger=100, fillWaitMs=30000, walLocation=wal)

    def run(trigger: dict[str, Any], **more: Any) -> StreamingQuery:
        df = reactive(spark, **options, **more).load()
        query = (df.writeStream.format("parquet").option("path", str(output))
                 .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())
        queries.append(query)
        return query

    def log_released() -> None:
        # The runner keeps the rows it holds in the log as it exits, and holds the log's
        # lock until then.
        released = WriteAheadLog(str(wal))
        released.lock(timeout=30)
        released.unlock()

    # Run 1: one batch of 100 (the next trigger is an hour away); the refill requested
    # as the batch was cut arrives, and the stop keeps it in the log.
    first = run({"processingTime": "1 hour"})
    watch.wait_batches(first, 1)
    wait_until(lambda: len(handed_out(emitted_to)) >= 200, 60,
               "the refill requested as the batch was cut")
    assert len(handed_out(emitted_to)) == 200
    first.stop()
    log_released()
    end = watch.end_offset(first)
    assert end == 100
    log = WriteAheadLog(str(wal))
    kept = [value for entry in log.entries() if entry.start >= end
            for value in log.read(entry).column("value").to_pylist()]
    assert kept == list(range(100, 200))

    # Run 2: availableNowMaxRecords=0.
    second = run({"availableNow": True}, availableNowMaxRecords=0)
    assert watch.wait_terminated(second) is None
    log_released()
    sink = sorted(r.value for r in spark.read.parquet(str(output)).collect())
    # With admission control the source bounds the run: the kept rows, then nothing new.
    # Without it the run is one micro-batch, the run's first, which availableNowMaxRecords
    # sizes: the kept rows come first and take up to maxRecordsPerTrigger, not 0 (they
    # were left in the log, and the batch was empty, before this was fixed).
    assert watch.batch_sizes(second) == [100], (
        "admission control" if ADMISSION_CONTROL else "no admission control")
    assert sink == list(range(200)), "the rows kept in the log were not offered"
    assert len(handed_out(emitted_to)) == 200, "the publisher was asked for more"
