"""spark.readStream.format("reactive") with real Spark: demand per micro-batch, rows,
availableNow, errors, exactly-once restart with a write-ahead log, and bad options."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
import pytest
from chispa import assert_df_equality
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamReader, StreamingQuery
from spark_publishers import Recording, handed_out
from streaming import ProgressWatch, install

from pyspark_reactive import DefaultSource, read_stream
from pyspark_reactive.source.admission import ADMISSION_CONTROL
from pyspark_reactive.source.options import parse_source_options
from pyspark_reactive.source.wal import WriteAheadLog

# The Spark line, only where a test states a behaviour of the line itself (register);
# admission control (ADMISSION_CONTROL) is told by the API, as the source tells it.
SPARK = tuple(int(p) for p in pyspark.__version__.split(".")[:2])


@pytest.fixture(scope="module")
def watch(spark: SparkSession) -> Iterator[ProgressWatch]:
    listener = install(spark)
    yield listener
    spark.streams.removeListener(listener)


@pytest.fixture
def queries() -> Iterator[list[StreamingQuery]]:
    """Queries a test starts; whatever is still running at its end is stopped."""
    started: list[StreamingQuery] = []
    yield started
    for query in started:
        if query.isActive:
            query.stop()


def _eventually(check: Any, timeout: float) -> bool:
    """Whether ``check()`` holds within ``timeout`` s, looking every 50 ms."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not check():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.05)
    return True


def reactive(spark: SparkSession, **options: Any) -> DataStreamReader:
    reader = spark.readStream.format("reactive")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader


def to_memory(df: Any, queries: list[StreamingQuery], tmp_path: Path,
              **trigger: Any) -> tuple[StreamingQuery, str]:
    name = f"q_{uuid.uuid4().hex[:8]}"
    writer = (df.writeStream.format("memory").queryName(name)
              .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}")))
    if trigger:
        writer = writer.trigger(**trigger)
    query = writer.start()
    queries.append(query)
    return query, name


@pytest.mark.spark_lines
def test_finite_publisher_in_batches_of_max_records(spark: SparkSession, watch: ProgressWatch,
                                                    queries: list[StreamingQuery],
                                                    tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", count=2345,
                  recordTo=record, maxRecordsPerTrigger=500, fillWaitMs=30000).schema(
                      "value BIGINT").load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, 2345)

    expected = spark.range(2345).withColumnRenamed("id", "value")
    assert_df_equality(spark.table(name), expected, ignore_row_order=True,
                       ignore_nullable=True)
    assert watch.batch_sizes(query) == [500, 500, 500, 500, 345]
    # on_complete ends the stream, not the query: a processingTime query stays up.
    assert query.isActive and query.exception() is None
    seen = Recording(record)
    # One request(500) per batch: the first on subscribe, one more per batch cut.
    assert seen.requests and set(seen.requests) == {500}, seen.requests
    assert len(seen.requests) == 5
    assert seen.max_outstanding <= 500


def test_endless_publisher_keeps_demand_within_one_batch(spark: SparkSession,
                                                         watch: ProgressWatch,
                                                         queries: list[StreamingQuery],
                                                         tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    df = reactive(spark, publisher="spark_publishers:recorded_range", recordTo=record,
                  maxRecordsPerTrigger=1000, fillWaitMs=30000).schema("value BIGINT").load()
    query, _ = to_memory(df, queries, tmp_path)
    watch.wait_batches(query, 20)
    query.stop()

    assert watch.batch_sizes(query)[:20] == [1000] * 20
    seen = Recording(record)
    assert set(seen.requests) == {1000}
    assert 1 <= seen.max_outstanding <= 1000
    # Demand follows cuts only: the first request on subscribe, then one per batch that
    # Spark logged, plus at most one for a batch being cut as the query stopped.
    logged = len(list((tmp_path / f"checkpoint-{query.name}" / "offsets").glob("[0-9]*")))
    assert logged + 1 <= len(seen.requests) <= logged + 2
    # stop() returns once Spark has sent the runner SIGTERM; the runner cancels in its
    # own time, and only the file it writes tells this process.
    assert _eventually(lambda: Recording(record).cancelled, 30), \
        "query.stop() must cancel the subscription"


def test_builtin_range_needs_no_schema_and_is_found_without_register(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", start=10, count=25, maxRecordsPerTrigger=10,
                  fillWaitMs=30000).load()
    assert df.schema.simpleString() == "struct<value:bigint>"
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, 25)
    assert sorted(r.value for r in spark.table(name).collect()) == list(range(10, 35))
    assert watch.batch_sizes(query) == [10, 10, 5]


