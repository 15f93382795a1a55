"""RedisStreamSubscriber against a real redis-server: the TCK (blackbox), a retried batch
adds nothing twice, a refused password fails it without showing the password, and a
query's output fed through ``SubscriberForeachWriter`` whose writer is killed once in the
middle of a batch leaves every row once in the stream after the restarted query runs the
batch again (the deduplication keys)."""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from redis_server import RedisServer
from test_source import reactive

from pyspark_reactive.sink.foreach_writer import SubscriberForeachWriter
from reactive_streams import IterablePublisher, Subscriber
from reactive_streams.adapters.redis_streams import RedisError, RedisStreamSubscriber
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.subscriber_blackbox import SubscriberBlackboxVerification


def _entries(server: RedisServer, stream: str) -> list[dict[str, Any]]:
    client = server.client()
    try:
        return [json.loads(fields[b"payload"]) for _, fields in client.xrange(stream)]
    finally:
        client.close()


class TestRedisStreamSubscriber(SubscriberBlackboxVerification[int]):
    """Each check's subscriber adds to a stream of its own, 4 elements a window."""

    @pytest.fixture(autouse=True)
    def _server(self, server: RedisServer) -> None:
        self.server = server

    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=2000,
                               default_no_signals_timeout_millis=100,
                               default_poll_timeout_millis=20)

    def create_subscriber(self) -> Subscriber[int]:
        return RedisStreamSubscriber(f"tck-out-{uuid.uuid4().hex[:8]}", port=self.server.port,
                                     password=self.server.password, window=4)

    def create_element(self, element: int) -> int:
        return element


def test_a_retried_batch_adds_nothing_twice(server: RedisServer, stream: str) -> None:
    for attempt in range(2):
        subscriber = RedisStreamSubscriber(stream, port=server.port, password=server.password,
                                           window=7, prefix="q-")
        subscriber._own_scope = "batch-7"  # what batch_scope() gives under Spark
        IterablePublisher(lambda: iter(range(50))).subscribe(subscriber)
        subscriber.wait_done(20)
        assert (subscriber.added, subscriber.repeated) == ((50, 0) if attempt == 0 else (0, 50))
    assert _entries(server, stream) == list(range(50))


def test_a_refused_password_fails_it_and_is_never_shown(server: RedisServer,
                                                          stream: str) -> None:
    subscriber = RedisStreamSubscriber(stream, port=server.port, password="wrong-secret-1")
    IterablePublisher(lambda: iter(range(3))).subscribe(subscriber)
    with pytest.raises(RedisError, match="refused the credentials") as raised:
        subscriber.wait_done(20)
    assert "wrong-secret-1" not in str(raised.value)


class KilledOnceMidBatch(RedisStreamSubscriber[Any]):
    """Its second send adds half of its rows and then ends its Python worker (as a kill
    would), in the first task to get there (``marker`` is made once): the task fails in
    the middle of a batch, and so does the query (local mode tries a task once)."""

    def __init__(self, marker: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker = marker
        self.sends = 0

    def _send(self, elements: Sequence[tuple[str, Any]]) -> None:
        self.sends += 1
        if self.sends == 2:
            try:
                open(self.marker, "x").close()
            except FileExistsError:
                pass
            else:
                super()._send(elements[:len(elements) // 2])
                os._exit(17)
        super()._send(elements)


def _writer(marker: str, port: int, password: str, stream: str, partition: int,
            epoch: int) -> Subscriber[Any]:
    return KilledOnceMidBatch(marker, stream=stream, port=port, password=password, window=16)


def test_a_batch_failed_mid_way_and_run_again_leaves_every_row_once(
        spark: SparkSession, server: RedisServer, stream: str, tmp_path: Path) -> None:
    count = 400
    marker = str(tmp_path / "failed-once")
    writer = SubscriberForeachWriter(functools.partial(
        _writer, marker, server.port, server.password, stream))
    queries: list[StreamingQuery] = []

    def run() -> StreamingQuery:
        df = reactive(spark, publisher="range", count=count, maxRecordsPerTrigger=count,
                      numPartitions=2, walLocation=tmp_path / "wal").load()
        query = (df.writeStream.foreach(writer)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        queries.append(query)
        return query

    try:
        first = run()
        with pytest.raises(StreamingQueryException):
            first.awaitTermination(120)
        assert os.path.exists(marker)
        written = len(_entries(server, stream))
        assert 0 < written < count  # the batch failed part-way
        again = run()  # from the same checkpoint: the batch runs again
        again.processAllAvailable()
        again.stop()
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    values = [next(iter(entry.values())) for entry in _entries(server, stream)]
    assert sorted(values) == list(range(count))  # every row, once
