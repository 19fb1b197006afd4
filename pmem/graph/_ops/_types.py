"""Read-only views the graph hands out: versions, cells, operation results and log entries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OpResult:
    """Outcome of :meth:`ProvenanceGraph.apply`.

    ``op`` is the effective operation: ``"noop"`` when a precondition failed (then ``applied`` is false
    and ``reason`` says why) or when an accept repeated the head's value (applied, counted as support).
    """

    applied: bool
    op: str
    reason: str | None = None


# The applied no-ops that count as support, one frozen result each (the per-call and the column-wise
# writers give the same reasons).
#: an accept whose value equals the head's
SUPPORT_RESULT = OpResult(True, "noop", "value equals the current head: counted as support")
#: a contest whose value is the head's
CONTEST_REPEATS_HEAD = OpResult(True, "noop", "contest repeats the current head's value: counted as support")
#: a contest whose value is an open alternative's
CONTEST_REPEATS_ALT = OpResult(True, "noop", "contest repeats an open alternative: counted as its support")


@dataclass(frozen=True, slots=True)
class Version:
    """One value a key has held. ``valid_from``/``valid_to`` are arrival seqs; ``valid_to`` None = open."""

    id: str
    key: str
    value: str
    status: str
    valid_from: int
    valid_to: int | None
    evidence: str | None
    support: int = 1
    supersedes: str | None = None
    alternative_of: str | None = None


@dataclass(frozen=True, slots=True)
class Cell:
    """The materialized state of one key: its head's value, status, alternatives and closed history.

    ``stale`` names the premise keys (``apply(..., depends_on=...)``) whose head is no longer the version
    the current value was asserted on, or is itself stale. ``held``: the cell is contested only by claims
    from sources ranked below the head's (source authority), so the head stands until a source of at
    least its rank settles the conflict.
    """

    key: str
    value: str | None
    status: str
    alternatives: list[str]
    history: list[Version]
    support: int
    stale: tuple[str, ...] = ()
    held: bool = False


@dataclass(frozen=True, slots=True)
class ScoredCell(Cell):
    """A :class:`Cell` that a search found (``pmem.Memory.search``, ``StateReader.search``), with
    ``score``: its cosine similarity to the query (higher is nearer)."""

    score: float = 0.0

    @classmethod
    def of(cls, cell: Cell, score: float) -> ScoredCell:
        """``cell`` found with ``score``."""
        return cls(**{f.name: getattr(cell, f.name) for f in dataclasses.fields(cell)}, score=score)


@dataclass(frozen=True, slots=True)
class Evidence:
    """An observation: ``time`` when it was observed, ``valid_time`` when what it states became true."""

    id: str
    text: str
    source: str
    time: str | None
    seq: int
    valid_time: str | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    """One entry of the operation log (failed preconditions included, as noops with their reason).

    ``retracts``: for a reject or revoke, the value it retracts (the one it named, else the head's when
    it arrived); None when the key had no head, or the value was erased (see ``reason``).
    """

    seq: int
    requested: str
    op: str
    key: str
    value: str | None
    evidence: str | None
    applied: bool
    reason: str | None
    version: str | None
    retracts: str | None = None
