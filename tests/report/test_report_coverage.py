"""Coverage against plan.json, and the run directories `pmem report` refuses with a one-line error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from pmem.cli import main
from pmem.report import RunError, compute, open_run

RUN_TOML = """run_id = "cov"
[config]
arms = ["pmem", "raw"]
[config.models.agent]
backend = "openai"
model = "m1"
[[config.benchmarks]]
name = "alfworld-revision"
subsets = ["chains"]
"""


def result(
    h: str, arm: str, *, model: str = "m1", correct: bool | None = True, q: int = 0, subset: str = "chains"
) -> dict[str, Any]:
    return {
        "run_id": "cov",
        "benchmark": "alfworld-revision",
        "subset": subset,
        "history_id": h,
        "arm": arm,
        "model": model,
        "question_id": f"{h}-q{q}",
        "question_type": "current",
        "question": "Where?",
        "prediction": "a",
        "gold": "a",
        "correct": correct,
        "stale": False,
        "read_tokens": 5,
        "read_chars": 20,
        "L": 2,
    }


def make_run(root: Path, rows: list[dict[str, Any]], plan: list[dict[str, Any]] | None = None) -> Path:
    (root / "results").mkdir(parents=True)
    (root / "run.toml").write_text(RUN_TOML)
    if rows:
        pl.DataFrame(rows).write_parquet(root / "results" / "part-0.parquet")
    if plan is not None:
        (root / "plan.json").write_text(json.dumps({"run_id": "cov", "cells": plan}))
    return root


def cell(arm: str, histories: int, model: str = "m1", subset: str = "chains") -> dict[str, Any]:
    return {
        "benchmark": "alfworld-revision",
        "subset": subset,
        "arm": arm,
        "model": model,
        "histories": histories,
    }


def coverage(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    data = compute(open_run(root)).tables["coverage"].data
    return {(r["subset"], r["arm"]): r for r in data.iter_rows(named=True)}


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# -- coverage against the plan -----------------------------------------------------------------------------


def test_cell_short_of_planned_histories_is_partial(tmp_path: Path) -> None:
    rows = [result(f"h{i:03d}", "pmem") for i in range(557)] + [
        result(f"h{i:03d}", "raw") for i in range(560)
    ]
    # two questions in one history count one history
    rows.append(result("h000", "pmem", q=1))
    root = make_run(
        tmp_path / "run", rows, [cell("pmem", 560), cell("raw", 560), cell("pmem", 40, subset="two-step")]
    )
    cov = coverage(root)
    assert cov[("chains", "pmem")]["status"] == "partial: 557 of 560 histories"
    assert cov[("chains", "pmem")]["planned"] == 560
    assert cov[("chains", "raw")]["status"] == "ok"
    assert cov[("two-step", "pmem")]["status"] == "missing: 0 of 40 histories"
    notes = compute(open_run(root)).tables["coverage"].notes
    assert "1 cell(s) with no rows, 1 partial cell(s)." in notes


def test_without_a_plan_coverage_is_unchanged(tmp_path: Path) -> None:
    rows = [result(f"h{i:03d}", "pmem") for i in range(557)] + [
        result(f"h{i:03d}", "raw") for i in range(560)
    ]
    cov = coverage(make_run(tmp_path / "run", rows))
    assert cov[("chains", "pmem")]["status"] == "ok"  # nothing says how many were asked for
    assert "planned" not in cov[("chains", "pmem")]


def test_plan_cells_per_agent_model(tmp_path: Path) -> None:
    """Several agent models: results' arms read arm@model, and so do the plan's cells."""
    rows = [result(f"h{i}", "pmem", model="m1") for i in range(4)] + [
        result(f"h{i}", "pmem", model="m2") for i in range(3)
    ]
    root = make_run(tmp_path / "run", rows, [cell("pmem", 4, "m1"), cell("pmem", 4, "m2")])
    cov = coverage(root)
    assert cov[("chains", "pmem@m1")]["status"] == "ok"
    assert cov[("chains", "pmem@m2")]["status"] == "partial: 3 of 4 histories"
    assert ("chains", "pmem") not in cov


def test_planned_agent_without_any_result_is_missing(tmp_path: Path) -> None:
    """The plan names two agents, the results only one: the other's cells are missing, not absent."""
    root = make_run(
        tmp_path / "run",
        [result(f"h{i}", "pmem", model="m1") for i in range(4)],
        [cell("pmem", 4, "m1"), cell("pmem", 4, "m2")],
    )
    cov = coverage(root)
    assert cov[("chains", "pmem@m1")]["status"] == "ok"
    assert cov[("chains", "pmem@m2")]["status"] == "missing: 0 of 4 histories"


