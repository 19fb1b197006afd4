"""Packages meet each other through public names (issue 32): a module of ``pmem.X`` imports nothing
private of another package ``pmem.Y``: no private module (``pmem.Y._mod``) and no private name
(``from pmem.Y import _name``), ``TYPE_CHECKING`` imports included. What one package offers another is
exported by its ``__init__`` (``__all__``) or held by one of its public modules.

The shared helpers at the package's top (``pmem/_atomic.py``, ``_plugins``, ...) are no package's
privates: anyone may import them. A new private import fails here, naming the file and line; the fix
is a public name in the owning package, not an entry in :data:`ALLOWED`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pmem

ROOT = Path(pmem.__file__).parent

#: (importing file relative to ``pmem/``, imported module, imported name or "" for ``import M``): the
#: cross-package private imports that remain, each with the reason it cannot use a public name.
#: At most 10; today there are none.
ALLOWED: frozenset[tuple[str, str, str]] = frozenset()


def _package(path: Path) -> tuple[str, ...]:
    """``("pmem", "runner")`` for a module of ``pmem.runner``; ``("pmem", "_demo")`` for a top-level one."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return tuple(parts[:2])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports() -> dict[tuple[str, str, str], list[str]]:
    """Every import of another package's private module or private name: key -> ``file:line`` places."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        mine = _package(path)
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            keys: list[tuple[str, str, str]] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mod = node.module.split(".")
                if mod[0] != "pmem" or tuple(mod[:2]) == mine:
                    continue
                # pmem.Y._mod (pmem._helper itself is a shared helper, not a package's private module)
                private_module = any(_private(p) for p in mod[2:])
                for alias in node.names:
                    if private_module or _private(alias.name):
                        keys.append((rel, node.module, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    mod = alias.name.split(".")
                    if mod[0] == "pmem" and tuple(mod[:2]) != mine and any(_private(p) for p in mod[2:]):
                        keys.append((rel, alias.name, ""))
            for key in keys:
                found.setdefault(key, []).append(f"pmem/{rel}:{node.lineno}")
    return found


def test_packages_import_only_each_others_public_names() -> None:
    found = private_imports()
    new = sorted(
        f"{place}: " + (f"from {mod} import {name}" if name else f"import {mod}")
        for (rel, mod, name), places in found.items()
        if (rel, mod, name) not in ALLOWED
        for place in places
    )
    assert not new, "private imports across packages (export a public name instead):\n" + "\n".join(new)
    gone = sorted(ALLOWED - found.keys())
    assert not gone, f"allowed private imports that are gone (drop them from ALLOWED): {gone}"


def test_the_allow_list_stays_short() -> None:
    assert len(ALLOWED) <= 10


def test_the_check_finds_a_private_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan itself: a private module and a private name of another package are found, with the line;
    one's own package, dunders and the shared helpers are not."""
    pkg = tmp_path / "pmem"
    (pkg / "ingest").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ingest" / "__init__.py").write_text("")
    (pkg / "ingest" / "_x.py").write_text(
        "from pmem.ingest._y import a\n"
        "from pmem import __version__\n"
        "from pmem._plugins import Registry\n"
        "from pmem.runner._config import RoleSpec\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pmem.models import _spec\n"
        "import pmem.bench._types\n"
    )
    monkeypatch.setitem(globals(), "ROOT", pkg)
    assert private_imports() == {
        ("ingest/_x.py", "pmem.runner._config", "RoleSpec"): ["pmem/ingest/_x.py:4"],
        ("ingest/_x.py", "pmem.models", "_spec"): ["pmem/ingest/_x.py:7"],
        ("ingest/_x.py", "pmem.bench._types", ""): ["pmem/ingest/_x.py:8"],
    }
