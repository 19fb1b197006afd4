"""Provenant Memory (P-Mem).

An agent memory that commits the current value of each fact on arrival and keeps what it displaces,
as a typed provenance graph, plus the harness that evaluates agent memories against each other.

>>> import pmem
>>> g = pmem.ProvenanceGraph()
>>> e = g.observe("The budget is $30k", source="user")
>>> g.apply("accept", "project.budget", "$30k", evidence=e).applied
True
>>> g.cell("project.budget").value
'$30k'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pmem.graph import (
        Cell,
        KeyRegistry,
        OpResult,
        Patch,
        PatchController,
        ProvenanceGraph,
        StateChangedError,
        StateFileError,
        Version,
    )
    from pmem.memory import AddResult, AsyncMemory, Memory, Recall

__version__ = "0.1.0"

#: names ``pmem`` gives from :mod:`pmem.memory` (the agent-facing memory); the others are the core's
_MEMORY_NAMES = ("AddResult", "AsyncMemory", "Memory", "Recall")

__all__ = [
    "AddResult",
    "AsyncMemory",
    "Cell",
    "KeyRegistry",
    "Memory",
    "OpResult",
    "Patch",
    "PatchController",
    "ProvenanceGraph",
    "Recall",
    "StateChangedError",
    "StateFileError",
    "Version",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # Lazy so that `import pmem.models` (or the CLI) does not pay for the core's imports.
    if name in _MEMORY_NAMES:
        from pmem import memory

        return getattr(memory, name)
    if name in __all__ and name != "__version__":
        from pmem import graph

        return getattr(graph, name)
    msg = f"module 'pmem' has no attribute {name!r}"
    raise AttributeError(msg)
