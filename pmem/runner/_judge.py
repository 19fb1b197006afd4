"""The judging pass: questions that need a model judge are judged after answering, from results/.

Verdicts go to ``judgments/`` (one row per question and judge model) and into ``results/``'s
``correct`` and ``judge_model`` columns (each affected part is rewritten atomically). Judge calls go
through the response cache and are logged to ``requests/`` with purpose ``judge``, so a judge can be
re-run for free or swapped (the judge is not part of the run's identity) without regenerating answers.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from pmem._atomic import file_sha256
from pmem.bench import Question, StaleValues, is_stale_prediction, parse_stale_values, stale_extraction_prompt
from pmem.models import CallContext
from pmem.rundir import (
    CACHE,
    JUDGMENTS,
    LOGS,
    REQUESTS,
    RESPONSE_CACHE,
    RESULTS,
    STAGING,
    JudgmentRow,
    RequestRow,
    RowKeys,
    judge_file,
    record_digests,
)
from pmem.rundir import columns as C
from pmem.runner import _bindings as B
from pmem.runner._execute import CallRecorder, RecordingChatModel
from pmem.runner._hosting import keep_server_logs
from pmem.runner._store import write_table

if TYPE_CHECKING:
    from pmem.models import ChatModel
    from pmem.runner._driver import Plan


def _question_from_row(row: dict[str, Any]) -> Any:
    return Question(
        id=row["question_id"],
        text=row["question"] or "",
        gold=tuple(row["gold_all"] or ()),
        qtype=row["question_type"] or "",
        after_event=int(row["after_event"] or 0),
        stale=tuple(row["stale_values"] or ()),
        needs_judge=True,
        question_date=row.get("question_date"),
        answer_class=row.get("answer_class"),
    )


def _existing_judgments(
    root: Path, judge_model: str
) -> dict[tuple[str, str], tuple[bool, str | None, str | None]]:
    out: dict[tuple[str, str], tuple[bool, str | None, str | None]] = {}
    for p in sorted((root / JUDGMENTS.name).glob("*.parquet")):
        t = pq.read_table(p)
        for r in t.to_pylist():
            if r["judge_model"] == judge_model and r["error"] is None and r["verdict"] is not None:
                out[(r["unit_id"], r["question_id"])] = (
                    bool(r["verdict"]),
                    r.get("superseded"),
                    r.get("current"),
                )
    return out


def _evidence(plan: Plan) -> dict[tuple[str, str], str]:
    """(history id, question id) -> the answer sessions' text, where the benchmark names them
    (LongMemEval's ``answer_session_ids``): what the judge reads to extract superseded/current values."""
    out: dict[tuple[str, str], str] = {}
    for h in plan.histories.values():
        for q in h.questions:
            ids = q.params.get("answer_session_ids") if isinstance(q.params, dict) else None
            if not q.needs_judge or not ids:
                continue
            wanted = set(map(str, ids))
            lines = [
                f"[{e.time or ''}] {e.role or e.source}: {e.text}"
                for e in h.events
                if e.session_id is not None and str(e.session_id) in wanted
            ]
            if lines:
                out[(h.id, q.id)] = "\n".join(lines)
    return out


def judge_pass(plan: Plan, *, log: Any = print) -> int:
    """Judge every result row with ``needs_judge``; returns how many rows got a new verdict.

    Where the benchmark names the evidence of a question, the judge also extracts the superseded and
    current values, and ``results.stale`` says whether a wrong answer gave the superseded one."""
    spec = plan.spec
    root = plan.store.root
    if spec.judge is None:
        return 0
    parts = sorted((root / RESULTS.name).glob("*.parquet"))
    todo: list[tuple[Path, dict[str, Any]]] = []
    for p in parts:
        t = pq.read_table(p)
        if not pa.compute.any(t.column("needs_judge")).as_py():
            continue
        for r in t.to_pylist():
            if r["needs_judge"]:
                todo.append((p, r))
    if not todo:
        return 0
    judge_model = spec.judge.model_id
    known = _existing_judgments(root, judge_model)
    ask = [(p, r) for p, r in todo if (r["unit_id"], r["question_id"]) not in known]
    log(
        f"[pmem sweep] judging {len(todo)} answers with {judge_model} ({len(todo) - len(ask)} already judged)"
    )
    evidence = _evidence(plan) if ask else {}
    cache_path = None
    if spec.run.cache:
        cache_path = spec.run.cache_path or str(root / CACHE / RESPONSE_CACHE)
    judge = B.build_chat(spec.judge, B.open_cache(cache_path)) if ask else None

    async def run_all(judge: ChatModel) -> tuple[list[JudgmentRow], list[RequestRow]]:
        sem = asyncio.Semaphore(spec.run.judge_concurrency)
        rows: list[JudgmentRow] = []
        reqs: list[RequestRow] = []

        async def one(r: dict[str, Any]) -> None:
            keys = RowKeys.from_row(r)
            rec = CallRecorder(keys)
            model = RecordingChatModel(judge, rec, CallContext(history_id=r["history_id"], arm=r["arm"]))
            q = _question_from_row(r)
            verdict, raw, err, sup, cur = None, None, None, None, None
            async with sem:
                try:
                    c = await model.complete(
                        B.judge_prompt(q, r["prediction"] or "", r[C.BENCHMARK]),
                        purpose="judge",
                        max_tokens=10,
                        temperature=0.0,
                    )
                    raw, verdict = c.text, B.judge_verdict(c.text)
                    ev = evidence.get((r["history_id"], r["question_id"]))
                    if ev is not None:
                        prompt = stale_extraction_prompt(q.text, " | ".join(q.gold), ev)
                        c2 = await model.complete(
                            [{"role": "user", "content": prompt}],
                            purpose="judge",
                            max_tokens=64,
                            temperature=0.0,
                        )
                        vals = parse_stale_values(c2.text)
                        sup, cur = vals.superseded, vals.current
                except Exception as exc:
                    err = f"{type(exc).__name__}: {exc}"[:1000]
                    verdict = None
            rows.append(
                JudgmentRow(
                    **keys.columns(),
                    question_id=r[C.QUESTION_ID],
                    judge_model=judge_model,
                    verdict=verdict,
                    raw=raw,
                    error=err,
                    superseded=sup,
                    current=cur,
                )
            )
            reqs.extend(rec.rows)

        await asyncio.gather(*(one(r) for _, r in ask))
        return rows, reqs

    # judge is None exactly when nothing is left to ask
    new_rows, reqs = asyncio.run(run_all(judge)) if judge is not None else ([], [])
    if judge is not None:
        # a hosted judge's replicas were started for this pass: their logs join the sweep's in logs/
        keep_server_logs(judge, root / LOGS, f"judge:{judge_model}")
        judge.stop()  # a vllm judge's replicas: the GPUs are not needed any more
    if new_rows:
        tag = uuid.uuid4().hex[:12]
        for name, part in ((JUDGMENTS.name, new_rows), (REQUESTS.name, reqs)):
            if part:
                tmp = root / STAGING / f".{name}-{tag}.parquet"
                write_table(tmp, part, name)
                dest = root / judge_file(name, tag)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, dest)
        for jr in new_rows:
            if jr.error is None and jr.verdict is not None:
                known[(jr.unit_id, jr.question_id)] = (bool(jr.verdict), jr.superseded, jr.current)
    # Fill results' verdict and stale columns, one atomic part rewrite at a time; then the parts' new
    # digests go into their commit records (else the report would find them altered: "checksum mismatch").
    rewritten: dict[str, str] = {}
    for p in dict.fromkeys(p for p, _ in todo):
        rows = pq.read_table(p).to_pylist()
        changed = False
        for r in rows:
            if not r["needs_judge"]:
                continue
            j = known.get((r["unit_id"], r["question_id"]))
            correct = None if j is None else j[0]
            stale = None
            if j is not None and (j[1] or j[2]):
                stale = is_stale_prediction(r["prediction"] or "", j[0], StaleValues(j[1], j[2]))
            model = judge_model if j is not None else None
            if (r["correct"], r["stale"], r["judge_model"]) != (correct, stale, model):
                r["correct"], r["stale"], r["judge_model"], changed = correct, stale, model, True
        if changed:
            tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
            pq.write_table(RESULTS.table(rows), tmp, compression="zstd")
            os.replace(tmp, p)
            rewritten[p.relative_to(root).as_posix()] = file_sha256(p)
    record_digests(root, rewritten)
    return len(new_rows)
