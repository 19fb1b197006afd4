"""Acceptance 1: `ray job submit ... -- pmem sweep jobs/quickstart.toml` against a local `ray start --head`.

cluster/local_job.sh does exactly that with token authentication on, then stops its own head.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from runner_helpers import read

REPO = Path(__file__).resolve().parents[2]


def _port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


@pytest.mark.slow
def test_ray_job_submit_quickstart(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PMEM_OUT=str(tmp_path / "runs"), DASHBOARD_PORT=str(_port(8265)), NUM_CPUS="2")
    proc = subprocess.run(
        [str(REPO / "cluster" / "local_job.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "succeeded" in out
    runs = list((tmp_path / "runs").glob("quickstart-*"))
    assert len(runs) == 1, out[-2000:]
    run = runs[0]
    assert str(run) in out  # the job printed its run directory
    hist = read(run, "histories")
    assert hist.num_rows > 0 and set(hist.column("status").to_pylist()) == {"complete"}
    assert read(run, "results").num_rows > 0
    # the script stopped the head it started (found by its private temp dir), and nothing else
    tmp = next(
        line.split(": ", 1)[1].strip() for line in out.splitlines() if line.startswith("ray head temp dir:")
    )
    alive = [p for p in Path("/proc").glob("[0-9]*/cmdline") if _reads(p, tmp)]
    assert alive == []


def _reads(path: Path, needle: str) -> bool:
    try:
        return needle.encode() in path.read_bytes()
    except OSError:
        return False
