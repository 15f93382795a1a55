"""The package's tree tells its architecture, and keeps telling it.

``pyspark_reactive`` keeps at most :data:`MOST_TOP_LEVEL` modules beside its sub-packages
(``source/``, ``publishers/``, ``sink/``, the private ``_testing/``), no module takes part in
an import cycle, and ``tests/pyspark_reactive`` mirrors the sub-packages. Imports are read
from the source with :mod:`ast` (nothing is imported): absolute and relative ones, at
module level and inside functions, ``from package import module`` included. The checks run
on a package made here with a cycle in it too, so they are known to fail when they should.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import pyspark_reactive
from pyspark_reactive.source.options import BUILTIN_PUBLISHERS

PACKAGE = Path(pyspark_reactive.__file__).resolve().parent
TESTS = Path(__file__).resolve().parent
#: Modules directly under src/pyspark_reactive (sub-packages not counted).
MOST_TOP_LEVEL = 8


def top_level_modules(package: Path) -> list[str]:
    """The ``.py`` files directly in ``package``, ``__init__.py`` included."""
    return sorted(path.name for path in package.glob("*.py"))


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package rooted at ``package``, by dotted name (a package by its
    own name, for its ``__init__.py``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package that it imports, anywhere in its code."""
    known = modules(package)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(name, is_package, node.module, node.level)
                # "from package import module" imports that module; any other name comes
                # from the module named in the statement.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in node.names]
            else:
                continue
            graph[name].update(target for target in targets if target in known)
    return graph


def _absolute(name: str, is_package: bool, module: str | None, level: int) -> str:
    """The module a ``from`` statement in module ``name`` names."""
    if level == 0:
        assert module is not None
        return module
    parts = name.split(".")
    # A package's own __init__ is level 1's anchor; a plain module's is its package.
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[:len(anchor) - (level - 1)]
    return ".".join([*anchor, *([module] if module else [])])


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) for each strongly connected group of modules that
    import each other, and for each module that imports itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(set(group), graph) for group in groups]


def _cycle_in(group: set[str], graph: Mapping[str, Iterable[str]]) -> list[str]:
    """A path from the group's first module back to it, within the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for target in sorted(graph.get(node, ())):
            if target == start:
                return [*paths[node], start]
            if target in group and target not in paths:
                paths[target] = [*paths[node], target]
                frontier.append(target)
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")  # pragma: no cover


def test_at_most_eight_modules_beside_the_sub_packages() -> None:
    top = top_level_modules(PACKAGE)
    assert len(top) <= MOST_TOP_LEVEL, (
        f"src/pyspark_reactive has {len(top)} modules beside its sub-packages (at most "
        f"{MOST_TOP_LEVEL}): {', '.join(top)}; put a new one in the sub-package of its "
        "concern (source/, publishers/, sink/)")


def test_no_module_takes_part_in_an_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    # The graph is read right: the imports that the layout is built on are in it.
    assert "pyspark_reactive.sink.publisher" in graph["pyspark_reactive.sink.connect"]
    assert "pyspark_reactive.source.admission" in graph["pyspark_reactive.sink.publish"]
    assert "pyspark_reactive.sink.connect" in graph["pyspark_reactive.sink.on_demand"]
    found = cycles(graph)
    assert found == [], "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_tests_mirror_the_sub_packages() -> None:
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")
                if not path.parent.name.startswith("_")}
    folders = {path.name for path in TESTS.iterdir()
               if path.is_dir() and any(path.glob("test_*.py"))}
    assert packages == {"source", "publishers", "sink"}
    assert folders == packages


def test_every_built_in_names_a_factory_of_the_publishers_package() -> None:
    for name, target in BUILTIN_PUBLISHERS.items():
        module, _, attribute = target.partition(":")
        assert module.startswith("pyspark_reactive.publishers."), (name, target)
        path = modules(PACKAGE).get(module)
        assert path is not None, f"{name}: no module {module}"
        defined = {node.name for node in ast.parse(path.read_text()).body
                   if isinstance(node, ast.FunctionDef)}
        assert attribute in defined, f"{name}: {module} defines no {attribute}()"


def _package(root: Path, files: dict[str, str]) -> Path:
    package = root / "made"
    for relative, text in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_a_cycle_is_found_however_it_is_imported(tmp_path: Path) -> None:
    # a -> b at module level (relative), b -> a inside a function (absolute, "from package
    # import module"), c -> itself, d -> e (no cycle).
    package = _package(tmp_path, {
        "__init__.py": "",
        "sub/__init__.py": "",
        "sub/a.py": "from .b import thing\n",
        "sub/b.py": "def f():\n    from made.sub import a\n    return a\nthing = 1\n",
        "c.py": "import made.c\n",
        "d.py": "from . import e\n",
        "e.py": "x = 1\n",
    })
    graph = import_graph(package)
    assert graph["made.sub.a"] == {"made.sub.b"} and graph["made.sub.b"] == {"made.sub.a"}
    assert graph["made.d"] == {"made.e"}
    assert cycles(graph) == [["made.c", "made.c"], ["made.sub.a", "made.sub.b", "made.sub.a"]]


def test_a_cycle_through_a_package_and_a_parent_relative_import_is_found(
        tmp_path: Path) -> None:
    # The package's __init__ re-exports from its module, which imports the package back.
    package = _package(tmp_path, {
        "__init__.py": "",
        "sink/__init__.py": "from .publish import publish\n",
        "sink/publish.py": "from ..source import reader\npublish = 1\n",
        "source/__init__.py": "",
        "source/reader.py": "def later():\n    from ..sink import publish\n",
    })
    graph = import_graph(package)
    assert graph["made.source.reader"] == {"made.sink.publish"}  # the module, not the name
    assert cycles(graph) == [["made.sink.publish", "made.source.reader", "made.sink.publish"]]
    package.joinpath("source/reader.py").write_text("def later():\n    from ..sink import x\n")
    assert cycles(import_graph(package)) == [
        ["made.sink", "made.sink.publish", "made.source.reader", "made.sink"]]


@pytest.mark.parametrize("count", [8, 9])
def test_the_module_count_sees_each_top_level_module(tmp_path: Path, count: int) -> None:
    package = _package(tmp_path, {"__init__.py": "", "sub/__init__.py": "", "sub/x.py": "",
                                  **{f"m{k}.py": "" for k in range(count - 1)}})
    assert len(top_level_modules(package)) == count
