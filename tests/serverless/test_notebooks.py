"""Every notebook in ``notebooks/`` runs headless, top to bottom, through a
``DatabricksSession`` of the guarded local server (``conftest.py``): its ``REMOTE``
parameter is the server's address, its sizes those of ``tests/notebooks``
(``notebook_runs.SMALL``), and ``notebook_runs.run`` runs it. The notebook's kernel (this
venv's interpreter, Databricks Connect's pyspark) runs with the guard active too
(``guarded_environment()``), as do the server's Python processes, so a cell that uses
what Databricks serverless forbids (a global temporary view, ``cache``/``persist``, the
JVM, a trigger other than ``availableNow``) fails the run. A plot cell without its
picture fails it too, as does a process the kernel started that outlives it.

Most of a run is waiting for Spark, so the runs go two at a time (``NOTEBOOK_TEST_WORKERS``
overrides), all against the one server: the first test to need a result starts them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from local_server import LocalConnectServer
from notebook_runs import (  # noqa: F401 - kernel_spec is a fixture, used by name
    NOTEBOOKS,
    SMALL,
    WORKERS,
    kernel_spec,
    plots_without_picture,
    printed,
    run,
)
from serverless_guard import guarded_environment

# Run after the notebook's own cells, in its kernel: whether the guard was active there.
GUARD_CHECK = ("import serverless_guard\n"
               "print(f'serverless guard active in the kernel: {serverless_guard.active()}')")


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, serverless_remote: str,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Any]]]:
    """The executed notebooks, by name, for the runs this pytest session selected."""
    kernel = request.getfixturevalue("kernel_spec")  # a kernel of this interpreter
    wanted = [item.callspec.params["name"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_notebook_runs_on_serverless"]
    pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="notebook")
    try:
        yield {name: pool.submit(run, NOTEBOOKS / name, tmp_path_factory.mktemp(name), False,
                                 kernel, {**SMALL[name], "REMOTE": serverless_remote},
                                 environment=guarded_environment(), last_cell=GUARD_CHECK)
               for name in wanted}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # runs under way end with their kernels


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_runs_on_serverless(name: str, runs: dict[str, Future[Any]],
                                     serverless_server: LocalConnectServer) -> None:
    notebook = runs[name].result()
    text = printed(notebook)
    assert f"Spark {serverless_server.version}, Spark Connect session" in text, text[:2000]
    assert "serverless guard active in the kernel: True" in text, text[-2000:]
    assert not plots_without_picture(notebook), "a plot cell drew nothing"
