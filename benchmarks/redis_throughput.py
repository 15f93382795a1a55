"""Rows/s into Spark through the built-in ``redis`` publisher, beside the ceiling: redis-py
alone reading the same stream as a consumer of a group with the same ``COUNT`` and
acknowledging each read's entries with one ``XACK``; and, to show where the difference
goes, the ``RedisStreamPublisher`` adapter alone.

A redis-server (``tests/peers/redis_server.py``: append-only file, ``appendfsync
everysec``) runs on 127.0.0.1. For each run a new stream gets ``--rows`` entries of one
field ``payload`` (a JSON object of ``--size`` bytes; ``XADD`` in pipelines) and a group
at ``0``, before
the clock starts; the clock runs from the consumer's start (the query's ``start()``) to its
last entry:
(a) the ceiling: redis-py ``XREADGROUP ... COUNT c`` in a loop, keeping every entry in a
list, then ``XACK`` of that read's IDs, where ``c`` is the ``COUNT`` the built-in uses
(``maxBufferedBytes / (maxMessageBytes + 256)`` with the defaults, at most
``maxRecordsPerTrigger``);
(c) ``RedisStreamPublisher`` (on_next acknowledgement, the same ``max_buffered``) into a
subscriber that counts, requesting ``--batch`` at a time, no Spark;
(b) a query reads the stream with ``publisher=redis`` (``--format``: message columns, or
the payload parsed into ``id BIGINT, pad STRING``;
``maxRecordsPerTrigger=--batch``, with ``walLocation`` unless ``--no-wal``) into Spark's
``noop`` sink with the default trigger on ``local[2]``, until its progress events have
counted every row;
(d) the same query over the same rows from memory (``memory_rows``: the dicts the built-in
makes, from an ``IterablePublisher``, no broker): the rate Spark and the source reach for
these rows on this machine, which bounds (b) whatever the broker gives. (b) does the work of
(c) and of (d) in the one source runner process, under one GIL, so ``1 / (1/(c) + 1/(d))``
is printed too: the ceiling that stops (b) when it is below (a).
Each runs ``--repeat`` times after one warm-up; the best run counts, and (b) and (c) are
printed as ratios of (a). Server and consumer share the machine.

Run from the repository root::

    .venv/bin/python benchmarks/redis_throughput.py [--rows N] [--size S] [--batch B]
        [--repeat K] [--no-wal] [--format message|json]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyspark
import redis

from pyspark_reactive import local_session
from pyspark_reactive.publishers.redis import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
)
from reactive_streams import SyncSubscriber
from reactive_streams.adapters.redis_streams import RedisEntry, RedisStreamPublisher

PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"
sys.path.insert(0, str(PEERS))

import redis_server  # noqa: E402

from mqtt_throughput import RowsListener  # noqa: E402 - benchmarks/, the script's folder


def _count(args: argparse.Namespace) -> int:
    """The COUNT of one read, as the built-in sets it (max_buffered)."""
    return max(1, min(args.batch,
                      DEFAULT_MAX_BUFFERED_BYTES // (DEFAULT_MAX_MESSAGE_BYTES + 256)))


def _fill(server: redis_server.RedisServer, args: argparse.Namespace) -> str:
    """A new stream of ``--rows`` entries and its group ``g`` at 0."""
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    client = server.client()
    try:
        client.xgroup_create(stream, "g", id="0", mkstream=True)
        for first in range(0, args.rows, 5000):
            pipe = client.pipeline(transaction=False)
            for i in range(first, min(first + 5000, args.rows)):
                # A JSON object of --size bytes, for format=json as for format=message.
                head = b'{"id":%d,"pad":"' % i
                pad = b"x" * max(0, args.size - len(head) - 2)
                pipe.xadd(stream, {"payload": head + pad + b'"}'})
            pipe.execute()
    finally:
        client.close()
    return stream


def _drop(server: redis_server.RedisServer, stream: str) -> None:
    client = server.client()
    try:
        client.delete(stream)
    finally:
        client.close()


def ceiling(server: redis_server.RedisServer, args: argparse.Namespace) -> float:
    """(a) Rows/s of redis-py alone: XREADGROUP COUNT c, then one XACK per read."""
    stream = _fill(server, args)
    count = _count(args)
    client = redis.Redis(host=server.host, port=server.port, password=server.password,
                         protocol=2)
    kept: list[Any] = []
    began = time.perf_counter()
    while len(kept) < args.rows:
        reply = client.xreadgroup("g", "plain", {stream: ">"}, count=count, block=1000)
        entries = reply[0][1] if reply else []
        kept += entries
        if entries:
            client.xack(stream, "g", *[entry_id for entry_id, _ in entries])
    took = time.perf_counter() - began
    client.close()
    _drop(server, stream)
    assert len(kept) == args.rows, len(kept)
    return args.rows / took


class _Counter(SyncSubscriber[RedisEntry]):
    count = 0

    def on_element(self, element: RedisEntry) -> None:
        self.count += 1


def adapter(server: redis_server.RedisServer, args: argparse.Namespace) -> float:
    """(c) Rows/s of RedisStreamPublisher alone, into a subscriber that counts."""
    stream = _fill(server, args)
    publisher: RedisStreamPublisher[RedisEntry] = RedisStreamPublisher(
        stream, "g", "adapter", port=server.port, password=server.password,
        max_buffered=_count(args), max_messages=args.rows,
        max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES)
    counter = _Counter(batch_size=args.batch)
    began = time.perf_counter()
    publisher.subscribe(counter)
    counter.wait(600)
    took = time.perf_counter() - began
    _drop(server, stream)
    assert counter.count == args.rows, counter.count
    return args.rows / took


def into_spark(spark: Any, server: redis_server.RedisServer, args: argparse.Namespace) -> float:
    """(b) Rows/s of one query reading ``--rows`` entries into the noop sink."""
    stream = _fill(server, args)
    listener = RowsListener(args.rows)
    spark.streams.addListener(listener)
    with tempfile.TemporaryDirectory() as folder:
        reader = (spark.readStream.format("reactive").option("publisher", "redis")
                  .option("url", server.url).option("stream", stream).option("group", "g")
                  .option("passwordFile", str(server.password_file))
                  .option("maxRecordsPerTrigger", args.batch)
                  .option("format", args.format))
        if args.format == "json":
            reader = reader.schema("id BIGINT, pad STRING")
        if not args.no_wal:
            reader = reader.option("walLocation", f"{folder}/wal")
        began = time.perf_counter()
        query = (reader.load().writeStream.format("noop")
                 .option("checkpointLocation", f"{folder}/checkpoint").start())
        if not listener.done.wait(600):
            raise TimeoutError(f"{listener.count} of {args.rows} rows within 600 s")
        took = time.perf_counter() - began
        query.stop()
    spark.streams.removeListener(listener)
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    assert listener.count == args.rows, f"{listener.count} rows of {args.rows}"
    _drop(server, stream)
    return args.rows / took


def memory_rows(options: Any) -> Any:
    """The factory of (d): ``count`` rows as the built-in ``redis`` makes them (the same
    dicts, for ``format``), from memory, through a publisher that acknowledges nothing."""
    import datetime

    from reactive_streams import IterablePublisher

    count, size = int(options["count"]), int(options["size"])
    now = datetime.datetime.now(datetime.timezone.utc)

    def rows() -> Any:
        for i in range(count):
            head = f'{{"id":{i},"pad":"'
            pad = "x" * max(0, size - len(head) - 2)
            if options.get("format") == "json":
                yield {"id": i, "pad": pad}
            else:
                yield {"stream": "s", "id": f"{i}-0",
                       "fields": {"payload": (head + pad + '"}').encode()},
                       "timestamp": now, "redelivered": False}

    return IterablePublisher(rows)


def spark_alone(spark: Any, args: argparse.Namespace) -> float:
    """(d) Rows/s of the same query with the same rows from memory (``memory_rows``, no
    broker): what Spark and the source take for these rows on this machine, the ceiling
    of (b) whatever the broker gives."""
    listener = RowsListener(args.rows)
    spark.streams.addListener(listener)
    with tempfile.TemporaryDirectory() as folder:
        reader = (spark.readStream.format("reactive")
                  .option("publisher", "redis_throughput:memory_rows")
                  .option("count", args.rows).option("size", args.size)
                  .option("format", args.format).option("maxRecordsPerTrigger", args.batch)
                  .schema("id BIGINT, pad STRING" if args.format == "json" else
                          "stream STRING, id STRING, fields MAP<STRING, BINARY>, "
                          "timestamp TIMESTAMP, redelivered BOOLEAN"))
        if not args.no_wal:
            reader = reader.option("walLocation", f"{folder}/wal")
        began = time.perf_counter()
        query = (reader.load().writeStream.format("noop")
                 .option("checkpointLocation", f"{folder}/checkpoint").start())
        if not listener.done.wait(600):
            raise TimeoutError(f"{listener.count} of {args.rows} rows within 600 s")
        took = time.perf_counter() - began
        query.stop()
    spark.streams.removeListener(listener)
    return args.rows / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per entry's payload")
    parser.add_argument("--batch", type=int, default=20_000, help="maxRecordsPerTrigger")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-wal", action="store_true", help="no walLocation in (b)")
    parser.add_argument("--format", default="message", choices=("message", "json"),
                        help="the built-in's format in (b): the message columns, or each "
                             "payload (a JSON object) parsed into id BIGINT, pad STRING")
    args = parser.parse_args()

    with redis_server.RedisServer() as server:
        ceiling(server, args)  # warm-ups
        adapter(server, args)
        plain = alone = 0.0
        for _ in range(args.repeat):  # in turns, so a busy moment favours neither
            plain = max(plain, ceiling(server, args))
            alone = max(alone, adapter(server, args))
        # The source runner imports memory_rows from this folder.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH"))
            if p)
        spark = local_session()
        into_spark(spark, server, args)  # warm-up
        spark_rate = range_rate = 0.0
        for _ in range(args.repeat):
            spark_rate = max(spark_rate, into_spark(spark, server, args))
            range_rate = max(range_rate, spark_alone(spark, args))
        spark.stop()
    print(f"python {platform.python_version()}, pyspark {pyspark.__version__}, redis-py "
          f"{redis.__version__}, {redis_server.version()}; {args.rows} entries of "
          f"{args.size} bytes per run, queued before the consumer starts, COUNT "
          f"{_count(args)}, maxRecordsPerTrigger={args.batch}, "
          f"{'no walLocation' if args.no_wal else 'walLocation'}, format={args.format}, "
          f"best of {args.repeat}")
    print(f"(a) plain redis-py, XREADGROUP + XACK (ceiling): {plain:,.0f} rows/s")
    print(f"(c) RedisStreamPublisher alone, no Spark: {alone:,.0f} rows/s "
          f"= {alone / plain:.0%} of the ceiling")
    print(f"(b) publisher=redis into Spark (noop): {spark_rate:,.0f} rows/s "
          f"= {spark_rate / plain:.0%} of the ceiling, "
          f"{spark_rate / range_rate:.0%} of (d)")
    print(f"(d) the same rows from memory into Spark (noop), no broker: {range_rate:,.0f} "
          f"rows/s: what Spark and the source take for them here")
    # (b) does the work of (c) and of (d) in the one source runner process, under one GIL:
    # its CPU time a row is at least the sum of theirs.
    both = 1 / (1 / alone + 1 / range_rate)
    print(f"(c)+(d) in one process, 1 / (1/(c) + 1/(d)): {both:,.0f} rows/s; (b) is "
          f"{spark_rate / both:.0%} of it")


if __name__ == "__main__":
    main()
