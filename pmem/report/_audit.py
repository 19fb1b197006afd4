"""The FactConsolidation write-path audit: where the gold value sits in the store, stale siblings of
overwritten keys, and wrong answers traced to the write path or the read path."""

from __future__ import annotations

import polars as pl

from pmem.report._base import Metrics
from pmem.report._table import Table
from pmem.rundir import columns as C

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
