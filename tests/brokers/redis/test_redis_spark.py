"""The built-in ``redis`` in real Spark against a real redis-server: a query with
``walLocation`` reads every entry once, a slow query keeps the group's pending entries
(``XPENDING``) within 2 x ``maxRecordsPerTrigger`` while the stream grows, two shards on the
executors read every entry once, and options are checked by the factory without connecting.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis_server
from polling import wait_until
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from redis_server import RedisServer
from streaming import ProgressWatch, install
from test_source import reactive, to_memory

from pyspark_reactive import Shard
from pyspark_reactive.publishers.redis import MESSAGE_SCHEMA, default_schema, redis_publisher
from pyspark_reactive.source.durability import FactoryOptions
from pyspark_reactive.source.options import OptionError
from reactive_streams.adapters.redis_streams import RedisStreamPublisher


@pytest.fixture(scope="module")
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


def _options(server: RedisServer, stream: str, **more: Any) -> dict[str, Any]:
    return {"publisher": "redis", "url": server.url, "stream": stream, "group": "g",
            "passwordFile": server.password_file, **more}


def test_a_logged_query_reads_every_entry_once_and_acknowledges_them(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        server: RedisServer, stream: str, tmp_path: Path) -> None:
    count = 600
    redis_server.add_json(server, stream, count)
    df = reactive(spark, **_options(server, stream, createGroup="true", startId="0",
                                    format="json", maxRecordsPerTrigger=300,
                                    walLocation=tmp_path / "wal")).schema("id BIGINT").load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, count)
    # Every entry was logged, so acknowledged (the last ones as the log's thread catches up).
    wait_until(lambda: redis_server.pending_count(server, stream, "g") == 0, 30,
               "every entry acknowledged")
    query.stop()
    assert sorted(row.id for row in spark.table(name).collect()) == list(range(count))
    assert max(watch.batch_sizes(query)) <= 300


def test_a_slow_query_holds_the_group_back_within_twice_max_records_per_trigger(
        spark: SparkSession, queries: list[StreamingQuery], server: RedisServer,
        stream: str, tmp_path: Path) -> None:
    per_trigger, count = 100, 300
    redis_server.create_group(server, stream, "g", "0")
    redis_server.add_json(server, stream, count)
    release = threading.Event()
    batches: list[list[int]] = []
    held = threading.Event()

    def slow_sink(batch: DataFrame, epoch: int) -> None:
        batches.append([row.id for row in batch.collect()])
        if len(batches) == 2:
            held.set()
            release.wait(60)  # the query stays in its second batch until the test is done

    # No write-ahead log: an entry is acknowledged only once Spark commits its batch.
    df = reactive(spark, **_options(server, stream, format="json",
                                    maxRecordsPerTrigger=per_trigger)).schema("id BIGINT").load()
    query = (df.writeStream.foreachBatch(slow_sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    queries.append(query)
    try:
        assert held.wait(60), query.exception() or "no second batch"
        # The source reads the next batch's entries meanwhile, and no more.
        wait_until(lambda: redis_server.pending_count(server, stream, "g") > per_trigger, 30,
                   "the next batch's entries read")
        seen = [redis_server.pending_count(server, stream, "g") for _ in range(20)]
        client = server.client()
        try:
            for i in range(count, count + 300):  # the stream grows, the group does not
                client.xadd(stream, {"payload": json.dumps({"id": i})})
        finally:
            client.close()
        seen += [redis_server.pending_count(server, stream, "g") for _ in range(20)]
        assert max(seen) <= 2 * per_trigger, seen
        assert redis_server.stream_length(server, stream) == count + 300
    finally:
        release.set()
    wait_until(lambda: sum(map(len, batches)) >= count + 300, 90, "every entry read")
    query.stop()
    ids = sorted(i for batch in batches for i in batch)
    assert ids == list(range(count + 300))
    assert max(map(len, batches)) <= per_trigger


def test_two_shards_on_the_executors_read_every_entry_once(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        server: RedisServer, stream: str, tmp_path: Path) -> None:
    count = 600
    redis_server.create_group(server, stream, "g", "0")
    redis_server.add_json(server, stream, count)
    df = reactive(spark, **_options(server, stream, format="json", shards=2,
                                    maxRecordsPerTrigger=300, consumer="shard",
                                    walLocation=tmp_path / "wal")).schema("id BIGINT").load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, count)
    query.stop()
    assert sorted(row.id for row in spark.table(name).collect()) == list(range(count))
    client = server.client()
    try:
        consumers = {c["name"].decode() for c in client.xinfo_consumers(stream, "g")}
    finally:
        client.close()
    assert consumers == {"shard-0", "shard-1"}


@pytest.mark.parametrize("options, message", [
    ({"group": "g"}, "option stream=None is not accepted: a non-empty name; it is required"),
    ({"stream": "s"}, "option group=None is not accepted"),
    ({"stream": "s", "group": "g", "url": "http://h"}, "not the scheme 'http'"),
    ({"stream": "s", "group": "g", "url": "redis://u:secret@h"},
     "give the password in passwordFile"),
    ({"stream": "s", "group": "g", "url": "redis://h", "port": "1"},
     "option port='1' is not accepted: no value with url"),
    ({"stream": "s", "group": "g", "port": "0"}, "option port='0'"),
    ({"stream": "s", "group": "g", "passwordFile": "relative/file"}, "it is a relative path"),
    ({"stream": "s", "group": "g", "passwordFile": "/no/such/file"}, "reading it failed"),
    ({"stream": "s", "group": "g", "tls": "maybe"}, "option tls='maybe' is not accepted"),
    ({"stream": "s", "group": "g", "caCerts": "/no/such.pem"}, "a readable PEM file"),
    ({"stream": "s", "group": "g", "startId": "later"}, "option startId='later'"),
    ({"stream": "s", "group": "g", "format": "xml"}, "one of message, json"),
    ({"stream": "s", "group": "g", "badPayloads": "skip"}, "skip only with format=json"),
    ({"stream": "s", "group": "g", "field": "data"}, "with format=json only"),
    ({"stream": "s", "group": "g", "maxMessageBytes": "10"}, "option maxMessageBytes='10'"),
    ({"stream": "s", "group": "g", "claimIdleMs": "0"}, "option claimIdleMs='0'"),
])
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as raised:
        redis_publisher(options)
    assert message in str(raised.value)
    assert "secret" not in str(raised.value)


def test_options_reach_the_publisher(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    made = redis_publisher(FactoryOptions(
        {"url": "rediss://reader@cache:6380/2", "stream": "s", "group": "g",
         "passwordFile": str(password), "createGroup": "true", "startId": "0",
         "claimIdleMs": "60000", "maxMessageBytes": "4096", "maxRecordsPerTrigger": "100000",
         "blockMs": "100", "maxMessages": "9"}, shard=Shard(1, 2)))
    assert isinstance(made, RedisStreamPublisher)
    assert (made.host, made.port, made.db, made.username, made.password, made.tls) == (
        "cache", 6380, 2, "reader", "s3cret", True)
    assert (made.consumer, made.create_group, made.start_id, made.claim_idle_ms) == (
        "reader-1", True, "0", 60000)
    # One reply holds at most maxBufferedBytes: 64 MiB / (4096 + 256) entries.
    assert made.max_buffered == 64 * 2**20 // (4096 + 256)
    assert (made.block_ms, made.max_messages, made.acknowledge) == (100, 9, "on_durable")
    assert "s3cret" not in repr(made)
    assert default_schema({}) == MESSAGE_SCHEMA
    with pytest.raises(OptionError, match="format=json parses each entry"):
        default_schema({"format": "json"})
