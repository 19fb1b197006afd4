"""The patch interface: a revise-shaped update lowered deterministically onto exactly one typed op.

Write paths (template, extraction, annotation) speak patches; the controller decides which operation a
patch means *against the current head*, so callers never have to know the head themselves:

============================================  =====================================
patch                                          lowered to
============================================  =====================================
key has no head, value given                   accept (creates the cell)
value equals the head's value                  noop (support)
``marks_old_wrong``, value given               reject with the value (head contradicted)
``marks_old_wrong``, no value                  reject without value (rollback)
no value, not marked wrong                     revoke (rollback)
otherwise                                      accept (supersession)
============================================  =====================================

An explicit ``op`` is honoured when its precondition holds against the head (an explicit ``noop`` naming a
value other than the head's fails its precondition: it would not count as support); otherwise it is kept
(and the graph records it as a noop with its reason), unless ``hard_commit`` is set, in which case the
controller falls back to the default lowering above so a structured correction is never dropped. An
``old_value`` that names something other than the current head makes the patch stale: it lowers to a
noop with that reason unless ``hard_commit`` is set (the graph records that noop as not applied when its
value is not the head's: a stale patch is no support for the head).

>>> from pmem.graph import ProvenanceGraph
>>> g = ProvenanceGraph()
>>> c = PatchController()
>>> c.lower(g, Patch("door.color", "red")).op
'accept'
>>> _ = c.apply(g, Patch("door.color", "red"))
>>> c.lower(g, Patch("door.color", "blue", old_value="red", marks_old_wrong=True)).op
'reject'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pmem.graph._graph import ProvenanceGraph
from pmem.graph._ops._codes import OP_CODES, OPS
from pmem.graph._ops._validate import check_flag, check_key, check_text, preview

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pmem.graph._ops._types import OpResult


@dataclass(frozen=True, slots=True)
class Patch:
    key: str
    new_value: str | None
    old_value: str | None = None
    op: str | None = None
    marks_old_wrong: bool = False
    hard_commit: bool = False

    def __post_init__(self) -> None:
        # a patch is checked whole when it is made, so that lowering and applying it cannot fail half-way
        check_key(self.key, "Patch")
        check_text(self.new_value, "new_value", f"Patch {self.key}", optional=True)
        check_text(self.old_value, "old_value", f"Patch {self.key}", optional=True)
        if self.op is not None and (type(self.op) is not str or self.op not in OP_CODES):
            msg = f"Patch {self.key}: unknown op {preview(self.op)}; op must be one of {', '.join(OPS)}"
            raise ValueError(msg)
        check_flag(self.marks_old_wrong, "marks_old_wrong", f"Patch {self.key}")
        check_flag(self.hard_commit, "hard_commit", f"Patch {self.key}")


@dataclass(frozen=True, slots=True)
class Lowering:
    op: str
    key: str
    value: str | None
    reason: str


class PatchController:
    """Deterministic patch -> typed operation lowering (no model, no state of its own)."""

    def lower(self, graph: ProvenanceGraph, patch: Patch) -> Lowering:
        _check_arguments(graph, patch, "PatchController.lower")
        cell = graph.cell(patch.key)
        if cell is None:
            return lower_patch(patch, None)
        return lower_patch(patch, cell.value, cell.status, cell.alternatives)

    def apply(self, graph: ProvenanceGraph, patch: Patch, evidence: str | None = None) -> OpResult:
        _check_arguments(graph, patch, "PatchController.apply")
        low = self.lower(graph, patch)
        # graph.apply checks evidence before it writes anything
        return graph.apply(low.op, low.key, low.value, evidence=evidence)


def lower_patch(
    patch: Patch, head: str | None, status: str = "empty", alternatives: Sequence[str] = ()
) -> Lowering:
    """The one typed operation ``patch`` lowers to against a key whose head value is ``head`` (None: no
    head), of ``status``, with open ``alternatives``: the one definition of patch lowering, which
    :meth:`PatchController.lower` applies to a graph's cell and the write path to a store without
    history.

    >>> lower_patch(Patch("budget", "$50k"), "$30k", "active").op
    'accept'
    >>> lower_patch(Patch("budget", None, old_value="$20k"), "$30k", "active").reason
    "stale patch: old value '$20k' is not the head '$30k'"
    """
    key, new = patch.key, patch.new_value
    if patch.op is not None:
        ok, why = _precondition(patch.op, new, head, status, list(alternatives))
        if ok or not patch.hard_commit:
            return Lowering(patch.op, key, _value_for(patch.op, new), "explicit op" if ok else why)
    stale = patch.old_value is not None and head is not None and patch.old_value != head
    if stale and not patch.hard_commit:
        return Lowering(
            "noop", key, new, f"stale patch: old value {patch.old_value!r} is not the head {head!r}"
        )
    if head is None:
        if new is None:
            return Lowering("noop", key, None, "nothing to retract: the key has no head")
        return Lowering("accept", key, new, "create")
    if new is not None and new == head:
        return Lowering("noop", key, new, "same value as the head: support")
    if patch.marks_old_wrong:
        return Lowering("reject", key, new, "revision: the old value is marked wrong")
    if new is None:
        return Lowering("revoke", key, None, "retraction")
    return Lowering("accept", key, new, "supersession")


def _check_arguments(graph: object, patch: object, where: str) -> None:
    if not isinstance(graph, ProvenanceGraph):
        msg = f"{where}: graph must be a ProvenanceGraph, got {type(graph).__name__}"
        raise ValueError(msg)
    if not isinstance(patch, Patch):
        msg = f"{where}: patch must be a Patch, got {type(patch).__name__} {preview(patch)}"
        raise ValueError(msg)


def _value_for(op: str, value: str | None) -> str | None:
    return None if op == "revoke" else value


def _precondition(
    op: str, new: str | None, head: str | None, status: str, alts: list[str]
) -> tuple[bool, str]:
    if op in ("accept", "contest", "resolve") and new is None:
        return False, f"{op} needs a value"
    if op == "noop" and new is not None and head is not None and new != head:
        return False, f"noop: {new!r} is not the head's value {head!r}"
    if op == "accept" or op == "noop":
        return True, ""
    if head is None:
        return False, f"{op}: the key has no head"
    if op == "resolve" and status != "contested":
        return False, "resolve: the cell is not contested"
    if op == "resolve" and new != head and new not in alts:
        return False, "resolve: value is neither the head nor an alternative"
    return True, ""
