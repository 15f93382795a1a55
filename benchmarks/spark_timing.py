"""Timing a streaming DataFrame into Spark's ``noop`` sink, shared by the benchmarks of
the built-in network publishers (rsocket, websocket)."""

from __future__ import annotations

import tempfile
import time
from typing import Any


def available_now_rate(df: Any, rows: int) -> float:
    """Rows/s of one ``availableNow`` query of ``df`` into the ``noop`` sink, from
    ``start()`` to its end; checks the query read exactly ``rows`` rows."""
    with tempfile.TemporaryDirectory() as checkpoint:
        began = time.perf_counter()
        query = (df.writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        took = time.perf_counter() - began
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        done = sum(p.numInputRows for p in query.recentProgress)
        assert done == rows, f"{done} rows of {rows}"
    return rows / took
