"""Installs requirements into one of the checkout's venvs with uv, under pip's own settings.

``./dev`` makes four venvs of the same requirements (``.venv`` and one a Spark line older
than its pyspark). pip took 115 s for one on a quiet 2-core machine and 200 s beside the
tests; uv, which resolves in parallel and links from its cache, takes about 18 s from its
cache (56 s where it must build pyspark's sdist again, as this machine's index makes it do
online). uv comes from pip (``./dev`` puts it in ``.venv`` first), and this runs in
``.venv``::

    .venv/bin/python tests/peers/venv_install.py TARGET_PYTHON REQUIREMENT...

uv does not read pip's configuration, so the settings ``pip config list`` shows (files and
``PIP_*`` variables: an index mirror, extra indexes, find-links, constraints, a CA bundle,
trusted hosts, a timeout) are given to it, with pip's choice among indexes (the best
version of all of them, not the first index's). A pip setting that uv has no counterpart
for is named on standard error. Every module is compiled at install: where
``PYTHONDONTWRITEBYTECODE=1`` no import keeps a ``.pyc``, and every Python process, each of
Spark's workers among them, would compile pyspark, pyarrow and pandas anew.

The venvs of tests/install and the Databricks Connect clients' are made with pip instead:
they stand for what a user's ``pip install`` gives. The Databricks servers' venvs are made
with this (``tests/databricks/environments.py``).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

# pip's option -> uv's option, for settings that may hold several values.
_LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links",
          "constraint": "--constraint", "trusted-host": "--allow-insecure-host"}
# pip's settings that change nothing about what gets installed, or that uv does already.
_IGNORED = {"disable-pip-version-check", "quiet", "verbose", "progress-bar", "no-color",
            "no-input", "retries", "root-user-action", "no-warn-script-location", "cache-dir",
            "no-cache-dir", "compile", "no-compile", "require-virtualenv", "break-system-packages",
            "config-file"}
# pip's sections, lowest precedence first (pip's own order).
_SECTIONS = ("global", "install", ":env:")


def pip_settings(config_list: str) -> dict[str, str]:
    """pip's effective settings from the output of ``pip config list``
    (``section.name=<the value's Python repr>`` a line; a multi-line value such as several
    extra indexes holds ``\n``); a later section wins over an earlier one."""
    found: dict[str, dict[str, str]] = {}
    for line in config_list.splitlines():
        key, sep, value = line.partition("=")
        section, dot, name = key.rpartition(".")
        if not sep or not dot or section not in _SECTIONS:
            continue
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value  # not a repr after all: taken as it is
        found.setdefault(section, {})[name] = str(parsed)
    merged: dict[str, str] = {}
    for section in _SECTIONS:
        merged.update(found.get(section, {}))
    return merged


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """uv's options and environment for pip's ``settings``, and the names of those left out."""
    options = ["--index-strategy", "unsafe-best-match"]
    environment: dict[str, str] = {}
    left_out: list[str] = []
    for name, value in settings.items():
        if name == "index-url":
            options += ["--index-url", value]
        elif name in _LISTS:
            options += [part for item in value.split() for part in (_LISTS[name], item)]
        elif name == "no-index" and value.lower() in ("1", "true", "yes", "on"):
            options.append("--no-index")
        elif name == "cert":
            environment["SSL_CERT_FILE"] = value
        elif name == "client-cert":
            environment["SSL_CLIENT_CERT"] = value
        elif name in ("timeout", "default-timeout"):
            environment["UV_HTTP_TIMEOUT"] = value
        elif name not in _IGNORED:
            left_out.append(name)
    return options, environment, left_out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: venv_install.py TARGET_PYTHON REQUIREMENT...", file=sys.stderr)
        return 2
    target, requirements = argv[0], argv[1:]
    uv = Path(sys.executable).parent / "uv"
    if not uv.is_file():
        print(f"venv_install: no uv beside {sys.executable} (./dev installs it with pip)",
              file=sys.stderr)
        return 1
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True)
    if listing.returncode != 0:
        print(f"venv_install: 'pip config list' failed, so pip's settings cannot be given "
              f"to uv:\n{listing.stderr}", file=sys.stderr)
        return listing.returncode
    listed = listing.stdout
    options, environment, left_out = uv_options(pip_settings(listed))
    for name in left_out:
        print(f"venv_install: pip's setting {name!r} has no counterpart in uv; left out",
              file=sys.stderr)
    command = [str(uv), "pip", "install", "--quiet", "--python", target, "--compile-bytecode",
               *options, *requirements]
    env = {**os.environ, **environment}
    # From uv's cache first: an index that answers every revalidation as modified (this
    # machine's does) makes uv fetch pyspark's sdist and build it again at each install,
    # 38 of a venv's 56 s. Offline, uv takes the index pages, downloads and builds it kept
    # (stale or not); a requirement they cannot satisfy is resolved online, as before. The
    # venv keeps what it got until pyproject.toml changes, online or not.
    cached = subprocess.run([*command[:3], "--offline", *command[3:]], env=env,
                            capture_output=True, text=True)
    if cached.returncode == 0:
        return 0
    installed = subprocess.run(command, env=env).returncode
    if installed == 0:
        # pyspark is an sdist only, and uv builds it anew at each install here (the index
        # does not let it keep the download it made), keeping each build of 0.9 GB: 42 GB
        # after a day of runs filled this machine's disk. Prune removes what the cache
        # itself no longer refers to (the older builds); it does not look at venvs.
        subprocess.run([str(uv), "cache", "prune", "--quiet"],
                       env={**os.environ, **environment}, timeout=600)
    return installed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
