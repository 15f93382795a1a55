"""SubscriberForeachWriter with real Spark: subscribers made on the executors, one per task,
fed against their demand; its arguments checked where they are given."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pyspark_reactive import SubscriberForeachWriter
from pyspark_reactive.sink.foreach_writer import TaskGone, _TaskLink, _TaskSubscription
from reactive_streams import Subscriber, SyncSubscriber


def ranged(spark: SparkSession, **options: Any) -> Any:
    """A streaming DataFrame of the built-in ``range`` publisher."""
    reader = spark.readStream.format("reactive").option("publisher", "range")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()



class FileSubscriber(SyncSubscriber[Any]):
    """Runs on an executor; writes what it saw to a file the test reads."""

    def __init__(self, path: str, take: int | None) -> None:
        super().__init__(batch_size=7)
        self.path = path
        self.take = take
        self.values: list[int] = []

    def on_element(self, row: Any) -> bool:
        self.values.append(row.value)
        return self.take is None or len(self.values) < self.take

    def on_finished(self, error: BaseException | None) -> None:
        with open(self.path, "w") as out:
            json.dump({"values": self.values, "error": repr(error) if error else None,
                       "outstanding": self.outstanding}, out)


@pytest.mark.parametrize("take", [pytest.param(None, marks=pytest.mark.spark_lines), 10])
def test_foreach_writer_feeds_subscribers_on_executors(spark: SparkSession, tmp_path: Path,
                                                       take: int | None) -> None:
    out = str(tmp_path)

    def factory(partition: int, epoch: int) -> Subscriber[Any]:
        return FileSubscriber(f"{out}/p{partition}-e{epoch}.json", take)

    df = ranged(spark, count=2000, maxRecordsPerTrigger=2000, numPartitions=2)
    query = (df.writeStream.foreach(SubscriberForeachWriter(factory))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    results = [json.loads(p.read_text()) for p in tmp_path.glob("p*-e*.json")]
    assert len(results) == 2 and all(r["error"] is None for r in results)
    values = sorted(v for r in results for v in r["values"])
    if take is None:
        assert values == list(range(2000))
    else:
        # Each cancels after 10 rows: the rest of its task is dropped, not retried.
        assert [len(r["values"]) for r in results] == [10, 10]


@pytest.mark.spark_lines
def test_task_subscription_rules() -> None:
    subscription = _TaskSubscription()
    subscription.request(2**62)
    subscription.request(2**62)
    assert subscription.demand == 2**63 - 1  # §3.17
    subscription.request(0)
    assert isinstance(subscription.failure, ValueError) and "§3.9" in str(subscription.failure)
    subscription.cancel()
    subscription.cancel()  # §3.5
    assert subscription.cancelled
    assert subscription.wait_for_demand(0.01)



class Idle(Subscriber[Any]):
    """Never requests anything."""

    def on_subscribe(self, subscription: Any) -> None:
        pass

    def on_next(self, element: Any) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass

    def on_complete(self) -> None:
        pass


@pytest.mark.parametrize("value", ["5", -1, 0, float("nan"), True, [5]])
def test_demand_timeout_is_checked_where_it_is_given(value: Any) -> None:
    # Not in process() on an executor, where it used to fail a task far from the mistake.
    with pytest.raises(ValueError, match=rf"demand_timeout={re.escape(repr(value))} is not "
                                         r"accepted: None .* or a positive number of seconds"):
        SubscriberForeachWriter(lambda partition, epoch: Idle(), demand_timeout=value)


@pytest.mark.parametrize("value", [None, 5, 0.25])
def test_demand_timeout_accepted(value: Any) -> None:
    writer = SubscriberForeachWriter(lambda partition, epoch: Idle(), demand_timeout=value)
    assert writer.demand_timeout == value


class TakesOne(Idle):
    """Requests one row and no more; on an executor, says which worker waits and how the
    subscription ended."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_subscribe(self, subscription: Any) -> None:
        subscription.request(1)

    def on_next(self, element: Any) -> None:
        # The task's next process() now waits for demand that never comes.
        Path(self.out, f"worker-{os.getpid()}").touch()

    def on_error(self, error: BaseException) -> None:
        Path(self.out, "on_error").write_text(str(error))

    def on_complete(self) -> None:
        Path(self.out, "on_complete").touch()


