"""The README's install section, run as written: its OSS lines in a fresh venv made by its
own first line, from a folder that holds a clone named ``pyspark-reactive``; then the
README's first example, once with the venv activated and once with the venv's python run
by its path and the venv not on ``PATH`` (as an IDE, cron or a job runner does)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 900
pytestmark = pytest.mark.timeout(3 * INSTALL_TIMEOUT_S)
# What a user's shell has: not this checkout's src/, nor this venv, nor Spark's settings.
NOT_INHERITED = ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                 "SPARK_HOME", "PYTHONHOME")


def _blocks(language: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def _install_lines() -> list[str]:
    """The install block's venv line and its OSS pip lines (Spark, Spark Connect), before
    the PyPI form and without Databricks Connect's (tests/databricks installs that)."""
    block = next(b for b in _blocks("sh") if "./pyspark-reactive[spark]" in b)
    lines = []
    for line in block.splitlines():
        if line.startswith("#") and "after the first release" in line:
            break
        if line and not line.startswith("#") and "databricks-connect" not in line:
            lines.append(line)
    return lines


def _clone(into: Path) -> Path:
    """The checkout's files as git tracks them (a clone has no others), at ``into``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def test_the_readme_install_lines_and_first_example_run_as_written(tmp_path: Path) -> None:
    lines = _install_lines()
    assert lines[0].startswith("python3 -m venv .venv"), lines
    assert "pip install './pyspark-reactive[spark]'" in lines, lines
    assert "pip install './pyspark-reactive[connect]'" in lines, lines
    _clone(tmp_path / "pyspark-reactive")
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    script = "set -e\n" + "\n".join(lines) + "\n"
    installed = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    assert installed.returncode == 0, (script, installed.stderr[-4000:])

    example = next(b for b in _blocks("python") if 'option("publisher", "range")' in b)
    printed = re.search(r"^# prints: (.*)$", example, flags=re.M)
    assert printed is not None, "the first example says what it prints"
    (tmp_path / "first.py").write_text(example, encoding="utf-8")
    venv_bin = tmp_path / ".venv" / "bin"
    activated = subprocess.run(["bash", "-c", ". .venv/bin/activate && python first.py"],
                               cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=600)
    assert activated.returncode == 0, activated.stderr[-4000:]
    assert activated.stdout.split() == printed.group(1).split(), activated.stdout
    # Not activated: the venv's python by its path, the venv's bin not on PATH.
    path = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                           if Path(p) != venv_bin)
    direct = subprocess.run([str(venv_bin / "python"), "first.py"], cwd=tmp_path,
                            env={**env, "PATH": path}, capture_output=True, text=True,
                            timeout=600)
    assert direct.returncode == 0, direct.stderr[-4000:]
    assert direct.stdout.split() == printed.group(1).split(), direct.stdout
