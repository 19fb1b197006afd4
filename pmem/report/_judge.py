"""The judge, measured: its verdicts on the calibration set, per kind, before its figures are believed.

A judged accuracy means something only when the judge rejects wrong answers and accepts right ones.
Every run that judges LoCoMo records its judge on the calibration set (``calibration/``: answers whose
verdict is known, :func:`pmem.bench.calibration_cases`); this table shows, per kind, how often the
judge accepted them, with Wilson intervals, and how many its deterministic rules decided. The targets
(issue 56): at most :data:`WRONG_TARGET` of the wrong answers accepted and at least
:data:`RIGHT_TARGET` of the right ones, in every kind of 20 cases or more.

>>> rows = pl.DataFrame({"kind": ["bare-tag"] * 20 + ["paraphrase"] * 20, "expected": [False] * 20 + [True] * 20,
...     "verdict": [False] * 20 + [True] * 19 + [False], "rule": ["bare-tag"] * 20 + ["model"] * 20})
>>> s = calibration_summary(rows)
>>> s.select("kind", "n", "accepted", "meets").rows()
[('paraphrase', 20, 19, True), ('bare-tag', 20, 0, True)]
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl

from pmem.bench import RIGHT_KINDS, WRONG_KINDS
from pmem.report._base import Metrics, order_arms
from pmem.report._stats import with_wilson
from pmem.report._table import Table
from pmem.rundir import columns as C

#: the most of a wrong kind's answers a judge may accept, and the least of a right kind's
WRONG_TARGET = 0.10
RIGHT_TARGET = 0.90
#: a kind is held to the targets from this many cases
MIN_CASES = 20


def calibration_summary(rows: pl.DataFrame) -> pl.DataFrame:
    """Per kind (right kinds first): cases ``n``, ``accepted``, ``accept_rate`` with Wilson bounds,
    ``by_rule`` (decided without the model), ``unjudged`` (no verdict) and ``meets`` (the target for
    its side; null below :data:`MIN_CASES`)."""
    agg = rows.group_by("kind", "expected", maintain_order=True).agg(
        pl.len().alias("n"),
        (pl.col("verdict") == True).sum().alias("accepted"),  # noqa: E712 (null: not accepted)
        (pl.col("rule") != "model").sum().alias("by_rule"),
        pl.col("verdict").is_null().sum().alias("unjudged"),
    )
    rank = {k: i for i, k in enumerate((*RIGHT_KINDS, *WRONG_KINDS))}
    agg = agg.sort(
        pl.col("expected").not_(),
        pl.col("kind").replace_strict(rank, default=len(rank), return_dtype=pl.Int64),
        "kind",
    )
    out = with_wilson(agg, "accept_rate", "accepted", "n")
    meets = (
        pl.when(pl.col("n") < MIN_CASES)
        .then(None)
        .when(pl.col("expected"))
        .then(pl.col("accept_rate") >= RIGHT_TARGET)
        .otherwise(pl.col("accept_rate") <= WRONG_TARGET)
    )
    return out.with_columns(meets.alias("meets"))


def calibration_totals(summary: pl.DataFrame) -> dict[str, float | int | bool]:
    """The wrong answers accepted and the right ones accepted over all kinds, and whether every kind of
    :data:`MIN_CASES` or more meets its target."""
    wrong = summary.filter(~pl.col("expected"))
    right = summary.filter(pl.col("expected"))
    held = summary.filter(pl.col("meets").is_not_null())
    return {
        "wrong_n": int(wrong["n"].sum()),
        "wrong_accepted": int(wrong["accepted"].sum()),
        "right_n": int(right["n"].sum()),
        "right_accepted": int(right["accepted"].sum()),
        "all_kinds_meet": bool(held["meets"].all()) if held.height else False,
    }


def calibration_lines(summary: pl.DataFrame) -> list[str]:
    """The summary as aligned text lines (``pmem perf judge``)."""
    lines = [
        f"  {'kind':<16} {'answer':<6} {'n':>4} {'accepted':>9} {'rate':>7}  {'95% Wilson':<15} {'by rule':>7}  target"
    ]
    for r in summary.iter_rows(named=True):
        rate = r["accept_rate"]
        target = "-" if r["meets"] is None else ("met" if r["meets"] else "MISSED")
        side = "right" if r["expected"] else "wrong"
        lines.append(
            f"  {r['kind']:<16} {side:<6} {r['n']:>4} {r['accepted']:>9} {100 * rate:>6.1f}%  "
            f"[{100 * r['accept_rate_wilson_lo']:.1f}, {100 * r['accept_rate_wilson_hi']:.1f}]".ljust(52)
            + f" {r['by_rule']:>7}  {target}"
        )
    t = calibration_totals(summary)
    lines.append(
        f"  wrong answers accepted: {t['wrong_accepted']}/{t['wrong_n']} "
        f"({100 * t['wrong_accepted'] / max(1, t['wrong_n']):.1f}%, target <= {100 * WRONG_TARGET:.0f}% per kind); "
        f"right answers accepted: {t['right_accepted']}/{t['right_n']} "
        f"({100 * t['right_accepted'] / max(1, t['right_n']):.1f}%, target >= {100 * RIGHT_TARGET:.0f}% per kind); "
        f"every kind meets its target: {'yes' if t['all_kinds_meet'] else 'no'}"
    )
    return lines


# ---------------------------------------------------------------- in a report

SECTION = "locomo"
CALIBRATION_DIR = "calibration"


def _judges(m: Metrics) -> pl.DataFrame:
    """The (judge model, version) pairs that gave this run's LoCoMo verdicts."""
    lf = m.run.frame("results")
    cols = set(m.run.columns("results"))
    if lf is None or not {C.JUDGE_MODEL, C.JUDGE_VERSION, C.BENCHMARK} <= cols:
        return pl.DataFrame(schema={C.JUDGE_MODEL: pl.String, C.JUDGE_VERSION: pl.String})
    return (
        lf.filter((pl.col(C.BENCHMARK) == "locomo") & pl.col(C.JUDGE_MODEL).is_not_null())
        .select(C.JUDGE_MODEL, C.JUDGE_VERSION)
        .unique()
        .collect()
    )


