"""Rows/s into Spark through the built-in ``rabbitmq`` publisher, beside the ceiling: pika
alone consuming the same kind of queue with the same prefetch and the same acknowledgement
batching, decoding every body; and, to show where the difference goes, the
``RabbitMQPublisher`` adapter alone and the same query with ``publisher=range``.

A RabbitMQ node (``tests/peers/rabbitmq_server.py``, no MQTT) runs on 127.0.0.1. For each
run a new durable queue gets ``--rows`` persistent JSON messages ``{"id": i}`` with a
``message_id`` (``publish_json``: publisher-confirmed) before the clock starts; the clock
runs from the consumer's start (the query's ``start()`` for (b)) to its last message:

(a) the ceiling: pika's ``BlockingConnection`` consuming with manual acknowledgement and a
channel-wide ``basic.qos`` of the built-in's prefetch (``2 x --batch + 1``, at most
65,535), ``json.loads`` of every body, and one ``basic_ack(multiple=True)`` per group: the
tags delivered in each ``walSyncMs`` (50 ms), as the source acknowledges once per group
commit of its write-ahead log; every id is checked once;
(c) ``RabbitMQPublisher`` (the same prefetch, ``json.loads`` as its ``decode``,
acknowledged at on_next) into a subscriber that counts, requesting ``--batch`` at a time,
no Spark;
(b) a query reads the queue with ``publisher=rabbitmq``, ``format=json``, schema ``id
BIGINT``, ``walLocation`` and ``maxRecordsPerTrigger=--batch`` into a parquet sink with the
default trigger on ``local[2]``, until its progress events have counted every row; the
sink is then read back (after the clock), and every id must be there once;
(d) the same query with ``publisher=range`` (no broker, ``count=--rows``): what Spark, the
source and its log take on this machine, which bounds (b) whatever the broker gives.

Each runs ``--repeat`` times in turns after one warm-up; the best run counts. (b) is
printed as a ratio of (a) (target >= 0.8) and of (d), and beside (e) = 1 / (1/(a) +
1/(d)): in (b) one Python process (the source's runner, started by the driver's JVM) does,
under one GIL, both (a)'s work (pika reading and decoding every message) and the source's
own (its log and Arrow batches, measured by (d)), in turn, so (e) is the ceiling that
stops (b) where it is under 0.8 of (a). Broker, Spark and consumers share the machine's
2 cores.

Run from the repository root::

    .venv/bin/python benchmarks/rabbitmq_throughput.py [--rows N] [--batch B]
        [--repeat K] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pika
import pyspark

from pyspark_reactive import local_session
from pyspark_reactive.source.options import DEFAULT_WAL_SYNC_MS
from reactive_streams import SyncSubscriber
from reactive_streams.adapters.rabbitmq import MAX_PREFETCH, RabbitMQPublisher

PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"
sys.path.insert(0, str(PEERS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rabbitmq_server  # noqa: E402 - tests/peers

from mqtt_throughput import RowsListener  # noqa: E402 - benchmarks/

TIMEOUT_S = 600.0


def _prefetch(args: argparse.Namespace) -> int:
    """The built-in's default prefetch: 2 x maxRecordsPerTrigger + 1, at most 65,535."""
    return min(MAX_PREFETCH, 2 * args.batch + 1)


def _fill(node: rabbitmq_server.Node, args: argparse.Namespace) -> str:
    """A new durable queue holding ``--rows`` persistent messages ``{"id": i}``."""
    queue = node.declare_queue()
    rabbitmq_server.publish_json(node, queue, args.rows)
    return queue


def _check_ids(ids: list[int], rows: int, what: str) -> None:
    if len(ids) != rows or len(set(ids)) != rows or min(ids) != 0 or max(ids) != rows - 1:
        raise SystemExit(f"{what}: {len(ids)} ids ({len(set(ids))} distinct), not each of "
                         f"{rows} once")


