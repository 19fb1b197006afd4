"""Sweep engine on Ray: configs, run directories, runner actors, resume, judging and progress.

>>> from pmem.runner import parse_config
>>> spec = parse_config({"arms": ["pmem"], "models": {"agent": {"backend": "heuristic"},
...     "embedder": {"backend": "hashing"}}, "benchmarks": [{"name": "factconsolidation", "subset": "sh_6k"}]})
>>> spec.targets()[0].label
'factconsolidation/sh_6k'

Besides the sweep itself, the runner's parts that ``pmem.ingest`` (which runs the sweep's models on the
sweep's cluster) reuses are public here: config tables (:func:`read_toml`, :func:`check_keys`,
:func:`config_error`, :func:`parse_role`), Ray (:func:`connect`, :func:`embedded`), hosted models
(:class:`HostedModels`, :class:`Hosted`, :func:`model_client`) and the request-recording clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pmem._lazy import lazy_exports
from pmem.runner._config import (
    ConfigError,
    RoleSpec,
    RunOptions,
    SweepSpec,
    Target,
    check_keys,
    config_error,
    load_config,
    parse_config,
    parse_role,
    read_toml,
)
from pmem.runner._connect import ClusterUnreachable, connect, embedded
from pmem.runner._driver import SweepInterrupted, SweepResult, plan_sweep, run_sweep
from pmem.runner._erase import RunErasure, RunErasureError, erase_in_run
from pmem.runner._execute import RecordingChatModel, RecordingEmbedder
from pmem.runner._judge import (
    judge_answer,
    judge_calibration,
    judge_results,
    judge_version,
    measures_topics,
    update_results,
)
from pmem.runner._store import RunStore

if TYPE_CHECKING:
    from pmem.runner._actor import model_client
    from pmem.runner._hosting import Hosted, HostedModels
    from pmem.runner._summary import print_summary

# name -> module: imported on first use (`import pmem.runner` does not load the runner actor's module)
_LAZY: dict[str, str] = {
    "model_client": "_actor",
    "Hosted": "_hosting",
    "HostedModels": "_hosting",
    "print_summary": "_summary",
}

__all__ = [
    "ClusterUnreachable",
    "ConfigError",
    "Hosted",
    "HostedModels",
    "RecordingChatModel",
    "RecordingEmbedder",
    "RoleSpec",
    "RunErasure",
    "RunErasureError",
    "RunOptions",
    "RunStore",
    "SweepInterrupted",
    "SweepResult",
    "SweepSpec",
    "Target",
    "check_keys",
    "config_error",
    "connect",
    "embedded",
    "erase_in_run",
    "judge_answer",
    "judge_calibration",
    "judge_results",
    "judge_version",
    "load_config",
    "measures_topics",
    "model_client",
    "parse_config",
    "parse_role",
    "plan_sweep",
    "print_summary",
    "read_toml",
    "run_sweep",
    "update_results",
]


__getattr__ = lazy_exports("pmem.runner", _LAZY)
