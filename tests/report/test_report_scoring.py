"""How answers are counted: unjudged answers, and rates pooled over single- and multi-hop rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from report_helpers import results_run

from pmem.report import compute, open_run
from pmem.rundir import columns as C


def make_run(root: Path, rows: list[dict[str, Any]]) -> Path:
    return results_run(root, rows, run_id="score", arms=["pmem", "raw"])


def test_unjudged_answers_count_as_wrong(tmp_path: Path) -> None:
    """correct is null when the judge gave no verdict: the question counts, as not answered correctly."""
    verdicts = {"pmem": [True, None, None, False], "raw": [False, True, True, True]}
    rows = [
        {
            "benchmark": "alfworld-revision",
            "subset": "chains",
            "history_id": f"h{i // 2}",
            "arm": arm,
            "model": "m",
            "question_id": f"q{i}",
            "question_type": "current",
            "correct": ok,
            "L": 2,
        }
        for arm, oks in verdicts.items()
        for i, ok in enumerate(oks)
    ]
    m = compute(open_run(make_run(tmp_path / "run", rows)))
    acc = {r["arm"]: r for r in m.tables["accuracy"].data.iter_rows(named=True)}
    assert (acc["pmem"]["n"], acc["pmem"]["correct"], acc["pmem"]["accuracy"]) == (4, 1, 0.25)
    assert (acc["raw"]["n"], acc["raw"]["correct"]) == (4, 3)
    t6 = {r["arm"]: r for r in m.tables["table6_chains"].data.iter_rows(named=True)}
    assert t6["pmem"]["accuracy"] == 0.25
    p = m.tables["paired"].data.row(0, named=True)
    assert (p["fixed"], p["broken"], p["acc_a"]) == (1, 3, 0.25)


def audit_rows(
    subset: str, siblings: list[bool | None], active: list[bool] | None = None
) -> list[dict[str, Any]]:
    active = active or [True] * len(siblings)
    return [
        {
            "benchmark": "factconsolidation",
            "subset": subset,
            "history_id": f"{subset}-h0",
            "arm": "pmem",
            "model": "m",
            "question_id": f"{subset}-q{i}",
            "question_type": "single-hop" if subset.startswith("sh") else "multi-hop",
            "correct": True,
            "length": subset.split("_")[1],
            C.AUDIT_GOLD_IN_ACTIVE_CELL: a,
            C.AUDIT_GOLD_IN_MATCHING_CELL: a,
            C.AUDIT_STALE_SIBLING: s,
        }
        for i, (s, a) in enumerate(zip(siblings, active, strict=True))
    ]


def published(root: Path, metric: str, subset: str) -> dict[str, Any]:
    pub = compute(open_run(root)).tables["published_vs_ours"].data
    return pub.filter(
        (pl.col("table") == "F") & (pl.col("metric") == metric) & (pl.col("subset") == subset)
    ).row(0, named=True)


@pytest.mark.parametrize(
    ("mh_siblings", "rate", "n"),
    [
        # multi-hop rows have no overwritten key: their rate is undefined and must not dilute single-hop's
        ([None, None, None, None], 100.0, 2),
        # a multi-hop overwritten key that kept no stale sibling: 2 of 3 overwritten keys, per key
        ([False, None, None, None], 100 * 2 / 3, 3),
    ],
)
def test_stale_sibling_rate_pools_only_defined_rows(
    tmp_path: Path, mh_siblings: list[bool | None], rate: float, n: int
) -> None:
    rows = audit_rows("sh_6k", [True, True, None, None]) + audit_rows("mh_6k", mh_siblings)
    got = published(make_run(tmp_path / "run", rows), "stale_sibling_rate", "6k")
    assert got["ours"] == pytest.approx(rate)
    assert got["n_ours"] == n


def test_current_value_survives_pools_per_question(tmp_path: Path) -> None:
    rows = audit_rows("sh_262k", [None] * 4, [True, True, True, False]) + audit_rows(
        "mh_262k", [None] * 2, [False, False]
    )
    got = published(make_run(tmp_path / "run", rows), "current_value_survives", "262k")
    assert got["ours"] == pytest.approx(50.0)
    assert got["n_ours"] == 6
