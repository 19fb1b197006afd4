"""Every number in the report, computed with Polars from a run's Parquet datasets.

The flow: one lazy pass over ``results/`` reduces it to per-history counts (:func:`history_counts`); all
accuracy, stale-rate and read-cost views aggregate those counts, and their clustered bootstrap draws over
compressed history patterns (see :func:`pmem.report._stats.cluster_bootstrap`). Paired comparisons and
the retraction view go back to question rows, restricted to the rows they need.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pmem.memory.writepath import PEER_READ, WRITE_PURPOSES
from pmem.models import EMBED_PURPOSE
from pmem.report._load import AGENT_SEP, PLAN, Run, agent_arm
from pmem.report._stats import cluster_bootstrap, mcnemar_exact, seed_for, wilson
from pmem.report._table import Table, ci, num, pct
from pmem.rundir import columns as C

#: Request purposes charged to the write path are the arms' own (WRITE_PURPOSES); read-time ones and the
#: evaluation harness are kept apart.
READ_PURPOSES = frozenset({"answer", "lookup", "prune", "gate", PEER_READ})
HARNESS_PURPOSES = frozenset({"judge"})
#: Ops that commit a value (a "committed fact").
VALUE_OPS = ("accept", "reject", "contest", "resolve")
#: histories/ columns whose per-history mean the write-cost table reports
HISTORY_COSTS = (C.WALL_S, C.STATE_BYTES)

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


@dataclass
class Metrics:
    """All computed tables of one run, plus what was missing."""

    run: Run
    params: list[str]
    hist: pl.DataFrame  # per (group, history) counts
    accuracy: pl.DataFrame
    tables: dict[str, Table] = field(default_factory=dict)
    missing_notes: list[str] = field(default_factory=list)


# -- per-history counts ------------------------------------------------------------------------------------


def group_keys(params: Sequence[str]) -> list[str]:
    return [C.BENCHMARK, C.SUBSET, C.ARM, *params, C.QUESTION_TYPE]


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


# -- formatting helpers ------------------------------------------------------------------------------------


def acc_cell(r: dict[str, Any]) -> str:
    if not r.get("n"):
        return "missing (no rows)"
    boot = ""
    if r.get("histories", 0) < r["n"] and not math.isnan(r.get("acc_boot_lo") or math.nan):
        boot = f" boot {ci(r['acc_boot_lo'], r['acc_boot_hi'])}"
    return f"{pct(r['accuracy'])} {ci(r['acc_wilson_lo'], r['acc_wilson_hi'])}{boot} (n={r['n']})"


def stale_cell(r: dict[str, Any]) -> str:
    if not r.get("n"):
        return "missing (no rows)"
    if not r.get("stale_n"):
        return "undefined (denominator 0)"
    return f"{pct(r['stale_rate'])} {ci(r['stale_wilson_lo'], r['stale_wilson_hi'])} ({r['stale_k']}/{r['stale_n']})"


def _order_arms(arms: Iterable[str]) -> list[str]:
    from pmem.arms import sort_arms  # the arm registry's display order

    return sort_arms(arms)


def expected_cells(run: Run) -> list[tuple[str, str | None, str]]:
    """(benchmark, subset or None when the config names none, arm) the config asks for.

    A config may list one benchmark several times with different subsets and arms (the quickstart does).
    """
    cfg = run.config
    global_arms = [str(a) for a in cfg.get("arms", []) or []] if isinstance(cfg.get("arms"), list) else []
    out: list[tuple[str, str | None, str]] = []
    for b in cfg.get("benchmarks", []) or []:
        if not isinstance(b, dict) or "name" not in b:
            continue
        subsets = b.get("subsets") or ([b["subset"]] if b.get("subset") else [None])
        arms = [str(a) for a in b.get("arms") or global_arms]
        out += [(str(b["name"]), None if s is None else str(s), a) for s in subsets for a in arms]
    return list(dict.fromkeys(out))


def _expected_arms(run: Run, benchmark: str, subset: str | None = None) -> list[str]:
    return [
        a for b, s, a in expected_cells(run) if b == benchmark and (subset is None or s in (None, subset))
    ]


def _pivot(
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


# -- benchmark views ---------------------------------------------------------------------------------------


def _view(acc: pl.DataFrame, benchmark: str, subset: str | None = None) -> pl.DataFrame:
    if acc.height == 0:
        return acc
    f = pl.col(C.BENCHMARK) == benchmark
    if subset is not None:
        f &= pl.col(C.SUBSET) == subset
    return acc.filter(f)


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
STALE_COLS = (
    "stale_n",
    "stale_k",
    "stale_rate",
    "stale_wilson_lo",
    "stale_wilson_hi",
    "stale_boot_lo",
    "stale_boot_hi",
)


def table6(m: Metrics) -> Table:
    v = _view(m.accuracy, "alfworld-revision", "chains")
    seen = v[C.ARM].to_list() if v.height else []
    configured = [] if m.run.arms_by_agent else _expected_arms(m.run, "alfworld-revision", "chains")
    arms = _order_arms([*configured, *seen])
    data = (
        v.select(C.L, C.ARM, *ACC_COLS, *STALE_COLS, C.READ_TOKENS, C.READ_CHARS)
        if v.height
        else pl.DataFrame()
    )
    notes = [
        "Current-value accuracy on revision chains, by number of revisions L. Cells: accuracy % "
        "[Wilson 95% CI] (n); a history-clustered bootstrap interval is added where histories hold "
        "several questions. Read size: mean characters shown to the reader per query."
    ]
    display = None
    if v.height:
        display = _pivot(v, [C.L], arms, acc_cell, lambda r: f"L={r[C.L]}")
        chars = _pivot(
            v.group_by(C.ARM).agg(
                read_chars=(pl.col(C.READ_CHARS) * pl.col("n")).sum() / pl.col("n").sum(), n=pl.col("n").sum()
            ),
            [],
            arms,
            lambda r: f"{num(r[C.READ_CHARS])} chars",
            lambda r: "mean read size",
        )
        display = pl.concat([display, chars], how="diagonal_relaxed")
    return Table(
        "table6_chains",
        "Table 6 view: ALFWorld-Revision chains, accuracy vs revisions L",
        data,
        display,
        notes,
        keys=(C.L, C.ARM),
        values=("accuracy", C.READ_CHARS),
        section="alfworld",
    )


def table8(m: Metrics) -> Table:
    """Recovery after retraction over committed cases: recovered = v1, wrong = v2 (stale), lost = neither."""
    lf = m.run.frame("results")
    notes = [
        "Retraction probe: after an erroneous update v1->v2 and d distractors, a retraction names v2 as "
        "wrong. Outcomes over committed cases (the arm's before_retraction answer was the erroneous "
        "value, i.e. that question is correct): recovered = answers v1 (after_retraction correct), "
        "wrong = answers v2 (stale), lost = neither. Arms without a before_retraction question count "
        "every case as committed."
    ]
    empty = Table(
        "table8_retraction",
        "Table 8 view: ALFWorld-Revision retraction, recovery per arm and distance",
        pl.DataFrame(),
        None,
        notes,
        keys=(C.D, C.ARM),
        values=("recovered",),
        section="alfworld",
    )
    if lf is None or C.D not in m.params:
        return empty
    cols = set(m.run.columns("results"))
    stale = pl.col(C.STALE).fill_null(False) if C.STALE in cols else pl.lit(False)
    rows = (
        lf.filter((pl.col(C.BENCHMARK) == "alfworld-revision") & (pl.col(C.SUBSET) == "retraction"))
        .select(
            C.HISTORY_ID,
            C.ARM,
            C.D,
            C.QUESTION_TYPE,
            pl.col(C.CORRECT).fill_null(False),
            stale.alias(C.STALE),
        )
        .collect()
    )
    if rows.height == 0:
        return empty
    before = (
        rows.filter(pl.col(C.QUESTION_TYPE) == "before_retraction")
        .group_by(C.HISTORY_ID, C.ARM, C.D)
        .agg(committed=pl.col(C.CORRECT).all())
    )
    after = (
        rows.filter(pl.col(C.QUESTION_TYPE) == "after_retraction")
        .group_by(C.HISTORY_ID, C.ARM, C.D)
        .agg(recovered=pl.col(C.CORRECT).all(), wrong=(~pl.col(C.CORRECT).all()) & pl.col(C.STALE).any())
    )
    has_before = before.select(C.ARM).unique()
    j = after.join(before, on=[C.HISTORY_ID, C.ARM, C.D], how="left").with_columns(
        committed=pl.when(pl.col(C.ARM).is_in(has_before[C.ARM].implode()))
        .then(pl.col("committed").fill_null(False))
        .otherwise(pl.lit(True))
    )
    data = (
        j.group_by(C.D, C.ARM)
        .agg(
            cases=pl.len(),
            committed=pl.col("committed").sum(),
            recovered_n=(pl.col("committed") & pl.col("recovered")).sum(),
            wrong_n=(pl.col("committed") & pl.col("wrong")).sum(),
            recovered_all_n=pl.col("recovered").sum(),
        )
        .with_columns(lost_n=pl.col("committed") - pl.col("recovered_n") - pl.col("wrong_n"))
        .with_columns(
            recovered=pl.col("recovered_n") / pl.col("committed"),
            wrong=pl.col("wrong_n") / pl.col("committed"),
            lost=pl.col("lost_n") / pl.col("committed"),
            recovered_all=pl.col("recovered_all_n") / pl.col("cases"),
        )
        .sort(C.D, C.ARM)
    )
    wl = [wilson(r, c) for r, c in data.select("recovered_n", "committed").iter_rows()]
    data = data.with_columns(
        recovered_wilson_lo=pl.Series([x[0] for x in wl]), recovered_wilson_hi=pl.Series([x[1] for x in wl])
    )
    arms = _order_arms(data[C.ARM].to_list())

    def cell(r: dict[str, Any]) -> str:
        if not r["committed"]:
            return f"no committed cases (of {r['cases']})"
        return (
            f"{pct(r['recovered'])} {ci(r['recovered_wilson_lo'], r['recovered_wilson_hi'])} "
            f"wrong {pct(r['wrong'])} lost {pct(r['lost'])} (committed {r['committed']}/{r['cases']})"
        )

    return Table(
        empty.name,
        empty.title,
        data,
        _pivot(data, [C.D], arms, cell, lambda r: f"d={r[C.D]}"),
        notes,
        keys=(C.D, C.ARM),
        values=("recovered", "wrong", "lost"),
        section="alfworld",
    )


def conflict_table(m: Metrics) -> Table:
    v = _view(m.accuracy, "alfworld-revision", "conflict")
    notes = [
        "Conflict probe: two reports disagree with no precedence cue; before_settle asks while the "
        "conflict stands (scored by the benchmark: the answer must surface the conflict), after_settle "
        "asks once a later event settles it. Stale after settling = the losing report."
    ]
    data = v.select(C.QUESTION_TYPE, C.ARM, *ACC_COLS, *STALE_COLS) if v.height else pl.DataFrame()
    display = None
    if v.height:
        arms = _order_arms(v[C.ARM].to_list())
        display = _pivot(v, [C.QUESTION_TYPE], arms, acc_cell, lambda r: r[C.QUESTION_TYPE])
    return Table(
        "conflict_probe",
        "Conflict probe (RQ5 view): accuracy before and after settling",
        data,
        display,
        notes,
        keys=(C.QUESTION_TYPE, C.ARM),
        values=("accuracy",),
        section="alfworld",
    )


def two_step_table(m: Metrics) -> Table:
    v = _view(m.accuracy, "alfworld-revision", "two-step")
    data = v.select(C.QUESTION_TYPE, C.ARM, *ACC_COLS, C.READ_CHARS) if v.height else pl.DataFrame()
    display = None
    if v.height:
        display = _pivot(
            v, [C.QUESTION_TYPE], _order_arms(v[C.ARM].to_list()), acc_cell, lambda r: r[C.QUESTION_TYPE]
        )
    notes = ["One revision described as a two-step move; accuracy % [Wilson 95% CI] (n)."]
    if not v.height:
        notes.append(
            "Not in this run: no alfworld-revision benchmark with the two-step subset was swept "
            '(add "two-step" to its subsets to fill this table).'
        )
    return Table(
        "two_step",
        "Single revision, two-step phrasing (Table 6 side note)",
        data,
        display,
        notes,
        keys=(C.QUESTION_TYPE, C.ARM),
        values=("accuracy",),
        section="alfworld",
    )


_FC_SUBSET = re.compile(r"^(sh|mh)_(\d+k)$")


def _length_order(length: str) -> int:
    try:
        return int(length.rstrip("k"))
    except ValueError:
        return 10**9


def table7(m: Metrics) -> Table:
    v = _view(m.accuracy, "factconsolidation")
    notes = [
        "FactConsolidation: accuracy % [Wilson 95% CI] (n) per hop and stream length; bootstrap "
        "intervals resample whole histories (one stream holds many questions). Stale rate over "
        "identifiable update chains, shown with its denominator (stale/denominator). "
        f"Stale definition: {STALE_DEFINITIONS['factconsolidation']}."
    ]
    empty = Table(
        "table7_factconsolidation",
        "Table 7 view: FactConsolidation single-/multi-hop accuracy and stale rate",
        pl.DataFrame(),
        None,
        notes,
        keys=("hop", C.LENGTH, C.ARM),
        values=("accuracy", "stale_rate"),
        section="factconsolidation",
    )
    if v.height == 0:
        return empty
    keys = ["hop", C.LENGTH, C.ARM]
    # one row per (hop, length, arm): question types within a subset are pooled
    hist = m.hist.filter(pl.col(C.BENCHMARK) == "factconsolidation").with_columns(
        hop=pl.col(C.SUBSET).str.extract(_FC_SUBSET.pattern, 1).fill_null("?"),
        length=pl.coalesce(pl.col(C.SUBSET).str.extract(_FC_SUBSET.pattern, 2), pl.col(C.SUBSET)),
    )
    hist = hist.group_by([*keys, C.HISTORY_ID]).agg(
        pl.col("n", "k", "sn", "sk", "tok", "chars", "tok_n").sum()
    )
    data = summarize(hist, keys)
    data = (
        data.with_columns(_lo=pl.col(C.LENGTH).map_elements(_length_order, return_dtype=pl.Int64))
        .sort("hop", "_lo", C.ARM)
        .drop("_lo")
    )
    if (data["histories"] < 2).any():
        notes.append(
            "Some cells hold a single stream (one history): its questions are not independent, the "
            "Wilson interval treats them as if they were, and a history-clustered interval needs "
            "several histories per cell."
        )
    arms = _order_arms(data[C.ARM].to_list())
    lengths = sorted(data[C.LENGTH].unique().to_list(), key=_length_order)
    out = []
    idx = {(r["hop"], r[C.LENGTH], r[C.ARM]): r for r in data.iter_rows(named=True)}
    for a in arms:
        line = {C.ARM: a}
        for hop, label in (("sh", "single-hop acc"), ("mh", "multi-hop acc")):
            for ln in lengths:
                r = idx.get((hop, ln, a))
                line[f"{label} {ln}"] = acc_cell(r) if r else "missing (no rows)"
        for ln in lengths:
            r = idx.get(("sh", ln, a))
            line[f"stale (sh) {ln}"] = stale_cell(r) if r else "missing (no rows)"
        out.append(line)
    return Table(
        empty.name,
        empty.title,
        data.select(*keys, *ACC_COLS, *STALE_COLS, C.READ_TOKENS, C.READ_CHARS),
        pl.DataFrame(out),
        notes,
        keys=tuple(keys),
        values=("accuracy", "stale_rate"),
        section="factconsolidation",
    )


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


def paired_table(m: Metrics, reference: str = "pmem") -> Table:
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


# -- cost ------------------------------------------------------------------------------------------------


def read_cost_table(m: Metrics) -> Table:
    keys = [C.BENCHMARK, C.SUBSET, C.ARM]
    notes = [
        "Read cost per query: context tokens and characters shown to the reader (results.read_tokens / "
        "read_chars), accuracy, and accuracy points per 1k context tokens (Table 5 convention)."
    ]
    if m.accuracy.height == 0:
        return Table("read_cost", "Read cost per query", pl.DataFrame(), None, notes, section="cost")
    data = (
        m.accuracy.group_by(keys)
        .agg(
            n=pl.col("n").sum(),
            correct=pl.col(C.CORRECT).sum(),
            tok=pl.col("tok").sum(),
            chars=pl.col("chars").sum(),
            tok_n=pl.col("tok_n").sum(),
        )
        .with_columns(
            accuracy=pl.col(C.CORRECT) / pl.col("n"),
            read_tokens=pl.col("tok") / pl.col("tok_n"),
            read_chars=pl.col("chars") / pl.col("tok_n"),
        )
        .with_columns(
            acc_per_1k_tokens=pl.when(pl.col(C.READ_TOKENS) > 0).then(
                100 * pl.col("accuracy") / (pl.col(C.READ_TOKENS) / 1000)
            )
        )
        .select(*keys, "n", "accuracy", C.READ_TOKENS, C.READ_CHARS, "acc_per_1k_tokens")
        .sort(keys)
    )
    display = data.select(
        *keys,
        "n",
        (pl.col("accuracy") * 100).round(1).alias("accuracy %"),
        pl.col(C.READ_TOKENS).round(1).alias("tokens/query"),
        pl.col(C.READ_CHARS).round(1).alias("chars/query"),
        pl.col("acc_per_1k_tokens").round(2).alias("acc points per 1k tokens"),
    )
    return Table(
        "read_cost",
        "Read cost per query",
        data,
        display,
        notes,
        keys=tuple(keys),
        values=(C.READ_TOKENS, C.READ_CHARS, "acc_per_1k_tokens"),
        section="cost",
    )


def history_status(run: Run) -> pl.LazyFrame | None:
    """One row per (history, arm) of histories/: benchmark, subset, final status and error.

    A history that failed and then completed on a retry leaves both rows: complete wins, so it is not
    counted as failed.
    """
    if "history_status" in run.cache:
        return run.cache["history_status"]
    hs = run.frame("histories")
    cols = set(run.columns("histories"))
    if hs is None or not {C.BENCHMARK, C.SUBSET} <= cols:
        return None
    err = pl.col(C.ERROR) if C.ERROR in cols else pl.lit(None, dtype=pl.String)
    base = hs.select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET, C.STATUS, err.alias(C.ERROR))
    complete = base.filter(pl.col(C.STATUS) == "complete").unique([C.HISTORY_ID, C.ARM], keep="first")
    # only the (few) rows that are not complete need deduplicating against the complete ones
    rest = (
        base.filter(pl.col(C.STATUS) != "complete")
        .join(complete.select(C.HISTORY_ID, C.ARM), on=[C.HISTORY_ID, C.ARM], how="anti")
        .unique([C.HISTORY_ID, C.ARM], keep="last", maintain_order=True)
    )
    out = pl.concat([complete.with_columns(error=pl.lit(None, dtype=pl.String)), rest]).collect().lazy()
    run.cache["history_status"] = out
    return out


def _history_index(run: Run) -> pl.LazyFrame | None:
    """(history_id, arm) -> (benchmark, subset, status), from histories/ or else from results/."""
    st = history_status(run)
    if st is not None:
        return st.select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET, C.STATUS)
    res = run.frame("results")
    if res is None:
        return None
    return (
        res.select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET)
        .unique()
        .with_columns(status=pl.lit("complete"))
    )


def cost_requests(run: Run) -> pl.LazyFrame | None:
    """requests/ rows that count as costs: rows written by a failed run of a history (``history_failed``,
    null read as false) are evidence of what went wrong, not the cost of the result reported."""
    req = run.frame("requests")
    if req is None or C.HISTORY_FAILED not in run.columns("requests"):
        return req
    return req.filter(~pl.col(C.HISTORY_FAILED).fill_null(False))


def write_cost_table(m: Metrics) -> Table:
    run = m.run
    keys = [C.BENCHMARK, C.SUBSET, C.ARM]
    notes = [
        "Write cost per completed history (means). Write calls: requests with a write purpose "
        f"({', '.join(sorted(WRITE_PURPOSES))}); read calls: {', '.join(sorted(READ_PURPOSES))}; the "
        f"evaluation harness ({', '.join(sorted(HARNESS_PURPOSES))}) is neither. Embed calls (purpose "
        f"{EMBED_PURPOSE}) are counted apart and not charged as writes: the runner logs embedding requests "
        "made while writing and while answering alike. Requests written by a failed run of a history "
        f"({C.HISTORY_FAILED}) are not costs. Committed facts: applied writes with a value-carrying op ("
        + ", ".join(VALUE_OPS)
        + "); cells: "
        "distinct keys they touched. Wall time and state bytes from histories/.",
    ]
    idx = _history_index(run)
    if idx is None:
        return Table(
            "write_cost",
            "Write cost per history",
            pl.DataFrame(),
            None,
            [*notes, "No results/ or histories/: nothing to attribute costs to."],
            section="cost",
        )
    # one row per (history, arm) already (history_status dedups; the results fallback is unique())
    done = idx.filter(pl.col(C.STATUS) == "complete").select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET)
    base = done.group_by(keys).agg(histories=pl.len())
    frames = [base]
    req = cost_requests(run)
    if req is not None:
        frames.append(_request_sums(run, req, idx, keys))
    wr = run.frame("writes")
    ops_cols: list[str] = []
    if wr is not None:
        wcols = set(run.columns("writes"))
        value_op = pl.col(C.OP).is_in(list(VALUE_OPS)) & pl.col(C.APPLIED).fill_null(False)
        if C.VALUE in wcols:
            value_op &= pl.col(C.VALUE).is_not_null()
        key = pl.col(C.KEY) if C.KEY in wcols else pl.lit(None, dtype=pl.String)
        per_w = (
            wr.with_columns(value_op.alias("vop"), key.alias(C.KEY))
            .group_by(C.HISTORY_ID, C.ARM)
            .agg(
                committed_facts=pl.col("vop").sum(),
                cells=pl.col(C.KEY).filter(pl.col("vop")).n_unique(),
                write_ops=pl.len(),
                applied_ops=pl.col(C.APPLIED).fill_null(False).sum(),
            )
        )
        ops = wr.group_by(C.HISTORY_ID, C.ARM, C.OP).agg(c=pl.len()).collect()
        ops_cols = sorted(ops[C.OP].drop_nulls().unique().to_list())
        ops_w = ops.pivot(on=C.OP, index=[C.HISTORY_ID, C.ARM], values="c").lazy() if ops.height else None
        agg_w = done.join(per_w, on=[C.HISTORY_ID, C.ARM], how="inner")
        if ops_w is not None:
            agg_w = agg_w.join(
                ops_w.rename({o: f"op_{o}" for o in ops_cols}), on=[C.HISTORY_ID, C.ARM], how="left"
            )
        frames.append(
            agg_w.group_by(keys).agg(
                pl.col(
                    "committed_facts", "cells", "write_ops", "applied_ops", *[f"op_{o}" for o in ops_cols]
                ).sum(),
                writes_histories=pl.len(),
            )
        )
    hs = run.frame("histories")
    hcols = set(run.columns("histories"))
    extra = [c for c in HISTORY_COSTS if c in hcols]
    if hs is not None and extra and {C.BENCHMARK, C.SUBSET} <= hcols:
        frames.append(
            hs.filter(pl.col(C.STATUS) == "complete")
            .group_by(keys)
            .agg(*[pl.col(c).mean().alias(f"{c}_mean") for c in extra])
        )
    out = frames[0]
    for f in frames[1:]:
        out = out.join(f, on=keys, how="left", nulls_equal=True)
    df = out.collect().sort(keys)
    h = pl.col("histories")
    per_hist: list[pl.Expr] = []
    if req is not None:
        per_hist += [
            (pl.col("write_calls") / h).alias("write_calls_per_history"),
            (pl.col("write_prompt_tokens") / h).alias("write_prompt_tokens_per_history"),
            (pl.col("write_completion_tokens") / h).alias("write_completion_tokens_per_history"),
            ((pl.col("write_prompt_tokens") + pl.col("write_completion_tokens")) / h).alias(
                "write_tokens_per_history"
            ),
            (pl.col("read_calls") / h).alias("read_calls_per_history"),
            (pl.col("embed_calls") / h).alias("embed_calls_per_history"),
            (pl.col("errors") / h).alias("errors_per_history"),
        ]
    else:
        notes.append("requests/ is missing: model calls and tokens are not reported (not zero).")
    if wr is not None:
        per_hist += [
            (pl.col("committed_facts") / pl.col("writes_histories")).alias("committed_facts_per_history"),
            (pl.col("cells") / pl.col("writes_histories")).alias("cells_per_history"),
            pl.when(pl.col("cells") > 0)
            .then(pl.col("committed_facts") / pl.col("cells"))
            .alias("facts_per_cell"),
            *[
                (pl.col(f"op_{o}") / pl.col("writes_histories")).alias(f"op_{o}_per_history")
                for o in ops_cols
            ],
        ]
        if req is not None:
            per_hist.append(
                pl.when(pl.col("committed_facts") > 0)
                .then(pl.col("write_calls") / pl.col("committed_facts"))
                .alias("calls_per_committed_fact")
            )
    else:
        notes.append("writes/ is missing: committed facts, cells and operations are not reported (not zero).")
    absent = [c for c in HISTORY_COSTS if c not in extra]
    if absent:
        notes.append(f"histories/ has no {', '.join(absent)}: not reported (not zero).")
    df = df.with_columns(per_hist)
    value_cols = [
        c
        for c in df.columns
        if c.endswith("_per_history")
        or c
        in (
            "calls_per_committed_fact",
            "facts_per_cell",
            "wall_s_mean",
            "state_bytes_mean",
        )
    ]
    data = df.select(*keys, "histories", *value_cols)
    show = {
        "write_calls_per_history": "write calls",
        "calls_per_committed_fact": "calls/committed fact",
        "write_prompt_tokens_per_history": "write prompt tok",
        "write_completion_tokens_per_history": "write compl. tok",
        "committed_facts_per_history": "committed facts",
        "cells_per_history": "cells",
        "facts_per_cell": "facts/cell",
        "wall_s_mean": "wall s",
        "state_bytes_mean": "state bytes",
        "read_calls_per_history": "read calls",
        "embed_calls_per_history": "embed calls",
        "errors_per_history": "errors",
    }
    disp_cols = [pl.col(c).round(2).alias(lbl) for c, lbl in show.items() if c in data.columns]
    op_cols = [c for c in data.columns if c.startswith("op_")]
    if op_cols:

        def ops_text(r: dict[str, Any]) -> str:
            parts = [f"{c[3:-12]} {r[c]:.1f}" for c in op_cols if r[c]]
            return ", ".join(parts)

        disp_cols.append(
            pl.struct(op_cols).map_elements(ops_text, return_dtype=pl.String).alias("ops per history")
        )
    display = data.select(*keys, "histories", *disp_cols)
    return Table(
        "write_cost",
        "Write cost per history",
        data,
        display,
        notes,
        keys=tuple(keys),
        values=tuple(value_cols),
        section="cost",
    )


_REQ_SUMS = (
    "write_calls",
    "write_prompt_tokens",
    "write_completion_tokens",
    "read_calls",
    "read_call_tokens",
    "harness_calls",
    "embed_calls",
    "errors",
    C.CACHED,
    "calls",
)


def _request_sums(run: Run, req: pl.LazyFrame, idx: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """Model calls and tokens per (benchmark, subset, arm), split into write / read / harness purposes.

    Calls of histories that did not complete are left out. When request rows carry ``benchmark`` and
    ``subset`` (a runner writes them for free: they are constant per file) the sums group by those
    low-cardinality keys directly; otherwise every call is first attributed through its (history, arm),
    a group-by over millions of distinct string pairs that costs about 4x more.
    """
    rcols = set(run.columns("requests"))
    # 0 write, 1 read, 2 harness, 3 embed, 4 any other purpose (counted in calls only)
    code = pl.col(C.PURPOSE).replace_strict(
        {
            **dict.fromkeys(WRITE_PURPOSES, 0),
            **dict.fromkeys(READ_PURPOSES, 1),
            **dict.fromkeys(HARNESS_PURPOSES, 2),
            EMBED_PURPOSE: 3,
        },
        default=4,
        return_dtype=pl.Int8,
    )
    err = pl.col(C.ERROR).is_not_null() if C.ERROR in rcols else pl.lit(False)
    cached = pl.col(C.CACHED).fill_null(False) if C.CACHED in rcols else pl.lit(False)
    pt, ct = (
        pl.col(C.PROMPT_TOKENS).fill_null(0).cast(pl.Int64),
        pl.col(C.COMPLETION_TOKENS).fill_null(0).cast(pl.Int64),
    )
    w, r = (pl.col("_c") == 0).cast(pl.Int64), (pl.col("_c") == 1).cast(pl.Int64)
    sums = [
        w.alias("write_calls"),
        (w * pt).alias("write_prompt_tokens"),
        (w * ct).alias("write_completion_tokens"),
        r.alias("read_calls"),
        (r * (pt + ct)).alias("read_call_tokens"),
        (pl.col("_c") == 2).cast(pl.Int64).alias("harness_calls"),
        (pl.col("_c") == 3).cast(pl.Int64).alias("embed_calls"),
        err.cast(pl.Int64).alias("errors"),
        cached.cast(pl.Int64).alias(C.CACHED),
        pl.lit(1, dtype=pl.Int64).alias("calls"),
    ]
    not_done = idx.filter(pl.col(C.STATUS) != "complete").select(C.HISTORY_ID, C.ARM)
    if {C.BENCHMARK, C.SUBSET} <= rcols:
        failed = not_done.collect()
        lf = req if failed.height == 0 else req.join(failed.lazy(), on=[C.HISTORY_ID, C.ARM], how="anti")
        return lf.with_columns(code.alias("_c")).select(*keys, *sums).group_by(keys).agg(pl.all().sum())
    done = idx.filter(pl.col(C.STATUS) == "complete").select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET)
    per = (
        req.with_columns(code.alias("_c"))
        .select(C.HISTORY_ID, C.ARM, *sums)
        .group_by(C.HISTORY_ID, C.ARM)
        .agg(pl.all().sum())
    )
    return done.join(per, on=[C.HISTORY_ID, C.ARM], how="inner").group_by(keys).agg(pl.col(*_REQ_SUMS).sum())


def break_even_table(m: Metrics, read: Table, write: Table) -> Table:
    notes = [
        "Break-even: queries per history after which a write-time arm's extra write tokens are repaid by the "
        "context tokens it saves per query: N = (write tokens/history(W) − write tokens/history(R)) / "
        "(read tokens/query(R) − read tokens/query(W)). Assumptions: write and read tokens priced equally; "
        "read cost = context tokens shown to the reader (results.read_tokens); write cost = prompt + completion "
        f"tokens of write-purpose model calls (requests/: {', '.join(sorted(WRITE_PURPOSES))}); judging not "
        f"charged; embedding calls not charged at all (the runner logs them with purpose {EMBED_PURPOSE} "
        "whether made while writing or while answering, so write-time embeddings are left out too: an arm "
        "that embeds what it stores is charged less than it spends); read-time arms R are those with "
        "no write-purpose model calls in the cell; per-query "
        "verification calls of read-time paths not charged (they would lower N). 'never' = W reads no fewer "
        "tokens than R.",
    ]
    keys = [C.BENCHMARK, C.SUBSET]
    if read.empty or write.empty or "write_tokens_per_history" not in write.data.columns:
        return Table(
            "break_even",
            "Break-even queries per history",
            pl.DataFrame(),
            None,
            [*notes, "Not computable: needs results/ and requests/."],
            section="cost",
        )
    j = read.data.join(
        write.data.select(*keys, C.ARM, "write_tokens_per_history", "histories"),
        on=[*keys, C.ARM],
        how="left",
    ).with_columns(pl.col("write_tokens_per_history").fill_null(0.0))
    rows = []
    for gkey, sub in j.partition_by(keys, as_dict=True, maintain_order=True).items():
        recs = sub.to_dicts()
        readers = [r for r in recs if not r["write_tokens_per_history"]]
        for w in recs:
            if not w["write_tokens_per_history"] or w["write_tokens_per_history"] <= 0:
                continue
            for r in readers:
                extra = w["write_tokens_per_history"] - r["write_tokens_per_history"]
                saved = (r[C.READ_TOKENS] or 0) - (w[C.READ_TOKENS] or 0)
                if extra <= 0:
                    n_star, verdict = 0.0, "0 (no extra write cost)"
                elif saved <= 0:
                    n_star, verdict = math.inf, "never"
                else:
                    n_star = extra / saved
                    verdict = f"{n_star:,.1f}"
                qph = (w["n"] / w["histories"]) if w.get("histories") else None
                rows.append(
                    {
                        C.BENCHMARK: gkey[0],
                        C.SUBSET: gkey[1],
                        "write_arm": w[C.ARM],
                        "read_arm": r[C.ARM],
                        "extra_write_tokens_per_history": extra,
                        "read_tokens_saved_per_query": saved,
                        "break_even_queries": n_star,
                        "queries_per_history_here": qph,
                        "verdict": verdict,
                    }
                )
    data = pl.DataFrame(rows) if rows else pl.DataFrame()
    display = None
    if data.height:
        display = data.select(
            C.BENCHMARK,
            C.SUBSET,
            "write_arm",
            "read_arm",
            pl.col("extra_write_tokens_per_history").round(0).alias("extra write tok/history"),
            pl.col("read_tokens_saved_per_query").round(1).alias("read tok saved/query"),
            pl.col("verdict").alias("break-even queries"),
            pl.col("queries_per_history_here").round(1).alias("queries/history in this run"),
        )
    return Table(
        "break_even",
        "Break-even queries per history (write-time vs read-time arms)",
        data,
        display,
        notes,
        keys=(C.BENCHMARK, C.SUBSET, "write_arm", "read_arm"),
        values=("break_even_queries",),
        section="cost",
    )


# -- reply quality ---------------------------------------------------------------------------------------


def _has_error(status: pl.Expr, lo: int, hi: int) -> pl.Expr:
    return pl.col(C.ERROR).is_not_null() & status.is_between(lo, hi)


def _rows(where: pl.Expr) -> pl.Expr:
    """The number of rows where ``where`` holds (null counts as false)."""
    return where.fill_null(False).cast(pl.Int64).sum()


#: reply-quality counts per (arm, purpose): name -> (the requests/ columns it needs, its count, its
#: heading). Counts over columns a run lacks are reported as missing, never as zero.
REPLY_COLUMNS: dict[str, tuple[tuple[str, ...], pl.Expr, str]] = {
    "requests": ((), pl.len(), "requests"),
    "sent": ((C.HTTP_ATTEMPT,), _rows(pl.col(C.HTTP_ATTEMPT).is_not_null()), "sent to a server"),
    "failed": ((C.ERROR,), _rows(pl.col(C.ERROR).is_not_null()), "failed"),
    "refused": (
        (C.ERROR, C.HTTP_STATUS),
        _rows(_has_error(pl.col(C.HTTP_STATUS), 400, 499)),
        "refused (4xx)",
    ),
    "server_errors": (
        (C.ERROR, C.HTTP_STATUS),
        _rows(_has_error(pl.col(C.HTTP_STATUS), 500, 599)),
        "server error (5xx)",
    ),
    "no_response": (
        (C.ERROR, C.HTTP_STATUS),
        _rows(pl.col(C.ERROR).is_not_null() & pl.col(C.HTTP_STATUS).is_null()),
        "no response",
    ),
    "context_overflow": (
        (C.ERROR,),
        _rows(pl.col(C.ERROR).str.to_lowercase().str.contains("context", literal=True)),
        "context overflow",
    ),
    "truncated": ((C.FINISH_REASON,), _rows(pl.col(C.FINISH_REASON) == "length"), "truncated (length)"),
    "unparseable": ((C.PARSE_ERROR,), _rows(pl.col(C.PARSE_ERROR).is_not_null()), "unparseable"),
    "retries": ((C.HTTP_ATTEMPT,), _rows(pl.col(C.HTTP_ATTEMPT) > 1), "retries"),
    "failed_history_rows": (
        (C.HISTORY_FAILED,),
        _rows(pl.col(C.HISTORY_FAILED)),
        "from failed histories",
    ),
}
#: requests/ columns the runner added for this table: a run without any of them predates it
REPLY_SOURCE_COLUMNS = (C.HTTP_ATTEMPT, C.HTTP_STATUS, C.FINISH_REASON, C.PARSE_ERROR, C.HISTORY_FAILED)


def reply_quality_table(m: Metrics) -> Table:
    """Per (arm, purpose): requests sent, how they failed, replies cut or unparseable, retries. Rows of
    failed histories are counted: here they are evidence."""
    keys = (C.ARM, C.PURPOSE)
    notes = [
        "One row of requests/ per HTTP request (retries and failovers are rows of their own), every row "
        "counted, those written by failed runs of a history included ('from failed histories'). sent to a "
        f"server: {C.HTTP_ATTEMPT} set (cache hits and in-process models are not sent); failed: {C.ERROR} "
        "set, split by the server's status into refused (4xx), server error (5xx) and no response (no "
        "status: a timeout or a refused connection, or a call that never reached a server); context "
        "overflow: the error mentions the context (also counted under its status); truncated: "
        f"{C.FINISH_REASON} = length (the reply hit max_tokens); unparseable: a reply asked for as JSON that "
        f"did not parse ({C.PARSE_ERROR}); retries: requests after the first of their call.",
    ]
    empty = Table(
        "reply_quality",
        "Model replies: failures, truncation, retries",
        pl.DataFrame(),
        None,
        notes,
        keys=keys,
        section="replies",
    )
    req = m.run.frame("requests")
    if req is None:
        empty.notes.append("requests/ is missing: nothing to count (not zero).")
        return empty
    have = set(m.run.columns("requests"))
    lacking = [c for c in (*REPLY_SOURCE_COLUMNS, C.ERROR) if c not in have]
    counted = {k: v for k, v in REPLY_COLUMNS.items() if set(v[0]) <= have}
    data = (
        req.group_by(keys)
        .agg(*[count.cast(pl.Int64).alias(k) for k, (_, count, _) in counted.items()])
        .collect()
        .sort(keys)
    )
    if lacking:
        old = "predates these columns" if all(c not in have for c in REPLY_SOURCE_COLUMNS) else "lacks them"
        notes.append(
            f"requests/ has no {', '.join(lacking)} column(s) (this run {old}): the counts that need them "
            "are shown as missing, not zero."
        )
    display = data.select(
        *keys,
        *[
            pl.col(k).alias(label)
            if k in counted
            else pl.lit(f"missing (no {next(c for c in cols if c not in have)} column)").alias(label)
            for k, (cols, _, label) in REPLY_COLUMNS.items()
        ],
    )
    return Table(
        empty.name,
        empty.title,
        data,
        display,
        notes,
        keys=keys,
        values=tuple(k for k in counted),
        section="replies",
    )


# -- write-path audit -----------------------------------------------------------------------------------


#: results/ columns of the write-path audit -> the names the audit table gives them. The runner copies each
#: FactConsolidation arm's per-question audit into these columns: the audit's one source.
AUDIT_COLUMNS = {
    C.AUDIT_GOLD_IN_ACTIVE_CELL: "gold_in_active_cell",
    C.AUDIT_GOLD_IN_MATCHING_CELL: "gold_in_matching_cell",
    C.AUDIT_STALE_SIBLING: "stale_sibling",
}


def _percent_of(rate: str, count: str, count_note: str, undefined: str) -> pl.Expr:
    """``rate`` as a percentage followed by ``count_note`` filled with ``count``; ``undefined`` when it is 0."""
    before, after = count_note.split("{}")
    text = pl.concat_str(
        [
            (pl.col(rate) * 100).round(1).cast(pl.String),
            pl.lit(before),
            pl.col(count).cast(pl.String),
            pl.lit(after),
        ]
    )
    return pl.when(pl.col(count) > 0).then(text).otherwise(pl.lit(undefined))


def audit_table(m: Metrics) -> Table:
    run = m.run
    lf = run.frame("results")
    cols = set(run.columns("results"))
    notes = [
        "Write-path audit (FactConsolidation arms with a write path). gold in active cell: the gold value "
        "is the current value of some active cell; in matching cell: of the cell whose key is the "
        "question's key; stale sibling: among questions whose key was overwritten, another active cell "
        "still holds an earlier value. Wrong answers split into write-path (gold absent from every active "
        "cell) and read-path (the store held the answer)."
    ]
    empty = Table(
        "write_audit", "Write-path audit (FactConsolidation)", pl.DataFrame(), None, notes, section="audit"
    )
    if lf is None:
        return empty
    have = [c for c in AUDIT_COLUMNS if c in cols]
    if C.AUDIT_GOLD_IN_ACTIVE_CELL not in have:
        notes.append(
            "Not computable: results/ has no write-path audit columns ("
            + ", ".join(AUDIT_COLUMNS)
            + "): the runner writes them for FactConsolidation arms that keep facts."
        )
        return Table(empty.name, empty.title, pl.DataFrame(), None, notes, section="audit")
    q = (
        lf.filter(
            (pl.col(C.BENCHMARK) == "factconsolidation") & pl.col(C.AUDIT_GOLD_IN_ACTIVE_CELL).is_not_null()
        )
        .select(
            C.SUBSET,
            C.HISTORY_ID,
            C.ARM,
            pl.col(C.CORRECT).fill_null(False),
            *[pl.col(c).alias(AUDIT_COLUMNS[c]) for c in have],
        )
        .collect()
    )
    if q.height == 0:
        notes.append(
            f"No rows: no FactConsolidation question in results/ has a value in {C.AUDIT_GOLD_IN_ACTIVE_CELL} "
            "(arms that keep no fact store leave the audit null)."
        )
        return empty
    notes.append(
        "Source: the per-question audit columns written by the runner in results/ ("
        + ", ".join(have)
        + ", from the benchmark's template parser). 'in matching cell' and 'stale sibling' are defined "
        "for stale-scoreable questions only (their key is identifiable)."
    )
    missing_cols = [c for c in AUDIT_COLUMNS if c not in have]
    if missing_cols:
        notes.append("Not in results/: " + ", ".join(missing_cols) + " (not reported).")
    aggs = [
        pl.len().alias("questions"),
        pl.col("gold_in_active_cell").mean().alias("gold_in_active_cell"),
        (~pl.col(C.CORRECT)).sum().alias("wrong"),
        ((~pl.col(C.CORRECT)) & ~pl.col("gold_in_active_cell")).sum().alias("wrong_write_path"),
        ((~pl.col(C.CORRECT)) & pl.col("gold_in_active_cell")).sum().alias("wrong_read_path"),
    ]
    if "gold_in_matching_cell" in q.columns:
        aggs += [
            pl.col("gold_in_matching_cell").is_not_null().sum().alias("matching_defined"),
            pl.col("gold_in_matching_cell").mean().alias("gold_in_matching_cell"),
        ]
    if "stale_sibling" in q.columns:
        aggs += [
            pl.col("stale_sibling").is_not_null().sum().alias("overwritten_keys"),
            pl.col("stale_sibling").mean().alias("stale_sibling_rate"),
        ]
    data = q.group_by(C.SUBSET, C.ARM).agg(aggs).sort(C.SUBSET, C.ARM)
    disp = [
        pl.col(C.SUBSET),
        pl.col(C.ARM),
        pl.col("questions"),
        (pl.col("gold_in_active_cell") * 100).round(1).alias("gold in active cell %"),
    ]
    # (rate, its denominator, how the denominator is shown, text where it is zero, column label)
    for rate, denominator, shown, undefined, label in (
        (
            "gold_in_matching_cell",
            "matching_defined",
            " (of {})",
            "n/a (no identifiable key)",
            "in matching cell %",
        ),
        (
            "stale_sibling_rate",
            "overwritten_keys",
            " ({} overwritten)",
            "n/a (no overwritten key)",
            "stale sibling %",
        ),
    ):
        if rate in data.columns:
            disp.append(_percent_of(rate, denominator, shown, undefined).alias(label))
        else:
            disp.append(pl.lit("not derivable").alias(label))
    disp.append(
        pl.concat_str(
            [
                pl.col("wrong_write_path").cast(pl.String),
                pl.lit(" write / "),
                pl.col("wrong_read_path").cast(pl.String),
                pl.lit(" read (of "),
                pl.col("wrong").cast(pl.String),
                pl.lit(" wrong)"),
            ]
        ).alias("wrong answers traced to")
    )
    return Table(
        empty.name,
        empty.title,
        data,
        data.select(disp),
        notes,
        keys=(C.SUBSET, C.ARM),
        values=tuple(c for c in data.columns if c not in (C.SUBSET, C.ARM)),
        section="audit",
    )


# -- coverage --------------------------------------------------------------------------------------------


def _planned(run: Run) -> pl.DataFrame | None:
    """Histories planned per (benchmark, subset, arm label), from plan.json; None for a run without one."""
    if run.plan is None:
        return None
    rows = [
        {
            C.BENCHMARK: c["benchmark"],
            C.SUBSET: c["subset"],
            C.ARM: agent_arm(c["arm"], c["model"]) if run.arms_by_agent else c["arm"],
            "planned": c["histories"],
            "not_run": c.get("not_run"),  # why an arm was planned as not run (it needs a real model)
        }
        for c in run.plan
    ]
    schema = {
        C.BENCHMARK: pl.String,
        C.SUBSET: pl.String,
        C.ARM: pl.String,
        "planned": pl.Int64,
        "not_run": pl.String,
    }
    # arms not labelled by agent: results/ cannot tell agents apart (one model, or no model column), and a
    # history id counts once however many agents answered it, so a cell needs the largest agent's share
    return (
        pl.DataFrame(rows, schema=schema)
        .group_by(C.BENCHMARK, C.SUBSET, C.ARM)
        .agg(pl.col("planned").max(), pl.col("not_run").drop_nulls().first())
    )


def _cell_status(r: dict[str, Any], planned: bool) -> str:
    """A coverage cell's status; with a plan, complete histories (distinct ones in results/) are counted
    against the planned number, so a cell short of even one history is partial, never ok."""
    done = r.get("result_histories") or 0
    rows = r.get("result_rows") or 0
    failed = r.get("failed") or 0
    why = f" ({failed} failed)" if failed else ""
    if r.get("not_run"):
        return f"not run: {r['not_run']}"
    if planned and r.get("planned") is not None:
        want = r["planned"]
        if done == 0:
            return f"failed: 0 of {want} histories{why}" if failed else f"missing: 0 of {want} histories"
        if done < want:
            return f"partial: {done} of {want} histories{why}"
        return "ok"
    if rows == 0 and failed:
        return f"failed: all {failed} histories failed"
    if rows == 0:
        return "missing: no rows"
    if failed:
        return f"partial: {failed} of {failed + (r.get('complete') or 0)} histories failed"
    return "ok"


def coverage_table(m: Metrics) -> Table:
    run = m.run
    keys = [C.BENCHMARK, C.SUBSET, C.ARM]
    notes = [
        "What the run holds against what its config asked for. A cell with no result rows is reported "
        "as missing, never as zero; failed histories are counted from histories/."
    ]
    observed = (
        m.hist.group_by(keys).agg(
            result_rows=pl.col("n").sum(), result_histories=pl.col(C.HISTORY_ID).n_unique()
        )
        if m.hist.height
        else pl.DataFrame(
            schema={**{k: pl.String for k in keys}, "result_rows": pl.UInt32, "result_histories": pl.UInt32}
        )
    )
    hst = history_status(run)
    if hst is not None:
        st = (
            hst.group_by(keys)
            .agg(
                complete=(pl.col(C.STATUS) == "complete").sum(),
                failed=(pl.col(C.STATUS) == "failed").sum(),
                other=(~pl.col(C.STATUS).is_in(["complete", "failed"])).sum(),
                first_error=pl.col(C.ERROR).drop_nulls().first(),
            )
            .collect()
        )
    else:
        st = None
        notes.append("histories/ is missing (or lacks benchmark/subset): failed histories cannot be counted.")
    plan = _planned(run)
    if plan is not None:
        notes.append(
            f"Counted against {PLAN}: the histories the latest invocation planned per cell; a cell "
            "whose results hold fewer distinct complete histories is partial."
        )
        exp = plan.select(keys).with_columns(in_config=pl.lit(True))
    else:
        expected: list[dict[str, str]] = []
        for bench, subset, arm in expected_cells(run):
            subsets = (
                [subset]
                if subset is not None
                else (observed.filter(pl.col(C.BENCHMARK) == bench)[C.SUBSET].unique().to_list() or ["(any)"])
            )
            expected += [{C.BENCHMARK: bench, C.SUBSET: s, C.ARM: arm} for s in subsets]
        if run.arms_by_agent and observed.height:
            # several agents: each configured arm is expected once per agent model seen in the results
            models = sorted({a.split(AGENT_SEP, 1)[1] for a in observed[C.ARM].to_list() if AGENT_SEP in a})
            expected = [{**e, C.ARM: agent_arm(e[C.ARM], mo)} for e in expected for mo in models]
        exp = pl.DataFrame(expected, schema={k: pl.String for k in keys}).with_columns(in_config=pl.lit(True))
    allk = pl.concat(
        [exp.select(keys), observed.select(keys), *([st.select(keys)] if st is not None else [])]
    ).unique()
    df = allk.join(exp, on=keys, how="left").join(observed, on=keys, how="left")
    if st is not None:
        df = df.join(st, on=keys, how="left")
    if plan is not None:
        df = df.join(plan, on=keys, how="left")
    df = df.with_columns(pl.col("in_config").fill_null(False)).sort(keys)
    status = []
    for r in df.iter_rows(named=True):
        s = _cell_status(r, plan is not None)
        if not r["in_config"] and exp.height:
            s += " (not in plan)" if plan is not None else " (not in config)"
        status.append(s)
    df = df.with_columns(status=pl.Series(status, dtype=pl.String))
    data = df
    cols = [*keys, "status", *(["planned"] if plan is not None else []), "result_rows", "result_histories"]
    if st is not None:
        cols += ["complete", "failed", "first_error"]
    n_missing = sum(1 for s in status if s.startswith(("missing", "failed")))
    n_not_run = sum(1 for s in status if s.startswith("not run"))
    if n_not_run:
        notes.append(
            f"{n_not_run} cell(s) not run: an arm that sends its own prompts (a peer library) needs a real "
            "model, and this run's agent is the heuristic one; they are not zeros."
        )
    n_partial = sum(1 for s in status if s.startswith("partial"))
    notes.append(f"{n_missing} cell(s) with no rows, {n_partial} partial cell(s).")
    if run.missing:
        notes.append("Missing from the run directory: " + ", ".join(run.missing) + ".")
    if run.damaged:
        notes.append(
            f"{len(run.damaged)} damaged or missing committed file(s) left out (see Integrity warnings)."
        )
    # problems first: a reader should not have to scan a long list of "ok" rows to find them
    shown = data.with_columns(_ok=pl.col("status") == "ok").sort("_ok", *keys).select(cols)
    return Table(
        "coverage",
        "Coverage: missing and partial cells",
        data,
        shown,
        notes,
        keys=tuple(keys),
        values=("result_rows",),
        section="coverage",
    )


# -- entry point -----------------------------------------------------------------------------------------


def compute(run: Run, *, reference: str = "pmem") -> Metrics:
    params = run.params()
    hist = history_counts(run)
    acc = summarize(hist, group_keys(params)) if hist.height else pl.DataFrame()
    m = Metrics(run=run, params=params, hist=hist, accuracy=acc)
    t = m.tables
    t["coverage"] = coverage_table(m)
    t["table6_chains"] = table6(m)
    t["table8_retraction"] = table8(m)
    t["conflict_probe"] = conflict_table(m)
    t["two_step"] = two_step_table(m)
    t["table7_factconsolidation"] = table7(m)
    t["accuracy"] = accuracy_table(m)
    t["stale_rate"] = stale_table(m)
    t["paired"] = paired_table(m, reference)
    t["read_cost"] = read_cost_table(m)
    t["write_cost"] = write_cost_table(m)
    t["break_even"] = break_even_table(m, t["read_cost"], t["write_cost"])
    t["reply_quality"] = reply_quality_table(m)
    t["write_audit"] = audit_table(m)
    from pmem.report._probes import probe_tables

    t.update(probe_tables(m))
    from pmem.report._published import published_table

    t["published_vs_ours"] = published_table(m)
    from pmem.report._peers import peer_table

    t["peers"] = peer_table(m)
    return m
