"""The run directory contract end to end: a real (small) quickstart sweep is written, then reported.

The report is otherwise tested on synthetic runs; here it reads what the runner wrote: every dataset has
exactly its contract schema, and every report table is filled wherever the run holds rows for it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from quickstart_sweep import QUICKSTART_GROUP, Swept

from pmem.report import build_report, compute, open_run
from pmem.report._peers import COUNTERPART
from pmem.report._probes import probe_tables
from pmem.rundir import DATASETS
from pmem.rundir import columns as C

pytestmark = QUICKSTART_GROUP


@pytest.fixture(scope="module")
def quickstart_run(quickstart_first_run: Swept) -> Path:
    """The quickstart, first history of each subset (the heuristic agent: no LLM), swept by ``pmem sweep``
    once per test process (tests/quickstart_sweep.py)."""
    assert quickstart_first_run.code == 0, quickstart_first_run.stderr[-3000:]
    assert quickstart_first_run.stdout.startswith("pmem sweep: 84/84 histories complete, 0 failed")
    return quickstart_first_run.run_dir


def test_every_dataset_has_its_contract_schema(quickstart_run: Path) -> None:
    seen = set()
    for name, ds in DATASETS.items():
        for f in sorted((quickstart_run / name).glob("*.parquet")):
            assert pq.read_schema(f).equals(ds.schema, check_metadata=False), f
            seen.add(name)
    # the heuristic judge has nothing to judge in the quickstart: no judgments/
    assert seen == {"results", "writes", "requests", "histories"}


def test_report_of_a_real_sweep_fills_every_table_it_has_rows_for(quickstart_run: Path) -> None:
    paths = build_report(quickstart_run)
    m = compute(open_run(quickstart_run))
    res = m.run.frame("results").collect()
    subsets = set(res[C.SUBSET].unique().to_list())
    fc = res.filter(res[C.BENCHMARK] == "factconsolidation")
    # which tables the run holds rows for (two-step is not in the quickstart: that table stays empty)
    has_rows = {
        "summary": True,  # the report's opening figures
        "coverage": True,
        "table6_chains": "chains" in subsets,
        "table8_retraction": "retraction" in subsets,
        "conflict_probe": "conflict" in subsets,
        "two_step": "two-step" in subsets,
        "table7_factconsolidation": fc.height > 0,
        "accuracy": True,
        "stale_rate": res[C.STALE].drop_nulls().len() > 0,
        "paired": True,
        "read_cost": True,
        "write_cost": True,
        "break_even": True,
        "write_audit": fc[C.AUDIT_GOLD_IN_ACTIVE_CELL].drop_nulls().len() > 0,
        "published_vs_ours": True,
        # LoCoMo's tables, and the published LoCoMo figures beside them, need LoCoMo rows
        "locomo": "locomo" in set(res[C.BENCHMARK].to_list()),
        "locomo_adversarial": "locomo" in set(res[C.BENCHMARK].to_list()),
        # right LoCoMo answers whose read cites a turn, and LoCoMo's F1 paired against pmem
        "locomo_citations": "locomo" in set(res[C.BENCHMARK].to_list()),
        "locomo_f1_paired": "locomo" in set(res[C.BENCHMARK].to_list()),
        # the judge's calibration and rules: a run whose judge judged LoCoMo
        "judge_calibration": "locomo" in set(res[C.BENCHMARK].to_list()),
        "judge_rules": "locomo" in set(res[C.BENCHMARK].to_list()),
        "published_locomo_vs_ours": "locomo" in set(res[C.BENCHMARK].to_list()),
        "reply_quality": m.run.frame("requests") is not None,
        # the heuristic agent runs in process: no model server, no access log to count
        "server_requests": False,
        # the real peers need a real model: the quickstart (heuristic agent) plans none of them
        "peers": bool(set(res[C.ARM].unique().to_list()) & set(COUNTERPART)),
    }
    probes = res.filter(res[C.BENCHMARK] == "provenance-probes")
    has_rows.update(dict.fromkeys(probe_tables(m), probes.height > 0))
    assert probes.height > 0  # the quickstart's probe slice
    has_rows["state_contents"] = True  # the quickstart's graph arms save their states
    assert set(m.tables) == set(has_rows)
    # the quickstart runs no LoCoMo
    locomo = (
        "locomo",
        "locomo_adversarial",
        "locomo_citations",
        "locomo_f1_paired",
        "judge_calibration",
        "judge_rules",
        "published_locomo_vs_ours",
    )
    assert all(has_rows[t] for t in has_rows if t not in ("two_step", "peers", "server_requests", *locomo))
    for name, table in m.tables.items():
        assert table.empty != has_rows[name], (
            f"{name}: {table.data.height} rows, run has rows: {has_rows[name]}"
        )
    # an empty table says why it is empty (the quickstart sweeps no two-step subset)
    assert "Not in this run" in " ".join(m.tables["two_step"].notes)
    two_step = paths.markdown.read_text().split("two-step phrasing", 1)[1].split("\n## ", 1)[0]
    assert "Not in this run" in two_step
    cov = m.tables["coverage"].data
    assert set(cov["status"].to_list()) == {"ok"}
    # costs come from every dataset the runner wrote
    wc = m.tables["write_cost"].data
    for col in ("write_calls_per_history", "committed_facts_per_history", "wall_s_mean", "state_bytes_mean"):
        assert wc[col].drop_nulls().len() > 0, col
    assert paths.markdown.is_file() and {p.stem for p in paths.tables} == set(m.tables)


def test_every_result_records_what_its_arm_read(quickstart_run: Path) -> None:
    """The context each arm was given for each question is in results/ (``read_context``), the very text
    ``read_tokens`` and ``read_chars`` count: a reviewer reads it instead of inferring it."""
    import polars as pl

    from pmem.memory._retrieval import count_tokens

    results = pl.read_parquet(quickstart_run / "results" / "*.parquet")
    assert results[C.READ_CONTEXT].null_count() == 0
    contexts = results[C.READ_CONTEXT].to_list()
    assert results[C.READ_CHARS].to_list() == [len(c) for c in contexts]
    assert results[C.READ_TOKENS].to_list() == [count_tokens(c) for c in contexts]
    # the arms read differently: the memory arms' cells, the long-context arm the whole history
    by_arm = results.group_by(C.ARM).agg(pl.col(C.READ_CHARS).mean())
    assert by_arm[C.READ_CHARS].n_unique() > 1
    # the heuristic reader is extractive: a right answer of the pmem arm comes from what it read
    right = results.filter((pl.col(C.ARM) == "pmem") & pl.col(C.CORRECT))
    found = [p.lower() in c.lower() for p, c in zip(right[C.PREDICTION], right[C.READ_CONTEXT], strict=True)]
    assert right.height >= 50 and sum(found) >= 0.9 * right.height, (sum(found), right.height)
