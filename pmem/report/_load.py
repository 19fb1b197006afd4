"""Reading a run directory: ``run.toml`` and the Parquet datasets, lazily.

A dataset is a directory of Parquet files (any depth). Files written by different histories may carry
different columns (a FactConsolidation file has no ``L``), so the scan uses the union of the files'
schemas and inserts nulls where a file lacks an optional column; every file must carry its dataset's
:data:`REQUIRED` columns (a file that does not is foreign to the run and named in the error). A dataset
directory that is absent or empty is recorded in :attr:`Run.missing` and its frame is ``None``: callers
report it as missing, never as zeros. Files whose bytes differ from the checksum the runner recorded
(:func:`pmem.rundir.verify_commits`) are left out and listed in :attr:`Run.damaged`.

``plan.json``, when the runner wrote one, says how many histories the latest invocation asked for per
(benchmark, subset, arm, agent model): coverage is counted against it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import polars as pl

from pmem.models import HEURISTIC_LABEL, hosted_model_label
from pmem.rundir import (
    HISTORIES,
    PLAN,
    PLAN_FIELDS,
    REQUESTS,
    RESULTS,
    RUN_TOML,
    WRITES,
    Damaged,
    verify_commits,
)
from pmem.rundir import columns as C

#: The datasets the report reads (DESIGN.md run directory contract, defined in :mod:`pmem.rundir`;
#: ``histories`` is the per-(history, arm) status dataset).
DATASETS = (RESULTS.name, WRITES.name, REQUESTS.name, HISTORIES.name)

#: Columns each dataset must carry for the report to use it (fewer than a writer must give: the report
#: also reads runs of older runners, and names what it cannot compute).
REQUIRED: dict[str, tuple[str, ...]] = {
    RESULTS.name: (C.BENCHMARK, C.SUBSET, C.HISTORY_ID, C.ARM, C.QUESTION_ID, C.QUESTION_TYPE, C.CORRECT),
    WRITES.name: (C.HISTORY_ID, C.ARM, C.OP, C.APPLIED),
    REQUESTS.name: (C.HISTORY_ID, C.ARM, C.PURPOSE, C.PROMPT_TOKENS, C.COMPLETION_TOKENS),
    HISTORIES.name: (C.HISTORY_ID, C.ARM, C.STATUS),
}

#: Benchmark parameters that become grouping columns when present.
PARAM_COLUMNS = C.PARAM_COLUMNS

_NUMERIC_RANK = {
    pl.Boolean: 0,
    pl.Int8: 1,
    pl.Int16: 2,
    pl.Int32: 3,
    pl.Int64: 4,
    pl.UInt8: 1,
    pl.UInt16: 2,
    pl.UInt32: 3,
    pl.UInt64: 4,
    pl.Float32: 5,
    pl.Float64: 6,
}


class RunError(ValueError):
    """A run directory the report cannot read."""


def _merge_dtype(a: pl.DataType, b: pl.DataType, column: str, path: Path) -> pl.DataType:
    if a == b or b == pl.Null:
        return a
    if a == pl.Null:
        return b
    ra, rb = _NUMERIC_RANK.get(a.base_type()), _NUMERIC_RANK.get(b.base_type())
    if ra is not None and rb is not None and ra > 0 and rb > 0:
        return a if ra >= rb else b
    if a in (pl.String, pl.Categorical) and b in (pl.String, pl.Categorical):
        return pl.String()
    msg = f"{path}: column {column!r} is {b} here but {a} in other files of the same dataset"
    raise RunError(msg)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (some readers' messages span several)."""
    return " ".join(str(exc).split())


def _scan(
    directory: Path, required: tuple[str, ...], exclude: Collection[Path] = ()
) -> tuple[pl.LazyFrame | None, tuple[Path, ...]]:
    if not directory.is_dir():
        return None, ()
    files = tuple(
        sorted(
            p
            for p in directory.rglob("*.parquet")
            if p.is_file() and not p.name.startswith(".") and p not in exclude
        )
    )
    if not files:
        return None, ()
    schema: dict[str, pl.DataType] = {}
    for f in files:
        try:
            file_schema = pl.read_parquet_schema(f)
        except Exception as exc:
            msg = f"{f}: not a readable Parquet file ({one_line(exc)})"
            raise RunError(msg) from exc
        lacking = [c for c in required if c not in file_schema]
        if lacking:
            # nulls would stand in for its rows' keys: a foreign file must not pass as part of the run
            have = ", ".join(list(file_schema)[:8]) + (", ..." if len(file_schema) > 8 else "")
            msg = (
                f"{f}: not a {directory.name}/ file of this run: lacks column(s) {', '.join(lacking)} "
                f"(has: {have or 'no columns'})"
            )
            raise RunError(msg)
        for name, dtype in file_schema.items():
            schema[name] = _merge_dtype(schema[name], dtype, name, f) if name in schema else dtype
    lf = pl.scan_parquet(
        list(files),
        schema=schema,
        missing_columns="insert",
        extra_columns="ignore",
        hive_partitioning=False,
        cast_options=pl.ScanCastOptions(integer_cast="upcast", float_cast="upcast"),
    )
    return lf, files


