"""Reading a run directory: ``run.toml`` and the Parquet datasets, lazily.

A dataset is a directory of Parquet files (any depth). Files written by different histories may carry
different columns (a FactConsolidation file has no ``L``), so the scan uses the union of the files'
schemas and inserts nulls where a file lacks a column. A dataset directory that is absent or empty is
recorded in :attr:`Run.missing` and its frame is ``None``: callers report it as missing, never as zeros.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

#: The datasets the report reads (DESIGN.md run directory contract; ``histories`` is the per-(history, arm)
#: status dataset the report asks the runner for).
DATASETS = ("results", "writes", "requests", "histories")

#: Columns each dataset must carry for the report to use it.
REQUIRED: dict[str, tuple[str, ...]] = {
    "results": ("benchmark", "subset", "history_id", "arm", "question_id", "question_type", "correct"),
    "writes": ("history_id", "arm", "op", "applied"),
    "requests": ("history_id", "arm", "purpose", "prompt_tokens", "completion_tokens"),
    "histories": ("history_id", "arm", "status"),
}

#: Benchmark parameters that become grouping columns when present.
PARAM_COLUMNS = ("L", "d", "length")

_NUMERIC_RANK = {pl.Boolean: 0, pl.Int8: 1, pl.Int16: 2, pl.Int32: 3, pl.Int64: 4, pl.UInt8: 1, pl.UInt16: 2,
                 pl.UInt32: 3, pl.UInt64: 4, pl.Float32: 5, pl.Float64: 6}


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
        return pl.String
    msg = f"{path}: column {column!r} is {b} here but {a} in other files of the same dataset"
    raise RunError(msg)


def _scan(directory: Path) -> tuple[pl.LazyFrame | None, tuple[Path, ...]]:
    if not directory.is_dir():
        return None, ()
    files = tuple(sorted(p for p in directory.rglob("*.parquet") if p.is_file() and not p.name.startswith(".")))
    if not files:
        return None, ()
    schema: dict[str, pl.DataType] = {}
    for f in files:
        try:
            file_schema = pl.read_parquet_schema(f)
        except Exception as exc:
            msg = f"{f}: not a readable Parquet file ({exc})"
            raise RunError(msg) from exc
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
    #: intermediate frames shared by several tables (filled by pmem.report._metrics)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> dict[str, Any]:
        cfg = self.doc.get("config")
        return cfg if isinstance(cfg, dict) else self.doc

    def _meta(self, *names: str) -> Any:
        """First of ``names`` found at the top level, under ``[run]`` or under ``[config]``."""
        run = self.doc.get("run") if isinstance(self.doc.get("run"), dict) else {}
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
        return any(str(s.get("backend")) == "heuristic" for r, s in self.models.items() if r.startswith("agent"))

    @staticmethod
    def model_label(spec: dict[str, Any]) -> str:
        """A heuristic backend is never passed off as an LLM."""
        backend = str(spec.get("backend", "unknown"))
        if backend == "heuristic":
            return "heuristic (no LLM)"
        model = spec.get("model") or spec.get("model_id") or spec.get("path") or "?"
        return f"{model} ({backend})"

    @property
    def agent_label(self) -> str:
        agents = [s for r, s in self.models.items() if r.startswith("agent")]
        if not agents:
            return "unknown (run.toml has no [models.agent])"
        return "; ".join(self.model_label(s) for s in agents)

    def frame(self, name: str) -> pl.LazyFrame | None:
        return self.frames.get(name)

    def columns(self, name: str) -> list[str]:
        lf = self.frames.get(name)
        return [] if lf is None else list(lf.collect_schema().names())

    def params(self) -> list[str]:
        cols = set(self.columns("results"))
        return [p for p in PARAM_COLUMNS if p in cols]


def open_run(path: str | Path) -> Run:
    """Open ``path`` (a run directory). Raises :class:`RunError` naming the file when it cannot be read."""
    root = Path(path)
    if not root.is_dir():
        msg = f"{root}: not a directory (expected a run directory with run.toml and results/)"
        raise RunError(msg)
    toml_path = root / "run.toml"
    doc: dict[str, Any] = {}
    missing: list[str] = []
    if toml_path.is_file():
        try:
            doc = tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            msg = f"{toml_path}: invalid TOML ({exc})"
            raise RunError(msg) from exc
    else:
        missing.append("run.toml")
    frames: dict[str, pl.LazyFrame | None] = {}
    files: dict[str, tuple[Path, ...]] = {}
    for name in DATASETS:
        lf, fs = _scan(root / name)
        if lf is not None:
            have = set(lf.collect_schema().names())
            lacking = [c for c in REQUIRED[name] if c not in have]
            if lacking:
                msg = f"{root / name}: dataset lacks column(s) {', '.join(lacking)}"
                raise RunError(msg)
        else:
            missing.append(f"{name}/")
        frames[name] = lf
        files[name] = fs
    _label_arms_by_agent(frames)
    return Run(path=root, doc=doc, frames=frames, files=files, missing=missing)


#: the column naming the answering model, per dataset (in requests/, ``model`` is the model called)
_AGENT_COLUMN = {"results": "model", "writes": "model", "histories": "model", "requests": "agent_model"}


def _label_arms_by_agent(frames: dict[str, pl.LazyFrame | None]) -> None:
    """A sweep over several agent models: ``arm`` becomes ``arm@model`` everywhere, so every table keeps
    the agents apart without a model column in each group key."""
    res = frames.get("results")
    if res is None or "model" not in res.collect_schema().names():
        return
    if res.select(pl.col("model").n_unique()).collect().item() <= 1:
        return
    for name, col in _AGENT_COLUMN.items():
        lf = frames.get(name)
        if lf is not None and col in lf.collect_schema().names():
            frames[name] = lf.with_columns(pl.concat_str([pl.col("arm"), pl.lit("@"), pl.col(col).fill_null("?")]).alias("arm"))
