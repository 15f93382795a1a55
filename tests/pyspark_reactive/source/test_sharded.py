"""A sharded feed read on the executors (option ``shards``): each shard by a task of its own,
epochs kept in the shards' logs before anything is acknowledged, one outcome per epoch."""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StructType
from pyspark.worker_util import pickleSer
from streaming import ProgressWatch
from test_source import queries, watch

from pyspark_reactive import OptionError, Shard, read_stream, sharded
from pyspark_reactive.publishers.range import range_publisher
from pyspark_reactive.source import shard_task as shard_task_module
from pyspark_reactive.source.options import parse_source_options
from pyspark_reactive.source.reader import _offset as reader_offset
from pyspark_reactive.source.shard_log import StaleAttempt
from pyspark_reactive.source.shard_task import epoch_batches, read_epoch
from pyspark_reactive.source.sharded import ShardedStreamReader
from pyspark_reactive.source.wal import WalNotPrivate
from reactive_streams import IterablePublisher, Publisher, Subscriber

__all__ = ["queries", "watch"]  # fixtures shared with test_source.py
SCHEMA = StructType().add("value", LongType())


def _options(tmp_path: Path, **given: Any) -> dict[str, str]:
    return {"publisher": "range", "walLocation": str(tmp_path / "wal"),
            **{k: str(v) for k, v in given.items()}}


def _start(spark: SparkSession, queries: list[StreamingQuery], tmp_path: Path,
           trigger: dict[str, Any] | None = None, **options: Any) -> StreamingQuery:
    """A query of the reactive source into parquet files (a sink that restarts from its
    checkpoint), under ``tmp_path``, with ``trigger`` (Spark's default without it)."""
    reader = spark.readStream.format("reactive")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    writer = (reader.load().writeStream.format("parquet").option("path", str(tmp_path / "out"))
              .option("checkpointLocation", str(tmp_path / "checkpoint")))
    query = (writer.trigger(**trigger) if trigger else writer).start()
    queries.append(query)
    return query


# -- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "two", "1025"])
def test_a_bad_shards_value_is_refused_naming_the_option(tmp_path: Path, value: str) -> None:
    with pytest.raises(OptionError, match=r"option shards="):
        parse_source_options(_options(tmp_path, shards=value))


def test_shards_need_a_wal_location() -> None:
    with pytest.raises(OptionError, match=r"option walLocation=None .*required with shards=2"):
        parse_source_options({"publisher": "range", "shards": "2"})


def test_shards_are_refused_for_a_factory_not_declared_sharded(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"option shards='2' .*declared @sharded"):
        read_stream(None, lambda options: IterablePublisher(lambda: iter([1])),
                    shards=2, walLocation=str(tmp_path / "wal"))


# -- the executors' side --------------------------------------------------------------------

def test_each_shard_gives_its_own_part_of_the_feed_in_epochs(tmp_path: Path) -> None:
    options = parse_source_options(_options(tmp_path, count=23, shards=2))
    for index, expected in ((0, list(range(0, 23, 2))), (1, list(range(1, 23, 2)))):
        seen = []
        for epoch in range(1, 5):
            shard_log, record = read_epoch(options, SCHEMA, range_publisher,
                                           Shard(index, 2), epoch, 5)
            seen += [v for b in epoch_batches(shard_log, record) for v in b.column(0).to_pylist()]
        assert seen == expected


def test_two_attempts_of_one_task_at_once_give_one_outcome(tmp_path: Path) -> None:
    # Each attempt's shard gives other rows (as two consumers of one queue would), so each
    # keeps a segment of its own; one publishes the epoch, the other gives its rows and
    # removes its segment.
    options = parse_source_options(_options(tmp_path, shards=1, fillWaitMs=5000))
    made = itertools.count()

    @sharded
    def factory(_options: Any) -> Any:
        first = 1000 * next(made)
        return IterablePublisher(lambda: iter(range(first, first + 400)))

    outcomes: list[tuple[str, list[int]]] = []
    started = threading.Barrier(2)

    def attempt() -> None:
        started.wait()
        shard_log, record = read_epoch(options, SCHEMA, factory, Shard(0, 1), 1, 400)
        outcomes.append((record.entry.name, [v for b in epoch_batches(shard_log, record)
                                             for v in b.column(0).to_pylist()]))

    attempts = [threading.Thread(target=attempt) for _ in range(2)]
    for thread in attempts:
        thread.start()
    for thread in attempts:
        thread.join(60)
    assert len(outcomes) == 2 and outcomes[0] == outcomes[1]
    name, rows = outcomes[0]
    assert rows in (list(range(400)), list(range(1000, 1400)))
    # The next epoch goes on after the kept rows, whichever attempt kept them.
    _, record = read_epoch(options, SCHEMA, range_publisher, Shard(0, 1), 2, 400)
    assert record.start == 400
    segments = [n.name for n in (tmp_path / "wal" / "shard-0000").iterdir()
                if n.name.startswith("00000000000000000000-")]
    assert segments == [name]  # the attempt that lost left no segment behind


