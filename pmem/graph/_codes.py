"""Small-integer codes for version statuses, operations and edge kinds.

The graph stores codes in flat columns (fast appends, compact Arrow state); the public API speaks names.
"""

from __future__ import annotations

STATUSES: tuple[str, ...] = ("active", "contested", "alternative", "superseded", "contradicted", "revoked")
ACTIVE, CONTESTED, ALTERNATIVE, SUPERSEDED, CONTRADICTED, REVOKED = range(6)

OPS: tuple[str, ...] = ("accept", "contest", "reject", "revoke", "resolve", "noop")
ACCEPT, CONTEST, REJECT, REVOKE, RESOLVE, NOOP = range(6)
OP_CODES: dict[str, int] = {name: code for code, name in enumerate(OPS)}

EDGE_KINDS: tuple[str, ...] = ("supported-by", "supersedes", "alternative-of", "revokes")

DISCLOSURES: frozenset[str] = frozenset({"support", "alternatives", "history"})

#: Sentinel for "none" in integer columns (an open interval, no evidence, no predecessor).
NONE = -1
