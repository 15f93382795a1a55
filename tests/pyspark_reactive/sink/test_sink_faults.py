"""Faults around ``publish()`` and ``ForeachBatchPublisher``, with real Spark: a subscriber
that stops requesting (``demand_timeout`` with ``when_stalled``), a query that fails in the
middle of a batch, and a restart from the same checkpoint after such a failure.

The queries read Spark's ``rate-micro-batch`` source: each batch ``k`` holds the values
``[k * ROWS, (k + 1) * ROWS)`` spread over ``PARTS`` partitions (value ``v`` in partition
``v % PARTS``), and a re-run of a batch yields the same rows in the same order, whatever
the source's own state, so what the sink redelivers is the sink's doing alone.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, udf
from test_sink import Checked

from pyspark_reactive import ForeachBatchPublisher, publish
from reactive_streams.adapters._confirming import BrokerRefused, ConfirmingSubscriber

ROWS = 100  # per micro-batch
PARTS = 4  # partitions per micro-batch


@pytest.fixture(autouse=True)
def _stop_queries(spark: SparkSession) -> Iterator[None]:
    yield
    for query in spark.streams.active:
        query.stop()


def numbers(spark: SparkSession) -> DataFrame:
    return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS)
            .option("numPartitions", PARTS).load().select("value"))


def failing_at(df: DataFrame, value: int, flag: Path) -> DataFrame:
    """``df`` through a Python UDF that raises on ``value`` while the file ``flag`` exists."""
    path = str(flag)

    def check(v: int) -> int:
        if v == value and os.path.exists(path):
            raise ValueError(f"bad row {v}")
        return v

    # A lambda: Spark reads no type hints from it (the string ones here would warn).
    return df.select(udf(lambda v: check(v), "bigint")(col("value")).alias("value"))


class Stalls(Checked):
    """Requests ``batch`` rows once, then never again."""

    def on_next(self, element: Any) -> None:
        self.outstanding += 1 << 30  # never used up: Checked requests nothing more
        super().on_next(element)
        self.outstanding -= 1 << 30


class Stamps(Checked):
    """Records ``publisher.batch_id`` as read in each ``on_next``."""

    def __init__(self, batch: int) -> None:
        super().__init__(batch)
        self.publisher: ForeachBatchPublisher | None = None
        self.batch_ids: list[int | None] = []

    def on_next(self, element: Any) -> None:
        assert self.publisher is not None
        self.batch_ids.append(self.publisher.batch_id)
        super().on_next(element)


# -- a subscriber that stops requesting --------------------------------------------------


def failed_by_a_stall(spark: SparkSession, checkpoint: Path) -> Stalls:
    """Run a query with ``demand_timeout=0.5`` (``when_stalled`` left at its default,
    ``"fail"``) and a subscriber that stops requesting after 10 rows to its end; check the
    error named the subscriber and the timeout, reached it as ``on_error``, and that batch 0
    was not committed; return the subscriber."""
    publisher = publish(numbers(spark), element="tuple", demand_timeout=0.5,
                        checkpointLocation=checkpoint)
    subscriber = Stalls(10)
    publisher.subscribe(subscriber)
    expected = (re.escape(repr(subscriber)) + r" requested no row for demand_timeout=0\.5 s "
                r"while rows of batch 0 waited for it \(when_stalled='fail'\)")
    with pytest.raises(Exception, match=expected):
        publisher.query.awaitTermination(120)
    assert subscriber.done.wait(60) and not subscriber.completed
    assert re.search(expected, str(subscriber.error)), subscriber.error
    assert not (checkpoint / "commits" / "0").exists()  # nothing lost: it runs again
    return subscriber


@pytest.mark.spark_lines
def test_demand_timeout_fail_fails_the_batch_naming_the_subscriber(spark: SparkSession,
                                                                   tmp_path: Path) -> None:
    subscriber = failed_by_a_stall(spark, tmp_path / "checkpoint")
    assert [v for (v,) in subscriber.elements] == [0, 4, 8, 12, 16, 20, 24, 28, 32, 36]


def test_demand_timeout_cancel_ends_that_subscriber_and_the_others_go_on(
        spark: SparkSession, tmp_path: Path) -> None:
    publisher = publish(numbers(spark), element="tuple", demand_timeout=0.5,
                        when_stalled="cancel", checkpointLocation=tmp_path / "checkpoint")
    staller, reader = Stalls(10), Checked(50)
    publisher.subscribe(staller)
    publisher.subscribe(reader)
    assert staller.done.wait(60) and not staller.completed
    assert isinstance(staller.error, TimeoutError), staller.error
    assert re.search(r"requested no row for demand_timeout=0\.5 s while rows of batch 0 "
                     r"waited for it, so its subscription is cancelled "
                     r"\(when_stalled='cancel'\)", str(staller.error))
    reader.wait_for(3 * ROWS)  # batch 0 and two more
    assert reader.error is None and reader.violations == []
    assert sorted(v for (v,) in reader.elements[:3 * ROWS]) == list(range(3 * ROWS))
    assert len(staller.elements) == 10 and publisher.query.isActive
    assert publisher.subscribers == 1


def test_demand_timeout_counts_from_the_last_row_taken(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    # One row at a time, each requested 0.25 s after the last arrived: the rows on offer
    # wait 2 s for 8 of them, but never 0.75 s on end, so the subscriber is slow, not
    # stalled, and the timeout must not fire.
    class Dawdles(Checked):
        def on_next(self, element: Any) -> None:
            self.outstanding += 1 << 30
            super().on_next(element)
            self.outstanding -= 1 << 30
            assert self.subscription is not None
            later = threading.Timer(0.25, self.subscription.request, (1,))
            later.daemon = True
            later.start()

    publisher = publish(numbers(spark), element="tuple", demand_timeout=0.75,
                        checkpointLocation=tmp_path / "checkpoint")
    subscriber = Dawdles(1)
    publisher.subscribe(subscriber)
    subscriber.wait_for(8, timeout=60)
    assert subscriber.error is None and publisher.query.isActive
    assert subscriber.violations == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"demand_timeout": 0}, r"demand_timeout=0 is not accepted: None \(wait as long as the "
                            r"subscriber takes\) or a positive number of seconds"),
    ({"demand_timeout": -1.5}, "demand_timeout=-1.5 is not accepted"),
    ({"demand_timeout": "5"}, "demand_timeout='5' is not accepted"),
    ({"demand_timeout": True}, "demand_timeout=True is not accepted"),
    ({"demand_timeout": math.nan}, "demand_timeout=nan is not accepted"),
    ({"demand_timeout": math.inf}, "demand_timeout=inf is not accepted"),
    ({"when_stalled": "drop"}, "when_stalled='drop' is not accepted: one of fail, cancel"),
    ({"when_stalled": None}, "when_stalled=None is not accepted: one of fail, cancel"),
])
def test_bad_stall_arguments(spark: SparkSession, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ForeachBatchPublisher(**kwargs)
    active = len(spark.streams.active)
    with pytest.raises(ValueError, match=message):
        publish(spark.range(1), **kwargs)
    assert len(spark.streams.active) == active  # refused before a query started


# -- a query that fails in the middle of a batch ------------------------------------------


def failed_at_250(spark: SparkSession, tmp_path: Path) -> tuple[Path, list[Checked]]:
    """Run a query whose UDF raises on value 250 (batch 2) to its end, with two
    subscribers; return its checkpoint and the subscribers, each checked to have got
    ``on_error`` (not ``on_complete``) at the end."""
    flag = tmp_path / "fail"
    flag.touch()
    checkpoint = tmp_path / "checkpoint"
    publisher = publish(failing_at(numbers(spark), 250, flag), element="tuple",
                        checkpointLocation=checkpoint)
    subscribers = [Checked(7), Checked(100)]
    for subscriber in subscribers:
        publisher.subscribe(subscriber)
    for subscriber in subscribers:
        assert subscriber.done.wait(120), f"{len(subscriber.elements)} rows, no terminal signal"
        assert not subscriber.completed and subscriber.error is not None
    assert not (checkpoint / "commits" / "2").exists()
    return checkpoint, subscribers


@pytest.mark.spark_lines
def test_a_udf_failing_mid_batch_reaches_every_subscriber_as_on_error(
        spark: SparkSession, tmp_path: Path) -> None:
    checkpoint, subscribers = failed_at_250(spark, tmp_path)
    assert (checkpoint / "commits" / "1").exists()
    for subscriber in subscribers:
        assert "ValueError: bad row 250" in str(subscriber.error)
        values = [v for (v,) in subscriber.elements]
        # Batches 0 and 1 whole, then batch 2's partitions before the one holding 250.
        assert sorted(values[:2 * ROWS]) == list(range(2 * ROWS))
        assert values[2 * ROWS:] == [v for p in (0, 1) for v in range(200 + p, 300, PARTS)]


@pytest.mark.spark_lines
def test_a_batch_waits_for_every_on_next_and_batch_id_names_its_batch(spark: SparkSession,
                                                                       tmp_path: Path) -> None:
    # The lagging subscriber is still in on_next with batch 0's last row after the leading
    # one has taken all of batch 0: batch 0 has not ended (a row counts as taken once its
    # on_next returned), so batch 1 has not begun; batch_id read in each on_next is the
    # batch of that element.
    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS)
          .option("numPartitions", 1).load().select("value"))
    publisher = publish(df, element="tuple", checkpointLocation=tmp_path / "checkpoint")
    seen_then: list[int | None] = []

    class Lags(Stamps):
        def on_next(self, element: Any) -> None:
            if element == (ROWS - 1,):
                leading.wait_for(ROWS)
                seen_then.append(publisher._batch_id)
            super().on_next(element)

    lagging, leading = Lags(1000), Stamps(1000)
    for subscriber in (lagging, leading):
        subscriber.publisher = publisher
        publisher.subscribe(subscriber)
    lagging.wait_for(2 * ROWS)
    leading.wait_for(2 * ROWS)
    assert seen_then == [0]
    for subscriber in (lagging, leading):
        seen = list(zip(subscriber.batch_ids, subscriber.elements, strict=True))[:2 * ROWS]
        assert [(b, v) for b, (v,) in seen] == [(v // ROWS, v) for v in range(2 * ROWS)]


# -- a restart from the same checkpoint ------------------------------------------------


def test_a_restart_redelivers_the_failed_batch_whole_under_the_same_id(
        spark: SparkSession, tmp_path: Path) -> None:
    flag = tmp_path / "fail"
    flag.touch()
    checkpoint = tmp_path / "checkpoint"
    df = failing_at(numbers(spark), 250, flag)

    first = publish(df, element="tuple", checkpointLocation=checkpoint)
    before = Stamps(64)
    before.publisher = first
    first.subscribe(before)
    assert before.done.wait(60) and before.error is not None
    assert "bad row 250" in str(before.error)

    flag.unlink()  # the cause is fixed; the same query restarts from its checkpoint
    second = publish(df, element="tuple", checkpointLocation=checkpoint)
    after = Stamps(64)
    after.publisher = second
    second.subscribe(after)
    after.wait_for(2 * ROWS)  # batches 2 and 3
    second.query.stop()

    def by_batch(subscriber: Stamps) -> dict[int, list[int]]:
        batches: dict[int, list[int]] = {}
        for batch_id, (value,) in zip(subscriber.batch_ids, subscriber.elements, strict=True):
            assert batch_id is not None
            batches.setdefault(batch_id, []).append(value)
        return batches

    old, new = by_batch(before), by_batch(after)
    assert list(old) == [0, 1, 2] and list(new)[:2] == [2, 3]
    # Batch 2 again, under the same id: whole this time, in the same order, so the rows
    # the failed run had delivered are its first ones.
    assert sorted(new[2]) == list(range(200, 300))
    assert 0 < len(old[2]) < ROWS and new[2][:len(old[2])] == old[2]
    # The recipe of docs/how-to/exactly-once.md: keep (last batch id, rows of it handled);
    # skip those after a restart. Every value then arrives exactly once.
    last_id, handled = max(old), len(old[max(old)])
    kept = [v for b in old for v in old[b]]
    for batch_id, values in new.items():
        assert batch_id >= last_id
        kept += values[handled:] if batch_id == last_id else values
    assert sorted(kept) == list(range(len(kept))) and len(kept) >= 4 * ROWS


class _Confirming(ConfirmingSubscriber[tuple[int]]):
    """A subscriber that hands rows on as a broker subscriber does (confirmed in groups),
    refusing the row ``refuse`` as a broker's negative acknowledgement would."""

    def __init__(self, refuse: int | None) -> None:
        super().__init__(window=32)
        self.refuse = refuse
        self.kept: dict[str, int] = {}
        self.two_batches = threading.Event()

    def _open(self) -> None:
        pass

    def _send(self, elements: Any) -> None:
        for _key, (value,) in elements:
            if value == self.refuse:
                raise BrokerRefused(f"the broker refused row {value}")
        self.kept.update((key, value) for key, (value,) in elements)
        if len(self.kept) >= 2 * ROWS:
            self.two_batches.set()

    def _close(self) -> None:
        pass


