"""The serverless tests: Databricks Connect (this pytest runs in ``.venv-dbconnect``, as
``tests/databricks`` does) against a local OSS Spark Connect server, with the serverless
guard (``guard/serverless_guard.py``) active in this process and in every Python process
of the server's (the ``foreachBatch`` worker, source runners, Python workers), so that
what Databricks serverless forbids fails here too::

    PYSPARK_REACTIVE_DBSERVER_PYTHON=.venv-dbserver/bin/python \\
        .venv-dbconnect/bin/python -m pytest -p no:cacheprovider tests/serverless

The guard patches pyspark for the whole process: these tests run in a pytest of their own
(mixing them with other folders is refused).

Fixtures for other serverless tests: ``serverless_server`` (the guarded server),
``serverless_remote`` (its ``sc://`` address, token included), ``spark`` (a
``DatabricksSession`` of it), and, under the names ``tests/databricks`` uses,
``connect_server`` and ``databricks_remote``. ``serverless_guard.guarded_environment()``
(``serverless_guard`` is importable in these tests) gives the variables that activate the
guard in a child process (a notebook's kernel, say); ``GUARD_DIR`` is its folder.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
# The guard and its sitecustomize.py.
GUARD_DIR = HERE / "guard"
_HAS_DATABRICKS_CONNECT = importlib.util.find_spec("databricks.connect") is not None
# Not test modules (--doctest-modules would import sitecustomize.py into this process).
collect_ignore = ["guard"]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without Databricks Connect (a plain ``pytest`` in the main venv) these tests are left
    out, unless this folder was named, which is an error saying what to run."""
    if _HAS_DATABRICKS_CONNECT:
        return None
    asked = [(config.invocation_params.dir / arg.split("::")[0]).resolve()
             for arg in config.args]
    if any(path == HERE or HERE in path.parents for path in asked):
        raise pytest.UsageError(
            f"tests/serverless run in the Databricks Connect venv, and {sys.executable} has "
            "no databricks-connect: make the venvs with 'python tests/databricks/"
            "environments.py --python312 PATH', then run '.venv-dbconnect/bin/python -m "
            "pytest tests/serverless' with PYSPARK_REACTIVE_DBSERVER_PYTHON set to the "
            "DBSERVER_PYTHON it prints")
    return True


if _HAS_DATABRICKS_CONNECT:
    for folder in (str(TESTS / "databricks"), str(GUARD_DIR)):
        if folder not in sys.path:
            sys.path.insert(0, folder)

    from local_server import (
        HELPERS,
        LocalConnectServer,
        add_server_log,
        databricks_client_environment,
        server_python,
        serving,
    )

    for folder in HELPERS:
        if folder not in sys.path:
            sys.path.insert(0, folder)

    import serverless_guard
    from databricks.connect import DatabricksSession
    from serverless_guard import guarded_environment  # noqa: F401 - for the tests' use

    # Everything the fixtures need is imported: from here on this process is guarded.
    serverless_guard.activate()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a run that mixes these tests with others: the guard would refuse their
    ``persist()`` and default triggers too."""
    if not any(HERE in item.path.parents for item in items):
        return
    others = sorted({str(item.path.parent) for item in items if HERE not in item.path.parents})
    if others:
        raise pytest.UsageError(
            "tests/serverless activate the serverless guard for the whole pytest process: "
            f"run them in a pytest of their own, not with {', '.join(others)}")


@pytest.fixture(scope="session")
def serverless_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConnectServer]:
    """A local OSS Spark Connect server whose Python processes run with the guard active
    (``PYSPARK_REACTIVE_SERVERLESS_GUARD=1``, the guard's folder and the tests' helper
    folders on their ``PYTHONPATH``), ended at the session's end."""
    logs = tmp_path_factory.mktemp("serverless-server")
    server = LocalConnectServer(server_python(), logs,
                                python_path=[str(GUARD_DIR), *HELPERS],
                                environment={serverless_guard.VARIABLE: "1"})
    with serving(server):
        yield server


@pytest.fixture(scope="session")
def no_databricks_configuration(tmp_path_factory: pytest.TempPathFactory) -> None:
    """This process's Databricks Connect reads no user configuration (see
    ``local_server.databricks_client_environment``)."""
    databricks_client_environment(tmp_path_factory.mktemp("databricks-config"))


@pytest.fixture(scope="session")
def serverless_remote(serverless_server: LocalConnectServer,
                      no_databricks_configuration: None) -> str:
    """The ``sc://`` address of the guarded server, token included."""
    return serverless_server.remote


@pytest.fixture(scope="session")
def connect_server(serverless_server: LocalConnectServer) -> LocalConnectServer:
    """The guarded server, under the name ``tests/databricks`` gives its server."""
    return serverless_server


@pytest.fixture(scope="session")
def databricks_remote(serverless_remote: str) -> str:
    """The guarded server's address, under the name ``tests/databricks`` uses."""
    return serverless_remote


@pytest.fixture(scope="session")
def spark(serverless_remote: str) -> Iterator[Any]:
    """A ``DatabricksSession`` of the guarded server, in this guarded process."""
    session = DatabricksSession.builder.remote(serverless_remote).getOrCreate()
    assert type(session).__module__.startswith("pyspark.sql.connect"), type(session)
    assert serverless_guard.active()
    yield session
    session.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with the Connect server's latest log lines."""
    outcome = yield
    add_server_log(outcome.get_result())
