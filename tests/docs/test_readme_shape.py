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


def test_install_runs_from_a_clone_until_a_release_and_names_the_interpreter_trap() -> None:
    install = _section("Install")
    assert "pip install './pyspark-reactive[spark]'" in install
    # The first example starts Spark with local_session(), which puts Spark's Python
    # workers on the interpreter that runs it; the README says what happens otherwise.
    assert "DATA_SOURCE_NOT_FOUND" in install and "local_session()" in install
    first = next(block.source for block in _blocks(README)
                 if 'option("publisher", "range")' in block.source)
    assert "spark = local_session()" in first


def test_every_wheel_name_a_user_types_carries_the_projects_version() -> None:
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(),
                        re.M)
    assert version is not None
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "notebooks").glob("*.ipynb"))]
    stale = {f"{page.relative_to(ROOT)}: {name}" for page in pages
             if "_build" not in page.parts
             for name in re.findall(r"pyspark_reactive-([0-9][^-/\s]*)-py3-none-any\.whl",
                                    page.read_text(encoding="utf-8"))
             if name != version.group(1)}
    assert not stale, f"wheel names with another version than {version.group(1)}: {stale}"
