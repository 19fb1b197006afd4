"""The runner awaits an arm's ``aclose`` when its history ends, complete or failed (a peer arm's proxy
and folder go with it), and an arm that cannot close fails its history."""

from __future__ import annotations

import asyncio
from typing import Any

from pmem.arms import ModelSet
from pmem.arms._baselines import NoMemoryArm
from pmem.bench import iter_histories
from pmem.models import make_chat_model, make_embedder
from pmem.runner._execute import CallRecorder, Unit, run_unit


class _Closing(NoMemoryArm):
    def __init__(self, fail_ingest: bool = False, fail_close: bool = False) -> None:
        super().__init__("closing", ModelSet(make_chat_model("heuristic"), make_embedder("hashing")))
        self.fail_ingest, self.fail_close, self.closed = fail_ingest, fail_close, 0

    async def _ingest_units(self, units: list[Any]) -> None:
        if self.fail_ingest:
            raise RuntimeError("ingest broke")

    async def aclose(self) -> None:
        self.closed += 1
        if self.fail_close:
            raise OSError("the folder is busy")


def _run(arm: _Closing) -> Any:
    h = next(iter(iter_histories("alfworld-revision", "chains", L=1, cases=1)))
    unit = Unit(
        uid="u", benchmark="alfworld-revision", subset="chains", history_id=h.id, arm="closing", model="m"
    )
    return asyncio.run(run_unit(unit, h, arm, CallRecorder(unit.keys("run")), run_id="run"))


def test_aclose_is_awaited_once_whether_the_history_completes_or_fails() -> None:
    ok, broken = _Closing(), _Closing(fail_ingest=True)
    assert _run(ok).history_row.status == "complete" and ok.closed == 1
    assert _run(broken).history_row.status == "failed" and broken.closed == 1


def test_an_arm_that_cannot_close_fails_its_history_with_the_reason() -> None:
    arm = _Closing(fail_close=True)
    out = _run(arm)
    assert out.history_row.status == "failed" and out.results == []
    assert out.history_row.error == "closing the arm: OSError: the folder is busy"
