"""Dependencies a reader can see: pmem's modules import each other at module level, except the few
imports on :data:`LAZY_IMPORTS`, each with its reason; and no circle of imports inside a package joins
more than two files.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

import pmem

ROOT = Path(pmem.__file__).parent

#: (file, module it imports inside a function) -> why the import cannot sit at the module's top
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("__init__.py", "pmem"): "`import pmem` stays light: pmem.memory and pmem.graph load on first use",
    ("rundir/_datasets.py", "pmem.graph"): (
        "pmem.rundir loads without pyarrow (the model layer imports it); only a dataset check needs the "
        "graph's operation names"
    ),
    ("models/_spec.py", "pmem.models._registry"): (
        "a spec asks the registry above it to check its backend and name its model; the registry imports "
        "the spec at its top (a circle of two files)"
    ),
    ("bench/_types.py", "pmem.bench._arrow"): (
        "History.to_arrow and from_arrow use the Arrow codec, which builds these types (a circle of two files)"
    ),
}
#: the most imports inside functions of pmem's own modules
MOST_LAZY_IMPORTS = 30
#: the packages whose modules must not import each other in circles of more than two files
PACKAGES = ("graph", "models")


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


def _import_graph(package: str) -> nx.DiGraph:
    """Module -> module it imports, inside ``pmem.<package>`` (at any depth, annotations-only left out)."""
    graph = nx.DiGraph()
    prefix = f"pmem.{package}"
    for path in sorted((ROOT / package).glob("*.py")):
        name = prefix if path.stem == "__init__" else f"{prefix}.{path.stem}"
        graph.add_node(name)
        tree = ast.parse(path.read_text(), str(path))
        annotations_only = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in annotations_only:
                for module in _pmem_module(node, path):
                    if module == prefix and isinstance(
                        node, ast.ImportFrom
                    ):  # from pmem.graph import _journal
                        named = (f"{prefix}.{a.name}" for a in node.names)
                        graph.add_edges_from(
                            (name, m) for m in named if (ROOT / package / f"{m.split('.')[-1]}.py").is_file()
                        )
                    elif module.startswith(prefix + "."):
                        graph.add_edge(name, module)
    graph.remove_nodes_from([prefix])  # the package's exports import everything; nothing imports them back
    return graph


@pytest.mark.parametrize("package", PACKAGES)
def test_no_circle_of_imports_joins_more_than_two_files(package: str) -> None:
    circles = [sorted(c) for c in nx.strongly_connected_components(_import_graph(package)) if len(c) > 2]
    assert circles == []
