"""The Python examples of the README and the docs run, in order, and say what they claim.

A statement that is an expression with a trailing comment starting with a Python literal
(``g.cell("k").value  # 'a': ...``) must evaluate to that literal; lines printed by an example must
appear in it as comments (``# k = a | history: ...``).
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: the documents whose Python blocks run, each in its own namespace, and the claims each must check
CHECKED = {"docs/core.md": 12, "docs/memory.md": 12, "README.md": 5}


def _blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / name).read_text(encoding="utf-8"), re.S)


BLOCKS = _blocks("docs/core.md")


def _claimed(comment: str) -> tuple[bool, object]:
    """The literal a comment starts with, if any (the rest of the comment is prose)."""
    for end in range(len(comment), 0, -1):
        try:
            return True, ast.literal_eval(comment[:end].strip())
        except (ValueError, SyntaxError):
            continue
    return False, None


def test_the_examples_are_found() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_the_examples_run_and_say_what_they_claim(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # an example saves a state file
    namespace: dict[str, object] = {}
    checked = 0
    for block in _blocks(name):
        lines = block.splitlines()
        out = io.StringIO()
        for stmt in ast.parse(block).body:
            code = ast.Module(body=[stmt], type_ignores=[])
            source_line = lines[(stmt.end_lineno or stmt.lineno) - 1]
            comment = source_line.split("  # ", 1)[1] if "  # " in source_line else ""
            has_claim, claim = _claimed(comment) if isinstance(stmt, ast.Expr) and comment else (False, None)
            with contextlib.redirect_stdout(out):
                if has_claim:
                    value = eval(compile(ast.Expression(stmt.value), name, "eval"), namespace)
                    assert value == claim, f"{ast.unparse(stmt)} gave {value!r}, the doc says {claim!r}"
                    checked += 1
                else:
                    exec(compile(code, name, "exec"), namespace)
        for printed in out.getvalue().splitlines():
            assert f"# {printed}" in block, f"printed {printed!r}, not shown in the doc"
            checked += 1
    assert checked >= CHECKED[name]
