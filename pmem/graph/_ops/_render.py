r"""Deterministic, query-independent rendering of cells: current value first, one line per cell.

Line shape (disclosures appended in a fixed order, whatever order they were asked in)::

    key = value
    key = value [contested] | alternatives: b; c
    key = value [held by source authority] | alternatives: b      (b's source ranks below the head's)
    key = value | support: 3 | history: old (superseded, t=4..9); older (contradicted, t=2..4)

A cell whose premises changed (``Cell.stale``) says so whatever is disclosed, last:
``key = value | stale: premise a changed; premise b is stale`` (b did not change, but its own premise did).

One cell is always exactly one line: keys cannot hold control characters (see ``_validate``), and every
value is passed through :func:`escape`, which writes a backslash as ``\\``, newline, carriage return and tab
as ``\n``, ``\r``, ``\t``, and any other control character or line/paragraph separator as ``\xNN`` or
``\uNNNN`` (Python string-literal escapes, so the original value can be read back unambiguously). A
value made only of printable characters and without backslashes is shown unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pmem.graph._ops._codes import DISCLOSURES
from pmem.graph._ops._validate import is_control

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._ops._types import Cell


_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    if is_control(ch):
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return ch


def escape(value: str) -> str:
    """``value`` on one line: backslash escapes for backslashes and line-breaking characters (see above)."""
    if value.isprintable() and "\\" not in value:  # the common case: nothing to escape
        return value
    return "".join(map(_escape_char, value))


def _check_disclose(disclose: Iterable[str]) -> frozenset[str]:
    if isinstance(disclose, str):
        disclose = (disclose,)
    wanted = frozenset(disclose)
    unknown = wanted - DISCLOSURES
    if unknown:
        msg = f"unknown disclosure mode(s) {sorted(unknown)}; expected a subset of {sorted(DISCLOSURES)}"
        raise ValueError(msg)
    return wanted


def render_cell(cell: Cell, disclose: frozenset[str], changed: frozenset[str] = frozenset()) -> str:
    """One cell's line; ``changed``: the stale premises whose own head changed (the rest are stale)."""
    if cell.value is None:
        line = f"{cell.key} = (no current value)"
    else:
        line = f"{cell.key} = {escape(cell.value)}"
        if cell.status == "contested":
            line += " [held by source authority]" if cell.held else " [contested]"
    if "support" in disclose and cell.value is not None:
        line += f" | support: {cell.support}"
    if "alternatives" in disclose and cell.alternatives:
        line += " | alternatives: " + "; ".join(map(escape, cell.alternatives))
    if "history" in disclose and cell.history:
        parts = []
        for v in cell.history:
            end = "" if v.valid_to is None else str(v.valid_to)
            parts.append(f"{escape(v.value)} ({v.status}, t={v.valid_from}..{end})")
        line += " | history: " + "; ".join(parts)
    if cell.stale:
        line += " | stale: " + "; ".join(
            f"premise {escape(k)} {'changed' if k in changed else 'is stale'}" for k in cell.stale
        )
    return line


def render_cells(graph: ProvenanceGraph, keys: Iterable[str] | None, disclose: Iterable[str]) -> str:
    wanted = _check_disclose(disclose)
    if keys is None:
        cells = list(graph.frontier().values())
    else:
        if isinstance(keys, str):
            keys = (keys,)
        seen: set[str] = set()
        cells = []
        for key in keys:
            if key in seen:
                continue
            seen.add(key)
            cell = graph.cell(key)
            if cell is not None:
                cells.append(cell)
    return "\n".join(render_cell(c, wanted, graph.changed_premises(c)) for c in cells)
