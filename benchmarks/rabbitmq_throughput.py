"""Rows/s into Spark through the built-in ``rabbitmq`` publisher, beside the baseline: pika
alone consuming the same kind of queue with the same prefetch and the same acknowledgement
batching, decoding every body; and, to show where the difference goes, the
``RabbitMQPublisher`` adapter alone, the same query over the same rows from memory and
with ``shards=2``, and the ceilings these set.

A RabbitMQ node (``tests/peers/rabbitmq_server.py``, no MQTT) runs on 127.0.0.1. For each
run a new durable queue gets ``--rows`` persistent JSON messages ``{"id": i}`` with a
``message_id`` (``publish_json``: publisher-confirmed) before the clock starts; the clock
runs from the consumer's start (the query's ``start()`` for (b)) to its last message:

(a) the baseline: pika's ``BlockingConnection`` consuming with manual acknowledgement and a
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
(d) the same query over the same rows from memory (``memory_rows``: the built-in's rows for
``{"id": i}`` with their ``message_id``, which the source keeps in its log as in (b); no
broker): what Spark, the source and its log take for these rows on this machine;
(f) query (b) with ``shards=2``: the queue read by two consumers, in two Spark tasks a
micro-batch on the executors, so not through the one runner process.

Each runs ``--repeat`` times in turns after one warm-up; the best run counts. Beside rows/s
each prints the whole machine's busy CPU time per row over the run (every process: the
broker, the JVM, the Python processes; from /proc/stat), the least of the runs. (b) is
printed as a ratio of (a) (target >= 0.8), and beside two ceilings measured in the same
run:

(e) the machine's, an estimate: each row of (b) costs the work of (c) (the broker
delivering, the adapter reading and decoding) and of (d) (Spark, the source and its log),
and the CPUs cannot do both for more than ``CPUs / (CPU a row of (c) + of (d))`` rows/s
(each counts the machine's background, so the sum counts it twice);
(g) one process's: in (b) the source's runner (one Python process, started by the
driver's JVM) does, under one GIL, both (c)'s reading and decoding and the source's own
work (its log and Arrow batches), in turn, so ``1 / (1/(c) + 1/(d))``; (f) is not bound
by it.

Where (b) or (f) is under 0.8 of (a), the last lines say whether its lowest ceiling is
under 0.8 of (a) too, and how near it comes to it.

Run from the repository root::

    .venv/bin/python benchmarks/rabbitmq_throughput.py [--rows N] [--batch B]
        [--repeat K] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
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
from reactive_streams import IterablePublisher, SyncSubscriber
from reactive_streams.adapters.rabbitmq import MAX_PREFETCH, RabbitMQPublisher

PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"
sys.path.insert(0, str(PEERS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rabbitmq_server  # noqa: E402 - tests/peers

from mqtt_throughput import RowsListener  # noqa: E402 - benchmarks/

TIMEOUT_S = 600.0


def _busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy (every process on every core: the
    broker, the JVM, the Python processes), from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = (
            int(v) for v in stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


class _Timed:
    """The wall-clock seconds and the machine's busy CPU-seconds between start and stop."""

    def __init__(self) -> None:
        self.began, self.busy = time.perf_counter(), _busy_seconds()

    def stop(self, rows: int) -> tuple[float, float]:
        """(rows/s, busy CPU-milliseconds per row)."""
        took = time.perf_counter() - self.began
        return rows / took, (_busy_seconds() - self.busy) * 1000 / rows


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


def ceiling(node: rabbitmq_server.Node, args: argparse.Namespace) -> tuple[float, float]:
    """(a) Rows/s of pika alone: the same prefetch, every body decoded, one multiple
    acknowledgement per ``walSyncMs``."""
    queue = _fill(node, args)
    clock = _Timed()
    began = clock.began
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
    measured = clock.stop(args.rows)
    connection.close()
    node.delete_queue(queue)
    _check_ids(ids, args.rows, "(a) pika")
    return measured


class _Counter(SyncSubscriber[Any]):
    count = 0

    def on_element(self, element: Any) -> None:
        self.count += 1


