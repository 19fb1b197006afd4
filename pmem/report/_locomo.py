"""LoCoMo: F1, BLEU-1 and judge accuracy (J) per arm and category, and the adversarial questions apart.

Read from ``results/``'s ``f1`` and ``bleu1`` columns (the official scorer's, written by the runner) and
``correct`` where ``judge_model`` says a judge decided it. Categories 1-4 are pooled into "overall 1-4"
question by question (each question weighs one, as LoCoMo's and Mem0's evaluations average); adversarial
questions (category 5) are scored by abstention and reported in their own table, with the paper's
"overall" over all five categories (F1 for 1-4 and the abstention score for 5, one question one weight).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
from scipy.stats import wilcoxon

from pmem.bench import LOCOMO_CATEGORIES
from pmem.report._base import Metrics, order_arms
from pmem.report._stats import cluster_bootstrap, seed_for, wilson, with_wilson
from pmem.report._table import Table, ci, pct
from pmem.rundir import columns as C

BENCHMARK = "locomo"
SECTION = "locomo"
#: the categories in the paper's column order (single-hop, multi-hop, temporal, open-domain), then 1-4
ORDER = ("single-hop", "multi-hop", "temporal", "open-domain")
OVERALL = "overall 1-4"
ADVERSARIAL = "adversarial"
#: the paper's "Overall": all five categories, adversarial scored by abstention
OVERALL_ALL = "overall 1-5"


def locomo_rows(m: Metrics) -> pl.DataFrame:
    """One row per answered LoCoMo question: history, question, arm, category, f1, bleu1, correct, judged
    (cached per run)."""
    if "locomo_rows" in m.run.cache:
        rows: pl.DataFrame = m.run.cache["locomo_rows"]
        return rows
    lf = m.run.frame("results")
    cols = set(m.run.columns("results"))
    empty = pl.DataFrame(
        schema={
            C.HISTORY_ID: pl.String,
            C.QUESTION_ID: pl.String,
            C.ARM: pl.String,
            C.QUESTION_TYPE: pl.String,
            C.F1: pl.Float64,
            C.BLEU1: pl.Float64,
            C.CORRECT: pl.Boolean,
            "judged": pl.Boolean,
        }
    )
    if lf is None or C.BENCHMARK not in cols:
        out = empty
    else:

        def col(name: str, dtype: Any) -> pl.Expr:
            # a run written before a column existed reads it as null
            return (pl.col(name) if name in cols else pl.lit(None)).cast(dtype).alias(name)

        out = (
            lf.filter(pl.col(C.BENCHMARK) == BENCHMARK)
            .select(
                C.HISTORY_ID,
                C.QUESTION_ID,
                C.ARM,
                C.QUESTION_TYPE,
                col(C.F1, pl.Float64),
                col(C.BLEU1, pl.Float64),
                col(C.CORRECT, pl.Boolean),
                col(C.JUDGE_MODEL, pl.String).is_not_null().alias("judged"),
            )
            .collect()
        )
    m.run.cache["locomo_rows"] = out
    return out


def _category_stats(rows: pl.DataFrame) -> pl.DataFrame:
    """Per (arm, category) of 1-4 and their pool: n, mean F1 and BLEU-1, judged count and J."""

    def agg(df: pl.DataFrame, by: list[str]) -> pl.DataFrame:
        return df.group_by(by).agg(
            n=pl.len(),
            f1=pl.col(C.F1).mean(),
            bleu1=pl.col(C.BLEU1).mean(),
            judged=pl.col("judged").sum(),
            judge_correct=(pl.col("judged") & pl.col(C.CORRECT).fill_null(False)).sum(),
        )

    answered = rows.filter(pl.col(C.QUESTION_TYPE).is_in(ORDER))
    if answered.height == 0:
        return pl.DataFrame()
    per = agg(answered, [C.ARM, C.QUESTION_TYPE]).rename({C.QUESTION_TYPE: "category"})
    pooled = agg(answered, [C.ARM]).with_columns(category=pl.lit(OVERALL))
    data = pl.concat([per, pooled.select(per.columns)])
    bounds = [wilson(int(k), int(n)) for k, n in data.select("judge_correct", "judged").iter_rows()]
    data = data.with_columns(
        j=pl.when(pl.col("judged") > 0).then(pl.col("judge_correct") / pl.col("judged")),
        j_wilson_lo=pl.Series([b[0] if n else None for b, n in zip(bounds, data["judged"], strict=True)]),
        j_wilson_hi=pl.Series([b[1] if n else None for b, n in zip(bounds, data["judged"], strict=True)]),
    )
    rank = {c: i for i, c in enumerate((*ORDER, OVERALL))}
    return (
        data.with_columns(_o=pl.col("category").replace_strict(rank, return_dtype=pl.Int64))
        .sort(C.ARM, "_o")
        .drop("_o")
    )


def category_name(category: str) -> str:
    """A published cell's category ("1".."5", "1-4", "1-5") as this report names it."""

    if category == "1-4":
        return OVERALL
    if category == "1-5":
        return OVERALL_ALL
    return LOCOMO_CATEGORIES[int(category)]


