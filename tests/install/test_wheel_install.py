"""The built wheel, installed as a user installs it, into fresh virtual environments of this
interpreter: with no extra (no pyspark: ``reactive_streams`` works, ``import
pyspark_reactive`` says what to install), and beside a pyspark older than 4.0 (a clear
error). The ``spark`` extra is installed as the README says, from a clone
(``test_readme_install.py``); the wheel with its dependencies, by ``tests/databricks``.

Each environment starts empty, so pip resolves the wheel's dependencies as it would for a
user; pip's cache keeps the pyspark packages between runs. (The Databricks Connect case,
which needs Python 3.12, is ``tests/databricks``.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from project_wheel import project_wheel

# Installing pyspark (a 400 MB package) into a new environment takes a while on 2 cores,
# and building it from its sdist the first time (pip then keeps the wheel) much longer.
INSTALL_TIMEOUT_S = 900
pytestmark = pytest.mark.timeout(2 * INSTALL_TIMEOUT_S)


def _fresh_venv(root: Path) -> Path:
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(root)
    return root / "bin" / "python"


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                             "--disable-pip-version-check", *args],
                            capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    assert result.returncode == 0, f"pip install {' '.join(args)} failed:\n{result.stderr}"


def _run(python: Path, code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # The environment's own site-packages only: not this checkout's src/ (PYTHONPATH) nor
    # this venv. JAVA_HOME and PATH stay, for the same Java as ./dev checked.
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON",
                          "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")}
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=python.parent)


def _distributions(python: Path) -> set[str]:
    listed = _run(python, "import importlib.metadata as m\n"
                          "print('\\n'.join(d.metadata['Name'].lower() "
                          "for d in m.distributions()))")
    assert listed.returncode == 0, listed.stderr
    return set(listed.stdout.split())


@pytest.fixture(scope="module")
def wheel() -> Path:
    return project_wheel()


def test_plain_install_brings_no_pyspark(tmp_path: Path, wheel: Path) -> None:
    python = _fresh_venv(tmp_path / "plain")
    _pip(python, str(wheel))
    installed = _distributions(python)
    assert "pyspark-reactive" in installed and "pyarrow" in installed, installed
    assert not {"pyspark", "pyspark-connect", "pyspark-client", "pandas"} & installed, installed

    core = _run(python, "import reactive_streams as rs\n"
                        "print(rs.collect(rs.RangePublisher(0, 4), timeout=5))")
    assert core.returncode == 0, core.stderr
    assert core.stdout.split() == ["[0,", "1,", "2,", "3]"]

    connector = _run(python, "import pyspark_reactive")
    assert connector.returncode != 0
    assert ("ImportError: pyspark_reactive needs PySpark 4.0 or newer, and none can be "
            "imported" in connector.stderr), connector.stderr
    assert "pip install 'pyspark-reactive[spark]'" in connector.stderr


def test_pyspark_older_than_4_is_refused_with_what_to_install(tmp_path: Path,
                                                              wheel: Path) -> None:
    python = _fresh_venv(tmp_path / "old")
    _pip(python, str(wheel), "pyspark==3.5.*")
    version = _run(python, "import pyspark; print(pyspark.__version__)")
    assert version.returncode == 0 and version.stdout.startswith("3.5."), version
    connector = _run(python, "import pyspark_reactive")
    assert connector.returncode != 0
    assert (f"pyspark_reactive needs PySpark 4.0 or newer, and the pyspark imported is "
            f"{version.stdout.strip()}" in connector.stderr), connector.stderr
    for how in ("pip install 'pyspark-reactive[spark]'", "databricks-connect"):
        assert how in connector.stderr, how


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