class _Payloads(IterablePublisher[Any]):
    """A shard of messages some of which cannot become rows; ``skip_unfit_elements`` as
    the built-ins' ``badPayloads=skip`` sets it."""

    skip_unfit_elements = False
    durable = 0

    def on_durable(self, count: int) -> None:
        self.durable = count


@pytest.mark.parametrize("skip", [True, False])
def test_elements_that_cannot_become_rows_are_left_out_with_skip_and_fail_without(
        tmp_path: Path, skip: bool) -> None:
    options = parse_source_options(_options(tmp_path, shards=1, fillWaitMs=5000))
    values: list[Any] = [0, 1, "two", 3, 4, "five", *range(6, 200)]
    made: list[_Payloads] = []

    @sharded
    def factory(_options: Any) -> Any:
        publisher = _Payloads(lambda: iter(values))
        publisher.skip_unfit_elements = skip
        made.append(publisher)
        return publisher

    if not skip:
        with pytest.raises(ValueError, match="'two'"):
            read_epoch(options, SCHEMA, factory, Shard(0, 1), 1, 400)
        assert made[0].durable == 0  # nothing kept, nothing acknowledged
        return
    shard_log, record = read_epoch(options, SCHEMA, factory, Shard(0, 1), 1, 400)
    kept = [v for b in epoch_batches(shard_log, record) for v in b.column(0).to_pylist()]
    assert kept == [v for v in values if isinstance(v, int)]
    assert (record.start, record.end) == (0, len(kept))  # left out: no offset
    assert made[0].durable == len(values)  # acknowledged with the rows around them


class _Queue:
    """A queue that redelivers, at the next subscription, what it delivered and was not
    acknowledged: as an MQTT persistent session or a message queue does."""

    def __init__(self, messages: list[int]) -> None:
        self.waiting = list(messages)
        self.unacknowledged: list[int] = []
        self.lose_acknowledgements = False  # a crash between durable and acknowledged
        self.withhold = 0  # subscriptions that get no redelivery (an ack deadline)

    def publisher(self) -> Any:
        queue = self
        delivered: list[int] = []

        class Consumer(IterablePublisher[int]):
            def identity(self, message: int) -> str:
                return f"message-{message}"

            def pending(self) -> int:
                return len(queue.waiting)  # the queue's depth, as a broker tells it

            def on_durable(self, count: int) -> None:
                if not queue.lose_acknowledgements:
                    for message in delivered[:count]:
                        queue.unacknowledged.remove(message)

        def messages() -> Iterator[int]:
            if queue.withhold:
                queue.withhold -= 1
                redelivered, withheld = [], queue.unacknowledged
            else:
                redelivered, withheld = queue.unacknowledged, []
            queue.unacknowledged = list(withheld)
            for message in redelivered + list(queue.waiting):
                if message in queue.waiting:
                    queue.waiting.remove(message)
                queue.unacknowledged.append(message)
                delivered.append(message)
                yield message

        return Consumer(messages)


def _read_queue(tmp_path: Path, queue: _Queue, epochs: int, lost: tuple[int, ...],
                withheld: tuple[int, ...] = ()) -> list[int]:
    """The rows ``epochs`` epochs of one shard over ``queue`` keep, losing the
    acknowledgements of the epochs ``lost`` and withholding redelivery after ``withheld``."""
    options = parse_source_options(_options(tmp_path, shards=1, fillWaitMs=5000))

    @sharded
    def factory(_options: Any) -> Any:
        return queue.publisher()

    kept = []
    for epoch in range(1, epochs + 1):
        queue.lose_acknowledgements = epoch in lost  # kept, then killed before the ack
        queue.withhold = 1 if epoch in withheld else 0
        shard_log, record = read_epoch(options, SCHEMA, factory, Shard(0, 1), epoch, 4)
        kept += [v for b in epoch_batches(shard_log, record) for v in b.column(0).to_pylist()]
    return kept