def ours(m: Metrics, arm: str, category: str, metric: str) -> tuple[float | None, int | None]:
    """Our value (x100) of ``metric`` (f1, bleu1, judge, abstained, overall_1_5) for ``arm`` in a category
    named as :func:`category_name` names it, with its n; (None, None) where this run has no such rows."""
    name = category_name(category)
    if metric in ("abstained", "overall_1_5"):
        data = m.tables["locomo_adversarial"].data
        key, n_col = ("abstained", "n") if metric == "abstained" else (OVERALL_ALL, "n_all")
        sel = data.filter(pl.col(C.ARM) == arm) if data.height else data
    else:
        data = m.tables["locomo"].data
        key, n_col = {"f1": ("f1", "n"), "bleu1": ("bleu1", "n"), "judge": ("j", "judged")}[metric]
        sel = data.filter((pl.col(C.ARM) == arm) & (pl.col("category") == name)) if data.height else data
    if sel.height == 0:
        return None, None
    r = sel.row(0, named=True)
    if r[key] is None or not r[n_col]:
        return None, int(r[n_col] or 0)
    return 100 * float(r[key]), int(r[n_col])


def _cell(r: dict[str, Any] | None, metric: str) -> str:
    if r is None:
        return "missing (no rows)"
    if metric == "j":
        if not r["judged"]:
            return "not judged"
        return f"{pct(r['j'])} {ci(r['j_wilson_lo'], r['j_wilson_hi'])} (n={r['judged']})"
    value = r[metric]
    return "–" if value is None else f"{100 * value:.1f} (n={r['n']})"


def locomo_table(m: Metrics) -> Table:
    rows = locomo_rows(m)
    data = _category_stats(rows)
    notes = [
        "LoCoMo, categories 1-4, scored by LoCoMo's own evaluation code (task_eval/evaluation.py): F1 of "
        "normalized, Porter-stemmed tokens (multi-hop: gold and answer split on commas, partial credit; "
        "open-domain: gold cut at ';'), x100, mean over questions; BLEU-1 as the published LoCoMo "
        "evaluations compute it (nltk sentence_bleu, weights (1,0,0,0)), x100; J = the LLM judge's "
        "accuracy % [Wilson 95% CI] on the questions it judged (Mem0's J rubric). Overall 1-4 pools the "
        "questions (each weighs one).",
        "LoCoMo's `correct` (the all-accuracies and paired tables) is the judge's verdict where a judge is "
        "configured, else F1 >= 0.5: a convenience threshold; F1 is the benchmark's metric.",
    ]
    empty = Table(
        "locomo",
        "LoCoMo: F1, BLEU-1 and judge accuracy (J) per arm and category",
        pl.DataFrame(),
        None,
        notes,
        keys=(C.ARM, "category"),
        values=("f1", "bleu1", "j"),
        section=SECTION,
    )
    if data.height == 0:
        return empty
    idx = {(r[C.ARM], r["category"]): r for r in data.iter_rows(named=True)}
    out = []
    for arm in order_arms(data[C.ARM].unique().to_list()):
        for metric, label in (("f1", "F1"), ("bleu1", "BLEU-1"), ("j", "J (judge)")):
            line = {C.ARM: arm, "metric": label}
            for cat in (*ORDER, OVERALL):
                line[cat] = _cell(idx.get((arm, cat)), metric)
            out.append(line)
    return Table(
        empty.name,
        empty.title,
        data.select(
            C.ARM,
            "category",
            "n",
            "f1",
            "bleu1",
            "judged",
            "judge_correct",
            "j",
            "j_wilson_lo",
            "j_wilson_hi",
        ),
        pl.DataFrame(out),
        notes,
        keys=empty.keys,
        values=empty.values,
        section=SECTION,
    )


