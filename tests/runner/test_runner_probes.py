"""The provenance probes through a real sweep: artifact bytes in results/, the job file's ranks."""

from __future__ import annotations

import tomllib
from pathlib import Path

from runner_helpers import config, read

from pmem.bench._probes import SOURCE_AUTHORITY
from pmem.runner import load_config, run_sweep

ROOT = Path(__file__).resolve().parents[2]

BODY = """
[run]
runners = 2
in_flight = 4
batch = 8
flush_s = 0.2
progress_s = 1
[[benchmarks]]
name = "provenance-probes"
subsets = ["erasure", "authority"]
cases = 4
arms = ["pmem", "pmem-paper", "raw"]
[arm_options.pmem]
authority = { user = 2, environment = 2, document = 2, web = 0, agent = 0 }
"""


def test_erasure_rows_carry_the_bytes_each_arm_still_holds(ray_cluster, tmp_path: Path) -> None:
    res = run_sweep(load_config(config(tmp_path, BODY)), out=tmp_path / "runs", progress_enabled=False)
    assert (res.total, res.failed) == (24, 0)
    rows = read(res.run_dir, "results").to_pylist()
    forget = [r for r in rows if r["question_type"] in ("forget_once", "forget_twice")]
    assert len(forget) == 12
    by_arm = {
        arm: [r["artifact_bytes"] for r in forget if r["arm"] == arm] for arm in ("pmem", "pmem-paper", "raw")
    }
    assert by_arm["pmem"] == [0, 0, 0, 0]
    assert all(b > 0 for b in by_arm["pmem-paper"] + by_arm["raw"])
    assert all(
        r["artifact_bytes"] is None for r in rows if r["question_type"] not in ("forget_once", "forget_twice")
    )
    pmem = [r for r in rows if r["arm"] == "pmem"]
    assert all(r["correct"] for r in pmem), [r for r in pmem if not r["correct"]]
    # the saved state of a pmem history holds no byte of the erased statement
    writes = read(res.run_dir, "writes").to_pylist()
    assert any(w["op"] == "erase" and w["arm"] == "pmem" for w in writes)
    assert not any(w["op"] == "erase" for w in writes if w["arm"] != "pmem")


def test_the_jobs_rank_sources_as_the_benchmark_says() -> None:
    for job in ("provenance_probes.toml", "quickstart.toml"):
        data = tomllib.loads((ROOT / "jobs" / job).read_text())
        tables = data["arm_options"]
        assert tables["pmem"]["authority"] == SOURCE_AUTHORITY, job
        assert all(t["authority"] == SOURCE_AUTHORITY for t in tables.values() if "authority" in t), job
    spec = load_config(ROOT / "jobs" / "provenance_probes.toml")
    assert {t.benchmark for t in spec.targets()} == {"provenance-probes"}
    assert "pmem-paper" in spec.targets()[0].arms
