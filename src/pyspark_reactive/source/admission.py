"""How much a micro-batch of the ``reactive`` source may take, and how Spark says so.

Spark 4.2+ has admission control for Python streaming sources
(``pyspark.sql.streaming.datasource``): ``latestOffset(start, limit)`` with a read limit, and
``SupportsTriggerAvailableNow``. Spark 4.0/4.1 have neither; the stand-ins here keep the
reader's bases the same on every line. :data:`ADMISSION_CONTROL` says which this pyspark is.
"""

from __future__ import annotations

__all__ = ["ADMISSION_CONTROL", "ReadAllAvailable", "ReadMaxRows", "SupportsTriggerAvailableNow"]

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources.
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.0/4.1: latestOffset() is called with no arguments.
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in so the reader's bases are the same on every Spark version."""

#: Whether this pyspark has admission control for Python streaming sources
#: (``pyspark.sql.streaming.datasource``: Spark 4.2+, and runtimes that back-ported
#: SPARK-55304). Without it Spark runs an ``availableNow`` trigger over a Python source as a
#: single micro-batch (it falls back to ``SingleBatchExecutor`` for any source that is not
#: ``SupportsTriggerAvailableNow``) and the source never learns which trigger runs. The API is
#: detected, never the version number; :func:`~pyspark_reactive.publish` reads this too.
ADMISSION_CONTROL = ReadMaxRows is not None
