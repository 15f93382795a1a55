"""Rows/s into Spark through the built-in ``nats`` publisher, beside the ceiling: plain
nats-py pulling the same kind of durable consumer with the same fetch size and the same
acknowledgements (one ``+ACK`` a message), keeping every message and doing no Spark work;
and, to show where the difference goes, the ``JetStreamPublisher`` adapter alone.

A nats-server with JetStream (``tests/peers/nats_server.py``) runs on 127.0.0.1. One stream
on file storage is filled with ``--rows`` messages of ``--size`` bytes before anything is
timed; each run reads all of them through a durable pull consumer of its own (explicit
acknowledgement, deliver all), and the clock runs from the consumer's start (the query's
``start()`` for (b)) to its last message:
(a) the ceiling: nats-py's ``pull_subscribe_bind`` and ``fetch(--fetch)`` in a loop,
``msg.ack()`` for each message;
(c) ``JetStreamPublisher`` (``max_batch=--fetch``, acknowledged at on_next) into a
subscriber that counts, requesting ``--batch`` at a time, no Spark;
(b) a query reads the consumer with ``publisher=nats`` (message columns,
``maxRecordsPerTrigger=--batch``, ``maxBatch=--fetch``, with ``walLocation`` unless
``--no-wal``) into Spark's ``noop`` sink with the default trigger on ``local[2]``, until its
progress events have counted every row.
Each runs ``--repeat`` times after one warm-up; the best run counts, and (b) and (c) are
printed as ratios of (a). Server and consumer share the machine.

Run from the repository root::

    .venv/bin/python benchmarks/nats_throughput.py [--rows N] [--size S] [--batch B]
        [--fetch F] [--repeat K] [--no-wal]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import platform
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import nats as nats_py
import pyspark

from pyspark_reactive import local_session
from reactive_streams import SyncSubscriber
from reactive_streams.adapters.nats_jetstream import JetStreamMessage, JetStreamPublisher

PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"
sys.path.insert(0, str(PEERS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import nats_server  # noqa: E402

from mqtt_throughput import RowsListener  # noqa: E402

STREAM = "BENCH"


def _fill(server: nats_server.Server, args: argparse.Namespace) -> None:
    nats_server.create_stream(server, STREAM)
    payload = b"x" * args.size

    async def work(js: Any) -> None:
        for first in range(0, args.rows, 1000):
            await asyncio.gather(*(js.publish(f"{STREAM}.a", payload)
                                   for _ in range(min(1000, args.rows - first))))

    nats_server.run(server, work, timeout=600)


def _consumer(server: nats_server.Server) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    nats_server.create_consumer(server, STREAM, name, ack_wait_s=60.0,
                                max_ack_pending=1_000_000)
    return name


def ceiling(server: nats_server.Server, args: argparse.Namespace) -> float:
    """(a) Rows/s of nats-py alone: fetch(--fetch) in a loop, each message acknowledged."""
    durable = _consumer(server)

    async def main() -> float:
        client = await nats_py.connect(**server.options)
        try:
            began = time.perf_counter()
            subscription = await client.jetstream().pull_subscribe_bind(durable, STREAM)
            kept: list[Any] = []
            while len(kept) < args.rows:
                for message in await subscription.fetch(args.fetch, timeout=5):
                    kept.append(message)
                    await message.ack()
            await client.flush()
            return args.rows / (time.perf_counter() - began)
        finally:
            await client.close()

    return asyncio.run(main())


class _Counter(SyncSubscriber[JetStreamMessage]):
    def __init__(self, rows: int, batch: int) -> None:
        super().__init__(batch_size=batch)
        self.rows, self.count, self.done = rows, 0, threading.Event()

    def on_element(self, element: JetStreamMessage) -> None:
        self.count += 1
        if self.count >= self.rows:
            self.done.set()


def adapter(server: nats_server.Server, args: argparse.Namespace) -> float:
    """(c) Rows/s of JetStreamPublisher alone, requesting --batch at a time."""
    durable = _consumer(server)
    counter = _Counter(args.rows, args.batch)
    publisher: JetStreamPublisher[JetStreamMessage] = JetStreamPublisher(
        server.url, STREAM, durable, max_batch=args.fetch, max_messages=args.rows,
        **server.credentials)
    began = time.perf_counter()
    publisher.subscribe(counter)
    if not counter.done.wait(600):
        raise TimeoutError(f"{counter.count} of {args.rows} messages")
    took = time.perf_counter() - began
    publisher.wait_closed(10)
    return args.rows / took


def into_spark(spark: Any, server: nats_server.Server, args: argparse.Namespace,
               password_file: str) -> float:
    """(b) Rows/s of one query reading --rows messages into the noop sink."""
    durable = _consumer(server)
    listener = RowsListener(args.rows)
    spark.streams.addListener(listener)
    with tempfile.TemporaryDirectory() as folder:
        reader = (spark.readStream.format("reactive").option("publisher", "nats")
                  .option("url", server.url).option("stream", STREAM)
                  .option("consumer", durable).option("username", nats_server.USER)
                  .option("passwordFile", password_file).option("maxBatch", args.fetch)
                  .option("maxRecordsPerTrigger", args.batch))
        if not args.no_wal:
            reader = reader.option("walLocation", f"{folder}/wal")
        began = time.perf_counter()
        query = (reader.load().writeStream.format("noop")
                 .option("checkpointLocation", f"{folder}/checkpoint").start())
        if not listener.done.wait(600):
            raise TimeoutError(f"{listener.count} of {args.rows} rows")
        took = time.perf_counter() - began
        query.stop()
    spark.streams.removeListener(listener)
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    assert listener.count == args.rows, f"{listener.count} rows of {args.rows}"
    return args.rows / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per message")
    parser.add_argument("--batch", type=int, default=20_000, help="maxRecordsPerTrigger")
    parser.add_argument("--fetch", type=int, default=1000,
                        help="messages per pull request (maxBatch)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-wal", action="store_true", help="no walLocation in (b)")
    args = parser.parse_args()

    with nats_server.Server() as server, tempfile.TemporaryDirectory() as secrets:
        password_file = Path(secrets) / "password"
        password_file.write_text(nats_server.PASSWORD)
        password_file.chmod(0o600)
        _fill(server, args)
        ceiling(server, args)  # warm-ups
        adapter(server, args)
        plain = alone = 0.0
        for _ in range(args.repeat):  # in turns, so a busy moment favours neither
            plain = max(plain, ceiling(server, args))
            alone = max(alone, adapter(server, args))
        spark = local_session()
        into_spark(spark, server, args, str(password_file))  # warm-up
        spark_rate = max(into_spark(spark, server, args, str(password_file))
                         for _ in range(args.repeat))
        spark.stop()
        plain = max(plain, ceiling(server, args))  # once more, after Spark
    client = importlib.metadata.version("nats-py")
    print(f"python {platform.python_version()}, pyspark {pyspark.__version__}, nats-py "
          f"{client}, {nats_server.version()}; {args.rows} messages of {args.size} bytes per run,"
          f" fetch {args.fetch}, maxRecordsPerTrigger={args.batch}, "
          f"{'no walLocation' if args.no_wal else 'walLocation'}, best of {args.repeat}")
    print(f"(a) plain nats-py pull consumer (ceiling): {plain:,.0f} rows/s")
    print(f"(c) JetStreamPublisher alone, no Spark: {alone:,.0f} rows/s "
          f"= {alone / plain:.2f} of the ceiling")
    print(f"(b) publisher=nats into Spark (noop): {spark_rate:,.0f} rows/s "
          f"= {spark_rate / plain:.2f} of the ceiling")


if __name__ == "__main__":
    main()
