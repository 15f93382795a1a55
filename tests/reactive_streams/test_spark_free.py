"""``reactive_streams`` must import, and work, where pyspark is not installed."""

from __future__ import annotations

import ast
import subprocess
import venv
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "reactive_streams"


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with nothing installed (not even pip)."""
    root = tmp_path_factory.mktemp("bare-venv")
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(root)
    return root / "bin" / "python"


def _run(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})


def test_the_bare_environment_really_lacks_pyspark(bare_python: Path) -> None:
    result = _run(bare_python, "import pyspark")
    assert result.returncode != 0 and "No module named 'pyspark'" in result.stderr


def test_imports_and_runs_without_pyspark(bare_python: Path) -> None:
    result = _run(bare_python, (
        "import sys, reactive_streams as rs\n"
        "assert rs.collect(rs.RangePublisher(0, 3), timeout=5) == [0, 1, 2]\n"
        "assert not any(m.split('.')[0] in ('pyspark', 'pyarrow', 'pandas') "
        "for m in sys.modules)\n"
        "print('ok')\n"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_no_module_of_the_package_imports_spark() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names
                          if n.split(".")[0] in ("pyspark", "pyspark_reactive")]
    assert offenders == []


def test_ships_py_typed() -> None:
    assert (PACKAGE / "py.typed").is_file()


def test_the_connector_without_pyspark_says_what_to_install(bare_python: Path) -> None:
    # pyspark is not a dependency (Databricks carries its own): the import says what to do.
    result = _run(bare_python, "import pyspark_reactive")
    assert result.returncode != 0
    error = next((line for line in result.stderr.splitlines()
                  if line.startswith("ImportError")), "")
    assert error.startswith("ImportError: pyspark_reactive needs PySpark 4.0 or newer, and "
                            "none can be imported (No module named 'pyspark')"), result.stderr
    for how in ("pip install 'pyspark-reactive[spark]'", "databricks-connect",
                "%pip install pyspark-reactive", "reactive_streams"):
        assert how in result.stderr, how