def test_an_acknowledging_shard_repeats_nothing_after_a_lost_acknowledgement(
        tmp_path: Path) -> None:
    queue = _Queue(list(range(12)))
    assert _read_queue(tmp_path, queue, 4, lost=(2,)) == list(range(12))
    assert queue.unacknowledged == [] and queue.waiting == []


def test_a_redelivery_two_epochs_late_and_lost_twice_is_still_dropped(tmp_path: Path) -> None:
    # Epoch 2's acknowledgement is lost; the queue redelivers only at epoch 4, whose
    # acknowledgement is lost too, so the redeliveries come back once more at 5.
    queue = _Queue(list(range(20)))
    kept = _read_queue(tmp_path, queue, 8, lost=(2, 4), withheld=(2,))
    assert sorted(kept) == list(range(20)) and len(kept) == 20
    assert queue.unacknowledged == [] and queue.waiting == []


def test_an_attempt_that_publishes_after_its_epoch_was_committed_keeps_nothing(
        tmp_path: Path) -> None:
    options = parse_source_options(_options(tmp_path, shards=1, count=100))
    for epoch in range(1, 4):
        shard_log, _ = read_epoch(options, SCHEMA, range_publisher, Shard(0, 1), epoch, 10)
    shard_log.prune(3)  # Spark committed epoch 3: 1 and 2 are forgotten
    assert shard_log.record(1) is None and shard_log.record(3) is not None
    batch = pa.record_batch([pa.array([0, 1], pa.int64())], names=["value"])
    with pytest.raises(StaleAttempt, match="epoch 1 was committed"):
        shard_log.publish(1, 0, [batch], batch.schema, None)  # a late attempt of epoch 1
    assert shard_log.record(1) is None


def test_an_empty_attempt_that_loses_leaves_the_epoch_before_whole(tmp_path: Path) -> None:
    options = parse_source_options(_options(tmp_path, shards=1, count=4))
    shard_log, _ = read_epoch(options, SCHEMA, range_publisher, Shard(0, 1), 1, 10)
    _, second = read_epoch(options, SCHEMA, range_publisher, Shard(0, 1), 2, 10)
    assert (second.start, second.end) == (4, 4)  # the feed's end: an empty epoch
    # Epoch 3 from offset 4: an attempt that got two rows wins, an empty one loses (its
    # segment would be byte for byte epoch 2's, but for the epoch each one names).
    batch = pa.record_batch([pa.array([4, 5], pa.int64())], names=["value"])
    winner, mine = shard_log.publish(3, 4, [batch], batch.schema, None)
    loser, theirs = shard_log.publish(3, 4, [], batch.schema, None)
    assert mine and not theirs and loser == winner and (winner.start, winner.end) == (4, 6)
    assert shard_log.rows(second).num_rows == 0  # still there, still whole


def _run_available_now(options: Any, factory: Any) -> tuple[int, int]:
    """The rows and batches of an availableNow run over ``factory``'s shards, with
    Spark's calls made here: each batch's tasks read, then the batch is committed."""
    reader = ShardedStreamReader(options, SCHEMA, None)
    start, rows, batches = reader.initialOffset(), 0, 0
    reader.prepareForTriggerAvailableNow()
    while (end := reader.latestOffset(start, None)) != start:
        for partition in reader.partitions(start, end):
            _, record = read_epoch(options, SCHEMA, factory,
                                   Shard(partition.shard, reader.shards), partition.epoch,
                                   reader.share)
            rows += record.end - record.start
        reader.commit(end)
        start, batches = end, batches + 1
        assert batches < 20, "the run did not end"
    reader.stop()
    return rows, batches


def test_an_available_now_run_ends_at_its_bound_on_an_endless_feed(tmp_path: Path) -> None:
    options = parse_source_options(_options(tmp_path, shards=2, maxRecordsPerTrigger=20,
                                            availableNowMaxRecords=70))
    rows, _ = _run_available_now(options, range_publisher)
    assert 70 <= rows < 90


