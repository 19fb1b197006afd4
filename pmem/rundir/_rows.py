"""One typed row per dataset of ``runs/<id>/``: the field names are the columns, the annotations their types.

Each row type is the single definition of its dataset: :mod:`pmem.rundir._datasets` derives the Arrow
schema from it (field order = column order; ``str``/``int``/``float``/``bool``/``tuple[str, ...]`` map to
string/int64/float64/bool/list<string>). A field without a default is a *required* column: a writer must
give it (``None`` allowed where the type says so, e.g. ``correct`` before a judge has decided). DESIGN.md's
columns are all required. Fields with a default are the runner's extras, null when not given.

The rows are frozen: a writer builds a row once it knows its values, or derives a new one with
:func:`dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pmem.rundir import columns as C


@dataclass(frozen=True, kw_only=True, slots=True)
class _HistoryKeys:
    """The leading columns of every dataset: which run, unit, history and arm a row belongs to."""

    run_id: str
    unit_id: str
    benchmark: str
    subset: str
    history_id: str
    arm: str


@dataclass(frozen=True, kw_only=True, slots=True)
class _UnitKeys(_HistoryKeys):
    """... and the unit's agent model: the leading columns of every dataset but requests/."""

    model: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RowKeys(_UnitKeys):
    """The keys of every row of one unit of work: one history through one arm with one agent model."""

    def columns(self) -> dict[str, Any]:
        """The keys as columns of results/, writes/, histories/ and judgments/ (``model`` = the agent)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def request_columns(self) -> dict[str, Any]:
        """The keys as columns of requests/, where ``model`` is the model called: the agent is ``agent_model``."""
        out = self.columns()
        out[C.AGENT_MODEL] = out.pop(C.MODEL)
        return out

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RowKeys:
        """The keys of a row read back from results/, writes/, histories/ or judgments/."""
        return cls(**{f.name: row[f.name] for f in fields(cls)})


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamColumns:
    """A history's benchmark parameters as columns: ``L``, ``d``, ``length`` where known, all as JSON."""

    L: int | None
    d: int | None
    length: str | None
    params: str | None

    def columns(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class ResultRow(_UnitKeys):
    """results/: one row per question answered."""

    question_id: str
    question_type: str
    question: str | None
    prediction: str | None
    gold: str | None
    gold_all: tuple[str, ...] | None = None
    stale_values: tuple[str, ...] | None = None
    #: None until a judge decides (``needs_judge``), or when it gave no verdict
    correct: bool | None
    #: None where the benchmark defines no stale answer for the question
    stale: bool | None
    needs_judge: bool | None = None
    judge_model: str | None = None
    #: the judge's prompts and rules (pmem.bench.JUDGE_VERSION) that gave ``correct``
    judge_version: str | None = None
    #: what decided ``correct``: "model", or the deterministic rule that needed no model ("bare-tag", ...)
    judge_rule: str | None = None
    #: the judge model's reply (null where a rule decided)
    judge_raw: str | None = None
    #: the first verdict a re-judging replaced (``pmem rejudge``), and its judge "<model> <version>"
    prior_correct: bool | None = None
    prior_judge: str | None = None
    answer_class: str | None = None
    question_date: str | None = None
    after_event: int | None = None
    read_tokens: int | None
    read_chars: int | None
    read_items: int | None = None
    read_context: str | None = None
    read_cites: tuple[str, ...] | None = None
    evidence_turns: tuple[str, ...] | None = None
    answer_error: str | None = None
    L: int | None
    d: int | None
    length: str | None
    params: str | None
    gold_in_state: bool | None = None
    stale_in_state: bool | None = None
    audit_gold_in_active_cell: bool | None = None
    audit_gold_in_matching_cell: bool | None = None
    audit_stale_sibling: bool | None = None
    artifact_bytes: int | None = None
    f1: float | None = None
    bleu1: float | None = None
    raw: str | None = None
    #: the question's other gold, where the benchmark has two that differ (LoCoMo: "original" or
    #: "audited"), with the answer's F1 and the judge's verdict against it
    alt_gold_kind: str | None = None
    alt_gold: str | None = None
    alt_f1: float | None = None
    alt_correct: bool | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteRow(_UnitKeys):
    """writes/: one row per write operation of an arm."""

    seq: int
    op: str
    key: str | None
    value: str | None
    applied: bool
    reason: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestRow(_HistoryKeys):
    """requests/: one row per model call (``model`` is the model called; ``agent_model`` the history's)."""

    agent_model: str
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    latency_s: float
    error: str | None
    tokens_estimated: bool | None = None
    #: which HTTP request of its call this row is (1 = the first; retries and failovers count up); null
    #: for a call no server saw (a cache hit, a shared in-flight reply, an in-process model)
    http_attempt: int | None = None
    #: the server's HTTP status (null: no response, e.g. a timeout or a refused connection)
    http_status: int | None = None
    #: the server's ``finish_reason`` (``length``: the reply hit ``max_tokens``)
    finish_reason: str | None = None
    #: why a reply asked for as JSON did not parse (null: it parsed, or no JSON was asked for)
    parse_error: str | None = None
    #: the raw reply, kept when it did not parse or was cut by ``max_tokens``
    reply: str | None = None
    #: the row was written by a run of its history that failed (kept as evidence, left out of costs)
    history_failed: bool | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryRow(_UnitKeys):
    """histories/: one row per run of a unit (complete, or failed with its error).

    The ``ops_<op>`` columns follow :data:`pmem.graph.OPS` (checked when the schema is built).
    """

    status: str
    error: str | None
    attempt: int
    wall_s: float | None = None
    state_bytes: int | None = None
    state_path: str | None = None
    n_events: int | None
    n_questions: int | None
    n_correct: int | None = None
    model_calls: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_calls: int | None = None
    write_model_calls: int | None = None
    write_prompt_tokens: int | None = None
    write_completion_tokens: int | None = None
    facts: int | None = None
    cells: int | None = None
    ops_accept: int | None = None
    ops_contest: int | None = None
    ops_reject: int | None = None
    ops_revoke: int | None = None
    ops_resolve: int | None = None
    ops_noop: int | None = None
    ops: str | None = None
    audit_gold_keys: int | None = None
    audit_overwritten_keys: int | None = None
    audit_active_items: int | None = None
    audit_gold_in_active_cell: float | None = None
    audit_gold_in_matching_cell: float | None = None
    audit_stale_sibling_rate: float | None = None
    extra: str | None = None
    L: int | None
    d: int | None
    length: str | None
    params: str | None
    runner: str | None = None
    finished_at: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class JudgmentRow(_UnitKeys):
    """judgments/: one row per (question, judge model)."""

    question_id: str
    judge_model: str
    verdict: bool | None
    raw: str | None
    error: str | None
    superseded: str | None = None
    current: str | None = None
    judge_version: str | None = None
    rule: str | None = None
    #: the verdict against the question's other gold (null where it has none)
    alt_verdict: bool | None = None
    alt_raw: str | None = None
    alt_rule: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrationRow:
    """calibration/: the run's judge on one case of the judge calibration set (answers whose verdict is
    known: :func:`pmem.bench.calibration_cases`)."""

    judge_model: str
    judge_version: str
    case_id: str
    kind: str
    #: whether the case's answer is right
    expected: bool
    verdict: bool | None
    #: "model", or the deterministic rule that decided
    rule: str
    raw: str | None
    error: str | None
