"""Benchmarks: loaders and generators yielding histories, scorers, stale-rate definitions.

>>> from pmem.bench import iter_histories
>>> h = next(iter_histories("factconsolidation", "sh_6k"))
>>> h.id, len(h.events), len(h.questions)
('factconsolidation/sh_6k', 455, 100)

The benchmark registry (:mod:`pmem.bench._registry`: names, subsets, parameter types, iterators;
``register_benchmark`` and ``module:attr`` names for plugins) is the one list of benchmarks.
Templates of ALFWorld-Revision live in :mod:`pmem.bench.alfworld_templates` (importable alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pmem._lazy import lazy_exports
from pmem.bench._types import Event, History, Question

if TYPE_CHECKING:
    from pmem.bench._arrow import histories_from_arrow, histories_to_arrow, read_histories, write_histories
    from pmem.bench._chunks import chunk_events
    from pmem.bench._data import DataError, verify_all
    from pmem.bench._facts import RELATION_TEMPLATES, fact_key, parse_fact
    from pmem.bench._judge import (
        JUDGE_MAX_TOKENS,
        JUDGE_TEMPERATURE,
        JUDGE_VERSION,
        StaleValues,
        answer_class_prompt,
        is_stale_prediction,
        judge_kind,
        judge_messages,
        judge_prompt,
        judge_verdict,
        parse_answer_class,
        parse_judge_reply,
        parse_stale_values,
        stale_extraction_prompt,
    )
    from pmem.bench._judge_calibration import RIGHT_KINDS, WRONG_KINDS, CalibrationCase, calibration_cases
    from pmem.bench._judge_guard import (
        TOPICAL_EMBEDDER,
        GuardVerdict,
        JudgeContext,
        guard_verdict,
        locomo_judge_context,
        topical_verdict,
    )
    from pmem.bench._locomo import LOCOMO_CATEGORIES, audit_corrections, evidence_turns
    from pmem.bench._probes import ERASED_PARAMS, SOURCE_AUTHORITY, artifact_bytes
    from pmem.bench._registry import (
        Benchmark,
        BenchmarkInfo,
        benchmark_info,
        benchmark_names,
        iter_histories,
        list_benchmarks,
        load_benchmark,
        register_benchmark,
    )
    from pmem.bench._scoring import (
        Score,
        UnknownBenchmarkError,
        exact_match,
        normalize_answer,
        parse_output,
        score_question,
        score_strings,
        substring_exact_match,
        token_f1,
    )

# name -> module: imported on first use so `import pmem.bench` stays cheap (no pyarrow until needed).
_LAZY: dict[str, str] = {
    "histories_to_arrow": "_arrow",
    "histories_from_arrow": "_arrow",
    "read_histories": "_arrow",
    "write_histories": "_arrow",
    "chunk_events": "_chunks",
    "DataError": "_data",
    "verify_all": "_data",
    "RELATION_TEMPLATES": "_facts",
    "fact_key": "_facts",
    "parse_fact": "_facts",
    "JUDGE_MAX_TOKENS": "_judge",
    "JUDGE_TEMPERATURE": "_judge",
    "JUDGE_VERSION": "_judge",
    "parse_judge_reply": "_judge",
    "RIGHT_KINDS": "_judge_calibration",
    "WRONG_KINDS": "_judge_calibration",
    "CalibrationCase": "_judge_calibration",
    "calibration_cases": "_judge_calibration",
    "GuardVerdict": "_judge_guard",
    "JudgeContext": "_judge_guard",
    "guard_verdict": "_judge_guard",
    "locomo_judge_context": "_judge_guard",
    "topical_verdict": "_judge_guard",
    "TOPICAL_EMBEDDER": "_judge_guard",
    "StaleValues": "_judge",
    "answer_class_prompt": "_judge",
    "is_stale_prediction": "_judge",
    "judge_kind": "_judge",
    "judge_messages": "_judge",
    "judge_prompt": "_judge",
    "judge_verdict": "_judge",
    "parse_answer_class": "_judge",
    "parse_stale_values": "_judge",
    "stale_extraction_prompt": "_judge",
    "LOCOMO_CATEGORIES": "_locomo",
    "evidence_turns": "_locomo",
    "audit_corrections": "_locomo",
    "ERASED_PARAMS": "_probes",
    "SOURCE_AUTHORITY": "_probes",
    "artifact_bytes": "_probes",
    "Benchmark": "_registry",
    "BenchmarkInfo": "_registry",
    "iter_histories": "_registry",
    "list_benchmarks": "_registry",
    "load_benchmark": "_registry",
    "benchmark_info": "_registry",
    "benchmark_names": "_registry",
    "register_benchmark": "_registry",
    "Score": "_scoring",
    "UnknownBenchmarkError": "_scoring",
    "exact_match": "_scoring",
    "normalize_answer": "_scoring",
    "parse_output": "_scoring",
    "score_question": "_scoring",
    "score_strings": "_scoring",
    "substring_exact_match": "_scoring",
    "token_f1": "_scoring",
}

__all__ = [
    "ERASED_PARAMS",
    "JUDGE_MAX_TOKENS",
    "JUDGE_TEMPERATURE",
    "JUDGE_VERSION",
    "LOCOMO_CATEGORIES",
    "RELATION_TEMPLATES",
    "RIGHT_KINDS",
    "SOURCE_AUTHORITY",
    "TOPICAL_EMBEDDER",
    "WRONG_KINDS",
    "Benchmark",
    "BenchmarkInfo",
    "CalibrationCase",
    "DataError",
    "Event",
    "GuardVerdict",
    "History",
    "JudgeContext",
    "Question",
    "Score",
    "StaleValues",
    "UnknownBenchmarkError",
    "answer_class_prompt",
    "artifact_bytes",
    "audit_corrections",
    "benchmark_info",
    "benchmark_names",
    "calibration_cases",
    "chunk_events",
    "evidence_turns",
    "exact_match",
    "fact_key",
    "guard_verdict",
    "histories_from_arrow",
    "histories_to_arrow",
    "is_stale_prediction",
    "iter_histories",
    "judge_kind",
    "judge_messages",
    "judge_prompt",
    "judge_verdict",
    "list_benchmarks",
    "load_benchmark",
    "locomo_judge_context",
    "normalize_answer",
    "parse_answer_class",
    "parse_fact",
    "parse_judge_reply",
    "parse_output",
    "parse_stale_values",
    "read_histories",
    "register_benchmark",
    "score_question",
    "score_strings",
    "stale_extraction_prompt",
    "substring_exact_match",
    "token_f1",
    "topical_verdict",
    "verify_all",
    "write_histories",
]


__getattr__ = lazy_exports("pmem.bench", _LAZY)