class _Untold(Publisher[int]):
    """A shard of ``range`` that cannot tell its backlog: its subscribe, no ``pending()``."""

    def __init__(self, told: Publisher[int]) -> None:
        self._told = told

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        self._told.subscribe(subscriber)


@sharded
def _untold(options: Any) -> Any:
    return _Untold(range_publisher(options))


@pytest.mark.parametrize(("factory", "batches"), [(range_publisher, 1), (_untold, 2)])
def test_an_available_now_run_reads_no_more_of_a_shard_that_told_0_pending(
        tmp_path: Path, factory: Any, batches: int) -> None:
    # Each shard's 10 integers fill its share: a shard that cannot tell is read again, to
    # find nothing; one that told 0 pending is not.
    options = parse_source_options(_options(tmp_path, shards=2, count=20,
                                            maxRecordsPerTrigger=20))
    assert _run_available_now(options, factory) == (20, batches)


def test_idle_shards_are_read_again_together_after_the_pause(tmp_path: Path) -> None:
    # Shards that cannot tell their backlog: idle is an epoch that brought nothing.
    options = parse_source_options(_options(tmp_path, shards=2, count=4, fillWaitMs=5000))
    reader = ShardedStreamReader(options, SCHEMA, None)
    start = reader.initialOffset()
    for _ in range(2):  # the feed's 4 rows, then an epoch that finds nothing
        end = reader.latestOffset(start, None)
        for partition in reader.partitions(start, end):
            read_epoch(options, SCHEMA, _untold, Shard(partition.shard, 2),
                       partition.epoch, 10)
        start = end
    planned = reader.latestOffset(start, None)  # idle, first look in this run: read at once
    assert planned == {"shards": {"0": 3, "1": 3}}
    for partition in reader.partitions(start, planned):
        read_epoch(options, SCHEMA, _untold, Shard(partition.shard, 2),
                   partition.epoch, 10)
    assert reader.latestOffset(planned, None) == planned  # both idle: no batch (5 s pause)
    assert reader._idle_at is not None
    reader._idle_at -= 5.0  # the pause, max(fillWaitMs, 1 s), has passed
    assert reader.latestOffset(planned, None) == {"shards": {"0": 4, "1": 4}}
    reader.stop()


def test_a_shard_that_told_0_pending_waits_for_the_idle_pause(tmp_path: Path) -> None:
    # A queue drained at each epoch: its epochs bring rows, and its depth is 0 after each.
    options = parse_source_options(_options(tmp_path, shards=1, fillWaitMs=5000))
    queue = _Queue([0, 1, 2])

    @sharded
    def factory(_options: Any) -> Any:
        return queue.publisher()

    reader = ShardedStreamReader(options, SCHEMA, None)
    start = reader.initialOffset()
    # Epoch 2 is planned at once: the first time this run finds an idle shard.
    for epoch, arrived, rows in ((1, [], 3), (2, [3, 4], 2)):
        queue.waiting += arrived
        start = reader.latestOffset(start, None)
        assert start == {"shards": {"0": epoch}}
        _, record = read_epoch(options, SCHEMA, factory, Shard(0, 1), epoch, 10)
        assert (record.end - record.start, record.pending) == (rows, 0)
    queue.waiting += [5]
    assert reader.latestOffset(start, None) == start  # rows, but 0 pending: the pause
    assert reader._idle_at is not None
    reader._idle_at -= 5.0  # the pause, max(fillWaitMs, 1 s), has passed
    assert reader.latestOffset(start, None) == {"shards": {"0": 3}}
    reader.stop()


