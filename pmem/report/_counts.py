"""Per-history counts and the accuracy and stale-rate intervals computed from them.

One lazy pass over ``results/`` reduces it to per-history counts (:func:`history_counts`); every accuracy,
stale-rate and read-size view aggregates those counts (:func:`summarize`), and its clustered bootstrap
draws over compressed history patterns (see :func:`pmem.report._stats.cluster_bootstrap`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from pmem.report._base import group_keys
from pmem.report._load import Run
from pmem.report._stats import cluster_bootstrap, seed_for, wilson
from pmem.rundir import columns as C


def history_counts(run: Run) -> pl.DataFrame:
    """Per (benchmark, subset, arm, params, question_type, history): questions, correct, stale counts, read size."""
    lf = run.frame("results")
    params = run.params()
    cols = set(run.columns("results"))
    keys = [*group_keys(params), C.HISTORY_ID]
    if lf is None:
        schema = {k: pl.String for k in keys}
        return pl.DataFrame(
            schema=schema
            | {
                "n": pl.UInt32,
                "k": pl.Int64,
                "sn": pl.UInt32,
                "sk": pl.Int64,
                "tok": pl.Float64,
                "chars": pl.Float64,
            }
        )
    stale = pl.col(C.STALE) if C.STALE in cols else pl.lit(None, dtype=pl.Boolean)
    tok = pl.col(C.READ_TOKENS).cast(pl.Float64) if C.READ_TOKENS in cols else pl.lit(None, dtype=pl.Float64)
    chars = pl.col(C.READ_CHARS).cast(pl.Float64) if C.READ_CHARS in cols else pl.lit(None, dtype=pl.Float64)
    # benchmark, subset and parameters are properties of a history: grouping by three keys and carrying
    # the rest with first() halves the cost of an eight-key group-by over a million rows
    small = [C.HISTORY_ID, C.ARM, C.QUESTION_TYPE]
    carried = [k for k in keys if k not in small]
    return (
        lf.with_columns(
            pl.col(C.CORRECT).fill_null(False), stale.alias(C.STALE), tok.alias("tok"), chars.alias("chars")
        )
        .group_by(small)
        .agg(
            *[pl.col(c).first() for c in carried],
            n=pl.len(),
            k=pl.col(C.CORRECT).cast(pl.Int64).sum(),
            sn=pl.col(C.STALE).is_not_null().sum(),
            sk=pl.col(C.STALE).fill_null(False).cast(pl.Int64).sum(),
            tok=pl.col("tok").sum(),
            chars=pl.col("chars").sum(),
            tok_n=pl.col("tok").is_not_null().sum(),
        )
        .collect()
    )


def summarize(hist: pl.DataFrame, keys: Sequence[str], *, bootstrap: bool = True) -> pl.DataFrame:
    """Accuracy and stale rate per ``keys`` with Wilson and history-clustered bootstrap intervals."""
    keys = list(keys)
    if hist.height == 0:
        return pl.DataFrame()
    agg = (
        hist.group_by(keys)
        .agg(
            n=pl.col("n").sum(),
            correct=pl.col("k").sum(),
            histories=pl.len(),
            stale_n=pl.col("sn").sum(),
            stale_k=pl.col("sk").sum(),
            tok=pl.col("tok").sum(),
            chars=pl.col("chars").sum(),
            tok_n=pl.col("tok_n").sum(),
        )
        .with_columns(
            read_tokens=pl.col("tok") / pl.col("tok_n"), read_chars=pl.col("chars") / pl.col("tok_n")
        )
        .sort(keys, nulls_last=True)
    )
    acc_lo, acc_hi, st_lo, st_hi, b_lo, b_hi, sb_lo, sb_hi = ([] for _ in range(8))
    for row in agg.select("n", C.CORRECT, "stale_n", "stale_k").iter_rows():
        n, k, sn, sk = row
        lo, hi = wilson(k, n)
        acc_lo.append(lo)
        acc_hi.append(hi)
        lo, hi = wilson(sk, sn)
        st_lo.append(lo)
        st_hi.append(hi)
    if bootstrap:
        boots = _bootstrap_by_group(hist, keys, agg)
        b_lo, b_hi, sb_lo, sb_hi = boots
    else:
        b_lo = b_hi = sb_lo = sb_hi = [math.nan] * agg.height
    return agg.with_columns(
        accuracy=pl.col(C.CORRECT) / pl.col("n"),
        acc_wilson_lo=pl.Series(acc_lo, dtype=pl.Float64),
        acc_wilson_hi=pl.Series(acc_hi, dtype=pl.Float64),
        acc_boot_lo=pl.Series(b_lo, dtype=pl.Float64),
        acc_boot_hi=pl.Series(b_hi, dtype=pl.Float64),
        stale_rate=pl.when(pl.col("stale_n") > 0).then(pl.col("stale_k") / pl.col("stale_n")),
        stale_wilson_lo=pl.Series(st_lo, dtype=pl.Float64),
        stale_wilson_hi=pl.Series(st_hi, dtype=pl.Float64),
        stale_boot_lo=pl.Series(sb_lo, dtype=pl.Float64),
        stale_boot_hi=pl.Series(sb_hi, dtype=pl.Float64),
    )


def _bootstrap_by_group(hist: pl.DataFrame, keys: list[str], agg: pl.DataFrame) -> tuple[list[float], ...]:
    """History-clustered bootstrap of accuracy and stale rate for every group of ``agg`` (same order)."""
    key_of = [tuple(r) for r in agg.select(keys).iter_rows()]
    out: dict[str, dict[tuple[Any, ...], tuple[float, float]]] = {"acc": {}, "stale": {}}
    # Groups where every history holds one question need no clustering: Wilson is the interval there.
    multi = hist.group_by(keys).agg(_m=(pl.col("n") > 1).any()).filter(pl.col("_m")).drop("_m")
    if multi.height == 0:
        nans = [math.nan] * agg.height
        return nans, nans, nans, nans
    hist = hist.join(multi, on=keys, how="semi", nulls_equal=True)
    for label, num_col, den_col in (("acc", "k", "n"), ("stale", "sk", "sn")):
        pats = (
            hist.filter(pl.col(den_col) > 0)
            .group_by([*keys, num_col, den_col])
            .agg(c=pl.len())
            .sort(keys, nulls_last=True)
        )
        if pats.height == 0:
            continue
        for gkey, sub in pats.partition_by(keys, as_dict=True, maintain_order=True).items():
            out[label][tuple(gkey)] = cluster_bootstrap(
                sub[num_col].to_numpy(),
                sub[den_col].to_numpy(),
                sub["c"].to_numpy(),
                seed=seed_for(label, *gkey),
            )
    nan = (math.nan, math.nan)
    acc = [out["acc"].get(k, nan) for k in key_of]
    st = [out["stale"].get(k, nan) for k in key_of]
    return [a[0] for a in acc], [a[1] for a in acc], [s[0] for s in st], [s[1] for s in st]
