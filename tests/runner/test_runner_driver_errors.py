"""The driver refuses what it cannot do before anything starts, never hangs, and stops cleanly.

Every refusal is one line naming the key or path, exit status 2, and no run folder left behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from ports import free_port
from runner_helpers import config, read, result_keys, sweep_argv, tiny_chains_body

from pmem.runner import load_config, run_sweep

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SMALL = tiny_chains_body(cases=3)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**env, **extra}


def _pmem(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pmem.cli", *args],
        cwd=REPO,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("runners", ["0", "-1"])
def test_runners_below_one_refused_before_anything(tmp_path: Path, runners: str) -> None:
    cfg = config(tmp_path, SMALL)
    out = tmp_path / "out"
    line = _one_line_error(_pmem("sweep", str(cfg), "--out", str(out), "--runners", runners), "--runners")
    assert runners in line
    assert not out.exists()
    with pytest.raises(ValueError, match="runners"):
        run_sweep(load_config(cfg), out=out, runners=int(runners), progress_enabled=False)
    assert not out.exists()


def test_unknown_model_backend_names_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        config(tmp_path, SMALL).read_text().replace('backend = "heuristic"', 'backend = "gpt5-turbo"')
    )
    out = tmp_path / "out"
    _one_line_error(
        _pmem("sweep", str(cfg), "--out", str(out)), str(cfg), "[models.agent] backend", "gpt5-turbo"
    )
    assert not out.exists()


def test_non_utf8_config_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "latin1.toml"
    cfg.write_bytes(
        config(tmp_path, SMALL).read_text().replace('name = "t"', 'name = "caf\xe9"').encode("latin-1")
    )
    out = tmp_path / "out"
    _one_line_error(_pmem("sweep", str(cfg), "--out", str(out)), str(cfg), "UTF-8")
    assert not out.exists()


def test_out_that_is_a_file_or_under_one(tmp_path: Path) -> None:
    cfg = config(tmp_path, SMALL)
    afile = tmp_path / "taken"
    afile.write_text("mine")
    _one_line_error(_pmem("sweep", str(cfg), "--out", str(afile)), str(afile), "is a file")
    _one_line_error(_pmem("sweep", str(cfg), "--out", str(afile / "runs")), str(afile), "is a file")
    assert afile.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.toml", "taken"]


def test_dead_address_fails_fast_with_one_line(tmp_path: Path) -> None:
    cfg = config(tmp_path, SMALL)
    address = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    proc = _pmem("sweep", str(cfg), "--out", str(tmp_path / "out"), "--address", address, timeout=90)
    assert time.monotonic() - t0 < 60
    _one_line_error(proc, address)
    assert not (tmp_path / "out").exists()


def test_silent_address_times_out_within_the_configured_bound(tmp_path: Path) -> None:
    """A port that accepts connections but never speaks Ray's protocol: bounded by --connect-timeout."""
    cfg = config(tmp_path, SMALL)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        address = f"127.0.0.1:{server.getsockname()[1]}"
        t0 = time.monotonic()
        proc = _pmem(
            "sweep",
            str(cfg),
            "--out",
            str(tmp_path / "out"),
            "--address",
            address,
            "--connect-timeout",
            "3",
            timeout=90,
        )
        took = time.monotonic() - t0
    _one_line_error(proc, address)
    assert took < 45, took  # 3 s of waiting plus interpreter start-up, never Ray's minutes of retries
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a sweep subprocess with an embedded cluster of its own (about 30 s)
def test_embedded_mode_ignores_a_stale_cluster_file(tmp_path: Path, private_ray_tmpdir: str) -> None:
    """`ray.init()` without an address joins the cluster named in ray_current_cluster: a dead one hangs."""
    (Path(private_ray_tmpdir) / "ray").mkdir()
    (Path(private_ray_tmpdir) / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_port()}")
    cfg = config(tmp_path, SMALL, name="stale")
    proc = _pmem(
        "sweep",
        str(cfg),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
        env=_env(RAY_TMPDIR=private_ray_tmpdir),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert len(set(result_keys(run_dir))) == len(result_keys(run_dir)) > 0
    # the embedded cluster is private: Ray's "set RAY_AUTH_MODE=disabled to opt out" is no setting of the user's
    assert "Token authentication" not in proc.stderr, proc.stderr[-3000:]


def test_damaged_batch_resumes_in_one_rerun(ray_cluster, tmp_path: Path) -> None:
    """All histories committed, then one state file damaged: a single re-run (a fresh driver process)
    detects it by checksum, names the file, drops that batch and runs its histories again."""
    cfg = config(tmp_path, SMALL, name="damaged")
    spec = load_config(cfg)
    first = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    assert (first.completed, first.failed) == (3, 0)
    keys = sorted(result_keys(first.run_dir))
    victim = sorted((first.run_dir / "states").rglob("*.arrow"))[0]
    victim.write_bytes(victim.read_bytes()[:-7])  # truncated, as by a crash of the disk underneath
    proc = _pmem(
        "sweep",
        str(cfg),
        "--out",
        str(tmp_path / "runs"),
        "--quiet",
        "--address",
        ray_cluster.get_runtime_context().gcs_address,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stderr.replace("\n    ", " ")  # a message wrapped to the terminal, read whole
    assert f"{victim}: checksum mismatch" in said
    assert sorted(result_keys(first.run_dir)) == keys
    hist = read(first.run_dir, "histories")
    assert sorted(Counter(hist.column("unit_id").to_pylist()).values()) == [1, 1, 1]


@pytest.mark.slow  # a sweep subprocess interrupted and resumed (about 27 s)
def test_ctrl_c_keeps_committed_work_and_says_how_to_resume(ray_cluster, tmp_path: Path) -> None:
    cfg = config(tmp_path, tiny_chains_body(cases=20), name="sigint")
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        sweep_argv(cfg, out, ray_cluster.get_runtime_context().gcs_address),
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while (
            time.monotonic() < deadline
            and proc.poll() is None
            and not list(out.glob("sigint-*/_commits/*.json"))
        ):
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted: ") and "run the same command again to resume" in last, last
    run_dir = next(out.glob("sigint-*"))
    kept = set(read(run_dir, "histories").column("unit_id").to_pylist())
    assert kept  # committed work is kept
    resumed = run_sweep(load_config(cfg), out=out, progress_enabled=False)
    assert resumed.skipped >= len(kept)
    assert (resumed.completed, resumed.failed) == (20, 0)
    keys = result_keys(run_dir)
    assert len(keys) == len(set(keys))


def test_a_sweep_whose_extraction_wrote_nothing_says_why_and_exits_1(ray_cluster, tmp_path: Path) -> None:
    """Ordinary text and the heuristic agent: the pmem arm extracts nothing. The sweep says which arm,
    how many extraction calls, and why, and exits 1; --allow-empty (or [run] allow_empty) accepts it.
    Arms that do not extract (raw) never count."""
    body = """
arms = ["pmem", "raw"]
[run]
runners = 1
flush_s = 0.1
[[benchmarks]]
name = "runner_plugins:ordinary"
n = 2
"""
    cfg = config(tmp_path, body, name="ordinary")
    address = ray_cluster.get_runtime_context().gcs_address
    sweep = sweep_argv(cfg, tmp_path / "runs", address)[3:]  # the arguments after `python -m pmem.cli`
    done = _pmem(*sweep)
    assert done.returncode == 1, done.stderr[-3000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("pmem sweep:")]
    assert "no fact was extracted by pmem (4 extraction calls)" in line and "raw" not in line.split(":")[1]
    assert "heuristic" in line and "--allow-empty accepts it" in line
    assert Path(done.stdout.strip().splitlines()[-1]).is_dir()  # the run is written and named
    accepted = _pmem(*sweep, "--allow-empty")
    assert accepted.returncode == 0 and "accepted (allow_empty)" in accepted.stderr, accepted.stderr[-3000:]