def adapter(node: rabbitmq_server.Node, args: argparse.Namespace) -> tuple[float, float]:
    """(c) Rows/s of RabbitMQPublisher alone into a subscriber that counts."""
    queue = _fill(node, args)
    publisher: RabbitMQPublisher[Any] = RabbitMQPublisher(
        queue, url=node.url, prefetch=_prefetch(args), max_messages=args.rows,
        decode=lambda message: json.loads(message.body))
    counter = _Counter(batch_size=args.batch)
    clock = _Timed()
    publisher.subscribe(counter)
    if not counter.wait(TIMEOUT_S):
        raise TimeoutError(f"the adapter took {counter.count} of {args.rows}")
    measured = clock.stop(args.rows)
    publisher.wait_closed(10)
    node.delete_queue(queue)
    assert counter.count == args.rows, counter.count
    return measured


def _query(spark: Any, df: Any, args: argparse.Namespace, folder: str,
           what: str) -> tuple[float, float]:
    """Run ``df`` (a column ``id``) into a parquet sink until its progress counted
    ``--rows``, check every id once; return rows/s from ``start()``."""
    listener = RowsListener(args.rows)
    spark.streams.addListener(listener)
    try:
        clock = _Timed()
        query = (df.writeStream.format("parquet").option("path", f"{folder}/out")
                 .option("checkpointLocation", f"{folder}/checkpoint").start())
        if not listener.done.wait(TIMEOUT_S):
            raise TimeoutError(f"{what}: {listener.count} of {args.rows} rows within "
                               f"{TIMEOUT_S} s")
        measured = clock.stop(args.rows)
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
    return measured


def into_spark(spark: Any, node: rabbitmq_server.Node, args: argparse.Namespace,
               shards: int = 1) -> tuple[float, float]:
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


class _MemoryRows(IterablePublisher[Any]):
    """Rows from memory with the built-in's identities: the source keeps them in its log
    and filters redeliveries as it does for (b)."""

    def identity(self, element: Any) -> str | None:
        return getattr(element, "message_id", None)

    def redelivered(self, element: Any) -> bool:
        return False

    def on_durable(self, count: int) -> None:
        pass


def memory_rows(options: Any) -> Any:
    """The factory of (d): ``count`` rows as the built-in ``rabbitmq`` makes them from
    ``{"id": i}`` bodies with ``format=json`` (its ``_Row``, carrying the ``message_id``
    ``m-<i>``), from memory, through a publisher that acknowledges nothing."""
    from pyspark_reactive.publishers.rabbitmq import _Row

    count = int(options["count"])

    def rows() -> Any:
        for i in range(count):
            yield _Row({"id": i}, f"m-{i}")

    return _MemoryRows(rows)


def spark_alone(spark: Any, args: argparse.Namespace) -> tuple[float, float]:
    """(d) Rows/s of the same query over the same rows from memory (``memory_rows``, no
    broker): what Spark, the source and its log take for these rows on this machine."""
    with tempfile.TemporaryDirectory() as folder:
        reader = (spark.readStream.format("reactive")
                  .option("publisher", "rabbitmq_throughput:memory_rows")
                  .option("count", args.rows).option("maxRecordsPerTrigger", args.batch)
                  .option("walLocation", f"{folder}/wal").schema("id BIGINT"))
        return _query(spark, reader.load(), args, folder, "(d) the same rows from memory")


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

    # The source runner imports memory_rows from this folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")) if p)
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
        cpu: dict[str, float] = {}  # the least busy CPU-ms per row of any run
        for _ in range(args.repeat):  # in turns, so a busy moment favours none
            for name, run in (("a", lambda: ceiling(node, args)),
                              ("c", lambda: adapter(node, args)),
                              ("b", lambda: into_spark(spark, node, args)),
                              ("f", lambda: into_spark(spark, node, args, shards=2)),
                              ("d", lambda: spark_alone(spark, args))):
                rate, per_row = run()
                best[name] = max(best.get(name, 0.0), rate)
                cpu[name] = min(cpu.get(name, per_row), per_row)
                print(f"  ({name}) {rate:10,.0f} rows/s, {per_row * 1000:6.1f} CPU-us a row "
                      f"(the machine's)", flush=True)
        spark.stop()
    _report(args, version, best, cpu)


