"""Reading a run directory: ``run.toml`` and the Parquet datasets, lazily.

A dataset is a directory of Parquet files (any depth). Files written by different histories may carry
different columns (a FactConsolidation file has no ``L``), so the scan uses the union of the files'
schemas and inserts nulls where a file lacks an optional column; every file must carry its dataset's
:data:`REQUIRED` columns (a file that does not is foreign to the run and named in the error). A dataset
directory that is absent or empty is recorded in :attr:`Run.missing` and its frame is ``None``: callers
report it as missing, never as zeros. Files whose bytes differ from the checksum the runner recorded
(see :mod:`pmem.report._integrity`) are left out and listed in :attr:`Run.damaged`.

``plan.json``, when the runner wrote one, says how many histories the latest invocation asked for per
(benchmark, subset, arm, agent model): coverage is counted against it.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pmem.report._integrity import Damaged, verify_commits
from pmem.rundir import HISTORIES, REQUESTS, RESULTS, WRITES
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
    #: plan.json's cells (benchmark, subset, arm, model, histories), or None for a run without one
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
        """Dataset ``name`` (None when the run has none); a name that is not a dataset is a bug, not missing."""
        if name not in self.frames:
            msg = f"no dataset {name!r} in a run (datasets: {', '.join(DATASETS)})"
            raise KeyError(msg)
        return self.frames[name]

    def columns(self, name: str) -> list[str]:
        lf = self.frame(name)
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


#: the runner's record of what the latest invocation planned (see the module docstring)
PLAN = "plan.json"
_PLAN_FIELDS = {"benchmark": str, "subset": str, "arm": str, "model": str, "histories": int}


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
            isinstance(c.get(k), t) and not isinstance(c.get(k), bool) for k, t in _PLAN_FIELDS.items()
        )
        if not ok:
            want = ", ".join(f"{k} ({t.__name__})" for k, t in _PLAN_FIELDS.items())
            msg = f"{path}: cell {i} is not an object with {want}"
            raise RunError(msg)
    return [{k: c[k] for k in _PLAN_FIELDS} for c in cells]


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
