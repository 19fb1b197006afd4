"""The provenance-probes section against numbers recomputed from the run's own Parquet rows.

The run is written by hand through the run directory contract (typed rows, fixed schemas). The expected
values are counted here with plain Polars and Python, and the Wilson interval has its own formula below:
nothing in these checks calls the code under test, so a bug there cannot agree with itself.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from PIL import Image

from benchmarks.synthetic import write_fixture_run
from pmem.report import build_report, compute, open_run
from pmem.report._base import Metrics
from pmem.report._plots import plot_all
from pmem.rundir import HISTORIES, REQUESTS, RESULTS, HistoryRow, RequestRow, ResultRow, RowKeys
from pmem.rundir import columns as C

BENCH = "provenance-probes"
TYPES = {
    "erasure": ("before_forget", "forget_once", "forget_twice"),
    "authority": ("before_claims", "after_claims_k1", "after_claims_k4", "disclosure"),
    "late-arrival": ("before_late", "current", "as_of"),
    "stale-premise": ("before_change", "after_change"),
    "merge": ("before_correction", "after_correction"),
}
ARMS = ("pmem", "pmem-paper", "bitemporal", "raw")
HISTORIES_PER_SUBSET = {"erasure": 6, "authority": 9, "late-arrival": 4, "stale-premise": 4, "merge": 3}
#: the hand-made McNemar case: authority / after_claims_k4, pmem vs pmem-paper over h0..h8. Six questions
#: pmem passes and pmem-paper fails, one the reverse, one both pass, one pmem-paper has no verdict for.
K4_PMEM = (True, True, True, True, True, True, False, True, True)
K4_PAPER = (False, False, False, False, False, False, True, True, None)
#: a bitemporal history that failed: its write tokens must not be charged, and it left no results
FAILED = ("merge-002", "bitemporal")
WRITE_TOKENS = {"pmem": (900, 120), "pmem-paper": (700, 80), "bitemporal": (1500, 300), "raw": (0, 0)}

RUN_TOML = """run_id = "probes"
[config]
arms = ["pmem", "pmem-paper", "bitemporal", "raw", "no-memory"]
[config.models.agent]
backend = "heuristic"
model = "heuristic"
[[config.benchmarks]]
name = "provenance-probes"
subsets = ["erasure", "authority", "late-arrival", "stale-premise", "merge"]
"""


def keys(subset: str, h: str, arm: str, bench: str = BENCH) -> RowKeys:
    return RowKeys(
        run_id="probes",
        unit_id=f"{h}/{arm}",
        benchmark=bench,
        subset=subset,
        history_id=h,
        arm=arm,
        model="heuristic",
    )


def result(
    k: RowKeys,
    qtype: str,
    correct: bool | None,
    *,
    art: int | None = None,
    tok: int = 40,
    L: int | None = None,
) -> ResultRow:
    return ResultRow(
        **k.columns(),
        question_id=f"{k.history_id}-{qtype}",
        question_type=qtype,
        question="?",
        prediction="x",
        gold="x",
        correct=correct,
        stale=None,
        read_tokens=tok,
        read_chars=4 * tok,
        L=L,
        d=None,
        length=None,
        params="{}",
        artifact_bytes=art,
    )


def history(k: RowKeys, status: str, tokens: tuple[int, int], attempt: int = 0) -> HistoryRow:
    return HistoryRow(
        **k.columns(),
        status=status,
        error=None if status == "complete" else "boom",
        attempt=attempt,
        n_events=5,
        n_questions=3,
        write_prompt_tokens=tokens[0],
        write_completion_tokens=tokens[1],
        L=None,
        d=None,
        length=None,
        params="{}",
    )


def request(k: RowKeys, purpose: str, prompt: int, completion: int, failed: bool = False) -> RequestRow:
    return RequestRow(
        **k.request_columns(),
        purpose=purpose,
        model="heuristic",
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached=False,
        latency_s=0.01,
        error=None,
        history_failed=failed,
    )


def make_probe_run(root: Path, arms: tuple[str, ...] = ARMS) -> Path:
    rng = random.Random(5)
    res: list[ResultRow] = []
    hist: list[HistoryRow] = []
    req: list[RequestRow] = []
    for subset, types in TYPES.items():
        run_arms = (*arms, "no-memory") if subset == "merge" else arms  # an arm seen in one subset only
        for i in range(HISTORIES_PER_SUBSET[subset]):
            h = f"{subset}-{i:03d}"
            for arm in run_arms:
                k = keys(subset, h, arm)
                if (h, arm) == FAILED:
                    hist.append(history(k, "failed", (5000, 500)))
                    req.append(request(k, "extract", 5000, 500, failed=True))
                    continue
                for q in types:
                    if arm == "raw" and q == "as_of":
                        continue  # raw never answers as_of: its cell is missing, not 0
                    correct: bool | None = rng.random() < {"pmem": 0.8, "raw": 0.3}.get(arm, 0.55)
                    if arm == "raw" and rng.random() < 0.2:
                        correct = None  # no verdict: out of every denominator
                    if (subset, q) == ("authority", "after_claims_k4") and arm in ("pmem", "pmem-paper"):
                        correct = (K4_PMEM if arm == "pmem" else K4_PAPER)[i]
                    if (subset, q) == ("authority", "after_claims_k4") and arm == "bitemporal":
                        correct = K4_PMEM[i]  # agrees with pmem everywhere: no discordant pair
                    art = None
                    if q in ("forget_once", "forget_twice") and arm != "raw":  # raw: never measured
                        art = 0 if arm == "pmem" else rng.choice((0, 0, 17, 250, None))
                    res.append(result(k, q, correct, art=art, tok=rng.randint(10, 90)))
                    req.append(request(k, "answer", 50, 5))
                if (subset, i, arm) == ("authority", 0, "pmem"):
                    # failed, then complete on a retry: counted once, with the retry's tokens
                    hist.append(history(k, "failed", (99999, 9999)))
                    req.append(request(k, "extract", 99999, 9999, failed=True))
                wt = WRITE_TOKENS.get(arm, (0, 0))
                tokens = (wt[0] + 10 * i, wt[1] + i) if wt[0] else wt
                hist.append(history(k, "complete", tokens, attempt=1))
                if tokens[0]:
                    req.append(request(k, "extract", tokens[0], tokens[1]))
    # another benchmark's rows: never counted in the probe tables
    for arm in arms:
        k = keys("chains", "alf-000", arm, "alfworld-revision")
        res.append(result(k, "current", True, tok=5000, L=1))
        hist.append(history(k, "complete", (77777, 7777)))
        req.append(request(k, "extract", 77777, 7777))
    root.mkdir(parents=True)
    (root / "run.toml").write_text(RUN_TOML)
    for ds, rows in ((RESULTS, res), (HISTORIES, hist), (REQUESTS, req)):
        (root / ds.name).mkdir()
        pq.write_table(ds.table(rows), root / ds.name / "part-0.parquet")
    return root


def read(root: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(root / name / "part-0.parquet")


def wilson95(k: int, n: int) -> tuple[float, float]:
    """Wilson score interval written out (z = 1.96 to 15 digits), independent of pmem.report._stats."""
    z = 1.959963984540054
    p = k / n
    mid = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return max(0.0, mid - half), min(1.0, mid + half)


def cell(k: int, n: int) -> str:
    lo, hi = wilson95(k, n)
    return f"{100 * k / n:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] (n={n})"


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_probe_run(tmp_path_factory.mktemp("probes") / "run")


@pytest.fixture(scope="module")
def metrics(probe_run: Path) -> Metrics:
    return compute(open_run(probe_run))


@pytest.fixture(scope="module")
def probe_results(probe_run: Path) -> pl.DataFrame:
    return read(probe_run, "results").filter(pl.col(C.BENCHMARK) == BENCH)


def test_wilson_formula_of_the_test() -> None:
    # the independent formula against the textbook value for 8 of 10
    assert wilson95(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)


def test_every_accuracy_wilson_bound_and_n(metrics: Metrics, probe_results: pl.DataFrame) -> None:
    judged = probe_results.filter(pl.col(C.CORRECT).is_not_null())
    expect = {
        (r[C.SUBSET], r[C.ARM], r[C.QUESTION_TYPE]): (r["k"], r["n"])
        for r in judged.group_by(C.SUBSET, C.ARM, C.QUESTION_TYPE)
        .agg(k=pl.col(C.CORRECT).sum(), n=pl.len())
        .iter_rows(named=True)
    }
    assert probe_results[C.CORRECT].null_count() > 0  # the run does hold unjudged rows
    got: dict[tuple[str, str, str], dict[str, Any]] = {}
    for subset in TYPES:
        t = metrics.tables[f"provenance_{subset.replace('-', '_')}"]
        assert t.section == "provenance" and t.title.endswith(subset)
        for r in t.data.filter(pl.col("metric").is_in(TYPES[subset])).iter_rows(named=True):
            assert r[C.SUBSET] == subset
            got[(subset, r[C.ARM], r["metric"])] = r
    assert set(got) == set(expect)
    for key, (k, n) in expect.items():
        r = got[key]
        assert (r["k"], r["n"]) == (k, n), key
        assert r["rate"] == pytest.approx(k / n)
        assert (r["wilson_lo"], r["wilson_hi"]) == pytest.approx(wilson95(k, n)), key
    # the displayed cells: pct [Wilson 95% CI] (n), one row per arm, probes in the defined order
    for subset, types in TYPES.items():
        shown = metrics.tables[f"provenance_{subset.replace('-', '_')}"].shown
        arms = set(probe_results.filter(pl.col(C.SUBSET) == subset)[C.ARM].to_list())
        assert set(shown[C.ARM].to_list()) == arms
        assert shown[C.ARM].to_list()[0] == "pmem"
        probe_cols = shown.columns[1 : 1 + len(types)]
        for row in shown.iter_rows(named=True):
            for q, col in zip(types, probe_cols, strict=True):
                kn = expect.get((subset, row[C.ARM], q))
                assert row[col] == (cell(*kn) if kn else "–"), (subset, row[C.ARM], q)
    # an arm with no as_of question shows a missing cell, never 0
    late = metrics.tables["provenance_late_arrival"].shown.filter(pl.col(C.ARM) == "raw")
    assert late.row(0)[3] == "–"
    assert "no-memory" in metrics.tables["provenance_merge"].shown[C.ARM].to_list()
    assert "no-memory" not in metrics.tables["provenance_erasure"].shown[C.ARM].to_list()
    # one plain sentence per probe in the notes
    notes = " ".join(metrics.tables["provenance_authority"].notes)
    assert "untrusted" in notes and "four" in notes


def test_unjudged_rows_are_not_counted_as_wrong(metrics: Metrics, probe_results: pl.DataFrame) -> None:
    raw = probe_results.filter(
        (pl.col(C.ARM) == "raw")
        & (pl.col(C.SUBSET) == "erasure")
        & (pl.col(C.QUESTION_TYPE) == "forget_once")
    )
    verdicts = [v for v in raw[C.CORRECT].to_list() if v is not None]
    row = (
        metrics.tables["provenance_erasure"]
        .data.filter((pl.col(C.ARM) == "raw") & (pl.col("metric") == "forget_once"))
        .row(0, named=True)
    )
    assert (row["n"], row["k"]) == (len(verdicts), sum(verdicts))
    assert any("without a verdict" in n for n in metrics.tables["provenance_erasure"].notes)


def test_mcnemar_hand_case(metrics: Metrics) -> None:
    t = metrics.tables["provenance_paired"]
    rows = {
        (r[C.SUBSET], r[C.QUESTION_TYPE], r["arm_a"], r["arm_b"]): r for r in t.data.iter_rows(named=True)
    }
    k4 = rows[("authority", "after_claims_k4", "pmem", "pmem-paper")]
    # 6 pmem-only, 1 pmem-paper-only; the unjudged question is not a pair
    assert (k4["n"], k4["a_only"], k4["b_only"]) == (8, 6, 1)
    assert k4["acc_a"] == pytest.approx(7 / 8) and k4["acc_b"] == pytest.approx(2 / 8)
    # exact two-sided binomial on 7 discordant pairs: 2 * (C(7,0) + C(7,1)) / 2^7
    assert k4["mcnemar_p"] == pytest.approx(2 * (1 + 7) / 128) == pytest.approx(0.125)
    same = rows[("authority", "after_claims_k4", "pmem", "bitemporal")]
    assert (same["a_only"], same["b_only"], same["mcnemar_p"]) == (0, 0, 1.0)
    shown = t.shown.filter((pl.col("probe") == "after 4 claims") & (pl.col("pair") == "pmem vs pmem-paper"))
    assert shown["a only / b only"][0] == "6 / 1" and shown["McNemar p"][0] == "0.125"
    # every post-event probe of both pairs, no baseline
    post = {(s, q) for s, ts in TYPES.items() for q in ts if not q.startswith("before_")}
    for pair in (("pmem", "pmem-paper"), ("pmem", "bitemporal")):
        assert {(s, q) for s, q, a, b in rows if (a, b) == pair} == post


def test_mcnemar_counts_every_pair(metrics: Metrics, probe_results: pl.DataFrame) -> None:
    """Discordant counts and p-values of every tested probe, recounted pair by pair in Python."""
    by_q: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for r in probe_results.iter_rows(named=True):
        by_q[(r[C.HISTORY_ID], r[C.QUESTION_ID])][r[C.ARM]] = r
    for r in metrics.tables["provenance_paired"].data.iter_rows(named=True):
        a_only = b_only = n = 0
        for arms in by_q.values():
            x, y = arms.get(r["arm_a"]), arms.get(r["arm_b"])
            if (
                x is None
                or y is None
                or x[C.SUBSET] != r[C.SUBSET]
                or x[C.QUESTION_TYPE] != r[C.QUESTION_TYPE]
            ):
                continue
            if x[C.CORRECT] is None or y[C.CORRECT] is None:
                continue
            n += 1
            a_only += x[C.CORRECT] and not y[C.CORRECT]
            b_only += y[C.CORRECT] and not x[C.CORRECT]
        assert (r["n"], r["a_only"], r["b_only"]) == (n, a_only, b_only)
        d, m_ = a_only + b_only, min(a_only, b_only)
        p = 1.0 if d == 0 else min(1.0, 2 * sum(math.comb(d, i) for i in range(m_ + 1)) / 2**d)
        assert r["mcnemar_p"] == pytest.approx(p)


def test_artifact_columns(metrics: Metrics, probe_results: pl.DataFrame) -> None:
    t = metrics.tables["provenance_erasure"]
    data = {(r[C.ARM], r["metric"]): r for r in t.data.iter_rows(named=True)}
    forget = probe_results.filter(pl.col(C.QUESTION_TYPE).is_in(["forget_once", "forget_twice"]))
    for arm in ARMS:
        vals = [v for v in forget.filter(pl.col(C.ARM) == arm)[C.ARTIFACT_BYTES].to_list() if v is not None]
        row = dict(zip(t.shown.columns, t.shown.filter(pl.col(C.ARM) == arm).row(0), strict=True))
        if not vals:  # raw: never measured, so missing, not 0
            assert (arm, "artifact_bytes_mean") not in data and (arm, "artifact_held") not in data
            assert row["erased bytes held (mean)"] == row["states holding erased text"] == "–"
            continue
        held = sum(v > 0 for v in vals)
        mean = data[(arm, "artifact_bytes_mean")]
        assert (mean["n"], mean["mean_bytes"]) == (len(vals), pytest.approx(sum(vals) / len(vals)))
        share = data[(arm, "artifact_held")]
        assert (share["n"], share["k"]) == (len(vals), held)
        assert share["rate"] == pytest.approx(held / len(vals))
        assert (share["wilson_lo"], share["wilson_hi"]) == pytest.approx(wilson95(held, len(vals)))
        lo, hi = wilson95(held, len(vals))
        assert row["states holding erased text"] == (
            f"{100 * held / len(vals):.1f} [{100 * lo:.1f}, {100 * hi:.1f}] ({held}/{len(vals)})"
        )
    assert data[("pmem", "artifact_held")]["k"] == 0  # pmem keeps none of the erased text
    assert data[("bitemporal", "artifact_held")]["k"] > 0


def test_cost_per_arm(metrics: Metrics, probe_run: Path, probe_results: pl.DataFrame) -> None:
    hist = read(probe_run, "histories").filter(pl.col(C.BENCHMARK) == BENCH)
    req = read(probe_run, "requests").filter(pl.col(C.BENCHMARK) == BENCH)
    data = {r[C.ARM]: r for r in metrics.tables["provenance_cost"].data.iter_rows(named=True)}
    assert set(data) == set(probe_results[C.ARM].to_list())
    for arm, r in data.items():
        mine = probe_results.filter(pl.col(C.ARM) == arm)
        assert r["questions"] == mine.height
        assert r[C.READ_TOKENS] == pytest.approx(mine[C.READ_TOKENS].mean())
        done = hist.filter((pl.col(C.ARM) == arm) & (pl.col(C.STATUS) == "complete"))
        assert r["histories"] == done.height == done[C.HISTORY_ID].n_unique()
        tokens = [p + c for p, c in done.select(C.WRITE_PROMPT_TOKENS, C.WRITE_COMPLETION_TOKENS).iter_rows()]
        assert r["write_tokens_per_history"] == pytest.approx(sum(tokens) / len(tokens))
        calls = req.filter(
            (pl.col(C.ARM) == arm) & (pl.col(C.PURPOSE) == "extract") & ~pl.col(C.HISTORY_FAILED)
        )
        charged = sum(p + c for p, c in calls.select(C.PROMPT_TOKENS, C.COMPLETION_TOKENS).iter_rows())
        assert r["write_call_tokens_per_history"] == pytest.approx(charged / done.height)
    # the failed bitemporal history and the failed first run of a retried one are not charged
    assert data["bitemporal"]["write_tokens_per_history"] < 5000
    assert data["pmem"]["write_tokens_per_history"] < 2000
    assert data["raw"]["write_tokens_per_history"] == 0


def test_plot_and_report(probe_run: Path, metrics: Metrics, tmp_path: Path) -> None:
    png = plot_all(metrics)["provenance_probes"]
    f = tmp_path / "probes.png"
    f.write_bytes(png)
    with Image.open(f) as im:
        im.verify()
    paths = build_report(probe_run)
    md = paths.markdown.read_text()
    assert "## Provenance probes" in md
    for subset in TYPES:
        assert f"### Provenance probes: {subset}" in md
    assert "### Provenance probes: paired tests (exact McNemar)" in md
    assert "### Provenance probes: cost per arm" in md
    assert "figures/provenance_probes.png" in md
    # the section sits before the generic tables and holds the formatted cells
    assert md.index("## Provenance probes") < md.index("## All accuracies")
    assert "| authority | after 4 claims | pmem vs pmem-paper | 8 | 6 / 1 | 87.5 / 25.0 | 0.125 |" in md
    names = {p.stem for p in paths.tables}
    assert {"provenance_erasure", "provenance_paired", "provenance_cost"} <= names
    csv = pl.read_csv(paths.out / "tables" / "provenance_authority.csv")
    assert {"arm", "metric", "n", "k", "rate", "wilson_lo", "wilson_hi"} <= set(csv.columns)


def test_run_without_probes_has_no_section(tmp_path: Path) -> None:
    root = write_fixture_run(tmp_path / "run", seed=3, n_alf=2, fc_questions=5)
    m = compute(open_run(root))
    for name in ("provenance_erasure", "provenance_merge", "provenance_paired", "provenance_cost"):
        assert m.tables[name].empty
    assert "provenance_probes" not in plot_all(m)
    paths = build_report(root)
    md = paths.markdown.read_text()
    assert "Provenance probes" not in md
    assert "## FactConsolidation" in md and "## All accuracies" in md


def test_missing_pair_arm_is_skipped_with_a_note(tmp_path: Path) -> None:
    root = make_probe_run(tmp_path / "run", arms=("pmem", "bitemporal", "raw"))
    t = compute(open_run(root)).tables["provenance_paired"]
    assert set(t.data["arm_b"].to_list()) == {"bitemporal"}
    assert any("pmem vs pmem-paper: skipped" in n and "pmem-paper" in n for n in t.notes)
    md = build_report(root).markdown.read_text()
    assert "pmem vs pmem-paper: skipped" in md
