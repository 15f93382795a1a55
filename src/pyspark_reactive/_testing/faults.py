"""Fault injection for crash trials: kill this process group at a chosen point.

Off unless the environment variable ``PYSPARK_REACTIVE_CRASH_AT`` is set, as
``"<point>:<n>"``: the ``n``-th time (1-based, counted in each process) that code reaches
``point``, this process's group gets SIGKILL. Spark passes the driver's environment to the
processes it starts, so the variable reaches the runner and the workers. The driver, the
JVM and the source runner share a group; Spark's Python daemon puts itself and its workers
in a group of their own (``os.setpgid`` in ``pyspark/daemon.py``), so a kill at ``read``
ends only those: a trial watches ``PYSPARK_REACTIVE_CRASH_LOG`` and kills the rest itself,
as ``benchmarks/crash_trials.py`` does.

It lives in the private ``_testing`` package, not beside the source and the log it kills:
the crash trials (``tests/crash``, ``benchmarks/crash_trials.py``) need it inside the
processes Spark starts, so it ships with the package, but it is no part of what the package
does. Production code only calls :func:`crash_point`, which returns at once unless the
variable names that point.

Points:

``latest``
    In ``latestOffset``, after the batch's end is known and before it is returned.
``wal-write``
    Halfway through writing a log segment: the file on disk is torn.
``read``
    In a task's ``read()``, on an executor: during a batch's tasks.
``shard-taken``
    A shard's task (option ``shards``), on an executor: the epoch's elements taken, not
    yet kept in the shard's log.
``shard-kept``
    A shard's task: the epoch kept in the shard's log, not yet acknowledged
    (``on_durable``).

When ``PYSPARK_REACTIVE_CRASH_LOG`` names a file, a line ``<point> <time.time()>`` is
appended to it (and flushed) just before the kill, so a trial knows when it died.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["POINTS", "crash_point"]

POINTS = ("latest", "wal-write", "read", "shard-taken", "shard-kept")

_SPEC = os.environ.get("PYSPARK_REACTIVE_CRASH_AT", "")
_TARGET, _, _COUNT = _SPEC.partition(":")
_hits: dict[str, int] = {}


def crash_point(point: str) -> None:
    """Kill the process group here if ``PYSPARK_REACTIVE_CRASH_AT`` names this hit."""
    if point != _TARGET:
        return
    _hits[point] = hits = _hits.get(point, 0) + 1
    if hits != int(_COUNT or "1"):
        return
    record = os.environ.get("PYSPARK_REACTIVE_CRASH_LOG")
    if record:
        with open(record, "a") as handle:
            handle.write(f"{point} {time.time():.6f}\n")
    os.killpg(os.getpgid(0), signal.SIGKILL)
