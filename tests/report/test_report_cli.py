"""A hand-built run with known answers, the CLI, --compare and the loader's error messages."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from benchmarks.synthetic import write_fixture_run
from pmem.cli import main
from pmem.report import RunError, compute, open_run

RUN_TOML = """run_id = "tiny"
hash = "sha256:0"
[config]
arms = ["pmem", "raw"]
[config.models.agent]
backend = "openai"
model = "Qwen/Qwen3-4B-Instruct-2507"
url = "http://127.0.0.1:8000/v1"
[[config.benchmarks]]
name = "alfworld-revision"
subsets = ["chains"]
"""


def tiny_run(root: Path) -> Path:
    """Ten L=2 chain questions, one per history: pmem right on q0-q8, raw right on q8 only.

    So pmem vs raw is 8 fixed, 0 broken (q0-q7), McNemar p = 2 * 0.5^8; pmem accuracy 9/10 has Wilson
    interval [0.5958, 0.9821].
    """
    root.mkdir(parents=True)
    (root / "run.toml").write_text(RUN_TOML)
    recs = []
    for i in range(10):
        for arm, ok in (("pmem", i <= 8), ("raw", i == 8)):
            recs.append(
                {
                    "run_id": "tiny",
                    "benchmark": "alfworld-revision",
                    "subset": "chains",
                    "history_id": f"h{i}",
                    "arm": arm,
                    "model": "m",
                    "question_id": f"h{i}-q0",
                    "question_type": "current",
                    "question": "Where is the mug now?",
                    "prediction": "a" if ok else "b",
                    "gold": "a",
                    "correct": ok,
                    "stale": (not ok),
                    "read_tokens": 10 if arm == "pmem" else 150,
                    "read_chars": 40 if arm == "pmem" else 600,
                    "L": 2,
                }
            )
    (root / "results").mkdir()
    pl.DataFrame(recs[:10]).write_parquet(root / "results" / "a.parquet")
    pl.DataFrame(recs[10:]).write_parquet(root / "results" / "b.parquet")
    return root


def test_hand_computed_mcnemar_and_wilson(tmp_path: Path) -> None:
    m = compute(open_run(tiny_run(tmp_path / "tiny")))
    p = m.tables["paired"].data.row(0, named=True)
    assert (p["arm_a"], p["arm_b"], p["fixed"], p["broken"]) == ("pmem", "raw", 8, 0)
    assert p["mcnemar_p"] == 0.0078125
    assert m.tables["paired"].shown["fixed-broken"][0] == "8-0"
    t6 = {r["arm"]: r for r in m.tables["table6_chains"].data.iter_rows(named=True)}
    assert t6["pmem"]["acc_wilson_lo"] == pytest.approx(0.5958, abs=5e-5)
    assert t6["pmem"]["acc_wilson_hi"] == pytest.approx(0.9821, abs=5e-5)
    assert t6["raw"]["stale_k"] == 9 and t6["raw"]["stale_n"] == 10
    assert m.run.agent_label == "Qwen/Qwen3-4B-Instruct-2507, openai, server 127.0.0.1:8000"
    # writes/, requests/ and histories/ are absent: named as missing, costs not reported as zero
    assert {"writes/", "requests/", "histories/"} <= set(m.run.missing)
    assert "write_calls_per_history" not in m.tables["write_cost"].data.columns


def test_cli_report_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_fixture_run(tmp_path / "a", seed=1, n_alf=4, fc_questions=8, run_id="run-a")
    b = write_fixture_run(
        tmp_path / "b", seed=2, n_alf=4, fc_questions=8, run_id="run-b", agent_backend="openai"
    )
    assert main(["report", "--compare", str(a), str(b)]) == 0  # the spelling
    assert main(["report", str(a), "--compare", str(b)]) == 0
    out = capsys.readouterr().out
    assert str(a / "report" / "report.html") in out
    cmp_dir = a / "report" / "compare-run-b"
    assert (cmp_dir / "report.md").is_file() and (cmp_dir / "report.html").is_file()
    cmp = pl.read_csv(cmp_dir / "tables" / "compare_table6_chains.csv")
    ta = pl.read_csv(a / "report" / "tables" / "table6_chains.csv")
    tb = pl.read_csv(b / "report" / "tables" / "table6_chains.csv") if (b / "report").exists() else None
    assert tb is None  # the compare never writes into run B
    mb = compute(open_run(b)).tables["table6_chains"].data
    row = cmp.filter((pl.col("L") == 8) & (pl.col("arm") == "raw")).row(0, named=True)
    acc_a = ta.filter((pl.col("L") == 8) & (pl.col("arm") == "raw"))["accuracy"][0]
    acc_b = mb.filter((pl.col("L") == 8) & (pl.col("arm") == "raw"))["accuracy"][0]
    assert row["accuracy_a"] == pytest.approx(acc_a)
    assert row["accuracy_b"] == pytest.approx(acc_b)
    assert row["accuracy_diff"] == pytest.approx(acc_b - acc_a)
    md = (cmp_dir / "report.md").read_text()
    assert "run-a" in md and "heuristic (no LLM)" in md and "Qwen/Qwen3-4B-Instruct-2507, openai" in md


def test_cli_errors_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err
    bad = tmp_path / "bad"
    (bad / "results").mkdir(parents=True)
    pl.DataFrame(
        {
            "benchmark": ["x"],
            "subset": ["s"],
            "history_id": ["h"],
            "arm": ["a"],
            "question_id": ["q"],
            "question_type": ["t"],
            "correct": [True],
        }
    ).write_parquet(bad / "results" / "1.parquet")
    pl.DataFrame(
        {
            "benchmark": ["x"],
            "subset": ["s"],
            "history_id": ["h2"],
            "arm": ["a"],
            "question_id": ["q"],
            "question_type": ["t"],
            "correct": ["yes"],
        }
    ).write_parquet(bad / "results" / "2.parquet")
    with pytest.raises(RunError, match=r"2\.parquet: column 'correct'"):
        open_run(bad)
    (bad / "results" / "2.parquet").unlink()
    # a file may lack optional columns (nulls), never the dataset's required ones: such a file is named
    pl.DataFrame(
        {
            "history_id": ["h3"],
            "benchmark": ["x"],
            "subset": ["s"],
            "arm": ["a"],
            "question_id": ["q"],
            "question_type": ["t"],
            "correct": [False],
        }
    ).write_parquet(bad / "results" / "3.parquet")
    assert open_run(bad).frame("results").collect().height == 2
    (bad / "writes").mkdir()
    pl.DataFrame({"arm": ["a"]}).write_parquet(bad / "writes" / "w.parquet")
    with pytest.raises(
        RunError,
        match=r"w\.parquet: not a writes/ file of this run: lacks column\(s\) "
        r"history_id, op, applied \(has: arm\)",
    ):
        open_run(bad)


def test_published_per_class_rows_use_answer_class(tmp_path: Path) -> None:
    """LongMemEval per-class cells (Table 4) are computed from results' answer_class."""
    root = tmp_path / "lme"
    root.mkdir()
    (root / "run.toml").write_text(RUN_TOML)
    recs = [
        {
            "run_id": "l",
            "benchmark": "longmemeval",
            "subset": "s",
            "history_id": f"h{i}",
            "arm": "pmem",
            "model": "m",
            "question_id": f"q{i}",
            "question_type": "single-session-user",
            "answer_class": "superseded" if i < 4 else "single",
            "correct": i in (0, 1, 5),
            "stale": None,
            "read_tokens": 3000,
            "read_chars": 12000,
        }
        for i in range(10)
    ]
    (root / "results").mkdir()
    pl.DataFrame(recs).write_parquet(root / "results" / "r.parquet")
    pub = compute(open_run(root)).tables["published_vs_ours"].data
    got = {
        r["param"]: r["ours"]
        for r in pub.filter((pl.col("table") == "T4") & (pl.col("paper_arm") == "pmem_turn_read")).iter_rows(
            named=True
        )
    }
    assert got["overall"] == pytest.approx(30.0)
    assert got["superseded"] == pytest.approx(50.0)  # 2 of 4
    assert got["single"] == pytest.approx(100 / 6)  # 1 of 6
    assert got["aggregation"] is None
    t5 = pub.filter(
        (pl.col("table") == "T5")
        & (pl.col("paper_arm") == "pmem_turn_read")
        & (pl.col("metric") == "acc_per_1k_tokens")
    )
    assert t5["ours"][0] == pytest.approx(30.0 / 3.0)


