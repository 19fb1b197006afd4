"""Sweep engine on Ray: configs, run directories, runner actors, resume, judging and progress.

>>> from pmem.runner import parse_config
>>> spec = parse_config({"arms": ["pmem"], "models": {"agent": {"backend": "heuristic"},
...     "embedder": {"backend": "hashing"}}, "benchmarks": [{"name": "factconsolidation", "subset": "sh_6k"}]})
>>> spec.targets()[0].label
'factconsolidation/sh_6k'
"""

from __future__ import annotations

from pmem.runner._config import (
    ConfigError,
    ModelSpec,
    RoleSpec,
    RunOptions,
    SweepSpec,
    Target,
    load_config,
    parse_config,
)
from pmem.runner._connect import ClusterUnreachable
from pmem.runner._driver import SweepInterrupted, SweepResult, plan_sweep, run_sweep
from pmem.runner._erase import RunErasure, RunErasureError, erase_in_run
from pmem.runner._store import RunStore

__all__ = [
    "ClusterUnreachable",
    "ConfigError",
    "ModelSpec",
    "RoleSpec",
    "RunErasure",
    "RunErasureError",
    "RunOptions",
    "RunStore",
    "SweepInterrupted",
    "SweepResult",
    "SweepSpec",
    "Target",
    "erase_in_run",
    "load_config",
    "parse_config",
    "plan_sweep",
    "run_sweep",
]
