"""The paper's published figures next to ours.

``published.csv`` is vendored unchanged from ``shared/data/paper/published.csv`` (the numbers of
"Memory of Memory", arXiv 2609.25054, Tables 3-8, 10, 11 and Appendix F; sha256
001a6be876e04a7e58dbb419d565f9cdabaf52af0f9535c80a3f4cf7a1878801). Every value from it is labelled "published";
it is never used as an expected value.

The paper's arm names differ from the project's; :data:`ARM_MAP` says which of our arms is the closest
counterpart and what differs. Rows without a counterpart are listed with "no counterpart arm".

LoCoMo figures other systems published are kept apart, in ``published_locomo.csv`` (that file is written
for this project, not vendored: every row names its source, the table it comes from and the scorer that
computed it), and shown by :func:`locomo_published_table` with one column per metric, so that an F1, a
BLEU-1, a judge's accuracy (J) and an abstention rate never share a column.
"""

from __future__ import annotations

import csv
import math
from importlib import resources
from typing import TYPE_CHECKING, Any

import polars as pl

from pmem.report._locomo import category_name, locomo_rows, ours
from pmem.report._table import Table
from pmem.rundir import columns as C

if TYPE_CHECKING:
    from pmem.report._base import Metrics

#: published arm -> (our arm, what differs beyond the shared setup notes)
ARM_MAP: dict[str, tuple[str | None, str]] = {
    "pmem_commit": ("pmem", ""),
    "pmem_commit_retention": ("pmem", ""),
    "pmem_commit_no_retention": ("pmem-no-retention", ""),
    "pmem_contest": ("pmem", ""),
    "pmem_state_read": ("pmem", ""),
    "pmem_iterative": ("pmem-iterative", ""),
    "pmem_turn_read": ("pmem", "paper: turn-level read over LongMemEval sessions"),
    "pmem_turn_read_prune": ("pmem-turn-prune", ""),
    "turn_read_raw": ("pmem", "paper: turn-level read, no pruning"),
    "turn_read_prune": ("pmem-turn-prune", ""),
    "pmem_writer_4b": ("pmem", "paper: materialized path, 4B writer"),
    "pmem_extract_4b": ("pmem", "paper: 4B extraction write path"),
    "raw_top10": ("raw", ""),
    "raw": ("raw", ""),
    "raw_top12": ("raw", ""),
    "raw_order_tags": ("raw-ordered", ""),
    "long_context": ("long-context", ""),
    "no_memory": ("no-memory", ""),
    "memoryos": ("chunks", "ours: chunk retrieval arm, not MemoryOS itself"),
    "mem0": ("crud", "ours: CRUD arm, not Mem0 itself"),
    "graphiti": ("bitemporal", "ours: bitemporal KG arm, not Graphiti/Zep itself"),
    "graphiti_35b_extractor": (None, "35B extractor variant"),
    "hipporag_v2": (None, "no graph-RAG arm"),
    "raw_reconstruct": (None, "no query-time reconstruction arm"),
    "raw_oracle_order": (None, "no oracle-order arm"),
    "materialized_4b": (None, "materialized LongMemEval variant not an arm"),
    "materialized_35b": (None, "materialized LongMemEval variant not an arm"),
    "materialized_35b_merge070": (None, "materialized LongMemEval variant not an arm"),
    "pmem_writer_35b": (None, "35B writer variant"),
    "stream": (None, "stream statistics, not an arm"),
}

_BENCH = {
    "alfworld_revision": "alfworld-revision",
    "factconsolidation": "factconsolidation",
    "longmemeval": "longmemeval",
}
_SUBSET = {"single_revision_two_step": "two-step"}
_WRITE_METRICS = {
    "extraction_calls_per_history": ("write_calls_per_history", 1.0),
    "calls_per_committed_fact": ("calls_per_committed_fact", 1.0),
    "write_tokens_per_history": ("write_tokens_per_history", 1.0),
    "ingestion_wall_s_per_history": ("wall_s_mean", 1.0),
    "committed_facts": ("committed_facts_per_history", 1.0),
    "cells": ("cells_per_history", 1.0),
    "fact_store_mb": ("state_bytes_mean", 1e-6),
    "embedding_index_mb": ("embedding_bytes_mean", 1e-6),
    "facts_per_cell": ("facts_per_cell", 1.0),
    "write_ops": ("write_ops_total", 1.0),
}


