"""Paired comparisons of every arm against the reference arm on the same questions: the accuracy
difference with a history-clustered paired bootstrap interval, and the exact McNemar test."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from pmem.report._base import Metrics, group_keys
from pmem.report._stats import cluster_bootstrap, mcnemar_exact, seed_for
from pmem.report._table import Table
from pmem.rundir import columns as C


def paired_vs_reference_table(m: Metrics, reference: str = "pmem") -> Table:
    """Each arm against ``reference`` on the same questions: paired bootstrap difference and exact McNemar."""
    lf = m.run.frame("results")
    notes = [
        f"Paired comparisons against `{reference}` on the questions both arms answered. diff = "
        f"accuracy({reference}) − accuracy(other), with a paired bootstrap 95% CI resampling histories. "
        f"fixed-broken: questions {reference} gets right and the other arm wrong, and the reverse. "
        "McNemar: exact two-sided binomial test on those discordant counts."
    ]
    keys = [k for k in group_keys(m.params) if k != C.ARM]
    empty = Table(
        "paired",
        f"Paired comparisons against {reference}",
        pl.DataFrame(),
        None,
        notes,
        keys=(*keys, "arm_b"),
        values=("diff",),
        section="paired",
    )
    if lf is None:
        return empty
    correct = pl.col(C.CORRECT).fill_null(False).cast(pl.Int8)
    # several agents label arms "arm@model" (see _load): pair arms answered by the same agent only
    agent = pl.col(C.ARM).str.extract(r"@(.*)$", 1).fill_null("")
    is_ref = pl.col(C.ARM).str.replace(r"@.*$", "") == reference
    # a question is identified by (history_id, question_id); the group keys ride along from the reference
    ref = lf.filter(is_ref).select(
        *keys,
        C.HISTORY_ID,
        C.QUESTION_ID,
        agent.alias("_agent"),
        pl.col(C.ARM).alias("arm_a"),
        correct.alias("a"),
    )
    other = lf.filter(~is_ref).select(
        C.HISTORY_ID, C.QUESTION_ID, agent.alias("_agent"), pl.col(C.ARM).alias("arm_b"), correct.alias("b")
    )
    joined = ref.join(other, on=[C.HISTORY_ID, C.QUESTION_ID, "_agent"], how="inner")
    per_hist = (
        joined.group_by([*keys, "arm_a", "arm_b", C.HISTORY_ID])
        .agg(
            m_=pl.len(),
            d_=(pl.col("a") - pl.col("b")).cast(pl.Int64).sum(),
            fixed=((pl.col("a") == 1) & (pl.col("b") == 0)).sum(),
            broken=((pl.col("a") == 0) & (pl.col("b") == 1)).sum(),
            ka=pl.col("a").cast(pl.Int64).sum(),
            kb=pl.col("b").cast(pl.Int64).sum(),
        )
        .collect()
    )
    if per_hist.height == 0:
        return empty
    gkeys = [*keys, "arm_a", "arm_b"]
    agg = (
        per_hist.group_by(gkeys)
        .agg(
            n=pl.col("m_").sum(),
            histories=pl.len(),
            fixed=pl.col("fixed").sum(),
            broken=pl.col("broken").sum(),
            acc_a=pl.col("ka").sum() / pl.col("m_").sum(),
            acc_b=pl.col("kb").sum() / pl.col("m_").sum(),
        )
        .with_columns(diff=pl.col("acc_a") - pl.col("acc_b"))
        .sort(gkeys, nulls_last=True)
    )
    pats = per_hist.group_by([*gkeys, "d_", "m_"]).agg(c=pl.len())
    boot = {}
    for gkey, sub in pats.partition_by(gkeys, as_dict=True, maintain_order=True).items():
        boot[tuple(gkey)] = cluster_bootstrap(
            sub["d_"].to_numpy(), sub["m_"].to_numpy(), sub["c"].to_numpy(), seed=seed_for("paired", *gkey)
        )
    los, his, ps = [], [], []
    for r in agg.iter_rows(named=True):
        lo, hi = boot.get(tuple(r[k] for k in gkeys), (math.nan, math.nan))
        los.append(lo)
        his.append(hi)
        ps.append(mcnemar_exact(r["fixed"], r["broken"]))
    data = agg.with_columns(
        diff_boot_lo=pl.Series(los, dtype=pl.Float64),
        diff_boot_hi=pl.Series(his, dtype=pl.Float64),
        mcnemar_p=pl.Series(ps, dtype=pl.Float64),
    )
    data = data.select(
        *keys,
        "arm_a",
        "arm_b",
        "n",
        "histories",
        "acc_a",
        "acc_b",
        "diff",
        "diff_boot_lo",
        "diff_boot_hi",
        "fixed",
        "broken",
        "mcnemar_p",
    )

    def fmt_diff(r: dict[str, Any]) -> str:
        lo, hi = r["diff_boot_lo"], r["diff_boot_hi"]
        band = "" if math.isnan(lo) else f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        return f"{100 * r['diff']:+.1f}{band}"

    display = data.select(
        C.BENCHMARK,
        C.SUBSET,
        *[pl.col(p).cast(pl.String) for p in m.params],
        C.QUESTION_TYPE,
        pl.concat_str([pl.col("arm_a"), pl.lit(" vs "), pl.col("arm_b")]).alias("pair"),
        "n",
        pl.concat_str(
            [
                (pl.col("acc_a") * 100).round(1).cast(pl.String),
                pl.lit(" / "),
                (pl.col("acc_b") * 100).round(1).cast(pl.String),
            ]
        ).alias("acc a / b"),
        pl.struct(data.columns)
        .map_elements(fmt_diff, return_dtype=pl.String)
        .alias("diff pp [paired boot CI]"),
        pl.concat_str([pl.col("fixed").cast(pl.String), pl.lit("-"), pl.col("broken").cast(pl.String)]).alias(
            "fixed-broken"
        ),
        pl.col("mcnemar_p").map_elements(lambda p: f"{p:.3g}", return_dtype=pl.String).alias("McNemar p"),
    )
    return Table(
        empty.name,
        empty.title,
        data,
        display,
        notes,
        keys=(*keys, "arm_b"),
        values=("diff", "fixed", "broken"),
        section="paired",
    )
