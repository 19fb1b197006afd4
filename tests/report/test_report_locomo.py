"""The LoCoMo tables: F1, BLEU-1 and J per arm and category, adversarial apart, and the published
LoCoMo figures next to ours, one metric per column. Synthetic runs with known scores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from report_helpers import results_run

from pmem.report import compute, open_run
from pmem.report._published import LOCOMO_METRICS, load_published_locomo
from pmem.rundir import columns as C


def make_run(root: Path, rows: list[dict[str, Any]]) -> Path:
    return results_run(root, rows, run_id="locomo", arms=["long-context", "add-only"])


def row(arm: str, i: int, qtype: str, f1: float | None, correct: bool, judged: bool = True) -> dict[str, Any]:
    return {
        C.BENCHMARK: "locomo",
        C.SUBSET: "locomo10",
        C.HISTORY_ID: f"locomo/conv-{i % 2}",
        C.ARM: arm,
        C.MODEL: "m",
        C.QUESTION_ID: f"conv-{i % 2}/q{i}",
        C.QUESTION_TYPE: qtype,
        C.CORRECT: correct,
        C.JUDGE_MODEL: "judge" if judged and qtype != "adversarial" else None,
        C.F1: f1,
        C.BLEU1: None if f1 is None else f1 / 2,
    }


@pytest.fixture
def metrics(tmp_path: Path) -> Any:
    rows = [
        # long-context: single-hop F1 1.0 and 0.5, temporal 0.0; judged right, right, wrong
        row("long-context", 0, "single-hop", 1.0, True),
        row("long-context", 1, "single-hop", 0.5, True),
        row("long-context", 2, "temporal", 0.0, False),
        # no verdict for this one (a judge that failed, or a run judged in part): J leaves it out
        row("long-context", 5, "temporal", 0.6, True, judged=False),
        row("long-context", 3, "adversarial", None, True),
        row("long-context", 4, "adversarial", None, False),
        # add-only: nothing judged (no judge configured): correct is F1 >= 0.5
        row("add-only", 0, "single-hop", 0.25, False, judged=False),
        row("add-only", 1, "multi-hop", 0.75, True, judged=False),
        row("add-only", 3, "adversarial", None, False),
    ]
    return compute(open_run(make_run(tmp_path / "run", rows)))


def _by(table: pl.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r[C.ARM], r["category"]): r for r in table.iter_rows(named=True)}


def test_f1_bleu1_and_j_per_arm_and_category(metrics: Any) -> None:
    t = _by(metrics.tables["locomo"].data)
    lc = t[("long-context", "single-hop")]
    assert (lc["n"], lc["f1"], lc["bleu1"], lc["judged"], lc["j"]) == (2, 0.75, 0.375, 2, 1.0)
    temporal = t[("long-context", "temporal")]
    assert (temporal["n"], temporal["f1"], temporal["judged"], temporal["j"]) == (2, 0.3, 1, 0.0)
    pooled = t[("long-context", "overall 1-4")]
    assert (pooled["n"], pooled["f1"], pooled["judged"]) == (4, pytest.approx(0.525), 3)
    assert pooled["j"] == pytest.approx(2 / 3) and pooled["j_wilson_lo"] < 2 / 3 < pooled["j_wilson_hi"]
    ao = t[("add-only", "overall 1-4")]
    assert (ao["n"], ao["f1"], ao["judged"], ao["j"]) == (2, 0.5, 0, None)  # J only where a judge decided
    assert ("long-context", "adversarial") not in t  # adversarial questions are apart
    shown = metrics.tables["locomo"].display
    add_j = shown.filter((pl.col(C.ARM) == "add-only") & (pl.col("metric") == "J (judge)")).row(0, named=True)
    assert add_j["overall 1-4"] == "not judged" and add_j["temporal"] == "missing (no rows)"
    lc_f1 = shown.filter((pl.col(C.ARM) == "long-context") & (pl.col("metric") == "F1")).row(0, named=True)
    assert lc_f1["single-hop"] == "75.0 (n=2)" and lc_f1["overall 1-4"] == "52.5 (n=4)"


def test_adversarial_apart_and_the_papers_overall(metrics: Any) -> None:
    t = {r[C.ARM]: r for r in metrics.tables["locomo_adversarial"].data.iter_rows(named=True)}
    assert (t["long-context"]["n"], t["long-context"]["abstained"]) == (2, 0.5)
    # overall 1-5: F1 for 1-4 and the abstention score for 5, each question one weight
    assert t["long-context"]["overall 1-5"] == pytest.approx((1.0 + 0.5 + 0.0 + 0.6 + 1.0 + 0.0) / 6)
    assert t["add-only"]["overall 1-5"] == pytest.approx((0.25 + 0.75 + 0.0) / 3)


def test_published_figures_sit_beside_ours_one_metric_per_column(metrics: Any) -> None:
    pub = metrics.tables["published_locomo_vs_ours"]
    data = pub.data
    assert data.height == len(load_published_locomo())
    # Mem0's 'Single Hop' J is official category 1 (multi-hop); ours comes from add-only (no mem0 peer here)
    mem0 = data.filter(
        (pl.col("system") == "Mem0") & (pl.col("metric") == "judge") & (pl.col("category") == "multi-hop")
    ).row(0, named=True)
    assert (mem0["published"], mem0["published_label"], mem0["our_arm"]) == (67.13, "Single Hop", "add-only")
    assert mem0["ours"] is None  # add-only was not judged: no J of ours
    f1 = data.filter(
        (pl.col("system") == "Mem0") & (pl.col("metric") == "f1") & (pl.col("category") == "multi-hop")
    ).row(0, named=True)
    assert (f1["published"], f1["ours"], f1["n_ours"], f1["diff"]) == (
        38.72,
        75.0,
        1,
        pytest.approx(75.0 - 38.72),
    )
    lc = data.filter(
        (pl.col("system") == "gpt-4-turbo, 128K context") & (pl.col("category") == "single-hop")
    ).row(0, named=True)
    assert (lc["published"], lc["our_arm"], lc["ours"]) == (72.3, "long-context", 75.0)
    # the view: one column per metric, each cell 'published / ours'
    shown = pub.display
    assert set(LOCOMO_METRICS.values()) <= set(shown.columns)
    cell = shown.filter((pl.col("system") == "Mem0") & pl.col("category").str.starts_with("multi-hop"))
    line = cell.row(0, named=True)
    assert line["F1"] == "38.72 / 75.0 (n=1)" and line["J (LLM judge)"] == "67.13 / not run / n.a."
    assert line["adversarial: abstained %"] == ""
    paper = shown.filter(pl.col("system") == "human").filter(pl.col("category").str.starts_with("temporal"))
    assert paper.row(0, named=True)["J (LLM judge)"] == "" and paper.row(0, named=True)["our arm"] == "—"


def test_every_published_row_names_a_known_metric_category_and_source() -> None:
    rows = load_published_locomo()
    assert {r["metric"] for r in rows} <= set(LOCOMO_METRICS)
    assert {r["category"] for r in rows} <= {"1", "2", "3", "4", "5", "1-4", "1-5"}
    assert all(r["source"] and r["scorer"] and r["value"] for r in rows)
    # Mem0's Table 2 overall J is the question-weighted mean of its Table 1 columns under the
    # official mapping (282 multi-hop, 321 temporal, 96 open-domain, 841 single-hop)
    counts = {"1": 282, "2": 321, "3": 96, "4": 841}
    for system in ("Mem0", "Zep", "LangMem", "OpenAI memory"):
        j = {
            r["category"]: float(r["value"]) for r in rows if r["system"] == system and r["metric"] == "judge"
        }
        mean = sum(j[c] * n for c, n in counts.items()) / sum(counts.values())
        assert mean == pytest.approx(j["1-4"], abs=0.01), system


def test_a_run_without_locomo_or_without_the_new_columns(tmp_path: Path) -> None:
    other = [{**row("pmem", 0, "current", None, True), C.BENCHMARK: "toy", C.SUBSET: "default"}]
    m = compute(open_run(make_run(tmp_path / "a", other)))
    for name in ("locomo", "locomo_adversarial", "published_locomo_vs_ours"):
        assert m.tables[name].empty
    # a run written before results/ had f1 and bleu1: the tables read them as missing
    old = [{k: v for k, v in row("raw", 0, "single-hop", 1.0, True).items() if k not in (C.F1, C.BLEU1)}]
    m = compute(open_run(make_run(tmp_path / "b", old)))
    r = m.tables["locomo"].data.row(0, named=True)
    assert (r["n"], r["f1"], r["j"]) == (1, None, 1.0)
    assert m.tables["locomo"].display.row(0, named=True)["single-hop"] == "–"


def test_the_summary_quotes_f1_and_j(metrics: Any) -> None:
    shown = metrics.tables["summary"].display
    lines = shown.filter(pl.col(C.BENCHMARK) == "LoCoMo")["summary"].to_list()
    # no pmem arm here: the first arm in display order leads
    assert (
        lines[0]
        == "F1 over categories 1-4 (LoCoMo's official scorer, x100): long-context 52.5 (n=4) vs add-only 50.0."
    )
    # a judge never measured on the calibration set says so where its figures are quoted
    assert lines[1].startswith(
        "LLM-judge accuracy (J) over categories 1-4 (the judge was not measured on the calibration set: "
        "these are not evidence): long-context 66.7% ["
    )
    assert lines[2].startswith("Adversarial questions, abstained (scored apart): long-context 50.0% [")
    tidy = metrics.tables["summary"].data.filter(pl.col("metric") == "f1")
    assert set(tidy[C.ARM].to_list()) == {"add-only", "long-context"}


def test_the_citation_table_counts_right_answers_whose_read_cites_an_evidence_turn(tmp_path: Path) -> None:
    def cited(arm: str, i: int, correct: bool, cites: list[str], evidence: list[str]) -> dict[str, Any]:
        return {**row(arm, i, "single-hop", 1.0 if correct else 0.0, correct)} | {
            C.READ_CITES: cites,
            C.EVIDENCE_TURNS: evidence,
        }

    rows = [
        cited("pmem", 0, True, ["D1:3", "D1:4"], ["D1:4"]),  # right, cites its evidence turn
        cited("pmem", 1, True, ["D1:7"], ["D2:1", "D2:2"]),  # right, on other turns
        cited("pmem", 2, True, ["D2:5"], ["D2:5"]),
        cited("pmem", 3, False, ["D1:1"], ["D1:1"]),  # wrong: not counted
        cited("add-only", 0, True, [], ["D1:4"]),  # an arm whose reads cite nothing: not listed
        cited("add-only", 1, True, [], ["D2:1"]),
    ]
    run = results_run(tmp_path / "run", rows, run_id="locomo", arms=["pmem", "add-only"])
    table = compute(open_run(run)).tables["locomo_citations"]
    (pmem,) = table.data.iter_rows(named=True)
    assert (pmem[C.ARM], pmem["right"], pmem["cited_k"]) == ("pmem", 3, 2)
    assert pmem["cited"] == pytest.approx(2 / 3) and pmem["cited_wilson_lo"] < 2 / 3 < pmem["cited_wilson_hi"]
    assert table.display.row(0, named=True)["cite an evidence turn"].endswith("(n=2)")


def test_f1_is_compared_pairwise_against_the_reference_with_an_interval_and_a_test(tmp_path: Path) -> None:
    rows = []
    for i in range(12):  # pmem 1.0 everywhere; add-only 0.5 on the even questions, 1.0 on the odd
        rows.append(row("pmem", i, "single-hop", 1.0, True))
        rows.append(row("add-only", i, "single-hop", 0.5 if i % 2 == 0 else 1.0, i % 2 == 1))
    rows.append(row("add-only", 99, "single-hop", 0.0, False))  # pmem never answered it: not paired
    rows.append(row("pmem", 98, "adversarial", None, True))  # adversarial: not F1-scored, left out
    run = results_run(tmp_path / "run", rows, run_id="locomo", arms=["pmem", "add-only"])
    table = compute(open_run(run)).tables["locomo_f1_paired"]
    # over categories 1-4, then per category (only single-hop here): the same questions
    overall, single = table.data.iter_rows(named=True)
    assert (overall["category"], single["category"]) == ("overall 1-4", "single-hop")
    for r in (overall, single):
        assert (r["arm_b"], r["n"], r["f1_pmem"], r["f1_arm"]) == ("add-only", 12, 1.0, 0.75)
        assert r["diff"] == pytest.approx(0.25) and 0.0 <= r["diff_lo"] <= 0.25 <= r["diff_hi"] <= 0.5
        assert 0.0 < r["p_wilcoxon"] < 0.05  # six differences of +0.5, none the other way
        # the judge's verdicts, paired: pmem right on the six even questions add-only got wrong
        assert (r["n_judged"], r["a_only"], r["b_only"]) == (12, 6, 0)
        assert r["p_mcnemar"] == pytest.approx(2 * 0.5**6)
    shown = table.display.row(0, named=True)
    assert shown["F1 diff [95% CI]"].startswith("25.0 [") and shown["pmem only / arm only"] == "6 / 0"


def test_two_slices_of_one_run_are_never_pooled(tmp_path: Path) -> None:
    rows = []
    for sessions, f1 in (("sessions=2", 1.0), ("sessions=4", 0.0)):
        for i in range(3):
            r = row("pmem", i, "single-hop", f1, f1 > 0)
            rows.append({**r, C.HISTORY_ID: f"locomo/conv-{i % 2}/{sessions}"})
    rows.append({**row("pmem", 3, "temporal", 0.0, False), C.HISTORY_ID: "locomo/conv-1/sessions=4"})
    for sessions, abstained in (("sessions=2", False), ("sessions=4", True)):
        rows.append(
            {**row("pmem", 7, "adversarial", None, abstained), C.HISTORY_ID: f"locomo/conv-1/{sessions}"}
        )
    run = results_run(tmp_path / "run", rows, run_id="locomo", arms=["pmem"])
    m = compute(open_run(run))
    data = m.tables["locomo"].data.filter(pl.col("category") == "overall 1-4")
    assert dict(zip(data["slice"], data["f1"], strict=True)) == {"sessions=2": 1.0, "sessions=4": 0.0}
    # the slice with the most questions leads the table and the summary
    assert m.tables["locomo"].display["slice"].to_list()[0] == "sessions=4"
    lines = m.tables["summary"].display.filter(pl.col(C.BENCHMARK) == "LoCoMo")["summary"].to_list()
    assert lines[0].startswith("F1 over categories 1-4 (sessions=4)") and lines[2].startswith(
        "F1 over categories 1-4 (sessions=2)"
    )
    adversarial = m.tables["locomo_adversarial"].display
    assert adversarial["slice"].to_list() == ["sessions=4", "sessions=2"]
    assert adversarial["adversarial: abstained %"].to_list()[0].startswith("100.0 [")
    # the summary quotes the slice with the most questions
    assert lines[-1].startswith("Adversarial questions, abstained (scored apart): pmem 100.0%")
