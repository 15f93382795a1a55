"""The query test_broker_kills.py runs in a child process: one query reading four brokers
through the built-ins ``redis``, ``nats``, ``rabbitmq`` and ``mqtt`` (MQTT 3.1.1, from
RabbitMQ's MQTT plugin), each with a ``walLocation`` of its own, unioned into one parquet
sink with a checkpoint, with no deduplication.

``--config`` names a JSON file: for each source, the options the test gives it. Writes
``ready-<run>`` once a batch of the run has rows. Without ``--final`` it runs until killed.
With ``--final`` it runs until the sink holds every id below ``--expect`` for each source
(or ``--timeout`` passes), then writes every (source, id) the sink holds, one a line,
duplicates included, to ``committed``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--final", action="store_true")
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--per-trigger", type=int, default=500)
    args = parser.parse_args()

    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StreamingQueryListener

    from pyspark_reactive import local_session

    folder = Path(args.dir)
    ready = folder / f"ready-{args.run}"
    sources: dict[str, dict[str, Any]] = json.loads(Path(args.config).read_text())

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

    spark = local_session(app_name=f"broker-kills-{args.run}")
    spark.streams.addListener(Ready())
    frames = []
    for name, options in sources.items():
        reader = (spark.readStream.format("reactive").schema("id BIGINT")
                  .option("format", "json").option("maxRecordsPerTrigger", args.per_trigger)
                  .option("walLocation", str(folder / f"wal-{name}")))
        for key, value in options.items():
            reader = reader.option(key, str(value))
        frames.append(reader.load().select(F.lit(name).alias("source"), "id"))
    df = frames[0]
    for frame in frames[1:]:
        df = df.unionByName(frame)
    query = (df.writeStream.format("parquet").option("path", str(folder / "sink"))
             .option("checkpointLocation", str(folder / "checkpoint")).start())
    if not args.final:
        query.awaitTermination()  # raises if the query fails; only a kill ends it otherwise
        print("brokers_query: the query ended without a kill", file=sys.stderr)
        return 3
    deadline = time.monotonic() + args.timeout
    sink = str(folder / "sink")
    while True:
        if query.awaitTermination(0.5):  # raises if the query failed
            print("brokers_query: the final query ended by itself", file=sys.stderr)
            return 3
        if ready.exists():
            counts = (spark.read.parquet(sink).where(F.col("id") < args.expect)
                      .groupBy("source").agg(F.countDistinct("id").alias("n")).collect())
            if len(counts) == len(sources) and all(r.n >= args.expect for r in counts):
                break
        if time.monotonic() > deadline:
            print(f"brokers_query: the sink did not get all {args.expect} ids of each source "
                  f"within {args.timeout} s", file=sys.stderr)
            break
    query.stop()
    rows = spark.read.parquet(sink).select("source", "id").collect()
    (folder / "committed").write_text("".join(f"{r.source} {r.id}\n" for r in rows))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
