"""The two Python 3.12 venvs of the Databricks Connect tests of one Databricks Connect line,
created or brought up to date.

Run with any Python 3 (``./dev`` uses the main venv's)::

    python tests/databricks/environments.py --python312 /path/to/python3.12 \
        [--line 17|18] [--wheel WHEEL]

Each line (``LINES``) has two venvs:

- the client (``.venv-dbconnect`` for 17, ``.venv-dbconnect18`` for 18), as a Databricks
  Connect user has it: ``databricks-connect`` (newest of the line: 17.3, whose bundled
  pyspark is Spark 4.0; 18.3, Spark 4.1), then the project's wheel installed by pip with its
  normal dependencies (never ``--no-deps``: that pip then installs no OSS ``pyspark`` over
  Databricks Connect's is what is tested), then what the tests import (pytest, and nbclient
  with an ipykernel for the notebook run). All with pip, as a user installs.
- the local OSS Spark Connect server's side (``.venv-dbserver``, ``.venv-dbserver41``): OSS
  ``pyspark[connect]`` of the line's Spark (4.0.x, 4.1.x), ``pandas<3`` and the project. The
  server's Python workers unpickle the client's functions, so this venv has the client's
  Python (3.12) too. It stands for Databricks' side, not for a user's install: uv fills it
  (``tests/peers/venv_install.py``, from its cache first, where pyspark's sdist is kept
  built), and pip where the running interpreter has no uv beside it.

A venv is created anew when its requirements or its interpreter changed (or it no longer
runs); when only the wheel's content changed, the project alone is reinstalled. A stamp file
in each venv records what it holds. Prints the two venvs' interpreters, one a line:
``DBCONNECT_PYTHON=...`` then ``DBSERVER_PYTHON=...``. Exits non-zero with pip's output when
an install fails, and when pip put an OSS ``pyspark`` distribution into the client's venv.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "peers"))

from project_wheel import project_wheel  # noqa: E402 - tests/peers, put on the path just above

STAMP = ".pyspark-reactive-stamp.json"


@dataclass(frozen=True)
class Line:
    """A Databricks Connect line: its client requirement, the OSS Spark line it speaks (the
    local server's), and the two venvs' folder names."""

    client: str
    spark: str
    client_venv: str
    server_venv: str

    @property
    def server_requirements(self) -> list[str]:
        return [f"pyspark[connect]=={self.spark}.*", "pandas>=2.0,<3"]


# Each line's newest release; Python 3.12 only.
LINES = {
    "17": Line("databricks-connect==17.3.*", "4.0", ".venv-dbconnect", ".venv-dbserver"),
    "18": Line("databricks-connect==18.3.*", "4.1", ".venv-dbconnect18", ".venv-dbserver41"),
}
# What the client's tests import besides the project (the notebook run: nbclient, a kernel,
# psutil for its processes, matplotlib for the plots).
CLIENT_TEST_REQUIREMENTS = ["pytest>=8", "pytest-timeout>=2.3", "nbformat>=5.10",
                            "nbclient>=0.10", "ipykernel>=6.29", "psutil>=5.9",
                            "matplotlib>=3.8"]
PIP_TIMEOUT_S = 1200


class EnvironmentError_(RuntimeError):
    """A venv could not be made as asked; the message says why, with pip's output."""


def wheel_digest(wheel: Path) -> str:
    """SHA-256 of the wheel's members (names and bytes), not of the zip file: two builds of
    the same checkout differ in the zip's timestamps but not in what they install."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            digest.update(name.encode() + b"\0")
            digest.update(hashlib.sha256(archive.read(name)).digest())
    return digest.hexdigest()


def run_pip(python: Path, args: list[str], what: str) -> None:
    """``python -m pip install ...``; on failure an error naming ``what`` with pip's output."""
    print(f"environments: {what}", file=sys.stderr, flush=True)
    _run_installer([str(python), "-m", "pip", *args], what, "pip")


def run_uv(python: Path, args: list[str], what: str) -> None:
    """Installs ``args`` into ``python``'s venv with ``tests/peers/venv_install.py`` (uv,
    under pip's settings, from uv's cache first); pip where no uv is beside this interpreter."""
    if not (Path(sys.executable).parent / "uv").is_file():
        run_pip(python, ["install", "--quiet", *args], what)
        return
    print(f"environments: {what} (uv)", file=sys.stderr, flush=True)
    _run_installer([sys.executable, str(ROOT / "tests" / "peers" / "venv_install.py"),
                    str(python), *args], what, "uv")


def _run_installer(command: list[str], what: str, tool: str) -> None:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        raise EnvironmentError_(f"{what}: {tool} did not finish in {PIP_TIMEOUT_S} s "
                                f"({' '.join(command)})") from error
    if result.returncode != 0:
        raise EnvironmentError_(
            f"{what} failed (exit {result.returncode}): {' '.join(command)}\n"
            f"--- {tool}'s output ---\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}")


def interpreter_version(python: Path) -> str:
    result = subprocess.run([str(python), "-c", "import sys; print(sys.version)"],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise EnvironmentError_(f"{python} does not run: {result.stderr.strip()}")
    version = result.stdout.strip()
    if not version.startswith("3.12."):
        raise EnvironmentError_(f"{python} is Python {version.split()[0]}; Databricks Connect "
                                "17 and 18 need Python 3.12 exactly")
    return version


def has_pyspark_distribution(python: Path) -> str | None:
    """The version of an installed ``pyspark`` distribution in that venv (pip's view), or None."""
    probe = ("import importlib.metadata as m\ntry:\n    print(m.version('pyspark'))\n"
             "except m.PackageNotFoundError:\n    pass\n")
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                            timeout=60)
    return result.stdout.strip() or None


def ensure(venv: Path, base_python: Path, base: list[list[str]], wheel: Path,
           wheel_spec: str, extra: list[str], client: bool) -> Path:
    """Bring ``venv`` to hold ``base`` (installs, in order), the project from ``wheel``
    (as ``wheel_spec``) with its dependencies, then ``extra``; return its interpreter. A
    client's venv is filled by pip, as a user's; the server's by uv (``run_uv``)."""
    python = venv / "bin" / "python"

    def install(args: list[str], what: str) -> None:
        if client:
            run_pip(python, ["install", "--quiet", *args], what)
        else:
            run_uv(python, args, what)

    stamp_file = venv / STAMP
    want_base = {"python": interpreter_version(base_python), "base": base, "extra": extra,
                 "wheel_spec": wheel_spec.replace(str(wheel), "WHEEL")}
    want_wheel = wheel_digest(wheel)
    have: dict[str, object] = {}
    if stamp_file.is_file():
        try:
            have = json.loads(stamp_file.read_text())
        except ValueError:
            have = {}
    runs = python.is_file() and subprocess.run(
        [str(python), "-c", ""], capture_output=True, timeout=60).returncode == 0
    fresh = not runs or have.get("base") != want_base
    if fresh:
        if venv.exists():
            print(f"environments: recreating {venv.name} (its requirements or interpreter "
                  "changed)", file=sys.stderr, flush=True)
            shutil.rmtree(venv)
        subprocess.run([str(base_python), "-m", "venv", str(venv)], check=True, timeout=300)
        if client:
            run_pip(python, ["install", "--quiet", "--upgrade", "pip"],
                    f"{venv.name}: pip itself")
        for requirements in base:
            # Compiled at install (pip compiles; venv_install.py asks uv to): where
            # PYTHONDONTWRITEBYTECODE=1 (as on this machine) no import keeps a .pyc, and
            # every Python process, each of Spark's workers among them, compiled pyspark
            # anew (its Connect foreachBatch worker then missed its 10 s to connect back
            # on a loaded machine).
            install(requirements, f"{venv.name}: installing {' '.join(requirements)}")
    elif have.get("wheel") == want_wheel:
        return python
    else:
        stamp_file.unlink()
        run_pip(python, ["uninstall", "--quiet", "--yes", "pyspark-reactive"],
                f"{venv.name}: removing the previous build of the project")
    stamp_file.unlink(missing_ok=True)
    # The project as a user installs it: its normal dependencies, resolved by pip (by uv
    # for the server's venv).
    install([wheel_spec],
            f"{venv.name}: installing the project ({wheel.name}) with its dependencies")
    if extra:
        install(extra, f"{venv.name}: installing what the tests import")
    if client:
        oss = has_pyspark_distribution(python)
        if oss is not None:
            # Databricks Connect's files are overwritten now: the next run starts anew.
            raise EnvironmentError_(
                f"pip installed OSS pyspark {oss} into {venv.name}, over Databricks Connect's "
                "own pyspark: the project (or a test requirement) depends on pyspark. "
                f"The venv is left as it is for a look and is recreated on the next run.")
    stamp_file.write_text(json.dumps({"base": want_base, "wheel": want_wheel}, indent=1))
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python312", required=True, type=Path,
                        help="a Python 3.12 interpreter that runs (not a pyenv shim)")
    parser.add_argument("--wheel", type=Path,
                        help="the project's wheel (default: $PYSPARK_REACTIVE_WHEEL, else "
                             "built from the checkout with python -m build)")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="where the venvs go (default: the checkout)")
    parser.add_argument("--line", choices=sorted(LINES), default="17",
                        help="the Databricks Connect line (default: 17): "
                             + "; ".join(f"{name}: {line.client}, a Spark {line.spark} server"
                                         for name, line in sorted(LINES.items())))
    args = parser.parse_args(argv)
    line = LINES[args.line]
    wheel = (args.wheel or project_wheel()).resolve()
    try:
        if not wheel.is_file():
            raise EnvironmentError_(f"no wheel at {wheel}")
        client = ensure(args.root / line.client_venv, args.python312, [[line.client]],
                        wheel, str(wheel), CLIENT_TEST_REQUIREMENTS, client=True)
        server = ensure(args.root / line.server_venv, args.python312,
                        [line.server_requirements], wheel, str(wheel), [], client=False)
    except EnvironmentError_ as error:
        print(f"environments: error: {error}", file=sys.stderr)
        return 1
    print(f"DBCONNECT_PYTHON={client}")
    print(f"DBSERVER_PYTHON={server}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