def _report(args: argparse.Namespace, version: str, best: dict[str, float],
            cpu: dict[str, float]) -> None:
    plain, alone, spark_rate, memory_rate = best["a"], best["c"], best["b"], best["d"]
    two = best["f"]
    cores = os.cpu_count() or 1
    print(f"python {platform.python_version()}, pyspark {pyspark.__version__}, pika "
          f"{pika.__version__}, {version}; {args.rows} persistent JSON messages per run, "
          f"queued before the consumer starts, prefetch {_prefetch(args)}, "
          f"maxRecordsPerTrigger={args.batch}, walLocation, format=json, parquet sink, "
          f"{cores} CPUs, best of {args.repeat}; CPU-us a row: the whole machine's busy "
          f"time (broker, JVM, every Python process) over the run, per row, least of the "
          f"runs")

    def line(name: str, text: str) -> None:
        print(f"({name}) {text}: {best[name]:,.0f} rows/s, {cpu[name] * 1000:.1f} CPU-us a row")

    line("a", f"plain pika, json.loads + one basic_ack(multiple) per {DEFAULT_WAL_SYNC_MS} ms")
    line("c", f"RabbitMQPublisher alone, no Spark = {alone / plain:.2f} of (a)")
    line("b", f"publisher=rabbitmq into Spark = {spark_rate / plain:.2f} of (a) (target >= "
              f"0.8), {spark_rate / memory_rate:.2f} of (d)")
    line("f", f"the same query with shards=2 (read in two tasks a micro-batch, on the "
              f"executors) = {two / plain:.2f} of (a)")
    line("d", "the same rows from memory into Spark, no broker: what Spark, the source and "
              "its log take for them here")
    # (b) does, for each row, what (c) does (the broker delivering, the adapter reading and
    # decoding) and what (d) does (Spark, the source, its log): the machine's cores cannot
    # do both for more rows a second than they have CPU-seconds for. An estimate: each of
    # (c) and (d) counts the machine's background too (an idle JVM, the broker), so the
    # sum counts it twice.
    machine = cores / ((cpu["c"] + cpu["d"]) / 1000)
    # And in (b) one Python process, the source's runner, reads the queue through the
    # adapter and does the source's own work under one GIL, in turn: about (c) and (d) in
    # turn, an estimate from wall-clock rates (each of (c) and (d) may wait on its peer:
    # the broker, the JVM). (f) reads in Spark tasks, so only (e) bounds it.
    serial = 1 / (1 / alone + 1 / memory_rate)
    print(f"(e) (c)'s work and (d)'s on this machine's {cores} CPUs, {cores} / (CPU a row "
          f"of (c) + of (d)), an estimate: {machine:,.0f} rows/s = {machine / plain:.2f} of "
          f"(a); (b) = {spark_rate / machine:.2f} of it, (f) = {two / machine:.2f}")
    print(f"(g) (c) and (d) in turn, 1 / (1/(c) + 1/(d)): {serial:,.0f} rows/s = "
          f"{serial / plain:.2f} of (a), the one-process ceiling (an estimate); (b) = "
          f"{spark_rate / serial:.2f} of it")
    print(f"(b) spends {cpu['b'] / (cpu['c'] + cpu['d']):.2f} of the CPU a row that (c) and "
          f"(d) spend together; (f) {cpu['f'] / (cpu['c'] + cpu['d']):.2f}")
    for name, rate, limit, which in (("b", spark_rate, min(machine, serial),
                                      "(g)" if serial <= machine else "(e)"),
                                     ("f", two, machine, "(e)")):
        if rate >= 0.8 * plain:
            continue
        if limit >= 0.8 * plain:
            print(f"({name}) is under 0.8 of (a), and no ceiling computed here is: its "
                  f"lowest, {which}, is {limit / plain:.2f} of (a)")
        else:
            print(f"({name}) is under 0.8 of (a), and so is its ceiling {which}, an estimate "
                  f"({limit / plain:.2f} of (a)): ({name}) = {rate / limit:.2f} of it"
                  + (" (above the estimate)" if rate > limit else ""))


if __name__ == "__main__":
    main()
