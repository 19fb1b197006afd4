"""`ray job submit ... -- pmem ingest ...` against a local `ray start --head` (cluster/local_job.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ports import free_port

from pmem.ingest import ingest_sequential
from pmem.ingest._synthetic import write_synthetic_stream

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ray_job_submit_ingest(tmp_path: Path) -> None:
    stream = write_synthetic_stream(tmp_path / "events.jsonl", 1500, keys=150, seed=9)
    out = tmp_path / "state.arrow"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(DASHBOARD_PORT=str(free_port()), NUM_CPUS="2")
    proc = subprocess.run(
        [
            str(REPO / "cluster" / "local_job.sh"),
            "ingest",
            str(stream),
            "--out",
            str(out),
            "--partitions",
            "2",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "succeeded" in log
    assert "ingested 1,500 events" in log  # the job's own report, streamed back by `ray job submit`
    assert out.read_bytes() == ingest_sequential(stream).to_bytes()