def test_a_refusing_broker_subscriber_fails_the_batch_and_the_retry_keys_rows_alike(
        spark: SparkSession, tmp_path: Path) -> None:
    # A ConfirmingSubscriber defers confirmation: a batch ends only once its rows are
    # confirmed, and a refusal fails the batch (fail_batch), so Spark commits none of it.
    checkpoint = tmp_path / "checkpoint"
    first = publish(numbers(spark), element="tuple", checkpointLocation=checkpoint)
    refusing = _Confirming(refuse=250)
    first.subscribe(refusing)
    with pytest.raises(BrokerRefused, match="refused row 250"):
        refusing.wait_done(timeout=120)
    with pytest.raises(Exception, match="refused row 250"):  # Spark's StreamingQueryException
        first.query.awaitTermination(60)

    second = publish(numbers(spark), element="tuple", checkpointLocation=checkpoint)
    accepting = _Confirming(refuse=None)
    second.subscribe(accepting)
    # Batches 2 and 3 confirmed (each confirmation is what the batch's end waits for).
    assert accepting.two_batches.wait(120), f"only {len(accepting.kept)} rows confirmed"
    second.query.stop()
    # Batch 2 again: its rows carry the same keys as in the failed run (query, batch and
    # row), so a broker deduplicating on them keeps each row once.
    again = {key: value for key, value in accepting.kept.items() if 200 <= value < 300}
    earlier = {key: value for key, value in refusing.kept.items() if 200 <= value < 300}
    assert 0 < len(earlier) < ROWS
    assert all(again[key] == value for key, value in earlier.items())
    assert sorted(again.values()) == list(range(200, 300))
