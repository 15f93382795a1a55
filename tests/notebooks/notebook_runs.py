"""Running the notebooks of ``notebooks/`` headless, top to bottom, as a reader would run
them: each in a kernel of its own (an ipykernel of the interpreter running the tests, named
``KERNEL`` by the ``kernel_spec`` fixture), with parameter values written into its cell
tagged ``parameters`` (by default the small sizes of ``SMALL``). ``tests/notebooks`` runs
them with a classic and a Spark Connect session; ``tests/serverless`` through a
``DatabricksSession`` of its guarded server.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "pyspark-reactive-tests"

# Small enough to run in seconds, big enough for each notebook's story (and checks) to
# hold: several micro-batches, a stop with rows in flight, three phases of the subscriber.
SMALL: dict[str, dict[str, Any]] = {
    "quickstart.ipynb": {"ROWS": 20_000, "MAX_RECORDS_PER_TRIGGER": 5_000},
    "backpressure.ipynb": {"RATE": 2_000, "MAX_RECORDS_PER_TRIGGER": 500,
                           "PHASE_SECONDS": 1.5, "BIN_SECONDS": 0.5},
    "exactly_once.ipynb": {"TOTAL": 5_000, "MAX_RECORDS_PER_TRIGGER": 500,
                           "STOP_AFTER": 1_750},
    "scheduled_job.ipynb": {"ROWS_PER_RUN": 2_000, "MAX_RECORDS_PER_TRIGGER": 1_000},
}
# Generous for a loaded 2-core machine: a cell may start Spark or a whole query run.
CELL_TIMEOUT_S = 300
# Spark's JVM stops its context and workers on its way out after the kernel has gone.
EXIT_WAIT_S = 60
# Kernels running at once (each with its own Spark); NOTEBOOK_TEST_WORKERS overrides.
WORKERS = int(os.environ.get("NOTEBOOK_TEST_WORKERS", "2"))


@pytest.fixture(scope="module")
def kernel_spec(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A kernel spec that runs this interpreter, found through ``JUPYTER_PATH``."""
    data = tmp_path_factory.mktemp("jupyter")
    spec = data / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pyspark-reactive tests", "language": "python"}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", os.pathsep.join(
            [str(data), *filter(None, [os.environ.get("JUPYTER_PATH")])]))
        yield KERNEL


def with_parameters(notebook: Any, values: dict[str, Any]) -> None:
    """Append ``values`` to the notebook's one cell tagged ``parameters``."""
    cells = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged 'parameters', found {len(cells)}"
    unknown = [name for name in values if f"\n{name} = " not in f"\n{cells[0].source}"]
    assert not unknown, f"the parameters cell does not set {unknown}"
    cells[0].source += "\n# sizes of the test run\n" + "\n".join(
        f"{name} = {value!r}" for name, value in values.items())


def kernel_environment(connect: bool, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_REACTIVE_MASTER", "MPLBACKEND", "DATABRICKS_RUNTIME_VERSION",
                        "PYSPARK_REACTIVE_CONNECT")}
    if connect:
        env["PYSPARK_REACTIVE_CONNECT"] = "1"
    env.update(extra or {})
    return env


def run(path: Path, cwd: Path, connect: bool, kernel: str,
        values: dict[str, Any] | None = None, *, environment: dict[str, str] | None = None,
        last_cell: str | None = None) -> Any:
    """Execute the notebook at ``path`` at the small sizes (or with the parameter ``values``
    given); return it with its outputs. ``environment`` is added to the kernel's;
    ``last_cell``, code run after the notebook's own cells, is the last code cell of the
    notebook returned.

    Every process the kernel started must end with it: those still alive
    ``EXIT_WAIT_S`` after the kernel's shutdown are killed (by process id) and reported.
    """
    notebook = nbformat.read(path, as_version=4)
    with_parameters(notebook, SMALL[path.name] if values is None else values)
    if last_cell is not None:
        notebook.cells.append(nbformat.v4.new_code_cell(last_cell))
    client = NotebookClient(notebook, kernel_name=kernel, timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(cwd)}})
    started: dict[int, psutil.Process] = {}

    def note_processes(**_: Any) -> None:
        # After every cell: the kernel's descendants so far (Spark's JVM and its children).
        pid = client.km.provisioner.pid if client.km and client.km.provisioner else None
        if pid is not None:
            try:
                started.update((p.pid, p) for p in psutil.Process(pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass

    client.on_cell_executed = note_processes
    try:
        client.execute(env=kernel_environment(connect, environment))
    finally:
        _, alive = psutil.wait_procs(list(started.values()), timeout=EXIT_WAIT_S)
        for process in alive:
            process.kill()
        assert not alive, ("processes the notebook's kernel started outlived it: "
                           + ", ".join(f"{p.pid} {p.name()}" for p in alive))
    return notebook


def printed(notebook: Any) -> str:
    """Everything the notebook's code cells wrote to stdout and stderr."""
    return "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", []))


def plots_without_picture(notebook: Any) -> list[int]:
    """Indexes of code cells that call ``plt.show()`` but have no PNG among their outputs."""
    return [i for i, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and "plt.show()" in cell.source
            and not any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))]
