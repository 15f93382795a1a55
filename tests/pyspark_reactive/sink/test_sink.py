"""A streaming query's output as a Publisher, with real Spark: demand respected row by row,
backpressure from a slow subscriber back to the source's publisher, bounded driver memory,
errors, multicast, stops that do not wait for subscribers, and the end of the stream."""

from __future__ import annotations

import bisect
import gc
import pickle
import re
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.sql import Row, SparkSession
from spark_publishers import Recording
from streaming import UNTIL_DRAINED

from pyspark_reactive import (
    ForeachBatchPublisher,
    SparkConnectNotSupported,
    publish,
)
from reactive_streams import Subscriber, Subscription, SyncSubscriber
from reactive_streams.blocking import DEFAULT_PREFETCH


class Checked(Subscriber[Any]):
    """Requests ``batch`` at a time once all arrived; records elements, checks §1.1."""

    def __init__(self, batch: int, pause: float = 0.0, take: int | None = None) -> None:
        self.batch = batch
        self.pause = pause
        self.take = take
        self.elements: list[Any] = []
        self.outstanding = 0
        self.violations: list[str] = []
        self.samples: list[tuple[float, int]] = []
        self.error: BaseException | None = None
        self.completed = False
        self.done = threading.Event()
        self.changed = threading.Condition()
        self.wanted = 1 << 62  # wait_for() lowers it; on_next notifies once it is reached
        self.subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.outstanding = self.batch
        subscription.request(self.batch)

    def on_next(self, element: Any) -> None:
        if self.outstanding <= 0:
            self.violations.append(f"§1.1: element {len(self.elements)} without demand")
        self.outstanding -= 1
        self.elements.append(element)
        if len(self.elements) >= self.wanted:
            with self.changed:
                self.changed.notify_all()
        if self.pause:
            time.sleep(self.pause)  # the deliberately slow consumer under test
        if len(self.elements) % 100 == 0:
            self.samples.append((time.time(), len(self.elements)))
        if self.take is not None and len(self.elements) >= self.take:
            assert self.subscription is not None
            self.subscription.cancel()
            self._finish()
            return
        if self.outstanding == 0:
            self.outstanding = self.batch
            assert self.subscription is not None
            self.subscription.request(self.batch)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self._finish()

    def on_complete(self) -> None:
        self.completed = True
        self._finish()

    def _finish(self) -> None:
        with self.changed:
            self.done.set()
            self.changed.notify_all()

    def wait_for(self, count: int, timeout: float = 120.0) -> None:
        """Wait until ``count`` elements arrived or the stream ended."""
        with self.changed:
            self.wanted = count
            if not self.changed.wait_for(
                    lambda: len(self.elements) >= count or self.done.is_set(), timeout):
                raise AssertionError(f"{len(self.elements)} of {count} rows after {timeout} s")


def reactive(spark: SparkSession, **options: Any) -> Any:
    reader = spark.readStream.format("reactive")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader


@pytest.mark.spark_lines
def test_seven_at_a_time_in_order_then_complete(spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=10_000, maxRecordsPerTrigger=3000).load()
    publisher = publish(df, element="tuple", checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(7)
    publisher.subscribe(subscriber)
    subscriber.wait_for(10_000)
    assert [value for (value,) in subscriber.elements] == list(range(10_000))
    assert subscriber.violations == [] and subscriber.outstanding <= 7
    assert not subscriber.done.is_set(), "the stream goes on until the query stops"
    publisher.query.stop()
    assert subscriber.done.wait(60) and subscriber.completed and subscriber.error is None


def test_backpressure_reaches_the_publisher_behind_the_source(spark: SparkSession,
                                                             tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    df = (reactive(spark, publisher="spark_publishers:recorded_range", recordTo=record,
                   maxRecordsPerTrigger=1000).schema("value BIGINT").load())
    publisher = publish(df, element="tuple", checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(64, pause=0.001)  # one row per millisecond
    publisher.subscribe(subscriber)
    subscriber.wait_for(10_500, timeout=180)  # more than 10 batches
    publisher.query.stop()

    seen = Recording(record)
    assert len(seen.timeline) >= 11
    times = [t for t, _ in subscriber.samples]
    for when, delivered in seen.timeline:
        # What the subscriber had received by then (sampled every 100 rows).
        index = bisect.bisect_right(times, when) - 1
        received = subscriber.samples[index][1] if index >= 0 else 0
        assert delivered <= received + 2 * 1000 + 100, (when, delivered, received)


def test_a_plain_for_loop_at_50_rows_a_second_holds_the_query_to_what_it_took(
        spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=100_000, maxRecordsPerTrigger=25).load()
    publisher = publish(df, element="tuple", checkpointLocation=tmp_path / "checkpoint")
    values: list[int] = []
    ahead = []  # rows of committed batches beyond what the loop had taken, at each row
    for (value,) in publisher:  # requests DEFAULT_PREFETCH (256) ahead, more as it takes
        values.append(value)
        if len(values) % 5 == 0:  # committed rows only grow: a look every 5 rows
            committed = sum(p.numInputRows for p in publisher.query.recentProgress)
            ahead.append(committed - len(values))
        if len(values) == 150:
            break  # cancels the loop's subscription
        time.sleep(0.02)  # the slow loop under test: 50 rows/s
    publisher.query.stop()
    assert values == list(range(150))
    # A batch commits only once the loop's subscriber took all of it: rows in its buffer
    # of DEFAULT_PREFETCH count as taken. Without backpressure the query would have
    # committed the whole 100,000 meanwhile.
    assert max(ahead) <= DEFAULT_PREFETCH, max(ahead)
    assert sum(p.numInputRows for p in publisher.query.recentProgress) <= 150 + DEFAULT_PREFETCH


def test_driver_memory_stays_bounded_for_a_large_batch(spark: SparkSession) -> None:
    rows = 5_000_000
    batch = spark.range(rows, numPartitions=8)
    whole = rows * 8  # the batch as Arrow: one BIGINT column
    publisher = ForeachBatchPublisher(element="arrow", chunk_rows=4096)

    class Count(SyncSubscriber[Any]):
        rows = 0
        arrow_peak = 0

        def on_element(self, element: Any) -> None:
            self.rows += element.num_rows
            self.arrow_peak = max(self.arrow_peak, pa.total_allocated_bytes())

    subscriber = Count(batch_size=16)
    publisher.subscribe(subscriber)
    arrow_before = pa.total_allocated_bytes()
    tracemalloc.start()  # Python objects: the fetched partitions arrive as bytes
    try:
        python_before = tracemalloc.get_traced_memory()[0]
        publisher(batch, 0)  # the very call foreachBatch makes
        python_peak = tracemalloc.get_traced_memory()[1] - python_before
    finally:
        tracemalloc.stop()
    assert subscriber.rows == rows
    # About one partition (an eighth) at a time; the whole batch would be 40 MB.
    held = python_peak + max(0, subscriber.arrow_peak - arrow_before)
    assert 0 < held < whole / 2, (held, whole)


def test_batches_leave_nothing_behind_in_the_jvm(spark: SparkSession) -> None:
    # toLocalIterator() kept each batch it served in the driver JVM (about 26 MB for this
    # one), which a long-running query turns into OutOfMemoryError; five batches must not
    # grow the heap by even two of them.
    batch = spark.range(1_000_000, numPartitions=4).selectExpr("id", "id * 2 AS twice")
    jvm = spark.sparkContext._jvm
    assert jvm is not None

    def heap() -> int:
        gc.collect()  # py4j releases JVM objects when their Python proxies go
        jvm.java.lang.System.gc()
        runtime = jvm.java.lang.Runtime.getRuntime()
        return int(runtime.totalMemory() - runtime.freeMemory())

    def deliver() -> None:
        publisher = ForeachBatchPublisher(element="tuple")
        subscriber = Checked(1024)
        publisher.subscribe(subscriber)
        publisher(batch, 0)
        assert len(subscriber.elements) == 1_000_000

    deliver()  # warm-up: plans, classes, Python workers
    before = heap()
    for _ in range(5):
        deliver()
    assert heap() - before < 2 * 26 * 2**20, (heap() - before) / 2**20


def test_maps_arrive_as_dicts_as_collect_gives_them(spark: SparkSession,
                                                   tmp_path: Path) -> None:
    df = (reactive(spark, publisher="range", count=3).load()
          .selectExpr("value", "map('k', value, 'twice', value * 2) AS m",
                      "array(map(1, 'one')) AS nested"))
    for element in ("row", "tuple", "dict"):
        publisher = publish(df, element=element,
                            checkpointLocation=tmp_path / f"checkpoint-{element}")
        subscriber = Checked(10)
        publisher.subscribe(subscriber)
        subscriber.wait_for(3)
        publisher.query.stop()
        got = [tuple(e.values()) if element == "dict" else tuple(e)
               for e in subscriber.elements]
        assert sorted(got) == [(v, {"k": v, "twice": 2 * v}, [{1: "one"}]) for v in range(3)]


def test_a_year_month_interval_column_fails_the_batch_naming_it(spark: SparkSession,
                                                                tmp_path: Path) -> None:
    df = (reactive(spark, publisher="range", count=3).load()
          .selectExpr("value", "INTERVAL '1' YEAR AS span"))
    publisher = publish(df, checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(10)
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(120)
    assert subscriber.error is not None
    assert "column 'span'" in str(subscriber.error), subscriber.error
    assert "year-month interval" in str(subscriber.error)


def test_query_failure_reaches_subscribers_as_on_error(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    df = (reactive(spark, publisher="spark_publishers:failing", count=25,
                   message="upstream broke #7", maxRecordsPerTrigger=10)
          .schema("value BIGINT").load())
    publisher = publish(df, element="dict", checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(5)
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(120)
    assert subscriber.error is not None and "upstream broke #7" in str(subscriber.error)
    assert [e["value"] for e in subscriber.elements] == list(range(25))


def test_a_throwing_subscriber_is_cancelled_and_the_others_go_on(
        spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Throws(Checked):
        def on_next(self, element: Any) -> None:
            super().on_next(element)
            if len(self.elements) == 50:
                raise RuntimeError("subscriber bug")

    df = reactive(spark, publisher="range", count=3000, maxRecordsPerTrigger=1000).load()
    publisher = publish(df, checkpointLocation=tmp_path / "checkpoint")
    good, bad = Checked(100), Throws(10)
    publisher.subscribe(good)
    publisher.subscribe(bad)
    good.wait_for(3000)
    publisher.query.stop()
    assert [row.value for row in good.elements] == list(range(3000))
    assert len(bad.elements) == 50 and not bad.done.is_set()
    assert "§2.13" in caplog.text and "subscriber bug" in caplog.text


def test_last_cancel_stops_the_query_when_asked(spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", maxRecordsPerTrigger=500).load()
    publisher = publish(df, when_unsubscribed="stop",
                        checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(50, take=1200)
    publisher.subscribe(subscriber)
    with pytest.raises(Exception, match="its last subscriber cancelled"):
        publisher.query.awaitTermination(120)
    assert not publisher.query.isActive
    assert len(subscriber.elements) == 1200


def test_a_pickled_publisher_refuses_batches_and_says_to_use_publish() -> None:
    # Spark Connect pickles the foreachBatch function to run it on the server, where the
    # subscribers are out of reach: what arrives there fails the batch, saying why.
    copy = pickle.loads(cloudpickle.dumps(ForeachBatchPublisher()))  # pyspark's cloudpickle
    with pytest.raises(SparkConnectNotSupported, match=r"Use publish\(df, \.\.\.\)"):
        copy(None, 0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"element": "json"}, "element='json'"),
    ({"chunk_rows": 0}, "chunk_rows=0"),
    ({"when_unsubscribed": "drop"}, "when_unsubscribed='drop'"),
])
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ForeachBatchPublisher(**kwargs)


def test_given_to_foreach_batch_directly_it_finds_its_query(spark: SparkSession,
                                                            tmp_path: Path) -> None:
    publisher = ForeachBatchPublisher(element="tuple")
    df = reactive(spark, publisher="range", count=500, maxRecordsPerTrigger=200).load()
    writer = df.writeStream.foreachBatch(publisher)
    if UNTIL_DRAINED:
        writer = writer.trigger(**UNTIL_DRAINED)
    query = writer.option("checkpointLocation", str(tmp_path / "checkpoint")).start()
    subscriber = Checked(50)
    publisher.subscribe(subscriber)
    if not UNTIL_DRAINED:  # availableNow would run one batch here: stop it once all is in
        subscriber.wait_for(500)
        query.stop()
    # on_complete without watch(): the first batch found the query that called it.
    assert subscriber.done.wait(120) and subscriber.completed, subscriber.error
    assert [v for (v,) in subscriber.elements] == list(range(500))
    assert publisher.query is not None and str(publisher.query.id) == str(query.id)


def test_stop_while_waiting_for_a_first_subscriber(spark: SparkSession,
                                                   tmp_path: Path) -> None:
    publisher = ForeachBatchPublisher()
    df = reactive(spark, publisher="range", maxRecordsPerTrigger=100).load()
    query = (df.writeStream.foreachBatch(publisher)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    # Once the first batch waits for a subscriber, stop() must still end the query.
    deadline = time.monotonic() + 120
    while publisher.batch_id is None and time.monotonic() < deadline:
        threading.Event().wait(0.05)  # nothing signals across py4j: look every 50 ms
    assert publisher.batch_id == 0 and query.isActive
    query.stop()
    # The waiting batch gave up with the query, and the stream ended: a subscriber now
    # gets on_complete and none of the rows of a batch Spark no longer runs.
    late = Checked(10)
    publisher.subscribe(late)
    assert late.done.wait(30) and late.completed and late.elements == []


class BlocksAt(Checked):
    """Requests one row at a time; its ``on_next`` of row ``at`` blocks until released."""

    def __init__(self, at: int) -> None:
        super().__init__(1)
        self.at = at
        self.blocked = threading.Event()
        self.release = threading.Event()

    def on_next(self, element: Any) -> None:
        super().on_next(element)
        if len(self.elements) == self.at:
            self.blocked.set()
            assert self.release.wait(120), "never released"


def test_stop_does_not_wait_for_a_blocked_subscriber(spark: SparkSession,
                                                     tmp_path: Path) -> None:
    # The subscriber waits for something the thread calling stop() does only once stop()
    # has returned: stop() must wait neither for it nor for the rest of the batch.
    checkpoint = tmp_path / "checkpoint"
    df = reactive(spark, publisher="range", maxRecordsPerTrigger=1000).load()
    publisher = publish(df, element="tuple", checkpointLocation=checkpoint)
    subscriber = BlocksAt(20)
    publisher.subscribe(subscriber)
    assert subscriber.blocked.wait(120)
    batch = publisher.batch_id
    stopper = threading.Thread(target=publisher.query.stop, name="test-stopper")
    started = time.monotonic()
    stopper.start()
    stopper.join(20)
    took = time.monotonic() - started
    subscriber.release.set()
    stopper.join()
    assert took < 5, f"stop() took {took:.1f} s with a subscriber blocked in on_next"
    # The batch was abandoned, not committed, and the stop is a stop, not a failure.
    assert subscriber.done.wait(30) and subscriber.completed, subscriber.error
    assert publisher.query.exception() is None
    assert not (checkpoint / "commits" / str(batch)).exists()
    # Demand was one row at a time: nothing of the batch came after the stop.
    assert [v for (v,) in subscriber.elements] == list(range(20))


def test_complete_on_a_running_query_fails_its_next_batch(spark: SparkSession,
                                                          tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", maxRecordsPerTrigger=100).load()
    publisher = publish(df, element="tuple", checkpointLocation=tmp_path / "checkpoint")
    subscriber = Checked(10)
    publisher.subscribe(subscriber)
    subscriber.wait_for(150)
    publisher.complete()
    assert subscriber.done.wait(30) and subscriber.completed
    # Nobody can receive its batches any more: the query says so instead of waiting.
    with pytest.raises(Exception, match=r"stream has already ended \(complete\(\) was called\)"):
        publisher.query.awaitTermination(30)


def batch_outcome(publisher: ForeachBatchPublisher, batch: Any, timeout: float) -> Any:
    """Call ``publisher`` as foreachBatch does, on a thread of its own; return what it
    raised, None, or "still running" after ``timeout`` seconds."""
    outcome: list[Any] = ["still running"]

    def call() -> None:
        try:
            publisher(batch, 0)
            outcome[0] = None
        except Exception as error:
            outcome[0] = error

    caller = threading.Thread(target=call, name="test-foreach-batch", daemon=True)
    caller.start()
    caller.join(timeout)
    return outcome[0]


def test_after_fail_a_batch_is_refused_at_once(spark: SparkSession) -> None:
    publisher = ForeachBatchPublisher(element="tuple")
    publisher.fail(ValueError("upstream gone"))
    late = Checked(5)
    publisher.subscribe(late)
    assert late.done.wait(30) and isinstance(late.error, ValueError)
    outcome = batch_outcome(publisher, spark.range(10), timeout=30)
    assert isinstance(outcome, RuntimeError), outcome
    assert re.search(r"batch 0 was not delivered: the publisher's stream has already ended "
                     r"\(fail\(ValueError\('upstream gone'\)\) was called\)", str(outcome))


def test_one_publisher_serves_one_query_run(spark: SparkSession, tmp_path: Path) -> None:
    df = reactive(spark, publisher="range", count=50, maxRecordsPerTrigger=50).load()
    publisher = publish(df, element="tuple", trigger={"availableNow": True},
                        checkpointLocation=tmp_path / "first")
    subscriber = Checked(10)
    publisher.subscribe(subscriber)
    assert subscriber.done.wait(120) and subscriber.completed, subscriber.error
    # Given to another start(), it refuses clearly rather than wait on the first run.
    again = (df.writeStream.foreachBatch(publisher).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "again")).start())
    with pytest.raises(Exception, match=r"publishes one run of one query\. Make a new one for "
                                        r"each start\(\)"):
        again.awaitTermination(60)
    with pytest.raises(RuntimeError, match=f"serves query {publisher.query.id}"):
        publisher.watch(again)


@pytest.mark.parametrize("value", [1, 0, -5, "60", True])
def test_client_timeout_is_checked_before_the_query_starts(spark: SparkSession,
                                                           value: Any) -> None:
    with pytest.raises(ValueError, match=f"client_timeout={value!r} is not accepted"):
        publish(spark.range(1), client_timeout=value)


# A column of each kind Spark has, over ``id``: for spark.range(...).selectExpr(*EVERY_KIND).
EVERY_KIND = (
    "id", "IF(id % 7 = 0, NULL, CAST(id AS STRING)) AS text", "id / 3 AS ratio",
    "id % 2 = 0 AS even", "TIMESTAMP'2024-03-01 12:00:00' + make_interval(0,0,0,0,0,0,id)"
    " AS at", "CAST(TIMESTAMP'2024-03-01 12:00:00' AS TIMESTAMP_NTZ) AS local_at",
    "DATE'2024-03-01' + CAST(id AS INT) AS day", "CAST(id AS DECIMAL(20, 3)) AS amount",
    "CAST(CAST(id AS STRING) AS BINARY) AS bytes", "array(id, id + 1) AS pair",
    "map('k', id) AS m", "named_struct('a', id, 'b', array(map(1, 'one'))) AS nested",
    "INTERVAL '1' DAY * id AS span",
)
# Those whose values an element and Spark's collect() give alike (not a timestamp with a
# time zone, a map or a struct holding one).
PLAIN = ("id", "text", "ratio", "even", "local_at", "day", "amount", "bytes", "pair", "span")


@pytest.mark.spark_lines
def test_every_type_arrives_as_through_spark_python_workers(spark: SparkSession) -> None:
    # The batch comes to the driver as the JVM's own Arrow batches, read with the JVM's
    # Arrow schema; the way through mapInArrow (a Python worker writing each batch as
    # IPC, kept for a Spark without toArrowBatchRdd) is the reference for every type.
    from pyspark_reactive.sink.fetch import fetch_arrow, fetch_arrow_through_python

    batch = spark.range(0, 600, numPartitions=2).selectExpr(*EVERY_KIND)
    reference = list(fetch_arrow_through_python(batch))
    fetched = list(fetch_arrow(batch, {}))
    assert pa.Table.from_batches(fetched).equals(pa.Table.from_batches(reference))
    got = {}
    for element in ("row", "tuple", "dict"):
        publisher = ForeachBatchPublisher(element=element, chunk_rows=50)
        subscriber = Checked(7)
        publisher.subscribe(subscriber)
        publisher(batch, 0)
        expected = [e for record_batch in reference
                    for e in _made(sink_chunks_of(record_batch, element, 50))]
        assert subscriber.elements == expected and len(expected) == 600
        assert subscriber.violations == []
        got[element] = subscriber.elements
    assert all(type(row) is not tuple and isinstance(row, Row) for row in got["row"])
    assert [tuple(row) for row in got["row"]] == got["tuple"]
    assert [row.asDict() for row in got["row"]] == got["dict"]
    # Spark's own collect() agrees on the values of the plain columns, and maps are dicts.
    assert [[row[name] for name in PLAIN] for row in got["row"]] == [
        [row[name] for name in PLAIN] for row in batch.orderBy("id").collect()]
    assert got["dict"][3]["m"] == {"k": 3} and got["row"][1].nested["b"] == [{1: "one"}]


def sink_chunks_of(record_batch: pa.RecordBatch, element: str, chunk_rows: int) -> Any:
    from pyspark_reactive.sink.fetch import chunks_of

    return chunks_of(record_batch, element, chunk_rows)


def _made(chunks: Any) -> list[Any]:
    return [make(item) if make else item for items, make in chunks for item in items]
