"""Fixtures shared by the whole test suite.

``spark`` is one local SparkSession for the whole test session. It is started only when
a test first asks for it, so tests that don't use Spark never start a JVM, and pyspark
is imported only then, so ``reactive_streams`` tests run without it loaded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The test session's SparkSession, from ``pyspark_reactive.local_session()``."""
    from pyspark_reactive import local_session

    # Spark's Python processes (source runners, workers) inherit the JVM's environment:
    # this puts the source tests' publishers (spark_publishers.py) on their path.
    here = os.path.join(os.path.dirname(__file__), "pyspark_reactive")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p)
    session = local_session()
    yield session
    session.stop()
