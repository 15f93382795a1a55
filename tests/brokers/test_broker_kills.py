"""Four brokers read by one query that is SIGKILLed at three random moments and restarted:
nothing is lost, and nothing is repeated where each message has an identity the
write-ahead log keeps.

The brokers run on 127.0.0.1 (tests/peers): redis-server (a stream read by a consumer
group), nats-server (a JetStream stream read by a durable pull consumer, AckWait 2 s), a
RabbitMQ node (a durable queue whose producer sets ``message_id``) and the same node's MQTT
plugin, read over MQTT 3.1.1 with a persistent session. The query (brokers_query.py, a
child process with a Spark of its own) unions the four built-ins, each with a
``walLocation``, into a parquet sink, with no deduplication. While each broker's messages
flow, the child and every process of its run are killed with SIGKILL (by pid) three times
at seeded random moments, and restarted from the same checkpoint and logs; a fourth run
goes on until the sink holds every id of every broker.

Every message must arrive. Redis entry IDs, JetStream stream sequences and RabbitMQ
message ids are identities: a message that was durable in the log and not yet acknowledged
at a kill comes again and is dropped (``pyspark_reactive.source.redeliveries``), so none may
repeat. MQTT 3.1.1 messages have no identity: their repeats are counted and bounded by a
batch.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import nats_server
import psutil
import pytest
import rabbitmq_server
import redis_server

from reactive_streams import Subscriber, Subscription
from reactive_streams.adapters.mqtt import MqttPublisher

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

# The crash trials' way to find every process of a run: an environment variable they all
# inherit.
from crash_trials import TAG, _tagged  # noqa: E402

MESSAGES = 1500  # per broker
CHUNK = 100  # published at a time, every PACE_S
PACE_S = 0.3  # so the flow lasts about 4.5 s
PER_TRIGGER = 500
KILLS = 3
# A run's start (a JVM, four source runners, a first batch) took 53 s beside two CPU-bound
# processes in the MQTT kill test: the bounds are for a hang, not a slow machine.
START_S = 240
SEED = int(os.environ.get("BROKER_KILLS_SEED", "0")) or random.SystemRandom().randrange(2**31)
IDENTIFIED = ("redis", "nats", "rabbitmq")


class _Idle(Subscriber[Any]):
    subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription

    def on_next(self, element: Any) -> None:
        raise AssertionError("nothing was requested")

    def on_error(self, error: BaseException) -> None:
        pass

    def on_complete(self) -> None:
        pass


def _secret(folder: Path, name: str, value: str) -> str:
    path = folder / name
    path.write_text(value + "\n")
    path.chmod(0o600)
    return str(path)


def _mqtt_publish(node: rabbitmq_server.Node, topic: str, first: int, count: int) -> None:
    """QoS 1 messages ``{"id": i}`` over MQTT 3.1.1, each PUBACK waited for."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    client.username_pw_set(node.username, node.password)
    client.connect(node.host, node.mqtt_port)
    client.loop_start()
    try:
        sent = [client.publish(topic, json.dumps({"id": i}), qos=1)
                for i in range(first, first + count)]
        for info in sent:
            info.wait_for_publish(30)
            assert info.is_published(), "the broker did not acknowledge a message"
    finally:
        client.loop_stop()
        client.disconnect()


def _spawn(folder: Path, config: Path, run: int, tag: str, final: bool
           ) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env[TAG] = tag  # every process of the run inherits it: found by it, killed by pid
    command = [sys.executable, str(HERE / "brokers_query.py"), "--dir", str(folder),
               "--config", str(config), "--run", str(run), "--per-trigger", str(PER_TRIGGER)]
    if final:
        command += ["--final", "--expect", str(MESSAGES), "--timeout", str(START_S)]
    with open(folder / f"run-{run}.log", "wb") as output:
        return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _kill(child: subprocess.Popen[bytes], tag: str) -> None:
    """SIGKILL the child's group, then every process of the run still alive (Spark's
    Python daemon and its workers have a group of their own), each by pid."""
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 30
    while tagged := _tagged(tag):
        for process in tagged:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(tagged, timeout=5)
        assert time.monotonic() < deadline, f"survived SIGKILL: {[p.pid for p in tagged]}"


