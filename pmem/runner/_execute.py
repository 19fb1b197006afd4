"""One history through one arm: ingest in arrival order, answer each question when it is asked.

This is the unit of work and of resume. It is plain asyncio (no Ray), so it can be driven in
process, by a runner actor, or from a test. Model calls are recorded per unit by thin wrappers around
the model layer's clients, so the request log of a history is exactly the calls its arm made.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pmem.bench import (
    ERASED_PARAMS,
    Score,
    UnknownBenchmarkError,
    artifact_bytes,
    evidence_turns,
    normalize_answer,
    score_question,
)
from pmem.graph import OPS
from pmem.models import (
    EMBED_PURPOSE,
    REQUEST_COLUMNS,
    CallContext,
    ChatModel,
    Completion,
    Embedder,
    Embedding,
    InnerLimits,
    ModelCallError,
    RequestLog,
)
from pmem.rundir import HistoryRow, ParamColumns, RequestRow, ResultRow, RowKeys, WriteRow
from pmem.rundir import columns as C

if TYPE_CHECKING:
    from pmem.arms import Arm
    from pmem.bench import History, Question, Score
    from pmem.models import CallOptions


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

    def keys(self, run_id: str) -> RowKeys:
        """The keys of every row this unit writes."""
        return RowKeys(
            run_id=run_id,
            unit_id=self.uid,
            benchmark=self.benchmark,
            subset=self.subset,
            history_id=self.history_id,
            arm=self.arm,
            model=self.model,
        )


@dataclass
class UnitOutput:
    """What one unit leaves: the rows of each dataset (typed, see :mod:`pmem.rundir`) and its graph."""

    unit: Unit
    history_row: HistoryRow
    results: list[ResultRow] = field(default_factory=list)
    writes: list[WriteRow] = field(default_factory=list)
    requests: list[RequestRow] = field(default_factory=list)
    graph: Any = None
    #: an arm's store that is not a graph, as one archive (a peer library's files: ``arm.store_archive()``)
    store: bytes | None = None

    # status, error and wall time are the history row's: one value each
    @property
    def status(self) -> str:
        return self.history_row.status

    @property
    def error(self) -> str | None:
        return self.history_row.error

    @property
    def wall_s(self) -> float:
        return self.history_row.wall_s or 0.0


#: what a request record gives its requests/ row (the unit's keys give history_id and arm)
_RECORD_COLUMNS = tuple(c for c in REQUEST_COLUMNS if c not in (C.HISTORY_ID, C.ARM))


class CallRecorder:
    """One unit's model calls: the model layer's :class:`~pmem.models.RequestLog`, read back as
    ``requests/`` rows under the unit's keys (its ``model`` column is the unit's agent)."""

    def __init__(self, keys: RowKeys) -> None:
        self.base = keys.request_columns()
        self.log = RequestLog()

    @property
    def rows(self) -> list[RequestRow]:
        return self.rows_of(history_failed=False)

    def rows_of(self, *, history_failed: bool) -> list[RequestRow]:
        """The unit's request rows, marked as written by a run of the history that failed or not."""
        return [
            RequestRow(
                **self.base, **{c: getattr(r, c) for c in _RECORD_COLUMNS}, history_failed=history_failed
            )
            for r in self.log.records()
        ]

    @property
    def calls(self) -> int:
        return len(self.log)

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.log.records())

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.log.records())

    @property
    def cached(self) -> int:
        return sum(1 for r in self.log.records() if r.cached)


class _UnitView(InnerLimits):
    """A shared model seen by one unit: its calls go to the unit's log under the unit's context (the
    limits are base-class attributes of the models, so ``__getattr__`` would not pass them through)."""

    def __init__(self, inner: Any, recorder: CallRecorder, context: CallContext) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self._log = recorder.log
        self._ctx = context

    def __getattr__(self, name: str) -> Any:  # backend extras (labels, capabilities) pass through
        return getattr(self.inner, name)


