"""The judging pass: questions that need a model judge are judged after answering, from results/.

One answer is judged by :func:`judge_answer`: LoCoMo's deterministic rules first
(:func:`pmem.bench.guard_verdict`: tags, keys, yes for no, another year, date or speaker), the judge
model for the rest. Verdicts go to ``judgments/`` (one row per question, judge model and
:data:`pmem.bench.JUDGE_VERSION`) and into ``results/``'s ``correct``, ``judge_*`` and ``alt_correct``
(against the question's other gold) columns, each affected part rewritten atomically. A verdict of
another version is judged again, and the first verdict replaced is kept in ``prior_correct``
(``pmem rejudge`` does this for a finished run). Judge calls go through the response cache and are
logged to ``requests/`` with purpose ``judge``, so a judge can be re-run for free or swapped (the judge
is not part of the run's identity) without regenerating answers. Where LoCoMo is judged, the judge is
also measured on the calibration set (:func:`pmem.bench.calibration_cases`) into ``calibration/``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from pmem._atomic import file_sha256
from pmem.bench import (
    JUDGE_MAX_TOKENS,
    JUDGE_VERSION,
    TOPICAL_EMBEDDER,
    CalibrationCase,
    Question,
    StaleValues,
    calibration_cases,
    guard_verdict,
    is_stale_prediction,
    judge_messages,
    locomo_judge_context,
    parse_judge_reply,
    parse_stale_values,
    stale_extraction_prompt,
    topical_verdict,
)
from pmem.models import CallContext, ResponseCache
from pmem.rundir import (
    CACHE,
    CALIBRATION,
    JUDGMENTS,
    LOGS,
    REQUESTS,
    RESPONSE_CACHE,
    RESULTS,
    STAGING,
    CalibrationRow,
    JudgmentRow,
    RequestRow,
    RowKeys,
    judge_file,
    record_digests,
)
from pmem.rundir import columns as C
from pmem.runner._config import RoleSpec, RunOptions
from pmem.runner._execute import CallRecorder, RecordingChatModel
from pmem.runner._hosting import keep_server_logs
from pmem.runner._store import write_table

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from pmem.models import ChatModel, Embedder
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


@dataclass(frozen=True)
class Judged:
    """One verdict: ``rule`` is "model" or the deterministic rule that decided without a model."""

    verdict: bool | None
    rule: str
    raw: str | None = None
    error: str | None = None


async def judge_answer(
    model: ChatModel,
    *,
    benchmark: str,
    question_type: str,
    question_id: str,
    question: str,
    gold: str,
    prediction: str,
    context: CallContext | None = None,
    embedder: Embedder | None = None,
) -> Judged:
    """The verdict on one answer: LoCoMo's rules where one applies, else the judge model.

    ``embedder`` (one :func:`measures_topics` accepts) adds the rule for answers about the topic only. A reply that says neither yes nor no is recorded (``raw``) with ``verdict`` None and an error:
    the answer counts as not judged, never as wrong or right."""
    if benchmark == "locomo":
        ruled = guard_verdict(question, gold, prediction, locomo_judge_context(question_id))
        if ruled is None and embedder is not None:
            g, r, q = await embedder.embed([gold, prediction, question])
            ruled = topical_verdict(gold, prediction, float(g @ r), float(q @ r))
        if ruled is not None:
            return Judged(ruled.correct, ruled.rule)
    messages = judge_messages(question_type, question_id, question, gold, prediction, benchmark=benchmark)
    c = await model.complete(
        messages, purpose="judge", max_tokens=JUDGE_MAX_TOKENS, temperature=0.0, context=context
    )
    if c.error is not None:
        return Judged(None, "model", c.text or None, c.error)
    verdict = parse_judge_reply(c.text)
    error = None if verdict is not None else "the judge's reply says neither yes nor no"
    return Judged(verdict, "model", c.text, error)


def measures_topics(embedder_id: str | None) -> bool:
    """Whether the topical rule applies under this embedder: the one it was measured with
    (:data:`pmem.bench.TOPICAL_EMBEDDER`); under another its margin means nothing and it is left out."""
    return embedder_id is not None and TOPICAL_EMBEDDER in embedder_id.lower()


def judge_version(embedder_id: str | None) -> str:
    """The version a verdict is recorded under: the prompts' and rules' (:data:`JUDGE_VERSION`), and
    whether the topical rule applied."""
    return f"{JUDGE_VERSION}+topical" if measures_topics(embedder_id) else JUDGE_VERSION


async def judge_calibration(
    model: ChatModel, cases: list[CalibrationCase], concurrency: int = 8, embedder: Embedder | None = None
) -> list[tuple[CalibrationCase, Judged]]:
    """The judge on every calibration case (LoCoMo's rules, then the model), in the cases' order."""
    sem = asyncio.Semaphore(concurrency)

    async def one(c: CalibrationCase) -> Judged:
        async with sem:
            return await judge_answer(
                model,
                benchmark="locomo",
                question_type="",
                question_id=c.question_id,
                question=c.question,
                gold=c.gold,
                prediction=c.response,
                embedder=embedder,
            )

    judged = await asyncio.gather(*(one(c) for c in cases))
    return list(zip(cases, judged, strict=True))


@dataclass(frozen=True)
class _Known:
    verdict: bool
    rule: str | None
    raw: str | None
    superseded: str | None
    current: str | None
    alt_verdict: bool | None


def _existing_judgments(
    root: Path, judge_model: str, version: str
) -> tuple[dict[tuple[str, str], _Known], dict[tuple[str, str], tuple[str | None, str | None]]]:
    """This judge's verdicts of today's version, and the stale values any earlier judging extracted."""
    known: dict[tuple[str, str], _Known] = {}
    extracted: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for p in sorted((root / JUDGMENTS.name).glob("*.parquet")):
        for r in pq.read_table(p).to_pylist():
            key = (r["unit_id"], r["question_id"])
            if r.get("superseded") or r.get("current"):
                extracted[key] = (r.get("superseded"), r.get("current"))
            if (
                r["judge_model"] == judge_model
                and r.get("judge_version") == version
                and r["error"] is None
                and r["verdict"] is not None
            ):
                known[key] = _Known(
                    bool(r["verdict"]),
                    r.get("rule"),
                    r.get("raw"),
                    r.get("superseded"),
                    r.get("current"),
                    r.get("alt_verdict"),
                )
    return known, extracted


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
    """Judge every result row of a sweep with ``needs_judge``; returns how many rows got a new verdict.

    Where the benchmark names the evidence of a question, the judge also extracts the superseded and
    current values, and ``results.stale`` says whether a wrong answer gave the superseded one."""
    if plan.spec.judge is None:
        return 0
    return judge_results(
        plan.store.root,
        plan.spec.judge,
        plan.spec.run,
        embedder_spec=plan.spec.embedder,
        evidence=lambda: _evidence(plan),
        log=log,
    )


def _cache_path(root: Path, run: RunOptions, cache_path: str | None) -> str | None:
    if cache_path is not None:
        return cache_path
    if not run.cache:
        return None
    return run.cache_path or str(root / CACHE / RESPONSE_CACHE)


def judge_results(
    root: Path,
    judge_spec: RoleSpec,
    run: RunOptions,
    *,
    embedder_spec: RoleSpec | None = None,
    evidence: Callable[[], dict[tuple[str, str], str]] | None = None,
    cache_path: str | None = None,
    log: Any = print,
) -> int:
    """Judge the ``needs_judge`` rows of the run at ``root`` with today's judge; returns how many rows
    got a new verdict. Verdicts of today's judge and version already in ``judgments/`` are reused
    (resumable); the first verdict a new one replaces is kept in ``prior_correct``/``prior_judge``.
    ``embedder_spec``: the run's embedder, which the topical rule uses where it is the one the rule was
    measured with (:func:`measures_topics`)."""
    parts = sorted((root / RESULTS.name).glob("*.parquet"))
    todo: list[tuple[Path, dict[str, Any]]] = []
    for p in parts:
        t = pq.read_table(p)
        if C.NEEDS_JUDGE not in t.column_names or not pa.compute.any(t.column(C.NEEDS_JUDGE)).as_py():
            continue
        for r in t.to_pylist():
            if r[C.NEEDS_JUDGE]:
                todo.append((p, r))
    if not todo:
        return 0
    judge_model = judge_spec.model_id
    embedder_id = embedder_spec.model_id if embedder_spec is not None else None
    topical = measures_topics(embedder_id)
    version = judge_version(embedder_id)
    known, extracted = _existing_judgments(root, judge_model, version)
    ask = [(p, r) for p, r in todo if (r["unit_id"], r["question_id"]) not in known]
    with_locomo = any(r[C.BENCHMARK] == "locomo" for _, r in todo)
    calibrated = with_locomo and _calibrated(root, judge_model, version)
    log(
        f"[pmem judge] judging {len(todo)} answers with {judge_model}, judge version {version} "
        f"({len(todo) - len(ask)} already judged)"
    )
    found_evidence = evidence() if (ask and evidence is not None) else {}
    need_model = bool(ask) or (with_locomo and not calibrated)
    cached_at = _cache_path(root, run, cache_path) if need_model else None
    cache = ResponseCache(cached_at) if cached_at else None
    judge = judge_spec.chat_model(cache) if need_model else None
    embedder = embedder_spec.embedder_model(cache) if (need_model and topical and embedder_spec) else None

    async def run_all(judge: ChatModel) -> tuple[list[JudgmentRow], list[RequestRow], list[CalibrationRow]]:
        sem = asyncio.Semaphore(run.judge_concurrency)
        rows: list[JudgmentRow] = []
        reqs: list[RequestRow] = []

        async def one(r: dict[str, Any]) -> None:
            keys = RowKeys.from_row(r)
            rec = CallRecorder(keys)
            model = RecordingChatModel(judge, rec, CallContext(history_id=r["history_id"], arm=r["arm"]))
            q = _question_from_row(r)
            sup = cur = None
            alt: Judged | None = None
            async with sem:
                asked = {
                    "benchmark": r[C.BENCHMARK],
                    "question_type": q.qtype,
                    "question_id": q.id,
                    "question": q.text,
                    "prediction": r["prediction"] or "",
                }
                main = await judge_answer(model, gold=" | ".join(q.gold), embedder=embedder, **asked)
                if r.get(C.ALT_GOLD):
                    alt = await judge_answer(model, gold=r[C.ALT_GOLD], embedder=embedder, **asked)
                ev = found_evidence.get((r["history_id"], r["question_id"]))
                if ev is not None and main.error is None:
                    prompt = stale_extraction_prompt(q.text, " | ".join(q.gold), ev)
                    c2 = await model.complete(
                        [{"role": "user", "content": prompt}], purpose="judge", max_tokens=64, temperature=0.0
                    )
                    vals = parse_stale_values(c2.text)
                    sup, cur = vals.superseded, vals.current
            rows.append(
                JudgmentRow(
                    **keys.columns(),
                    question_id=r[C.QUESTION_ID],
                    judge_model=judge_model,
                    verdict=main.verdict,
                    raw=main.raw,
                    error=main.error,
                    superseded=sup,
                    current=cur,
                    judge_version=version,
                    rule=main.rule,
                    alt_verdict=None if alt is None else alt.verdict,
                    alt_raw=None if alt is None else alt.raw,
                    alt_rule=None if alt is None else alt.rule,
                )
            )
            reqs.extend(rec.rows)

        await asyncio.gather(*(one(r) for _, r in ask))
        cal: list[CalibrationRow] = []
        if with_locomo and not calibrated:
            cases = calibration_cases()
            for case, j in await judge_calibration(judge, cases, run.judge_concurrency, embedder):
                cal.append(
                    CalibrationRow(
                        judge_model=judge_model,
                        judge_version=version,
                        case_id=case.id,
                        kind=case.kind,
                        expected=case.expected,
                        verdict=j.verdict,
                        rule=j.rule,
                        raw=j.raw,
                        error=j.error,
                    )
                )
        return rows, reqs, cal

    new_rows, reqs, cal = asyncio.run(run_all(judge)) if judge is not None else ([], [], [])
    if judge is not None:
        # a hosted judge's replicas were started for this pass: their logs join the sweep's in logs/
        keep_server_logs(judge, root / LOGS, f"judge:{judge_model}")
        judge.stop()  # a vllm judge's replicas: the GPUs are not needed any more
    if embedder is not None:
        embedder.stop()
    tag = uuid.uuid4().hex[:12]
    for name, part in ((JUDGMENTS.name, new_rows), (REQUESTS.name, reqs), (CALIBRATION.name, cal)):
        if part:
            tmp = root / STAGING / f".{name}-{tag}.parquet"
            write_table(tmp, part, name)
            dest = root / judge_file(name, tag)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dest)
    for jr in new_rows:
        if jr.error is None and jr.verdict is not None:
            known[(jr.unit_id, jr.question_id)] = _Known(
                bool(jr.verdict), jr.rule, jr.raw, jr.superseded, jr.current, jr.alt_verdict
            )
    _fill_results(root, todo, known, extracted, judge_model, version)
    return len(new_rows)


def _calibrated(root: Path, judge_model: str, version: str) -> bool:
    for p in (root / CALIBRATION.name).glob("*.parquet"):
        t = pq.read_table(p, columns=["judge_model", "judge_version"]).to_pylist()
        if any(r["judge_model"] == judge_model and r["judge_version"] == version for r in t):
            return True
    return False


def _fill_results(
    root: Path,
    todo: list[tuple[Path, dict[str, Any]]],
    known: dict[tuple[str, str], _Known],
    extracted: dict[tuple[str, str], tuple[str | None, str | None]],
    judge_model: str,
    version: str,
) -> None:
    """Write the verdicts into results/ (:func:`update_results`)."""

    def judged(r: dict[str, Any]) -> bool:
        if not r[C.NEEDS_JUDGE]:
            return False
        key = (r["unit_id"], r["question_id"])
        new = _judged_columns(r, known.get(key), extracted.get(key), judge_model, version)
        if all(r.get(k) == v for k, v in new.items()):
            return False
        r.update(new)
        return True

    update_results(root, dict.fromkeys(p for p, _ in todo), judged)


def update_results(root: Path, parts: Iterable[Path], change: Callable[[dict[str, Any]], bool]) -> int:
    """Apply ``change`` (which edits a row in place and says whether it did) to every row of the
    results ``parts`` of the run at ``root``; each changed part is rewritten atomically, and the parts'
    new digests go into their commit records (else the report would find them altered: "checksum
    mismatch"). Returns how many rows changed."""
    rewritten: dict[str, str] = {}
    count = 0
    for p in parts:
        rows = pq.read_table(p).to_pylist()
        changed = sum(bool(change(r)) for r in rows)
        if changed:
            tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
            pq.write_table(RESULTS.table(rows), tmp, compression="zstd")
            os.replace(tmp, p)
            rewritten[p.relative_to(root).as_posix()] = file_sha256(p)
            count += changed
    record_digests(root, rewritten)
    return count


def _judged_columns(
    r: dict[str, Any],
    j: _Known | None,
    extracted: tuple[str | None, str | None] | None,
    judge_model: str,
    version: str,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # the first verdict that today's judge replaces is kept once, with the judge that gave it
    old_judge = r.get(C.JUDGE_MODEL)
    if (
        old_judge is not None
        and r.get(C.PRIOR_JUDGE) is None
        and (old_judge, r.get(C.JUDGE_VERSION)) != (judge_model, version)
    ):
        out[C.PRIOR_CORRECT] = r.get(C.CORRECT)
        out[C.PRIOR_JUDGE] = f"{old_judge} {r.get(C.JUDGE_VERSION) or 'before versions'}"
    if j is None:
        # not judged (yet): no verdict, rather than the one an earlier judge gave
        out.update(
            {
                C.CORRECT: None,
                C.JUDGE_MODEL: None,
                C.JUDGE_VERSION: None,
                C.JUDGE_RULE: None,
                C.JUDGE_RAW: None,
            }
        )
        return out
    sup, cur = (j.superseded, j.current) if (j.superseded or j.current) else (extracted or (None, None))
    stale = None
    if sup or cur:
        stale = is_stale_prediction(r["prediction"] or "", j.verdict, StaleValues(sup, cur))
    out.update(
        {
            C.CORRECT: j.verdict,
            C.STALE: stale,
            C.JUDGE_MODEL: judge_model,
            C.JUDGE_VERSION: version,
            C.JUDGE_RULE: j.rule,
            C.JUDGE_RAW: j.raw,
        }
    )
    if r.get(C.ALT_GOLD):
        out[C.ALT_CORRECT] = j.alt_verdict
    return out
