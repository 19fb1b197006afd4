"""The report shows how far to believe the judge: its calibration per kind, what decided each verdict,
and the summary says whether the judge was measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from report_helpers import results_run

from pmem.report import compute, open_run
from pmem.rundir import CALIBRATION
from pmem.rundir import columns as C
from pmem.runner._store import write_table


def _answer(arm: str, i: int, correct: bool, rule: str) -> dict[str, Any]:
    return {
        C.BENCHMARK: "locomo",
        C.SUBSET: "locomo10",
        C.HISTORY_ID: "locomo/conv-0",
        C.ARM: arm,
        C.MODEL: "m",
        C.QUESTION_ID: f"conv-0/q{i}",
        C.QUESTION_TYPE: "single-hop",
        C.CORRECT: correct,
        C.JUDGE_MODEL: "judge",
        C.JUDGE_VERSION: "v1",
        C.JUDGE_RULE: rule,
        C.F1: 1.0 if correct else 0.0,
    }


def _calibration(root: Path, version: str, vague_accepted: int) -> None:
    rows = []
    for kind, expected, accepted in (("paraphrase", True, 30), ("vague-topical", False, vague_accepted)):
        for n in range(30):
            rows.append(
                {
                    "judge_model": "judge",
                    "judge_version": version,
                    "case_id": f"{kind}/{n}",
                    "kind": kind,
                    "expected": expected,
                    "verdict": n < accepted,
                    "rule": "model",
                    "raw": "yes" if n < accepted else "no",
                    "error": None,
                }
            )
    write_table(root / CALIBRATION.name / "judge-x.parquet", rows, CALIBRATION.name)


def _run(tmp_path: Path, name: str) -> Path:
    rows = [_answer("pmem", i, i % 2 == 0, "model" if i < 3 else "bare-tag") for i in range(4)]
    return results_run(tmp_path / name, rows, run_id=name, arms=["pmem"])


def test_the_report_shows_the_judge_on_the_calibration_set_and_says_where_it_misses(tmp_path: Path) -> None:
    run = _run(tmp_path, "measured")
    _calibration(run, "v1", vague_accepted=19)
    m = compute(open_run(run))
    table = m.tables["judge_calibration"]
    by_kind = {r["kind"]: r for r in table.data.iter_rows(named=True)}
    assert (by_kind["paraphrase"]["accepted"], by_kind["paraphrase"]["meets"]) == (30, True)
    assert (by_kind["vague-topical"]["accepted"], by_kind["vague-topical"]["meets"]) == (19, False)
    assert table.display.filter(pl.col("kind") == "vague-topical")["target"].to_list() == ["missed"]
    (line,) = [s for s in m.tables["summary"].display["summary"].to_list() if s.startswith("LLM-judge")]
    assert "the judge accepts 19/30 wrong and 30/30 right answers of the calibration set; it misses" in line
    rules = m.tables["judge_rules"].display.row(0, named=True)
    assert (rules["model"], rules["bare-tag"]) == ("3 (2 yes)", "1 (0 yes)")


def test_a_judge_measured_under_another_version_is_not_this_runs(tmp_path: Path) -> None:
    run = _run(tmp_path, "other")
    _calibration(run, "v0", vague_accepted=0)
    m = compute(open_run(run))
    assert m.tables["judge_calibration"].empty
    (line,) = [s for s in m.tables["summary"].display["summary"].to_list() if s.startswith("LLM-judge")]
    assert "the judge was not measured on the calibration set: these are not evidence" in line
