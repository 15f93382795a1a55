"""The README is a landing page: short, the user's install on its first screen, and a
Quick start of exactly the project's two commands (docs/contributing.md says the rest)."""

from __future__ import annotations

import re

from test_code_blocks import ROOT, _blocks

README = (ROOT / "README.md").read_text(encoding="utf-8")
LINES = README.splitlines()
FIRST_SCREEN = 60  # lines


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"the README has no '## {title}' section"
    return match.group(1)


def test_the_readme_is_a_landing_page() -> None:
    assert len(LINES) <= 250, f"README.md has {len(LINES)} lines; at most 250"


def test_install_is_on_the_first_screen() -> None:
    assert "## Install" in LINES[:FIRST_SCREEN]
    assert "pip install 'pyspark-reactive[spark]'" in _section("Install")


def test_quick_start_is_the_two_commands() -> None:
    [block] = list(_blocks(_section("Quick start")))
    commands = [line for line in block.source.splitlines() if not line.startswith("#")]
    assert commands == ["./dev demo", "./dev test"]