@dataclass
class Run:
    """One run directory, opened lazily."""

    path: Path
    doc: dict[str, Any]
    frames: dict[str, pl.LazyFrame | None]
    files: dict[str, tuple[Path, ...]]
    missing: list[str] = field(default_factory=list)
    #: committed files that are missing or fail their recorded checksum (left out of ``frames``)
    damaged: list[Damaged] = field(default_factory=list)
    #: plan.json's cells (benchmark, subset, arm, model, histories, not_run), or None for a run without one
    plan: list[dict[str, Any]] | None = None
    #: True when ``arm`` reads ``arm@model`` (several agent models in one run, see _label_arms_by_agent)
    arms_by_agent: bool = False
    #: intermediate frames shared by several tables (filled by pmem.report._metrics)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> dict[str, Any]:
        cfg = self.doc.get("config")
        return cfg if isinstance(cfg, dict) else self.doc

    def _meta(self, *names: str) -> Any:
        """First of ``names`` found at the top level, under ``[run]`` or under ``[config]``."""
        run = self.doc.get("run")
        if not isinstance(run, dict):
            run = {}
        for where in (self.doc, run, self.config):
            for n in names:
                if where.get(n):
                    return where[n]
        return None

    @property
    def run_id(self) -> str:
        return str(self._meta("run_id") or self.path.name)

    @property
    def config_hash(self) -> str | None:
        v = self._meta("config_hash", "hash")
        return None if v is None else str(v)

    @property
    def commit(self) -> str | None:
        """The commit of the P-Mem checkout that last ran the sweep (run.toml's ``[run] commit``)."""
        v = self._meta("commit")
        return None if v is None else str(v)

    @property
    def written_at(self) -> str | None:
        """When the sweep last wrote run.toml (its last invocation's start)."""
        v = self._meta("written_at")
        return None if v is None else str(v)

    @property
    def versions(self) -> dict[str, str]:
        v = self.doc.get("versions") or self.config.get("versions") or {}
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}

    @property
    def models(self) -> dict[str, dict[str, Any]]:
        """Model specs by role; several agents (a list in the config) become agent, agent#2, ..."""
        m = self.config.get("models") or {}
        out: dict[str, dict[str, Any]] = {}
        for role, spec in m.items():
            if isinstance(spec, dict):
                out[role] = spec
            elif isinstance(spec, list):
                for i, s in enumerate(x for x in spec if isinstance(x, dict)):
                    out[role if i == 0 else f"{role}#{i + 1}"] = s
        return out

    @property
    def heuristic_agent(self) -> bool:
        return any(
            str(s.get("backend")) == "heuristic" for r, s in self.models.items() if r.startswith("agent")
        )

    @property
    def agent_specs(self) -> list[dict[str, Any]]:
        return [s for r, s in self.models.items() if r.startswith("agent")]

    @property
    def agent_label(self) -> str:
        agents = self.agent_specs
        if not agents:
            return "unknown (run.toml has no [models.agent])"
        return "; ".join(model_label(s) for s in agents)

    @property
    def agent_caveats(self) -> list[str]:
        """The report's plain warnings about what the agent model can and cannot measure."""
        return list(dict.fromkeys(c for s in self.agent_specs if (c := model_caveat(s)) is not None))

    def frame(self, name: str) -> pl.LazyFrame | None:
        """Dataset ``name`` (None when the run has none); a name that is not a dataset is a bug, not missing."""
        if name not in self.frames:
            msg = f"no dataset {name!r} in a run (datasets: {', '.join(DATASETS)})"
            raise KeyError(msg)
        return self.frames[name]

    def columns(self, name: str) -> list[str]:
        lf = self.frame(name)
        return [] if lf is None else list(lf.collect_schema().names())

    def params(self) -> list[str]:
        cols = set(self.columns(RESULTS.name))
        return [p for p in PARAM_COLUMNS if p in cols]


