"""expose() and serve_publisher() (pyspark_reactive.publishers.remote) with real queries:
a live publisher of this process exposed to a query's source (which runs in another
process), and a query's output served to a plain rsocket-py client whose REQUEST_N paces
the query."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import VariantVal
from rsocket_peer import (
    UNBOUNDED_REQUEST_N,
    PlainClient,
    RecordingRange,
    settled,
    socket_allowance,
)
from streaming import UNTIL_DRAINED, ProgressWatch
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive import publish
from pyspark_reactive.publishers.remote import expose, serve_publisher, to_json
from pyspark_reactive.publishers.rsocket import rsocket_publisher
from reactive_streams import collect
from reactive_streams.adapters.rsocket import RemoteStreamError, RSocketPublisher

__all__ = ["queries", "watch"]  # fixtures shared with test_source

PER_BATCH = 400


def test_exposed_live_publisher_gets_each_batch_demand_and_every_element_once(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    live = RecordingRange(3000)  # lives here, in the test's process
    with expose(live, route="live") as exposed:
        # The runner connects over a Unix socket in a folder only this user can enter.
        token_file = exposed.options["tokenFile"]
        socket_path = exposed.options["socketPath"]
        assert exposed.options == {"publisher": "rsocket", "socketPath": socket_path,
                                   "format": "json", "route": "live", "tokenFile": token_file}
        assert exposed.service.port is None and exposed.service.path == socket_path
        assert Path(socket_path).parent == Path(token_file).parent
        df = exposed.read_stream(spark, "value BIGINT", maxRecordsPerTrigger=PER_BATCH)
        query, name = to_memory(df, queries, tmp_path, **UNTIL_DRAINED)
        assert watch.wait_drained(query, 3000) is None
    values = sorted(row.value for row in spark.table(name).collect())
    assert values == list(range(3000))
    assert live.subscriptions == 1 and live.delivered == 3000
    # The source's own prefetch is one micro-batch: it asks for the next batch's rows
    # while Spark processes the current one, so the live publisher never has more than
    # maxRecordsPerTrigger outstanding, and is asked for nothing beyond that.
    assert live.requests[0] == PER_BATCH
    assert 0 < live.max_outstanding <= PER_BATCH, live.requests
    assert sum(live.requests) <= live.delivered + PER_BATCH
    assert max(watch.batch_sizes(query)) == PER_BATCH


def test_expose_and_serve_publisher_check_their_arguments_in_their_own_name() -> None:
    with pytest.raises(ValueError, match="format='xml' is not accepted: one of json, text"):
        expose(RecordingRange(1), format="xml")
    with pytest.raises(ValueError, match="^expose: port=70000 is not accepted"):
        expose(RecordingRange(1), port=70000)
    with pytest.raises(ValueError, match=r"^expose: route='r+'\.\.\. \(256 bytes\) is not "
                                         "accepted: at most 255 bytes"):
        expose(RecordingRange(1), route="r" * 256)
    with pytest.raises(ValueError, match="^serve_publisher: prefetch=0 is not accepted"):
        serve_publisher(RecordingRange(1), prefetch=0)


def test_query_output_served_over_rsocket_is_paced_by_a_slow_remote_client(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    rows, per_batch, step = 3000, 500, 300
    df = reactive(spark, publisher="range", count=rows, maxRecordsPerTrigger=per_batch).load()
    publisher = publish(df, checkpointLocation=str(tmp_path / "checkpoint"))
    query = publisher.query
    queries.append(query)
    with serve_publisher(publisher, route="rows") as service, \
            PlainClient(service.port, token=service.token) as client:
        client.request_stream(step, route_name="rows")
        received = step
        while True:
            client.wait_payloads(received)
            # A batch's function returns only once the client has taken all its rows, so
            # exactly the batches it has taken whole are done, and the next one waits for
            # the client to request more.
            whole = received // per_batch
            watch.wait_for(query, lambda whole=whole: len(watch.batch_sizes(query)) >= whole,
                           what=f"{whole} batches taken whole")
            assert len(watch.batch_sizes(query)) == whole, (received, watch.batch_sizes(query))
            assert len(client.payloads) == received
            if received == rows:
                break
            client.request(step)
            received += step
        query.stop()
        client.wait_end()
    values = [row["value"] for row in client.json_rows()]
    assert sorted(values) == list(range(rows))


def test_a_client_that_stops_reading_holds_the_query_back(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        tmp_path: Path) -> None:
    # Unbounded demand, then the client reads no more: the query may run on only as far
    # as the prefetch and the socket buffers take its rows, not into the driver's memory.
    rows, per_batch, prefetch, size = 300, 50, 8, 65536
    df = reactive(spark, publisher="range", count=rows, maxRecordsPerTrigger=per_batch).load()
    df = df.selectExpr("value", f"repeat('x', {size}) AS pad")
    publisher = publish(df, checkpointLocation=str(tmp_path / "checkpoint"))
    query = publisher.query
    queries.append(query)
    with serve_publisher(publisher, prefetch=prefetch) as service, \
            PlainClient(service.port, receive_buffer=4 * size,
                        token=service.token) as client:
        client.request_stream(UNBOUNDED_REQUEST_N)
        client.wait_payloads(per_batch)
        client.stall()
        read = len(client.payloads)
        # Batches end only while the server takes rows; watch until none has ended for a
        # two seconds (a batch of 50 rows takes well under one here).
        done = settled(lambda: len(watch.batch_sizes(query)), window=2.0, timeout=120)
        allowance = socket_allowance(client.socket, size)
        assert done <= (read + prefetch + allowance) // per_batch, (
            f"{done} batches of {per_batch} rows ended while the client had read {read} "
            f"rows (prefetch {prefetch}, {allowance} rows in the socket buffers)")
        client.resume()
        watch.wait_for(query, lambda: len(watch.batch_sizes(query)) > done,
                       what="the next batch, once the client reads again")
        query.stop()
        client.wait_end()
    values = [row["value"] for row in client.json_rows()]
    assert values == list(range(len(values))) and len(values) >= (done + 1) * per_batch


def test_rows_travel_as_json() -> None:
    assert json.loads(to_json(Row(id=1, name="a", raw=b"\x00"))) == {
        "id": 1, "name": "a", "raw": "AA=="}


def _strict(document: bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} is not strict JSON: {document!r}")

    return json.loads(document, parse_constant=refuse)


def test_every_value_spark_hands_over_becomes_strict_json() -> None:
    row = Row(nan=float("nan"), up=float("inf"), down=float("-inf"), x=1.5,
              day=datetime.timedelta(days=1), span=datetime.timedelta(hours=-36, seconds=-0.25),
              zero=datetime.timedelta(0), keys={1: "a", datetime.date(2026, 1, 1): 2},
              variant=VariantVal.parseJson('{"a": [1, null]}'),
              nested=[Row(at=datetime.time(1, 2), amount=decimal.Decimal("1.50"))])
    assert _strict(to_json(row)) == {
        "nan": "NaN", "up": "Infinity", "down": "-Infinity", "x": 1.5, "day": "P1D",
        "span": "-P1DT12H0.25S", "zero": "PT0S", "keys": {"1": "a", "2026-01-01": 2},
        "variant": {"a": [1, None]}, "nested": [{"at": "01:02:00", "amount": "1.50"}]}


def test_a_row_with_two_columns_of_one_name_is_refused_not_halved() -> None:
    with pytest.raises(ValueError, match="the row has more than one column named 'id'"):
        to_json(Row("id", "name", "id")(1, "a", 2))
    with pytest.raises(ValueError, match="more than one column named 'x'"):
        to_json({"outer": Row("x", "x")(1, 2)})


def test_the_source_gets_the_token_through_a_private_file_never_through_the_options() -> None:
    with expose(RecordingRange(3), token="exposed-secret") as exposed:
        token_file = Path(exposed.options["tokenFile"])
        assert exposed.service.token == "exposed-secret"
        assert "exposed-secret" not in repr(exposed) and "exposed-secret" not in str(
            exposed.options)
        assert token_file.read_text() == "exposed-secret"
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert token_file.parent.stat().st_mode & 0o777 == 0o700
        # What the source's built-in rsocket makes from the options presents the token;
        # without it, a client is refused.
        with pytest.raises(RemoteStreamError, match="the token was refused: none"):
            collect(RSocketPublisher(path=exposed.service.path), timeout=10)
        assert collect(rsocket_publisher(exposed.options), timeout=10) == [0, 1, 2]
    assert not token_file.parent.exists()


def test_expose_on_tcp_when_asked_for_an_address() -> None:
    # Where Unix sockets are missing, or when a host or port is given: TCP, with the
    # loopback of both families held, and the token file as before.
    with expose(RecordingRange(3), host="127.0.0.1") as exposed:
        port = exposed.service.port
        assert port and exposed.options["host"] == "127.0.0.1"
        assert exposed.options["port"] == str(port) and "socketPath" not in exposed.options
        assert f"127.0.0.1:{port}" in exposed.service.addresses
        assert collect(rsocket_publisher(exposed.options), timeout=10) == [0, 1, 2]
