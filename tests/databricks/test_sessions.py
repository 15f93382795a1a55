"""The session helpers under Databricks Connect: ``local_session()`` and
``local_connect_session()`` refuse at once, saying what to use; ``notebook_session()``
builds a ``DatabricksSession`` (here of the local server). The notebooks themselves run
through a ``DatabricksSession`` in ``tests/serverless/test_notebooks.py``, against the
guarded server."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psutil
import pyspark
import pytest

from pyspark_reactive.session import (
    LocalSessionUnavailable,
    local_connect_session,
    local_session,
    notebook_session,
)


@pytest.mark.parametrize("helper", [local_session, local_connect_session],
                         ids=["local_session", "local_connect_session"])
def test_local_helpers_refuse_at_once_saying_what_to_use(
        helper: Callable[[], Any]) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    started = time.monotonic()
    with pytest.raises(LocalSessionUnavailable) as raised:
        helper()
    assert time.monotonic() - started < 5.0
    assert isinstance(raised.value, RuntimeError)
    message = str(raised.value)
    assert f"{helper.__name__}()" in message
    assert "Databricks Connect" in message and "only remote sessions" in message
    for advice in ("DatabricksSession.builder.getOrCreate()",
                   "DatabricksSession.builder.remote(...)", "the `spark` it defines",
                   "pyspark-reactive[spark]"):
        assert advice in message, advice
    # Nothing was started on the way (no JVM, no Python worker).
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_notebook_session_is_a_databricks_session_of_the_remote(databricks_remote: str) -> None:
    from databricks.connect import DatabricksSession

    session = notebook_session(databricks_remote)
    built = DatabricksSession.builder.remote(databricks_remote).getOrCreate()
    # The address carries the server's token: the message names the sessions only.
    assert session is built, (f"notebook_session(REMOTE) made {type(session).__name__} "
                              f"{id(session):#x}, not the DatabricksSession of that address "
                              f"({type(built).__name__} {id(built):#x})")
    assert type(session).__module__.startswith("pyspark.sql.connect")
    # The server's Spark line is the one this Databricks Connect bundles (17: 4.0, 18: 4.1).
    line = ".".join(pyspark.__version__.split(".")[:2])
    assert session.version.startswith(f"{line}."), (session.version, pyspark.__version__)
    assert session.range(7).count() == 7


@pytest.mark.usefixtures("no_databricks_configuration")
def test_notebook_session_without_remote_reads_the_databricks_configuration() -> None:
    # The fixture pointed the SDK at a configuration file that does not exist: the error is
    # the Databricks SDK's own, naming that file, not a local Spark starting.
    with pytest.raises(ValueError, match="(?s)default auth: cannot configure default "
                       "credentials.*config_file=.*no-databrickscfg"):
        notebook_session()
