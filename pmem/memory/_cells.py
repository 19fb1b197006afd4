"""Where the write path keeps each key's value: the cells it decides against, writes and reads.

Two kinds, one protocol (:class:`Cells`): :class:`GraphCells`, a provenance graph that retains what a
write displaces (the design), and :class:`OverwriteCells`, one value per key and nothing else (the
``retention=False`` ablation: a retraction deletes the cell, so there is nothing to roll back to).
The write path holds one and never asks which: what differs is the kinds' own business, and
:attr:`Cells.retains` says whether replayable provenance (premises, aliases, forget requests, reads of
the past) has a history to work on.

>>> from pmem.graph import Patch, lower_patch
>>> for cells in (GraphCells(ProvenanceGraph()), OverwriteCells()):
...     _ = cells.apply(Write("accept", "budget", "$30k", None))
...     low = lower_patch(Patch("budget", None, old_value="$30k"), *cells.head("budget"))
...     _ = cells.apply(Write(low.op, "budget", low.value, None))
...     print(type(cells).__name__, cells.current("budget"), [v.value for v in cells.as_graph().versions("budget")])
GraphCells None ['$30k']
OverwriteCells None []
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

from pmem.graph import OpResult, ProvenanceGraph

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["Cells", "GraphCells", "Head", "OverwriteCells", "Write"]


class Head(NamedTuple):
    """A key's current value as the write path decides against it: the value, its status (``active``
    or ``contested``) and the open alternatives."""

    value: str
    status: str
    alternatives: list[str]


class Write(NamedTuple):
    """One typed operation as the write path asks for it: on ``key``, citing ``evidence``, resting on the
    ``premises`` (keys), and extracted under ``alias`` where soft identity routed it to ``key``."""

    op: str
    key: str
    value: str | None
    evidence: str | None
    premises: tuple[str, ...] = ()
    alias: str | None = None


class Cells(Protocol):
    """The cells a write path writes: one current value per key, read and written by key."""

    #: whether what a write displaces is kept (a history that provenance can replay)
    retains: bool

    def head(self, key: str) -> Head | None:
        """The key's current value, or None when it has none."""

    def current(self, key: str) -> str | None:
        """The key's current value alone."""

    def apply(self, write: Write) -> OpResult:
        """Apply one typed operation. Raises ``ValueError`` for arguments the cells refuse (then nothing
        is written); an operation whose precondition fails is a noop result with its reason."""

    def count(self) -> int:
        """How many cells there are."""

    def items(self) -> Iterable[tuple[str, str]]:
        """(key, current value) of every cell with a value."""

    def render(
        self, keys: Sequence[str], disclose: Sequence[str], graph: ProvenanceGraph | None = None
    ) -> list[str]:
        """The cells of ``keys`` as lines, current value first (``graph``: a past state to render instead)."""

    def as_graph(self) -> ProvenanceGraph:
        """What the cells hold, as a graph."""


class GraphCells:
    """The cells of a provenance graph: every write kept, every displaced value retained."""

    retains = True

    def __init__(self, graph: ProvenanceGraph) -> None:
        self.graph = graph  # the graph written into (its registry routes the write path's keys)

    def head(self, key: str) -> Head | None:
        cell = self.graph.cell(key)
        if cell is None or cell.value is None:
            return None
        return Head(cell.value, cell.status, list(cell.alternatives))

    def current(self, key: str) -> str | None:
        return self.graph.head_value(key)

    def apply(self, write: Write) -> OpResult:
        op, key, value, evidence, premises, alias = write
        if premises or alias is not None:
            return self.graph.apply(
                op, key, value, evidence=evidence, depends_on=premises or None, alias=alias
            )
        return self.graph.apply(op, key, value, evidence=evidence)

    def count(self) -> int:
        return int(self.graph.stats()["cells"])

    def items(self) -> Iterable[tuple[str, str]]:
        return self.graph.frontier_items()

    def render(
        self, keys: Sequence[str], disclose: Sequence[str], graph: ProvenanceGraph | None = None
    ) -> list[str]:
        text = (graph or self.graph).render(keys=list(keys), disclose=disclose)
        return text.split("\n") if text else []

    def as_graph(self) -> ProvenanceGraph:
        return self.graph


class OverwriteCells:
    """Retention off: one value per key, nothing else. Accept/reject/contest/resolve overwrite; a
    retraction (revoke, reject without a value) deletes the cell, so there is nothing to roll back to."""

    retains = False

    def __init__(self) -> None:
        self.values: dict[str, str] = {}  # key -> its one value

    def head(self, key: str) -> Head | None:
        v = self.values.get(key)
        return None if v is None else Head(v, "active", [])

    def current(self, key: str) -> str | None:
        return self.values.get(key)

    def apply(self, write: Write) -> OpResult:
        op, key, value = write.op, write.key, write.value
        cur = self.values.get(key)
        if op == "noop":
            return OpResult(True, "noop", None)
        if op in ("accept",) or (
            op in ("contest", "resolve", "reject") and value is not None and cur is not None
        ):
            if value is None:
                return OpResult(False, "noop", f"{op} needs a value")
            if cur == value:
                return OpResult(True, "noop", "value equals the current value: support")
            self.values[key] = value
            return OpResult(True, op, None)
        if cur is None:
            return OpResult(False, "noop", f"{op}: the key has no value")
        # revoke, or reject without a value: no retained predecessor, the cell is deleted
        del self.values[key]
        return OpResult(True, op, "retention off: the cell is deleted")

    def count(self) -> int:
        return len(self.values)

    def items(self) -> Iterable[tuple[str, str]]:
        return self.values.items()

    def render(
        self, keys: Sequence[str], disclose: Sequence[str], graph: ProvenanceGraph | None = None
    ) -> list[str]:
        return [f"{k} = {self.values[k]}" for k in keys if k in self.values]

    def as_graph(self) -> ProvenanceGraph:
        g = ProvenanceGraph()
        for key, value in sorted(self.values.items()):
            g.apply("accept", key, value)
        return g
