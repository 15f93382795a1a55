"""Rounds of demand for :func:`~pyspark_reactive.publish_on_demand`, shared by the classic,
Spark Connect and serverless-guard tests: the same scenario on each kind of session."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

from polling import wait_until
from spark_publishers import handed_out

from pyspark_reactive import OnDemandPublisher, publish_on_demand
from reactive_streams import Subscriber, Subscription

# Each round requests this many rows: three rounds, each a different size.
ROUNDS = (30, 45, 20)


class Rounds(Subscriber[Any]):
    """Requests only when the test says so; records rows and §1.1 violations."""

    def __init__(self) -> None:
        self.elements: list[Any] = []
        self.outstanding = 0
        self.violations: list[str] = []
        self.error: BaseException | None = None
        self.completed = False
        self.done = threading.Event()
        self.subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription

    def request(self, n: int) -> None:
        assert self.subscription is not None
        self.outstanding += n
        self.subscription.request(n)

    def on_next(self, element: Any) -> None:
        if self.outstanding <= 0:
            self.violations.append(f"§1.1: element {len(self.elements)} without demand")
        self.outstanding -= 1
        self.elements.append(element)

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def on_complete(self) -> None:
        self.completed = True
        self.done.set()


def queue_query(spark: Any, folder: Path, max_records: int = 20) -> Any:
    """``build(bound)`` over the endless, non-replayable ``queue`` publisher (each element
    handed out once across runs, recorded in ``folder/emitted``), with a write-ahead log."""
    def build(bound: int) -> Any:
        return (spark.readStream.format("reactive")
                .option("publisher", "spark_publishers:queue")
                .option("emittedTo", str(folder / "emitted"))
                .option("walLocation", str(folder / "wal"))
                .option("maxRecordsPerTrigger", str(max_records))
                .option("availableNowMaxRecords", str(bound))
                .schema("value BIGINT").load())
    return build


def run_rounds(spark: Any, folder: Path, **publish: Any) -> tuple[OnDemandPublisher, Rounds]:
    """Three rounds of demand over the queue; checks each round and the whole."""
    publisher = publish_on_demand(queue_query(spark, folder), element="tuple",
                                  checkpointLocation=folder / "checkpoint", **publish)
    subscriber = Rounds()
    publisher.subscribe(subscriber)
    wait_until(lambda: subscriber.subscription is not None, 30, "on_subscribe")
    total = 0
    ended_with = 0
    for demand in ROUNDS:
        # Nothing requested: no run has started since the last round's runs ended.
        runs_before = len(publisher.run_bounds)
        assert runs_before == ended_with, publisher.run_bounds
        assert publisher.query is None or not publisher.query.isActive
        subscriber.request(demand)
        total += demand
        wait_until(lambda wanted=total: len(subscriber.elements) >= wanted  # type: ignore[misc]
                   or subscriber.done.is_set(), 180, f"{total} rows")
        wait_until(lambda: not publisher.query.isActive, 120, "the round's last run ended")
        assert subscriber.error is None, subscriber.error
        assert len(subscriber.elements) == total  # exactly the demand, nothing beyond
        bounds = publisher.run_bounds[runs_before:]
        # Each run was bounded by what was outstanding when it started: the first by the
        # whole round, any later one by what the earlier ones left.
        assert bounds and bounds[0] == demand, publisher.run_bounds
        assert all(later < earlier for earlier, later in itertools.pairwise(bounds)), bounds
        ended_with = len(publisher.run_bounds)
    assert subscriber.violations == []
    values = [value for (value,) in subscriber.elements]
    assert values == list(range(total))  # every row once, in order, across the runs
    # Everything the publisher handed out was delivered or is kept in the log for the
    # next run: nothing handed out beyond what was delivered is lost.
    emitted = handed_out(folder / "emitted")
    assert emitted[:total] == values
    return publisher, subscriber
