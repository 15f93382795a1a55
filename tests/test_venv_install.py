"""tests/peers/venv_install.py, with which ./dev fills its venvs: pip's settings reach uv.

./dev runs it on every fresh clone (the venvs of every test group come from it); these
check the translation of pip's settings on the output of ``pip config list``, including
this machine's own."""

from __future__ import annotations

import subprocess
import sys

from venv_install import pip_settings, uv_options

LISTED = """\
global.index-url='https://mirror.example/simple'
global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'
global.find-links='/opt/wheels'
global.trusted-host='\\nmirror.example\\nother.example'
download.dest='/tmp/x'
global.timeout='30'
install.constraint='/etc/pip/constraints.txt'
:env:.index-url='https://env-mirror.example/simple'
:env:.cert='/etc/ssl/ca.pem'
:env:.disable-pip-version-check='1'
:env:.use-feature='truststore'
"""


def test_the_environment_wins_over_files_and_every_value_of_a_list_goes_to_uv() -> None:
    settings = pip_settings(LISTED)
    assert settings["index-url"] == "https://env-mirror.example/simple"
    options, environment, left_out = uv_options(settings)
    assert options[:2] == ["--index-strategy", "unsafe-best-match"]
    pairs = list(zip(options[2::2], options[3::2], strict=True))
    assert ("--index-url", "https://env-mirror.example/simple") in pairs
    assert [v for k, v in pairs if k == "--extra-index-url"] == [
        "file:///opt/a/simple", "file:///opt/b/simple"]
    assert ("--find-links", "/opt/wheels") in pairs
    # A multi-line value (pip's form for several): each line an option of its own.
    assert [v for k, v in pairs if k == "--allow-insecure-host"] == [
        "mirror.example", "other.example"]
    assert "dest" not in settings  # download's own section is not install's
    assert ("--constraint", "/etc/pip/constraints.txt") in pairs
    assert environment == {"SSL_CERT_FILE": "/etc/ssl/ca.pem", "UV_HTTP_TIMEOUT": "30"}
    assert left_out == ["use-feature"]  # named on stderr; disable-pip-version-check is not


def test_every_install_setting_of_this_machines_pip_is_read_with_its_value() -> None:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True, check=True).stdout
    settings = pip_settings(listed)
    for line in listed.splitlines():
        key = line.partition("=")[0]
        section, _, name = key.rpartition(".")
        if section in ("global", "install", ":env:"):
            assert name in settings, line
            assert "'" not in settings[name] and "\\n" not in settings[name], settings[name]