def _adversarial_line(r: dict[str, Any]) -> dict[str, str]:
    abstained = (
        f"{pct(r['abstained'])} {ci(r['abstained_wilson_lo'], r['abstained_wilson_hi'])} (n={r['n']})"
        if r["n"]
        else "no adversarial questions"
    )
    overall = "–" if r[OVERALL_ALL] is None else f"{100 * r[OVERALL_ALL]:.1f} (n={r['n_all']})"
    return {C.ARM: r[C.ARM], "adversarial: abstained %": abstained, f"{OVERALL_ALL} (x100)": overall}


def adversarial_table(m: Metrics) -> Table:
    """Adversarial questions apart: the official abstention score, and the paper's overall over 1-5."""
    rows = locomo_rows(m)
    notes = [
        "LoCoMo adversarial questions (category 5: the conversation does not answer them), posed as the "
        "official code poses them (the trap answer or 'Not mentioned in the conversation') and scored by "
        "its rule: the answer contains 'no information available' or 'not mentioned'. % [Wilson 95% CI] (n). "
        "Overall 1-5 is the LoCoMo paper's 'Overall': the mean over all questions of F1 (1-4) and the "
        "abstention score (5), x100.",
    ]
    empty = Table(
        "locomo_adversarial",
        "LoCoMo: adversarial questions (abstention) and the paper's overall",
        pl.DataFrame(),
        None,
        notes,
        keys=(C.ARM,),
        values=("abstained", OVERALL_ALL),
        section=SECTION,
    )
    if rows.height == 0:
        return empty
    scored = rows.with_columns(
        score=pl.when(pl.col(C.QUESTION_TYPE) == ADVERSARIAL)
        .then(pl.col(C.CORRECT).fill_null(False).cast(pl.Float64))
        .otherwise(pl.col(C.F1))
    )
    data = (
        scored.group_by(C.ARM)
        .agg(
            n=(pl.col(C.QUESTION_TYPE) == ADVERSARIAL).sum(),
            abstained_k=((pl.col(C.QUESTION_TYPE) == ADVERSARIAL) & pl.col(C.CORRECT).fill_null(False)).sum(),
            n_all=pl.col("score").is_not_null().sum(),
            overall=pl.col("score").mean(),
        )
        .sort(C.ARM)
    )
    data = with_wilson(data, "abstained", "abstained_k", "n").rename({"overall": OVERALL_ALL})
    idx = {r[C.ARM]: r for r in data.iter_rows(named=True)}
    out = [_adversarial_line(idx[a]) for a in order_arms(idx)]
    return replace(empty, data=data, display=pl.DataFrame(out))


def citation_table(m: Metrics) -> Table:
    """Of the questions (categories 1-4) an arm answers right, the share whose read cites a turn that
    LoCoMo names as the question's evidence: whether the answer stood on the right turn. Arms whose
    reads cite no turn (``read_cites`` empty) are left out."""
    notes = [
        "LoCoMo categories 1-4, the questions each arm answered right (the judge's verdict, else F1 >= "
        "0.5): % [Wilson 95% CI] (n) whose read cites at least one of the question's evidence turns "
        "(LoCoMo's `evidence`, e.g. D1:3). A read cites the turn each fact shown came from and each turn "
        "shown (results/ `read_cites`); an arm whose reads cite no turn is not listed.",
    ]
    empty = Table(
        "locomo_citations",
        "LoCoMo: right answers whose read cites the question's evidence turn",
        pl.DataFrame(),
        None,
        notes,
        keys=(C.ARM,),
        values=("cited",),
        section=SECTION,
    )
    lf = m.run.frame("results")
    cols = set(m.run.columns("results"))
    if lf is None or not {C.READ_CITES, C.EVIDENCE_TURNS, C.BENCHMARK} <= cols:
        return empty
    rows = (
        lf.filter(
            (pl.col(C.BENCHMARK) == BENCHMARK)
            & pl.col(C.QUESTION_TYPE).is_in(ORDER)
            & pl.col(C.CORRECT).fill_null(False)
        )
        .select(C.ARM, C.READ_CITES, C.EVIDENCE_TURNS)
        .collect()
    )
    citing = rows.group_by(C.ARM).agg(cites=pl.col(C.READ_CITES).list.len().sum()).filter(pl.col("cites") > 0)
    rows = rows.filter(pl.col(C.ARM).is_in(citing[C.ARM].implode()))
    if rows.height == 0:
        return empty
    data = (
        rows.with_columns(
            hit=pl.col(C.READ_CITES).list.set_intersection(pl.col(C.EVIDENCE_TURNS)).list.len() > 0
        )
        .group_by(C.ARM)
        .agg(right=pl.len(), cited_k=pl.col("hit").sum())
        .sort(C.ARM)
    )
    data = with_wilson(data, "cited", "cited_k", "right")
    idx = {r[C.ARM]: r for r in data.iter_rows(named=True)}
    out = [
        {
            C.ARM: arm,
            "right answers": str(idx[arm]["right"]),
            "cite an evidence turn": f"{pct(idx[arm]['cited'])} {ci(idx[arm]['cited_wilson_lo'], idx[arm]['cited_wilson_hi'])} (n={idx[arm]['cited_k']})",
        }
        for arm in order_arms(idx)
    ]
    return replace(empty, data=data, display=pl.DataFrame(out))


