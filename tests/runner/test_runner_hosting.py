"""vllm replicas are started once by the driver and shared by every runner (stand-in server on CPU)."""

from __future__ import annotations

import time
from pathlib import Path

from runner_helpers import TINY, config, read

from pmem.runner import load_config, run_sweep


def test_runners_share_the_drivers_replicas(ray_cluster, tmp_path: Path) -> None:
    gpus = int(ray_cluster.cluster_resources().get("GPU", 0))
    assert gpus >= 3
    # 3 replicas x 1 GPU, 2 runners: only sharing fits the session's 4 logical GPUs (unshared needs 6)
    body = f"""
arms = ["{TINY}"]
[run]
runners = 2
in_flight = 4
flush_s = 0.2
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = 2
cases = 6
"""
    p = config(tmp_path, body, name="hosted")
    p.write_text(p.read_text().replace(
        '[models.agent]\nbackend = "heuristic"',
        '[models.agent]\nbackend = "vllm"\nmodel = "heuristic"\nlauncher = "standin"\nreplicas = 3\n'
        'health_timeout_s = 60'))
    res = run_sweep(load_config(p), out=tmp_path / "runs", progress_enabled=False)
    assert (res.completed, res.failed) == (6, 0), res.failures
    reqs = read(res.run_dir, "requests")
    assert set(reqs.column("model").to_pylist()) >= {"heuristic"}
    assert all(read(res.run_dir, "results").column("correct").to_pylist())
    # the replicas were stopped with the sweep: their GPUs come back (killing actors is asynchronous)
    deadline = time.monotonic() + 30
    while ray_cluster.available_resources().get("GPU", 0) < gpus and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_cluster.available_resources().get("GPU", 0) == gpus
