"""Every option the README and the docs name is one the code accepts.

Options are read from the code blocks and example files (``.option("name", ...)``,
``.options(name=...)``, ``read_stream(..., name=...)``, found with ``ast``) and from the
prose and tables (a backticked name that is close to an option's but not one is taken for
a misspelling of it). What is accepted comes from the declarative definitions the code
validates with: the source's ``SOURCE_OPTION_SPECS`` and each built-in publisher's
``option_specs``; plus the few options of Spark's own readers and writers the pages use,
and the options a page's own factory reads. Names compare case-insensitively, as Spark's
options do. A page that shows a misspelt name on purpose (to show the warning it gets)
lists it in a comment line, ``% misspelt on purpose: maxRecordPerTrigger`` in MyST or
``<!-- misspelt on purpose: ... -->`` in the README. The reference's generated tables
must list every accepted option: ``tests/site/test_site.py`` checks the built pages.
"""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import pytest
import test_code_blocks as blocks

from pyspark_reactive.source import options as source_options

ROOT = blocks.ROOT
# Options of Spark's own readers and writers (not this source's) that the pages use.
SPARK_OPTIONS = frozenset({"checkpointLocation", "path", "mergeSchema", "header",
                           "truncate", "numRows"})
# How close (difflib's ratio of the lower-cased names) a backticked name must be to an
# option to be taken for a misspelling of it.
MISSPELT = 0.85
_BACKTICKED = re.compile(r"`([A-Za-z][A-Za-z0-9]*)`")
_CAMEL = re.compile(r"^[a-z]+[A-Z][A-Za-z0-9]*$")
_ON_PURPOSE = re.compile(r"^(?:%|<!--)\s*misspelt on purpose:\s*(.*?)\s*(?:-->)?\s*$", re.M)
_FACTORY_READS = re.compile(r"""(?:options|lower)(?:\.get\(|\[)\s*["']([A-Za-z]\w*)["']""")


def accepted() -> dict[str, set[str]]:
    """Where each accepted option comes from, by name."""
    where: dict[str, set[str]] = {}
    for spec in source_options.SOURCE_OPTION_SPECS:
        where.setdefault(spec.name, set()).add("source")
    for name in source_options.BUILTIN_PUBLISHERS:
        factory = source_options.resolve_factory(name)
        for spec in factory.option_specs:  # type: ignore[attr-defined]
            where.setdefault(spec.name, set()).add(name)
    for name in SPARK_OPTIONS:
        where.setdefault(name, set()).add("Spark")
    return where


ACCEPTED = accepted()
ACCEPTED_LOWER = {name.lower(): name for name in ACCEPTED}
SOURCES = [*blocks.PAGES, *sorted((ROOT / "docs" / "examples").glob("*.py"))]


def _code_of(path: Path) -> list[tuple[int, str]]:
    if path.suffix == ".py":
        return [(1, path.read_text(encoding="utf-8"))]
    return [(b.line, b.source) for b in blocks._blocks(path.read_text(encoding="utf-8"))
            if b.language in ("python", "py")]


def on_purpose(text: str) -> set[str]:
    """The names a page says it misspells on purpose."""
    return {name.strip() for found in _ON_PURPOSE.findall(text)
            for name in found.split(",") if name.strip()}


def options_in_code(source: str) -> list[str]:
    """Options a piece of Python passes to readers: .option, .options, read_stream."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:  # doctest blocks and fragments: fall back on the calls' text
        return re.findall(r"""\.option\(\s*["']([^"']+)["']""", source)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else \
            func.id if isinstance(func, ast.Name) else ""
        if name == "option" and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            found.append(node.args[0].value)
        elif name == "options" or name == "read_stream":
            found += [k.arg for k in node.keywords if k.arg is not None]
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_options_a_page_uses_are_accepted(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    own = set(_FACTORY_READS.findall(text))  # read by a factory the page defines
    own |= on_purpose(text)
    problems = []
    for line, code in _code_of(path):
        for name in options_in_code(code):
            if name.lower() in ACCEPTED_LOWER or name in own:
                continue
            close = difflib.get_close_matches(name, ACCEPTED, n=1, cutoff=0.6)
            problems.append(f"block at line {line}: option {name!r} is accepted by nothing"
                            + (f" (did you mean {close[0]!r}?)" if close else ""))
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", blocks.PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_option_is_misspelt_in_the_prose(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    problems = set()
    meant = on_purpose(text)
    for name in _BACKTICKED.findall(text):
        if name.lower() in ACCEPTED_LOWER or name in meant or not _CAMEL.match(name):
            continue
        close = difflib.get_close_matches(name.lower(), ACCEPTED_LOWER, n=1, cutoff=MISSPELT)
        if close:
            problems.add(f"`{name}` is no option; did you mean `{ACCEPTED_LOWER[close[0]]}`?")
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(sorted(problems))


def test_the_checks_find_what_they_must() -> None:
    code = ('spark.readStream.format("reactive").option("maxRecordPerTrigger", 5)\n'
            'read_stream(spark, f, walSyncMs=5)\nx.options(fillWaitMs=1)\n')
    assert sorted(options_in_code(code)) == ["fillWaitMs", "maxRecordPerTrigger", "walSyncMs"]
    assert "maxRecordsPerTrigger" in ACCEPTED and "maxRecordPerTrigger" not in ACCEPTED
    assert on_purpose("x\n% misspelt on purpose: maxRecordPerTrigger, fillWait\n"
                      "<!-- misspelt on purpose: walSyncMS -->\n") == {
        "maxRecordPerTrigger", "fillWait", "walSyncMS"}
    assert difflib.get_close_matches("maxrecordpertrigger", ACCEPTED_LOWER, n=1,
                                     cutoff=MISSPELT) == ["maxrecordspertrigger"]
    # Every built-in publisher declares its options.
    assert all(ACCEPTED.get(name) for name in ("host", "topic", "url", "count"))
