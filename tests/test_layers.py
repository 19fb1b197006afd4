"""Imports only point down (README, Layout): each package imports from the layers below it only.

The shared helpers at the package's top (``pmem/_atomic.py``, ``_exit``, ``_lock``, ``_plugins``,
``_scrub``) may be imported from anywhere; ``pmem.graph`` imports nothing else from ``pmem``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pmem

#: bottom to top: a package may import the ones before it
LAYERS = (
    "graph",
    "rundir",
    "models",
    "bench",
    "memory",
    "server",
    "integrations",
    "arms",
    "peers",
    "runner",
    "ingest",
    "report",
)
ROOT = Path(pmem.__file__).parent


def _imports(package: str) -> set[str]:
    """The ``pmem`` packages the modules of ``package`` import (at any depth of the module)."""
    out: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            out.update(n.split(".")[1] for n in names if n.startswith("pmem.") and n.count(".") >= 1)
    return out - {package}


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    below = set(LAYERS[: LAYERS.index(package)])
    helpers = {p.stem for p in ROOT.glob("_*.py")} - {"__init__", "__main__"}
    allowed = below | (helpers if package != "graph" else set())
    assert _imports(package) <= allowed, f"pmem.{package} imports {sorted(_imports(package) - allowed)}"