def load_published() -> list[dict[str, str]]:
    text = resources.files("pmem.report").joinpath("published.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def setup_differences(m: Metrics) -> list[str]:
    run = m.run
    agent = run.agent_label
    emb = run.models.get("embedder", {})
    benches = set(m.accuracy[C.BENCHMARK].unique().to_list()) if m.accuracy.height else set()
    notes = [
        f"Agent: ours {agent}; published Qwen3-4B-Instruct-2507 (temperature 0, thinking off) served by vLLM.",
        f"Embedder: ours {emb.get('model') or emb.get('backend', 'unknown')} ({emb.get('backend', '?')}); "
        "published Qwen3-Embedding-4B.",
        "ALFWorld-Revision: our cases are generated from the ALFWorld object/receptacle vocabulary; the paper "
        "used 140 valid_seen games (n=140 per cell), which are not available here.",
        "Paper arms Mem0, MemoryOS and Graphiti/Zep are compared with our crud, chunks and bitemporal arms: "
        "design-corner counterparts, not the published systems.",
    ]
    if "longmemeval" not in benches:
        notes.append(
            "LongMemEval: not run (no official data supplied), so its published rows have no value of ours."
        )
    return notes


def _filter_param(param: str, params: list[str], cols: list[str]) -> pl.Expr | None:
    """Expression selecting the published cell's parameter; None when we cannot express it."""
    if not param:
        return pl.lit(True)
    if "=" in param:
        name, value = param.split("=", 1)
        if name in params:
            return pl.col(name).cast(pl.String) == value
        return None
    if param == "overall":
        return pl.lit(True)
    if C.ANSWER_CLASS in cols:
        return pl.col(C.ANSWER_CLASS) == param
    return None


def _ours(
    m: Metrics, row: dict[str, str], arm: str, cache: dict[str, Any]
) -> tuple[float | None, int | None, str]:
    """Our value for a published cell (percent units where the paper's are), its n, and a note."""
    bench = _BENCH.get(row["benchmark"], row["benchmark"])
    subset = _SUBSET.get(row["subset"], row["subset"])
    metric, param = row["metric"], row["param"]
    t = m.tables
    if metric in ("recovered", "wrong", "lost"):
        d8 = t["table8_retraction"].data
        if d8.height == 0:
            return None, None, "no retraction rows"
        d = param.split("=", 1)[1] if "=" in param else None
        sel = d8.filter((pl.col(C.ARM) == arm) & (pl.col(C.D).cast(pl.String) == d)) if d else pl.DataFrame()
        if sel.height == 0:
            return None, None, "no rows for this arm/distance"
        r = sel.row(0, named=True)
        if not r["committed"]:
            return None, 0, "no committed cases"
        return 100 * r[metric], r["committed"], "over committed cases"
    if metric in _WRITE_METRICS or metric == "write_ops":
        col, scale = _WRITE_METRICS[metric]
        wc = t["write_cost"].data
        subsets = [
            s
            for s in (wc[C.SUBSET].unique().to_list() if wc.height else [])
            if s == subset or s.endswith("_" + subset)
        ]
        if wc.height == 0 or col not in wc.columns or not subsets:
            return None, None, "not measured"
        sel = wc.filter(
            (pl.col(C.BENCHMARK) == bench) & pl.col(C.SUBSET).is_in(subsets) & (pl.col(C.ARM) == arm)
        )
        mean = sel[col].mean()
        if sel.height == 0 or not isinstance(mean, int | float):  # None: no non-null value
            return None, None, "not measured"
        return float(mean) * scale, int(sel["histories"].sum()), ""
    if metric in ("current_value_survives", "stale_sibling_rate"):
        au = t["write_audit"].data
        # each rate is pooled over sh/mh with its own denominator as the weight: the stale-sibling rate is
        # defined over overwritten keys only, and a row without one (multi-hop) has no rate to pool
        col, weight, unit = (
            ("gold_in_active_cell", "questions", "question")
            if metric == "current_value_survives"
            else ("stale_sibling_rate", "overwritten_keys", "overwritten key")
        )
        if au.height == 0 or col not in au.columns:
            return None, None, "not derivable from this run's files"
        sel = au.filter(pl.col(C.SUBSET).str.ends_with("_" + subset) & (pl.col(C.ARM) == arm))
        if sel.height == 0:
            return None, None, "no audit rows"
        sel = sel.filter(pl.col(col).is_not_null() & pl.col(col).is_not_nan() & (pl.col(weight) > 0))
        if sel.height == 0:
            return None, 0, f"undefined (no {unit}s)"
        w = sel[weight]
        pooled = float((sel[col] * w).sum()) / float(w.sum())
        return 100 * pooled, int(w.sum()), f"per {unit}, pooled over sh/mh"
    if metric not in (
        "accuracy",
        "stale_rate",
        "read_chars",
        "context_tokens",
        "acc_per_1k_tokens",
        "accuracy_post",
        "conflict_flagged_pre",
    ):
        return None, None, "not measured"
    key = "results_cols"
    if key not in cache:
        cache[key] = m.run.columns("results")
    cols = cache[key]
    hist = m.accuracy  # one row per (benchmark, subset, arm, params, question_type) with count sums
    if hist.height == 0:
        return None, None, "no results"
    f = (pl.col(C.BENCHMARK) == bench) & (pl.col(C.ARM) == arm)
    if bench == "longmemeval" and subset.startswith("ku_"):
        base = subset[3:]
        f &= (pl.col(C.SUBSET) == subset) | (
            (pl.col(C.SUBSET) == base) & pl.col(C.QUESTION_TYPE).str.contains("knowledge")
        )
    else:
        f &= pl.col(C.SUBSET) == subset
    if metric == "accuracy_post":
        f &= pl.col(C.QUESTION_TYPE) == "after_settle"
    elif metric == "conflict_flagged_pre":
        f &= pl.col(C.QUESTION_TYPE) == "before_settle"
    pf = _filter_param(param, m.params, cols)
    if pf is None:
        return None, None, f"parameter {param!r} not in our results"
    results = m.run.frame("results")  # not None when ``cols`` (read from it) is not empty
    if results is not None and C.ANSWER_CLASS in cols and param and "=" not in param and param != "overall":
        # per-class cells (Table 4) come from the question rows: the history counts do not keep the class
        if "by_class" not in cache:
            cache["by_class"] = (
                results.filter(pl.col(C.ANSWER_CLASS).is_not_null())
                .group_by(C.BENCHMARK, C.SUBSET, C.ARM, C.QUESTION_TYPE, C.ANSWER_CLASS)
                .agg(
                    n=pl.len(),
                    correct=pl.col(C.CORRECT).fill_null(False).sum(),
                    stale_n=pl.col(C.STALE).is_not_null().sum(),
                    stale_k=pl.col(C.STALE).fill_null(False).sum(),
                    tok=pl.col(C.READ_TOKENS).cast(pl.Float64).sum(),
                    chars=pl.col("read_chars").cast(pl.Float64).sum(),
                    tok_n=pl.col(C.READ_TOKENS).is_not_null().sum(),
                )
                .collect()
            )
        hist = cache["by_class"]
    sel = hist.filter(f & pf)
    if sel.height == 0:
        return None, None, "no rows"
    n, k = int(sel["n"].sum()), int(sel["correct"].sum())
    sn, sk = int(sel["stale_n"].sum()), int(sel["stale_k"].sum())
    tok_n = int(sel["tok_n"].sum())
    if metric in ("accuracy", "accuracy_post", "conflict_flagged_pre"):
        return 100 * k / n, n, "before_settle accuracy as scored" if metric == "conflict_flagged_pre" else ""
    if metric == "stale_rate":
        return (100 * sk / sn, sn, "") if sn else (None, 0, "no stale-eligible questions")
    if not tok_n:
        return None, None, "read size not recorded"
    tok = float(sel["tok"].sum()) / tok_n
    if metric == "read_chars":
        return float(sel["chars"].sum()) / tok_n, n, ""
    if metric == "context_tokens":
        return tok, n, ""
    return (100 * k / n) / (tok / 1000) if tok else None, n, ""


def published_table(m: Metrics) -> Table:
    rows = []
    cache: dict[str, Any] = {}
    for r in load_published():
        arm, arm_note = ARM_MAP.get(r["arm"], (None, "unknown paper arm"))
        if arm is None:
            ours, n, note = None, None, arm_note or "no counterpart arm"
        else:
            ours, n, note = _ours(m, r, arm, cache)
            note = "; ".join(x for x in (arm_note, note) if x)
        pub = float(r["value"])
        diff = None if ours is None or math.isnan(ours) else ours - pub
        rows.append(
            {
                "table": r["table"],
                "benchmark": r["benchmark"],
                "subset": r["subset"],
                "param": r["param"],
                "metric": r["metric"],
                "paper_arm": r["arm"],
                "our_arm": arm,
                "published": pub,
                "unit": r["unit"],
                "ours": ours,
                "n_ours": n,
                "diff": diff,
                "published_note": r["note"],
                "note": note,
            }
        )
    data = pl.DataFrame(rows, schema_overrides={"ours": pl.Float64, "diff": pl.Float64, "n_ours": pl.Int64})
    display = data.select(
        "table",
        "benchmark",
        "subset",
        "param",
        "metric",
        "paper_arm",
        pl.col("our_arm").fill_null("—"),
        pl.concat_str([pl.col("published").round(2).cast(pl.String), pl.lit(" "), pl.col("unit")]).alias(
            "published"
        ),
        pl.when(pl.col("ours").is_null())
        .then(pl.lit("not run / n.a."))
        .otherwise(pl.col("ours").round(2).cast(pl.String))
        .alias("ours"),
        pl.col("n_ours").cast(pl.String).fill_null(""),
        pl.when(pl.col("diff").is_null())
        .then(pl.lit(""))
        .otherwise(pl.col("diff").round(2).cast(pl.String))
        .alias("ours − published"),
        pl.col("note"),
    )
    # the setup differences open the report (its Notes); said once, not again under this table
    notes = [
        "Published = the paper's reported figure (labelled as such; never an expected value). "
        "How our setup differs from the paper's: see Notes at the top of the report."
    ]
    return Table(
        "published_vs_ours",
        "Published (paper) vs ours",
        data,
        display,
        notes,
        keys=("table", "benchmark", "subset", "param", "metric", "paper_arm"),
        values=("ours", "diff"),
        section="published",
    )


# -- LoCoMo: figures other systems published -----------------------------------------------------------

#: the metrics of ``published_locomo.csv``, each shown in its own column
LOCOMO_METRICS = {
    "f1": "F1",
    "bleu1": "BLEU-1",
    "judge": "J (LLM judge)",
    "abstained": "adversarial: abstained %",
    "overall_1_5": "overall 1-5 (F1 + abstention)",
}


def load_published_locomo() -> list[dict[str, str]]:
    text = resources.files("pmem.report").joinpath("published_locomo.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


#: the sources ``published_locomo.csv`` cites, in full
LOCOMO_SOURCES = (
    'LoCoMo paper: Maharana, Lee, Tulyakov, Bansal, Barbieri, Fang, "Evaluating Very Long-Term '
    'Conversational Memory of LLM Agents", ACL 2024 (arXiv 2402.17753; the PDF in snap-research/LoCoMo '
    "static/paper/locomo.pdf), Tables 2 and 3: answer F1 by LoCoMo's own scorer.",
    'Mem0 paper: Chhikara, Khant, Aryan, Singh, Yadav, "Mem0: Building Production-Ready AI Agents with '
    'Scalable Long-Term Memory", arXiv 2504.19413v1, Table 1 (F1, B1, J per category) and Table 2 '
    "(overall J). Its columns are mapped to the official categories (its 'Single Hop' is category 1, "
    "'Multi-Hop' 3, 'Open Domain' 4: mem0ai/mem0#2609; with that mapping each system's Table 2 overall J "
    "is the question-weighted mean of its Table 1 columns).",
)


def locomo_published_table(m: Metrics) -> Table:
    """Published LoCoMo figures (F1, BLEU-1, J, abstention) next to ours, one column per metric.

    Our counterpart of a published system is the first of its ``our_arms`` this run holds (Mem0: the
    real ``mem0`` peer, else ``add-only``, our Mem0 design; Zep: ``graphiti``, else ``bitemporal``)."""
    notes = [
        "Published LoCoMo figures (labelled published; never expected values) next to this run's, per "
        "official category: a cell reads 'published / ours (n)'. A figure compares only under the same "
        "scorer: our F1 is LoCoMo's official one, as is the LoCoMo paper's; Mem0's paper computes its "
        "own token-set F1 (the scorer column of the CSV says which). Agents and judges differ from ours "
        "(gpt-4o-mini in Mem0's paper; the LoCoMo paper's models as named).",
        *LOCOMO_SOURCES,
    ]
    empty = Table(
        "published_locomo_vs_ours",
        "Published LoCoMo figures vs ours",
        pl.DataFrame(),
        None,
        notes,
        keys=("source", "system", "category", "metric"),
        values=("ours", "diff"),
        section="published",
    )
    present = set(locomo_rows(m)[C.ARM].unique().to_list())
    if not present:
        return empty
    rows: list[dict[str, Any]] = []
    lines: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in load_published_locomo():
        candidates = r["our_arms"].split()
        arm = next((a for a in candidates if a in present), None)
        value, n = ours(m, arm, r["category"], r["metric"]) if arm else (None, None)
        if not candidates:
            note = "no counterpart arm"
        elif arm is None:
            note = f"not in this run ({', '.join(candidates)})"
        else:
            note = ""
        pub, category = float(r["value"]), category_name(r["category"])
        rows.append(
            {
                "source": r["source"],
                "system": r["system"],
                "category": category,
                "published_label": r["label"],
                "metric": r["metric"],
                "published": pub,
                "our_arm": arm,
                "ours": value,
                "n_ours": n,
                "diff": None if value is None else value - pub,
                "scorer": r["scorer"],
                "published_note": r["note"],
                "note": note,
            }
        )
        line = lines.setdefault(
            (r["source"], r["system"], category),
            {
                "source": r["source"],
                "system": r["system"],
                "category": f"{category} ({r['label']})",
                "our arm": arm or "—",
                **dict.fromkeys(LOCOMO_METRICS.values(), ""),
                "note": "; ".join(x for x in (note, r["note"]) if x),
            },
        )
        mine = "not run / n.a." if value is None else f"{value:.1f} (n={n})"
        line[LOCOMO_METRICS[r["metric"]]] = f"{r['value']} / {mine}"
    data = pl.DataFrame(rows, schema_overrides={"ours": pl.Float64, "diff": pl.Float64, "n_ours": pl.Int64})
    return Table(
        empty.name,
        empty.title,
        data,
        pl.DataFrame(list(lines.values())),
        notes,
        empty.keys,
        empty.values,
        section="published",
    )
