"""The project's wheel, as ``python -m build`` makes it from this checkout (an sdist first,
then the wheel from the sdist, so a file the sdist leaves out is missed here too), for the
tests that install the package as a user would (tests/install, tests/databricks). Named
``project_wheel``, not ``wheel``, so it never shadows the ``wheel`` package.

``./dev test`` builds it once per run and names it in ``PYSPARK_REACTIVE_WHEEL``; run
alone, a test builds it here (into ``build/wheel/`` of the checkout) on first use.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEEL_VARIABLE = "PYSPARK_REACTIVE_WHEEL"


def build_wheel(outdir: Path | None = None) -> Path:
    """Build the checkout's sdist and, from it, its wheel (``python -m build``); return the
    wheel's path."""
    outdir = outdir or ROOT / "build" / "wheel"
    outdir.mkdir(parents=True, exist_ok=True)
    for old in [*outdir.glob("pyspark_reactive-*.whl"), *outdir.glob("pyspark_reactive-*.tar.gz")]:
        old.unlink()
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(outdir), str(ROOT)],
        capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"python -m build failed:\n{result.stdout}\n{result.stderr}")
    wheels = sorted(outdir.glob("pyspark_reactive-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel in {outdir}, found {wheels}")
    return wheels[0]


def project_wheel() -> Path:
    """The wheel ``./dev test`` built (``$PYSPARK_REACTIVE_WHEEL``), else a new build."""
    named = os.environ.get(WHEEL_VARIABLE)
    if named:
        path = Path(named)
        if not path.is_file():
            raise FileNotFoundError(f"{WHEEL_VARIABLE} names {path}, which is not a file")
        return path
    path = build_wheel()
    os.environ[WHEEL_VARIABLE] = str(path)
    return path


if __name__ == "__main__":  # ./dev test: build once, print the path
    print(build_wheel())
