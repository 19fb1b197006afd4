"""One history through one arm: ingest in arrival order, answer each question when it is asked.

This is the unit of work and of resume. It is plain asyncio (no Ray), so it can be driven in
process, by a runner actor, or from a test. Model calls are recorded per unit by thin wrappers around
the model layer's clients, so the request log of a history is exactly the calls its arm made.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pmem.models._types import CallContext, Completion

if TYPE_CHECKING:
    import numpy as np

    from pmem.arms._base import Arm
    from pmem.bench._types import History, Question


@dataclass(frozen=True)
class Unit:
    """One (history, arm, agent model) of a sweep. ``uid`` is stable across re-runs of one config."""

    uid: str
    benchmark: str
    subset: str
    history_id: str
    arm: str
    model: str
    params: tuple[tuple[str, Any], ...] = ()
    attempt: int = 0

    @property
    def group(self) -> tuple[str, str]:
        return (f"{self.benchmark}/{self.subset}", self.arm)


@dataclass
class UnitOutput:
    unit: Unit
    status: str = "complete"
    error: str | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    writes: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    history_row: dict[str, Any] = field(default_factory=dict)
    graph: Any = None
    wall_s: float = 0.0


def _estimate_tokens(texts: Sequence[str]) -> int:
    try:
        from pmem.models._tokens import estimate_tokens
    except ImportError:  # pragma: no cover - the model layer always has it
        return sum((len(t.encode()) + 3) // 4 for t in texts)
    return sum(estimate_tokens(t) for t in texts)


class CallRecorder:
    """Collects one unit's model calls as ``requests/`` rows."""

    def __init__(self, base: dict[str, Any]) -> None:
        self.base = base
        self.rows: list[dict[str, Any]] = []
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached = 0

    def add(self, *, purpose: str, model: str, prompt_tokens: int, completion_tokens: int, cached: bool,
            latency_s: float, error: str | None, tokens_estimated: bool) -> None:
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.cached += int(cached)
        self.rows.append({
            **self.base,
            "purpose": purpose,
            "model": model,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "cached": cached,
            "latency_s": latency_s,
            "error": error,
            "tokens_estimated": tokens_estimated,
        })


class RecordingChatModel:
    """A chat model that records every call into a unit's :class:`CallRecorder`."""

    def __init__(self, inner: Any, recorder: CallRecorder, context: CallContext) -> None:
        self._inner = inner
        self._rec = recorder
        self._ctx = context
        self.model_id = inner.model_id

    def __getattr__(self, name: str) -> Any:  # backend extras (labels, capabilities) pass through
        return getattr(self._inner, name)

    async def complete(self, messages: Sequence[dict[str, str]], *, purpose: str, max_tokens: int = 256,
                       temperature: float = 0.0, schema: dict[str, Any] | None = None,
                       context: CallContext | None = None) -> Completion:
        t0 = time.perf_counter()
        try:
            c = await self._inner.complete(messages, purpose=purpose, max_tokens=max_tokens,
                                           temperature=temperature, schema=schema, context=context or self._ctx)
        except BaseException as exc:
            self._rec.add(purpose=purpose, model=self.model_id, prompt_tokens=0, completion_tokens=0, cached=False,
                          latency_s=time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}"[:500],
                          tokens_estimated=False)
            raise
        self._rec.add(purpose=purpose, model=c.model, prompt_tokens=c.prompt_tokens,
                      completion_tokens=c.completion_tokens, cached=c.cached, latency_s=c.latency_s,
                      error=c.error, tokens_estimated=c.tokens_estimated)
        if c.error is not None:
            # The model layer gave up (after its retries): the history fails with that error rather
            # than carrying an empty answer into the results. Parse failures are not errors here.
            from pmem.models._errors import ModelCallError

            raise ModelCallError(f"{purpose} call to {self.model_id} failed: {c.error}")
        return c


