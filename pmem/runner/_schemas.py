"""Fixed Arrow schemas of a run's Parquet datasets (DESIGN.md, run directory contract).

Every part of a dataset has the same schema, whatever benchmark or arm wrote it, so a reader can scan
``results/*.parquet`` as one table. Benchmark parameters that are not columns here live in the
``params`` JSON column.
"""

from __future__ import annotations

import pyarrow as pa

_S = pa.string()
_I = pa.int64()
_F = pa.float64()
_B = pa.bool_()

_KEYS = [
    ("run_id", _S),
    ("unit_id", _S),
    ("benchmark", _S),
    ("subset", _S),
    ("history_id", _S),
    ("arm", _S),
    ("model", _S),
]
_PARAMS = [("L", _I), ("d", _I), ("length", _S), ("params", _S)]

RESULTS = pa.schema(
    [
        *_KEYS,
        ("question_id", _S),
        ("question_type", _S),
        ("question", _S),
        ("prediction", _S),
        ("gold", _S),
        ("gold_all", pa.list_(_S)),
        ("stale_values", pa.list_(_S)),
        ("correct", _B),
        ("stale", _B),
        ("needs_judge", _B),
        ("judge_model", _S),
        ("answer_class", _S),
        ("question_date", _S),
        ("after_event", _I),
        ("read_tokens", _I),
        ("read_chars", _I),
        ("read_items", _I),
        ("answer_error", _S),
        *_PARAMS,
        # write-path audit, where the arm keeps a P-Mem graph: is the gold (a stale value) the value
        # of some active cell when the question is asked?
        ("gold_in_state", _B),
        ("stale_in_state", _B),
        # the arm's own write-path audit of the question (FactConsolidation), where it has one
        ("audit_gold_in_active_cell", _B),
        ("audit_gold_in_matching_cell", _B),
        ("audit_stale_sibling", _B),
        ("audit", _S),
        ("raw", _S),
    ]
)

WRITES = pa.schema(
    [
        *_KEYS,
        ("seq", _I),
        ("op", _S),
        ("key", _S),
        ("value", _S),
        ("applied", _B),
        ("reason", _S),
    ]
)

REQUESTS = pa.schema(
    [
        *_KEYS[:6],
        ("agent_model", _S),
        ("purpose", _S),
        ("model", _S),
        ("prompt_tokens", _I),
        ("completion_tokens", _I),
        ("cached", _B),
        ("latency_s", _F),
        ("error", _S),
        ("tokens_estimated", _B),
    ]
)

OPS = ("accept", "reject", "revoke", "contest", "resolve", "noop")

HISTORIES = pa.schema(
    [
        *_KEYS,
        ("status", _S),
        ("error", _S),
        ("attempt", _I),
        ("wall_s", _F),
        ("state_bytes", _I),
        ("state_path", _S),
        ("n_events", _I),
        ("n_questions", _I),
        ("n_correct", _I),
        ("model_calls", _I),
        ("prompt_tokens", _I),
        ("completion_tokens", _I),
        ("cached_calls", _I),
        ("write_model_calls", _I),
        ("write_prompt_tokens", _I),
        ("write_completion_tokens", _I),
        ("facts", _I),
        ("cells", _I),
        *[(f"ops_{op}", _I) for op in OPS],
        ("ops", _S),
        # the arm's write-path audit of the whole stream (FactConsolidation), where it has one
        ("audit_gold_keys", _I),
        ("audit_overwritten_keys", _I),
        ("audit_active_items", _I),
        ("audit_gold_in_active_cell", _F),
        ("audit_gold_in_matching_cell", _F),
        ("audit_stale_sibling_rate", _F),
        ("audit", _S),
        ("extra", _S),
        *_PARAMS,
        ("runner", _S),
        ("finished_at", _F),
    ]
)

JUDGMENTS = pa.schema(
    [
        *_KEYS,
        ("question_id", _S),
        ("judge_model", _S),
        ("verdict", _B),
        ("raw", _S),
        ("error", _S),
        # judge-extracted values where the benchmark names the evidence (LongMemEval stale rate)
        ("superseded", _S),
        ("current", _S),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "results": RESULTS,
    "writes": WRITES,
    "requests": REQUESTS,
    "histories": HISTORIES,
    "judgments": JUDGMENTS,
}
