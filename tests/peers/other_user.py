"""Run a piece of Python as another local user (uid 65534, "nobody"): the neighbour on a
shared machine whom the listeners must refuse.

Only where it can really be another uid: as root, with ``setpriv`` (util-linux) and an
interpreter that uid can run. Elsewhere :func:`other_user_reason` says why not, for a
``pytest.skip``; the tests that run as this same user (no credentials presented) cover the
rest.

The script is written to a fresh directory that every user can read (the checkout may be
private), and runs in isolated mode (``-I``) with the standard library only, or with this
environment's packages and ``src/`` on its path (``site_packages=True``; then the
interpreter must be this Python's version). Where the checkout or the venv lies in a folder
other users cannot enter (a clone under ``/root`` or a 0700 home), that uid gets a
world-readable mirror of them instead: hard links where the filesystem allows (no bytes
copied), copies elsewhere, made on first use and removed when this process exits.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

__all__ = ["OTHER_UID", "other_user_reason", "run_as_other_user"]

OTHER_UID = 65534
SRC = Path(__file__).resolve().parents[2] / "src"
_PROBE = ("import json, os, sys; print(json.dumps({'uid': os.getuid(), "
          "'version': list(sys.version_info[:2])}))")
_chosen: dict[bool, tuple[str | None, str | None]] = {}
_mirrors: dict[str, str] = {}


def _setpriv() -> list[str]:
    return [shutil.which("setpriv") or "setpriv", f"--reuid={OTHER_UID}",
            f"--regid={OTHER_UID}", "--clear-groups"]


def _candidates() -> list[str]:
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    found: list[str] = []
    for path in (getattr(sys, "_base_executable", None),
                 os.path.join(sys.base_prefix, "bin", version),
                 shutil.which(version), "/usr/bin/python3", shutil.which("python3")):
        if path and os.path.isfile(path) and os.path.realpath(path) not in found:
            found.append(os.path.realpath(path))
    return found


def _choose(site_packages: bool) -> tuple[str | None, str | None]:
    """(interpreter, None) or (None, why no interpreter serves)."""
    if site_packages in _chosen:
        return _chosen[site_packages]
    tried: list[str] = []
    for python in _candidates():
        try:
            done = subprocess.run([*_setpriv(), python, "-I", "-c", _PROBE],
                                  capture_output=True, text=True, timeout=30, cwd="/",
                                  env={"PATH": os.defpath, "LANG": "C.UTF-8"})
            seen = json.loads(done.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as error:
            tried.append(f"{python}: {type(error).__name__}")
            continue
        same = seen["version"] == list(sys.version_info[:2])
        if seen["uid"] == OTHER_UID and (same or not site_packages):
            _chosen[site_packages] = (python, None)
            return _chosen[site_packages]
        tried.append(f"{python}: Python {seen['version']}")
    _chosen[site_packages] = (None, f"no interpreter uid {OTHER_UID} can run"
                              f"{' at this Python version' if site_packages else ''} "
                              f"({'; '.join(tried) or 'none found'})")
    return _chosen[site_packages]


def other_user_reason(site_packages: bool = False) -> str | None:
    """``None`` when code can run as uid 65534 here, else why not (for ``pytest.skip``)."""
    if not sys.platform.startswith("linux"):
        return "another uid is tried on Linux only (setpriv)"
    if os.geteuid() != 0:
        return "not root: another uid cannot be taken (run the tests as root to include it)"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    return _choose(site_packages)[1]


def _readable_by_others(path: Path) -> bool:
    """Whether every folder down to ``path`` lets other users through."""
    for part in (path, *path.parents):
        if part.exists() and not os.stat(part).st_mode & 0o005:
            return False
    return True


def _link_or_copy(source: str, target: str) -> None:
    # A hard link shares the file's own mode: files others cannot read are copied, and the
    # copy made readable (site-packages holds no secrets; a private checkout may).
    if os.stat(source).st_mode & stat.S_IROTH:
        try:
            os.link(source, target)
            return
        except OSError:  # another filesystem, or links refused (protected_hardlinks)
            pass
    shutil.copy2(source, target)
    os.chmod(target, os.stat(target).st_mode | 0o444)


def _remove_mirrors() -> None:
    for mirror in _mirrors.values():
        shutil.rmtree(os.path.dirname(mirror), ignore_errors=True)
    _mirrors.clear()


def _reachable(path: str) -> str:
    """``path`` if uid 65534 can read it, else a world-readable mirror of it (made once)."""
    if _readable_by_others(Path(path)):
        return path
    if path not in _mirrors:
        if not _mirrors:
            atexit.register(_remove_mirrors)
        holder = tempfile.mkdtemp(prefix="other-user-packages-")
        os.chmod(holder, 0o755)
        mirror = os.path.join(holder, os.path.basename(path))
        # Only .py and data files matter to the other uid: no caches, no venv scripts.
        shutil.copytree(path, mirror, symlinks=True, copy_function=_link_or_copy,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for folder, _, _ in os.walk(mirror):
            os.chmod(folder, 0o755)
        _mirrors[path] = mirror
    return _mirrors[path]


def run_as_other_user(code: str, *args: str, site_packages: bool = False,
                      timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (a script's text) with ``args`` as uid 65534 and return the finished
    process (text stdout and stderr). Call :func:`other_user_reason` first."""
    reason = other_user_reason(site_packages)
    if reason is not None:
        raise RuntimeError(f"cannot run as another user: {reason}")
    python, _ = _choose(site_packages)
    assert python is not None
    folder = Path(tempfile.mkdtemp(prefix="other-user-"))
    try:
        os.chmod(folder, 0o755)
        home = folder / "home"
        home.mkdir()
        os.chmod(home, 0o1777)
        script = folder / "script.py"
        path_lines = ""
        if site_packages:
            paths = [_reachable(p) for p in dict.fromkeys(
                (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                 str(SRC)))]
            path_lines = f"import sys\nsys.path[:0] = {paths!r}\n"
        script.write_text(path_lines + code)
        os.chmod(script, 0o644)
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home),
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        return subprocess.run([*_setpriv(), python, "-I", str(script), *args], env=env,
                              cwd=folder, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