@pytest.mark.spark_lines
def test_register_works_too(spark: SparkSession) -> None:
    if SPARK < (4, 1):
        # Spark 4.0 refuses to register again a name it found on its own (see
        # docs/reference/source-options.md).
        with pytest.raises(Exception, match="DATA_SOURCE_ALREADY_EXISTS"):
            spark.dataSource.register(DefaultSource)
    else:
        spark.dataSource.register(DefaultSource)
    df = reactive(spark, publisher="range", count=3).load()
    assert df.isStreaming


def test_available_now_drains_the_publisher_and_stops(spark: SparkSession,
                                                      watch: ProgressWatch,
                                                      queries: list[StreamingQuery],
                                                      tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=2345, maxRecordsPerTrigger=500,
                  fillWaitMs=30000).load()  # ends at on_complete, not by waiting
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is None
    rows = sorted(r.value for r in spark.table(name).collect())
    if ADMISSION_CONTROL:
        assert rows == list(range(2345))
        assert watch.batch_sizes(query) == [500, 500, 500, 500, 345]
    else:
        # Spark 4.0/4.1 asks a Python source for its latest offset once: one batch.
        assert rows == list(range(500))


def test_available_now_waits_for_a_publisher_slower_to_start_than_fill_wait(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # A publisher that connects for longer than fillWaitMs (an MQTT broker, a socket) must
    # not make a scheduled availableNow run end having read nothing. (Spark's own calls
    # before the first batch take a few seconds, which a shorter delay would hide.)
    df = reactive(spark, publisher="spark_publishers:slow_start", delayMs=6000, count=40,
                  fillWaitMs=100).schema("value BIGINT").load()
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is None
    rows = sorted(r.value for r in spark.table(name).collect())
    if ADMISSION_CONTROL:
        assert rows == list(range(40))
    else:
        # Spark 4.0/4.1 never tells a Python source that availableNow runs
        # (docs/how-to/available-now.md): its one batch holds what arrived within
        # fillWaitMs, nothing here.
        assert rows == []


@pytest.mark.spark_lines
def test_a_factory_s_default_schema_is_the_schema_when_none_is_given(
        spark: SparkSession) -> None:
    described = reactive(spark, publisher="spark_publishers:described", count=3).load()
    assert described.schema.simpleString() == "struct<id:bigint,name:string>"
    plain = reactive(spark, publisher="spark_publishers:pairs", count=3).load()
    assert plain.schema.simpleString() == "struct<value:string>"


def _kept_in_log(wal: Path, end: int) -> list[int]:
    """The rows the write-ahead log holds from offset ``end`` on: no batch has them yet."""
    log = WriteAheadLog(str(wal))
    return [value for entry in log.entries() if entry.start >= end
            for value in log.read(entry).column("value").to_pylist()]


@pytest.mark.spark_lines
def test_available_now_runs_in_a_row_end_on_an_endless_queue_and_lose_nothing(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # Databricks serverless runs streams as scheduled availableNow jobs: each run must end
    # by itself though the publisher never completes, and runs in a row, with one
    # checkpoint and walLocation, must deliver each element the queue hands out once.
    emitted_to, wal = tmp_path / "emitted.txt", tmp_path / "wal"
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    bound = 150
    options = dict(publisher="spark_publishers:queue", emittedTo=emitted_to,
                   maxRecordsPerTrigger=100, availableNowMaxRecords=bound,
                   fillWaitMs=30000,  # the bound ends each run, not a pause of the queue
                   walLocation=wal)
    sink: list[int] = []
    kept: list[int] = []
    end = 0
    for run in range(3):
        df = reactive(spark, **options).schema("value BIGINT").load()
        query = (df.writeStream.format("parquet").option("path", str(output))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        queries.append(query)
        assert watch.wait_terminated(query) is None, f"run {run} failed"
        # The runner keeps the rows it holds in the log as it exits, and holds the log's
        # lock until then.
        released = WriteAheadLog(str(wal))
        released.lock(timeout=30)
        released.unlock()

        before, earlier_kept = sink, kept
        sink = sorted(r.value for r in spark.read.parquet(str(output)).collect())
        end = max(end, watch.end_offset(query))
        kept = _kept_in_log(wal, end)
        emitted = handed_out(emitted_to)
        assert len(set(emitted)) == len(emitted), "the queue handed an element out twice"
        assert len(set(sink)) == len(sink), f"run {run} repeated rows"
        assert sorted(sink + kept) == sorted(emitted), \
            f"run {run}: the sink and the log together must hold every element handed out"
        added = set(sink) - set(before)
        sizes = watch.batch_sizes(query)
        assert set(earlier_kept) <= added, "rows kept in the log come in the next run"
        if earlier_kept:
            assert sizes[0] == len(earlier_kept), "...as its first batch"
        # The bound is counted from the trigger's start, and nothing beyond it is
        # requested: each run takes exactly `bound` elements and the log keeps none.
        # Spark 4.0/4.1 run each as one batch, which the explicit bound sizes.
        assert sizes == ([100, 50] if ADMISSION_CONTROL else [bound]), sizes
        assert len(emitted) == bound * (run + 1) and kept == []
    assert len(sink) == 3 * bound


_SIGTERM_DURING_STOP = """
import os, signal, sys, threading
from pyspark.sql.types import LongType, StructField, StructType
from pyspark_reactive.source.options import parse_source_options
from pyspark_reactive.source.reader import ReactiveStreamReader
from pyspark_reactive.source.wal import WriteAheadLog

# No group commit in this run (walSyncMs of 10 minutes): the rows stay for stop() to log.
options = parse_source_options({"publisher": "range", "maxRecordsPerTrigger": "100",
                                "walLocation": sys.argv[1], "walSyncMs": "600000"})
schema = StructType([StructField("value", LongType())])
reader = ReactiveStreamReader(options, schema, None)
reader.initialOffset()
assert reader.latestOffset({"offset": 0}, None) == {"offset": 100}
assert reader._run.upstream.buffer.wait(100, timeout=10)  # the refill has arrived: 100 rows held
write = WriteAheadLog.write

def sigterm_then_write(self, *args):
    # The log's own thread writes too (group commits): only stop()'s write, on the main
    # thread, is the one under test.
    if threading.current_thread() is threading.main_thread():
        os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode, before write
    write(self, *args)

WriteAheadLog.write = sigterm_then_write
reader.stop()
print("stop returned")
"""


@pytest.mark.spark_lines
def test_sigterm_during_stop_waits_for_the_held_rows_to_be_logged(tmp_path: Path) -> None:
    # When a query ends, Spark sends the runner SIGTERM and closes its socket, which makes
    # the runner call stop(); a SIGTERM arriving while stop() logs the rows it holds must
    # not end the process before they are written. Runs in a process of its own, as the
    # runner does, because the source installs a SIGTERM handler.
    wal = tmp_path / "wal"
    done = subprocess.run([sys.executable, "-c", _SIGTERM_DURING_STOP, str(wal)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "stop returned" not in done.stdout, "the SIGTERM must end the runner after stop"
    assert _kept_in_log(wal, 100) == list(range(100, 200)), done.stderr


@pytest.mark.spark_lines
def test_read_stream_ships_a_closure(spark: SparkSession, watch: ProgressWatch,
                                     queries: list[StreamingQuery], tmp_path: Path) -> None:
    words = ["alpha", "beta", "gamma"]

    def factory(options: Any) -> Any:
        from reactive_streams.publishers import IterablePublisher
        offset = int(options["shift"])
        return IterablePublisher([(i + offset, words[i % 3]) for i in range(30)])

    df = read_stream(spark, factory, schema="id BIGINT, word STRING", shift=100,
                     maxRecordsPerTrigger=8)
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, 30)
    got = sorted((r.id, r.word) for r in spark.table(name).collect())
    assert got == [(i + 100, words[i % 3]) for i in range(30)]
    assert max(watch.batch_sizes(query)) <= 8


@pytest.mark.spark_lines
def test_publisher_error_fails_the_query_after_the_rows_before_it(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    df = reactive(spark, publisher="spark_publishers:failing", count=42,
                  message="broker went away #42", maxRecordsPerTrigger=10).schema(
                      "value BIGINT").load()
    query, name = to_memory(df, queries, tmp_path)
    error = watch.wait_terminated(query)
    assert error is not None and "broker went away #42" in error
    with pytest.raises(StreamingQueryException, match="broker went away #42"):
        query.awaitTermination()
    assert sorted(r.value for r in spark.table(name).collect()) == list(range(42))


def test_element_that_does_not_fit_names_its_offset_and_keeps_the_rows_before(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    df = (reactive(spark, publisher="spark_publishers:pairs", count=50, badAt=37,
                   maxRecordsPerTrigger=20)
          .schema("id BIGINT, name STRING").load())
    query, name = to_memory(df, queries, tmp_path)
    error = watch.wait_terminated(query)
    assert error is not None and "offset 37" in error, error
    assert "one column too many" in error
    got = sorted((r.id, r.name) for r in spark.table(name).collect())
    assert got == [(i, f"n{i}") for i in range(37)]


def test_restart_with_wal_gives_every_row_exactly_once(spark: SparkSession,
                                                       watch: ProgressWatch,
                                                       queries: list[StreamingQuery],
                                                       tmp_path: Path) -> None:
    total = 3000
    options = dict(publisher="spark_publishers:ledger", ledger=tmp_path / "ledger",
                   total=total, maxRecordsPerTrigger=100, walLocation=tmp_path / "wal")
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> StreamingQuery:
        df = reactive(spark, **options).schema("value BIGINT").load()
        query = (df.writeStream.format("parquet").option("path", str(output))
                 .option("checkpointLocation", str(checkpoint)).start())
        queries.append(query)
        return query

    first = start()
    watch.wait_batches(first, 3)
    first.stop()
    assert watch.end_offset(first) < total, "the first run must stop mid-stream"

    second = start()
    watch.wait_for(second, lambda: watch.end_offset(second) >= total, what="the last offset")
    second.stop()
    values = sorted(r.value for r in spark.read.parquet(str(output)).collect())
    assert values == list(range(total))


@pytest.mark.spark_lines
@pytest.mark.parametrize(("options", "message"), [
    ({}, "option publisher=None"),
    ({"publisher": "no_such_module_xyz:make"}, "importing 'no_such_module_xyz' failed"),
    ({"publisher": "spark_publishers:no_such_factory"}, "has no attribute 'no_such_factory'"),
    ({"publisher": "spark_publishers"}, "package.module:factory"),
    ({"publisher": "range", "maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger='0'"),
    ({"publisher": "range", "maxRecordsPerTrigger": "-5"}, "maxRecordsPerTrigger='-5'"),
    ({"publisher": "range", "maxRecordsPerTrigger": "ten"}, "maxRecordsPerTrigger='ten'"),
    ({"publisher": "range", "maxRecordsPerTrigger": "2.5"}, "a positive integer"),
    ({"publisher": "range", "numPartitions": "0"}, "numPartitions='0'"),
    ({"publisher": "range", "availableNowMaxRecords": "-1"},
     "availableNowMaxRecords='-1' is not accepted: an integer >= 0"),
    ({"publisher": "range", "availableNowMaxRecords": "all"}, "availableNowMaxRecords='all'"),
    ({"publisher": "range", "availableNowMaxRecords": "1e6"}, "availableNowMaxRecords='1e6'"),
    ({"publisher": "range", "count": "-1"}, "count='-1'"),
    ({"publisher": "range", "rowsPerSecond": "fast"}, "rowsPerSecond='fast'"),
    ({"publisher": "range", "start": "x"}, "start='x'"),
])
def test_bad_options_fail_at_load(spark: SparkSession, options: dict[str, str],
                                  message: str) -> None:
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(".", r"\.")):
        reactive(spark, **options).load()


def test_available_now_max_records_defaults_to_a_hundred_batches() -> None:
    def bound(**options: str) -> int:
        return parse_source_options({"publisher": "range", **options}).available_now_max_records

    assert bound() == 1_000_000
    assert bound(maxRecordsPerTrigger="7") == 700
    assert bound(maxRecordsPerTrigger="7", AVAILABLENOWMAXRECORDS=" 0 ") == 0


@pytest.mark.spark_lines
def test_unwritable_wal_location_fails_at_load(spark: SparkSession, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(Exception, match="walLocation=.*a writable directory"):
        reactive(spark, publisher="range", walLocation=blocker / "wal").load()


def test_factory_that_returns_no_publisher_fails_the_query_before_any_batch(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    df = reactive(spark, publisher="spark_publishers:not_a_publisher").load()
    query, _ = to_memory(df, queries, tmp_path)
    error = watch.wait_terminated(query)
    assert error is not None
    assert "publisher='spark_publishers:not_a_publisher' returned list, not a Publisher" in error
    assert watch.batch_sizes(query) == []


def test_slow_publisher_gives_what_arrived_within_fill_wait(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=600, rowsPerSecond=300,
                  maxRecordsPerTrigger=1000, fillWaitMs=50).load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, 600)
    sizes = watch.batch_sizes(query)
    # 2 s of elements: many small batches, none waiting to fill up to 1000.
    assert len(sizes) >= 2 and max(sizes) < 600, sizes
    assert [r.value for r in spark.table(name).collect()] == list(range(600))


def test_a_slow_stream_s_rows_do_not_wait_for_a_batch_that_cannot_fill(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # 200 rows/s cannot fill 10,000,000 within fillWaitMs (10 minutes): waiting would only
    # delay the rows already there. Waiting anyway (as before) would hold the second batch
    # for the 10 minutes.
    df = reactive(spark, publisher="range", rowsPerSecond=200,
                  maxRecordsPerTrigger=10_000_000, fillWaitMs=600_000).load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_for(query, lambda: len([n for n in watch.batch_sizes(query) if n]) >= 3,
                   what="three batches with rows")
    query.stop()
    rows = [r.value for r in spark.table(name).collect()]
    assert rows == list(range(len(rows)))


@pytest.mark.parametrize(("options", "expected"), [
    ({"numPartitions": 3}, 3),
    ({}, 1),  # 2,000 BIGINTs are far below the automatic 1 MiB per partition
])
def test_partitions_per_batch(spark: SparkSession, queries: list[StreamingQuery],
                              tmp_path: Path, options: dict[str, Any], expected: int) -> None:
    seen: list[int] = []

    def record(batch: Any, batch_id: int) -> None:
        if not batch.isEmpty():
            seen.append(batch.rdd.getNumPartitions())

    df = reactive(spark, publisher="range", count=2000, maxRecordsPerTrigger=1000,
                  **options).load()
    query = (df.writeStream.foreachBatch(record).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    queries.append(query)
    query.awaitTermination(120)
    assert seen and set(seen) == {expected}, seen


def test_trigger_once_reads_one_batch(spark: SparkSession, watch: ProgressWatch,
                                      queries: list[StreamingQuery], tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=2345, maxRecordsPerTrigger=500,
                  fillWaitMs=30000).load()
    query, name = to_memory(df, queries, tmp_path, once=True)
    assert watch.wait_terminated(query) is None
    assert sorted(r.value for r in spark.table(name).collect()) == list(range(500))


def test_read_stream_refuses_a_factory_it_cannot_ship(spark: SparkSession) -> None:
    import threading

    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot be pickled"):
        read_stream(spark, lambda options: lock)
    with pytest.raises(TypeError, match="factory must be callable"):
        read_stream(spark, "range")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="option publisher='range'.*not with read_stream"):
        read_stream(spark, lambda options: None, publisher="range")


def test_a_new_checkpoint_refuses_a_wal_another_checkpoint_left(spark: SparkSession,
                                                                watch: ProgressWatch,
                                                                queries: list[StreamingQuery],
                                                                tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    first, _ = to_memory(reactive(spark, publisher="range", maxRecordsPerTrigger=100,
                                  walLocation=wal).load(), queries, tmp_path)
    watch.wait_batches(first, 3)
    first.stop()
    # Same walLocation, new checkpoint, and a publisher whose values cannot be mistaken
    # for the first run's: none of the first run's rows may come out of it.
    second, name = to_memory(reactive(spark, publisher="range", start=1_000_000,
                                      maxRecordsPerTrigger=100, walLocation=wal).load(),
                             queries, tmp_path)
    error = watch.wait_terminated(second)
    assert error is not None and "holds the write-ahead log of another checkpoint" in error
    assert "give this query a walLocation of its own" in error
    assert spark.table(name).count() == 0


def test_a_new_checkpoint_takes_over_rows_no_checkpoint_planned(spark: SparkSession,
                                                               watch: ProgressWatch,
                                                               queries: list[StreamingQuery],
                                                               tmp_path: Path) -> None:
    # What a run stopped before Spark recorded its first batch leaves: rows in the log,
    # and no mark of any checkpoint. They were never delivered, so the next query does.
    from pyspark.sql.types import StructType

    from pyspark_reactive.source.rows import arrow_schema
    from pyspark_reactive.source.wal import WalEntry, WriteAheadLog

    schema = arrow_schema(StructType.fromDDL("value BIGINT"))
    left = pa.record_batch([pa.array([70, 80, 90], pa.int64())], schema=schema)
    WriteAheadLog(str(tmp_path / "wal")).write(WalEntry(0, 3), [left], schema)
    # A publisher that does not resume (the built-in range would start after the log).
    query, name = to_memory(reactive(spark, publisher="spark_publishers:recorded_range",
                                     count=5, recordTo=tmp_path / "record", schema="value BIGINT",
                                     walLocation=tmp_path / "wal").load(), queries, tmp_path)
    watch.wait_rows(query, 8)
    query.stop()
    assert watch.batch_sizes(query)[0] == 3, "the rows left come first, as one batch"
    assert sorted(r.value for r in spark.table(name).collect()) == [0, 1, 2, 3, 4, 70, 80, 90]


def test_a_restart_whose_first_batch_was_never_committed_keeps_its_wal(
        spark: SparkSession, tmp_path: Path) -> None:
    # Spark asks such a restart for initialOffset() too (its checkpoint holds batch 0's
    # end, not its start); that is no new checkpoint, and the log is its own.
    from pyspark_reactive import publish
    from reactive_streams import SyncSubscriber

    options = dict(publisher="spark_publishers:ledger", ledger=tmp_path / "ledger",
                   total=300, maxRecordsPerTrigger=100, walLocation=tmp_path / "wal")
    checkpoint = tmp_path / "checkpoint"

    def start() -> Any:
        df = reactive(spark, **options).schema("value BIGINT").load()
        return publish(df, element="tuple", checkpointLocation=checkpoint)

    first = start()  # nobody subscribes: batch 0 waits, planned and never committed
    assert _eventually(lambda: (tmp_path / "wal" / "committed").exists(), 120), \
        "batch 0 was never planned"
    first.query.stop()

    class Keep(SyncSubscriber[Any]):
        def __init__(self) -> None:
            super().__init__(batch_size=50)
            self.values: list[int] = []

        def on_element(self, row: Any) -> None:
            self.values.append(row[0])

    second = start()
    keep = Keep()
    second.subscribe(keep)
    assert _eventually(lambda: len(keep.values) >= 300 or not second.query.isActive, 120)
    second.query.stop()
    assert second.query.exception() is None
    assert keep.values == list(range(300))
