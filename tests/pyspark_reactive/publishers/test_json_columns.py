"""The built-ins' ``format=json`` leaves out the fields of an object that the rows have no
column for, as Spark's ``from_json`` does: the factory sees the reader's schema
(``FactoryOptions.schema``). A real feed through Spark, and each built-in's decoding."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType
from streaming import ProgressWatch
from test_source import queries, reactive, to_memory, watch
from websocket_server import WebSocketServer

from pyspark_reactive.publishers.mqtt import mqtt_publisher
from pyspark_reactive.publishers.rsocket import rsocket_publisher
from pyspark_reactive.source.durability import FactoryOptions
from reactive_streams.adapters.mqtt import MqttMessage

__all__ = ["queries", "watch"]  # fixtures of test_source, used here

SCHEMA = StructType([StructField("id", LongType()), StructField("name", StringType())])


@pytest.fixture(scope="module")
def feed() -> Iterator[WebSocketServer]:
    def message(i: int) -> str:
        return json.dumps({"id": i, "name": f"n{i}", "extra": [i], "more": {"x": i}})

    with WebSocketServer(message=message) as running:
        yield running


def test_a_feed_s_fields_without_a_column_are_left_out(
        spark: SparkSession, feed: WebSocketServer, watch: ProgressWatch,
        queries: list[StreamingQuery], tmp_path: Path) -> None:
    df = reactive(spark, publisher="websocket", url=f"{feed.url}/count/5",
                  format="json").schema(SCHEMA).load()
    query, name = to_memory(df, queries, tmp_path, availableNow=True)
    assert watch.wait_terminated(query) is None
    rows = sorted(tuple(r) for r in spark.table(name).collect())
    assert rows == [(i, f"n{i}") for i in range(5)]


def test_mqtt_and_rsocket_json_keep_only_the_schema_s_columns() -> None:
    options = {"host": "127.0.0.1", "port": "1", "topic": "t", "format": "json"}
    mqtt = mqtt_publisher(FactoryOptions(options, schema=SCHEMA))
    message = MqttMessage("t", b'{"id": 1, "name": "a", "extra": 2}', 1, False, 0.0)
    assert mqtt.decode(message) == {"id": 1, "name": "a"}
    rsocket = rsocket_publisher(FactoryOptions(options, schema=SCHEMA))
    assert rsocket.decode(b'{"id": 1, "extra": 2}') == {"id": 1}
    # An array fills columns by position: nothing to leave out.
    assert rsocket.decode(b"[1, \"a\"]") == [1, "a"]
    # Made only to check the options (no schema known), a built-in keeps every field.
    assert rsocket_publisher(FactoryOptions(options)).decode(b'{"x": 1}') == {"x": 1}
