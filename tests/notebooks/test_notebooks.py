"""The notebooks in ``notebooks/`` run headless, top to bottom, as a reader would run them.

Each runs in a kernel of its own (an ipykernel of this interpreter, so of the project's
environment), at the small sizes of ``notebook_runs.SMALL`` written into its ``parameters``
cell (the runner is ``notebook_runs.py``, which ``tests/serverless`` uses too), each with
a classic local session, and one also as a Spark Connect client of a local server of the
newest pyspark (``PYSPARK_REACTIVE_CONNECT=1``: ``notebook_session()``'s own way there).
``tests/serverless`` runs every notebook through Spark Connect (Databricks Connect 17's
client, the serverless guard on): the notebooks take no other path under Connect, and
three more Connect runs here cost about 2 minutes of CI's 50. A cell that raises fails
the test; so does a plot cell without its picture, or a process the kernel started
(Spark's JVM, its Python workers) that outlives the kernel. The committed notebooks must
carry the outputs of a real run.

Most of a run is Spark starting up and waiting, so the runs go two at a time: the first
test to need a result starts them all, and each test waits for its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import nbformat
import pytest
from notebook_runs import (  # noqa: F401 - kernel_spec is a fixture, used by name
    NOTEBOOKS,
    SMALL,
    WORKERS,
    kernel_spec,
    plots_without_picture,
    printed,
    run,
)

# (notebook, session) runs: every notebook classic; one through Spark Connect.
RUNS = [*((name, "classic") for name in sorted(SMALL)), ("backpressure.ipynb", "connect")]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Future[Any]]]:
    """The executed notebooks, by (name, session), for the runs this pytest session selected."""
    kernel = request.getfixturevalue("kernel_spec")  # a kernel of this interpreter
    wanted = [(item.callspec.params["name"], item.callspec.params["session"])
              for item in request.session.items
              if getattr(item, "originalname", None) == "test_notebook_runs_top_to_bottom"]
    pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="notebook")
    try:
        yield {(name, session): pool.submit(
                   run, NOTEBOOKS / name, tmp_path_factory.mktemp(f"{name}-{session}"),
                   session == "connect", kernel)
               for name, session in wanted}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # runs under way end with their kernels


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("name", "session"), RUNS, ids=[f"{n}-{s}" for n, s in RUNS])
def test_notebook_runs_top_to_bottom(name: str, session: str,
                                     runs: dict[tuple[str, str], Future[Any]]) -> None:
    notebook = runs[name, session].result()
    assert ("Spark Connect session" if session == "connect" else "classic session") in printed(
        notebook)
    assert not plots_without_picture(notebook), "a plot cell drew nothing"


def test_every_notebook_is_tested() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_committed_notebook_shows_a_real_run(name: str) -> None:
    """On GitHub a reader sees the outputs of a run, plots included, without running it."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "a code cell was not run"
    errors = [out for c in code for out in c.outputs if out.output_type == "error"]
    assert not errors, f"the committed run has errors: {errors}"
    assert not plots_without_picture(notebook), "a plot cell has no picture"
    assert "classic session" in printed(notebook), "the committed run was not a classic one"
    parameters = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1 and "sizes of the test run" not in parameters[0].source


class _Widgets:
    """``dbutils.widgets`` as the install cell uses it (a job's parameters are ``values``)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def text(self, name: str, default: str) -> None:
        self.values.setdefault(name, default)

    def get(self, name: str) -> str:
        return self.values[name]


class _Databricks:
    """What a Databricks notebook gives the install cell: ``dbutils`` (widgets, and
    ``library.restartPython``) and IPython's ``%pip``; each call is noted in ``calls``."""

    def __init__(self, **widgets: str) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.widgets = _Widgets(widgets)
        self.library = self

    def restartPython(self) -> None:  # Databricks names it so
        self.calls.append(("restartPython",))

    def run_line_magic(self, magic: str, line: str) -> None:
        self.calls.append((magic, line))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_install_cell_installs_and_restarts_only_on_databricks(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first code cell (before any state a restart would lose): on Databricks, %pip
    install of the widget PACKAGE, then restartPython(); nothing with PACKAGE empty, and
    nothing at all elsewhere (the notebook runs above show it does not fail in Jupyter)."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    cell = next(c for c in notebook.cells if c.cell_type == "code").source
    assert "PACKAGE" in cell and "restartPython" in cell, "the first code cell installs"

    def run_cell(databricks: _Databricks) -> list[tuple[str, ...]]:
        exec(cell, {"dbutils": databricks, "get_ipython": lambda: databricks})
        return databricks.calls

    wheel = "/Volumes/main/default/wheels/pyspark_reactive-0.2.0-py3-none-any.whl"
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    assert run_cell(_Databricks(PACKAGE=wheel)) == []
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "client.4.9")
    assert run_cell(_Databricks(PACKAGE=wheel)) == [
        ("pip", f"install --quiet {wheel}"), ("restartPython",)]
    assert run_cell(_Databricks()) == []  # the widget made, empty: installed already
