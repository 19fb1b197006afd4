"""Resume after the driver is killed with SIGKILL: same rows as an uninterrupted run, no repeats."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from runner_helpers import (
    config,
    read,
    result_keys,
    runner_pids,
    stop_processes,
    sweep_argv,
    tiny_chains_body,
)

from pmem.runner import RunStore, load_config, run_sweep

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

BODY = tiny_chains_body(cases=20)


def test_sigkill_driver_then_resume_matches_uninterrupted_run(ray_cluster, tmp_path: Path) -> None:
    ray = ray_cluster
    cfg = config(tmp_path, BODY, name="resume")
    spec = load_config(cfg)
    # the driver is a separate process on the session's cluster, so it can be SIGKILLed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    out_killed = tmp_path / "killed"
    proc = subprocess.Popen(
        sweep_argv(cfg, out_killed, ray.get_runtime_context().gcs_address),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        commits: list[Path] = []
        while time.monotonic() < deadline and proc.poll() is None:
            commits = list(out_killed.glob("resume-*/_commits/*.json"))
            if len(commits) >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        runners = runner_pids(ray, run_dir=next(out_killed.glob("resume-*")))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_dir = next(out_killed.glob("resume-*"))
    # The killed driver's runners outlive it until Ray reaps them and may commit meanwhile: measure what
    # was complete only once every one of them has exited, so nothing can change under the count.
    stop_processes(ray, runners)
    before = read(run_dir, "histories")
    visible = set(before.column("unit_id").to_pylist()) if before.num_rows else set()
    # complete is what the store says: a batch whose commit record is written is complete even while its
    # files are still in staging (the kill can land between the two; the resume rolls it forward without
    # a call), so counting only the histories already moved made the resumed calls look short
    done_before = RunStore(run_dir).completed()
    assert visible <= done_before and 0 < len(done_before) < 20, "the kill must land mid-run"
    calls_before = read(run_dir, "requests").num_rows

    resumed = run_sweep(spec, out=out_killed, progress_enabled=False)
    assert resumed.run_dir == run_dir
    assert resumed.skipped >= len(done_before)
    assert (resumed.completed, resumed.failed) == (20, 0)

    clean = run_sweep(spec, out=tmp_path / "clean", progress_enabled=False)
    assert clean.run_id == resumed.run_id  # same config, same identity

    keys = result_keys(run_dir)
    assert len(keys) == len(set(keys)), "duplicate result rows after resume"
    assert sorted(keys) == sorted(result_keys(clean.run_dir))
    hist = read(run_dir, "histories")
    assert sorted(hist.column("unit_id").to_pylist()) == sorted(
        read(clean.run_dir, "histories").column("unit_id").to_pylist()
    )
    # every history's calls appear once: the request log equals the uninterrupted run's, per history
    per_unit = Counter(read(run_dir, "requests").column("unit_id").to_pylist())
    assert per_unit == Counter(read(clean.run_dir, "requests").column("unit_id").to_pylist())
    # the resumed driver made calls only for histories that were not complete when it was killed
    assert resumed.calls == sum(n for u, n in per_unit.items() if u not in done_before)
    assert resumed.calls < clean.calls
    assert calls_before >= sum(per_unit[u] for u in visible)
    assert not any((run_dir / "_staging").iterdir())
