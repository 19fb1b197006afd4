"""What an ingest runs with: the models, P-Mem's write-path options and the pipeline's sizes.

``pmem ingest --config CONFIG`` reads a TOML file with the sweep's ``[models.agent]`` and
``[models.embedder]`` tables (parsed by the sweep's own rules, so one model table works in both) and an
optional ``[ingest]`` table. A sweep config may be passed as it is: its benchmark and arm keys are
ignored, and its ``[arm_options.pmem]`` table supplies the write-path options unless ``[ingest]`` names
them. Without a config, or a config without ``[models]`` (an ``[ingest]`` table alone sizes the
pipeline), the embedded defaults apply: the heuristic agent and the hashing embedder, as in ``make demo``.

>>> spec = IngestSpec.default()
>>> spec.agent.backend, spec.embedder.backend, spec.batch_events
('heuristic', 'hashing', 2048)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.memory.writepath import WritePath, Writer
from pmem.runner import RoleSpec, check_keys, config_error, parse_role, read_toml

if TYPE_CHECKING:
    from pmem.memory.writepath import WritePath
    from pmem.models import ChatModel, Embedder

#: The write-path options an ingest honours (a sweep's ``[arm_options.pmem]`` has read options too).
HONOURED_OPTIONS = ("annotate", "identity", "identity_threshold", "concurrency")
#: ``[ingest]`` keys that size the pipeline, with their types and defaults.
PIPELINE_OPTIONS: dict[str, tuple[type, Any]] = {
    "batch_events": (int, 2048),
    # while the stream holds fact rows only, batches double up to this (see pmem.ingest._stream)
    "fact_batch_events": (int, 131_072),
    "checkpoint_every": (int, 50_000),
    "cache": (bool, True),
    "worker_cpus": (float, 0.0),  # 0: min(1, cluster CPUs / partitions)
    # event ids the driver holds in memory to refuse a repeated one; older ones go to runs on disk
    "ids_in_memory": (int, 1_000_000),
}
_SWEEP_KEYS = {"name", "description", "arms", "run", "benchmarks", "arm_options"}
#: The models of an ingest whose config names none: the deterministic agent and embedder, no model served.
DEFAULT_MODELS: dict[str, dict[str, Any]] = {
    "agent": {"backend": "heuristic"},
    "embedder": {"backend": "hashing"},
}


@dataclass(frozen=True)
class IngestSpec:
    """Models and options of one ingest. Hashed (credentials aside) into the checkpoint's identity."""

    agent: RoleSpec
    embedder: RoleSpec
    write: tuple[tuple[str, Any], ...] = ()
    batch_events: int = 2048
    fact_batch_events: int = 131_072
    checkpoint_every: int = 50_000
    cache: bool = True
    worker_cpus: float = 0.0
    ids_in_memory: int = 1_000_000
    source: str = "<defaults>"

    @classmethod
    def default(cls) -> IngestSpec:
        """The embedded defaults: heuristic agent, hashing embedder."""
        return parse_ingest_config({})

    def write_path(self, agent: ChatModel, embedder: Embedder) -> WritePath:
        """P-Mem's write path (:class:`pmem.memory.writepath.WritePath`) over ``agent`` and ``embedder``,
        with this ingest's options; one write unit per stream row.

        Replayable provenance is off: a partition cannot record aliases or premises, nor erase evidence
        that lives on the driver, so the merged state would not be the sequential one. A row's own
        ``valid_time`` is kept: its evidence's valid time, which partitions carry with the facts."""

        options = dict(self.write)
        writer = Writer(agent, embedder, concurrency=options.pop("concurrency", 16))
        return WritePath(writer, {**options, "provenance": False, "valid_time": True}, name="pmem ingest")

    def identity(self) -> dict[str, Any]:
        """What decides the state's bytes: a checkpoint made under another identity is not resumed."""
        return {
            "agent": self.agent.identity(),
            "embedder": self.embedder.identity(),
            "write": dict(self.write),
        }

    def identity_hash(self) -> str:
        text = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def public(self) -> dict[str, Any]:
        """The spec as the ingest report shows it (credentials masked)."""
        return {
            "agent": self.agent.public_dict(),
            "embedder": self.embedder.public_dict(),
            "write": dict(self.write),
            "batch_events": self.batch_events,
            "fact_batch_events": self.fact_batch_events,
            "checkpoint_every": self.checkpoint_every,
            "ids_in_memory": self.ids_in_memory,
            "cache": self.cache,
        }


