"""Crash trials of sharded queries on the loopback standalone cluster (two workers of one
core; conftest.py): executors' Python workers and executors' JVMs are killed with SIGKILL at random
moments of a running query, and every row must reach the sink exactly once.

One query reads two sharded feeds, unioned into one parquet sink with a checkpoint:

- the built-in ``range`` with ``shards=2``: a *resuming* publisher (a shard's task starts
  its stream after the last element the shard's log keeps);
- the built-in ``mqtt`` with ``shards=2`` on a shared subscription of a real mosquitto,
  ``identityColumn=id``: an *acknowledging* publisher whose messages carry identities
  (the broker redelivers what a killed task did not acknowledge; a task drops a
  redelivery of what its shard kept).

While the feeds flow, six kills land at random moments (seeded), taking turns: a Python
worker of an executor that is reading a shard of the broker (its task fails and is
retried), then an executor's JVM (its tasks are lost; the worker starts a new executor).
After each kill the query must commit two batches (the second planned after the kill).
The sink (read through its ``_spark_metadata``) must then hold each id of each feed once:
0 lost, 0 duplicated.

A second test restarts, on the same cluster, the checked-in checkpoint of a query that
read on the driver before the source could read shards (``single_shard/``, made by
``single_shard/make.py`` with commit 764dbeb's code): it reads on without loss.

conftest.py runs this module last of the folder: the executors it kills are replaced by
the workers, but a test after it would start beside their replacement.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mosquitto
import psutil
import pytest
from standalone import StandaloneCluster
from streaming import ProgressWatch, install

HERE = Path(__file__).resolve().parent
RANGE_ROWS = 8_000
RANGE_PER_BATCH = 400  # maxRecordsPerTrigger: 200 a shard
MESSAGES = 4_200
PER_SECOND = 150  # the MQTT feed lasts 28 s
MQTT_PER_BATCH = 100  # 50 a shard: a task fills its share in about 0.7 s
KILLS = ("python", "jvm") * 3
SEED = 29
# A run's start and an executor's replacement took up to a minute beside the other CI
# lane: the bounds are for a hang, not for a slow machine.
PROGRESS_S = 180.0
OLD = HERE / "single_shard"


@pytest.fixture(scope="module")
def watch(spark: Any) -> ProgressWatch:
    return install(spark)


def _executors(cluster: StandaloneCluster) -> list[psutil.Process]:
    """The executors' JVMs: the workers' children running CoarseGrainedExecutorBackend."""
    found = []
    for worker in cluster.workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(worker.pid).children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    if any("CoarseGrainedExecutorBackend" in part
                           for part in child.cmdline()):
                        found.append(child)
    return found


def _python_workers(cluster: StandaloneCluster) -> list[psutil.Process]:
    """The executors' Python workers: the processes pyspark.daemon forked for tasks."""
    found = []
    for executor in _executors(cluster):
        with contextlib.suppress(psutil.NoSuchProcess):
            for daemon in executor.children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    found.extend(daemon.children())
    return found


def _committed(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=-1)


def _reading(process: psutil.Process, port: int) -> bool:
    """Whether ``process`` has a TCP connection to ``port`` (a shard's task reading the
    broker)."""
    connections = getattr(process, "net_connections", None) or process.connections
    with contextlib.suppress(psutil.Error):
        return any(c.raddr and c.raddr.port == port for c in connections(kind="tcp"))
    return False


def _kill(kind: str, cluster: StandaloneCluster, broker_port: int, chooser: random.Random,
          deadline: float) -> str:
    """SIGKILL an executor's Python worker that is reading a shard of the broker
    (``python``: its task fails and is retried), or an executor's JVM (``jvm``), chosen at
    random among those alive; wait for one to exist."""
    while True:
        if kind == "python":
            targets = [p for p in _python_workers(cluster) if _reading(p, broker_port)]
        else:
            targets = _executors(cluster)
        if targets:
            victim = chooser.choice(sorted(targets, key=lambda p: p.pid))
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                os.kill(victim.pid, signal.SIGKILL)
                return f"{kind} {victim.pid}"
        assert time.monotonic() < deadline, f"no executor {kind} process to kill"
        time.sleep(0.05)  # a process to appear, not a synchronisation of the query


def _publish_paced(broker: mosquitto.Broker, topic: str, started: threading.Event,
                   published: list[int]) -> None:
    def payloads() -> Iterator[str]:
        started.wait(PROGRESS_S)
        began = time.monotonic()
        for i in range(MESSAGES):
            delay = began + i / PER_SECOND - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            yield json.dumps({"id": i})

    mosquitto.publish(broker.host, broker.port, topic, payloads(),
                      timeout=PROGRESS_S + MESSAGES / PER_SECOND,
                      published=lambda n: published.__setitem__(0, n))


def reactive(spark: Any, **options: Any) -> Any:
    reader = spark.readStream.format("reactive")
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader


def _verdict(name: str, ids: list[int], expected: int) -> str:
    counts = collections.Counter(ids)
    lost = sorted(set(range(expected)) - counts.keys())
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    unexpected = sorted(set(counts) - set(range(expected)))
    return (f"{name}: {len(ids)} rows for {expected}; {len(lost)} lost {lost[:10]}, "
            f"{duplicated} duplicated, {len(unexpected)} unexpected {unexpected[:10]}")


