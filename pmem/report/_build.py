"""Assemble ``RUN_DIR/report/``: tables as CSV, figures, report.md and report.html; and ``--compare``."""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pmem.report._load import Run, open_run
from pmem.report._metrics import Metrics, compute
from pmem.report._plots import plot_all
from pmem.report._published import setup_differences
from pmem.report._render import render
from pmem.report._table import Table


@dataclass(frozen=True)
class ReportPaths:
    out: Path
    markdown: Path
    html: Path
    tables: tuple[Path, ...]
    figures: tuple[Path, ...]


def _meta(run: Run) -> list[tuple[str, str]]:
    meta = [("run", run.run_id), ("directory", str(run.path)), ("config hash", run.config_hash or "not recorded")]
    for role, spec in sorted(run.models.items()):
        label = run.agent_label if role == "agent" else (
            f"{spec.get('model') or spec.get('backend', '?')} ({spec.get('backend', '?')})")
        if role != "agent" and spec.get("backend") == "heuristic":
            label = "heuristic (no LLM)"
        meta.append((f"model: {role}", label))
    if run.versions:
        meta.append(("versions", ", ".join(f"{k} {v}" for k, v in sorted(run.versions.items()))))
    if run.missing:
        meta.append(("missing", ", ".join(run.missing)))
    return meta


def _preface(m: Metrics) -> list[str]:
    notes = []
    if m.run.models.get("agent", {}).get("backend") == "heuristic":
        notes.append("Agent: heuristic (no LLM). A deterministic template reader/writer answers every question: "
                     "these numbers exercise the pipeline and say nothing about an LLM's accuracy.")
    cov = m.tables["coverage"]
    notes += [n for n in cov.notes[1:]]
    notes += setup_differences(m)
    return notes


def _write_tables(tables: list[Table], out: Path) -> list[Path]:
    d = out / "tables"
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in tables:
        p = d / f"{t.name}.csv"
        df = t.data
        # nested values do not fit CSV; infinities are written as "inf"
        df = df.select([pl.col(c).cast(pl.List(pl.String)).list.join("; ") if df.schema[c].is_nested() else pl.col(c)
                        for c in df.columns])
        df.write_csv(p)
        paths.append(p)
    return paths


def build_report(run_dir: str | Path, out: str | Path | None = None, *, reference: str = "pmem") -> ReportPaths:
    """Compute every table of ``run_dir`` and write the report (default ``run_dir/report``)."""
    run = open_run(run_dir)
    m = compute(run, reference=reference)
    out = Path(out) if out is not None else run.path / "report"
    if (out / "figures").is_dir():
        shutil.rmtree(out / "figures")
    tables = list(m.tables.values())
    csvs = _write_tables(tables, out)
    figs = plot_all(m, out / "figures")
    md, html_ = render(f"P-Mem report: {run.run_id}", _meta(run), _preface(m), tables, figs, out)
    return ReportPaths(out, md, html_, tuple(csvs), tuple(figs.values()))


# -- compare ---------------------------------------------------------------------------------------------

def compare_tables(a: Metrics, b: Metrics) -> list[Table]:
    """Every table with keys and values, joined across runs: value_a, value_b and diff = b − a."""
    out = []
    for name, ta in a.tables.items():
        tb = b.tables.get(name)
        if tb is None or not ta.keys or not ta.values:
            continue
        da, db = ta.data, tb.data
        keys = [k for k in ta.keys if k in da.columns and k in db.columns]
        vals = [v for v in ta.values if v in da.columns and v in db.columns
                and da.schema[v].is_numeric() and db.schema[v].is_numeric()]
        if not keys or not vals:
            if da.height or db.height:
                out.append(Table(f"compare_{name}", f"{ta.title} (compare)", pl.DataFrame(), None,
                                 [f"Only one run has this table (rows: A {da.height}, B {db.height})."],
                                 section=ta.section))
            continue
        for k in keys:
            if da.schema[k] != db.schema[k]:
                da = da.with_columns(pl.col(k).cast(pl.String))
                db = db.with_columns(pl.col(k).cast(pl.String))
        extra = [c for c in ("n",) if c in da.columns and c in db.columns and c not in keys]
        left = da.select(*keys, *[pl.col(v).cast(pl.Float64).alias(f"{v}_a") for v in vals],
                         *[pl.col(c).alias(f"{c}_a") for c in extra])
        right = db.select(*keys, *[pl.col(v).cast(pl.Float64).alias(f"{v}_b") for v in vals],
                          *[pl.col(c).alias(f"{c}_b") for c in extra])
        j = left.join(right, on=keys, how="full", coalesce=True, nulls_equal=True).with_columns(
            [(pl.col(f"{v}_b") - pl.col(f"{v}_a")).alias(f"{v}_diff") for v in vals]).sort(keys, nulls_last=True)
        only_a = j.filter(pl.all_horizontal([pl.col(f"{v}_b").is_null() for v in vals])).height
        only_b = j.filter(pl.all_horizontal([pl.col(f"{v}_a").is_null() for v in vals])).height
        notes = [f"A = {a.run.run_id} (agent {a.run.agent_label}); B = {b.run.run_id} (agent {b.run.agent_label}); "
                 "diff = B − A. An empty side means that run has no rows for the row (missing, not zero).",
                 f"Rows only in A: {only_a}; only in B: {only_b}."]

        def fmt(x: object) -> str:
            if x is None or (isinstance(x, float) and math.isnan(x)):
                return "missing"
            return f"{x:.4g}" if isinstance(x, float) else str(x)

        display = j.select(*keys, *[pl.col(c).map_elements(fmt, return_dtype=pl.String)
                                    for c in j.columns if c not in keys])
        out.append(Table(f"compare_{name}", f"{ta.title}: A vs B", j, display, notes, section=ta.section))
    return out


def build_compare(run_a: str | Path, run_b: str | Path, out: str | Path | None = None, *,
                  reference: str = "pmem") -> ReportPaths:
    a = compute(open_run(run_a), reference=reference)
    b = compute(open_run(run_b), reference=reference)
    out = Path(out) if out is not None else a.run.path / "report" / f"compare-{b.run.run_id}"
    tables = compare_tables(a, b)
    csvs = _write_tables(tables, out)
    meta = [("run A", f"{a.run.run_id} ({a.run.path}); agent {a.run.agent_label}"),
            ("run B", f"{b.run.run_id} ({b.run.path}); agent {b.run.agent_label}"),
            ("config hash", f"A {a.run.config_hash or '?'}; B {b.run.config_hash or '?'}")]
    preface = ["Each table joins the two runs on its row keys: <value>_a, <value>_b and <value>_diff = B − A."]
    for r in (a.run, b.run):
        if r.models.get("agent", {}).get("backend") == "heuristic":
            preface.append(f"{r.run_id}: agent heuristic (no LLM).")
    md, html_ = render(f"P-Mem report comparison: {a.run.run_id} vs {b.run.run_id}", meta, preface, tables, {}, out)
    return ReportPaths(out, md, html_, tuple(csvs), ())
