"""The built-in ``rsocket`` publisher against a plain rsocket-py server on 127.0.0.1, which
Spark's source runner (another process) connects to."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from urllib.parse import parse_qsl

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from rsocket_peer import CountingServer
from streaming import UNTIL_DRAINED, ProgressWatch
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive import Shard
from pyspark_reactive.publishers.rsocket import rsocket_publisher
from pyspark_reactive.source.durability import FactoryOptions, ResumePoint
from pyspark_reactive.source.options import OptionError
from reactive_streams import IterablePublisher, Publisher, collect
from reactive_streams.adapters.rsocket import RemoteStreamError, StreamRequest, serve

__all__ = ["queries", "watch"]  # fixtures shared with test_source

ROWS = 10_000
PER_BATCH = 1000


def test_server_never_has_more_than_one_batch_outstanding_and_every_row_arrives_once(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    with CountingServer(count=ROWS) as server:
        df = reactive(spark, publisher="rsocket", host="127.0.0.1", port=server.port,
                      route="numbers", format="text",
                      maxRecordsPerTrigger=PER_BATCH).load()
        assert df.schema.simpleString() == "struct<value:string>"
        query, name = to_memory(df, queries, tmp_path, **UNTIL_DRAINED)
        assert watch.wait_drained(query, ROWS) is None
        [stream] = server.streams
        assert stream.route == "numbers"
        assert stream.sent == ROWS and stream.completed
        # Outstanding demand (requested minus sent) only rises when a request arrives, so
        # its value after each request is its most at every moment.
        assert 0 < stream.max_outstanding <= PER_BATCH, stream.outstanding_after
        assert stream.requests[0] == PER_BATCH
        values = [row.value for row in spark.table(name).collect()]
    assert len(values) == ROWS
    assert sorted(map(int, values)) == list(range(ROWS))
    assert max(watch.batch_sizes(query)) == PER_BATCH


@pytest.mark.parametrize(("options", "message"), [
    ({}, "option host=None is not accepted: the RSocket server's host"),
    ({"host": "127.0.0.1"}, "option port=None is not accepted: an integer from 1 to 65535"),
    ({"host": "127.0.0.1", "port": "0"}, "option port='0' is not accepted"),
    ({"host": "127.0.0.1", "port": "http"}, "option port='http' is not accepted"),
    ({"host": "h", "port": "1", "route": " "}, "option route=' ' is not accepted"),
    ({"host": "h", "port": "1", "format": "xml"},
     "option format='xml' is not accepted: one of bytes, text, json"),
    ({"host": "h", "port": "1", "route": "é" * 128},
     "(128 characters) is not accepted: at most 255 bytes in UTF-8"),
    ({"host": "h", "port": "1", "keepaliveTimeout": "1"},
     "option keepaliveTimeout='1' is not accepted"),
    ({"socketPath": "/tmp/s", "host": "h"},
     "option socketPath='/tmp/s' is not accepted: either socketPath or host and port, not "
     "both (host is given too)"),
    ({"socketPath": "/tmp/s", "port": "1"}, "(port is given too)"),
    ({"socketPath": "relative"}, "option socketPath='relative' is not accepted: the "
     "absolute path of the RSocket server's Unix domain socket"),
    ({"socketPath": "/" + "s" * 107}, "(at most 107 bytes)"),
])
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rsocket_publisher(options)


def test_a_socket_path_reaches_the_publisher_instead_of_host_and_port() -> None:
    publisher = rsocket_publisher({"socketPath": "/run/app/rsocket.sock"})
    assert (publisher.path, publisher.host, publisher.port) == (  # type: ignore[attr-defined]
        "/run/app/rsocket.sock", None, None)


def test_keepalive_timeout_option_reaches_the_publisher() -> None:
    options = {"host": "h", "port": "1"}
    assert rsocket_publisher(options).keepalive_timeout == 30  # type: ignore[attr-defined]
    short = rsocket_publisher({**options, "keepaliveTimeout": "4"})
    assert (short.keepalive_timeout, short.keepalive_interval) == (4, 1)  # type: ignore[attr-defined]


def test_default_schemas_and_load_checks(spark: SparkSession) -> None:
    loaded = reactive(spark, publisher="rsocket", host="127.0.0.1", port=1).load()
    assert loaded.schema.simpleString() == "struct<value:binary>"
    with pytest.raises(PySparkException, match="option schema=None is not accepted: a schema "
                                                "with format=json"):
        reactive(spark, publisher="rsocket", host="127.0.0.1", port=1, format="json").load()
    typed = reactive(spark, publisher="rsocket", host="127.0.0.1", port=1,
                     format="json").schema("id BIGINT").load()
    assert typed.schema.simpleString() == "struct<id:bigint>"


SECRET = "the-service-token-0123456789"


def test_the_token_option_reaches_a_service_that_asks_for_it_and_never_shows(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    with serve(IterablePublisher(lambda: (f"row {i}" for i in range(30))), token=SECRET) as ticks:
        df = reactive(spark, publisher="rsocket", host="127.0.0.1", port=ticks.port,
                      token=SECRET, format="text", maxRecordsPerTrigger=10).load()
        plan = io.StringIO()
        with contextlib.redirect_stdout(plan):
            df.explain(True)
        # Spark's default spark.redaction.regex names "token": the plan shows it redacted.
        assert "token=*********(redacted)" in plan.getvalue()
        assert SECRET not in plan.getvalue()
        query, name = to_memory(df, queries, tmp_path, **UNTIL_DRAINED)
        assert watch.wait_drained(query, 30) is None
        assert sorted(row.value for row in spark.table(name).collect()) == sorted(
            f"row {i}" for i in range(30))
        assert SECRET not in str(query.lastProgress)
        # A wrong token: refused, with an error that shows no token.
        wrong = rsocket_publisher({"host": "127.0.0.1", "port": str(ticks.port),
                                   "token": "not-" + SECRET})
        with pytest.raises(RemoteStreamError, match="the server refused the connection: "
                           "REJECTED_SETUP: the token was refused") as refused:
            collect(wrong, timeout=10)
        assert SECRET not in str(refused.value) and SECRET not in repr(wrong)


def test_token_file_is_read_where_the_publisher_is_made(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    options = {"host": "127.0.0.1", "port": "1"}
    made = rsocket_publisher({**options, "tokenFile": str(token_file)})
    assert made._token == SECRET  # type: ignore[attr-defined]
    for more, message in [
            ({"tokenFile": str(token_file), "token": SECRET}, "either token or tokenFile"),
            ({"tokenFile": "token"}, "it is a relative path"),
            ({"tokenFile": str(tmp_path / "missing")}, "reading it failed: No such file"),
            ({"token": " "}, "option token='(hidden)' is not accepted: a token of 1 to 4096"),
            ({"maxPayloadBytes": "10"}, "option maxPayloadBytes='10' is not accepted")]:
        with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")) \
                as error:
            rsocket_publisher({**options, **more})
        assert SECRET not in str(error.value)
    token_file.write_text("")
    with pytest.raises(OptionError, match="it holds nothing"):
        rsocket_publisher({**options, "tokenFile": str(token_file)})
    limited = rsocket_publisher({**options, "maxPayloadBytes": "2048"})
    assert limited.max_payload_bytes == 2048  # type: ignore[attr-defined]


# -- shards ----------------------------------------------------------------------------------

def test_shard_shards_and_offset_are_replaced_in_route_and_data() -> None:
    given = {"host": "h", "port": "1", "route": "feed-{shard}-of-{shards}",
             "data": '{"shard": {shard}, "of": {shards}, "from": {offset}}'}
    # Without the option shards: shard 0 of 1, and the offset of the whole stream.
    plain = rsocket_publisher(FactoryOptions(given, ResumePoint(offset=7)))
    assert (plain.route, plain.data) == (  # type: ignore[attr-defined]
        "feed-0-of-1", b'{"shard": 0, "of": 1, "from": 7}')
    third = rsocket_publisher(FactoryOptions(given, ResumePoint(offset=12), shard=Shard(2, 3)))
    assert (third.route, third.data) == (  # type: ignore[attr-defined]
        "feed-2-of-3", b'{"shard": 2, "of": 3, "from": 12}')


@pytest.mark.parametrize(("given", "shard", "message"), [
    ({"route": "feed", "data": "from={offset}"}, Shard(0, 2),
     "option data='from={offset}' is not accepted: with shards=2, {shard} in route or data, "
     "replaced by each shard's index (0 to 1; {shards} by 2)"),
    ({"route": "feed"}, Shard(0, 3),
     "option route='feed' is not accepted: with shards=3, {shard} in route or data"),
    ({"route": "feed-{shard}"}, Shard(0, 2),
     "option data=None is not accepted: with shards=2, data holding {offset}"),
    ({"data": "shard={shard}"}, Shard(1, 2), "option data='shard={shard}' is not accepted"),
    # The route's length is checked as the last shard's (the longest index): 256 bytes.
    ({"route": "r{shard}" + "x" * 253, "data": "{offset}"}, Shard(0, 11),
     "is not accepted: at most 255 bytes in UTF-8 once {shard} and {shards} are replaced"),
])
def test_shards_need_a_stream_of_its_own_per_shard_that_resumes(
        given: dict[str, str], shard: Shard, message: str) -> None:
    with pytest.raises(OptionError, match=re.escape(message)):
        rsocket_publisher(FactoryOptions({"host": "h", "port": "1", **given}, shard=shard))


def test_what_shards_accept() -> None:
    long_route = {"host": "h", "port": "1", "route": "r{shard}" + "x" * 253}
    # 255 bytes for every shard of ten (the index 9), and without shards (0).
    last = rsocket_publisher(FactoryOptions({**long_route, "data": "{offset}"},
                                            shard=Shard(9, 10)))
    assert last.route == "r9" + "x" * 253  # type: ignore[attr-defined]
    assert rsocket_publisher(long_route).route == "r0" + "x" * 253  # type: ignore[attr-defined]
    # One shard is the whole feed: it needs no {shard}, only the offset to go on from.
    one = rsocket_publisher(FactoryOptions({"host": "h", "port": "1", "data": "from={offset}"},
                                           ResumePoint(offset=40), shard=Shard(0, 1)))
    assert one.data == b"from=40"  # type: ignore[attr-defined]


def test_load_checks_the_options_as_a_shard(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(PySparkException, match=re.escape(
            "option data='from={offset}' is not accepted: with shards=2, {shard} in route")):
        reactive(spark, publisher="rsocket", host="127.0.0.1", port=1, data="from={offset}",
                 shards=2, walLocation=tmp_path / "wal").load()


SHARDED_ROWS = 120


def test_two_shards_each_resume_from_their_offset_and_every_row_arrives_once_across_a_restart(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # The server: shard i of n is i, i + n, i + 2n, ... of 0 .. SHARDED_ROWS - 1, from the
    # request's offset in that shard's stream.
    requests: list[tuple[int, int, int]] = []

    def shard_stream(request: StreamRequest) -> Publisher[str]:
        asked = dict(parse_qsl(request.data.decode()))
        shard, count, start = int(asked["shard"]), int(asked["of"]), int(asked["from"])
        requests.append((shard, count, start))
        return IterablePublisher(lambda: (str(k) for k in range(shard + start * count,
                                                              SHARDED_ROWS, count)))

    out = tmp_path / "out"

    def start_query() -> StreamingQuery:
        df = reactive(spark, publisher="rsocket", host="127.0.0.1", port=service.port,
                      route="numbers", token=service.token, format="text",
                      data="shard={shard}&of={shards}&from={offset}", shards=2,
                      maxRecordsPerTrigger=40, walLocation=tmp_path / "wal").load()
        query = (df.writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        queries.append(query)
        return query

    def kept() -> list[int]:
        return [int(row.value) for row in spark.read.parquet(str(out)).collect()]

    with serve(shard_stream, route="numbers", encode=str.encode) as service:
        first = start_query()
        watch.wait_rows(first, 40, timeout=60)
        first.stop()
        before, restarted_at = kept(), len(requests)
        second = start_query()
        watch.wait_for(second, lambda: watch.rows(first) + watch.rows(second) >= SHARDED_ROWS,
                       timeout=180, what=f"the feed's {SHARDED_ROWS} rows")
        second.stop()
    assert sorted(kept()) == list(range(SHARDED_ROWS))
    assert {count for _, count, _ in requests} == {2}
    for shard in (0, 1):
        # Each shard's streams went on from its own offset, one micro-batch after another,
        # and after the restart from at least what the first run had written (a batch kept
        # in the shard's log but not written is read again from the log, not the server).
        starts = [start for index, _, start in requests if index == shard]
        written = sum(1 for value in before if value % 2 == shard)
        assert starts == sorted(starts) and starts[-1] > 0, (shard, starts)
        assert all(start >= written for index, _, start in requests[restarted_at:]
                   if index == shard), (shard, requests, restarted_at, written)