def _verdicts(spark: Any, sink: Path) -> str:
    """Each feed's verdict on what the sink holds (read through its _spark_metadata)."""
    def read(feed: str) -> list[int]:
        return [row.id for row in spark.read.parquet(str(sink))
                .where(f"feed = '{feed}'").select("id").collect()]

    return "\n".join((_verdict("range (resuming)", read("range"), RANGE_ROWS),
                      _verdict("mqtt (acknowledging, identities)", read("mqtt"), MESSAGES)))


@pytest.mark.timeout(900)
def test_kills_of_executors_python_workers_and_jvms_lose_and_repeat_no_row(
        spark: Any, cluster: StandaloneCluster, watch: ProgressWatch,
        tmp_path: Path) -> None:
    broker = mosquitto.Broker(tmp_path / "broker")
    (tmp_path / "broker").mkdir()
    broker.start()
    topic = f"kills/{uuid.uuid4().hex[:8]}"
    client_id = f"kills-{uuid.uuid4().hex[:8]}"
    for shard in (0, 1):  # the shards' sessions queue from the first message on
        mosquitto.persistent_session(broker, f"$share/{client_id}/{topic}",
                                     f"{client_id}-{shard}")
    started, published = threading.Event(), [0]
    publishing = threading.Thread(target=_publish_paced, daemon=True,
                                  args=(broker, topic, started, published))
    publishing.start()
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"
    query = None
    kills: list[str] = []
    try:
        ranged = reactive(spark, publisher="range", count=RANGE_ROWS, shards=2,
                          maxRecordsPerTrigger=RANGE_PER_BATCH,
                          walLocation=tmp_path / "wal-range").load()
        messages = reactive(spark, publisher="mqtt", host=broker.host, port=broker.port,
                            topic=topic, clientId=client_id, format="json",
                            identityColumn="id", shards=2, maxRecordsPerTrigger=MQTT_PER_BATCH,
                            walLocation=tmp_path / "wal-mqtt").schema("id BIGINT").load()
        both = ranged.selectExpr("'range' AS feed", "value AS id").unionByName(
            messages.selectExpr("'mqtt' AS feed", "id"))
        query = (both.writeStream.format("parquet").option("path", str(sink))
                 .option("checkpointLocation", str(checkpoint)).start())
        watch.wait_batches(query, 1, PROGRESS_S)
        started.set()
        chooser = random.Random(SEED)
        for kind in KILLS:
            # A random moment of the flow: a few tenths to 1.5 seconds on.
            query.awaitTermination(chooser.uniform(0.3, 1.5))
            killed = _kill(kind, cluster, broker.port, chooser,
                           time.monotonic() + PROGRESS_S)
            kills.append(f"{killed} ({published[0]} published)")
            # Two batches committed after the kill: the second was planned after it (the
            # first may have been under way), so the query got over it.
            after = _committed(checkpoint)
            watch.wait_for(query, lambda after=after: _committed(checkpoint) >= after + 2,
                           PROGRESS_S, f"progress after the kill of {killed}")
        publishing.join(PROGRESS_S)
        assert published[0] == MESSAGES, "the publisher could not send every message"
        # Rows lost never come; rows repeated would count twice: the sink tells which.
        try:
            watch.wait_rows(query, RANGE_ROWS + MESSAGES, PROGRESS_S)
        except AssertionError as waited:
            raise AssertionError(f"{waited}\n{_verdicts(spark, sink)}") from None
        query.stop()
        query = None
    finally:
        if query is not None:
            query.stop()
        broker.stop()
    verdicts = _verdicts(spark, sink)
    print(f"sharded kills of {MESSAGES} messages: {', '.join(kills)}\n{verdicts}")
    for verdict in verdicts.splitlines():
        assert " 0 lost [], 0 duplicated, 0 unexpected" in verdict, (verdict, kills)


def test_a_checkpoint_of_the_source_before_shards_reads_on_without_loss(
        spark: Any, watch: ProgressWatch, tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(OLD, old, ignore=shutil.ignore_patterns("*.py"))
    kept = {int(p.name) for p in (old / "checkpoint" / "commits").iterdir()
            if p.name.isdigit()}
    before = [i for batch in sorted(kept)
              for i in json.loads((old / "batches" / f"{batch}.json").read_text())]
    assert before, "the checked-in checkpoint has no committed batch"
    count = 3_000  # single_shard/make.py's
    df = (spark.readStream.format("reactive").option("publisher", "range")
          .option("count", count).option("maxRecordsPerTrigger", 500)
          .option("walLocation", str(old / "wal")).load())
    batches = old / "batches"

    def keep(batch: Any, batch_id: int) -> None:
        ids = sorted(row.value for row in batch.collect())
        (batches / f"{batch_id}.json").write_text(json.dumps(ids))

    query = (df.writeStream.foreachBatch(keep)
             .option("checkpointLocation", str(old / "checkpoint")).start())
    try:
        watch.wait_for(query, lambda: sum(watch.batch_sizes(query)) >= count - len(before),
                       PROGRESS_S, "the rest of the range")
    finally:
        query.stop()
    committed = {int(p.name) for p in (old / "checkpoint" / "commits").iterdir()
                 if p.name.isdigit()}
    ids = [i for batch in sorted(committed)
           for i in json.loads((batches / f"{batch}.json").read_text())]
    verdict = _verdict("the checkpoint before shards", ids, count)
    print(verdict)
    assert " 0 lost [], 0 duplicated, 0 unexpected" in verdict
