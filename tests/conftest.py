"""Fixtures shared by the whole test suite.

``spark`` is one local SparkSession for the whole test session. It is started only when
a test first asks for it, so tests that don't use Spark never start a JVM, and pyspark
is imported only then, so ``reactive_streams`` tests run without it loaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The test session's SparkSession, from ``pyspark_reactive.local_session()``."""
    from pyspark_reactive import local_session

    session = local_session()
    yield session
    session.stop()
