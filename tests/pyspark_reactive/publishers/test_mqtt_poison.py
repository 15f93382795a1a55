"""Poison messages (issue 19, finding 6): with ``badPayloads=skip`` no element that cannot
become a row stops the query (undecodable JSON, JSON nested past the recursion limit, a
value that does not fit the schema), each is acknowledged in its turn and counted; with
``fail`` the error names the element's offset and the reason. The intake's part (leaving
elements out, releasing their demand, counting them for ``on_durable``, one log line a
batch) is also tested on its own with an in-process publisher.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

import mosquitto
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StructType
from streaming import ProgressWatch
from test_mqtt import _first_messages, broker
from test_source import queries, reactive, to_memory, watch

from pyspark_reactive.source.demand_buffer import DemandBuffer
from pyspark_reactive.source.intake import Intake
from pyspark_reactive.source.rows import RowConverter, Undecodable, arrow_schema
from reactive_streams import IterablePublisher

__all__ = ["broker", "queries", "watch"]  # fixtures shared with other test modules

NESTED = b"[" * 20_000 + b"]" * 20_000  # json.loads raises RecursionError
POISON = [NESTED, b'{"id": "abc"}', b'{"id": 1.5}', b'{"id": 1180591620717411303424}',
          b"[1, 2]", b"\xff\xfe", b"null", b"{"]


def test_skip_leaves_out_what_cannot_become_a_row_and_acknowledges_it(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        broker: mosquitto.Broker, tmp_path: Path) -> None:
    topic = f"poison/skip/{uuid.uuid4().hex[:8]}"
    client_id = mosquitto.persistent_session(broker, topic)
    payloads: list[bytes] = []
    for i, bad in enumerate(POISON):
        payloads += [json.dumps({"id": i}).encode(), bad]
    rows = len(POISON) + 1
    payloads.append(json.dumps({"id": len(POISON)}).encode())  # after every poison message
    mosquitto.publish(broker.host, broker.port, topic, payloads)
    # (That the demand of elements left out comes back, so a window smaller than their
    # number does not stall: test_the_intake_skips_counts_releases_and_logs_once_a_batch.)
    df = reactive(spark, publisher="mqtt", host=broker.host, port=broker.port, topic=topic,
                  clientId=client_id, format="json", badPayloads="skip",
                  walLocation=tmp_path / "wal").schema("id BIGINT").load()
    query, name = to_memory(df, queries, tmp_path)
    watch.wait_rows(query, rows)
    query.stop()
    assert query.exception() is None
    assert sorted(r.id for r in spark.table(name).collect()) == list(range(rows))
    # Elements left out take no offset: the batch that took the last row had received
    # every poison message, and the progress's latestOffset (how far the publisher got)
    # counts rows only, never beyond the last row's offset.
    last = next(p for p in reversed(watch.progress[str(query.runId)]) if p.numInputRows)
    if last.sources[0].latestOffset:  # Spark 4.2+ asks the source (reportLatestOffset)
        assert json.loads(last.sources[0].latestOffset)["offset"] <= rows, last.sources[0]
    # Every poison message was acknowledged in its turn (in the log, so at once), so
    # nothing comes again. (Without a log: test_the_intake_skips_counts_releases_...)
    assert _first_messages(broker, topic, client_id, 1) == [b"marker"]


def test_fail_names_the_offset_and_the_reason(
        spark: SparkSession, watch: ProgressWatch, queries: list[StreamingQuery],
        broker: mosquitto.Broker, tmp_path: Path) -> None:
    topic = f"poison/fail/{uuid.uuid4().hex[:8]}"
    client_id = mosquitto.persistent_session(broker, topic)
    mosquitto.publish(broker.host, broker.port, topic, [b'{"id": 0}', b'{"id": 1}', NESTED])
    df = reactive(spark, publisher="mqtt", host=broker.host, port=broker.port, topic=topic,
                  clientId=client_id, format="json").schema("id BIGINT").load()
    query, _ = to_memory(df, queries, tmp_path)
    error = watch.wait_terminated(query)
    assert error is not None
    assert ("element at offset 2: format=json: the payload b'[[[[" in error
            and "is JSON nested too deeply to parse" in error), error
    assert "badPayloads=skip leaves such messages out" in error


class _Poisoned(IterablePublisher[Any]):
    """Elements some of which cannot become rows; asks the source to skip them, and
    records what it is told is durable."""

    skip_unfit_elements = True

    def __init__(self, elements: list[Any]) -> None:
        super().__init__(elements)
        self.durable: list[int] = []
        self.told = threading.Event()

    def on_durable(self, count: int) -> None:
        self.durable.append(count)
        self.told.set()


def test_the_intake_skips_counts_releases_and_logs_once_a_batch(
        caplog: pytest.LogCaptureFixture) -> None:
    schema = StructType().add("id", LongType())
    good = [{"id": i} for i in range(10)]
    elements: list[Any] = [good[0], {"id": "x"}, Undecodable("not JSON"), good[1]]
    elements += [{"id": 0.5}] * 300 + good[2:] + [Undecodable("last")]
    publisher = _Poisoned(elements)
    buffer = DemandBuffer(5, own_thread=False)  # fewer than the elements left out
    intake = Intake(buffer, RowConverter(schema), arrow_schema(schema), None, 100,
                    sync_ms=10_000, sync_rows=10_000, publisher=publisher)
    try:
        buffer.start(publisher)
        cursor = 100
        with caplog.at_level(logging.WARNING, logger="pyspark_reactive.source"):
            # What the source does for each batch: sync, then take (release) the new rows.
            for _ in range(len(elements)):
                if intake.consumed == len(elements):
                    break
                assert buffer.wait(1, 10), "the stream stalled"
                intake.sync()
                taken, cursor = intake.end - cursor, intake.end
                buffer.release(taken)
            assert intake.consumed == len(elements), f"consumed {intake.consumed}"
    finally:
        intake.stop()
        buffer.close()
    table = [row for segment in intake.segments for row in segment.table.to_pylist()]
    assert table == good
    assert intake.skipped == 303 and intake.end == 110
    lines = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert lines, "no log line for the elements left out"
    assert "element at offset 101: column 'id' (bigint) cannot hold 'x'" in lines[0]
    assert "element at offset 101: not JSON" in lines[0]
    assert sum(int(line.split("left out ")[1].split()[0]) for line in lines) == 303
    # Without a log, durable once Spark commits: the left-out elements count with the rows
    # around them, so committing every row acknowledges every element, the last too.
    intake.committed(110)
    intake.finish([])
    assert publisher.durable[-1] == len(elements)