def test_a_shards_backlog_is_kept_with_its_epoch_and_shown_as_its_lag(
        tmp_path: Path) -> None:
    # 25 integers in 2 shards (13 and 12), 5 a shard a batch: shard 0 tells what is left,
    # shard 1 cannot.
    options = parse_source_options(_options(tmp_path, shards=2, count=25,
                                            maxRecordsPerTrigger=10))
    reader = ShardedStreamReader(options, SCHEMA, None)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert reader.reportLatestOffset() == {"shards": {"0": 1, "1": 1},
                                           "positions": {"0": 0, "1": 0}}  # nobody told
    told = [read_epoch(options, SCHEMA, (range_publisher, _untold)[p.shard],
                       Shard(p.shard, 2), p.epoch, reader.share)[1].pending
            for p in reader.partitions(start, end)]
    assert told == [8, None]
    reader.commit(end)
    planned = reader.latestOffset(end, None)
    assert planned == {"shards": {"0": 2, "1": 2}}  # the offsets hold epochs only
    report = reader.reportLatestOffset()
    assert json.dumps(report) == ('{"shards": {"0": 2, "1": 2}, "positions": {"0": 5, '
                                  '"1": 5}, "lag": {"0": 8}}')
    reader.stop()


def test_a_wal_location_another_checkpoint_committed_to_is_refused(tmp_path: Path) -> None:
    options = parse_source_options(_options(tmp_path, shards=1, count=10))
    reader = ShardedStreamReader(options, SCHEMA, None)
    end = reader.latestOffset(reader.initialOffset(), None)
    read_epoch(options, SCHEMA, range_publisher, Shard(0, 1), 1, 10)
    reader.commit(end)
    reader.stop()
    fresh = ShardedStreamReader(options, SCHEMA, None)
    with pytest.raises(RuntimeError, match="holds the shard logs of another checkpoint"):
        fresh.latestOffset(fresh.initialOffset(), None)


def test_a_sharded_checkpoint_restarted_without_shards_names_the_option() -> None:
    with pytest.raises(OptionError, match=r"option shards=None .*shards=2, as the checkpoint"):
        reader_offset({"shards": {"0": 3, "1": 3}})


def test_shards_refuse_a_wal_location_without_hard_links_or_local_path() -> None:
    with pytest.raises(OptionError, match=r"option walLocation='s3://bucket/wal' .*hard link"):
        parse_source_options({"publisher": "range", "shards": "2",
                              "walLocation": "s3://bucket/wal"})


def test_a_shard_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    options = parse_source_options(_options(tmp_path, shards=1, count=10))
    read_epoch(options, SCHEMA, range_publisher, Shard(0, 1), 1, 5)
    (tmp_path / "wal" / "shard-0000").chmod(0o777)
    with pytest.raises(WalNotPrivate, match="writable by"):
        read_epoch(options, SCHEMA, range_publisher, Shard(0, 1), 2, 5)


def test_a_partition_carries_a_shard_and_an_epoch_not_rows(tmp_path: Path) -> None:
    options = parse_source_options(_options(tmp_path, shards=4, maxRecordsPerTrigger=10**9))
    reader = ShardedStreamReader(options, SCHEMA, None)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    partitions = reader.partitions(start, end)
    assert [p.shard for p in partitions] == [0, 1, 2, 3]
    assert max(len(cloudpickle.dumps(p)) for p in partitions) < 1024


def test_offsets_are_per_shard_and_a_restart_with_other_shards_is_refused(
        tmp_path: Path) -> None:
    reader = ShardedStreamReader(parse_source_options(_options(tmp_path, shards=2)), SCHEMA,
                                 None)
    start = reader.initialOffset()
    assert start == {"shards": {"0": 0, "1": 0}}
    assert reader.latestOffset(start, None) == {"shards": {"0": 1, "1": 1}}
    other = ShardedStreamReader(parse_source_options(_options(tmp_path, shards=3)), SCHEMA,
                                None)
    with pytest.raises(OptionError, match=r"option shards='3' .*written with 2 shards"):
        other.latestOffset({"shards": {"0": 1, "1": 1}}, None)
    with pytest.raises(OptionError, match=r"option shards='3' .*on the driver"):
        other.latestOffset({"offset": 40}, None)


# -- real Spark ------------------------------------------------------------------------------

