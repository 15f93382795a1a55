"""Fixtures shared by the whole test suite.

``spark`` is one local SparkSession for the whole test session. It is started only when
a test first asks for it, so tests that don't use Spark never start a JVM, and pyspark
is imported only then, so ``reactive_streams`` tests run without it loaded.

Tests that need a session of another kind live in folders of their own and run in pytest
processes of their own, because one process hosts one SparkContext: ``tests/connect``
(a Spark Connect client of a local server), ``tests/cluster`` (a standalone cluster on
127.0.0.1), ``tests/notebooks`` (kernels, each with a Spark of its own), ``tests/crash``
(child processes killed with SIGKILL, each with a Spark of its own) and ``tests/soak``
(two minutes of the whole pipeline, on a Spark whose JVM holds its heap from the start).
``tests/site`` (the documentation site built and opened in Chromium) needs no session of
its own but runs in ``./dev test``'s second lane, beside the main pytest.
``./dev test`` runs each; a plain ``pytest`` leaves them out unless the folder (or a file
in it) is named on the command line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


SEPARATE_SESSIONS = ("connect", "cluster", "notebooks", "crash", "soak", "databricks", "serverless",
                     "install", "site", "brokers")

# Real network peers the adapters are tested against (a broker, servers), started by the
# tests on 127.0.0.1: importable from every test folder as ``import <module>``.
PEERS = str(Path(__file__).parent / "peers")
if PEERS not in sys.path:
    sys.path.insert(0, PEERS)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    here = Path(__file__).parent
    asked = [(config.invocation_params.dir / arg.split("::")[0]).resolve()
             for arg in config.args]
    for name in SEPARATE_SESSIONS:
        folder = here / name
        if collection_path == folder or folder in collection_path.parents:
            if not any(path == folder or folder in path.parents for path in asked):
                return True
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The test session's SparkSession, from ``pyspark_reactive.local_session()``."""
    from connector_tests import FOLDERS

    from pyspark_reactive import local_session

    # Spark's Python processes (source runners, workers) inherit the JVM's environment:
    # this puts the source tests' publishers (spark_publishers.py), and the test modules
    # whose functions travel to them by reference, on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (*FOLDERS, PEERS, os.environ.get("PYTHONPATH")) if p)
    session = local_session()
    yield session
    session.stop()
