"""The built-in ``rsocket`` publisher against a plain rsocket-py server on 127.0.0.1, which
Spark's source runner (another process) connects to."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from rsocket_peer import CountingServer
from streaming import ProgressWatch
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive.builtin_rsocket import rsocket_publisher
from pyspark_reactive.options import OptionError

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
        query, name = to_memory(df, queries, tmp_path, availableNow=True)
        assert watch.wait_terminated(query) is None
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
])
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rsocket_publisher(options)


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
