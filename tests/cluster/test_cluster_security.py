"""Spark's own authentication on a standalone cluster: the master, the worker, the driver
and the executors share one secret, which no other local user reads (no command line, no
environment of theirs) and without which none of their RPC ports answers."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession
from standalone import StandaloneCluster, master_state

# Run as uid 65534: every command line it can read, and every environment (only its own
# processes', on Linux), as JSON.
_READ_PROC = """
import json, os

seen = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    for what in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as handle:
                seen[f"{pid}/{what}"] = handle.read().decode(errors="replace")
        except OSError:
            pass
print(json.dumps(seen))
"""


def _python_on_the_executor(spark: SparkSession) -> None:
    """Run a task in a Python worker of the worker's executor, so that one exists."""
    assert spark.sparkContext.parallelize(range(4), 2).map(lambda v: v + 1).sum() == 10


def test_no_other_user_reads_the_clusters_secret(spark: SparkSession,
                                                 cluster: StandaloneCluster) -> None:
    from other_user import other_user_reason, run_as_other_user

    reason = other_user_reason()
    if reason is not None:
        pytest.skip(reason)
    _python_on_the_executor(spark)
    done = run_as_other_user(_READ_PROC, timeout=60)
    seen: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    command_lines = [key for key in seen if key.endswith("cmdline")]
    # The daemons', the driver's and the executor's JVMs are among them.
    assert any("org.apache.spark.executor" in seen[key] for key in command_lines), (
        "no executor was running")
    shown = [f"{key}: {seen[key][:120]}" for key in seen if cluster.secret in seen[key]]
    assert not shown, f"uid 65534 reads the cluster's secret in {shown}"


def test_another_local_user_gets_no_answer_from_the_clusters_rpc(
        spark: SparkSession, cluster: StandaloneCluster) -> None:
    # Without authentication, whoever reaches the master's port may submit an application,
    # which the worker runs as its own user.
    from other_user import other_user_reason
    from spark_rpc_probe import assert_refused

    reason = other_user_reason(site_packages=True)
    if reason is not None:
        pytest.skip(reason)
    _python_on_the_executor(spark)
    workers = (master_state(cluster.web_ui) or {})["workers"]
    block_managers = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().keySet()
    targets = [f"endpoint:{cluster.url.rsplit(':', 1)[1]}:Master",
               *(f"endpoint:{worker['port']}:Worker" for worker in workers),
               f"endpoint:{spark.conf.get('spark.driver.port')}:BlockManagerMaster",
               # The driver's block manager and the executors' (at least one).
               *(f"blocks:{address.rsplit(':', 1)[1]}"
                 for address in block_managers.mkString(",").split(","))]
    assert len(workers) == len(cluster.workers), workers
    assert sum(t.startswith("blocks:") for t in targets) >= 2, targets
    assert_refused(targets)
