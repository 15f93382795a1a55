"""Where the connector's tests live, for whoever must import them.

``tests/pyspark_reactive`` holds their helper modules (``spark_publishers``, ``streaming``,
``on_demand_rounds``) and the tests of the package as a whole; its sub-folders mirror the
package (``source/``, ``publishers/``, ``sink/``). Tests of other folders import those
helpers and some of those test modules (``test_sink``'s subscribers, say), and Spark's
Python processes import a test module whenever a function of it travels by reference: so
each of these folders goes on ``sys.path`` and on the ``PYTHONPATH`` of the Spark the
tests start.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FOLDERS"]

_ROOT = Path(__file__).resolve().parents[1] / "pyspark_reactive"

#: ``tests/pyspark_reactive`` first, then each of its sub-folders that holds tests.
FOLDERS = [str(_ROOT), *(str(path) for path in sorted(_ROOT.iterdir())
                         if path.is_dir() and any(path.glob("test_*.py")))]
