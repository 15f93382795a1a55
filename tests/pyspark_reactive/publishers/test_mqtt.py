"""The built-in ``mqtt`` publisher against a real mosquitto on 127.0.0.1
(tests/peers/mosquitto.py), which Spark's source runner (another process) connects to:
JSON payloads into the schema given and the message columns, every message once, each
acknowledged once durable (with and without ``walLocation``), and options checked by
load() without connecting.

Each query resumes a persistent session made beforehand, so the messages published before
the query starts wait in the broker for it.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import mosquitto
import psutil
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from streaming import ProgressWatch
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive.publishers.mqtt import (
    _FAIL_HINT,
    MESSAGE_SCHEMA,
    SHARD_READ_AHEAD,
    _parse_json,
    _Publisher,
    default_schema,
    mqtt_publisher,
)
from pyspark_reactive.source.options import OptionError
from pyspark_reactive.source.rows import Undecodable
from reactive_streams import collect
from reactive_streams.adapters.mqtt import MqttMessage, MqttPublisher

__all__ = ["queries", "watch"]  # fixtures shared with test_source


@pytest.fixture(scope="module")
def broker() -> Iterator[mosquitto.Broker]:
    with mosquitto.Broker() as running:
        yield running


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # ended meanwhile
        return []


def _first_messages(broker: mosquitto.Broker, topic: str, client_id: str,
                    count: int) -> list[bytes]:
    """Publish a marker, then resume the session: what comes before the marker is what
    the query did not acknowledge."""
    # query.stop() returns before the source runner has acted on its SIGTERM: while it is
    # still connected with the session, it would take the marker itself.
    runners = [p for p in psutil.Process().children(recursive=True)
               if "python_streaming_source_runner" in " ".join(_cmdline(p))]
    psutil.wait_procs(runners, timeout=30)
    mosquitto.publish(broker.host, broker.port, topic.replace("+", "marker"), [b"marker"])
    messages = collect(MqttPublisher(broker.host, topic, port=broker.port,
                                     client_id=client_id, max_messages=count), timeout=20)
    return [m.payload for m in messages]


def test_json_payloads_into_the_schema_each_once_acknowledged_once_logged(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        broker: mosquitto.Broker, tmp_path: Path) -> None:
    topic = f"spark/json/{uuid.uuid4().hex[:8]}"
    client_id = mosquitto.persistent_session(broker, topic)
    count = 500
    payloads = [json.dumps({"id": i, "name": f"n{i}"}) for i in range(count)]
    # badPayloads=skip: these are left out, and acknowledged like the rest.
    for at, bad in ((0, "not json"), (250, "null"), (251, "{"), (count + 3, "null")):
        payloads.insert(at, bad)
    mosquitto.publish(broker.host, broker.port, topic, payloads)
    df = reactive(spark, publisher="mqtt", host=broker.host, port=broker.port, topic=topic,
                  clientId=client_id, format="json", badPayloads="skip",
                  maxRecordsPerTrigger=200,
                  walLocation=tmp_path / "wal").schema("id BIGINT, name STRING").load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, count)
    query.stop()
    rows = spark.table(name).collect()
    assert sorted(row.id for row in rows) == list(range(count))  # each once
    assert all(row.name == f"n{row.id}" for row in rows)
    assert max(watch.batch_sizes(query)) <= 200
    # Every message was in the log, so acknowledged (the last ones as the source stopped).
    assert _first_messages(broker, topic, client_id, 1) == [b"marker"]


def test_message_columns_without_a_log_acknowledged_once_committed(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        broker: mosquitto.Broker, tmp_path: Path) -> None:
    topic = f"spark/columns/{uuid.uuid4().hex[:8]}"
    client_id = mosquitto.persistent_session(broker, f"{topic}/+")
    before = datetime.datetime.now()
    mosquitto.publish(broker.host, broker.port, f"{topic}/a", [b"\x00", b"\x01"])
    df = reactive(spark, publisher="mqtt", host=broker.host, port=broker.port,
                  topic=f"{topic}/+", clientId=client_id).load()
    assert df.schema.simpleString() == (
        "struct<topic:string,payload:binary,qos:int,retain:boolean,timestamp:timestamp>")
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, 2)
    # The broker keeps no QoS 0 message for a session that is away: send it now. Each
    # message makes another batch, and Spark commits a batch when it plans the next.
    mosquitto.publish(broker.host, broker.port, f"{topic}/b", [b"\xff"], qos=0)
    watch.wait_rows(query, 3)
    mosquitto.publish(broker.host, broker.port, f"{topic}/a", [b"\x02"])
    watch.wait_rows(query, 4)
    query.stop()
    rows = sorted(spark.table(name).collect(), key=lambda r: (r.topic, bytes(r.payload)))
    assert [(r.topic, bytes(r.payload), r.qos, r.retain) for r in rows] == [
        (f"{topic}/a", b"\x00", 1, False), (f"{topic}/a", b"\x01", 1, False),
        (f"{topic}/a", b"\x02", 1, False), (f"{topic}/b", b"\xff", 0, False)]
    assert all(r.timestamp >= before - datetime.timedelta(seconds=1) for r in rows)
    # Without a log a message is acknowledged once Spark commits its batch: the first
    # ones were; the last batch was not committed when the query stopped, so its
    # message comes again, before the marker.
    assert _first_messages(broker, f"{topic}/+", client_id, 2) == [b"\x02", b"marker"]


def test_load_checks_the_options_and_connects_nowhere(spark: SparkSession) -> None:
    # Nothing listens on this port: load() must not try.
    port = mosquitto.free_port()
    df = reactive(spark, publisher="mqtt", host="127.0.0.1", port=port, topic="a/#").load()
    assert df.schema.simpleString().startswith("struct<topic:string,payload:binary")
    with pytest.raises((OptionError, PySparkException), match="option topic='a/#/b'"):
        reactive(spark, publisher="mqtt", host="127.0.0.1", topic="a/#/b").load()


@pytest.mark.parametrize("options, message", [
    ({"topic": "t"}, "option host=None is not accepted: the broker's host"),
    ({"host": "h"}, "option topic=None is not accepted: a topic filter"),
    ({"host": "h", "topic": "a/b+"}, "'+' must be a whole level"),
    ({"host": "h", "topic": "t", "qos": "2"}, "option qos='2' is not accepted"),
    ({"host": "h", "topic": "t", "port": "x"}, "option port='x'"),
    ({"host": "h", "topic": "t", "cleanStart": "maybe"}, "true or false"),
    ({"host": "h", "topic": "t", "cleanStart": "false"}, "or set clientId"),
    ({"host": "h", "topic": "t", "format": "xml"}, "one of message, json"),
    ({"host": "h", "topic": "t", "receiveMaximum": "1000"},
     "more than 2 x maxRecordsPerTrigger (20000) without walLocation"),
    ({"host": "h", "topic": "t", "caCerts": "/no/such/file.pem"},
     "a readable PEM file of certificate authorities"),
    ({"host": "h", "topic": "t", "password": "secret"},
     "option password='(hidden)' is not accepted: a value only with username"),
    ({"host": "h", "topic": "t", "sessionExpiry": "86400"},
     "option sessionExpiry='86400' is not accepted: 0, or set clientId"),
    # The default receiveMaximum cannot be raised: the error is about the option given.
    ({"host": "h", "topic": "t", "maxRecordsPerTrigger": "40000"},
     "option maxRecordsPerTrigger='40000' is not accepted: at most 32767 without "
     "walLocation"),
    ({"host": "h", "topic": "t", "receiveMaximum": "1000", "maxRecordsPerTrigger": "40000"},
     "option maxRecordsPerTrigger='40000' is not accepted: at most 499 without walLocation"),
    ({"host": "h", "topic": "t", "badPayloads": "skip"}, "skip only with format=json"),
    ({"host": "h", "topic": "t", "format": "json", "badPayloads": "drop"},
     "one of fail, skip"),
    ({"host": "h", "topic": "t", "identityColumn": "id"},
     "option identityColumn='id' is not accepted: a column of the schema, with format=json"),
])
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as raised:
        mqtt_publisher(options)
    assert message in str(raised.value)


def test_options_reach_the_publisher() -> None:
    publisher = mqtt_publisher({"host": "broker", "port": "8883", "topic": "a/+",
                                "qos": "0", "clientId": "q", "sessionExpiry": "60",
                                "username": "u", "password": "p", "tls": "true",
                                "receiveMaximum": "500", "walLocation": "/tmp/x",
                                "maxRecordsPerTrigger": "300", "keepalive": "5",
                                "maxMessages": "7"})
    assert isinstance(publisher, MqttPublisher)
    assert (publisher.host, publisher.port, publisher.topic, publisher.qos) == (
        "broker", 8883, "a/+", 0)
    assert (publisher.client_id, publisher.clean_start, publisher.session_expiry) == (
        "q", False, 60)
    assert (publisher.username, publisher.password, publisher.tls) == ("u", "p", True)
    assert (publisher.receive_maximum, publisher.max_buffered) == (500, 300)
    assert (publisher.keepalive, publisher.max_messages) == (5, 7)
    assert publisher.acknowledge == "on_durable"
    fresh = mqtt_publisher({"host": "h", "topic": "t"})
    assert isinstance(fresh, MqttPublisher)
    assert (fresh.qos, fresh.clean_start, fresh.session_expiry, fresh.receive_maximum) == (
        1, True, 0, 65535)


def test_json_payloads_that_are_no_row_name_format_topic_and_payload() -> None:
    # Not raised: an Undecodable element keeps the message's place in the stream, so the
    # source fails at its offset (fail) or leaves it out and acknowledges it (skip).
    for payload, problem in ((b"null", "is JSON null, not a row"),
                             (b"{'id': 1}", "is not JSON"),
                             (b"[" * 100_000 + b"]" * 100_000, "is JSON nested too deeply"),
                             (b"\xff\xfe", "is not JSON"),
                             (b"1" * 5000, "is not JSON")):
        message = MqttMessage("plant/7", payload, 1, False, 0.0)
        where = (f"format=json: the payload {payload[:80]!r}"
                 f"{'...' if len(payload) > 80 else ''} of a message of topic 'plant/7' ")
        failed = _parse_json(message, hint=_FAIL_HINT)
        assert isinstance(failed, Undecodable)
        assert failed.reason.startswith(where + problem), failed.reason
        assert "badPayloads=skip" in failed.reason
        skipped = _parse_json(message)
        assert isinstance(skipped, Undecodable)
        assert "badPayloads=skip" not in skipped.reason
    assert _parse_json(MqttMessage("t", b'{"id": 1}', 1, False, 0.0)) == {"id": 1}


def test_default_schemas() -> None:
    assert default_schema({}) == MESSAGE_SCHEMA
    with pytest.raises(OptionError, match="format=json parses each payload"):
        default_schema({"format": "JSON"})


def test_two_shards_of_a_shared_subscription_read_every_message_once(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        broker: mosquitto.Broker, tmp_path: Path) -> None:
    topic = f"spark/shards/{uuid.uuid4().hex[:8]}"
    client_id = f"shards-{uuid.uuid4().hex[:8]}"
    for shard in (0, 1):  # each shard's session, queueing before the query starts
        mosquitto.persistent_session(broker, f"$share/{client_id}/{topic}",
                                     f"{client_id}-{shard}")
    count = 400
    mosquitto.publish(broker.host, broker.port, topic,
                      [json.dumps({"id": i}) for i in range(count)])
    df = reactive(spark, publisher="mqtt", host=broker.host, port=broker.port, topic=topic,
                  clientId=client_id, format="json", shards=2, maxRecordsPerTrigger=100,
                  walLocation=tmp_path / "wal").schema("id BIGINT").load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, count)
    query.stop()
    assert sorted(row.id for row in spark.table(name).collect()) == list(range(count))
    assert max(watch.batch_sizes(query)) <= 100


def test_shards_need_a_client_id_for_the_shards_sessions() -> None:
    from pyspark_reactive.source.durability import FactoryOptions
    from pyspark_reactive.source.shards import Shard

    options = FactoryOptions({"host": "127.0.0.1", "topic": "a/b"}, shard=Shard(0, 2))
    with pytest.raises(OptionError, match=r"option clientId=None .*with shards"):
        mqtt_publisher(options)
    named = FactoryOptions({"host": "127.0.0.1", "topic": "a/b", "clientId": "q"},
                           shard=Shard(1, 2))
    made = mqtt_publisher(named)
    assert "$share/q/a/b" in repr(made) and "q-1" in repr(made)
    # A shard's task requests its share at once: little is read beyond it.
    assert isinstance(made, MqttPublisher) and made.max_buffered == SHARD_READ_AHEAD
    small = mqtt_publisher(FactoryOptions({"host": "h", "topic": "t", "clientId": "q",
                                           "receiveMaximum": "100", "walLocation": "/w"},
                                          shard=Shard(0, 2)))
    assert isinstance(small, MqttPublisher) and small.max_buffered == 100


def test_identity_column_names_a_column_and_identifies_messages() -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    from pyspark_reactive.source.durability import FactoryOptions
    from pyspark_reactive.source.shards import Shard

    schema = StructType([StructField("id", LongType()), StructField("v", LongType())])
    options = {"host": "127.0.0.1", "topic": "a/b", "clientId": "q", "format": "json"}
    with pytest.raises(OptionError, match=r"option identityColumn='key' is not accepted: "
                                          r"a column of the schema: one of id, v"):
        mqtt_publisher(FactoryOptions({**options, "identityColumn": "key"}, schema=schema,
                                      shard=Shard(0, 2)))
    made = mqtt_publisher(FactoryOptions({**options, "identityColumn": "id"}, schema=schema,
                                         shard=Shard(0, 2)))
    assert isinstance(made, _Publisher)
    assert [made.identity(e) for e in ({"id": 7, "v": 1}, {"v": 1}, None)] == ["7", None, None]
    plain = mqtt_publisher(FactoryOptions(options, schema=schema, shard=Shard(0, 2)))
    assert isinstance(plain, _Publisher)
    assert plain.identity({"id": 7}) is None  # no column: nothing is dropped
