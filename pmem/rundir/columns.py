"""Column names of a run's Parquet datasets, one constant per name (DESIGN.md, run directory contract).

Readers (the report, tests, notebooks) name a column through these constants rather than a string, so a
renamed or misspelt column fails at import or in review instead of silently reading nothing. A name that
two datasets share means the same thing in both (``error`` is the failure of the row's own subject: a
history, a model call or a judge call). The row types in :mod:`pmem.rundir._rows` define which dataset
carries which name and with which type; a test checks that the two agree.
"""

from __future__ import annotations

from typing import Final

# -- keys every dataset carries (the unit of work: one history through one arm with one agent model) --
RUN_ID: Final = "run_id"
UNIT_ID: Final = "unit_id"
BENCHMARK: Final = "benchmark"
SUBSET: Final = "subset"
HISTORY_ID: Final = "history_id"
ARM: Final = "arm"
#: the agent model answering (results, writes, histories, judgments); in requests/ the model called
MODEL: Final = "model"

# -- the benchmark's own parameters (a column each where known, all of them as JSON in ``params``) ----
L: Final = "L"
D: Final = "d"
LENGTH: Final = "length"
PARAMS: Final = "params"

# -- results/: one row per question answered ---------------------------------------------------------
QUESTION_ID: Final = "question_id"
QUESTION_TYPE: Final = "question_type"
QUESTION: Final = "question"
PREDICTION: Final = "prediction"
GOLD: Final = "gold"
GOLD_ALL: Final = "gold_all"
STALE_VALUES: Final = "stale_values"
CORRECT: Final = "correct"
STALE: Final = "stale"
NEEDS_JUDGE: Final = "needs_judge"
JUDGE_MODEL: Final = "judge_model"
JUDGE_VERSION: Final = "judge_version"
JUDGE_RULE: Final = "judge_rule"
JUDGE_RAW: Final = "judge_raw"
PRIOR_CORRECT: Final = "prior_correct"
PRIOR_JUDGE: Final = "prior_judge"
ANSWER_CLASS: Final = "answer_class"
QUESTION_DATE: Final = "question_date"
AFTER_EVENT: Final = "after_event"
READ_TOKENS: Final = "read_tokens"
READ_CHARS: Final = "read_chars"
READ_ITEMS: Final = "read_items"
#: what the arm read for the question: the context its answer prompt was given, as the arm rendered it
#: (``read_tokens`` and ``read_chars`` count it), so that a reviewer reads it instead of inferring it
READ_CONTEXT: Final = "read_context"
#: the turns what the arm read cites, as the benchmark names them ("D1:3" in LoCoMo), else evidence ids:
#: the cited turn of each fact shown and each turn shown (empty where the arm's read cites none)
READ_CITES: Final = "read_cites"
#: the turns the benchmark names as the question's evidence, as it names them (LoCoMo's ``evidence``:
#: "D1:3"); null where it names none
EVIDENCE_TURNS: Final = "evidence_turns"
ANSWER_ERROR: Final = "answer_error"
#: is the gold (a stale value) the value of an active cell of the arm's graph when the question is asked
GOLD_IN_STATE: Final = "gold_in_state"
STALE_IN_STATE: Final = "stale_in_state"
#: the write-path audit of the question (FactConsolidation arms that keep facts): the one source of the
#: report's write-path audit table
AUDIT_GOLD_IN_ACTIVE_CELL: Final = "audit_gold_in_active_cell"
AUDIT_GOLD_IN_MATCHING_CELL: Final = "audit_gold_in_matching_cell"
AUDIT_STALE_SIBLING: Final = "audit_stale_sibling"
#: bytes of erased content (the statement's text, and its value where no other statement made it) still
#: found in what the arm retains when the question is asked (provenance-probes erasure; null elsewhere)
ARTIFACT_BYTES: Final = "artifact_bytes"
#: the answer's token F1 by the benchmark's own scorer, 0-1 (LoCoMo: the official F1 of categories 1-4,
#: null for adversarial questions; FactConsolidation and the others: MemoryAgentBench's); null where none
F1: Final = "f1"
#: BLEU-1 of the answer against the gold, 0-1 (LoCoMo categories 1-4); null elsewhere
BLEU1: Final = "bleu1"
#: the model's raw output (results: the answer call; judgments: the verdict call)
RAW: Final = "raw"
ALT_GOLD_KIND: Final = "alt_gold_kind"
ALT_GOLD: Final = "alt_gold"
ALT_F1: Final = "alt_f1"
ALT_CORRECT: Final = "alt_correct"

