"""Shared helpers of the arms tests: the heuristic model set and a small-batch driver."""

from __future__ import annotations

import asyncio
from typing import Any

from pmem.arms import ModelSet
from pmem.arms._harness import run_many
from pmem.models import make_chat_model, make_embedder

_AGENT = make_chat_model("heuristic")
_EMBED = make_embedder("hashing")


def models() -> ModelSet:
    return ModelSet(_AGENT, _EMBED)


def run(arm: str, histories: list[Any], **kw: Any) -> list[dict[str, Any]]:
    return asyncio.run(run_many(arm, models, histories, **kw))


def rate(rows: list[dict[str, Any]], qtype: str | None = None, field: str = "correct") -> float:
    vals = [bool(r[field]) for r in rows if qtype is None or r["qtype"] == qtype]
    assert vals, f"no rows for {qtype}"
    return sum(vals) / len(vals)
