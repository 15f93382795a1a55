"""The Databricks Connect tests: this pytest runs in a client venv (Python 3.12,
``databricks-connect`` 17.3 in ``.venv-dbconnect`` or 18.3 in ``.venv-dbconnect18``, and
the project's wheel, made by ``environments.py --line 17|18``), and its ``spark`` is a
``DatabricksSession`` of a local OSS Spark Connect server of the same Spark line (4.0 or
4.1), started as a process of its own from the server venv (``.venv-dbserver``,
``.venv-dbserver41``), whose interpreter ``$PYSPARK_REACTIVE_DBSERVER_PYTHON`` names (see
``local_server.py``)::

    python tests/databricks/environments.py --python312 PATH --line 18  # prints both pythons
    PYSPARK_REACTIVE_DBSERVER_PYTHON=$PWD/.venv-dbserver41/bin/python \\
        .venv-dbconnect18/bin/python -m pytest tests/databricks

The fixtures are meant for reuse (the serverless tests): ``connect_server`` (the running
server), ``databricks_remote`` (its ``sc://`` address with the token),
``no_databricks_configuration`` and ``spark``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("databricks.connect") is None:
    raise pytest.UsageError(
        f"tests/databricks run in the Databricks Connect venv, and {sys.executable} has no "
        "databricks-connect: make the venvs with 'python tests/databricks/environments.py "
        "--python312 PATH', then run '.venv-dbconnect/bin/python -m pytest tests/databricks' "
        "with PYSPARK_REACTIVE_DBSERVER_PYTHON set to the DBSERVER_PYTHON it prints")

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from local_server import (  # noqa: E402
    HELPERS,
    LocalConnectServer,
    add_server_log,
    databricks_client_environment,
    server_python,
    serving,
)

# Helpers of the other test folders that these tests import (see local_server.HELPERS).
for folder in HELPERS:
    if folder not in sys.path:
        sys.path.insert(0, folder)


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConnectServer]:
    """A local OSS Spark Connect server (its own process), ended at the session's end."""
    logs = tmp_path_factory.mktemp("connect-server")
    with serving(LocalConnectServer(server_python(), logs, python_path=HELPERS)) as server:
        yield server


@pytest.fixture(scope="session")
def no_databricks_configuration(tmp_path_factory: pytest.TempPathFactory) -> None:
    """This process's Databricks Connect reads no user configuration (see
    :func:`databricks_client_environment`)."""
    databricks_client_environment(tmp_path_factory.mktemp("databricks-config"))


@pytest.fixture(scope="session")
def databricks_remote(connect_server: LocalConnectServer,
                      no_databricks_configuration: None) -> str:
    """The ``sc://`` address of the server, token included, for ``DatabricksSession``."""
    return connect_server.remote


@pytest.fixture(scope="session")
def spark(databricks_remote: str) -> Iterator[Any]:
    """A ``DatabricksSession`` of the local server, as a Databricks Connect user builds one."""
    from databricks.connect import DatabricksSession

    session = DatabricksSession.builder.remote(databricks_remote).getOrCreate()
    assert type(session).__module__.startswith("pyspark.sql.connect"), type(session)
    yield session
    session.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with the Connect server's latest log lines."""
    outcome = yield
    add_server_log(outcome.get_result())
