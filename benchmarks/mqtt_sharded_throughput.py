"""Rows/s of the built-in ``mqtt`` read in shards on the executors (option ``shards``), with
1 and 2 shards of a shared subscription, beside a ceiling measured in the same run: two
plain paho clients on the same kind of shared subscription, consuming alone.

A mosquitto broker (``tests/peers/mosquitto.py``) and a loopback standalone cluster of two
workers of one core each (``tests/cluster/standalone.py``) run on 127.0.0.1. For each run
a fresh topic gets ``--rows`` JSON messages (``{"id": i, "pad": ...}``, about ``--size``
bytes, QoS 1), queued first into the persistent sessions of a shared subscription
``$share/<group>/<topic>`` (one session a shard, as the source names them), so that the
clock times the consumer alone:

- ``shards=1`` and ``shards=2``: a query reads the topic with ``publisher=mqtt``,
  ``format=json``, ``identityColumn=id``, ``walLocation`` and ``maxRecordsPerTrigger=
  --batch`` into a parquet sink, from ``start()`` until its progress events have counted
  every row; the sink is then read back, and every id must be there once;
- the ceiling: two plain paho processes, each with one session of the group, decode every
  payload (``json.loads``) and count, from a common start until the two have every
  message.

Each case runs once to warm, then ``--repeat`` times in turns; the best run counts.
Targets (printed, never enforced): 2 shards at >= 1.5 times 1 shard, or, where this
machine stops it first, at >= 0.8 of the ceiling. Broker, cluster, driver and consumers
share the machine's two cores.

Run from the repository root::

    .venv/bin/python benchmarks/mqtt_sharded_throughput.py [--rows 180000] [--batch 90000]
        [--size S] [--repeat R] [--quick] [--full-jit] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
sys.path.insert(0, str(ROOT / "tests" / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mosquitto  # noqa: E402 - tests/peers
from standalone import QUICK_START_JVM, Daemon, start  # noqa: E402 - tests/cluster

from mqtt_throughput import RowsListener  # noqa: E402 - benchmarks/
from report import Figure, write  # noqa: E402 - benchmarks/

TIMEOUT_S = 600.0


def _queue(broker: mosquitto.Broker, group: str, sessions: int, rows: int,
           size: int) -> str:
    """A fresh topic with ``rows`` messages queued in the group's ``sessions`` sessions
    (client ids ``<group>-<i>``); returns the topic."""
    topic = f"bench/{uuid.uuid4().hex[:8]}"
    for index in range(sessions):
        mosquitto.persistent_session(broker, f"$share/{group}/{topic}", f"{group}-{index}")
    pad = "x" * max(0, size - 30)
    mosquitto.publish(broker.host, broker.port, topic,
                      (json.dumps({"id": i, "pad": pad}) for i in range(rows)),
                      timeout=TIMEOUT_S)
    return topic


def into_spark(spark: Any, broker: mosquitto.Broker, shards: int,
               args: argparse.Namespace) -> float:
    """Rows/s of one query reading the queued messages in ``shards`` shards."""
    group = f"spark-{uuid.uuid4().hex[:8]}"
    topic = _queue(broker, group, shards, args.rows, args.size)
    listener = RowsListener(args.rows)
    spark.streams.addListener(listener)
    folder = tempfile.mkdtemp(prefix="mqtt-sharded-bench-")
    df = (spark.readStream.format("reactive").option("publisher", "mqtt")
          .option("host", broker.host).option("port", broker.port).option("topic", topic)
          .option("clientId", group).option("shards", shards).option("format", "json")
          .option("identityColumn", "id").option("maxRecordsPerTrigger", args.batch)
          .option("walLocation", f"{folder}/wal").schema("id BIGINT").load())
    began = time.perf_counter()
    query = (df.writeStream.format("parquet").option("path", f"{folder}/out")
             .option("checkpointLocation", f"{folder}/checkpoint").start())
    if not listener.done.wait(TIMEOUT_S):
        raise TimeoutError(f"shards={shards}: {listener.count} of {args.rows} rows "
                           f"within {TIMEOUT_S} s")
    took = time.perf_counter() - began
    query.stop()
    spark.streams.removeListener(listener)
    if listener.failed and listener.count < args.rows:
        raise RuntimeError(f"shards={shards}: the query ended: {listener.failed}")
    ids = spark.read.parquet(f"{folder}/out").selectExpr(
        "count(*) AS n", "count(DISTINCT id) AS distinct_ids", "min(id) AS low",
        "max(id) AS high").first()
    if tuple(ids) != (args.rows, args.rows, 0, args.rows - 1):
        raise SystemExit(f"shards={shards}: the sink holds {ids}, not each of "
                         f"{args.rows} ids once")
    return args.rows / took


def _consume(broker: tuple[str, int], topic: str, client_id: str, ready: Any, go: Any,
             count: Any, rows: int) -> None:
    """One plain paho client of the ceiling: its session's messages, each decoded."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=mqtt.MQTTv5)
    done = threading.Event()

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        json.loads(message.payload)
        with count.get_lock():
            count.value += 1
            if count.value >= rows:
                done.set()

    client.on_message = on_message
    properties = Properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = 3600
    properties.ReceiveMaximum = 65535
    with ready.get_lock():
        ready.value += 1
    go.wait(TIMEOUT_S)
    client.connect(broker[0], broker[1], clean_start=False, properties=properties)
    client.loop_start()
    deadline = time.monotonic() + TIMEOUT_S
    while not done.wait(0.05) and count.value < rows and time.monotonic() < deadline:
        pass
    client.disconnect()
    client.loop_stop()


