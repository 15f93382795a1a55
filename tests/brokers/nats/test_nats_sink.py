"""JetStreamSubscriber against a real nats-server: the TCK's blackbox subscriber checks,
publish acknowledgements awaited before more is requested, a refusal stopping it, and a
query's output through ``SubscriberForeachWriter`` whose batch fails mid-way once and is
run again: every row is in the stream once (``Nats-Msg-Id`` within the duplicate window)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats_server
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from streaming import ProgressWatch, install

from pyspark_reactive import SubscriberForeachWriter
from reactive_streams import IterablePublisher, Subscriber
from reactive_streams.adapters._confirming import BrokerRefused
from reactive_streams.adapters.nats_jetstream import JetStreamSubscriber
from reactive_streams.tck.environment import TestEnvironment
from reactive_streams.tck.subscriber_blackbox import SubscriberBlackboxVerification


@pytest.fixture(scope="module")
def sink_stream(nats: nats_server.Server) -> str:
    name = f"SINK{uuid.uuid4().hex[:8]}"
    nats_server.create_stream(nats, name)
    return name


class TestJetStreamSubscriber(SubscriberBlackboxVerification[Any]):
    @pytest.fixture(autouse=True)
    def _server(self, nats: nats_server.Server, sink_stream: str) -> None:
        self.server, self.stream = nats, sink_stream

    def create_test_environment(self) -> TestEnvironment:
        return TestEnvironment(default_timeout_millis=3000,
                               default_no_signals_timeout_millis=100,
                               default_poll_timeout_millis=20)

    def create_subscriber(self) -> Subscriber[Any]:
        return JetStreamSubscriber(self.server.url, f"{self.stream}.tck", window=4,
                                   **self.server.credentials)

    def create_element(self, element: int) -> Any:
        return element


def test_each_message_once_with_its_key_and_a_refusal_stops_it(
        nats: nats_server.Server, stream: str) -> None:
    sink: JetStreamSubscriber[Any] = JetStreamSubscriber(
        nats.url, f"{stream}.a", stream=stream, window=8, prefix="t-", **nats.credentials)
    IterablePublisher(lambda: iter({"id": i} for i in range(50))).subscribe(sink)
    sink.wait_done(20)
    assert sink.confirmed == 50
    assert [json.loads(m)["id"] for m in nats_server.stream_messages(nats, stream)] == (
        list(range(50)))
    # No stream takes the subject: the first publish is refused, naming it.
    refused: JetStreamSubscriber[Any] = JetStreamSubscriber(
        nats.url, "nobody.listens", window=8, **nats.credentials)
    IterablePublisher(lambda: iter(range(5))).subscribe(refused)
    with pytest.raises(BrokerRefused, match=r"nats 127.0.0.1:\d+: the message .* to "
                                            r"'nobody.listens' was not acknowledged"):
        refused.wait_done(20)
    wrong: JetStreamSubscriber[Any] = JetStreamSubscriber(
        nats.url, f"{stream}.a", username=nats_server.USER, password="wrong-secret-7")
    IterablePublisher(lambda: iter(range(5))).subscribe(wrong)
    with pytest.raises(BrokerRefused, match="refused the credentials") as raised:
        wrong.wait_done(20)
    assert "wrong-secret-7" not in str(raised.value)


@pytest.fixture
def watch(spark: SparkSession) -> Iterator[ProgressWatch]:
    listener = install(spark)
    yield listener
    spark.streams.removeListener(listener)


def _in_a_task(factory: Any, rows: int) -> None:
    """What a foreach task does with ``rows`` rows (open, process each, close), here."""
    from pyspark.sql import Row

    writer = SubscriberForeachWriter(factory)
    writer.open(0, 7)
    error = None
    try:
        for value in range(rows):
            writer.process(Row(value=value))
    except Exception as raised:
        error = raised
    writer.close(error)


def test_a_refusal_mid_task_fails_the_task(nats: nats_server.Server, stream: str,
                                           tmp_path: Path) -> None:
    factory = nats_server.FailingOnce(nats.url, f"{stream}.out", str(tmp_path / "failed"))
    with pytest.raises(BrokerRefused, match="injected failure"):
        _in_a_task(factory, 100)


def test_a_batch_that_failed_mid_way_and_ran_again_leaves_each_row_once(
        spark: SparkSession, watch: ProgressWatch, nats: nats_server.Server, stream: str,
        tmp_path: Path) -> None:
    count = 300
    marker = tmp_path / "failed"
    writer = SubscriberForeachWriter(nats_server.FailingOnce(nats.url, f"{stream}.out",
                                                             str(marker)))

    def start() -> StreamingQuery:
        df = (spark.readStream.format("reactive").option("publisher", "range")
              .option("count", count).option("maxRecordsPerTrigger", 100)
              .option("walLocation", str(tmp_path / "wal")).load())
        return (df.writeStream.foreach(writer)
                .option("checkpointLocation", str(tmp_path / "checkpoint")).start())

    first = start()
    try:
        # It fails in its first batch (were the failure lost, it would read on to the end).
        with watch._changed:
            watch._changed.wait_for(lambda: str(first.runId) in watch.terminated
                                    or watch.rows(first) >= count, 120)
    finally:
        first.stop()
    assert marker.exists()  # the failure was injected, after rows reached the stream
    assert int(marker.read_text()) > 0
    failure = watch.terminated.get(str(first.runId))
    assert failure is not None and "injected failure" in failure
    again = start()
    try:
        watch.wait_for(again, lambda: watch.rows(again) >= count - 100, 120, "the rest")
        assert _eventually(lambda: len(nats_server.stream_messages(nats, stream)) >= count)
    finally:
        again.stop()
    ids = [json.loads(m)["id"] for m in nats_server.stream_messages(nats, stream)]
    assert sorted(ids) == list(range(count))  # each once, the retried batch's included


def _eventually(check: Any, timeout: float = 30.0) -> bool:
    import threading
    import time

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.1)
    return True
