"""Dependencies a reader can see: pmem's modules import each other at module level, except the few
imports on :data:`LAZY_IMPORTS`, each with its reason; and no pmem modules import each other in a circle
when they run (imports for annotations only aside).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import pmem

ROOT = Path(pmem.__file__).parent

#: (file, module it imports inside a function) -> why the import cannot sit at the module's top
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("__init__.py", "pmem"): "`import pmem` stays light: pmem.memory and pmem.graph load on first use",
    ("rundir/_datasets.py", "pmem.graph"): (
        "pmem.rundir loads without pyarrow (the model layer imports it); only a dataset check needs the "
        "graph's operation names"
    ),
}
#: the most imports inside functions of pmem's own modules: today's count, so that one more of a listed
#: (file, module) pair, which LAZY_IMPORTS alone lets through, is seen
MOST_LAZY_IMPORTS = 3


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of nodes under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for n in ast.walk(node))
    return out


def _pmem_module(node: ast.Import | ast.ImportFrom, path: Path) -> list[str]:
    """The pmem modules an import statement names (relative imports resolved against ``path``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == "pmem" or a.name.startswith("pmem.")]
    if node.level:
        package = path.parent.relative_to(ROOT.parent).parts
        base = ".".join(package[: len(package) - node.level + 1])
        return [f"{base}.{node.module}" if node.module else base]
    module = node.module or ""
    return [module] if module == "pmem" or module.startswith("pmem.") else []


def _lazy_imports() -> list[tuple[str, str, int]]:
    """(file under pmem/, imported module, line) of every import of a pmem module inside a function."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import | ast.ImportFrom):
                        for module in _pmem_module(node, path):
                            found.append((path.relative_to(ROOT).as_posix(), module, node.lineno))
    return sorted(set(found))


def test_pmem_modules_import_each_other_at_module_level_but_for_the_listed_few() -> None:
    found = _lazy_imports()
    unlisted = [
        f"pmem/{f}:{line} imports {m} inside a function" for f, m, line in found if (f, m) not in LAZY_IMPORTS
    ]
    assert unlisted == [], "move these to the module's top, or list them in LAZY_IMPORTS with the reason"
    stale = sorted(set(LAZY_IMPORTS) - {(f, m) for f, m, _ in found})
    assert stale == [], "these imports are no longer inside functions: drop them from LAZY_IMPORTS"
    assert len(found) <= MOST_LAZY_IMPORTS, found


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> nx.DiGraph:
    """pmem module -> pmem module it imports when it runs: at its top or inside a function, annotations
    only (``if TYPE_CHECKING:``) left out. ``from package import submodule`` depends on the submodule
    alone (Python imports it whether or not the package has finished initializing)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        tree = ast.parse(path.read_text(), str(path))
        annotations_only = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom) or id(node) in annotations_only:
                continue
            for module in _pmem_module(node, path):
                names = node.names if isinstance(node, ast.ImportFrom) else []
                submodules = [f"{module}.{a.name}" for a in names if f"{module}.{a.name}" in modules]
                targets = set(submodules)
                if module in modules and (isinstance(node, ast.Import) or len(submodules) < len(names)):
                    targets.add(module)
                graph.add_edges_from((name, t) for t in targets if t != name)
    return graph


def test_no_pmem_modules_import_each_other_in_a_circle() -> None:
    graph = _import_graph()
    assert graph.number_of_nodes() > 200 and graph.has_edge("pmem.graph._graph", "pmem.graph._ops._listen")
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == [], "a runtime import circle (type-only imports aside): break it"
