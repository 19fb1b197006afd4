"""Deterministic, query-independent rendering of cells: current value first, one line per cell.

Line shape (disclosures appended in a fixed order, whatever order they were asked in)::

    key = value
    key = value [contested] | alternatives: b; c
    key = value | support: 3 | history: old (superseded, t=4..9); older (contradicted, t=2..4)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pmem.graph._codes import DISCLOSURES

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._types import Cell


def _check_disclose(disclose: Iterable[str]) -> frozenset[str]:
    if isinstance(disclose, str):
        disclose = (disclose,)
    wanted = frozenset(disclose)
    unknown = wanted - DISCLOSURES
    if unknown:
        msg = f"unknown disclosure mode(s) {sorted(unknown)}; expected a subset of {sorted(DISCLOSURES)}"
        raise ValueError(msg)
    return wanted


def render_cell(cell: Cell, disclose: frozenset[str]) -> str:
    if cell.value is None:
        line = f"{cell.key} = (no current value)"
    else:
        line = f"{cell.key} = {cell.value}"
        if cell.status == "contested":
            line += " [contested]"
    if "support" in disclose and cell.value is not None:
        line += f" | support: {cell.support}"
    if "alternatives" in disclose and cell.alternatives:
        line += " | alternatives: " + "; ".join(cell.alternatives)
    if "history" in disclose and cell.history:
        parts = []
        for v in cell.history:
            end = "" if v.valid_to is None else str(v.valid_to)
            parts.append(f"{v.value} ({v.status}, t={v.valid_from}..{end})")
        line += " | history: " + "; ".join(parts)
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
    return "\n".join(render_cell(c, wanted) for c in cells)
