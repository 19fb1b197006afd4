"""Memory arms behind one interface: P-Mem's write and read paths and the baseline memory designs.

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

Arm names (DESIGN.md): see :data:`ARM_NAMES`; docs/arms.md describes each one and its options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pmem.arms._base import Answer, Arm, ModelSet, ReadResult, WriteRecord, WriteStats
from pmem.arms._prompts import TEMPLATES, build_messages, prompt_hashes, prompt_templates_hash

#: name -> (module:class, fixed options). User options override nothing fixed here.
_ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "pmem": ("_pmem:PMemArm", {}),
    "pmem-iterative": ("_pmem:PMemArm", {"read": "iterative"}),
    "pmem-turn-prune": ("_pmem:PMemArm", {"read": "turns"}),
    "pmem-no-retention": ("_pmem:PMemArm", {"retention": False}),
    "pmem-no-identity": ("_pmem:PMemArm", {"identity": False}),
    "pmem-oracle": ("_pmem:PMemArm", {"write": "oracle"}),
    "no-memory": ("_baselines:NoMemoryArm", {}),
    "long-context": ("_baselines:LongContextArm", {}),
    "raw": ("_baselines:RawArm", {}),
    "raw-ordered": ("_baselines:RawArm", {"ordered": True}),
    "chunks": ("_baselines:ChunksArm", {}),
    "crud": ("_baselines:CrudArm", {}),
    "add-only": ("_baselines:AddOnlyArm", {}),
    "bitemporal": ("_baselines:BitemporalArm", {}),
}

#: Every arm name, in DESIGN.md's order.
ARM_NAMES: tuple[str, ...] = tuple(_ARMS)


def make_arm(name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> Arm:
    """A fresh arm (one per history). ``options`` are the arm's ``[arm_options.NAME]`` table."""
    import importlib

    try:
        target, fixed = _ARMS[name]
    except KeyError:
        msg = f"unknown arm {name!r}; known: {', '.join(ARM_NAMES)}"
        raise ValueError(msg) from None
    module, cls = target.split(":")
    klass = getattr(importlib.import_module(f"pmem.arms.{module}"), cls)
    merged = {**dict(options or {}), **fixed}
    return klass(name, models, merged)


__all__ = [
    "ARM_NAMES",
    "TEMPLATES",
    "Answer",
    "Arm",
    "ModelSet",
    "ReadResult",
    "WriteRecord",
    "WriteStats",
    "build_messages",
    "make_arm",
    "prompt_hashes",
    "prompt_templates_hash",
]
