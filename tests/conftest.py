"""Shared fixtures. One local Ray cluster for the whole test session, started on first use."""

from __future__ import annotations

import os

import pytest

#: Logical GPUs let the vLLM-hosting path (placement, one replica per GPU) run on a CPU-only machine.
LOGICAL_GPUS = 4


@pytest.fixture(scope="session")
def ray_cluster():
    """The session's Ray: started once, shut down at the end. Tests must not call ray.init themselves."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not ray.is_initialized():
        ray.init(
            num_cpus=4,
            num_gpus=LOGICAL_GPUS,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    yield ray
    ray.shutdown()
