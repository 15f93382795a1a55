"""The TCK as oracle for ForeachBatchPublisher, fed by real streaming queries: every
publisher a check asks for is a query reading the built-in ``range`` (or a failing
publisher) through ``spark.readStream.format("reactive")`` with availableNow."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pyspark_reactive import ForeachBatchPublisher, publish
from reactive_streams import Publisher
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.publisher import PublisherVerification


class TestForeachBatchPublisher(PublisherVerification[Any]):
    spark: SparkSession
    checkpoints: Path

    @pytest.fixture(autouse=True)
    def _spark(self, spark: SparkSession, tmp_path: Path) -> Iterator[None]:
        self.spark = spark
        self.checkpoints = tmp_path
        self.started: list[ForeachBatchPublisher] = []
        yield
        for publisher in self.started:
            if publisher.query.isActive:
                publisher.query.stop()

    def create_test_environment(self) -> TestEnvironment:
        # A query takes a second or two to plan and run its first micro-batch, and up to
        # 20 s as the first of a session on a loaded 2-core machine: the timeout bounds
        # only waits for a signal that must come, so a generous one costs nothing. Polls
        # for an expected error every 50 ms: the poll interval defaults to the whole
        # timeout, which made each §3.9 check wait its full 30 s.
        return TestEnvironment(default_timeout_millis=30_000,
                               default_no_signals_timeout_millis=300,
                               default_poll_timeout_millis=50)

    def stochastic_runs(self, default: int) -> int:
        # Each run is a whole streaming query (about 2 s here, 4 beside the other lane of
        # ./dev test); a tenth of the reference kit's 100 keeps the check near 20 to 40 s.
        return default // 10

    def test_optional_spec111_multicast_must_produce_the_same_elements_in_the_same_sequence_to_all_of_its_subscribers_when_requesting_one_by_one(  # noqa: E501
            self) -> None:
        # Declared unsupported rather than run: the check expects on_complete for the 3rd
        # subscriber while the 1st and 2nd still owe requests, and a batch ends (so the
        # stream completes) only once every subscriber took it: a slow subscriber holds
        # the others back by design. Run, it waits its full 30 s and skips with this reason.
        pytest.skip("OPTIONAL requirement not implemented. §1.11: a batch "
                    "ends only once every subscriber took it, so the 3rd subscriber's "
                    "on_complete waits for the 1st and 2nd, whose requests this check makes "
                    "only after it")

    def _publish(self, **options: Any) -> ForeachBatchPublisher:
        reader = self.spark.readStream.format("reactive")
        for key, value in options.items():
            reader = reader.option(key, str(value))
        publisher = publish(reader.schema("value BIGINT").load(), element="tuple",
                            trigger={"availableNow": True},
                            checkpointLocation=self.checkpoints / uuid.uuid4().hex)
        self.started.append(publisher)
        return publisher

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return self._publish(publisher="range", count=elements, maxRecordsPerTrigger=1000)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return self._publish(publisher="spark_publishers:failing", count=0,
                             message="the upstream of this query is unavailable")
