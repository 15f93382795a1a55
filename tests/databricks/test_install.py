"""The project installed into a Databricks Connect venv with its normal dependencies leaves
Databricks Connect's own pyspark alone: pip sees no ``pyspark``, and every file of
Databricks Connect's ``pyspark/`` is the one it installed.

This process is that venv's interpreter (``.venv-dbconnect`` or ``.venv-dbconnect18``, made
by environments.py).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True,
                          text=True, timeout=300)


def test_pip_sees_no_pyspark_distribution() -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("pyspark")
    shown = pip("show", "pyspark")
    assert shown.returncode != 0, f"pip shows a pyspark distribution:\n{shown.stdout}"
    installed = {d.metadata["Name"].lower() for d in importlib.metadata.distributions()}
    assert {"databricks-connect", "pyspark-reactive"} <= installed, installed


def test_pip_check_is_clean() -> None:
    checked = pip("check")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_databricks_connect_imports_and_the_project_uses_its_pyspark() -> None:
    # In a fresh interpreter, the order a user's script imports them in.
    probe = ("import pyspark_reactive, pyspark\n"
             "from databricks.connect import DatabricksSession\n"
             "print(pyspark.__file__); print(pyspark_reactive.__file__)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    pyspark_file, project_file = (Path(p) for p in result.stdout.split())
    connect = importlib.metadata.distribution("databricks-connect")
    owned = {Path(str(connect.locate_file(f))).resolve() for f in connect.files or []}
    assert pyspark_file.resolve() in owned, f"{pyspark_file} is not Databricks Connect's"
    # The wheel installed into site-packages, not the checkout's src/.
    project = importlib.metadata.distribution("pyspark-reactive")
    assert project_file.resolve() in {Path(str(project.locate_file(f))).resolve()
                                      for f in project.files or []}


def test_no_file_of_databricks_connects_pyspark_was_replaced() -> None:
    connect = importlib.metadata.distribution("databricks-connect")
    files = [f for f in connect.files or [] if f.parts[0] == "pyspark" and f.hash]
    assert len(files) > 400, f"only {len(files)} pyspark files in databricks-connect's RECORD"
    changed = []
    for record in files:
        assert record.hash is not None and record.hash.mode == "sha256"
        data = Path(str(connect.locate_file(record))).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if digest != record.hash.value:
            changed.append(str(record))
    assert not changed, f"{len(changed)} of Databricks Connect's pyspark files changed: " \
                        f"{changed[:10]}"
    # And no other distribution claims a file under pyspark/.
    others = sorted({d.metadata["Name"] for d in importlib.metadata.distributions()
                     if d.metadata["Name"] != "databricks-connect"
                     and any(f.parts[0] == "pyspark" for f in d.files or [])})
    assert not others, f"other distributions install into pyspark/: {others}"