class RecordingEmbedder:
    """An embedder that records every batch as one ``embed`` call (tokens estimated)."""

    def __init__(self, inner: Any, recorder: CallRecorder, context: CallContext) -> None:
        self._inner = inner
        self._rec = recorder
        self._ctx = context
        self.model_id = inner.model_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def embed(self, texts: Sequence[str], *, context: CallContext | None = None) -> np.ndarray:
        t0 = time.perf_counter()
        error = None
        try:
            return await self._inner.embed(texts, context=context or self._ctx)
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            self._rec.add(purpose="embed", model=self.model_id, prompt_tokens=_estimate_tokens(list(texts)),
                          completion_tokens=0, cached=False, latency_s=time.perf_counter() - t0, error=error,
                          tokens_estimated=True)


def _norm(text: str) -> str:
    try:
        from pmem.bench._scoring import normalize_answer
    except ImportError:  # pragma: no cover
        return " ".join(text.lower().split())
    return normalize_answer(text)


def score(benchmark: str, question: Question, prediction: str) -> tuple[bool | None, bool | None]:
    """(correct, stale) by the benchmark's rules; ``correct`` is None when a judge must decide."""
    if question.needs_judge:
        return None, None
    try:
        from pmem.bench._scoring import score_question

        s = score_question(benchmark, question, prediction)
        return s.correct, s.stale
    except (ImportError, ValueError):
        # Plugin benchmarks: SubEM against the gold list, stale when wrong and an old value appears.
        p = _norm(prediction)
        correct = any(_norm(g) in p for g in question.gold if g)
        stale = None if not question.stale else (not correct and any(_norm(v) in p for v in question.stale if v))
        return correct, stale


def param_columns(benchmark: str, subset: str, params: dict[str, Any]) -> dict[str, Any]:
    def _int(v: Any) -> int | None:
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    length = params.get("length")
    if length is None and benchmark == "factconsolidation" and "_" in subset:
        length = subset.split("_", 1)[1]
    return {
        "L": _int(params.get("L")),
        "d": _int(params.get("d")),
        "length": None if length is None else str(length),
        "params": json.dumps(params, sort_keys=True, default=str),
    }


def _frontier_values(graph: Any) -> set[str] | None:
    if graph is None:
        return None
    try:
        cells = graph.frontier()
    except Exception:
        return None
    vals = set()
    for cell in cells.values():
        if getattr(cell, "status", "active") in ("active", "contested") and cell.value is not None:
            vals.add(_norm(str(cell.value)))
    return vals


def _store_audit(arm: Any, history: Any) -> dict[str, Any]:
    """The arm's audit of its whole store against the stream (``{}`` where it defines none)."""
    fn = getattr(arm, "audit", None)
    if fn is None:
        return {}
    value = fn(history)
    return dict(value) if isinstance(value, dict) else {}


def _jsonable(obj: Any) -> Any:
    try:
        return json.loads(json.dumps(obj, default=str))
    except (TypeError, ValueError):
        return str(obj)


