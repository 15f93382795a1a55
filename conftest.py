"""Every code block of the README and the documentation runs as a test (with Sybil).

The rules, which docs/contributing.md states for writers:

- A ```` ```python ```` block runs, in page order, in one namespace per page (so a page's
  blocks build on each other). Spark blocks get the test session from
  ``SparkSession.builder.getOrCreate()``.
- Output is compared where a block shows it: a comment ``# prints: <line>`` (or
  ``# prints:`` followed by comment lines) after the code states what the block prints;
  all of a block's expectations, in order, must equal what it printed. ``...`` in an
  expectation matches anything (timings, ids, paths), as in doctest's ELLIPSIS, and
  runs of whitespace compare equal. A block that starts with ``>>>`` is a doctest.
- A block that does not run has, on the line right before its fence, the comment
  ``<!-- not run by the tests: <why> -->`` (a shell command, ``%pip``, code that needs a
  Databricks workspace): neither the site nor GitHub shows it, so the code a reader copies
  carries no test marker. Any other block in a language that runs (anything but the data
  formats in ``DATA_LANGUAGES``) fails the tests: ``tests/docs/test_code_blocks.py``
  checks every block of every page.
- Long examples are files in ``docs/examples/`` that pages include; each runs in a
  process of its own (``tests/docs/test_examples.py``) with the same output rules.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    from sybil import Example, Sybil
    from sybil.evaluators.doctest import DocTestEvaluator
    from sybil.parsers.abstract.doctest import DocTestStringParser
    from sybil.parsers.myst import CodeBlockParser
except ImportError:  # the Databricks Connect venvs, which run tests/databricks only
    Sybil = None

ROOT = Path(__file__).parent
NOT_RUN = "<!-- not run by the tests:"
# The comment on the line before a block's fence that says why the block does not run.
_NOT_RUN_COMMENT = re.compile(r"^\s*<!-- not run by the tests:(?P<why>.*?)-->\s*$")
# The marker as it once was, the block's visible first line: refused now.
OLD_NOT_RUN = "# not run by the tests:"
# Blocks in these languages are data or output, never programs: they need no marker.
DATA_LANGUAGES = frozenset({"text", "json", "toml", "yaml", "ini", "conf", "csv", "output",
                            "none"})
_PRINTS = re.compile(r"^\s*# prints:(?: (?P<line>.*))?$")
_CONTINUED = re.compile(r"^\s*#(?: (?P<line>.*))?$")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# The documentation's build files, included examples and extensions are not test modules
# (pytest runs with --doctest-modules, which would import them).
collect_ignore_glob = ["docs/conf.py", "docs/_ext/*", "docs/examples/*", "docs/_build/*"]


def not_run_reason(before: str) -> str | None:
    """Why the block whose fence follows ``before`` (the page's text up to the fence) does
    not run, from the comment on the line before the fence; ``None`` when there is none
    (an empty string when the comment gives no reason)."""
    lines = before.rstrip("\n").rsplit("\n", 1)
    match = _NOT_RUN_COMMENT.match(lines[-1]) if lines else None
    return match.group("why").strip() if match else None


def expected_output(source: str) -> str | None:
    """What a block or example file says it prints, from its ``# prints:`` comments."""
    lines = source.splitlines()
    expected: list[str] = []
    found = False
    index = 0
    while index < len(lines):
        match = _PRINTS.match(lines[index])
        index += 1
        if not match:
            continue
        found = True
        if match.group("line") is not None:
            expected.append(match.group("line"))
            continue
        while index < len(lines) and (more := _CONTINUED.match(lines[index])):
            if _PRINTS.match(lines[index]):
                break
            expected.append(more.group("line") or "")
            index += 1
    return "\n".join(expected) + "\n" if found else None


def check_output(expected: str | None, printed: str, where: str) -> None:
    """Fail, showing both, where ``printed`` does not match the block's expectations."""
    if expected is None:
        return
    if not doctest.OutputChecker().check_output(expected, printed, FLAGS):
        raise AssertionError(f"{where} printed something other than its '# prints:' "
                             f"comments say.\n--- expected ---\n{expected}"
                             f"--- printed ---\n{printed}")


class ExampleParser:
    """Python blocks of Markdown and MyST pages: run, doctested, or marked as not run."""

    def __init__(self) -> None:
        self.blocks = CodeBlockParser(language="python")
        self.doctests = DocTestStringParser(DocTestEvaluator(FLAGS))

    def __call__(self, document: Any) -> Iterator[Any]:
        for region in self.blocks(document):
            source = region.parsed
            if not_run_reason(document.text[:region.start]) is not None:
                continue
            if source.startswith(">>>"):
                for doctest_region in self.doctests(source, document.path):
                    doctest_region.adjust(region, source)
                    yield doctest_region
                continue
            region.evaluator = self.run
            yield region

    @staticmethod
    def run(example: Example) -> None:
        __tracebackhide__ = True
        source = str(example.parsed)
        code = compile("\n" * (example.line + example.parsed.line_offset) + source,
                       example.path, "exec", dont_inherit=True)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, example.namespace)
        example.namespace.pop("__builtins__", None)
        check_output(expected_output(source), printed.getvalue(),
                     f"the block at {Path(example.path).name}:{example.line}")


@pytest.fixture(scope="session")
def docs_spark() -> Iterator[Any]:
    """The session the pages' ``SparkSession.builder.getOrCreate()`` returns.

    The same session as the tests' ``spark`` fixture when both run in one process.
    """
    from pyspark_reactive import local_session

    yield local_session()


def _page_setup(namespace: dict[str, Any]) -> None:
    namespace["__name__"] = "__doc_page__"


if Sybil is not None:
    SYBIL = Sybil(
        parsers=[ExampleParser()],
        # PurePath.match (Python 3.11) takes "**" for one folder: each depth is named.
        patterns=["README.md", "docs/*.md", "docs/*/*.md", "docs/*/*/*.md"],
        # Built, not written: autosummary's stubs and the copied notebooks.
        excludes=["docs/_build/*", "docs/_build/*/*", "docs/_build/*/*/*", "docs/reference/api/*"],
        path=".",
        fixtures=["docs_spark"],
        setup=_page_setup,
    )
    pytest_collect_file = SYBIL.pytest()
else:
    def pytest_collect_file(file_path: Path, parent: Any) -> None:
        # Venvs without Sybil (Databricks Connect's) run only their own folders; pytest
        # still walks the root's files on the way there. A page asked for by name, or
        # through docs/, is an error here rather than a silent pass.
        page = file_path.name == "README.md" or ROOT / "docs" in file_path.parents
        config = parent.config
        asked = [(config.invocation_params.dir / arg.split("::")[0]).resolve()
                 for arg in config.args]
        if page and file_path.suffix == ".md" and any(
                path == file_path or (path != ROOT and path in file_path.parents)
                for path in asked):
            raise pytest.UsageError(f"{file_path.name}'s code blocks run with Sybil, which "
                                    "is not installed here: pip install -e '.[test]'")
