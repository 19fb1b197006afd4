"""The JSON form of what :class:`pmem.Memory` returns: what the server's tools reply, and what a test
compares them with (the reply to a call is the JSON form of the memory's answer to the same call).

>>> import pmem
>>> m = pmem.Memory()
>>> add_reply(m.add("The city of Alice is Paris."))["operations"][0]["key"]
'alice.city'
>>> cell_reply(m.get("alice.city"))["value"]
'Paris'
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pmem.graph import Cell, ErasureReceipt, OpResult, ProvenanceGraph, Version
    from pmem.memory import AddResult, Recall, Why


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists (JSON has no tuple: a reply read back compares equal)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def version_reply(version: Version) -> dict[str, Any]:
    """A version: id, key, value, status, the arrival seqs it was valid between, evidence, support."""
    return _fields(version)


def cell_reply(cell: Cell | None) -> dict[str, Any] | None:
    """A cell: value, status, alternatives, earlier values (newest first), support, stale premises; a
    search hit adds its ``score``. None: the memory never held the key."""
    if cell is None:
        return None
    out = _fields(cell)
    out["history"] = [version_reply(v) for v in cell.history]
    return out


def cells_reply(cells: list[Cell]) -> list[dict[str, Any] | None]:
    return [cell_reply(c) for c in cells]


def search_reply(cells: list[Cell], whys: list[Why | None]) -> list[dict[str, Any] | None]:
    """Search hits (:func:`cell_reply`), each with ``evidence``: the turns its current value comes from
    (text, source, time), so that a client answers with the turn and its date, not the value alone."""
    out = cells_reply(cells)
    for hit, why in zip(out, whys, strict=True):
        if hit is not None:
            hit["evidence"] = [] if why is None else [_fields(e) for e in why.evidence]
    return out


def recall_reply(found: Recall) -> dict[str, Any]:
    """A recall: the context to put in a prompt, its tokens and budget, and each item (a fact or a turn)
    with its line, the evidence it cites and its fused score."""
    return {
        "context": found.context,
        "tokens": found.tokens,
        "budget": found.budget,
        "items": [_fields(item) for item in found.items],
    }


def add_reply(result: AddResult) -> dict[str, Any]:
    """What an add did: its evidence id, the facts extracted, every operation applied and why not."""
    return {
        "evidence": result.evidence,
        "facts": [{"key": key, "value": value} for key, value in result.facts],
        "operations": [_fields(op) for op in result.operations],
    }


def op_reply(result: OpResult) -> dict[str, Any]:
    """An operation's outcome: whether it applied, its effective type, and why not."""
    return _fields(result)


def receipt_reply(receipt: ErasureReceipt) -> dict[str, Any]:
    """An erasure's receipt: the evidence, each key whose value changed (before, after), the versions
    erased, the operations left out. It holds no erased text."""
    return {
        "evidence": receipt.evidence,
        "changed": {key: {"before": b, "after": a} for key, (b, a) in receipt.changed.items()},
        "erased_versions": list(receipt.erased_versions),
        "operations": receipt.operations,
    }


def why_reply(why: Why | None) -> dict[str, Any] | None:
    """The evidence behind a value (texts, sources, times) and the operations on its key."""
    if why is None:
        return None
    return {
        "key": why.key,
        "value": why.value,
        "status": why.status,
        "version": why.version,
        "evidence": [_fields(e) for e in why.evidence],
        "operations": [_fields(op) for op in why.operations],
    }


def as_of_reply(graph: ProvenanceGraph, key: str | None, limit: int) -> dict[str, Any]:
    """The cells of a past graph (``key``'s alone when given; else the frontier's first ``limit`` by
    key), and how many it holds."""
    if key is not None:
        cell = graph.cell(key)
        return {
            "cells": [] if cell is None or cell.value is None else [cell_reply(cell)],
            "total": int(cell is not None and cell.value is not None),
        }
    frontier = graph.frontier()
    return {"cells": [cell_reply(c) for c in list(frontier.values())[:limit]], "total": len(frontier)}
