"""A minimal in-process driver for the acceptance measurements (the runner is the real driver).

It feeds a history's events to an arm in the runner's order (ingest up to each question's
``after_event``, answer, continue) and scores answers with the benchmark's scorer. ``probe(arm, q)``
runs just before each question is answered (state checks such as "is v1 still stored?").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pmem.arms import make_arm
from pmem.bench import Event, score_question
from pmem.memory.writepath import template_facts

if TYPE_CHECKING:
    from pmem.arms._base import Arm, ModelSet
    from pmem.bench import History, Question

Probe = Callable[[Any, Any], dict[str, Any]]


async def run_history(arm: Arm, history: History, probe: Probe | None = None) -> list[dict[str, Any]]:

    events = list(history.events)
    asked: dict[int, list[Question]] = {}
    for q in history.questions:
        asked.setdefault(min(q.after_event, len(events) - 1), []).append(q)
    rows: list[dict[str, Any]] = []
    pos = 0
    for boundary in sorted(asked):
        if boundary >= pos:
            await arm.ingest(events[pos : boundary + 1])
            pos = boundary + 1
        for q in asked[boundary]:
            extra = probe(arm, q) if probe is not None else {}
            ans = await arm.answer(q)
            s = score_question(history.benchmark, q, ans.prediction)
            rows.append(
                {
                    "history": history.id,
                    "question": q.id,
                    "qtype": q.qtype,
                    "prediction": ans.prediction,
                    "correct": s.correct,
                    "stale": s.stale,
                    "read_chars": ans.read.chars,
                    "read_tokens": ans.read.tokens,
                    **history.params,
                    **extra,
                }
            )
    if pos < len(events):
        await arm.ingest(events[pos:])
    return rows


async def run_many(
    arm_name: str,
    models_for: Callable[[], ModelSet],
    histories: Iterable[History],
    options: dict[str, Any] | None = None,
    probe: Probe | None = None,
    concurrency: int = 32,
    after: Callable[[Any, History], Awaitable[None] | None] | None = None,
) -> list[dict[str, Any]]:
    """Every history through a fresh arm, ``concurrency`` histories at a time on one event loop."""

    sem = asyncio.Semaphore(concurrency)

    async def one(h: History) -> list[dict[str, Any]]:
        async with sem:
            arm = make_arm(arm_name, models_for(), options)
            rows = await run_history(arm, h, probe)
            if after is not None:
                res = after(arm, h)
                if asyncio.iscoroutine(res):
                    await res
            return rows

    out = await asyncio.gather(*(one(h) for h in histories))
    return [r for rows in out for r in rows]


def mean(values: Sequence[float | bool | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def store_values(arm: Any, key: str) -> tuple[set[str], set[str]]:
    """(values the arm holds as current for ``key``, every value it still stores for ``key``).

    P-Mem arms answer from their graph (head plus open alternatives; every version); item stores from
    their items (live ones; every retained one, invalidated edges included; deleted items are gone).
    """
    items = getattr(arm, "_items", None)
    if items is None:
        g = arm.graph()
        if g is None:
            return set(), set()
        cell = g.cell(key)
        current = set() if cell is None or cell.value is None else {cell.value, *cell.alternatives}
        return current, {v.value for v in g.versions(key)}

    current, ever = set(), set()
    for slot, it in enumerate(items):
        pairs = [(it.key, it.value)]
        if it.key is None and it.text:  # raw event items: read the event's own template
            pairs = [(f.key, f.value) for f in template_facts([Event(it.t, it.text)])]
        for k, v in pairs:
            if k == key and v is not None:
                ever.add(v)
                if arm.is_current(slot):
                    current.add(v)
    return current, ever
