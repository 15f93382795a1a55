"""Every code block of the README and the docs either runs in the tests or says it does not.

The blocks are found as MyST finds them (markdown-it with MyST's colon fences, looking
inside directives and admonitions), independently of Sybil, which runs them: a Python block
Sybil would not collect, or a shell block without the ``<!-- not run by the tests: why -->``
comment before its fence, fails here. The rules are in the root ``conftest.py``.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin
from sybil.document import Document

ROOT = Path(__file__).resolve().parents[2]


def _root_conftest():  # type: ignore[no-untyped-def]
    # tests/conftest.py is imported as "conftest" too: load the root one by its path.
    spec = importlib.util.spec_from_file_location("docs_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOCS = _root_conftest()
# The pages people write; docs/_build and autosummary's stubs (reference/api) are built.
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md")
                                     if "_build" not in p.parts
                                     and (ROOT / "docs" / "reference" / "api") not in p.parents)]
CODE_DIRECTIVES = {"code-block", "code", "sourcecode"}
_DIRECTIVE = re.compile(r"^\{(?P<name>[\w-]+)\}\s*(?P<argument>.*)$")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based, the fence's opening line
    language: str
    source: str
    not_run: str | None = None  # why it does not run (the comment before the fence)


def _blocks(text: str, offset: int = 0) -> Iterator[Block]:
    parser = MarkdownIt("commonmark").use(colon_fence_plugin)
    for token in parser.parse(text):
        if token.type not in ("fence", "colon_fence") or token.map is None:
            continue
        line = offset + token.map[0] + 1
        why = DOCS.not_run_reason("\n".join(text.splitlines()[:token.map[0]]))
        info = token.info.strip()
        directive = _DIRECTIVE.match(info)
        if directive is None:
            if token.type == "fence":
                yield Block(line, info.split(" ")[0].lower(), token.content, why)
            continue
        if directive["name"] in CODE_DIRECTIVES:
            body = "\n".join(row for row in token.content.splitlines()
                             if not row.startswith(":"))  # the directive's own options
            yield Block(line, directive["argument"].split(" ")[0].lower(), body.lstrip("\n"),
                        why)
        else:  # an admonition, a tab, a grid card: blocks may sit inside
            yield from _blocks(token.content, line)


def _sybil_lines(page: Path) -> set[int]:
    """The 1-based lines where Sybil's examples of the page start: a code block's at its
    opening fence, a doctest's at its first ``>>>`` line, inside the fence."""
    document = Document.parse(str(page), DOCS.ExampleParser())
    text = page.read_text(encoding="utf-8")
    return {text.count("\n", 0, example.region.start) + 1 for example in document}


def _runs(block: Block, collected: set[int]) -> bool:
    last = block.line + block.source.count("\n") + 1  # the closing fence
    return any(block.line <= line <= last for line in collected)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_runs_or_says_it_does_not(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    # Collected at all: Sybil's patterns must reach the page, however deep it lies.
    assert DOCS.SYBIL.should_parse(page), f"Sybil's patterns do not reach {page}"
    collected = _sybil_lines(page)
    problems = []
    for block in _blocks(text):
        first = block.source.lstrip().splitlines()[0] if block.source.strip() else ""
        if first.startswith(DOCS.OLD_NOT_RUN):
            problems.append(f"line {block.line}: '{DOCS.OLD_NOT_RUN}' inside the code a "
                            f"reader copies: put '{DOCS.NOT_RUN} <why> -->' on the line "
                            "before the fence instead")
        marked = block.not_run is not None
        if marked and not block.not_run:
            problems.append(f"line {block.line}: '{DOCS.NOT_RUN} -->' without saying why")
        if block.language in ("python", "py"):
            if not marked and not _runs(block, collected):
                problems.append(f"line {block.line}: a Python block the tests do not run "
                                "(nested where Sybil does not look?)")
        elif block.language not in DOCS.DATA_LANGUAGES and not marked:
            problems.append(f"line {block.line}: a {block.language or 'plain'} block that "
                            f"does not run and has no '{DOCS.NOT_RUN} <why> -->' before it "
                            f"(data and output blocks: {', '.join(sorted(DOCS.DATA_LANGUAGES))})")
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_the_checker_sees_what_it_must() -> None:
    # Blocks at the top level, inside an admonition and a colon fence, and code-block
    # directives are all found, with their languages.
    text = ("```python\nx = 1\n```\n\n````{note}\n```bash\nls\n```\n````\n\n"
            ":::{tip}\n```console\n$ ls\n```\n:::\n\n```{code-block} sql\n:caption: c\n"
            "SELECT 1\n```\n")
    assert [(b.language, b.source.strip()) for b in _blocks(text)] == [
        ("python", "x = 1"), ("bash", "ls"), ("console", "$ ls"), ("sql", "SELECT 1")]


def test_doctest_blocks_and_nested_blocks_count_as_run(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# p\n\n```python\n>>> 1 + 1\n2\n```\n\n````{note}\n```python\nx = 1\n"
                    "```\n````\n", encoding="utf-8")
    collected = _sybil_lines(page)
    found = list(_blocks(page.read_text(encoding="utf-8")))
    assert [b.line for b in found] == [3, 9]
    assert collected == {4, 9}  # the doctest's example starts inside its fence
    assert _runs(found[0], collected) and _runs(found[1], collected)
    assert not _runs(Block(20, "python", "y = 2\n"), collected)


def test_prints_comments_are_read_as_documented() -> None:
    source = ("print(1)\n# prints: 1\nprint('a'); print('b')\n# prints:\n# a\n# b\n"
              "x = 2  # an ordinary comment\n")
    assert DOCS.expected_output(source) == "1\na\nb\n"
    assert DOCS.expected_output("print(1)\n") is None
    DOCS.check_output("took ... s\n", "took 0.25 s\n", "a block")
    with pytest.raises(AssertionError, match="printed something other"):
        DOCS.check_output("[0, 1, 4]\n", "[0, 1, 9]\n", "a block")
