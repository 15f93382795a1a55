"""The connector's tests: this folder holds their helper modules (``spark_publishers``,
``streaming``, ``on_demand_rounds``) and the tests of the package as a whole; ``source/``,
``publishers/`` and ``sink/`` mirror the package. Every one of these folders goes on
``sys.path`` (``connector_tests.FOLDERS``), so a test anywhere here imports the helpers and
the test modules it shares fixtures with (``test_source``'s ``reactive`` and ``watch``)."""

from __future__ import annotations

import sys

from connector_tests import FOLDERS  # tests/peers: on the path through tests/conftest.py

for folder in reversed(FOLDERS):
    if folder not in sys.path:
        sys.path.insert(0, folder)
