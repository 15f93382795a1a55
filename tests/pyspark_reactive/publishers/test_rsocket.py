"""The built-in ``rsocket`` publisher against a plain rsocket-py server on 127.0.0.1, which
Spark's source runner (another process) connects to."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from rsocket_peer import CountingServer
from streaming import UNTIL_DRAINED, ProgressWatch
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive.publishers.rsocket import rsocket_publisher
from pyspark_reactive.source.options import OptionError
from reactive_streams import IterablePublisher, collect
from reactive_streams.adapters.rsocket import RemoteStreamError, serve

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