def ceiling(node: rabbitmq_server.Node, args: argparse.Namespace) -> float:
    """(a) Rows/s of pika alone: the same prefetch, every body decoded, one multiple
    acknowledgement per ``walSyncMs``."""
    queue = _fill(node, args)
    began = time.perf_counter()
    connection = pika.BlockingConnection(pika.URLParameters(node.url))
    channel = connection.channel()
    ids: list[int] = []
    last = [0]

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        ids.append(json.loads(body)["id"])
        last[0] = method.delivery_tag

    group = DEFAULT_WAL_SYNC_MS / 1000
    channel.basic_qos(prefetch_count=_prefetch(args), global_qos=True)
    channel.basic_consume(queue, on_message, auto_ack=False)
    acked, acked_at = 0, began
    deadline = time.monotonic() + TIMEOUT_S
    while len(ids) < args.rows:
        connection.process_data_events(time_limit=group)
        now = time.perf_counter()
        if last[0] > acked and now - acked_at >= group:
            channel.basic_ack(last[0], multiple=True)
            acked, acked_at = last[0], now
        if time.monotonic() > deadline:
            raise TimeoutError(f"pika took {len(ids)} of {args.rows} within {TIMEOUT_S} s")
    channel.basic_ack(last[0], multiple=True)
    took = time.perf_counter() - began
    connection.close()
    node.delete_queue(queue)
    _check_ids(ids, args.rows, "(a) pika")
    return args.rows / took


class _Counter(SyncSubscriber[Any]):
    count = 0

    def on_element(self, element: Any) -> None:
        self.count += 1


def adapter(node: rabbitmq_server.Node, args: argparse.Namespace) -> float:
    """(c) Rows/s of RabbitMQPublisher alone into a subscriber that counts."""
    queue = _fill(node, args)
    publisher: RabbitMQPublisher[Any] = RabbitMQPublisher(
        queue, url=node.url, prefetch=_prefetch(args), max_messages=args.rows,
        decode=lambda message: json.loads(message.body))
    counter = _Counter(batch_size=args.batch)
    began = time.perf_counter()
    publisher.subscribe(counter)
    if not counter.wait(TIMEOUT_S):
        raise TimeoutError(f"the adapter took {counter.count} of {args.rows}")
    took = time.perf_counter() - began
    publisher.wait_closed(10)
    node.delete_queue(queue)
    assert counter.count == args.rows, counter.count
    return args.rows / took


def _query(spark: Any, df: Any, args: argparse.Namespace, folder: str,
           what: str) -> float:
    """Run ``df`` (a column ``id``) into a parquet sink until its progress counted
    ``--rows``, check every id once; return rows/s from ``start()``."""
    listener = RowsListener(args.rows)
    spark.streams.addListener(listener)
    try:
        began = time.perf_counter()
        query = (df.writeStream.format("parquet").option("path", f"{folder}/out")
                 .option("checkpointLocation", f"{folder}/checkpoint").start())
        if not listener.done.wait(TIMEOUT_S):
            raise TimeoutError(f"{what}: {listener.count} of {args.rows} rows within "
                               f"{TIMEOUT_S} s")
        took = time.perf_counter() - began
        query.stop()
    finally:
        spark.streams.removeListener(listener)
    if query.exception() is not None:
        raise RuntimeError(f"{what}: the query failed: {query.exception()}")
    if listener.count != args.rows:
        raise SystemExit(f"{what}: {listener.count} rows of {args.rows}")
    ids = spark.read.parquet(f"{folder}/out").selectExpr(
        "count(*) AS n", "count(DISTINCT id) AS distinct_ids", "min(id) AS low",
        "max(id) AS high").first()
    if tuple(ids) != (args.rows, args.rows, 0, args.rows - 1):
        raise SystemExit(f"{what}: the sink holds {ids}, not each of {args.rows} ids once")
    return args.rows / took


def into_spark(spark: Any, node: rabbitmq_server.Node, args: argparse.Namespace,
               shards: int = 1) -> float:
    """(b) Rows/s of one query reading the queue with ``publisher=rabbitmq``; (f) the same
    with ``shards``."""
    queue = _fill(node, args)
    with tempfile.TemporaryDirectory() as folder:
        reader = (spark.readStream.format("reactive").option("publisher", "rabbitmq")
                  .option("url", node.url).option("queue", queue).option("format", "json")
                  .option("maxRecordsPerTrigger", args.batch)
                  .option("walLocation", f"{folder}/wal").schema("id BIGINT"))
        if shards > 1:
            reader = reader.option("shards", shards)
        what = f"({'f' if shards > 1 else 'b'}) publisher=rabbitmq, shards={shards}"
        rate = _query(spark, reader.load(), args, folder, what)
    node.delete_queue(queue)
    return rate