class RecordingChatModel(_UnitView, ChatModel):
    """A unit's view of a shared chat client: every call is logged into the unit's
    :class:`CallRecorder`, and a call that failed for good fails the history (raised, not returned)."""

    inner: ChatModel

    async def call(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        options = options if options.context is not None else dataclasses.replace(options, context=self._ctx)
        t0 = time.perf_counter()
        try:
            c = await self.inner.call(messages, options)
        except BaseException as exc:
            ctx = options.context or self._ctx
            self._log.add_failure(exc, ctx, options.purpose, self.model_id, time.perf_counter() - t0)
            raise
        self._log.add_completion(c, options.context)
        if c.error is not None and not c.overflow:
            # The model layer gave up (after its retries): the history fails with that error rather
            # than carrying an empty answer into the results. Parse failures are not errors here, nor
            # is a prompt that does not fit the model's context: that call's question records the error.
            msg = f"{options.purpose} call to {self.model_id} failed: {c.error}"
            raise ModelCallError(msg)
        return c


class RecordingEmbedder(_UnitView, Embedder):
    """A unit's view of a shared embedder: every HTTP request a call sent is one ``embed`` row of the
    unit's :class:`CallRecorder`, with the server's ``usage`` tokens (failed attempts too); the texts the
    vector cache answered are one ``cached`` row with estimated tokens, and an in-process model's call is
    one row (see :func:`pmem.models._log.embedding_records`). The report charges no embedding as a
    cost, so a warm cache (estimates where the cold run had the server's counts) moves no figure."""

    inner: Embedder

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        ctx = context or self._ctx
        t0 = time.perf_counter()
        try:
            embedding = await self.inner.embed_usage(texts, context=ctx)
        except BaseException as exc:
            self._log.add_failure(exc, ctx, EMBED_PURPOSE, self.model_id, time.perf_counter() - t0)
            raise
        self._log.add_embedding(embedding, ctx, self.model_id, time.perf_counter() - t0)
        return embedding


def score(benchmark: str, question: Question, prediction: str) -> Score:
    """The verdict by the benchmark's rules and its own string metrics (``f1``, LoCoMo's ``bleu1``).

    ``correct`` is None when a judge must decide and the benchmark gives no verdict of its own
    (LongMemEval); LoCoMo's F1-based verdict stands until a configured judge replaces it."""

    try:
        return score_question(benchmark, question, prediction)
    except UnknownBenchmarkError:
        pass
    # Plugin benchmarks: SubEM against the gold list, stale when wrong and an old value appears.
    if question.needs_judge:
        return Score(correct=None, stale=None)
    p = normalize_answer(prediction)
    correct = any(normalize_answer(g) in p for g in question.gold if g)
    stale = (
        None
        if not question.stale
        else (not correct and any(normalize_answer(v) in p for v in question.stale if v))
    )
    return Score(correct=correct, stale=stale)


def param_columns(benchmark: str, subset: str, params: dict[str, Any]) -> ParamColumns:
    """A history's parameters as the columns ``L``, ``d``, ``length`` (where known) and ``params`` (all, JSON)."""

    def _int(v: Any) -> int | None:
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    length = params.get(C.LENGTH)
    if length is None and benchmark == "factconsolidation" and "_" in subset:
        length = subset.split("_", 1)[1]
    return ParamColumns(
        L=_int(params.get(C.L)),
        d=_int(params.get(C.D)),
        length=None if length is None else str(length),
        params=json.dumps(params, sort_keys=True, default=str),
    )


#: the per-question write-path audit an arm reports (``extra()["question_audit"][question_id]``) -> results/
QUESTION_AUDIT = {
    "gold_in_active_cell": C.AUDIT_GOLD_IN_ACTIVE_CELL,
    "gold_in_matching_cell": C.AUDIT_GOLD_IN_MATCHING_CELL,
    "stale_sibling": C.AUDIT_STALE_SIBLING,
}
#: the arm's audit of its whole store (``arm.audit(history)``) -> histories/
STORE_AUDIT = {
    "gold_keys": C.AUDIT_GOLD_KEYS,
    "overwritten_keys": C.AUDIT_OVERWRITTEN_KEYS,
    "active_items": C.AUDIT_ACTIVE_ITEMS,
    "gold_in_active_cell": C.AUDIT_GOLD_IN_ACTIVE_CELL,
    "gold_in_matching_cell": C.AUDIT_GOLD_IN_MATCHING_CELL,
    "stale_sibling_rate": C.AUDIT_STALE_SIBLING_RATE,
}


def _question_audit(qa: Any) -> dict[str, Any]:
    """An arm's audit of one question as results/ columns (booleans only; anything else is not an answer).

    ``dict[str, Any]`` like :meth:`RowKeys.columns`: the column names are data (:data:`QUESTION_AUDIT`), so
    mypy cannot match them to ResultRow's fields; the dataset schema checks the values when they are written.
    """
    if not isinstance(qa, dict):
        return {}
    return {col: qa[k] for k, col in QUESTION_AUDIT.items() if isinstance(qa.get(k), bool)}


def failure_row(run_id: str, unit: Unit, history: History, error: str) -> HistoryRow:
    """The histories/ row of a unit that failed before it could run (its runner died too often)."""
    return HistoryRow(
        **unit.keys(run_id).columns(),
        status="failed",
        error=error,
        attempt=unit.attempt,
        n_events=len(history.events),
        n_questions=len(history.questions),
        **param_columns(unit.benchmark, unit.subset, {**history.params, **dict(unit.params)}).columns(),
        finished_at=time.time(),
    )


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
            vals.add(normalize_answer(str(cell.value)))
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
    params = {**history.params, **dict(unit.params)}
    pcols = param_columns(unit.benchmark, unit.subset, params).columns()
    keys = unit.keys(run_id).columns()
    status, error = "complete", None
    results: list[ResultRow] = []
    writes: list[WriteRow] = []
    graph = None
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
            held: bytes | None = None  # what the arm retains, read once per boundary that needs it
            for q in asked[boundary]:
                artifact = None
                if q.params and hasattr(arm, "retained") and any(k in q.params for k in ERASED_PARAMS):
                    if held is None:
                        held = arm.retained()
                    artifact = artifact_bytes(held, q)
                ans = await arm.answer(q)
                verdict = score(unit.benchmark, q, ans.prediction)
                correct, stale = verdict.correct, verdict.stale
                alt = q.alt_gold
                alt_verdict = None
                if alt is not None:
                    alt_verdict = score(
                        unit.benchmark, dataclasses.replace(q, gold=(alt[1],)), ans.prediction
                    )
                n_correct += int(bool(correct))
                gold_in = stale_in = None
                if state_values is not None:
                    gold_in = any(normalize_answer(g) in state_values for g in q.gold)
                    stale_in = any(normalize_answer(v) in state_values for v in q.stale) if q.stale else None
                results.append(
                    ResultRow(
                        **keys,
                        question_id=q.id,
                        question_type=q.qtype,
                        question=q.text,
                        prediction=ans.prediction,
                        gold=q.gold[0] if q.gold else None,
                        gold_all=tuple(q.gold),
                        stale_values=tuple(q.stale),
                        correct=correct,
                        stale=stale,
                        needs_judge=bool(q.needs_judge),
                        judge_model=None,
                        answer_class=q.answer_class,
                        question_date=q.question_date,
                        after_event=q.after_event,
                        read_tokens=int(ans.read.tokens),
                        read_chars=int(ans.read.chars),
                        read_items=len(ans.read.items),
                        read_context=ans.read.text,
                        read_cites=tuple(ans.read.cites),
                        evidence_turns=evidence_turns(q),
                        answer_error=ans.error,
                        **pcols,
                        gold_in_state=gold_in,
                        stale_in_state=stale_in,
                        artifact_bytes=artifact,
                        f1=verdict.f1,
                        bleu1=verdict.bleu1,
                        raw=ans.raw or None,
                        alt_gold_kind=None if alt is None else alt[0],
                        alt_gold=None if alt is None else alt[1],
                        alt_f1=None if alt_verdict is None else alt_verdict.f1,
                        # a judged question's verdict comes from the judge; else the benchmark's own
                        alt_correct=None if alt_verdict is None or q.needs_judge else alt_verdict.correct,
                    )
                )
        if pos < len(events):
            await arm.ingest(events[pos:])
        extra = _jsonable(arm.extra() or {})
        audit = extra.pop("question_audit", None) if isinstance(extra, dict) else None
        if isinstance(audit, dict):
            results = [dataclasses.replace(r, **_question_audit(audit.get(r.question_id))) for r in results]
        store_audit = _store_audit(arm, history)
        stats = arm.write_stats()
        writes = [
            WriteRow(
                **keys,
                seq=w.seq,
                op=w.op,
                key=w.key,
                value=None if w.value is None else str(w.value),
                applied=bool(w.applied),
                reason=w.reason,
            )
            for w in arm.write_log()
        ]
        graph = arm.graph()
        archive = getattr(arm, "store_archive", None)  # what the memory holds, when it is not a graph
        store = archive() if archive is not None and graph is None else None
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        status = "failed"
        store_audit = {}
        # the message last (summaries show the last line), a few frames before it for debugging
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
        error = "".join(frames).strip()[-2000:]
        results, writes, graph, store = [], [], None, None
        stats, extra = None, {}
    close = getattr(arm, "aclose", None)  # an arm that holds a server or files (the peer arms)
    if close is not None:
        try:
            await close()
        except Exception as exc:  # an arm that cannot release what it holds fails the history
            status, error = "failed", f"closing the arm: {type(exc).__name__}: {exc}"
            results, writes, graph, store = [], [], None, None
    wall_s = time.perf_counter() - t0
    ops = dict(stats.ops) if stats is not None else {}
    # columns named by data (pmem.graph.OPS, STORE_AUDIT), as in _question_audit: typed by the schema on write
    op_columns: dict[str, Any] = {C.op_column(op): int(ops.get(op, 0)) if stats else None for op in OPS}
    audit_columns: dict[str, Any] = {col: store_audit.get(k) for k, col in STORE_AUDIT.items()}
    history_row = HistoryRow(
        **keys,
        status=status,
        error=error,
        attempt=unit.attempt,
        wall_s=wall_s,
        state_bytes=None,
        state_path=None,
        n_events=len(events),
        n_questions=len(history.questions),
        n_correct=n_correct if status == "complete" else None,
        model_calls=recorder.calls,
        prompt_tokens=recorder.prompt_tokens,
        completion_tokens=recorder.completion_tokens,
        cached_calls=recorder.cached,
        write_model_calls=stats.model_calls if stats else None,
        write_prompt_tokens=stats.prompt_tokens if stats else None,
        write_completion_tokens=stats.completion_tokens if stats else None,
        facts=stats.facts if stats else None,
        cells=stats.cells if stats else None,
        **op_columns,
        ops=json.dumps(ops, sort_keys=True) if stats else None,
        **audit_columns,
        extra=json.dumps(extra, sort_keys=True, default=str) if extra else None,
        **pcols,
        runner=None,
        finished_at=time.time(),
    )
    return UnitOutput(
        unit, history_row, results, writes, recorder.rows_of(history_failed=status == "failed"), graph, store
    )
