"""An arm that needs a real model (a peer library) is planned as not run with the heuristic agent: no
units, a plan.json cell that says why, one line on the sweep's output; the other arms run as before."""

from __future__ import annotations

import io
import json
from pathlib import Path

from pmem.arms import NEEDS_A_MODEL
from pmem.runner import load_config, run_sweep
from pmem.runner._driver import plan_sweep

CONFIG = """name = "not-run"
[run]
runners = 1
[models.agent]
backend = "heuristic"
[models.embedder]
backend = "hashing"
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = [1]
cases = 2
arms = ["pmem", "mem0", "graphiti"]
"""


def test_the_plan_leaves_out_what_cannot_run_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONFIG)
    plan = plan_sweep(load_config(tmp_path / "c.toml"), out=tmp_path / "runs")
    assert {u.arm for u in plan.units} == {"pmem"} and len(plan.units) == 2
    assert {cell[2]: n for cell, (n, _) in plan.not_run.items()} == {"mem0": 2, "graphiti": 2}
    assert {why for _, why in plan.not_run.values()} == {NEEDS_A_MODEL}


def test_a_sweep_runs_the_rest_and_its_plan_and_output_say_not_run(tmp_path: Path, ray_cluster) -> None:
    (tmp_path / "c.toml").write_text(CONFIG)
    out = io.StringIO()
    res = run_sweep(
        load_config(tmp_path / "c.toml"), out=tmp_path / "runs", stream=out, progress_enabled=True
    )
    assert res.failed == 0
    said = out.getvalue().replace("\n    ", " ")  # notes are wrapped to the terminal: read them whole
    lines = [ln for ln in said.splitlines() if "not run:" in ln]
    assert lines == [
        f"[pmem sweep] not run: graphiti (2 histories): {NEEDS_A_MODEL}",
        f"[pmem sweep] not run: mem0 (2 histories): {NEEDS_A_MODEL}",
    ]
    cells = json.loads((res.run_dir / "plan.json").read_text())["cells"]
    assert {c["arm"]: (c["histories"], c.get("not_run")) for c in cells} == {
        "pmem": (2, None),
        "mem0": (0, NEEDS_A_MODEL),
        "graphiti": (0, NEEDS_A_MODEL),
    }
