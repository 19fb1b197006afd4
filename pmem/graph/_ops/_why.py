"""Why a key holds what it holds: the evidence behind its current value and the operations on it, read
from anything that answers a key's questions (a loaded graph, or a state read without loading it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pmem.graph._ops._types import Cell, Evidence, Operation, Version


class KeyView(Protocol):
    """What a key's views read: ``ProvenanceGraph``, or ``StateReader`` (a saved state, not loaded)."""

    def cell(self, key: str) -> Cell | None: ...

    def versions(self, key: str) -> list[Version]: ...

    def operations(self, key: str) -> Iterable[Operation]: ...

    def evidence(self, evidence_id: str) -> Evidence: ...


@dataclass(frozen=True)
class Why:
    """What :func:`why` found behind a key's current value: the value and its status, the head version's
    id, the evidence that stated or supported it (and that of the last operation that changed the cell:
    a retraction that reinstated it), and every operation on the key, in order."""

    key: str
    value: str | None
    status: str
    version: str | None
    evidence: list[Evidence]
    operations: list[Operation]


def why(view: KeyView, key: str) -> Why | None:
    """Why ``key`` holds what it holds in ``view`` (None when it never held anything).

    >>> from pmem.graph import ProvenanceGraph
    >>> g = ProvenanceGraph()
    >>> _ = g.apply("accept", "alice.city", "Paris", evidence=g.observe("Alice lives in Paris."))
    >>> w = why(g, "alice.city")
    >>> w.value, [e.text for e in w.evidence], [op.op for op in w.operations]
    ('Paris', ['Alice lives in Paris.'], ['accept'])
    """
    cell = view.cell(key)
    if cell is None:
        return None
    head = next(
        (v for v in view.versions(key) if v.valid_to is None and v.status in ("active", "contested")),
        None,
    )
    operations = list(view.operations(key))
    cited = [op.evidence for op in operations if head is not None and op.version == head.id and op.applied]
    applied = [op for op in operations if op.applied]
    if applied:  # the last change: a retraction that reinstated the head cites the retracting text
        cited.append(applied[-1].evidence)
    evidence = [view.evidence(e) for e in dict.fromkeys(e for e in cited if e is not None)]
    return Why(key, cell.value, cell.status, None if head is None else head.id, evidence, operations)