def test_bare_out_collects_the_report_under_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_fixture_run(tmp_path / "runs" / "run-c", seed=3, n_alf=2, fc_questions=4, run_id="run-c")
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(run), "--out"]) == 0
    collected = tmp_path / "reports" / "run-c"
    assert (collected / "report.md").is_file() and (collected / "report.html").is_file()
    assert not (run / "report").exists()  # collected instead of written into the run
    assert str(Path("reports") / "run-c" / "report.md") in capsys.readouterr().out
    # an explicit folder still wins
    assert main(["report", str(run), "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "report.md").is_file()


def test_with_data_keeps_the_runs_results_and_histories_beside_the_report_and_replaces_them_whole(
    tmp_path: Path,
) -> None:
    import polars as pl

    run = write_fixture_run(tmp_path / "run-d", seed=4, n_alf=2, fc_questions=4, run_id="run-d")
    out = tmp_path / "kept"
    assert main(["report", str(run), "--out", str(out), "--with-data"]) == 0
    data = out / "data"
    have = {p.name for p in run.iterdir()}
    kept_folders = {"histories", "results", "writes", "judgments", "calibration", "states"} & have
    assert sorted(p.name for p in data.iterdir()) == sorted({*kept_folders, "CONTENTS.md", "run.toml"})
    assert "writes" in kept_folders
    kept = pl.read_parquet(data / "results")
    assert kept.height == pl.read_parquet(run / "results").height > 0
    (data / "results" / "stale-from-another-run.parquet").write_bytes(b"x")
    assert main(["report", str(run), "--out", str(out), "--with-data"]) == 0
    assert not (data / "results" / "stale-from-another-run.parquet").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".data-")]
    assert main(["report", str(run), "--out", str(tmp_path / "plain")]) == 0
    assert not (tmp_path / "plain" / "data").exists()


def test_kept_data_says_what_it_keeps_and_leaves_states_over_the_cap_in_the_run(tmp_path: Path) -> None:
    from pmem.report._cli import copy_data

    run = write_fixture_run(tmp_path / "run-s", seed=5, n_alf=2, fc_questions=2, run_id="run-s")
    (run / "states" / "pmem").mkdir(parents=True)
    (run / "states" / "pmem" / "h.arrow").write_bytes(b"s" * 5000)
    out = tmp_path / "report"
    out.mkdir()
    data = copy_data(run, out, states_cap=4000)
    contents = (data / "CONTENTS.md").read_text()
    assert not (data / "states").exists()
    assert "| `states/` | 5,000 | no: over the 4,000-byte cap (in the run folder) |" in contents
    assert "| `results/` |" in contents and "| yes |" in contents
    data = copy_data(run, out, states_cap=10_000)
    assert (data / "states" / "pmem" / "h.arrow").stat().st_size == 5000
    assert "| `states/` | 5,000 | yes |" in (data / "CONTENTS.md").read_text()