def test_stop_frees_a_task_waiting_for_demand(spark: SparkSession, tmp_path: Path) -> None:
    # With no demand_timeout the wait has no bound of its own: it must end when Spark ends
    # the task, or the Python worker stays blocked for good after query.stop().
    out = str(tmp_path)
    df = ranged(spark, count=100, maxRecordsPerTrigger=100, numPartitions=1)
    # One batch of 100 rows, one task: the one that waits.
    query = (df.writeStream.foreach(SubscriberForeachWriter(lambda p, e: TakesOne(out)))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    deadline = time.monotonic() + 120
    # Nothing signals from an executor to the test: look for the file every 50 ms.
    while not list(tmp_path.glob("worker-*")) and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    [marker] = tmp_path.glob("worker-*")
    worker = int(marker.name.split("-")[1])
    exited = os.pidfd_open(worker)  # readable once the process has ended
    try:
        query.stop()
        assert select.select([exited], [], [], 20)[0], \
            f"the worker {worker} still waits for demand 20 s after query.stop()"
    finally:
        os.close(exited)
    # The subscriber learns that its task ended before all its rows came.
    assert "Spark ended the task" in (tmp_path / "on_error").read_text()
    assert not (tmp_path / "on_complete").exists()


@pytest.mark.spark_lines
def test_a_wait_for_demand_ends_when_the_executor_closes_the_task_socket() -> None:
    # The worker's side of its socket to the executor, with rows still unread in it.
    worker_end, executor_end = socket.socketpair()
    executor_leaves = threading.Timer(0.2, executor_end.close)
    try:
        link = _TaskLink(worker_end.fileno())
        executor_end.sendall(b"rows not read yet")
        assert not link.gone()
        executor_leaves.start()
        started = time.monotonic()
        with pytest.raises(TaskGone, match="Spark ended the task"):
            _TaskSubscription().wait_for_demand(None, link)
        assert time.monotonic() - started < 5
    finally:
        executor_leaves.cancel()
        executor_leaves.join()
        worker_end.close()
        executor_end.close()


class _Confirmed(Subscriber[Any]):
    """A subscriber with wait_done(), as the broker subscribers have: it requests 8 and
    raises from on_next at ``bad`` (breaking §2.13), or refuses at ``refuse``."""

    def __init__(self, bad: int | None = None, refuse: int | None = None) -> None:
        self.bad, self.refuse = bad, refuse
        self.done = threading.Event()
        self.failure: BaseException | None = None
        self.subscription: Any = None

    def on_subscribe(self, subscription: Any) -> None:
        self.subscription = subscription
        subscription.request(8)

    def on_next(self, element: Any) -> None:
        if element == self.bad:
            raise TypeError("cannot encode this row")
        if element == self.refuse:
            self.failure = RuntimeError("the broker refused a row")
            self.subscription.cancel()
            self.done.set()

    def on_error(self, error: BaseException) -> None:
        self.done.set()

    def on_complete(self) -> None:
        self.done.set()

    def wait_done(self) -> None:
        assert self.done.wait(5), "close() waited on a subscriber that got no terminal signal"
        if self.failure is not None:
            raise self.failure


def _task(subscriber: _Confirmed) -> None:
    writer = SubscriberForeachWriter(lambda partition, epoch: subscriber)
    writer.open(0, 0)
    for value in range(5):
        writer.process(value)
    writer.close(None)


def test_close_raises_what_wait_done_raises_after_the_subscriber_cancelled() -> None:
    # A refusal: the subscriber cancelled, the task's other rows were dropped, and the
    # task fails so that Spark runs it again.
    with pytest.raises(RuntimeError, match="refused a row"):
        _task(_Confirmed(refuse=2))


def test_close_does_not_wait_on_a_subscriber_that_broke_a_rule() -> None:
    # §2.13: on_next raised; the writer treats it as cancelled and signals nothing more,
    # so wait_done() would never return: close() leaves it.
    _task(_Confirmed(bad=2))
