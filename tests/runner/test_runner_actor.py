"""The runner actor in process (no Ray): what a failed history leaves in requests/, and live call counts."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from runner_plugins import TinyArm

from pmem.arms._base import Answer, ModelSet
from pmem.bench import iter_histories
from pmem.bench._types import History, Question
from pmem.models._spec import ModelSpec
from pmem.report._load import open_run
from pmem.rundir import columns as C
from pmem.runner._actor import Runner
from pmem.runner._config import RoleSpec
from pmem.runner._execute import Unit
from pmem.runner._store import RunStore


class FailingTiny(TinyArm):
    """The tiny arm, whose answers fail (after its extract calls) when ``fail`` is set, and which waits
    for ``release`` (an asyncio.Event) after ingesting when one is given."""

    def __init__(self, models: ModelSet, options: dict[str, Any]) -> None:
        super().__init__(models, options)
        self.fail = bool(options.get("fail"))
        self.ingested: asyncio.Event | None = options.get("ingested")
        self.release: asyncio.Event | None = options.get("release")

    async def answer(self, question: Question) -> Answer:
        if self.ingested is not None and self.release is not None:
            self.ingested.set()
            await self.release.wait()
        if self.fail:
            msg = "the answer step broke"
            raise RuntimeError(msg)
        return await super().answer(question)


def make_failing(models: ModelSet, options: dict[str, Any]) -> FailingTiny:
    return FailingTiny(models, options)


ARM = f"{__name__}:make_failing"


def _runner(run_dir: Path, **options: Any) -> Runner:
    RunStore(run_dir).ensure()  # as the driver does before it starts runners
    return Runner(
        run_dir=str(run_dir),
        run_id="r",
        token="tok0123456789abcdef",
        index=0,
        agents=[RoleSpec("agent", ModelSpec("heuristic"))],
        embedder=RoleSpec("embedder", ModelSpec("hashing")),
        arm_options={ARM: options},
        in_flight=4,
        batch=1,
        flush_s=0.01,
        cache_path=None,
    )


def _history() -> tuple[Unit, History]:
    h = next(iter(iter_histories("alfworld-revision", "chains", L=2, cases=1)))
    unit = Unit(
        uid="u-fail",
        benchmark="alfworld-revision",
        subset="chains",
        history_id=h.id,
        arm=ARM,
        model="heuristic",
    )
    return unit, h


def _run(runner: Runner, unit: Unit, h: History) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        return await runner.run_unit(unit, h)

    try:
        return asyncio.run(go())
    finally:
        runner._io.shutdown()


def test_failed_history_keeps_its_requests_per_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    unit, h = _history()
    s = _run(_runner(run_dir, fail=True), unit, h)
    assert s["status"] == "failed" and s["calls"] > 0
    first = run_dir / "requests" / f"failed-{unit.uid}-0.parquet"
    t = pq.read_table(first)
    assert t.num_rows == s["calls"]
    assert set(t.column(C.HISTORY_FAILED).to_pylist()) == {True}
    assert set(t.column(C.UNIT_ID).to_pylist()) == {unit.uid}
    runner = _runner(run_dir)
    assert runner.store.failed() == {unit.uid}  # the requests file is no histories/failed-* row

    # failing again: from a resumed sweep (attempt 0 again) and after a runner death (attempt 1)
    _run(_runner(run_dir, fail=True), unit, h)
    _run(_runner(run_dir, fail=True), dataclasses.replace(unit, attempt=1), h)
    names = sorted(p.name for p in (run_dir / "requests").iterdir())
    assert names == [
        f"failed-{unit.uid}-0.2.parquet",
        f"failed-{unit.uid}-0.parquet",
        f"failed-{unit.uid}-1.parquet",
    ]
    assert pq.read_table(first).equals(t)  # the first run's evidence was not replaced

    # a later success drops the stale status row but keeps the failed runs' requests beside its own
    s = _run(_runner(run_dir), unit, h)
    assert s["status"] == "complete"
    store = _runner(run_dir).store
    store.recover()
    assert store.failed() == set() and store.completed() == {unit.uid}
    req = open_run(run_dir).frame("requests")
    assert req is not None
    flags = req.collect().get_column(C.HISTORY_FAILED).to_list()
    assert flags.count(True) == 3 * t.num_rows and flags.count(False) == s["calls"]


def test_stats_counts_calls_of_histories_in_flight(tmp_path: Path) -> None:
    unit, h = _history()

    async def go() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        ingested, release = asyncio.Event(), asyncio.Event()
        runner = _runner(tmp_path / "run", ingested=ingested, release=release)
        try:
            task = asyncio.create_task(runner.run_unit(unit, h))
            await asyncio.wait_for(ingested.wait(), 60)
            during = await runner.stats()
            release.set()
            summary = await task
            after = await runner.stats()
        finally:
            runner._io.shutdown()
        return during, summary, after

    during, summary, after = asyncio.run(go())
    calls, tokens, _cached = during["live"][unit.uid]
    assert calls > 0 and tokens > 0
    assert summary["calls"] > calls  # the answer's call came after
    assert after["live"] == {}