def ceiling(broker: mosquitto.Broker, args: argparse.Namespace) -> float:
    """Messages/s two plain paho processes take from two sessions of one shared
    subscription, each payload decoded."""
    group = f"plain-{uuid.uuid4().hex[:8]}"
    topic = _queue(broker, group, 2, args.rows, args.size)
    context = multiprocessing.get_context("spawn")
    ready, go, count = context.Value("i", 0), context.Event(), context.Value("q", 0)
    consumers = [context.Process(target=_consume, args=(
        (broker.host, broker.port), f"$share/{group}/{topic}", f"{group}-{index}", ready, go,
        count, args.rows)) for index in range(2)]
    for consumer in consumers:
        consumer.start()
    deadline = time.monotonic() + TIMEOUT_S
    while ready.value < 2:  # the processes' start (imports) is not the consumers' work
        if time.monotonic() > deadline:
            raise TimeoutError("the ceiling's clients did not start")
        time.sleep(0.01)
    began = time.perf_counter()
    go.set()
    while count.value < args.rows:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the ceiling's clients took {count.value} of {args.rows}")
        time.sleep(0.002)
    took = time.perf_counter() - began
    for consumer in consumers:
        consumer.join(30)
    return args.rows / took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Enough that a query's start and its first batch (Python workers' imports) weigh
    # little: at 60,000 rows and 20,000 a batch they cut the 2-shard ratio to 1.22. Each
    # batch has fixed costs too (planning, scheduling, each task's connection): at 60,000
    # a batch 2 shards read at 1.42 times 1 shard and 0.76 of the ceiling, at 90,000
    # (45,000 a shard, within the broker's window of 65,535) at 1.73 and 0.83.
    parser.add_argument("--rows", type=int, default=180_000)
    parser.add_argument("--batch", type=int, default=90_000, help="maxRecordsPerTrigger")
    parser.add_argument("--size", type=int, default=100, help="bytes per message")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a third of the rows, once")
    parser.add_argument("--full-jit", action="store_true",
                        help="the driver's and executors' JVMs with the full JIT, as on a cluster "
                             "(default: the tests' quick-start options, C1 and serial GC)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeat = args.rows // 3, 1

    from pyspark_reactive import local_session

    daemons: list[Daemon] = []
    best: dict[str, float] = {}
    with mosquitto.Broker() as broker:
        try:
            cluster = start(Path(tempfile.mkdtemp(prefix="mqtt-sharded-cluster-")), daemons,
                            workers=2, cores=1)
            print(f"cluster {cluster.url}: two workers of one core; {mosquitto.version()}; "
                  f"{args.rows} queued messages of about {args.size} bytes, "
                  f"maxRecordsPerTrigger={args.batch}", flush=True)
            spark = local_session("mqtt-sharded-throughput", master=cluster.url, conf={
                "spark.executor.memory": "512m", "spark.executor.cores": "1",
                "spark.cores.max": "2", "spark.authenticate.secret": cluster.secret,
                # By default the tests' quick-start options for the driver's and the
                # executors' JVMs (C1 only, serial GC: start-up over peak speed);
                # --full-jit leaves them out, as on a cluster.
                **({} if args.full_jit else {
                    "spark.driver.extraJavaOptions": QUICK_START_JVM,
                    "spark.executor.extraJavaOptions": QUICK_START_JVM})})
            warm = argparse.Namespace(**{**vars(args), "rows": 2_000})
            for shards in (1, 2):  # each path's Python workers and imports
                into_spark(spark, broker, shards, warm)
            ceiling(broker, warm)
            for _ in range(args.repeat):
                for name, run in (("shards=1", lambda: into_spark(spark, broker, 1, args)),
                                  ("shards=2", lambda: into_spark(spark, broker, 2, args)),
                                  ("ceiling", lambda: ceiling(broker, args))):
                    rate = run()
                    best[name] = max(best.get(name, 0.0), rate)
                    print(f"  {name:9} {rate:10,.0f} rows/s", flush=True)
            spark.stop()
        finally:
            for daemon in reversed(daemons):
                daemon.stop()
    note = (f"{args.rows} queued messages, about {args.size} bytes, format=json, "
            f"2 workers x 1 core")
    figures = [
        Figure("mqtt sharded", "2 shards vs 1 shard", best["shards=2"], "rows/s",
               baseline="1 shard", baseline_value=best["shards=1"], target=(">=", 1.5),
               note=note),
        Figure("mqtt sharded", "2 shards vs the ceiling", best["shards=2"], "rows/s",
               baseline="two plain paho clients", baseline_value=best["ceiling"],
               target=(">=", 0.8), note=note),
    ]
    for figure in figures:
        ratio = figure.ratio or 0.0
        target = f" (target {figure.target[0]} {figure.target[1]})" if figure.target else ""
        print(f"{figure.case}: {ratio:.2f}{target}")
    print("the target is met by either ratio: 2 shards over 1, or, where the machine stops "
          "it first, 2 shards against the ceiling")
    write(args.json, "mqtt-sharded", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