def f1_paired_table(m: Metrics, reference: str = "pmem") -> Table:
    """LoCoMo's own metric, paired: each arm's F1 against ``reference``'s on the questions (categories
    1-4) both answered, with a conversation-clustered bootstrap interval of the mean difference and the
    Wilcoxon signed-rank test on the per-question differences."""
    notes = [
        f"LoCoMo categories 1-4, LoCoMo's F1 (x100) on the questions both `{reference}` and the arm "
        f"answered: diff = F1({reference}) − F1(arm), mean over questions, with a 95% percentile interval "
        "from resampling whole conversations (histories); p: two-sided Wilcoxon signed-rank test on the "
        "per-question differences (ties at zero dropped; 1.0 when every difference is zero).",
    ]
    empty = Table(
        "locomo_f1_paired",
        f"LoCoMo: F1 of each arm against {reference}, paired",
        pl.DataFrame(),
        None,
        notes,
        keys=("arm_b",),
        values=("diff",),
        section=SECTION,
    )
    rows = locomo_rows(m).filter(pl.col(C.QUESTION_TYPE).is_in(ORDER) & pl.col(C.F1).is_not_null())
    if rows.height == 0 or reference not in set(rows[C.ARM].to_list()):
        return empty
    ref = rows.filter(pl.col(C.ARM) == reference).select(C.HISTORY_ID, C.QUESTION_ID, ref_f1=C.F1)
    out = []
    for arm in order_arms([a for a in rows[C.ARM].unique().to_list() if a != reference]):
        pairs = (
            rows.filter(pl.col(C.ARM) == arm)
            .join(ref, on=[C.HISTORY_ID, C.QUESTION_ID])
            .with_columns(d=pl.col("ref_f1") - pl.col(C.F1))
        )
        if pairs.height == 0:
            continue
        per = pairs.group_by(C.HISTORY_ID).agg(num=pl.col("d").sum(), den=pl.len())
        lo, hi = cluster_bootstrap(
            per["num"].to_numpy(), per["den"].to_numpy(), np.ones(per.height), seed=seed_for("f1", arm)
        )
        diffs = pairs["d"].to_numpy()
        p = 1.0 if not np.any(diffs) else float(wilcoxon(diffs, zero_method="wilcox").pvalue)
        out.append(
            {
                "arm_b": arm,
                "n": pairs.height,
                f"f1_{reference}": float(pairs["ref_f1"].to_numpy().mean()),
                "f1_arm": float(pairs[C.F1].to_numpy().mean()),
                "diff": float(diffs.mean()),
                "diff_lo": lo,
                "diff_hi": hi,
                "p_wilcoxon": p,
            }
        )
    if not out:
        return empty
    data = pl.DataFrame(out)
    display = data.select(
        pl.col("arm_b").alias("arm"),
        pl.col("n"),
        pl.format("{}", (100 * pl.col(f"f1_{reference}")).round(1)).alias(f"F1 {reference}"),
        pl.format("{}", (100 * pl.col("f1_arm")).round(1)).alias("F1 arm"),
        pl.format(
            "{} [{}, {}]",
            (100 * pl.col("diff")).round(1),
            (100 * pl.col("diff_lo")).round(1),
            (100 * pl.col("diff_hi")).round(1),
        ).alias("diff [95% CI]"),
        pl.col("p_wilcoxon").map_elements(lambda p: f"{p:.3g}", return_dtype=pl.String).alias("p"),
    )
    return replace(empty, data=data, display=display)