# -- writes/: one row per write operation -----------------------------------------------------------
SEQ: Final = "seq"
OP: Final = "op"
KEY: Final = "key"
VALUE: Final = "value"
APPLIED: Final = "applied"
REASON: Final = "reason"

# -- requests/: one row per model call ------------------------------------------------------------
#: the history's agent model (``model`` is the model this call went to)
AGENT_MODEL: Final = "agent_model"
PURPOSE: Final = "purpose"
PROMPT_TOKENS: Final = "prompt_tokens"
COMPLETION_TOKENS: Final = "completion_tokens"
CACHED: Final = "cached"
LATENCY_S: Final = "latency_s"
ERROR: Final = "error"
TOKENS_ESTIMATED: Final = "tokens_estimated"
HTTP_ATTEMPT: Final = "http_attempt"
HTTP_STATUS: Final = "http_status"
FINISH_REASON: Final = "finish_reason"
PARSE_ERROR: Final = "parse_error"
REPLY: Final = "reply"
HISTORY_FAILED: Final = "history_failed"

# -- histories/: one row per (history, arm, agent model) run --------------------------------------
STATUS: Final = "status"
ATTEMPT: Final = "attempt"
WALL_S: Final = "wall_s"
STATE_BYTES: Final = "state_bytes"
STATE_PATH: Final = "state_path"
N_EVENTS: Final = "n_events"
N_QUESTIONS: Final = "n_questions"
N_CORRECT: Final = "n_correct"
MODEL_CALLS: Final = "model_calls"
CACHED_CALLS: Final = "cached_calls"
WRITE_MODEL_CALLS: Final = "write_model_calls"
WRITE_PROMPT_TOKENS: Final = "write_prompt_tokens"
WRITE_COMPLETION_TOKENS: Final = "write_completion_tokens"
FACTS: Final = "facts"
CELLS: Final = "cells"
#: the operation counts as JSON (one ``ops_<op>`` column per operation too, see :func:`op_column`)
OPS: Final = "ops"
#: the arm's write-path audit of the whole stream (FactConsolidation arms that keep facts)
AUDIT_GOLD_KEYS: Final = "audit_gold_keys"
AUDIT_OVERWRITTEN_KEYS: Final = "audit_overwritten_keys"
AUDIT_ACTIVE_ITEMS: Final = "audit_active_items"
# AUDIT_GOLD_IN_ACTIVE_CELL and AUDIT_GOLD_IN_MATCHING_CELL (above) are the stream's rates here
AUDIT_STALE_SIBLING_RATE: Final = "audit_stale_sibling_rate"
EXTRA: Final = "extra"
RUNNER: Final = "runner"
FINISHED_AT: Final = "finished_at"

# -- judgments/: one row per (question, judge model) ----------------------------------------------
VERDICT: Final = "verdict"
#: judge-extracted values where the benchmark names the evidence (LongMemEval stale rate)
SUPERSEDED: Final = "superseded"
CURRENT: Final = "current"
#: what decided the verdict ("model" or a deterministic rule), and the verdict against the other gold
RULE: Final = "rule"
ALT_VERDICT: Final = "alt_verdict"
ALT_RAW: Final = "alt_raw"
ALT_RULE: Final = "alt_rule"

# -- calibration/: the run's judge on each case of the judge calibration set -----------------------
CASE_ID: Final = "case_id"
KIND: Final = "kind"
#: whether the case's answer is right
EXPECTED: Final = "expected"

#: benchmark parameters that are columns of their own (and grouping columns in the report)
PARAM_COLUMNS: Final = (L, D, LENGTH)

#: the prefix of the per-operation count columns of histories/
OPS_PREFIX: Final = "ops_"


def op_column(op: str) -> str:
    """The histories/ column counting operation ``op`` (an operation name of :data:`pmem.graph.OPS`)."""
    return f"{OPS_PREFIX}{op}"
