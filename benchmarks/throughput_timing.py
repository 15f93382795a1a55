"""Timings shared by the benchmarks of the network publishers (rsocket, websocket): a
publisher into a counting subscriber, and a streaming DataFrame into Spark's ``noop``
sink."""

from __future__ import annotations

import tempfile
import time
from typing import Any

from reactive_streams import Publisher, SyncSubscriber


class _Counter(SyncSubscriber[Any]):
    count = 0

    def on_element(self, element: Any) -> None:
        self.count += 1


def subscriber_rate(publisher: Publisher[Any], rows: int, batch: int) -> float:
    """Rows/s of ``publisher``'s ``rows`` elements into a subscriber that requests
    ``batch`` at a time and only counts, from ``subscribe`` to the end of the stream."""
    counter = _Counter(batch_size=batch)
    began = time.perf_counter()
    publisher.subscribe(counter)
    counter.join(timeout=600)
    took = time.perf_counter() - began
    assert counter.count == rows, counter.count
    return rows / took


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