async def run_unit(
    unit: Unit,
    history: History,
    arm: Arm,
    recorder: CallRecorder,
    *,
    run_id: str,
) -> UnitOutput:
    """Run one history through ``arm``; never raises for a failing history (the output says failed)."""
    t0 = time.perf_counter()
    out = UnitOutput(unit=unit)
    params = {**history.params, **dict(unit.params)}
    pcols = param_columns(unit.benchmark, unit.subset, params)
    keys = {
        "run_id": run_id,
        "unit_id": unit.uid,
        "benchmark": unit.benchmark,
        "subset": unit.subset,
        "history_id": unit.history_id,
        "arm": unit.arm,
        "model": unit.model,
    }
    events = list(history.events)
    asked: dict[int, list[Question]] = {}
    for q in history.questions:
        asked.setdefault(min(q.after_event, len(events) - 1), []).append(q)
    n_correct = 0
    try:
        pos = 0
        for boundary in sorted(asked):
            if boundary >= pos:
                await arm.ingest(events[pos : boundary + 1])
                pos = boundary + 1
                await asyncio.sleep(0)  # let other histories' model calls progress between slices
            state_values = _frontier_values(arm.graph())
            for q in asked[boundary]:
                ans = await arm.answer(q)
                correct, stale = score(unit.benchmark, q, ans.prediction)
                n_correct += int(bool(correct))
                gold_in = stale_in = None
                if state_values is not None:
                    gold_in = any(_norm(g) in state_values for g in q.gold)
                    stale_in = any(_norm(v) in state_values for v in q.stale) if q.stale else None
                out.results.append({
                    **keys,
                    "question_id": q.id,
                    "question_type": q.qtype,
                    "question": q.text,
                    "prediction": ans.prediction,
                    "gold": q.gold[0] if q.gold else None,
                    "gold_all": list(q.gold),
                    "stale_values": list(q.stale),
                    "correct": correct,
                    "stale": stale,
                    "needs_judge": bool(q.needs_judge),
                    "judge_model": None,
                    "answer_class": q.answer_class,
                    "question_date": q.question_date,
                    "after_event": q.after_event,
                    "read_tokens": int(ans.read.tokens),
                    "read_chars": int(ans.read.chars),
                    "read_items": len(ans.read.items),
                    "answer_error": None,
                    **pcols,
                    "gold_in_state": gold_in,
                    "stale_in_state": stale_in,
                    "audit": None,
                    "raw": ans.raw or None,
                })
        if pos < len(events):
            await arm.ingest(events[pos:])
        extra = _jsonable(arm.extra() or {})
        audit = extra.pop("question_audit", None) if isinstance(extra, dict) else None
        if isinstance(audit, dict):
            for row in out.results:
                qa = audit.get(row["question_id"])
                if isinstance(qa, dict):
                    row["audit"] = json.dumps(qa, sort_keys=True, default=str)
                    for k in ("gold_in_active_cell", "gold_in_matching_cell", "stale_sibling"):
                        if isinstance(qa.get(k), bool):
                            row[f"audit_{k}"] = qa[k]
        store_audit = _store_audit(arm, history)
        stats = arm.write_stats()
        for w in arm.write_log():
            out.writes.append({**keys, "seq": w.seq, "op": w.op, "key": w.key,
                               "value": None if w.value is None else str(w.value),
                               "applied": bool(w.applied), "reason": w.reason})
        out.graph = arm.graph()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        out.status = "failed"
        store_audit = {}
        # the message last (summaries show the last line), a few frames before it for debugging
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
        out.error = "".join(frames).strip()[-2000:]
        out.results, out.writes, out.graph = [], [], None
        stats, extra = None, {}
    out.wall_s = time.perf_counter() - t0
    out.requests = recorder.rows
    ops = dict(stats.ops) if stats is not None else {}
    out.history_row = {
        **keys,
        "status": out.status,
        "error": out.error,
        "attempt": unit.attempt,
        "wall_s": out.wall_s,
        "state_bytes": None,
        "state_path": None,
        "n_events": len(events),
        "n_questions": len(history.questions),
        "n_correct": n_correct if out.status == "complete" else None,
        "model_calls": recorder.calls,
        "prompt_tokens": recorder.prompt_tokens,
        "completion_tokens": recorder.completion_tokens,
        "cached_calls": recorder.cached,
        "write_model_calls": stats.model_calls if stats else None,
        "write_prompt_tokens": stats.prompt_tokens if stats else None,
        "write_completion_tokens": stats.completion_tokens if stats else None,
        "facts": stats.facts if stats else None,
        "cells": stats.cells if stats else None,
        **{f"ops_{op}": int(ops.get(op, 0)) if stats else None for op in
           ("accept", "reject", "revoke", "contest", "resolve", "noop")},
        "ops": json.dumps(ops, sort_keys=True) if stats else None,
        **{f"audit_{k}": store_audit.get(k) for k in (
            "gold_keys", "overwritten_keys", "active_items", "gold_in_active_cell", "gold_in_matching_cell",
            "stale_sibling_rate")},
        "audit": json.dumps(store_audit, sort_keys=True, default=str) if store_audit else None,
        "extra": json.dumps(extra, sort_keys=True, default=str) if extra else None,
        **pcols,
        "runner": None,
        "finished_at": time.time(),
    }
    return out