def parse_ingest_config(data: dict[str, Any], *, source: str = "<config>") -> IngestSpec:
    """Validate a parsed TOML document into an :class:`IngestSpec` (errors name the file and key)."""
    check_keys(source, "top level", data, {"models", "ingest", *_SWEEP_KEYS})
    # no [models] at all: the defaults; a [models] table names both (half a table is a mistake, not a default)
    models = data.get("models", DEFAULT_MODELS)
    if not isinstance(models, dict):
        raise config_error(source, "[models]", "must be a table, with [models.agent] and [models.embedder]")
    for role in ("agent", "embedder"):
        if role not in models:
            raise config_error(source, f"[models.{role}]", "is required")
    agent_t = models["agent"]
    if isinstance(agent_t, list):
        if len(agent_t) != 1:
            raise config_error(source, "[[models.agent]]", "an ingest runs one agent model; list exactly one")
        agent_t = agent_t[0]
    agent = parse_role(source, "agent", agent_t)
    embedder = parse_role(source, "embedder", models["embedder"])

    table = data.get("ingest", {})
    if not isinstance(table, dict):
        raise config_error(source, "[ingest]", "must be a table")
    check_keys(source, "[ingest]", table, {*HONOURED_OPTIONS, *PIPELINE_OPTIONS})
    arm_options = (
        data.get("arm_options", {}).get("pmem", {}) if isinstance(data.get("arm_options"), dict) else {}
    )
    write: dict[str, Any] = {k: v for k, v in dict(arm_options).items() if k in HONOURED_OPTIONS}
    write.update({k: v for k, v in table.items() if k in HONOURED_OPTIONS})
    _check_write(source, write)
    sizes: dict[str, Any] = {}
    for key, (typ, default) in PIPELINE_OPTIONS.items():
        value = table.get(key, default)
        ok = (
            isinstance(value, bool)
            if typ is bool
            else isinstance(value, (int, float) if typ is float else typ)
        )
        if not ok or (typ is not bool and isinstance(value, bool)):
            raise config_error(source, f"[ingest] {key}", f"must be {typ.__name__}, got {value!r}")
        if typ is int and value < 1:
            raise config_error(source, f"[ingest] {key}", f"must be at least 1, got {value!r}")
        if typ is float and value < 0:
            raise config_error(source, f"[ingest] {key}", f"must not be negative, got {value!r}")
        sizes[key] = typ(value)
    return IngestSpec(
        agent=agent, embedder=embedder, write=tuple(sorted(write.items())), source=source, **sizes
    )


def _check_write(source: str, write: dict[str, Any]) -> None:
    annotate = write.get("annotate", "auto")
    if annotate not in ("auto", "model", "controller"):
        raise config_error(
            source, "[ingest] annotate", f"must be auto, model or controller, got {annotate!r}"
        )
    if "identity" in write and not isinstance(write["identity"], bool):
        raise config_error(source, "[ingest] identity", f"must be true or false, got {write['identity']!r}")
    threshold = write.get("identity_threshold", 0.72)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise config_error(source, "[ingest] identity_threshold", f"must be in (0, 1], got {threshold!r}")
    concurrency = write.get("concurrency", 16)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise config_error(source, "[ingest] concurrency", f"must be a positive integer, got {concurrency!r}")


def load_ingest_config(path: str | Path | None) -> IngestSpec:
    """The spec of ``path`` (a TOML file), or the embedded defaults when ``path`` is None."""
    if path is None:
        return IngestSpec.default()
    return parse_ingest_config(read_toml(path), source=str(path))