# -- model labels -----------------------------------------------------------------------------------------

#: how a backend is named in a label (others by their config name)
BACKEND_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM", "sentence-transformers": "sentence-transformers"}
#: where a backend's model runs when its config does not say (a ``device`` key or GPU layers do)
DEFAULT_DEVICE = {"llamacpp": "CPU", "vllm": "GPU", "hashing": "in-process"}
#: lower-case model families and their own spelling: only names of a known family are re-cased
FAMILIES = {
    "smollm": "SmolLM",
    "qwen": "Qwen",
    "llama": "Llama",
    "gemma": "Gemma",
    "phi": "Phi",
    "mistral": "Mistral",
    "olmo": "OLMo",
}
#: below this many parameters a model measures the pipeline, not the paper's accuracy
SMALL_MODEL_PARAMS = 1e9
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([mb])$", re.I)
_QUANT = re.compile(r"^(q\d\w*|f16|bf16|f32|iq\d\w*)$", re.I)


def _model_name(spec: Mapping[str, Any]) -> str | None:
    """The model's name as people write it: ``smollm2-135m-instruct`` -> ``SmolLM2-135M-Instruct``."""
    raw = spec.get("model") or spec.get("model_id") or spec.get("path")
    if not raw:
        return None
    name = str(raw)
    if spec.get("backend") in ("llamacpp", "vllm"):
        # the model layer names the GGUF files and the vLLM folders it knows (one table of each)
        known = hosted_model_label(str(spec["backend"]), name)
        if known is not None:
            return known
    if spec.get("path") and not spec.get("model"):
        name = Path(name).name.removesuffix(".gguf")
    family = next((f for f in FAMILIES if name.startswith(f)), None)
    if family is None or name != name.lower():
        return name  # an unknown family, or already spelt by its makers (Qwen/Qwen3-4B-Instruct-2507)
    parts = []
    for i, tok in enumerate(name.split("-")):
        if i == 0:
            parts.append(FAMILIES[family] + tok[len(family) :])
        elif _SIZE.match(tok) or _QUANT.match(tok):
            parts.append(tok.upper())
        else:
            parts.append(tok[:1].upper() + tok[1:])
    return "-".join(parts)


def _model_params(name: str) -> float | None:
    """The parameter count a model's name states (``135M``, ``4B``), or None."""
    for tok in re.split(r"[-_/ ]", name):
        m = _SIZE.match(tok)
        if m:
            return float(m.group(1)) * (1e6 if m.group(2).lower() == "m" else 1e9)
    return None


def _device(spec: Mapping[str, Any]) -> str | None:
    """Where the model runs: the config's ``device``, else its GPU layers, else the backend's default."""
    backend = str(spec.get("backend", ""))
    device = spec.get("device")
    if device:
        d = str(device)
        return "GPU" if d.lower().startswith("cuda") else (d.upper() if d.lower() in ("cpu", "gpu") else d)
    for key in ("n_gpu_layers", "gpu_layers", "ngl"):
        if spec.get(key) is not None:
            return "CPU" if str(spec[key]) == "0" else "GPU"  # -1 and "all" offload every layer
    if backend == "openai" and spec.get("url"):
        parts = urlsplit(str(spec["url"]))
        # hostname and port only: a URL may carry credentials
        host = parts.hostname or ""
        return f"server {host}:{parts.port}" if parts.port else f"server {host}" if host else None
    return DEFAULT_DEVICE.get(backend)


def model_label(spec: Mapping[str, Any]) -> str:
    """How the report names a model: its name, backend and where it runs (``SmolLM2-135M-Instruct,
    llama.cpp, CPU``). A heuristic backend is never passed off as an LLM."""
    backend = str(spec.get("backend", "unknown"))
    if backend == "heuristic":
        return HEURISTIC_LABEL
    parts = [_model_name(spec), BACKEND_NAMES.get(backend, backend), _device(spec)]
    return ", ".join(p for p in parts if p)


