"""The paper's per-benchmark views: ALFWorld-Revision chains (Table 6), retraction (Table 8), the conflict
probe and the two-step revision, and FactConsolidation (Table 7)."""

from __future__ import annotations

import re

import polars as pl

from pmem.report._accuracy import (
    ACC_COLS,
    STALE_COLS,
    STALE_DEFINITIONS,
    acc_cell,
    pivot,
    stale_cell,
    view,
)
from pmem.report._base import Metrics, expected_arms, length_order, order_arms
from pmem.report._counts import summarize
from pmem.report._stats import wilson
from pmem.report._table import Table, ci, num, pct
from pmem.rundir import columns as C


def table6(m: Metrics) -> Table:
    v = view(m.accuracy, "alfworld-revision", "chains")
    seen = v[C.ARM].to_list() if v.height else []
    configured = [] if m.run.arms_by_agent else expected_arms(m.run, "alfworld-revision", "chains")
    arms = order_arms([*configured, *seen])
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
        display = pivot(v, [C.L], arms, acc_cell, lambda r: f"L={r[C.L]}")
        chars = pivot(
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
    return Table(
        empty.name,
        empty.title,
        data,
        _table8_view(data),
        notes,
        keys=(C.D, C.ARM),
        values=("recovered", "wrong", "lost"),
        section="alfworld",
    )


def _table8_view(data: pl.DataFrame) -> pl.DataFrame:
    """The paper's Table 8 layout: one row per arm; per distance d, recovered % [Wilson 95% CI], wrong and
    lost %, and the committed cases. Narrow columns, so that the view fits the page at any d count."""
    index = {(r[C.ARM], r[C.D]): r for r in data.iter_rows(named=True)}
    ds = sorted(data[C.D].unique().to_list())
    out = []
    for a in order_arms(data[C.ARM].to_list()):
        line: dict[str, str] = {C.ARM: a}
        for d in ds:
            r = index.get((a, d))
            if r is None:
                rec = wl = com = "missing (no rows)"
            elif not r["committed"]:
                rec, wl, com = "no committed cases", "–", f"0/{r['cases']}"
            else:
                rec = f"{pct(r['recovered'])} {ci(r['recovered_wilson_lo'], r['recovered_wilson_hi'])}"
                wl = f"{pct(r['wrong'])} / {pct(r['lost'])}"
                com = f"{r['committed']}/{r['cases']}"
            line[f"d={d} recovered %"] = rec
            line[f"d={d} wrong / lost %"] = wl
            line[f"d={d} committed"] = com
        out.append(line)
    return pl.DataFrame(out)


def conflict_table(m: Metrics) -> Table:
    v = view(m.accuracy, "alfworld-revision", "conflict")
    notes = [
        "Conflict probe: two reports disagree with no precedence cue; before_settle asks while the "
        "conflict stands (scored by the benchmark: the answer must surface the conflict), after_settle "
        "asks once a later event settles it. Stale after settling = the losing report."
    ]
    data = v.select(C.QUESTION_TYPE, C.ARM, *ACC_COLS, *STALE_COLS) if v.height else pl.DataFrame()
    title = "Conflict probe (RQ5 view): accuracy before and after settling"
    return _by_question_type("conflict_probe", title, v, data, notes)


def two_step_table(m: Metrics) -> Table:
    v = view(m.accuracy, "alfworld-revision", "two-step")
    data = v.select(C.QUESTION_TYPE, C.ARM, *ACC_COLS, C.READ_CHARS) if v.height else pl.DataFrame()
    notes = ["One revision described as a two-step move; accuracy % [Wilson 95% CI] (n)."]
    if not v.height:
        notes.append(
            "Not in this run: no alfworld-revision benchmark with the two-step subset was swept "
            '(add "two-step" to its subsets to fill this table).'
        )
    title = "Single revision, two-step phrasing (Table 6 side note)"
    return _by_question_type("two_step", title, v, data, notes)


def _by_question_type(name: str, title: str, v: pl.DataFrame, data: pl.DataFrame, notes: list[str]) -> Table:
    """An ALFWorld-Revision view (``v``) as accuracy per question type and arm, its ``data`` beside it."""
    display = None
    if v.height:
        arms = order_arms(v[C.ARM].to_list())
        display = pivot(v, [C.QUESTION_TYPE], arms, acc_cell, lambda r: r[C.QUESTION_TYPE])
    keys = (C.QUESTION_TYPE, C.ARM)
    return Table(name, title, data, display, notes, keys=keys, values=("accuracy",), section="alfworld")


_FC_SUBSET = re.compile(r"^(sh|mh)_(\d+k)$")


def table7(m: Metrics) -> Table:
    v = view(m.accuracy, "factconsolidation")
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
        data.with_columns(_lo=pl.col(C.LENGTH).map_elements(length_order, return_dtype=pl.Int64))
        .sort("hop", "_lo", C.ARM)
        .drop("_lo")
    )
    if (data["histories"] < 2).any():
        notes.append(
            "Some cells hold a single stream (one history): its questions are not independent, the "
            "Wilson interval treats them as if they were, and a history-clustered interval needs "
            "several histories per cell."
        )
    arms = order_arms(data[C.ARM].to_list())
    lengths = sorted(data[C.LENGTH].unique().to_list(), key=length_order)
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
