"""LoCoMo: F1, BLEU-1 and judge accuracy (J) per arm and category, and the adversarial questions apart.

Read from ``results/``'s ``f1`` and ``bleu1`` columns (the official scorer's, written by the runner) and
``correct`` where ``judge_model`` says a judge decided it. Categories 1-4 are pooled into "overall 1-4"
question by question (each question weighs one, as LoCoMo's and Mem0's evaluations average); adversarial
questions (category 5) are scored by abstention and reported in their own table, with the paper's
"overall" over all five categories (F1 for 1-4 and the abstention score for 5, one question one weight).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
from scipy.stats import wilcoxon

from pmem.bench import LOCOMO_CATEGORIES
from pmem.report._base import Metrics, order_arms
from pmem.report._stats import cluster_bootstrap, mcnemar_exact, seed_for, wilson, with_wilson
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


#: what a history id says of its slice when it names none (every session of the conversation)
WHOLE = "all sessions"


def slice_of(history_id: pl.Expr) -> pl.Expr:
    """The LoCoMo slice a history belongs to, from its id: ``locomo/conv-26/sessions=4`` -> ``sessions=4``
    (:data:`WHOLE` where the id names none), so that two slices of one run are never pooled."""
    rest = history_id.str.replace(r"^locomo/[^/]+/?", "")
    return pl.when(rest == "").then(pl.lit(WHOLE)).otherwise(rest)


def primary_slice(data: pl.DataFrame) -> str | None:
    """The slice with the most questions (what a single figure of the run quotes)."""
    if data.height == 0 or "slice" not in data.columns:
        return None
    sizes = (
        data.filter(pl.col("category") == OVERALL)
        .group_by("slice")
        .agg(pl.col("n").max())
        .sort("n", "slice", descending=[True, False])
    )
    return str(sizes["slice"][0]) if sizes.height else None


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
            "slice": pl.String,
            C.QUESTION_ID: pl.String,
            C.ARM: pl.String,
            C.QUESTION_TYPE: pl.String,
            C.F1: pl.Float64,
            C.BLEU1: pl.Float64,
            C.CORRECT: pl.Boolean,
            "judged": pl.Boolean,
            C.ALT_GOLD_KIND: pl.String,
            "f1_alt": pl.Float64,
            "correct_alt": pl.Boolean,
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
                slice_of(pl.col(C.HISTORY_ID)).alias("slice"),
                C.QUESTION_ID,
                C.ARM,
                C.QUESTION_TYPE,
                col(C.F1, pl.Float64),
                col(C.BLEU1, pl.Float64),
                col(C.CORRECT, pl.Boolean),
                col(C.JUDGE_MODEL, pl.String).is_not_null().alias("judged"),
                col(C.ALT_GOLD_KIND, pl.String),
                # against the other gold: the same where the question's two golds agree
                pl.coalesce(col(C.ALT_F1, pl.Float64), col(C.F1, pl.Float64)).alias("f1_alt"),
                pl.coalesce(col(C.ALT_CORRECT, pl.Boolean), col(C.CORRECT, pl.Boolean)).alias("correct_alt"),
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
            f1_alt=pl.col("f1_alt").mean(),
            judge_correct_alt=(pl.col("judged") & pl.col("correct_alt").fill_null(False)).sum(),
        )

    answered = rows.filter(pl.col(C.QUESTION_TYPE).is_in(ORDER))
    if answered.height == 0:
        return pl.DataFrame()
    per = agg(answered, ["slice", C.ARM, C.QUESTION_TYPE]).rename({C.QUESTION_TYPE: "category"})
    pooled = agg(answered, ["slice", C.ARM]).with_columns(category=pl.lit(OVERALL))
    data = pl.concat([per, pooled.select(per.columns)])
    for k_col, name in (("judge_correct", "j"), ("judge_correct_alt", "j_alt")):
        bounds = [wilson(int(k), int(n)) for k, n in data.select(k_col, "judged").iter_rows()]
        data = data.with_columns(
            pl.when(pl.col("judged") > 0).then(pl.col(k_col) / pl.col("judged")).alias(name),
            pl.Series(
                f"{name}_wilson_lo",
                [b[0] if n else None for b, n in zip(bounds, data["judged"], strict=True)],
            ),
            pl.Series(
                f"{name}_wilson_hi",
                [b[1] if n else None for b, n in zip(bounds, data["judged"], strict=True)],
            ),
        )
    rank = {c: i for i, c in enumerate((*ORDER, OVERALL))}
    return (
        data.with_columns(_o=pl.col("category").replace_strict(rank, return_dtype=pl.Int64))
        .sort("slice", C.ARM, "_o")
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
        if data.height:
            data = data.filter(pl.col("slice") == primary_slice(data))
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
    if metric in ("j", "j_alt"):
        if not r["judged"]:
            return "not judged"
        return f"{pct(r[metric])} {ci(r[f'{metric}_wilson_lo'], r[f'{metric}_wilson_hi'])} (n={r['judged']})"
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
        "accuracy % [Wilson 95% CI] on the questions it judged (its rules and prompt: pmem.bench's "
        "judge; how far to believe it: the calibration table below). Overall 1-4 pools the "
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
        keys=("slice", C.ARM, "category"),
        values=("f1", "bleu1", "j"),
        section=SECTION,
    )
    if data.height == 0:
        return empty
    idx = {(r["slice"], r[C.ARM], r["category"]): r for r in data.iter_rows(named=True)}
    slices = slice_order(rows)
    alt_kinds = rows[C.ALT_GOLD_KIND].drop_nulls().unique().to_list()
    metrics = [("f1", "F1"), ("bleu1", "BLEU-1"), ("j", "J (judge)")]
    if len(alt_kinds) == 1:
        kind = alt_kinds[0]
        run_gold = "audited" if kind == "original" else "original"
        metrics[1:1] = [("f1_alt", f"F1, {kind} gold")]
        metrics.append(("j_alt", f"J, {kind} gold"))
        changed = rows.filter(pl.col(C.ALT_GOLD_KIND).is_not_null() & pl.col(C.QUESTION_TYPE).is_in(ORDER))
        notes.append(
            f"Two golds: the run is scored against LoCoMo's {run_gold} answers; the '{kind} gold' rows score "
            f"the same answers against the {kind} ones (the audit dial481/locomo-audit changes "
            f"{changed[C.QUESTION_ID].n_unique()} of this run's questions of categories 1-4; the others "
            "count the same under both)."
        )
    out = []
    for sl in slices:
        for arm in order_arms(data.filter(pl.col("slice") == sl)[C.ARM].unique().to_list()):
            for metric, label in metrics:
                line = {"slice": sl, C.ARM: arm, "metric": label}
                for cat in (*ORDER, OVERALL):
                    line[cat] = _cell(idx.get((sl, arm, cat)), metric)
                out.append(line)
    display = pl.DataFrame(out)
    if len(slices) == 1:
        display = display.drop("slice")
    return Table(
        empty.name,
        empty.title,
        data.select(
            "slice",
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
            "f1_alt",
            "judge_correct_alt",
            "j_alt",
            "j_alt_wilson_lo",
            "j_alt_wilson_hi",
        ),
        display,
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
        keys=("slice", C.ARM),
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
        scored.group_by("slice", C.ARM)
        .agg(
            n=(pl.col(C.QUESTION_TYPE) == ADVERSARIAL).sum(),
            abstained_k=((pl.col(C.QUESTION_TYPE) == ADVERSARIAL) & pl.col(C.CORRECT).fill_null(False)).sum(),
            n_all=pl.col("score").is_not_null().sum(),
            overall=pl.col("score").mean(),
        )
        .sort("slice", C.ARM)
    )
    data = with_wilson(data, "abstained", "abstained_k", "n").rename({"overall": OVERALL_ALL})
    return replace(empty, data=data, display=_per_slice(data, _adversarial_line, slice_order(rows)))


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
        keys=("slice", C.ARM),
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
        .select(slice_of(pl.col(C.HISTORY_ID)).alias("slice"), C.ARM, C.READ_CITES, C.EVIDENCE_TURNS)
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
        .group_by("slice", C.ARM)
        .agg(right=pl.len(), cited_k=pl.col("hit").sum())
        .sort("slice", C.ARM)
    )
    data = with_wilson(data, "cited", "cited_k", "right")

    def line(r: dict[str, Any]) -> dict[str, str]:
        cited = f"{pct(r['cited'])} {ci(r['cited_wilson_lo'], r['cited_wilson_hi'])} (n={r['cited_k']})"
        return {C.ARM: r[C.ARM], "right answers": str(r["right"]), "cite an evidence turn": cited}

    return replace(empty, data=data, display=_per_slice(data, line, slice_order(locomo_rows(m))))


def slice_order(rows: pl.DataFrame) -> list[str]:
    """The slices of :func:`locomo_rows`, the one with the most questions first."""
    sizes = rows.group_by("slice").agg(pl.struct(C.HISTORY_ID, C.QUESTION_ID).n_unique().alias("n"))
    return sizes.sort(["n", "slice"], descending=[True, False])["slice"].to_list()


def _per_slice(
    data: pl.DataFrame, line: Callable[[dict[str, Any]], dict[str, str]], order: list[str]
) -> pl.DataFrame:
    """One display line per (slice, arm), the slices in ``order`` and arms in display order; the slice
    column only where a run has several."""
    slices = [sl for sl in order if sl in set(data["slice"].to_list())]
    out: list[dict[str, str]] = []
    for sl in slices:
        idx = {r[C.ARM]: r for r in data.filter(pl.col("slice") == sl).iter_rows(named=True)}
        out.extend({"slice": sl, **line(idx[a])} for a in order_arms(idx))
    display = pl.DataFrame(out)
    return display.drop("slice") if len(slices) == 1 else display


def f1_paired_table(m: Metrics, reference: str = "pmem") -> Table:
    """Each arm against ``reference`` on the LoCoMo questions (categories 1-4) both answered, per slice
    and category and over 1-4: LoCoMo's F1 (mean difference with a conversation-clustered bootstrap
    interval, Wilcoxon signed-rank test) and the judge's verdicts (exact McNemar on the discordant
    questions, where both were judged)."""
    notes = [
        f"LoCoMo categories 1-4, on the questions both `{reference}` and the arm answered, per slice and "
        f"category: F1 (x100) diff = F1({reference}) − F1(arm), mean over questions, with a 95% percentile "
        "interval from resampling whole conversations (histories); p F1: two-sided Wilcoxon signed-rank "
        "test on the per-question differences (ties at zero dropped; 1.0 when every difference is zero). "
        f"J: the judge's accuracy of each on the questions both were judged; {reference} only / arm only: "
        "questions one got right and the other wrong; p J: exact two-sided McNemar on those.",
    ]
    empty = Table(
        "locomo_f1_paired",
        f"LoCoMo: each arm against {reference}, paired (F1 and judge)",
        pl.DataFrame(),
        None,
        notes,
        keys=("slice", "category", "arm_b"),
        values=("diff",),
        section=SECTION,
    )
    rows = locomo_rows(m).filter(pl.col(C.QUESTION_TYPE).is_in(ORDER) & pl.col(C.F1).is_not_null())
    if rows.height == 0 or reference not in set(rows[C.ARM].to_list()):
        return empty
    ref = rows.filter(pl.col(C.ARM) == reference).select(
        C.HISTORY_ID, C.QUESTION_ID, ref_f1=C.F1, ref_judged="judged", ref_correct=C.CORRECT
    )
    out = []
    for arm in order_arms([a for a in rows[C.ARM].unique().to_list() if a != reference]):
        joined = rows.filter(pl.col(C.ARM) == arm).join(ref, on=[C.HISTORY_ID, C.QUESTION_ID])
        for sl in sorted(joined["slice"].unique().to_list()):
            in_slice = joined.filter(pl.col("slice") == sl)
            for category in (OVERALL, *ORDER):
                pairs = (
                    in_slice if category == OVERALL else in_slice.filter(pl.col(C.QUESTION_TYPE) == category)
                )
                if pairs.height:
                    out.append(
                        {
                            "slice": sl,
                            "category": category,
                            "arm_b": arm,
                            **_paired(pairs, reference, arm, sl, category),
                        }
                    )
    if not out:
        return empty
    data = pl.DataFrame(out)
    display = data.select(
        pl.col("slice"),
        pl.col("category"),
        pl.col("arm_b").alias("arm"),
        pl.col("n"),
        pl.format("{}", (100 * pl.col(f"f1_{reference}")).round(1)).alias(f"F1 {reference}"),
        pl.format("{}", (100 * pl.col("f1_arm")).round(1)).alias("F1 arm"),
        pl.format(
            "{} [{}, {}]",
            (100 * pl.col("diff")).round(1),
            (100 * pl.col("diff_lo")).round(1),
            (100 * pl.col("diff_hi")).round(1),
        ).alias("F1 diff [95% CI]"),
        pl.col("p_wilcoxon").map_elements(lambda p: f"{p:.3g}", return_dtype=pl.String).alias("p F1"),
        pl.when(pl.col("n_judged") > 0)
        .then(
            pl.format(
                "{}% vs {}%", (100 * pl.col(f"j_{reference}")).round(1), (100 * pl.col("j_arm")).round(1)
            )
        )
        .otherwise(pl.lit("not judged"))
        .alias(f"J {reference} vs arm"),
        pl.format("{} / {}", pl.col("a_only"), pl.col("b_only")).alias(f"{reference} only / arm only"),
        pl.col("p_mcnemar").map_elements(lambda p: f"{p:.3g}", return_dtype=pl.String).alias("p J"),
    )
    if data["slice"].n_unique() == 1:
        display = display.drop("slice")
    return replace(empty, data=data, display=display)


def _paired(pairs: pl.DataFrame, reference: str, arm: str, sl: str, category: str) -> dict[str, Any]:
    per = pairs.group_by(C.HISTORY_ID).agg(num=(pl.col("ref_f1") - pl.col(C.F1)).sum(), den=pl.len())
    lo, hi = cluster_bootstrap(
        per["num"].to_numpy(),
        per["den"].to_numpy(),
        np.ones(per.height),
        seed=seed_for("f1", arm, sl, category),
    )
    diffs = (pairs["ref_f1"] - pairs[C.F1]).to_numpy()
    p = 1.0 if not np.any(diffs) else float(wilcoxon(diffs, zero_method="wilcox").pvalue)
    judged = pairs.filter(pl.col("judged") & pl.col("ref_judged"))
    a = judged["ref_correct"].fill_null(False)
    b = judged[C.CORRECT].fill_null(False)
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    return {
        "n": pairs.height,
        f"f1_{reference}": float(pairs["ref_f1"].to_numpy().mean()),
        "f1_arm": float(pairs[C.F1].to_numpy().mean()),
        "diff": float(diffs.mean()),
        "diff_lo": lo,
        "diff_hi": hi,
        "p_wilcoxon": p,
        "n_judged": judged.height,
        f"j_{reference}": int(a.sum()) / judged.height if judged.height else None,
        "j_arm": int(b.sum()) / judged.height if judged.height else None,
        "a_only": a_only,
        "b_only": b_only,
        "p_mcnemar": mcnemar_exact(a_only, b_only),
    }
