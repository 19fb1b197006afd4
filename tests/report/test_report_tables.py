"""Every report table against a direct recomputation from the fixture run's Parquet rows.

The recomputations read the files with pyarrow and count in plain Python, independently of the
Polars code under test.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic import write_fixture_run
from pmem.report import build_report, compute, open_run
from pmem.report._audit import AUDIT_COLUMNS
from pmem.report._published import setup_differences
from pmem.report._stats import mcnemar_exact, wilson
from pmem.rundir import columns as C


def rows(root: Path, name: str) -> list[dict[str, Any]]:
    d = ds.dataset(root / name, format="parquet")
    # files differ in columns (a FactConsolidation file has no L): read each with its own schema
    out: list[dict[str, Any]] = []
    for f in d.files:
        out.extend(ds.dataset(f, format="parquet").to_table().to_pylist())
    return out


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture_run(tmp_path_factory.mktemp("report") / "run", seed=11)


@pytest.fixture(scope="module")
def metrics(fixture_run: Path):
    return compute(open_run(fixture_run))


@pytest.fixture(scope="module")
def results(fixture_run: Path) -> list[dict[str, Any]]:
    return rows(fixture_run, "results")


def by(rs: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rs:
        out[tuple(r.get(k) for k in keys)].append(r)
    return out


def test_table6_accuracy_and_read_size(metrics, results) -> None:
    data = {(r["L"], r["arm"]): r for r in metrics.tables["table6_chains"].data.iter_rows(named=True)}
    chains = [r for r in results if r["subset"] == "chains"]
    groups = by(chains, "L", "arm")
    assert set(data) == set(groups)
    for key, rs in groups.items():
        k, n = sum(r["correct"] for r in rs), len(rs)
        got = data[key]
        assert (got["n"], got["correct"]) == (n, k)
        assert got["accuracy"] == pytest.approx(k / n)
        assert (got["acc_wilson_lo"], got["acc_wilson_hi"]) == pytest.approx(wilson(k, n))
        assert got["read_chars"] == pytest.approx(sum(r["read_chars"] for r in rs) / n)
        stale = [r["stale"] for r in rs if r["stale"] is not None]
        assert (got["stale_n"], got["stale_k"]) == (len(stale), sum(stale))


def test_table8_recovery_over_committed_cases(metrics, results) -> None:
    data = {(r["d"], r["arm"]): r for r in metrics.tables["table8_retraction"].data.iter_rows(named=True)}
    ret = by([r for r in results if r["subset"] == "retraction"], "d", "arm", "history_id")
    expect: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for (d, arm, _), rs in ret.items():
        before = next(r for r in rs if r["question_type"] == "before_retraction")
        after = next(r for r in rs if r["question_type"] == "after_retraction")
        e = expect[(d, arm)]
        e[0] += 1
        if before["correct"]:
            e[1] += 1
            e[2] += after["correct"]
            e[3] += (not after["correct"]) and bool(after["stale"])
    for key, (cases, committed, rec, wrong, _) in expect.items():
        got = data[key]
        assert (got["cases"], got["committed"], got["recovered_n"], got["wrong_n"]) == (
            cases,
            committed,
            rec,
            wrong,
        )
        assert got["lost_n"] == committed - rec - wrong
        assert got["recovered"] == pytest.approx(rec / committed)
    assert data[(32, "pmem-no-retention")]["recovered"] == 0.0
    assert data[(32, "pmem-no-retention")]["lost"] == 1.0


def test_conflict_probe(metrics, results) -> None:
    data = {
        (r["question_type"], r["arm"]): r for r in metrics.tables["conflict_probe"].data.iter_rows(named=True)
    }
    for (qt, arm), rs in by(
        [r for r in results if r["subset"] == "conflict"], "question_type", "arm"
    ).items():
        assert data[(qt, arm)]["correct"] == sum(r["correct"] for r in rs)
        assert data[(qt, arm)]["n"] == len(rs)


def test_table7_accuracy_and_stale_denominator(metrics, results) -> None:
    data = {
        (r["hop"], r["length"], r["arm"]): r
        for r in metrics.tables["table7_factconsolidation"].data.iter_rows(named=True)
    }
    fc = [r for r in results if r["benchmark"] == "factconsolidation"]
    groups = by(fc, "subset", "arm")
    assert len(data) == len(groups)
    for (subset, arm), rs in groups.items():
        hop, length = subset.split("_")
        got = data[(hop, length, arm)]
        k, n = sum(r["correct"] for r in rs), len(rs)
        stale = [r["stale"] for r in rs if r["stale"] is not None]
        assert (got["n"], got["correct"], got["stale_n"], got["stale_k"]) == (n, k, len(stale), sum(stale))
        assert (got["acc_wilson_lo"], got["acc_wilson_hi"]) == pytest.approx(wilson(k, n))
        # a stream holds many questions: the history-clustered bootstrap interval is reported and brackets p
        if got["histories"] > 1 and len({r["correct"] for r in rs}) > 1:
            assert got["acc_boot_lo"] <= k / n <= got["acc_boot_hi"]
    # multi-hop has no stale denominator: reported as undefined, never as 0%
    assert all(data[key]["stale_rate"] is None for key in data if key[0] == "mh")
    shown = metrics.tables["table7_factconsolidation"].shown
    assert shown.filter(shown["arm"] == "pmem")["stale (sh) 6k"][0].endswith(
        f"({data[('sh', '6k', 'pmem')]['stale_k']}/{data[('sh', '6k', 'pmem')]['stale_n']})"
    )


def test_accuracy_table_covers_every_group(metrics, results) -> None:
    acc = metrics.tables["accuracy"].data
    groups = by(results, "benchmark", "subset", "arm", "L", "d", "length", "question_type")
    assert acc.height == len(groups)
    assert acc["n"].sum() == len(results)
    assert acc["correct"].sum() == sum(r["correct"] for r in results)


def test_paired_counts_and_mcnemar(metrics, results) -> None:
    pairs = {
        (r["subset"], r["L"], r["question_type"], r["arm_b"]): r
        for r in metrics.tables["paired"].data.iter_rows(named=True)
        if r["subset"] == "chains"
    }
    by_q = by([r for r in results if r["subset"] == "chains"], "history_id", "question_id")
    fixed = broken = n = 0
    for rs in by_q.values():
        arms = {r["arm"]: r for r in rs}
        if rs[0]["L"] != 8:
            continue
        n += 1
        a, b = arms["pmem"]["correct"], arms["raw"]["correct"]
        fixed += a and not b
        broken += b and not a
    got = pairs[("chains", 8, "current", "raw")]
    assert (got["n"], got["fixed"], got["broken"]) == (n, fixed, broken)
    assert got["mcnemar_p"] == pytest.approx(mcnemar_exact(fixed, broken))
    assert got["diff"] == pytest.approx((fixed - broken) / n)
    assert got["diff_boot_lo"] <= got["diff"] <= got["diff_boot_hi"]


def test_read_cost(metrics, results) -> None:
    data = {(r["subset"], r["arm"]): r for r in metrics.tables["read_cost"].data.iter_rows(named=True)}
    for (subset, arm), rs in by(results, "subset", "arm").items():
        tok = sum(r["read_tokens"] for r in rs) / len(rs)
        acc = sum(r["correct"] for r in rs) / len(rs)
        assert data[(subset, arm)]["read_tokens"] == pytest.approx(tok)
        assert data[(subset, arm)]["acc_per_1k_tokens"] == pytest.approx(100 * acc / (tok / 1000))


def test_write_cost_and_break_even(metrics, fixture_run) -> None:
    req = rows(fixture_run, "requests")
    hist = rows(fixture_run, "histories")
    wr = rows(fixture_run, "writes")
    done = {(h["history_id"], h["arm"]): (h["subset"]) for h in hist if h["status"] == "complete"}
    data = {(r["subset"], r["arm"]): r for r in metrics.tables["write_cost"].data.iter_rows(named=True)}
    per: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0, 0, set()])
    for r in req:
        key = (r["history_id"], r["arm"])
        if key not in done:
            continue  # the failed history's logged call is not charged
        e = per[(done[key], r["arm"])]
        if r["purpose"] in ("extract", "annotate", "identity", "crud", "dedupe"):
            e[0] += 1
            e[1] += r["prompt_tokens"] + r["completion_tokens"]
    for w in wr:
        key = (w["history_id"], w["arm"])
        if (
            key in done
            and w["applied"]
            and w["op"] in ("accept", "reject", "contest", "resolve")
            and w["value"]
        ):
            e = per[(done[key], w["arm"])]
            e[2] += 1
    histories: dict[tuple[str, str], int] = defaultdict(int)
    events: dict[tuple[str, str], int] = defaultdict(int)
    wall: dict[tuple[str, str], float] = defaultdict(float)
    for h in hist:
        if h["status"] == "complete":
            histories[(h["subset"], h["arm"])] += 1
            events[(h["subset"], h["arm"])] += h["n_events"]
            wall[(h["subset"], h["arm"])] += h["wall_s"]
    assert any(calls for calls, *_ in per.values())
    for key, (calls, tokens, facts, _, _) in per.items():
        got = data[key]
        assert got["histories"] == histories[key]
        assert got["write_calls_per_history"] == pytest.approx(calls / histories[key])
        assert got["write_tokens_per_history"] == pytest.approx(tokens / histories[key])
        # per event, for every arm: the cell's calls, tokens and wall time over its histories' events
        assert got["write_calls_per_event"] == pytest.approx(calls / events[key])
        assert got["write_tokens_per_event"] == pytest.approx(tokens / events[key])
        assert got["wall_s_per_event"] == pytest.approx(wall[key] / events[key])
        if facts:
            assert got["committed_facts_per_history"] == pytest.approx(facts / histories[key])
            assert got["calls_per_committed_fact"] == pytest.approx(calls / facts)
    be = {
        (r["subset"], r["write_arm"], r["read_arm"]): r
        for r in metrics.tables["break_even"].data.iter_rows(named=True)
    }
    rc = {(r["subset"], r["arm"]): r for r in metrics.tables["read_cost"].data.iter_rows(named=True)}
    w, r = data[("sh_6k", "pmem")], rc[("sh_6k", "raw")]
    expect = (w["write_tokens_per_history"] - data[("sh_6k", "raw")]["write_tokens_per_history"]) / (
        r["read_tokens"] - rc[("sh_6k", "pmem")]["read_tokens"]
    )
    assert be[("sh_6k", "pmem", "raw")]["break_even_queries"] == pytest.approx(expect)


def test_write_cost_same_without_request_context(tmp_path: Path, metrics) -> None:
    """Request rows without benchmark/subset go through the (history, arm) attribution path: same numbers."""
    other = compute(open_run(write_fixture_run(tmp_path / "run", seed=11, request_context=False)))
    from polars.testing import assert_frame_equal

    # float means may differ in the last bit (summation order); counts must agree exactly
    assert_frame_equal(
        other.tables["write_cost"].data, metrics.tables["write_cost"].data, check_exact=False, rel_tol=1e-12
    )


def test_audit_has_one_source_the_runner_columns(tmp_path: Path) -> None:
    """The write-path audit reads results/' audit columns only: without them it is not computed from
    writes/ or gold_in_state, and says so."""
    root = write_fixture_run(tmp_path / "run", seed=5, audit_columns=False)
    res = rows(root, "results")
    assert all(r[C.AUDIT_GOLD_IN_ACTIVE_CELL] is None for r in res)  # the columns exist, all null
    m = compute(open_run(root))
    audit = m.tables["write_audit"]
    assert audit.empty and m.tables["write_cost"].data.height  # writes/ is there, and not used
    assert any(C.AUDIT_GOLD_IN_ACTIVE_CELL in n and n.startswith("No rows") for n in audit.notes)
    # a run without the columns at all (a foreign writer): not computable, named
    for f in (root / "results").iterdir():
        pq.write_table(pq.read_table(f).drop_columns(list(AUDIT_COLUMNS)), f)
    audit = compute(open_run(root)).tables["write_audit"]
    assert audit.empty and any(n.startswith("Not computable") for n in audit.notes)


def test_audit_recomputed_from_rows(tmp_path: Path) -> None:
    root = write_fixture_run(tmp_path / "run", seed=5)
    m = compute(open_run(root))
    rs = [r for r in rows(root, "results") if r[C.AUDIT_GOLD_IN_ACTIVE_CELL] is not None]
    assert rs and {r["benchmark"] for r in rs} == {"factconsolidation"}
    got = {(r["subset"], r["arm"]): r for r in m.tables["write_audit"].data.iter_rows(named=True)}
    groups = by(rs, "subset", "arm")
    assert set(got) == set(groups)
    for (subset, arm), g in groups.items():
        active = [r[C.AUDIT_GOLD_IN_ACTIVE_CELL] for r in g]
        matching = [r[C.AUDIT_GOLD_IN_MATCHING_CELL] for r in g]
        sib = [r[C.AUDIT_STALE_SIBLING] for r in g if r[C.AUDIT_STALE_SIBLING] is not None]
        assert got[(subset, arm)]["gold_in_active_cell"] == pytest.approx(sum(active) / len(g))
        assert got[(subset, arm)]["gold_in_matching_cell"] == pytest.approx(sum(matching) / len(g))
        assert got[(subset, arm)]["overwritten_keys"] == len(sib)
        assert got[(subset, arm)]["stale_sibling_rate"] == pytest.approx(
            sum(sib) / len(sib) if sib else math.nan, nan_ok=True
        )
        assert got[(subset, arm)]["wrong_write_path"] == sum(
            (not r["correct"]) and not r[C.AUDIT_GOLD_IN_ACTIVE_CELL] for r in g
        )
    assert any(r["gold_in_active_cell"] < 1 for r in got.values())


def test_missing_and_partial_cells_are_reported_not_zero(metrics) -> None:
    cov = {(r["subset"], r["arm"]): r for r in metrics.tables["coverage"].data.iter_rows(named=True)}
    assert cov[("sh_6k", "bitemporal")]["status"] == "missing: no rows"
    assert cov[("sh_32k", "long-context")]["status"] == "partial: 1 of 2 histories failed"
    reason = cov[("sh_32k", "long-context")]["first_error"]
    assert "ContextWindowExceeded" in reason and "\n" not in reason  # one line: the traceback's last
    assert "bitemporal" not in metrics.accuracy["arm"].to_list()


def test_published_side_by_side(metrics, results) -> None:
    pub = metrics.tables["published_vs_ours"].data
    row = pub.filter(
        (pub["table"] == "T6")
        & (pub["paper_arm"] == "raw_top10")
        & (pub["param"] == "L=8")
        & (pub["metric"] == "accuracy")
    ).row(0, named=True)
    rs = [r for r in results if r["subset"] == "chains" and r["arm"] == "raw" and r["L"] == 8]
    assert row["published"] == 25.0
    assert row["ours"] == pytest.approx(100 * sum(r["correct"] for r in rs) / len(rs))
    assert row["diff"] == pytest.approx(row["ours"] - 25.0)
    lme = pub.filter(pub["benchmark"] == "longmemeval")
    assert lme.height > 0 and lme["ours"].null_count() == lme.height
    # the setup differences are said once, in the notes that open the report; the table points there
    notes = " ".join(metrics.tables["published_vs_ours"].notes)
    assert "see Notes at the top of the report" in notes and "LongMemEval: not run" not in notes
    setup = " ".join(setup_differences(metrics))
    assert "heuristic (no LLM)" in setup and "generated" in setup and "LongMemEval: not run" in setup


def test_missing_datasets_are_named(tmp_path: Path) -> None:
    import shutil

    root = write_fixture_run(tmp_path / "run", seed=2)
    shutil.rmtree(root / "writes")
    shutil.rmtree(root / "requests")
    m = compute(open_run(root))
    wc = m.tables["write_cost"]
    assert "write_calls_per_history" not in wc.data.columns
    assert any("requests/ is missing" in n for n in wc.notes)
    assert any("writes/ is missing" in n for n in wc.notes)
    assert not m.tables["write_audit"].empty  # the audit comes from results/, not from writes/
    assert "requests/" in m.run.missing and "writes/" in m.run.missing


def test_report_files(fixture_run: Path) -> None:
    paths = build_report(fixture_run)
    md = paths.markdown.read_text()
    html = paths.html.read_text()
    for title in (
        "Table 6 view",
        "Table 8 view",
        "Conflict probe",
        "Table 7 view",
        "Read cost per query",
        "Write cost per history",
        "Break-even",
        "Write-path audit",
        "Published (paper) vs ours",
        "Stale-answer rate with its denominator",
        "Paired comparisons",
        "Model replies: failures, truncation, retries",
    ):
        assert title in md and title in html
    assert "heuristic (no LLM)" in md and "heuristic (no LLM)" in html
    assert "8 cell" not in md  # sanity: the coverage note counts the 4 missing bitemporal cells
    assert "4 cell(s) with no rows, 1 partial cell(s)" in md
    assert html.count("data:image/png;base64,") == len(paths.figures) >= 4
    assert "<script" not in html and "src='http" not in html
    for f in paths.figures:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"figures/{f.name}" in md
    names = {p.stem for p in paths.tables}
    assert {
        "table6_chains",
        "table8_retraction",
        "conflict_probe",
        "table7_factconsolidation",
        "read_cost",
        "write_cost",
        "break_even",
        "write_audit",
        "published_vs_ours",
        "paired",
        "coverage",
        "reply_quality",
    } <= names


def test_retried_history_counts_as_complete(tmp_path: Path) -> None:
    """A history that failed, then completed on a retry, is not reported as failed."""
    import polars as pl

    root = write_fixture_run(tmp_path / "run", seed=3, n_alf=2, fc_questions=5)
    pl.DataFrame(
        {
            "run_id": ["x"],
            "benchmark": ["alfworld-revision"],
            "subset": ["chains"],
            "history_id": ["alf-chains-L1-000"],
            "arm": ["raw"],
            "status": ["failed"],
            "error": ["runner died"],
        }
    ).write_parquet(root / "histories" / "failed-1.parquet")
    cov = compute(open_run(root)).tables["coverage"].data
    row = cov.filter((pl.col("subset") == "chains") & (pl.col("arm") == "raw")).row(0, named=True)
    assert (row["status"], row["failed"], row["complete"]) == ("ok", 0, 8)
