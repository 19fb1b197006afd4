"""The Qwen tier's sweep, checked after it ran (``qwen`` marker: ``make test-qwen`` sweeps
jobs/cpu_qwen.toml, writes its report, then runs these tests on that run).

Every arm, the real Mem0 and Graphiti included, completes at least 95% of its histories, every failure is a
``histories/`` row with its reason, and every request the llama.cpp servers answered is one
``requests/`` row carrying the server's own token counts.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from pmem.report._load import open_run
from pmem.report._metrics import compute
from pmem.runner import load_config

pytestmark = pytest.mark.qwen

CONFIG = Path(__file__).resolve().parents[2] / "jobs" / "cpu_qwen.toml"
#: the share of each arm's histories that must complete
MIN_COMPLETE = 0.95


def _tier_run() -> Path:
    """The run folder of jobs/cpu_qwen.toml (``$PMEM_TIER_RUN`` names another), or a skip."""
    named = os.environ.get("PMEM_TIER_RUN")
    if named:
        return Path(named)
    name = load_config(CONFIG).name
    found = sorted(Path("runs").glob(f"{name}-*/run.toml"), key=lambda p: p.stat().st_mtime)
    if not found:
        pytest.skip(f"no {name} run under runs/: make test-qwen sweeps it first")
    return found[-1].parent


def test_every_arm_completes_its_histories_and_each_failure_says_why() -> None:
    run = _tier_run()
    histories = pl.read_parquet(run / "histories")
    final = histories.sort("status").unique(["history_id", "arm"], keep="first")  # complete beats failed
    per_arm = final.group_by("arm").agg((pl.col("status") == "complete").mean().alias("complete"))
    arms = set(load_config(CONFIG).benchmarks[0].arms)
    assert set(per_arm["arm"]) == arms, "an arm of the config left no history row"
    short = per_arm.filter(pl.col("complete") < MIN_COMPLETE)
    assert short.height == 0, f"arms below {MIN_COMPLETE:.0%} complete: {short.to_dicts()}"
    failed = histories.filter(pl.col("status") == "failed")
    assert failed.filter(pl.col("error").is_null() | (pl.col("error") == "")).height == 0


def test_every_request_the_servers_answered_is_one_row_with_the_servers_token_counts() -> None:
    run = _tier_run()
    table = compute(open_run(run)).tables["server_requests"]
    assert not table.empty, table.notes
    assert table.data["received"].to_list() == table.data["recorded"].to_list(), table.footer
    assert table.data["estimated_tokens"].sum() == 0
