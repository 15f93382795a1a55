"""Every example file in ``docs/examples/`` runs as a reader runs it, and prints what it says.

Each file runs as ``python <file>`` in a process of its own (a Spark of its own, where it
starts one), from an empty temporary directory, and its standard output is compared with
its ``# prints:`` comments by the root ``conftest.py``'s rules (``...`` matches anything,
runs of whitespace compare equal). A page shows a file with ``{literalinclude}``; a file
that no page includes is an error, as is one that says nothing about what it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_code_blocks import DOCS, PAGES, ROOT

EXAMPLES_DIR = ROOT / "docs" / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.py"))
# A JVM start, a Spark Connect server and a few queries, on a loaded 2-core machine.
TIMEOUT_S = 240
# Left by the test session, not by a reader's shell: the tests' own module path, and the
# Connect mode a local Connect server puts its process in.
NOT_INHERITED = ("PYTHONPATH", "SPARK_CONNECT_MODE_ENABLED", "SPARK_CONNECT_AUTHENTICATE_TOKEN",
                 "PYSPARK_SUBMIT_ARGS")
_INCLUDE = re.compile(r"^[`:]{3,}\{literalinclude\}\s+(?P<path>\S+)\s*$", re.M)


@pytest.fixture(scope="module")
def rules() -> Any:
    """The root conftest.py, which holds the rules of '# prints:' comments."""
    return DOCS


def _included() -> dict[Path, list[str]]:
    """Each file a page includes with ``{literalinclude}``, and the pages that do."""
    found: dict[Path, list[str]] = {}
    for page in PAGES:
        for match in _INCLUDE.finditer(page.read_text(encoding="utf-8")):
            path = (page.parent / match["path"]).resolve()
            found.setdefault(path, []).append(str(page.relative_to(ROOT)))
    return found


def test_there_are_examples() -> None:
    assert EXAMPLES, f"no example files in {EXAMPLES_DIR}"


def test_every_example_is_included_by_a_page() -> None:
    included = _included()
    missing = [example.name for example in EXAMPLES if example.resolve() not in included]
    assert not missing, (f"docs/examples files no page includes with {{literalinclude}}: "
                         f"{', '.join(missing)}")


def test_every_included_example_exists() -> None:
    gone = [f"{', '.join(pages)} -> {path}" for path, pages in _included().items()
            if EXAMPLES_DIR in path.parents and not path.is_file()]
    assert not gone, "pages include example files that do not exist:\n" + "\n".join(gone)


@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_prints_what_it_says(example: Path, tmp_path: Path, rules: Any) -> None:
    source = example.read_text(encoding="utf-8")
    expected = rules.expected_output(source)
    assert expected is not None, (f"docs/examples/{example.name} has no '# prints:' comment: "
                                  "say what it prints, so that this test can check it")
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    result = subprocess.run([sys.executable, str(example)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, (
        f"python docs/examples/{example.name} exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}--- stderr (the end) ---\n{result.stderr[-6000:]}")
    rules.check_output(expected, result.stdout, f"docs/examples/{example.name}")
    # No Connect token in what it printed, Spark's own Python workers' lines included
    # (connect_publish.py: the foreachBatch worker prints the URL it dials back).
    printed = result.stdout + result.stderr
    assert not re.search(r"token=(?!<redacted>)[^;\s]+", printed), (
        f"python docs/examples/{example.name} printed a Spark Connect token")
