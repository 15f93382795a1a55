"""expose() from a Spark Connect client: the server (on this machine) starts the source
runner, which connects back to the live publisher served by this client process."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from rsocket_peer import RecordingRange
from test_connect_source import run_to_end

from pyspark_reactive.publishers.remote import expose


def test_live_publisher_of_the_client_feeds_a_query(spark: SparkSession,
                                                    tmp_path: Path) -> None:
    live = RecordingRange(1000)
    with expose(live) as exposed:
        df = exposed.read_stream(spark, "value BIGINT", maxRecordsPerTrigger=500)
        rows = run_to_end(df, tmp_path, "exposed", 1000)
    assert sorted(r.value for r in rows) == list(range(1000))
    assert live.requests[0] == 500
    assert live.max_outstanding <= 500

