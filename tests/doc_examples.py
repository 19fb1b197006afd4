"""Running a document's Python examples, in order, checking what they claim (no pytest: a light install
runs it as a script).

A statement that is an expression with a trailing comment starting with a Python literal
(``g.cell("k").value  # 'a': ...``) must evaluate to that literal; lines printed by an example must
appear in it as comments (``# k = a | history: ...``). Every block of a document runs in one namespace.

As a script it is what a test runs on an install without the extras::

    python tests/doc_examples.py --without polars,ray docs/memory.md docs/core.md

``--without`` makes those modules unimportable first (as a light install lacks them) and leaves out
the blocks that import one, or use a name such an import bound (they show reading a state with that
tool); it prints one line per document,
``docs/memory.md: 14 claims checked, 0 blocks left out``, and exits 1 on the first claim that fails.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection


def blocks(path: Path) -> list[str]:
    """The document's ``python`` blocks, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def claimed(comment: str) -> tuple[bool, object]:
    """The literal a comment starts with, if any (the rest of the comment is prose)."""
    for end in range(len(comment), 0, -1):
        try:
            return True, ast.literal_eval(comment[:end].strip())
        except (ValueError, SyntaxError):
            continue
    return False, None


def uses(block: str, modules: Collection[str], names: Collection[str] = ()) -> set[str]:
    """The names ``block`` binds by importing one of ``modules`` (``pl`` for ``import polars as pl``),
    or, when it imports none but uses one of ``names`` (bound so by an earlier block), those names;
    empty when the block needs none of them."""
    tree = ast.parse(block)
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {
                (a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in modules
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in modules:
            bound |= {a.asname or a.name for a in node.names}
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} & set(names)
    return bound | used


def run_document(path: Path, name: str, without: Collection[str] = ()) -> tuple[int, int]:
    """Run the blocks of ``path`` (named ``name`` in messages), less those importing one of
    ``without``; (claims checked, blocks left out). A claim that does not hold raises AssertionError."""
    namespace: dict[str, object] = {}
    checked = left_out = 0
    unbound: set[str] = set()  # names of modules left out: a block using one is left out too
    for block in blocks(path):
        needs = uses(block, without, unbound) if without else set()
        if needs:
            unbound |= needs
            left_out += 1
            continue
        lines = block.splitlines()
        out = io.StringIO()
        for stmt in ast.parse(block).body:
            code = ast.Module(body=[stmt], type_ignores=[])
            source_line = lines[(stmt.end_lineno or stmt.lineno) - 1]
            comment = source_line.split("  # ", 1)[1] if "  # " in source_line else ""
            has_claim, claim = claimed(comment) if isinstance(stmt, ast.Expr) and comment else (False, None)
            with contextlib.redirect_stdout(out):
                if has_claim:
                    value = eval(compile(ast.Expression(stmt.value), name, "eval"), namespace)
                    assert value == claim, (
                        f"{name}: {ast.unparse(stmt)} gave {value!r}, the doc says {claim!r}"
                    )
                    checked += 1
                else:
                    exec(compile(code, name, "exec"), namespace)
        for printed in out.getvalue().splitlines():
            assert f"# {printed}" in block, f"{name}: printed {printed!r}, not shown in the doc"
            checked += 1
    return checked, left_out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("documents", nargs="+", type=Path)
    parser.add_argument("--without", default="", help="modules made unimportable, comma-separated")
    args = parser.parse_args(argv)
    without = {m for m in args.without.split(",") if m}
    for module in without:
        sys.modules[module] = None  # type: ignore[assignment]  # `import module` now raises ImportError
    for document in args.documents:
        try:
            checked, left_out = run_document(document, str(document), without)
        except AssertionError as exc:
            print(f"{document}: {exc}", file=sys.stderr)
            return 1
        print(f"{document}: {checked} claims checked, {left_out} blocks left out")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
