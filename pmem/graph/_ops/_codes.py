"""Small-integer codes for version statuses, operations and edge kinds.

The graph stores codes in flat columns (fast appends, compact Arrow state); the public API speaks names.
"""

from __future__ import annotations

#: ``undone``: a version that exists only through undone operations (its value kept, so that undoing
#: the undo restores it); ``erased``: one that existed only through erased evidence (its value gone).
STATUSES: tuple[str, ...] = (
    "active",
    "contested",
    "alternative",
    "superseded",
    "contradicted",
    "revoked",
    "undone",
    "erased",
)
ACTIVE, CONTESTED, ALTERNATIVE, SUPERSEDED, CONTRADICTED, REVOKED, UNDONE, ERASED = range(8)

#: The six typed write operations (a write path chooses among them; run directories count them).
OPS: tuple[str, ...] = ("accept", "contest", "reject", "revoke", "resolve", "noop")
ACCEPT, CONTEST, REJECT, REVOKE, RESOLVE, NOOP = range(6)
OP_CODES: dict[str, int] = {name: code for code, name in enumerate(OPS)}
#: Names in the operation log: the six, and ``undo`` (``ProvenanceGraph.undo``).
LOG_OPS: tuple[str, ...] = (*OPS, "undo")
UNDO = 6
#: An applied accept as the operation log stores it: requested | effective << 3 | applied << 6.
ACCEPT_APPLIED = ACCEPT | ACCEPT << 3 | 1 << 6

EDGE_KINDS: tuple[str, ...] = ("supported-by", "supersedes", "alternative-of", "revokes")

DISCLOSURES: frozenset[str] = frozenset({"support", "alternatives", "history"})

#: Sentinel for "none" in integer columns (an open interval, no evidence, no predecessor).
NONE = -1
