"""The built-in ``websocket`` publisher against a real ``websockets`` server on 127.0.0.1
(tests/peers/websocket_server.py), which Spark's source runner (another process) connects
to: a slow query holds the server back, every row arrives once and in order, and the
options are checked by load() without connecting.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from streaming import UNTIL_DRAINED, ProgressWatch
from test_source import queries, reactive, to_memory, watch
from websocket_server import WebSocketServer, held_beyond_demand, text_message

from pyspark_reactive.publishers.websocket import default_schema, websocket_publisher
from pyspark_reactive.source.options import OptionError

__all__ = ["queries", "watch"]  # fixtures shared with test_source

ROWS = 1000
PER_BATCH = 250
# Batches during which the test waits until the server's sends block, then reads its count:
# after batch k the query has asked for (k + 1) * PER_BATCH rows, fewer than ROWS for these.
HELD_BATCHES = 2
# Socket buffers asked for on both sides (the kernel doubles them), and the server
# library's write buffer: with messages of about 1 KB they hold a few dozen.
BUFFER = 4096
WRITE_LIMIT = 4096
PAD = "-" * 960


def numbered(index: int) -> str:
    return json.dumps({"seq": index, "pad": PAD})


def test_a_slow_query_holds_the_server_back_and_every_row_arrives_once_in_order(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # The most messages the server can have sent beyond what the source requested: what
    # the buffers between its send() and the publisher's reads hold (see the peer).
    allowance = held_beyond_demand(len(numbered(ROWS)), BUFFER, BUFFER, WRITE_LIMIT)
    # Else the server could send everything without being held back, and this could not fail.
    assert (HELD_BATCHES + 1) * PER_BATCH + allowance < ROWS
    seen: list[tuple[int, str]] = []
    held: list[tuple[int, int]] = []  # (rows in the batches so far, server's sends then)

    def slow_batch(frame: DataFrame, batch_id: int) -> None:
        rows = frame.collect()  # one action: Spark counts the input rows of each
        seen.extend((row.seq, row.pad) for row in rows)
        if not rows or len(held) == HELD_BATCHES:
            return
        # The source has asked for the next PER_BATCH rows and nothing more; the
        # publisher reads those, then leaves the socket unread: the server's sends block.
        # The publisher reads the batch's rows at once: the sends block within a second.
        held.append((len(seen), server.wait_stalled(timeout=15)))

    with WebSocketServer(message=numbered, send_buffer=BUFFER,
                         write_limit=WRITE_LIMIT) as server:
        df = reactive(spark, publisher="websocket", url=f"{server.url}/count/{ROWS}",
                      format="json", receiveBufferBytes=BUFFER,
                      maxRecordsPerTrigger=PER_BATCH).schema("seq BIGINT, pad STRING").load()
        query = (df.writeStream.foreachBatch(slow_batch)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        queries.append(query)
        watch.wait_for(query, lambda: len(seen) >= ROWS, timeout=120,
                       what=f"{ROWS} rows through foreachBatch")
        query.stop()
        sent = server.sent_by_connection
    assert len(held) == HELD_BATCHES
    for rows, sent_then in held:
        # Requested so far: the rows of the batches cut (all handed to foreachBatch by
        # now) plus the next batch's demand, PER_BATCH.
        assert sent_then <= rows + PER_BATCH + allowance, (
            f"the server sent {sent_then} messages while the query had asked for "
            f"{rows + PER_BATCH}; the buffers hold at most {allowance}: {held}")
        assert sent_then < ROWS
    assert sent == [ROWS]  # one connection, which sent everything in the end
    assert [seq for seq, _ in seen] == list(range(ROWS))
    assert {pad for _, pad in seen} == {PAD}
    assert max(watch.batch_sizes(query)) == PER_BATCH


def test_text_rows_headers_and_a_normal_close_that_ends_an_available_now_query(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    with WebSocketServer() as server:
        df = reactive(spark, publisher="websocket", url=f"{server.url}/count/5",
                      headers='{"Authorization": "Bearer x"}').load()
        assert df.schema.simpleString() == "struct<value:string>"
        query, name = to_memory(df, queries, tmp_path, availableNow=True)
        assert watch.wait_terminated(query) is None  # on_complete ended the stream
        assert server.request_headers[-1]["Authorization"] == "Bearer x"
    assert [row.value for row in spark.table(name).collect()] == [
        text_message(i) for i in range(5)]


def test_an_abnormal_close_fails_the_query_naming_code_and_reason(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    with WebSocketServer() as server:
        url = f"{server.url}/close/1011/3"
        df = reactive(spark, publisher="websocket", url=url, format="bytes").load()
        assert df.schema.simpleString() == "struct<value:binary>"
        # Where availableNow runs one batch (no admission control), that batch may end
        # before the close arrives: the default trigger, and the query fails by itself.
        query, _ = to_memory(df, queries, tmp_path, **UNTIL_DRAINED)
        error = watch.wait_terminated(query)
    assert error is not None
    assert (f"websocket publisher: {url} closed the connection abnormally: the server "
            "closed it with code 1011, reason 'feed broke'") in error


def test_load_checks_the_options_and_connects_nowhere(spark: SparkSession) -> None:
    with WebSocketServer() as server:
        typed = reactive(spark, publisher="websocket", url=server.url,
                         format="json").schema("id BIGINT").load()
        assert typed.schema.simpleString() == "struct<id:bigint>"
        with pytest.raises(PySparkException, match="option schema=None is not accepted: "
                                                    "format=json parses each message"):
            reactive(spark, publisher="websocket", url=server.url, format="json").load()
        with pytest.raises(PySparkException, match="option url='http://x' is not accepted"):
            reactive(spark, publisher="websocket", url="http://x").load()
        assert server.connections == 0


@pytest.mark.parametrize(("options", "message"), [
    ({}, "option url=None is not accepted: a ws:// or wss:// URL such as "
         "ws://127.0.0.1:8765/feed; it is required"),
    ({"url": "  "}, "option url='  ' is not accepted: a ws:// or wss:// URL"),
    ({"url": "tcp://h:1"}, "option url='tcp://h:1' is not accepted: a ws:// or wss:// URL "
                           "such as ws://127.0.0.1:8765/feed (tcp://h:1 isn't a valid URI: "
                           "scheme isn't ws or wss)"),
    ({"url": "ws://h", "format": "xml"}, "option format='xml' is not accepted: one of text, "
                                         "bytes, json (default text)"),
    # The value of headers is never shown: it carries credentials.
    ({"url": "ws://h", "headers": "Authorization: Bearer s3cret"},
     "option headers='(hidden)' is not accepted: a JSON object of header names to "
     "string values, such as '{\"Authorization\": \"Bearer x\"}'; it is not JSON"),
    ({"url": "ws://h", "headers": '["a"]'}, "it is a JSON list, not an object"),
    ({"url": "ws://h", "headers": '{"X-Id": 7}'}, "header 'X-Id' has a value of type int, not a "
                                                  "string"),
    ({"url": "ws://h", "headers": '{"X": "a\\r\\nY: b"}'}, "header 'X' holds a line break"),
    ({"url": "ws://h", "headers": '{"X: Y": "b"}'}, "option headers='(hidden)' is not "
                                                  "accepted: a JSON object of header names "
                                                  "to string values, such as '{\"Authorization"
                                                  "\": \"Bearer x\"}'; header name 'X: Y' is "
                                                  "not an HTTP token"),
    ({"url": "ws://h", "headers": '{"Sec-WebSocket-Protocol": "chat"}'},
     "header 'Sec-WebSocket-Protocol' is set by the WebSocket handshake itself (Host, "
     "Upgrade, Connection and Sec-WebSocket-* cannot be given)"),
    ({"url": "ws://h:0/"}, "option url='ws://h:0/' is not accepted: a ws:// or wss:// URL "
                           "such as ws://127.0.0.1:8765/feed (port 0 cannot be connected to)"),
    ({"url": "ws://h", "openTimeoutMs": "0"}, "option openTimeoutMs='0' is not accepted: a "
                                              "positive integer"),
    ({"url": "ws://h", "receiveBufferBytes": "4k"}, "option receiveBufferBytes='4k' is not "
                                                    "accepted: a positive integer"),
    ({"url": "ws://h", "maxMessageBytes": "-1"}, "option maxMessageBytes='-1' is not "
                                                 "accepted: a positive integer"),
])
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as raised:
        websocket_publisher(options)
    assert message in str(raised.value)


@pytest.mark.parametrize(("options", "expected"), [
    ({}, {"format": "text", "open_timeout": 10.0, "receive_buffer": None,
          "max_message_bytes": 2**20, "headers": {}}),
    ({"FORMAT": " JSON ", "openTimeoutMs": "2500", "receiveBufferBytes": "8192",
      "maxMessageBytes": "100", "headers": '{"A": "b"}'},
     {"format": "json", "open_timeout": 2.5, "receive_buffer": 8192,
      "max_message_bytes": 100, "headers": {"A": "b"}}),
])
def test_options_reach_the_publisher(options: dict[str, str], expected: dict[str, Any]) -> None:
    publisher = websocket_publisher({"url": "wss://example.com/feed", **options})
    assert {name: getattr(publisher, name) for name in expected} == expected


def test_default_schemas() -> None:
    assert default_schema({"url": "ws://h"}) == "value STRING"
    assert default_schema({"url": "ws://h", "format": "bytes"}) == "value BINARY"
    with pytest.raises(OptionError, match="it is required with format=json"):
        default_schema({"url": "ws://h", "format": "json"})