def calibration_rows(m: Metrics) -> pl.DataFrame | None:
    """The run's judge on the calibration set (``calibration/``), for the judges of its verdicts; None
    where the run has no such rows (a run made before calibration, or one whose judge judged no LoCoMo)."""
    if "judge_calibration" in m.run.cache:
        cached: pl.DataFrame | None = m.run.cache["judge_calibration"]
        return cached
    folder = Path(m.run.path) / CALIBRATION_DIR
    out: pl.DataFrame | None = None
    if folder.is_dir() and any(folder.glob("*.parquet")):
        rows = pl.read_parquet(folder / "*.parquet")
        judges = _judges(m)
        rows = rows.join(
            judges, left_on=["judge_model", "judge_version"], right_on=[C.JUDGE_MODEL, C.JUDGE_VERSION]
        )
        out = rows.unique(["judge_model", "judge_version", "case_id"]) if rows.height else None
    m.run.cache["judge_calibration"] = out
    return out


def judge_validation(m: Metrics) -> dict[str, float | int | bool] | None:
    """The calibration totals of the run's judge (:func:`calibration_totals`), None where unmeasured."""
    rows = calibration_rows(m)
    return None if rows is None else calibration_totals(calibration_summary(rows))


def judge_calibration_table(m: Metrics) -> Table:
    notes = [
        "The judge that gave this run's LoCoMo verdicts, on the calibration set (datasets/locomo-judge/: "
        "360 answers to LoCoMo questions whose verdict is known, 12 kinds of 30; see its CARD.md): % of "
        "each kind's answers it accepted [Wilson 95% CI]; by rule: decided by a deterministic rule before "
        f"the model. Targets: wrong answers accepted <= {100 * WRONG_TARGET:.0f}%, right answers >= "
        f"{100 * RIGHT_TARGET:.0f}%, in every kind of {MIN_CASES}+ cases. A judge that misses a target "
        "gives figures that are not evidence for the kinds it misses.",
    ]
    empty = Table(
        "judge_calibration",
        "LoCoMo judge, measured on the calibration set",
        pl.DataFrame(),
        None,
        notes,
        keys=("kind",),
        values=("accept_rate",),
        section=SECTION,
    )
    rows = calibration_rows(m)
    if rows is None:
        return empty
    data = calibration_summary(rows)
    display = data.select(
        pl.col("kind"),
        pl.when(pl.col("expected")).then(pl.lit("right")).otherwise(pl.lit("wrong")).alias("answers"),
        pl.col("n"),
        pl.format(
            "{}% [{}, {}]",
            (100 * pl.col("accept_rate")).round(1),
            (100 * pl.col("accept_rate_wilson_lo")).round(1),
            (100 * pl.col("accept_rate_wilson_hi")).round(1),
        ).alias("accepted"),
        pl.col("by_rule").cast(pl.String).alias("by rule"),
        pl.when(pl.col("meets").is_null())
        .then(pl.lit("–"))
        .when(pl.col("meets"))
        .then(pl.lit("met"))
        .otherwise(pl.lit("missed"))
        .alias("target"),
    )
    return replace(empty, data=data, display=display)


def judge_rules_table(m: Metrics) -> Table:
    """Per arm, what decided its LoCoMo verdicts: the judge model, or which deterministic rule."""
    notes = [
        "LoCoMo categories 1-4: of each arm's judged answers, how many the judge model decided and how "
        "many a deterministic rule decided before it (bare-tag, memory-key, empty: no answer but a tag "
        "or a key; polarity: yes for a gold no or the reverse; year, other-date, session-date: only "
        "years or dates the gold does not name; wrong-person: the other speaker; exact: the gold "
        "itself). results/ `judge_rule`; the model's reply is in `judge_raw`.",
    ]
    empty = Table(
        "judge_rules",
        "LoCoMo: what decided each verdict",
        pl.DataFrame(),
        None,
        notes,
        keys=(C.ARM,),
        values=("n",),
        section=SECTION,
    )
    lf = m.run.frame("results")
    cols = set(m.run.columns("results"))
    if lf is None or not {C.JUDGE_RULE, C.BENCHMARK} <= cols:
        return empty
    data = (
        lf.filter((pl.col(C.BENCHMARK) == "locomo") & pl.col(C.JUDGE_RULE).is_not_null())
        .group_by(C.ARM, C.JUDGE_RULE)
        .agg(n=pl.len(), accepted=pl.col(C.CORRECT).fill_null(False).sum())
        .sort(C.ARM, C.JUDGE_RULE)
        .collect()
    )
    if data.height == 0:
        return empty
    wide = (
        data.with_columns(cell=pl.format("{} ({} yes)", pl.col("n"), pl.col("accepted")))
        .pivot(on=C.JUDGE_RULE, index=C.ARM, values="cell")
        .fill_null("0")
    )
    order = {a: i for i, a in enumerate(order_arms(wide[C.ARM].to_list()))}
    wide = wide.sort(pl.col(C.ARM).replace_strict(order, return_dtype=pl.Int64))
    return replace(empty, data=data, display=wide)
