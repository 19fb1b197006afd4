"""Accuracy and stale rate: the cell formats and columns every accuracy view shares, and the two tables
that list every cell (``accuracy``, ``stale_rate``)."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from pmem.report._base import Metrics, group_keys
from pmem.report._table import Table, ci, pct
from pmem.rundir import columns as C

#: what a stale answer is, per benchmark (quoted in the stale-rate notes)
STALE_DEFINITIONS = {
    "alfworld-revision": "prediction names an earlier location of the object (chains: a location before the "
    "current one; retraction: the retracted value; conflict: the losing report after settling)",
    "factconsolidation": "single-hop questions whose gold is the final value of a key with more than one "
    "parsed value (identifiable update chains); stale = incorrect and equal to an earlier value of that key",
    "longmemeval": "judge-extracted superseded value; questions where superseded and current values coincide "
    "are excluded",
    "provenance-probes": "prediction is wrong and names a value a wrong memory would give: the erased value, "
    "the untrusted claim, another valid time's value, the old room unflagged, the other person's value",
}

#: the accuracy columns of :func:`pmem.report._counts.summarize` a table carries
ACC_COLS = (
    "n",
    "histories",
    C.CORRECT,
    "accuracy",
    "acc_wilson_lo",
    "acc_wilson_hi",
    "acc_boot_lo",
    "acc_boot_hi",
)
#: its stale-rate columns
STALE_COLS = (
    "stale_n",
    "stale_k",
    "stale_rate",
    "stale_wilson_lo",
    "stale_wilson_hi",
    "stale_boot_lo",
    "stale_boot_hi",
)


def acc_cell(r: dict[str, Any]) -> str:
    """``accuracy % [Wilson CI] (n)``, with the bootstrap interval where histories hold several questions."""
    if not r.get("n"):
        return "missing (no rows)"
    boot = ""
    if r.get("histories", 0) < r["n"] and not math.isnan(r.get("acc_boot_lo") or math.nan):
        boot = f" boot {ci(r['acc_boot_lo'], r['acc_boot_hi'])}"
    return f"{pct(r['accuracy'])} {ci(r['acc_wilson_lo'], r['acc_wilson_hi'])}{boot} (n={r['n']})"


def stale_cell(r: dict[str, Any]) -> str:
    """``stale % [Wilson CI] (k/denominator)``; ``undefined`` where no question is stale-scoreable."""
    if not r.get("n"):
        return "missing (no rows)"
    if not r.get("stale_n"):
        return "undefined (denominator 0)"
    return f"{pct(r['stale_rate'])} {ci(r['stale_wilson_lo'], r['stale_wilson_hi'])} ({r['stale_k']}/{r['stale_n']})"


def pivot(
    df: pl.DataFrame,
    row_keys: list[str],
    arms: list[str],
    cell: Any,
    row_label: Any = None,
) -> pl.DataFrame:
    """Rows = distinct ``row_keys`` values, one column per arm; cells formatted by ``cell(row_dict)``."""
    rows = (
        df.select(row_keys).unique().sort(row_keys, nulls_last=True).iter_rows(named=True)
        if row_keys
        else [{}]
    )
    index = {}
    for r in df.iter_rows(named=True):
        index[(*[r[k] for k in row_keys], r[C.ARM])] = r
    out: list[dict[str, str]] = []
    for rk in rows:
        line = {"": row_label(rk) if row_label else ", ".join(f"{k}={rk[k]}" for k in row_keys)}
        for a in arms:
            hit = index.get((*[rk[k] for k in row_keys], a))
            line[a] = cell(hit) if hit is not None else "missing (no rows)"
        out.append(line)
    return pl.DataFrame(out) if out else pl.DataFrame()


def view(acc: pl.DataFrame, benchmark: str, subset: str | None = None) -> pl.DataFrame:
    """The rows of ``acc`` (summarized cells) of one benchmark, and of one subset when given."""
    if acc.height == 0:
        return acc
    f = pl.col(C.BENCHMARK) == benchmark
    if subset is not None:
        f &= pl.col(C.SUBSET) == subset
    return acc.filter(f)


def accuracy_table(m: Metrics) -> Table:
    keys = group_keys(m.params)
    data = m.accuracy.select(*keys, *ACC_COLS) if m.accuracy.height else pl.DataFrame()
    display = None
    if data.height:
        display = data.select(
            C.BENCHMARK,
            C.SUBSET,
            C.ARM,
            pl.concat_str(
                [pl.lit(f"{p}=") + pl.col(p).cast(pl.String) for p in m.params],
                separator=" ",
                ignore_nulls=True,
            ).alias("params")
            if m.params
            else pl.lit("").alias("params"),
            C.QUESTION_TYPE,
            pl.struct(data.columns)
            .map_elements(lambda r: acc_cell(r), return_dtype=pl.String)
            .alias("accuracy % [Wilson] (n)"),
            pl.col("histories"),
        )
    return Table(
        "accuracy",
        "Accuracy per benchmark, subset, arm, parameters and question type",
        data,
        display,
        [
            "Wilson 95% interval for every proportion; where a history contributes several questions the "
            "bootstrap interval (2,000 resamples of whole histories) is the one to read."
        ],
        keys=tuple(keys),
        values=("accuracy",),
        section="accuracy",
    )


def stale_table(m: Metrics) -> Table:
    keys = group_keys(m.params)
    if m.accuracy.height == 0:
        data = pl.DataFrame()
    else:
        data = m.accuracy.filter(pl.col("stale_n") > 0).select(*keys, "n", "histories", *STALE_COLS)
    display = None
    if data.height:
        display = data.select(
            C.BENCHMARK,
            C.SUBSET,
            C.ARM,
            C.QUESTION_TYPE,
            *[pl.col(p).cast(pl.String) for p in m.params],
            pl.col("stale_n").alias("denominator"),
            pl.struct(data.columns)
            .map_elements(lambda r: stale_cell(r), return_dtype=pl.String)
            .alias("stale % [Wilson] (k/denominator)"),
            pl.struct("stale_boot_lo", "stale_boot_hi", "histories")
            .map_elements(
                lambda r: (
                    ci(r["stale_boot_lo"], r["stale_boot_hi"])
                    or ("n/a (one history)" if r["histories"] < 2 else "= Wilson (one question per history)")
                ),
                return_dtype=pl.String,
            )
            .alias("bootstrap CI"),
        )
    present = m.accuracy[C.BENCHMARK].unique().to_list() if m.accuracy.height else []
    notes = [
        "Stale-answer rate: share of stale-eligible questions (stale not null in results/) answered with a "
        "superseded value. Denominators differ by benchmark:"
    ]
    notes += [
        f"{b}: {STALE_DEFINITIONS.get(b, 'as the benchmark scorer defines it')}" for b in sorted(present)
    ]
    return Table(
        "stale_rate",
        "Stale-answer rate with its denominator",
        data,
        display,
        notes,
        keys=tuple(keys),
        values=("stale_rate",),
        section="stale",
    )
