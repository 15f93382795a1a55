"""Rows/s into Spark through the built-in ``mqtt`` publisher, beside the ceiling: the same
local publisher's messages through the same mosquitto into a plain paho client that keeps
every message and does no Spark work; and, to show where the difference goes, the
``MqttPublisher`` adapter alone.

A mosquitto broker (``tests/peers/mosquitto.py``) runs on 127.0.0.1; for each run a
publisher process (``mosquitto.py publish``) sends ``--rows`` messages of ``--size`` bytes
at QoS ``--qos`` as fast as one paho client can. Each consumer has a persistent session
subscribed before the publisher starts, and the clock runs from the publisher's start to
the consumer's last message:
(a) the ceiling: a plain paho client (``loop_start``, automatic acknowledgement) appends
every message to a list;
(c) ``MqttPublisher`` (on_next acknowledgement) into a subscriber that counts, requesting
``--batch`` at a time, no Spark;
(b) a query reads the topic with ``publisher=mqtt`` (message columns,
``maxRecordsPerTrigger=--batch``, with ``walLocation`` unless ``--no-wal``) into Spark's
``noop`` sink with the default trigger on ``local[2]``, until its progress events have
counted every row.
With ``--queued`` the publisher sends everything into the session first and the clock runs
from the consumer's start (the query's ``start()`` for (b)) to its last message: that
measures the consumer alone, where otherwise one publishing client is the limit.
Each runs ``--repeat`` times after one warm-up; the best run counts, and (b) and (c) are
printed as ratios of (a). Broker, publisher and consumer share the machine.

Run from the repository root::

    .venv/bin/python benchmarks/mqtt_throughput.py [--rows N] [--size S] [--qos Q]
        [--batch B] [--repeat K] [--no-wal] [--queued]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt
import paho.mqtt.client as mqtt
import pyspark
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pyspark.sql.streaming import StreamingQueryListener

from pyspark_reactive import local_session
from reactive_streams import SyncSubscriber
from reactive_streams.adapters.mqtt import MqttMessage, MqttPublisher

PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"
sys.path.insert(0, str(PEERS))

import mosquitto  # noqa: E402


def _publisher(broker: mosquitto.Broker, topic: str, args: argparse.Namespace) -> Any:
    return subprocess.Popen([sys.executable, str(PEERS / "mosquitto.py"), "publish",
                             broker.host, str(broker.port), topic, str(args.rows),
                             "--size", str(args.size), "--qos", str(args.qos)],
                            stdout=subprocess.PIPE, text=True)


def _queue(broker: mosquitto.Broker, topic: str, args: argparse.Namespace) -> Any:
    """With --queued: publish everything into the session before the consumer starts, and
    return the (finished) publisher process; else None."""
    if not args.queued:
        return None
    publisher = _publisher(broker, topic, args)
    if publisher.wait(600) != 0:
        raise RuntimeError(f"the publisher process exited with {publisher.returncode}")
    return publisher


def _wait(done: Any, publisher: Any, what: str) -> None:
    """Wait until ``done()``, failing at once if the publisher process failed."""
    deadline = time.monotonic() + 600
    while not done():
        if publisher.poll() not in (None, 0):
            raise RuntimeError(f"the publisher process exited with {publisher.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within 600 s")
        time.sleep(0.005)


def _session(broker: mosquitto.Broker, topic: str, qos: int) -> str:
    """A persistent session subscribed to ``topic``: the broker keeps what it is sent."""
    client_id = f"bench-{uuid.uuid4().hex[:8]}"
    client = _paho(client_id)
    subscribed = threading.Event()
    client.on_subscribe = lambda *a: subscribed.set()
    client.on_connect = lambda c, *a: c.subscribe(topic, qos)
    _connect(client, broker)
    client.loop_start()
    assert subscribed.wait(10), "no SUBACK"
    client.disconnect()
    client.loop_stop()
    return client_id


def _paho(client_id: str) -> mqtt.Client:
    return mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                       protocol=mqtt.MQTTv5)


def _connect(client: mqtt.Client, broker: mosquitto.Broker) -> None:
    properties = Properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = 3600
    properties.ReceiveMaximum = 65535
    client.connect(broker.host, broker.port, clean_start=False, properties=properties)


def ceiling(broker: mosquitto.Broker, args: argparse.Namespace) -> float:
    """(a) Rows/s into a plain paho client that keeps every message."""
    topic = f"bench/{uuid.uuid4().hex[:8]}"
    client = _paho(_session(broker, topic, args.qos))
    kept: list[mqtt.MQTTMessage] = []
    done = threading.Event()

    def on_message(client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        kept.append(message)
        if len(kept) == args.rows:
            done.set()

    client.on_message = on_message
    publisher = _queue(broker, topic, args)
    began = time.perf_counter()
    _connect(client, broker)
    client.loop_start()
    publisher = publisher or _publisher(broker, topic, args)
    _wait(done.is_set, publisher, f"{len(kept)} of {args.rows} messages")
    took = time.perf_counter() - began
    client.disconnect()
    client.loop_stop()
    publisher.wait(60)
    return args.rows / took


class _Counter(SyncSubscriber[MqttMessage]):
    count = 0

    def on_element(self, element: MqttMessage) -> None:
        self.count += 1


def adapter(broker: mosquitto.Broker, args: argparse.Namespace) -> float:
    """(c) Rows/s through MqttPublisher into a counting subscriber, no Spark."""
    topic = f"bench/{uuid.uuid4().hex[:8]}"
    client_id = _session(broker, topic, args.qos)
    counter = _Counter(batch_size=args.batch)
    publisher = _queue(broker, topic, args)
    began = time.perf_counter()
    publisher = publisher or _publisher(broker, topic, args)
    MqttPublisher(broker.host, topic, port=broker.port, qos=args.qos, client_id=client_id,
                  receive_maximum=65535, max_buffered=args.batch,
                  max_messages=args.rows).subscribe(counter)
    _wait(lambda: counter.finished, publisher, f"{counter.count} of {args.rows} messages")
    counter.join(0)
    took = time.perf_counter() - began
    publisher.wait(60)
    assert counter.count == args.rows, counter.count
    return args.rows / took


class RowsListener(StreamingQueryListener):
    """Counts a query's rows from its progress; ``done`` is set at ``rows``, or when the
    query ends (``failed`` then says how)."""

    def __init__(self, rows: int) -> None:
        self.rows, self.count, self.done = rows, 0, threading.Event()
        self.failed: str | None = None

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self.count += event.progress.numInputRows
        if self.count >= self.rows:
            self.done.set()

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self.failed = event.exception or "ended"
        self.done.set()


def into_spark(spark: Any, broker: mosquitto.Broker, args: argparse.Namespace) -> float:
    """(b) Rows/s of one query reading ``--rows`` messages into the noop sink."""
    topic = f"bench/{uuid.uuid4().hex[:8]}"
    client_id = _session(broker, topic, args.qos)
    listener = RowsListener(args.rows)
    spark.streams.addListener(listener)
    with tempfile.TemporaryDirectory() as folder:
        reader = (spark.readStream.format("reactive").option("publisher", "mqtt")
                  .option("host", broker.host).option("port", broker.port)
                  .option("topic", topic).option("qos", args.qos)
                  .option("clientId", client_id).option("maxRecordsPerTrigger", args.batch))
        if not args.no_wal:
            reader = reader.option("walLocation", f"{folder}/wal")
        publisher = _queue(broker, topic, args)
        began = time.perf_counter()
        publisher = publisher or _publisher(broker, topic, args)
        query = (reader.load().writeStream.format("noop")
                 .option("checkpointLocation", f"{folder}/checkpoint").start())
        _wait(listener.done.is_set, publisher, f"{listener.count} of {args.rows} rows")
        took = time.perf_counter() - began
        query.stop()
        publisher.wait(60)
    spark.streams.removeListener(listener)
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    assert listener.count == args.rows, f"{listener.count} rows of {args.rows}"
    return args.rows / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per message")
    parser.add_argument("--qos", type=int, default=1, choices=(0, 1))
    parser.add_argument("--batch", type=int, default=20_000, help="maxRecordsPerTrigger")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-wal", action="store_true", help="no walLocation in (b)")
    parser.add_argument("--queued", action="store_true",
                        help="publish every message into the session first, then time the "
                             "consumer alone (from connecting, or from the query's start)")
    args = parser.parse_args()

    with mosquitto.Broker() as broker:
        ceiling(broker, args)  # warm-ups
        adapter(broker, args)
        plain = alone = 0.0
        for _ in range(args.repeat):  # in turns, so a busy moment favours neither
            plain = max(plain, ceiling(broker, args))
            alone = max(alone, adapter(broker, args))
        spark = local_session()
        into_spark(spark, broker, args)  # warm-up
        spark_rate = max(into_spark(spark, broker, args) for _ in range(args.repeat))
        spark.stop()
    print(f"python {platform.python_version()}, pyspark {pyspark.__version__}, paho-mqtt "
          f"{paho.mqtt.__version__}, {mosquitto.version()}; {args.rows} messages of {args.size} "
          f"bytes at QoS {args.qos} per run, maxRecordsPerTrigger={args.batch}, "
          f"{'no walLocation' if args.no_wal else 'walLocation'}, "
          f"{'queued before the consumer starts' if args.queued else 'published meanwhile'}, "
          f"best of {args.repeat}")
    print(f"(a) plain paho client (ceiling): {plain:,.0f} rows/s")
    print(f"(c) MqttPublisher alone, no Spark: {alone:,.0f} rows/s "
          f"= {alone / plain:.0%} of the ceiling")
    print(f"(b) publisher=mqtt into Spark (noop): {spark_rate:,.0f} rows/s "
          f"= {spark_rate / plain:.0%} of the ceiling")


if __name__ == "__main__":
    main()