def spark_alone(spark: Any, args: argparse.Namespace) -> float:
    """(d) Rows/s of the same query with ``publisher=range``: no broker, no decoding."""
    with tempfile.TemporaryDirectory() as folder:
        reader = (spark.readStream.format("reactive").option("publisher", "range")
                  .option("count", args.rows).option("maxRecordsPerTrigger", args.batch)
                  .option("walLocation", f"{folder}/wal"))
        df = reader.load().withColumnRenamed("value", "id")
        return _query(spark, df, args, folder, "(d) publisher=range")


def _rabbitmq_version(node: rabbitmq_server.Node) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"],
                             capture_output=True, text=True, timeout=10).stdout
    except OSError:
        out = ""
    return f"RabbitMQ {out or 'unknown'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=20_000, help="maxRecordsPerTrigger")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="a fast check: 20,000 rows, 5,000 a batch, once")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.batch, args.repeat = 20_000, 5_000, 1

    with rabbitmq_server.Node(mqtt=False) as node:
        version = _rabbitmq_version(node)
        warm = argparse.Namespace(**{**vars(args), "rows": min(args.rows, 5_000)})
        ceiling(node, warm)  # warm-ups
        adapter(node, warm)
        spark = local_session("rabbitmq-throughput")
        into_spark(spark, node, warm)
        into_spark(spark, node, warm, shards=2)
        spark_alone(spark, warm)
        best: dict[str, float] = {}
        for _ in range(args.repeat):  # in turns, so a busy moment favours none
            for name, run in (("a", lambda: ceiling(node, args)),
                              ("c", lambda: adapter(node, args)),
                              ("b", lambda: into_spark(spark, node, args)),
                              ("f", lambda: into_spark(spark, node, args, shards=2)),
                              ("d", lambda: spark_alone(spark, args))):
                rate = run()
                best[name] = max(best.get(name, 0.0), rate)
                print(f"  ({name}) {rate:10,.0f} rows/s", flush=True)
        spark.stop()
    plain, alone, spark_rate, range_rate = best["a"], best["c"], best["b"], best["d"]
    two = best["f"]
    print(f"python {platform.python_version()}, pyspark {pyspark.__version__}, pika "
          f"{pika.__version__}, {version}; {args.rows} persistent JSON messages per run, "
          f"queued before the consumer starts, prefetch {_prefetch(args)}, "
          f"maxRecordsPerTrigger={args.batch}, walLocation, format=json, parquet sink, "
          f"best of {args.repeat}")
    print(f"(a) plain pika, json.loads + one basic_ack(multiple) per {DEFAULT_WAL_SYNC_MS} ms "
          f"(ceiling): {plain:,.0f} rows/s")
    print(f"(c) RabbitMQPublisher alone, no Spark: {alone:,.0f} rows/s "
          f"= {alone / plain:.2f} of (a)")
    print(f"(b) publisher=rabbitmq into Spark: {spark_rate:,.0f} rows/s "
          f"= {spark_rate / plain:.2f} of (a) (target >= 0.8), "
          f"{spark_rate / range_rate:.2f} of (d)")
    print(f"(f) the same query with shards=2 (read in two tasks a micro-batch, on the "
          f"executors): {two:,.0f} rows/s = {two / plain:.2f} of (a)")
    print(f"(d) publisher=range into Spark, no broker: {range_rate:,.0f} rows/s: what Spark, "
          f"the source and its log take here")
    # In (b) one Python process (the source's runner) does, under one GIL, what (a) does
    # (pika reading and decoding every message) and the source's own work that (d)
    # measures (rows into the log and into Arrow batches): in turn, not side by side.
    serial = 1 / (1 / plain + 1 / range_rate)
    print(f"(e) (a) and (d) in turn, 1 / (1/(a) + 1/(d)): {serial:,.0f} rows/s: the ceiling "
          f"of one process doing both; (b) = {spark_rate / serial:.2f} of it")
    if spark_rate < 0.8 * plain:
        print(f"(b) is under 0.8 of (a): the source's runner reads the queue and does the "
              f"source's work in one Python process, so (e), not (a), is its ceiling "
              f"({serial / plain:.2f} of (a))")


if __name__ == "__main__":
    main()