@pytest.mark.spark_lines
def test_two_shards_read_on_the_executors_every_row_once_across_a_restart(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    options = _options(tmp_path, shards=2, maxRecordsPerTrigger=200, count=1000)
    first = _start(spark, queries, tmp_path, **options)
    watch.wait_rows(first, 400, timeout=180)
    first.stop()
    second = _start(spark, queries, tmp_path, **options)
    watch.wait_for(second, lambda: watch.rows(first) + watch.rows(second) >= 1000,
                   timeout=180, what="the feed's 1000 rows")
    second.stop()
    values = sorted(r.value for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert values == list(range(1000))
    # Each batch read both shards, 100 rows a shard at most.
    assert max(watch.batch_sizes(first) + watch.batch_sizes(second)) <= 200


@sharded
def _doubled(options: Any) -> Any:
    shard = options.shard
    first = options.resume.offset * shard.count + shard.index
    return IterablePublisher(lambda: iter(range(2 * first, 100, 2 * shard.count)))


def test_a_shipped_sharded_factory_reaches_the_executors(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    df = read_stream(spark, _doubled, schema="value BIGINT", shards=2,
                     walLocation=str(tmp_path / "wal"), maxRecordsPerTrigger=20)
    name = f"sharded_{uuid.uuid4().hex[:8]}"
    query = (df.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    queries.append(query)
    watch.wait_rows(query, 50, timeout=180)
    query.stop()
    assert sorted(r.value for r in spark.table(name).collect()) == list(range(0, 100, 2))


def test_every_partition_spark_ships_for_a_sharded_batch_is_under_1_kib_whatever_its_size(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # Spark's source runner (partitions_func) pickles each partition with pickleSer, and
    # the JVM ships those bytes inside the tasks: they are made here as it makes them, from
    # the offsets of each batch the two queries ran, 100 and 50,000 rows a shard.
    shipped: dict[str, list[int]] = {}
    rows: dict[str, list[int]] = {}
    lags: dict[str, list[dict[str, int] | None]] = {}
    for name, count, most in (("small", 1_000, 200), ("large", 100_000, 100_000)):
        folder = tmp_path / name
        options = _options(folder, shards=2, count=count, maxRecordsPerTrigger=most)
        query = _start(spark, queries, folder, trigger={"availableNow": True}, **options)
        assert watch.wait_drained(query, count, timeout=120) is None
        reader = ShardedStreamReader(parse_source_options(options), SCHEMA, None)
        shipped[name], rows[name], lags[name] = [], [], []
        for progress in watch.progress[str(query.runId)]:
            source = progress.sources[0]
            if not source.numInputRows:
                continue
            # No start offset before the first batch: "None" in a listener's progress.
            start = (reader.initialOffset() if source.startOffset in (None, "None")
                     else json.loads(source.startOffset))
            sizes = [len(pickleSer.dumps(partition))
                     for partition in reader.partitions(start, json.loads(source.endOffset))]
            print(f"{name}: batch {progress.batchId}, {source.numInputRows} rows, "
                  f"partitions of {sizes} bytes")
            shipped[name] += sizes
            rows[name].append(source.numInputRows)
            lags[name].append(json.loads(source.latestOffset).get("lag"))
        reader.stop()
        assert sum(rows[name]) == count and len(shipped[name]) == 2 * len(rows[name])
    assert max(rows["large"]) >= 500 * max(rows["small"])
    assert max(shipped["small"] + shipped["large"]) < 1024
    assert max(shipped["large"]) <= max(shipped["small"])  # rows are not in them
    # On the way: each shard's lag shows in progress (latestOffset, Spark 4.2+) once an
    # epoch has told it: 400 integers left a shard after the small run's first batch, ...
    assert lags == {"small": [None, *({"0": n, "1": n} for n in (400, 300, 200, 100))],
                    "large": [None]}


@pytest.mark.parametrize(("given", "share", "ended"), [
    ({"count": 5, "fillWaitMs": 5000}, 100, "completed"),  # ends within its share
    ({"fillWaitMs": 5000}, 100, "full"),              # endless and fast: the share fills
    ({"rowsPerSecond": 4, "fillWaitMs": 100}, 100, "paused"),   # nothing for fillWaitMs
    ({"rowsPerSecond": 500, "fillWaitMs": 2000}, 10_000, "capped"),  # still coming at the cap
])
def test_a_task_says_why_it_stopped_taking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           given: dict[str, Any], share: int,
                                           ended: str) -> None:
    if ended == "capped":
        monkeypatch.setattr(shard_task_module, "EPOCH_CAP_S", 0.6)
    options = parse_source_options(_options(tmp_path, shards=1, maxRecordsPerTrigger=share,
                                            **given))
    _, record = read_epoch(options, SCHEMA, range_publisher, Shard(0, 1), 1, share)
    assert record.ended == ended
