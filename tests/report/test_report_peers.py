"""The report's side-by-side of the real peers and our re-implementations of their designs."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from benchmarks.synthetic import write_fixture_run
from pmem.report import compute, open_run
from pmem.rundir import columns as C


def _frame(root: Path, name: str) -> pl.DataFrame:
    return pl.concat(
        [pl.read_parquet(f) for f in sorted((root / name).glob("*.parquet"))], how="diagonal_relaxed"
    )


def _relabel(root: Path, names: dict[str, str]) -> None:
    """The fixture's arms under other names (its generator knows the built-in arms' accuracies only)."""
    for name in ("histories", "results", "requests", "writes"):
        for f in (root / name).glob("*.parquet"):
            pl.read_parquet(f).with_columns(pl.col(C.ARM).replace(names)).write_parquet(f)


def test_each_peer_sits_next_to_its_counterpart_with_figures_from_the_run(tmp_path: Path) -> None:
    root = write_fixture_run(
        tmp_path / "run", seed=3, n_alf=2, fc_questions=5, arms=("raw", "raw-ordered", "pmem")
    )
    _relabel(root, {"raw": "mem0", "raw-ordered": "add-only"})
    table = compute(open_run(root)).tables["peers"]
    data = table.data
    assert set(data[C.ARM].to_list()) == {"mem0", "add-only"}  # pmem is neither a peer nor a counterpart
    hist = _frame(root, "histories")
    res = _frame(root, "results")
    for row in data.iter_rows(named=True):
        mine = hist.filter(
            (pl.col(C.ARM) == row[C.ARM])
            & (pl.col(C.SUBSET) == row[C.SUBSET])
            & (pl.col(C.STATUS) == "complete")
        )
        assert row["complete"] == mine.height > 0
        answers = res.filter(
            (pl.col(C.ARM) == row[C.ARM]) & pl.col(C.HISTORY_ID).is_in(mine[C.HISTORY_ID].to_list())
        )
        assert row["questions"] == answers.height
        assert row["accuracy"] == answers[C.CORRECT].cast(pl.Int64).sum() / answers.height
        assert row["acc_lo"] - 1e-9 <= row["accuracy"] <= row["acc_hi"] + 1e-9
    assert data.filter(pl.col(C.ARM) == "add-only")["design"].to_list()[0] == "ours (add-only)"
    # as read: the interval beside the accuracy, in percent
    first = data.row(0, named=True)
    shown = table.shown.row(0, named=True)
    assert shown["accuracy (95% CI)"].startswith(f"{round(first['accuracy'] * 100, 1)}% [")


def test_a_run_without_peers_has_an_empty_section_that_says_so(tmp_path: Path) -> None:
    root = write_fixture_run(tmp_path / "run", seed=3, n_alf=2, fc_questions=5)
    table = compute(open_run(root)).tables["peers"]
    assert table.empty and "No peer arm in this run." in table.notes
