"""Running a peer arm the way a runner does: recorded models around the given agent, ``run_unit``."""

from __future__ import annotations

import asyncio
from typing import Any

from pmem.arms import ModelSet, make_arm
from pmem.bench import iter_histories
from pmem.models import make_embedder
from pmem.models._types import CallContext
from pmem.runner._execute import CallRecorder, RecordingChatModel, RecordingEmbedder, Unit, run_unit


def histories(n: int, L: int = 2) -> list[Any]:
    return list(iter_histories("alfworld-revision", "chains", L=L, cases=n))


def run(arm: str, agent: Any, items: list[Any]) -> list[tuple[Any, CallRecorder]]:
    """Each history through a fresh ``arm``, in order: (the unit's output, its call recorder)."""

    async def go() -> list[tuple[Any, CallRecorder]]:
        out = []
        for h in items:
            unit = Unit(
                uid=f"u-{h.id}",
                benchmark="alfworld-revision",
                subset="chains",
                history_id=h.id,
                arm=arm,
                model="m",
            )
            recorder = CallRecorder(unit.keys("run"))
            ctx = CallContext(history_id=h.id, arm=arm)
            models = ModelSet(
                RecordingChatModel(agent, recorder, ctx),
                RecordingEmbedder(make_embedder("hashing"), recorder, ctx),
            )
            out.append((await run_unit(unit, h, make_arm(arm, models), recorder, run_id="run"), recorder))
        return out

    return asyncio.run(go())
