"""The built-in ``nats`` against a real nats-server with JetStream on 127.0.0.1, read by
Spark's source runner (another process) and by shard tasks on the executors: every
message once, acknowledged once durable; a slow query holds no more unacknowledged than
maxRecordsPerTrigger while the consumer's backlog grows; a redelivery another shard kept
is counted once; options checked, naming the option, without connecting."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats_server
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StructType
from streaming import ProgressWatch, install

from pyspark_reactive import Shard
from pyspark_reactive.publishers.nats import (
    MESSAGE_SCHEMA,
    default_schema,
    nats_publisher,
)
from pyspark_reactive.source.durability import FactoryOptions
from pyspark_reactive.source.options import OptionError, parse_source_options
from pyspark_reactive.source.shard_task import epoch_batches, read_epoch


@pytest.fixture
def watch(spark: SparkSession) -> Iterator[ProgressWatch]:
    listener = install(spark)
    yield listener
    spark.streams.removeListener(listener)


@pytest.fixture
def queries() -> Iterator[list[StreamingQuery]]:
    started: list[StreamingQuery] = []
    yield started
    for query in started:
        if query.isActive:
            query.stop()


def _options(nats: nats_server.Server, stream: str, consumer: str, password_file: str,
             **given: Any) -> dict[str, str]:
    return {"publisher": "nats", "url": nats.url, "stream": stream, "consumer": consumer,
            "username": nats_server.USER, "passwordFile": password_file,
            **{k: str(v) for k, v in given.items()}}


def _start(spark: SparkSession, queries: list[StreamingQuery], tmp_path: Path,
           options: dict[str, str], schema: str | None = "id BIGINT",
           **trigger: Any) -> tuple[StreamingQuery, str]:
    reader = spark.readStream.format("reactive").options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    name = f"q_{uuid.uuid4().hex[:8]}"
    writer = (reader.load().writeStream.format("memory").queryName(name)
              .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}")))
    query = (writer.trigger(**trigger) if trigger else writer).start()
    queries.append(query)
    return query, name


def _eventually(check: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not check():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.1)
    return True


def test_a_query_with_a_log_reads_every_message_once_and_acknowledges_them(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        nats: nats_server.Server, stream: str, password_file: str, tmp_path: Path) -> None:
    count = 1000
    nats_server.publish_json(nats, f"{stream}.a", count)
    options = _options(nats, stream, "spark", password_file, createConsumer="true",
                       ackWaitMs=5000, format="json", maxRecordsPerTrigger=300,
                       walLocation=tmp_path / "wal")
    query, name = _start(spark, queries, tmp_path, options)
    watch.wait_rows(query, count)
    query.stop()
    assert sorted(r.id for r in spark.table(name).collect()) == list(range(count))
    assert max(watch.batch_sizes(query)) <= 300
    # Every message was durable in the log, so acknowledged (the last as the source stopped).
    assert _eventually(lambda: nats_server.consumer_info(
        nats, stream, "spark").num_ack_pending == 0)
    info = nats_server.consumer_info(nats, stream, "spark")
    assert (info.num_pending, info.num_redelivered) == (0, 0)


def test_a_slow_query_holds_at_most_max_records_unacknowledged_as_the_backlog_grows(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        nats: nats_server.Server, stream: str, password_file: str, tmp_path: Path) -> None:
    per_trigger = 100
    nats_server.create_consumer(nats, stream, "slow", ack_wait_s=5.0,
                                max_ack_pending=2 * per_trigger)
    nats_server.publish_json(nats, f"{stream}.a", 3000)
    options = _options(nats, stream, "slow", password_file,
                       maxRecordsPerTrigger=per_trigger, walLocation=tmp_path / "wal")
    query, _ = _start(spark, queries, tmp_path, options, schema=None,
                      processingTime="1 second")
    watch.wait_batches(query, 2)
    seen = []
    for _ in range(3):
        info = nats_server.consumer_info(nats, stream, "slow")
        seen.append((info.num_ack_pending, info.num_pending))
        watch.wait_batches(query, len(watch.batch_sizes(query)) + 1)
    assert all(ack_pending <= per_trigger for ack_pending, _ in seen), seen
    before = seen[-1][1]
    nats_server.publish_json(nats, f"{stream}.a", 1000, start=3000)
    info = nats_server.consumer_info(nats, stream, "slow")
    assert info.num_pending > before  # the backlog is the server's, and it grows
    assert info.num_ack_pending <= per_trigger
    assert set(watch.batch_sizes(query)) == {per_trigger}
    query.stop()


def test_two_shards_of_one_durable_consumer_read_every_message_once(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        nats: nats_server.Server, stream: str, password_file: str, tmp_path: Path) -> None:
    count = 600
    nats_server.create_consumer(nats, stream, "shards", ack_wait_s=5.0)
    nats_server.publish_json(nats, f"{stream}.a", count)
    options = _options(nats, stream, "shards", password_file, format="json", shards=2,
                       maxRecordsPerTrigger=200, walLocation=tmp_path / "wal")
    query, name = _start(spark, queries, tmp_path, options)
    watch.wait_rows(query, count)
    query.stop()
    assert sorted(r.id for r in spark.table(name).collect()) == list(range(count))
    assert _eventually(lambda: nats_server.consumer_info(
        nats, stream, "shards").num_ack_pending == 0)


class _Unacknowledging:
    """The built-in's factory, whose publishers never acknowledge: a shard task that
    kept its epoch and died before its acknowledgements went out."""

    def __call__(self, options: Any) -> Any:
        publisher = nats_publisher(options)
        publisher.on_durable = lambda count: None
        return publisher


def test_a_redelivery_that_another_shard_kept_is_counted_once(
        nats: nats_server.Server, stream: str, password_file: str, tmp_path: Path) -> None:
    nats_server.create_consumer(nats, stream, "kept", ack_wait_s=30.0)
    nats_server.publish_json(nats, f"{stream}.a", 100)
    options = parse_source_options(_options(
        nats, stream, "kept", password_file, format="json", shards=2, fillWaitMs=300,
        walLocation=tmp_path / "wal"))
    schema = StructType().add("id", LongType())

    def ids(shard: int, factory: Any, share: int) -> list[int]:
        shard_log, record = read_epoch(options, schema, factory, Shard(shard, 2), 1, share)
        return [i for b in epoch_batches(shard_log, record) for i in b.column(0).to_pylist()]

    # Shard 0 keeps 40 and dies unacknowledged: they come back (given back at once here
    # rather than after AckWait), to shard 1, which pulls next from the same consumer.
    kept_by_0 = ids(0, _Unacknowledging(), 40)
    assert kept_by_0 == list(range(40))
    made: list[Any] = []
    kept_by_1 = ids(1, lambda given: made.append(nats_publisher(given)) or made[-1], 100)
    assert sorted(kept_by_0 + kept_by_1) == list(range(100))  # each once
    assert made[0].skipped == 40  # they did come again to shard 1, and were dropped
    info = nats_server.consumer_info(nats, stream, "kept")
    assert (info.num_ack_pending, info.num_pending) == (0, 0)  # and acknowledged


@pytest.mark.parametrize(("given", "message"), [
    ({}, "option url=None is not accepted"),
    ({"url": "http://h:4222"}, "option url='http://h:4222' is not accepted"),
    ({"url": "nats://u:secret@h"}, "option url='nats://***@h' is not accepted"),
    ({"stream": "a.b"}, "option stream='a.b' is not accepted"),
    ({"consumer": ""}, "option consumer='' is not accepted"),
    ({"createConsumer": "yes"}, "option createConsumer='yes' is not accepted: true or false"),
    ({"ackWaitMs": "1000"}, "option ackWaitMs='1000' is not accepted: a value only with "
                            "createConsumer=true"),
    ({"createConsumer": "true", "deliverPolicy": "first"}, "option deliverPolicy='first'"),
    ({"passwordFile": "/no/such/file"}, "option passwordFile='/no/such/file'"),
    ({"username": "u", "passwordFile": "relative"}, "option passwordFile='relative'"),
    ({"maxBatch": "0"}, "option maxBatch='0' is not accepted"),
    ({"maxBufferedBytes": "12"}, "option maxBufferedBytes='12' is not accepted"),
    ({"badPayloads": "skip"}, "skip only with format=json"),
    ({"tls": "false", "caCerts": "/x.pem"}, "option caCerts='/x.pem' is not accepted"),
])
def test_bad_options_name_the_option(given: dict[str, str], message: str) -> None:
    options = {"url": "nats://127.0.0.1:4222", "stream": "S", "consumer": "c", **given}
    if not given:
        del options["url"]
    with pytest.raises(OptionError, match=re.escape(message)) as raised:
        nats_publisher(FactoryOptions(options))
    assert "secret" not in str(raised.value)


def test_the_secret_files_are_read_and_never_shown(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token-value\n")
    publisher: Any = nats_publisher(FactoryOptions(
        {"url": "nats://127.0.0.1:4222", "stream": "S", "consumer": "c",
         "tokenFile": str(token)}))
    assert publisher.token == "a-token-value"
    assert "a-token-value" not in repr(publisher)
    with pytest.raises(OptionError, match="tokenFile") as raised:
        nats_publisher(FactoryOptions({"url": "nats://h", "stream": "S", "consumer": "c",
                                       "username": "u", "tokenFile": str(token)}))
    assert "a-token-value" not in str(raised.value)


def test_the_row_schema_and_identity(nats: nats_server.Server, stream: str,
                                     password_file: str) -> None:
    assert default_schema({}) == MESSAGE_SCHEMA
    with pytest.raises(OptionError, match="format=json parses each message"):
        default_schema({"format": "json"})
    from reactive_streams import collect

    nats_server.publish_json(nats, f"{stream}.x", 2)
    publisher: Any = nats_publisher(FactoryOptions(_options(
        nats, stream, "rows", password_file, createConsumer="true", maxMessages=2)))
    rows = collect(publisher, timeout=20)
    assert [(r["subject"], json.loads(r["data"]), r["headers"], r["stream_sequence"],
             r["num_delivered"]) for r in rows] == [
        (f"{stream}.x", {"id": 0}, {"Nats-Msg-Id": "0"}, 1, 1),
        (f"{stream}.x", {"id": 1}, {"Nats-Msg-Id": "1"}, 2, 1)]
    assert [publisher.identity(r) for r in rows] == ["1", "2"]