def test_failed_histories_are_counted_with_the_plan(tmp_path: Path) -> None:
    root = make_run(
        tmp_path / "run", [result(f"h{i}", "pmem") for i in range(3)], [cell("pmem", 4), cell("raw", 2)]
    )
    (root / "histories").mkdir()
    pl.DataFrame(
        [
            {
                "benchmark": "alfworld-revision",
                "subset": "chains",
                "history_id": h,
                "arm": arm,
                "status": status,
                "error": err,
            }
            for h, arm, status, err in (
                ("h0", "pmem", "complete", None),
                ("h1", "pmem", "complete", None),
                ("h2", "pmem", "complete", None),
                ("h3", "pmem", "failed", "boom"),
                ("h0", "raw", "failed", "boom"),
                ("h1", "raw", "failed", "boom"),
            )
        ]
    ).write_parquet(root / "histories" / "h.parquet")
    cov = coverage(root)
    assert cov[("chains", "pmem")]["status"] == "partial: 3 of 4 histories (1 failed)"
    assert cov[("chains", "raw")]["status"] == "failed: 0 of 2 histories (2 failed)"


@pytest.mark.parametrize("text", ["{", '{"cells": [{"benchmark": "x"}]}', '{"cells": 3}'])
def test_malformed_plan_is_named(tmp_path: Path, text: str) -> None:
    root = make_run(tmp_path / "run", [result("h0", "pmem")])
    (root / "plan.json").write_text(text)
    with pytest.raises(RunError, match=r"plan\.json: "):
        open_run(root)


# -- run directories the report refuses --------------------------------------------------------------------


def test_empty_run_folder_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    assert main(["report", str(root)]) == 2
    assert f"{root}: no results to report" in one_line_error(capsys)
    assert not (root / "report").exists()


def test_results_without_rows_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_run(tmp_path / "run", [])
    pl.DataFrame([result("h0", "pmem")]).clear().write_parquet(root / "results" / "part-0.parquet")
    assert main(["report", str(root)]) == 2
    assert "no results to report" in one_line_error(capsys)


def test_unknown_reference_arm_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_run(tmp_path / "run", [result("h0", "pmem"), result("h0", "raw")])
    assert main(["report", str(root), "--reference", "pmem-typo"]) == 2
    err = one_line_error(capsys)
    assert "--reference pmem-typo: no such arm" in err and "(arms: pmem, raw)" in err
    assert not (root / "report").exists()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("results/x.parquet", "foreign"),  # a Parquet file with unrelated columns
        ("results/y.parquet", b"PAR1 this is not Parquet\n\nat all PAR1"),  # not Parquet, named .parquet
        ("writes/w.parquet", "foreign"),
    ],
)
def test_foreign_parquet_is_a_one_line_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str | bytes
) -> None:
    root = make_run(tmp_path / "run", [result("h0", "pmem"), result("h0", "raw")])
    path = root / name
    path.parent.mkdir(exist_ok=True)
    if content == "foreign":
        pl.DataFrame({"sensor": ["t1", "t2"], "reading": [20.5, 21.0]}).write_parquet(path)
    else:
        path.write_bytes(content)
    assert main(["report", str(root)]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"pmem report: {path}: ")
    assert not (root / "report").exists()


def test_an_arm_planned_as_not_run_is_said_so_not_counted_missing(tmp_path: Path) -> None:
    rows = [result(f"h{i:03d}", "pmem") for i in range(3)]
    not_run = {**cell("mem0", 0), "not_run": "needs a model: it sends its own prompts", "skipped": 3}
    cov = coverage(make_run(tmp_path / "run", rows, [cell("pmem", 3), not_run]))
    assert cov[("chains", "mem0")]["status"] == "not run: needs a model: it sends its own prompts"
    assert cov[("chains", "pmem")]["status"] == "ok"
    notes = compute(open_run(tmp_path / "run")).tables["coverage"].notes
    assert "0 cell(s) with no rows, 0 partial cell(s)." in notes
    assert any("1 cell(s) not run" in n and "not zeros" in n for n in notes)
