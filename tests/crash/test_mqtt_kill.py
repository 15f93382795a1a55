"""10,000 QoS 1 MQTT messages through the built-in ``mqtt`` publisher, with a SIGKILL of the
query in the middle of the flow and a restart: every message arrives as a row.

A paced publisher sends ids 0..9,999 (JSON) to a real mosquitto on 127.0.0.1; the query
(tests/crash/mqtt_query.py, a child process with a session of its own) resumes a
persistent session, logs to ``walLocation`` and writes parquet. While messages still
flow, the child and every process of its run are killed with SIGKILL (by pid); a second
run restarts from the same checkpoint, log and session and runs until the sink holds
every id. The broker redelivers what was not acknowledged, and a message is acknowledged
only once durable in the log, so none may be missing. Duplicates are counted, not hidden:
a message that was durable and not yet acknowledged at the kill comes again. The source
tells the publisher at each group commit (every ``walSyncMs`` = 50 ms) and the publisher
acknowledges at once, so that is at most the messages of the last group commit or two; the
test bounds it by one batch (``maxRecordsPerTrigger`` = 1,000) and prints the figure.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import mosquitto
import psutil
import pytest

from reactive_streams import Subscriber, Subscription
from reactive_streams.adapters.mqtt import MqttPublisher

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

# The crash trials' way to find every process of a run: an environment variable they all
# inherit.
from crash_trials import TAG, _tagged  # noqa: E402

MESSAGES = 10_000
FIRST = 200  # published at once, for the first batch
PER_SECOND = 1_500  # then the flow lasts about 6.5 s
KILL_AFTER_S = 1.5  # after the first run's first batch
PER_BATCH = 1_000
# A run's start (a JVM, the source's runner, a Python worker, a first batch) took 53 s
# beside two CPU-bound processes and more than 60 s beside the other CI lane: the bounds
# below are for a hang, not for a slow machine.
START_S = 240


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


def _spawn(folder: Path, broker: mosquitto.Broker, topic: str, client_id: str, run: int,
           tag: str, final: bool) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env[TAG] = tag  # every process of the run inherits it: found by it, killed by pid
    command = [sys.executable, str(HERE / "mqtt_query.py"), "--dir", str(folder),
               "--host", broker.host, "--port", str(broker.port), "--topic", topic,
               "--client-id", client_id, "--run", str(run)]
    if final:
        # What is left after the kill, in few batches: the bound on duplicates concerns
        # the run that was killed.
        command += ["--final", "--expect", str(MESSAGES), "--timeout", str(START_S),
                    "--per-trigger", str(MESSAGES)]
    else:
        command += ["--per-trigger", str(PER_BATCH)]
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
    while not path.exists():
        assert child.poll() is None, f"the query exited with {child.returncode}"
        assert time.monotonic() < deadline, f"no {path.name} within {timeout} s"
        time.sleep(0.05)


@pytest.mark.timeout(4 * START_S)
def test_a_killed_query_loses_no_message_of_a_persistent_session(tmp_path: Path) -> None:
    broker = mosquitto.Broker(tmp_path / "broker")
    (tmp_path / "broker").mkdir()
    broker.start()
    topic = f"kill/{uuid.uuid4().hex[:8]}"
    client_id = f"kill-{uuid.uuid4().hex[:8]}"
    tag = f"mqtt-kill-{os.getpid()}-{time.time_ns()}"
    published = [0]
    flowing = threading.Event()

    def payloads() -> Any:
        # A first few for the query's first batch; the rest paced, from its first batch on.
        for i in range(FIRST):
            yield f'{{"id": {i}}}'
        flowing.wait(START_S)
        began = time.monotonic()
        for i in range(FIRST, MESSAGES):
            delay = began + (i - FIRST) / PER_SECOND - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            yield f'{{"id": {i}}}'

    publishing = threading.Thread(target=lambda: mosquitto.publish(
        broker.host, broker.port, topic, payloads(), timeout=START_S + 120,
        published=lambda n: published.__setitem__(0, n)), daemon=True)
    child: subprocess.Popen[bytes] | None = None
    try:
        # The persistent session exists before anything is published: the broker queues
        # every message for it while the query is starting or dead.
        session: MqttPublisher[Any] = MqttPublisher(broker.host, topic, port=broker.port,
                                                    client_id=client_id)
        idle = _Idle()
        session.subscribe(idle)
        assert session.wait_subscribed(10)
        assert idle.subscription is not None
        idle.subscription.cancel()

        publishing.start()
        child = _spawn(tmp_path, broker, topic, client_id, 1, tag, final=False)
        _wait_for(tmp_path / "ready-1", child, timeout=START_S)
        flowing.set()
        time.sleep(KILL_AFTER_S)  # the kill's moment within the flow, not a synchronisation
        _kill(child, tag)
        at_kill = published[0]
        assert at_kill < MESSAGES, "the publisher had finished: no kill during the flow"

        child = _spawn(tmp_path, broker, topic, client_id, 2, tag, final=True)
        log = tmp_path / "run-2.log"
        assert child.wait(timeout=2 * START_S + 60) == 0, log.read_text()[-3000:]
        publishing.join(60)
    finally:
        if child is not None:
            _kill(child, tag)
        broker.stop()
    ids = [int(line) for line in (tmp_path / "committed").read_text().split()]
    counts = collections.Counter(ids)
    missing = sorted(set(range(MESSAGES)) - counts.keys())
    duplicated = sum(n - 1 for n in counts.values())
    print(f"mqtt kill: {len(ids)} rows for {MESSAGES} messages, killed after {at_kill} "
          f"were published; {len(missing)} missing, {duplicated} duplicated")
    assert not missing, f"{len(missing)} ids never arrived: {missing[:20]}"
    assert set(counts) == set(range(MESSAGES)), "ids nobody published"
    assert duplicated <= PER_BATCH, f"{duplicated} duplicates, more than a batch"
