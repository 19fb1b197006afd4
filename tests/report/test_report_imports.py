"""The modules of ``pmem.report`` import one another top-down: the import graph among them has no cycle.

The graph is read from the source with :mod:`ast`, so it counts every import statement wherever it
stands: at module level, inside a function, and under ``if TYPE_CHECKING:``. A deferred import inside
a function hides a cycle from the interpreter, not from a reader, so it counts here. Importing a
submodule also runs its package's ``__init__``; that implicit step is not an edge (every package
would then be a cycle), but an explicit ``from pmem.report import X`` or ``import pmem.report`` is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pmem.report

PACKAGE = "pmem.report"
ROOT = Path(pmem.report.__file__).parent


def module_name(path: Path) -> str:
    """``pmem/report/_load.py`` → ``pmem.report._load``; a package's ``__init__.py`` → the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module a ``from X import ...`` names, resolving ``from .`` and ``from ..x``."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported(path: Path, importer: str, known: Mapping[str, Path]) -> Iterator[str]:
    """Every module of the package that ``path`` imports, at any depth of its syntax tree."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(node, importer, is_package)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:  # `from pmem.report import _load` imports the submodule
                    yield sub
                elif target in known:
                    yield target


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(path, name, known)) for name, path in known.items()}


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None when the graph is acyclic (iterative depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        colour[start] = GREY
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = BLACK
                stack.pop()
            elif colour.get(child, BLACK) == GREY:
                path = [n for n, _ in stack]
                return [*path[path.index(child) :], child]
            elif colour.get(child) == WHITE:
                colour[child] = GREY
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_the_graph_is_read() -> None:
    """A guard against a vacuous pass: the parser sees the imports the package is known to have."""
    graph = import_graph()
    assert f"{PACKAGE}._build" in graph[PACKAGE]
    assert f"{PACKAGE}._load" in graph[f"{PACKAGE}._build"]
    assert f"{PACKAGE}._build" in graph[f"{PACKAGE}._cli"]  # an import inside a function counts


def test_find_cycle_names_the_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_report_modules_import_without_a_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle among pmem.report modules: " + " → ".join(cycle or [])
