"""``pmem.Memory``: P-Mem as an agent builder embeds it: text in, current values out.

>>> import pmem
>>> m = pmem.Memory()  # the deterministic heuristic agent and hashing embedder: no model, no network
>>> r = m.add("Earlier observation: mug 1 was in shelf 2.")
>>> [(op.op, op.key, op.value) for op in r.operations]
[('accept', 'mug_1.location', 'shelf 2')]
>>> m.get("mug_1.location").value
'shelf 2'
"""

from __future__ import annotations

from pmem.graph import Why
from pmem.memory._memory import (
    RECALL_TOKENS,
    SEARCH_MIN_SCORE,
    AddResult,
    AppliedOp,
    AsyncMemory,
    Memory,
    Recall,
    ScoredCell,
)
from pmem.memory._recall import Recalled

__all__ = [
    "RECALL_TOKENS",
    "SEARCH_MIN_SCORE",
    "AddResult",
    "AppliedOp",
    "AsyncMemory",
    "Memory",
    "Recall",
    "Recalled",
    "ScoredCell",
    "Why",
]