def _wait_for(path: Path, child: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not path.exists():
        assert child.poll() is None, f"the query exited with {child.returncode}"
        assert time.monotonic() < deadline, f"no {path.name} within {timeout} s"
        pause.wait(0.05)


@pytest.mark.timeout(8 * START_S)
def test_four_brokers_lose_nothing_across_three_kills(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    name = f"kills{uuid.uuid4().hex[:6]}"
    tag = f"broker-kills-{os.getpid()}-{time.time_ns()}"
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    # Each broker's folder (its data and log) in the test's own, kept after it for a look.
    # (The RabbitMQ node is the test process's one, shared with tests/brokers/rabbitmq.)
    for folder in ("redis", "nats"):
        (tmp_path / folder).mkdir()
    redis = redis_server.RedisServer(tmp_path / "redis").start()
    nats = nats_server.Server(tmp_path / "nats").start()
    node = rabbitmq_server.shared_node()
    child: subprocess.Popen[bytes] | None = None
    flowing = threading.Event()
    published: collections.Counter[str] = collections.Counter()
    failures: list[BaseException] = []
    try:
        redis_server.create_group(redis, name, "g")
        nats_server.create_stream(nats, name, [f"{name}.in"])
        nats_server.create_consumer(nats, name, "reader", ack_wait_s=2.0)
        node.declare_queue(name)
        node.wait_mqtt()
        topic = f"{name}/in"
        # The persistent MQTT session exists before anything is published: the broker
        # queues every message for it while the query is starting or dead.
        session: MqttPublisher[Any] = MqttPublisher(
            node.host, topic, port=node.mqtt_port, client_id=name, protocol="3.1.1",
            username=node.username, password=node.password)
        idle = _Idle()
        session.subscribe(idle)
        assert session.wait_subscribed(30)
        assert idle.subscription is not None
        idle.subscription.cancel()
        assert session.wait_closed(10)

        sources = {
            "redis": {"publisher": "redis", "url": redis.url, "stream": name, "group": "g",
                      "consumer": "query", "passwordFile": str(redis.password_file)},
            "nats": {"publisher": "nats", "url": nats.url, "stream": name,
                     "consumer": "reader", "username": nats_server.USER,
                     "passwordFile": _secret(secrets, "nats", nats_server.PASSWORD)},
            "rabbitmq": {"publisher": "rabbitmq", "queue": name, "host": node.host,
                         "port": node.port, "username": node.username,
                         "passwordFile": _secret(secrets, "rabbitmq", node.password)},
            "mqtt": {"publisher": "mqtt", "host": node.host, "port": node.mqtt_port,
                     "topic": topic, "clientId": name, "protocol": "3.1.1",
                     "username": node.username,
                     "passwordFile": _secret(secrets, "mqtt", node.password)},
        }
        config = tmp_path / "sources.json"
        config.write_text(json.dumps(sources))

        def publish() -> None:
            sends = {
                "redis": lambda first: redis_server.add_json(redis, name, CHUNK, first),
                "nats": lambda first: nats_server.publish_json(nats, f"{name}.in", CHUNK,
                                                               first, id_prefix=name),
                "rabbitmq": lambda first: rabbitmq_server.publish_json(
                    node, name, CHUNK, start=first, prefix=f"{name}-"),
                "mqtt": lambda first: _mqtt_publish(node, topic, first, CHUNK),
            }
            try:
                pace = threading.Event()
                for first in range(0, MESSAGES, CHUNK):
                    if first == CHUNK:
                        flowing.wait(START_S)  # the first chunk is there for the first batch
                    for source, send in sends.items():
                        send(first)
                        published[source] += CHUNK
                    pace.wait(PACE_S)  # the flow's pace, not a synchronisation
            except BaseException as error:  # reported by the test's thread
                failures.append(error)

        publishing = threading.Thread(target=publish, daemon=True)
        publishing.start()
        kills = []
        for run in range(1, KILLS + 1):
            child = _spawn(tmp_path, config, run, tag, final=False)
            _wait_for(tmp_path / f"ready-{run}", child, timeout=START_S)
            flowing.set()
            after = rng.uniform(0.2, 2.5)
            threading.Event().wait(after)  # the kill's random moment, not a synchronisation
            _kill(child, tag)
            kills.append((round(after, 2), sum(published.values())))
        child = _spawn(tmp_path, config, KILLS + 1, tag, final=True)
        publishing.join(START_S)
        assert not failures, f"publishing failed: {failures[0]!r}"
        log = tmp_path / f"run-{KILLS + 1}.log"
        assert child.wait(timeout=2 * START_S) == 0, log.read_text()[-4000:]
    finally:
        if child is not None:
            _kill(child, tag)
        rabbitmq_server.release_shared_node()
        nats.stop()
        redis.stop()
    rows = [line.split() for line in (tmp_path / "committed").read_text().splitlines()]
    by_source: dict[str, collections.Counter[int]] = collections.defaultdict(
        collections.Counter)
    for source, value in rows:
        by_source[source][int(value)] += 1
    report = []
    for source in sources:
        counts = by_source[source]
        missing = sorted(set(range(MESSAGES)) - counts.keys())
        repeated = sum(n - 1 for n in counts.values())
        report.append((source, len(missing), repeated))
    print(f"\nbroker kills (seed {SEED}; kills at {kills}, seconds after a run's first batch "
          f"and messages published by then): "
          + "; ".join(f"{s}: {m} missing, {r} repeated" for s, m, r in report))
    for source, missing, repeated in report:
        assert missing == 0, f"{source}: {missing} messages never arrived (seed {SEED})"
        assert set(by_source[source]) <= set(range(MESSAGES)), f"{source}: ids nobody sent"
        if source in IDENTIFIED:
            assert repeated == 0, f"{source}: {repeated} messages repeated (seed {SEED})"
        else:
            assert repeated <= PER_TRIGGER, f"{source}: {repeated} repeats, over a batch"
