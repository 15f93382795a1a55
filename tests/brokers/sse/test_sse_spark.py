"""The built-in ``sse`` in real Spark against a real SSE server (sse-starlette under uvicorn):
a restarted query resumes from the last durable event's id with no gap and no repeat, and a
slow query holds the server back."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from sse_server import SseServer
from streaming import ProgressWatch, install
from test_source import reactive


@pytest.fixture(scope="module")
def watch(spark: SparkSession) -> Iterator[ProgressWatch]:
    listener = install(spark)
    yield listener
    spark.streams.removeListener(listener)


def _parquet_query(spark: SparkSession, url: str, tmp_path: Path, **more: object
                   ) -> StreamingQuery:
    df = reactive(spark, publisher="sse", url=url, format="json",
                  walLocation=tmp_path / "wal", **more).schema("id BIGINT").load()
    return (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint")).start())


def test_a_restarted_query_resumes_from_the_last_durable_event_with_no_gap(
        spark: SparkSession, watch: ProgressWatch, tmp_path: Path) -> None:
    with SseServer() as server:  # endless: ids 1, 2, 3, ... after each Last-Event-ID
        first = _parquet_query(spark, server.url(), tmp_path, maxRecordsPerTrigger=200)
        try:
            watch.wait_rows(first, 400)
        finally:
            first.stop()
        second = _parquet_query(spark, server.url(), tmp_path, maxRecordsPerTrigger=200)
        try:
            # The second run first replays what the log held beyond the first's last commit
            # (up to two batches); past that, its rows come from its own connection.
            watch.wait_for(second, lambda: watch.rows(second) >= 1000 and any(
                server.last_event_ids), 180, "rows read after the resumed connection")
        finally:
            second.stop()
        resumed = [given for given in server.last_event_ids if given is not None]
    ids = sorted(row.id for row in spark.read.parquet(str(tmp_path / "out")).collect())
    # Every event from the first on, each once: the second run went on right after the
    # last event the first had made durable (its write-ahead log's last position key).
    assert ids == list(range(1, len(ids) + 1)), "a gap or a repeated event"
    assert len(resumed) == 1 and 400 <= int(resumed[0]) < len(ids)


def test_a_slow_query_holds_the_server_back(spark: SparkSession, watch: ProgressWatch,
                                            tmp_path: Path) -> None:
    size, per_trigger = 4000, 20
    with SseServer() as server:
        df = reactive(spark, publisher="sse", url=server.url(size=size),
                      maxRecordsPerTrigger=per_trigger, receiveBufferBytes=16 * 1024).load()
        held = threading.Event()
        taken: list[int] = []

        def slow(batch: DataFrame, batch_id: int) -> None:
            if len(taken) >= 2:
                held.wait(120)  # the query holds its third batch until the test is done
            elif not batch.isEmpty():
                taken.append(batch_id)

        query = df.writeStream.foreachBatch(slow).start()
        try:
            watch.wait_batches(query, 2)
            from test_sse_adapter import _send_buffer_max, _settled

            produced = _settled(lambda: server.produced)
            # The source holds the batch Spark works on and asks for at most one more
            # (2 x maxRecordsPerTrigger); beyond that the sockets' buffers (this side's
            # 16 KiB, uvicorn's 64 KiB, the server's kernel send buffer) hold the rest.
            bound = 4 * per_trigger + (2 * 16 * 1024 + 64 * 1024 + _send_buffer_max()) // (
                size + 40) + 1
            assert produced <= bound, (produced, bound)
        finally:
            held.set()
            query.stop()
    print(f"\nslow query: the server produced {produced} events of {size} bytes, "
          f"bound {bound}")
