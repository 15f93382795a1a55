"""Makes the checked-in checkpoint beside this file: a query of the ``reactive`` source
reading on the driver (no ``shards``), as the source wrote it before it could read shards
(commit 764dbeb), stopped after three batches.

It was run once with that commit's code first on the path, and its output checked in::

    git worktree add /tmp/old 764dbeb
    PYTHONPATH=/tmp/old/src .venv/bin/python tests/cluster/single_shard/make.py OUT

``OUT`` then holds ``checkpoint/`` and ``wal/`` (the query's checkpoint and write-ahead
log) and ``batches/<id>.json`` (each batch's ids, written by ``foreachBatch``; a batch is
kept only where ``checkpoint/commits`` has it). ``range`` with ``count`` 3,000 and 500
rows a batch: a restart reads ids 1,500 to 2,999 (tests/cluster/test_sharded_kills.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

COUNT = 3_000
PER_BATCH = 500
BATCHES = 3


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True)
    import pyspark_reactive
    from pyspark_reactive import local_session

    print(f"pyspark_reactive from {pyspark_reactive.__file__}")
    spark = local_session("single-shard-checkpoint")
    (out / "batches").mkdir()

    def keep(df: Any, batch_id: int) -> None:
        ids = sorted(row.value for row in df.collect())
        (out / "batches" / f"{batch_id}.json").write_text(json.dumps(ids))

    df = (spark.readStream.format("reactive").option("publisher", "range")
          .option("count", COUNT).option("maxRecordsPerTrigger", PER_BATCH)
          .option("walLocation", str(out / "wal")).load())
    query = (df.writeStream.foreachBatch(keep)
             .option("checkpointLocation", str(out / "checkpoint")).start())
    deadline = time.monotonic() + 120
    while not (out / "checkpoint" / "commits" / str(BATCHES - 1)).exists():
        if time.monotonic() > deadline or not query.isActive:
            raise SystemExit(f"no {BATCHES} batches: {query.exception()}")
        query.awaitTermination(0.2)
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