def model_caveat(spec: Mapping[str, Any]) -> str | None:
    """A plain warning for an agent model whose numbers are not the paper's kind (None: no warning)."""
    label = model_label(spec)
    if str(spec.get("backend")) == "heuristic":
        return (
            f"Agent: {label}. A deterministic template reader/writer answers every question: "
            "these numbers exercise the pipeline and say nothing about an LLM's accuracy."
        )
    name = _model_name(spec)
    params = None if name is None else _model_params(name)
    if params is not None and params < SMALL_MODEL_PARAMS:
        size = f"{params / 1e6:g}M" if params < 1e9 else f"{params / 1e9:g}B"
        return (
            f"Agent: {label}. A {size}-parameter model measures the pipeline under real tokens, "
            "not the paper's accuracy."
        )
    return None


def open_run(path: str | Path) -> Run:
    """Open ``path`` (a run directory). Raises :class:`RunError` naming the file when it cannot be read."""
    root = Path(path)
    if not root.is_dir():
        msg = f"{root}: not a directory (expected a run directory with {RUN_TOML} and {RESULTS.name}/)"
        raise RunError(msg)
    toml_path = root / RUN_TOML
    doc: dict[str, Any] = {}
    missing: list[str] = []
    if toml_path.is_file():
        try:
            doc = tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            msg = f"{toml_path}: invalid TOML ({exc})"
            raise RunError(msg) from exc
    else:
        missing.append(RUN_TOML)
    plan = _read_plan(root / PLAN)
    damaged = verify_commits(root)
    bad = {root / d.path for d in damaged}
    frames: dict[str, pl.LazyFrame | None] = {}
    files: dict[str, tuple[Path, ...]] = {}
    for name in DATASETS:
        lf, fs = _scan(root / name, REQUIRED[name], bad)
        if lf is None:
            missing.append(f"{name}/")
        frames[name] = lf
        files[name] = fs
    plan_models = {c["model"] for c in plan} if plan else set()
    by_agent = _label_arms_by_agent(frames, plan_models)
    return Run(
        path=root,
        doc=doc,
        frames=frames,
        files=files,
        missing=missing,
        damaged=damaged,
        plan=plan,
        arms_by_agent=by_agent,
    )


def _read_plan(path: Path) -> list[dict[str, Any]] | None:
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"{path}: unreadable plan ({one_line(exc)})"
        raise RunError(msg) from exc
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        msg = f'{path}: expected an object with a list "cells"'
        raise RunError(msg)
    for i, c in enumerate(cells):
        ok = isinstance(c, dict) and all(
            isinstance(c.get(k), t) and not isinstance(c.get(k), bool) for k, t in PLAN_FIELDS.items()
        )
        if not ok:
            want = ", ".join(f"{k} ({t.__name__})" for k, t in PLAN_FIELDS.items())
            msg = f"{path}: cell {i} is not an object with {want}"
            raise RunError(msg)
    # optional: why a cell was planned with no histories (an arm that needs a real model)
    return [
        {
            **{k: c[k] for k in PLAN_FIELDS},
            "not_run": c["not_run"] if isinstance(c.get("not_run"), str) else None,
        }
        for c in cells
    ]


#: the column naming the answering model, per dataset (in requests/, ``model`` is the model called)
_AGENT_COLUMN = {
    RESULTS.name: C.MODEL,
    WRITES.name: C.MODEL,
    HISTORIES.name: C.MODEL,
    REQUESTS.name: C.AGENT_MODEL,
}


#: joins an arm and its agent model in ``arm`` labels of a run over several agent models
AGENT_SEP = "@"


def agent_arm(arm: str, model: str) -> str:
    """The ``arm`` label of ``arm`` answered by agent ``model`` in a run over several agent models."""
    return f"{arm}{AGENT_SEP}{model}"


def _label_arms_by_agent(frames: dict[str, pl.LazyFrame | None], plan_models: set[str]) -> bool:
    """A sweep over several agent models: ``arm`` becomes ``arm@model`` everywhere, so every table keeps
    the agents apart without a model column in each group key. The plan counts too: an agent whose every
    history failed still gets its own (missing) cells. Returns whether arms were relabelled."""
    res = frames.get(RESULTS.name)
    if res is None or C.MODEL not in res.collect_schema().names():
        return False
    if len(plan_models) <= 1 and res.select(pl.col(C.MODEL).n_unique()).collect().item() <= 1:
        return False
    for name, col in _AGENT_COLUMN.items():
        lf = frames.get(name)
        if lf is not None and col in lf.collect_schema().names():
            label = pl.concat_str([pl.col(C.ARM), pl.lit(AGENT_SEP), pl.col(col).fill_null("?")])
            frames[name] = lf.with_columns(label.alias(C.ARM))
    return True
