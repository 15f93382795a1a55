"""Fixtures of the tests on a Spark standalone cluster on 127.0.0.1 (see standalone.py).

``cluster`` starts one master and two workers of one core each when the first test asks
for it and ends them when the test session ends, or at once when starting them fails.
``spark`` is a SparkSession whose master is that cluster: its source runner runs beside
the driver, its tasks on the workers' two executors (test_sharded_kills.py, last, kills
some of them). This folder runs in a pytest process of its own (see
tests/conftest.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from standalone import QUICK_START_JVM, Daemon, StandaloneCluster, start

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HERE = Path(__file__).parent
WORKERS = 2
# spark_publishers.py (the import-path publishers) and streaming.py (ProgressWatch).
SOURCE_TESTS = HERE.parent / "pyspark_reactive"
sys.path.insert(0, str(SOURCE_TESTS))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two workers (1 core, 1 GiB each) on 127.0.0.1, logs in a temporary
    dir: two executors, as the sharded reads of test_sharded_kills.py need."""
    daemons: list[Daemon] = []
    try:
        cluster = start(tmp_path_factory.mktemp("cluster"), daemons, workers=WORKERS, cores=1)
        print(f"standalone cluster {cluster.url}: logs in {cluster.logs}")  # for failures
        yield cluster
    finally:
        for daemon in reversed(daemons):  # the worker first: it ends its executors
            daemon.stop()


@pytest.fixture(scope="session")
def spark(cluster: StandaloneCluster) -> Iterator[SparkSession]:
    """``local_session()`` with the cluster as its master (driver bound to 127.0.0.1)."""
    from pyspark_reactive import local_session

    # The source runner is spawned by the driver JVM, which inherits this environment;
    # the executors' Python workers get theirs from spark.executorEnv.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SOURCE_TESTS), os.environ.get("PYTHONPATH")) if p)
    session = local_session("pyspark-reactive-cluster-tests", master=cluster.url, conf={
        "spark.executor.memory": "512m",
        "spark.driver.extraJavaOptions": QUICK_START_JVM,
        "spark.executor.extraJavaOptions": QUICK_START_JVM,
        "spark.cores.max": str(WORKERS),
        # test_sharded_kills.py's six kills: a task may fail more than the default 4 times
        # (a JVM's kill fails every task it ran). What is retried is what is tested.
        "spark.task.maxFailures": "12",
        # executor_subscribers.py, which the foreach writer's factory names by reference.
        "spark.executorEnv.PYTHONPATH": os.pathsep.join((str(HERE), str(SOURCE_TESTS))),
        # The cluster's: local_session() hands it to the JVM in a private file, never on
        # its command line.
        "spark.authenticate.secret": cluster.secret,
    })
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_sharded_kills.py last: the executors it kills are replaced, but a test after
    it would start beside their replacement."""
    items.sort(key=lambda item: item.path.name == "test_sharded_kills.py")
