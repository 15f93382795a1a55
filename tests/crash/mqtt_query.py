"""The query test_mqtt_kill.py runs in a child process: the built-in ``mqtt`` publisher
(persistent session, ``walLocation``) -> parquet sink with a checkpoint.

Writes ``ready-<run>`` once the run's first batch with rows is done. Without ``--final``
it runs until killed. With ``--final`` it runs until the sink holds every id below
``--expect`` (or ``--timeout`` passes), then writes every id the sink holds, one a line,
duplicates included, to ``committed``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--dir", "--host", "--port", "--topic", "--client-id", "--run"):
        parser.add_argument(name, required=True)
    parser.add_argument("--final", action="store_true")
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--per-trigger", type=int, default=1000)
    args = parser.parse_args()

    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StreamingQueryListener

    from pyspark_reactive import local_session

    folder = Path(args.dir)
    ready = folder / f"ready-{args.run}"

    class Ready(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            if event.progress.numInputRows > 0 and not ready.exists():
                ready.write_text(f"{time.time()}\n")

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark = local_session(app_name=f"mqtt-kill-{args.run}")
    spark.streams.addListener(Ready())
    df = (spark.readStream.format("reactive").schema("id BIGINT")
          .option("publisher", "mqtt").option("host", args.host).option("port", args.port)
          .option("topic", args.topic).option("clientId", args.client_id)
          .option("format", "json").option("maxRecordsPerTrigger", args.per_trigger)
          .option("walLocation", str(folder / "wal")).load())
    query = (df.writeStream.format("parquet").option("path", str(folder / "sink"))
             .option("checkpointLocation", str(folder / "checkpoint")).start())
    if not args.final:
        query.awaitTermination()  # raises if the query fails; only a kill ends it otherwise
        print("mqtt_query: the query ended without a kill", file=sys.stderr)
        return 3
    deadline = time.monotonic() + args.timeout
    sink = str(folder / "sink")
    while True:
        if query.awaitTermination(0.5):  # raises if the query failed
            print("mqtt_query: the final query ended by itself", file=sys.stderr)
            return 3
        if ready.exists():
            distinct = spark.read.parquet(sink).where(F.col("id") < args.expect).select(
                F.countDistinct("id")).first()
            if distinct is not None and distinct[0] >= args.expect:
                break
        if time.monotonic() > deadline:
            print(f"mqtt_query: the sink did not get all {args.expect} ids within "
                  f"{args.timeout} s", file=sys.stderr)
            break
    query.stop()
    ids = spark.read.parquet(sink).select("id").toArrow().column(0).to_pylist()
    (folder / "committed").write_text("".join(f"{i}\n" for i in ids))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
