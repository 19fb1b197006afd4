"""Memory arms behind one interface: P-Mem (the write path of :mod:`pmem.memory`, with the read paths
the paper compares) and the baseline memory designs.

>>> import asyncio
>>> from pmem.arms import ModelSet, make_arm
>>> from pmem.bench import Event, Question
>>> from pmem.models import make_chat_model, make_embedder
>>> models = ModelSet(make_chat_model("heuristic"), make_embedder("hashing"))
>>> arm = make_arm("pmem", models)
>>> events = [Event(0, "Earlier observation: apple 1 was in fridge 1.", source="environment"),
...           Event(1, "Update: apple 1 has been moved from fridge 1 to countertop 2.", source="environment")]
>>> asyncio.run(arm.ingest(events))
>>> q = Question("q", "Where is the apple 1 now?", ("countertop 2",), "current", 1)
>>> ans = asyncio.run(arm.answer(q))
>>> ans.prediction, ans.read.text
('countertop 2', 'apple_1.location = countertop 2')

Arm names (DESIGN.md): see :data:`ARM_NAMES`; docs/arms.md describes each one and its options. The
registry (:mod:`pmem.arms._registry`) is the one list of arms, with their factories, fixed options,
labels and display order; ``register_arm`` and ``module:attr`` names add plugins to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pmem._lazy import lazy_exports
from pmem.arms._base import Answer, Arm, ModelSet, ReadResult, WriteRecord, WriteStats
from pmem.arms._registry import (
    ARM_NAMES,
    NEEDS_A_MODEL,
    PEER_ARM_NAMES,
    VARIANT_ARM_NAMES,
    ArmEntry,
    arm_label,
    arm_names,
    make_arm,
    register_arm,
    resolve_arm,
    sort_arms,
)

if TYPE_CHECKING:
    from pmem.arms._common import ArmBase

__all__ = [
    "ARM_NAMES",
    "NEEDS_A_MODEL",
    "PEER_ARM_NAMES",
    "VARIANT_ARM_NAMES",
    "Answer",
    "Arm",
    "ArmBase",
    "ArmEntry",
    "ModelSet",
    "ReadResult",
    "WriteRecord",
    "WriteStats",
    "arm_label",
    "arm_names",
    "make_arm",
    "register_arm",
    "resolve_arm",
    "sort_arms",
]


# the base class of arms that write through P-Mem's writer (the peer arms subclass it): imported on first
# use, so that `import pmem.arms` stays cheap (the report only needs names)
__getattr__ = lazy_exports("pmem.arms", {"ArmBase": "_common"})
