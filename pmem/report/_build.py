"""Assemble ``RUN_DIR/report/``: tables as CSV, figures, report.md and report.html; and ``--compare``."""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pmem._source import source_commit
from pmem.report._atomic import ReportWriter
from pmem.report._base import Metrics
from pmem.report._load import AGENT_SEP, Run, RunError, model_label, open_run
from pmem.report._metrics import compute
from pmem.report._plots import plot_all
from pmem.report._published import setup_differences
from pmem.report._render import HTML, MARKDOWN, figure_file, render, table_file
from pmem.report._table import Table
from pmem.rundir import HISTORIES, REPORT, RESULTS
from pmem.rundir import columns as C

#: the arm paired comparisons are made against when none is asked for
DEFAULT_REFERENCE = "pmem"


@dataclass(frozen=True)
class ReportPaths:
    out: Path
    markdown: Path
    html: Path
    tables: tuple[Path, ...]
    figures: tuple[Path, ...]
    #: damaged or missing run files (also listed at the top of the report)
    warnings: tuple[str, ...] = ()


def _header(run: Run) -> list[tuple[str, str]]:
    meta = [
        ("run", run.run_id),
        ("directory", str(run.path)),
        ("config hash", run.config_hash or "not recorded"),
        (
            "sweep",
            f"last run {run.written_at or '(time not recorded)'} by commit {run.commit or 'not recorded'}",
        ),
        (
            "report",
            f"written {_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')} by commit {source_commit() or 'not recorded (not a git checkout)'}",
        ),
    ]
    for role, spec in sorted(run.models.items()):
        meta.append((f"model: {role}", model_label(spec)))
    if run.versions:
        meta.append(("versions", ", ".join(f"{k} {v}" for k, v in sorted(run.versions.items()))))
    if run.missing:
        meta.append(("missing", ", ".join(run.missing)))
    return meta


def _preface(m: Metrics) -> list[str]:
    """The notes that open the report: what the agent can measure and how the setup differs from the
    paper's. Each is said here only: the coverage notes stay with the coverage table."""
    return list(dict.fromkeys([*m.run.agent_caveats, *setup_differences(m)]))


def _write_tables(tables: list[Table], w: ReportWriter) -> list[Path]:
    paths = []
    for t in tables:
        df = t.data
        # nested values do not fit CSV; infinities are written as "inf"
        df = df.select(
            [
                pl.col(c).cast(pl.List(pl.String)).list.join("; ") if df.schema[c].is_nested() else pl.col(c)
                for c in df.columns
            ]
        )
        paths.append(w.write_text(table_file(t.name), df.write_csv()))
    return paths


def _check_reportable(run: Run, reference: str | None) -> str:
    """The reference arm to pair against; RunError when there is nothing to report or no such arm."""
    res = run.frame(RESULTS.name)
    if res is None or res.select(pl.len()).collect().item() == 0:
        why = ["results/ is missing or holds no rows"]
        hs = run.frame(HISTORIES.name)
        if hs is not None:
            failed = hs.filter(pl.col(C.STATUS) == "failed").select(pl.len()).collect().item()
            why.append(f"histories/ records {failed} failed history run(s)")
        if run.damaged:
            why.append(f"{len(run.damaged)} damaged file(s) left out: {run.damaged[0]}")
        msg = f"{run.path}: no results to report ({'; '.join(why)})"
        raise RunError(msg)
    if reference is None:
        return DEFAULT_REFERENCE
    arms = res.select(pl.col(C.ARM).unique()).collect()[C.ARM].drop_nulls().to_list()
    base = sorted({a.split(AGENT_SEP, 1)[0] if run.arms_by_agent else a for a in arms})
    if reference not in base:
        msg = f"--reference {reference}: no such arm in {run.path / RESULTS.name} (arms: {', '.join(base)})"
        raise RunError(msg)
    return reference


def build_report(
    run_dir: str | Path, out: str | Path | None = None, *, reference: str | None = None
) -> ReportPaths:
    """Compute every table of ``run_dir`` and write the report (default ``run_dir/report``).

    ``reference``: the arm paired comparisons are made against (``pmem`` when None; a named arm must be in
    the results). The files appear together or not at all: a failure while writing leaves the previous
    report as it was.
    """
    run = open_run(run_dir)
    reference = _check_reportable(run, reference)
    m = compute(run, reference=reference)
    out = Path(out) if out is not None else run.path / REPORT
    tables = list(m.tables.values())
    figs = plot_all(m)
    warnings = tuple(str(d) for d in run.damaged)
    md, html_ = render(f"P-Mem report: {run.run_id}", _header(run), _preface(m), tables, figs, warnings)
    # figures a previous report had and this one does not are removed with the commit
    with ReportWriter(out, prune=("figures",)) as w:
        csvs = _write_tables(tables, w)
        fig_paths = [w.write(figure_file(name), data) for name, data in figs.items()]
        md_path, html_path = w.write_text(MARKDOWN, md), w.write_text(HTML, html_)
    return ReportPaths(out, md_path, html_path, tuple(csvs), tuple(fig_paths), warnings)


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
        vals = [
            v
            for v in ta.values
            if v in da.columns and v in db.columns and da.schema[v].is_numeric() and db.schema[v].is_numeric()
        ]
        if not keys or not vals:
            if da.height or db.height:
                out.append(
                    Table(
                        f"compare_{name}",
                        f"{ta.title} (compare)",
                        pl.DataFrame(),
                        None,
                        [f"Only one run has this table (rows: A {da.height}, B {db.height})."],
                        section=ta.section,
                    )
                )
            continue
        for k in keys:
            if da.schema[k] != db.schema[k]:
                da = da.with_columns(pl.col(k).cast(pl.String))
                db = db.with_columns(pl.col(k).cast(pl.String))
        extra = [c for c in ("n",) if c in da.columns and c in db.columns and c not in keys]
        left = da.select(
            *keys,
            *[pl.col(v).cast(pl.Float64).alias(f"{v}_a") for v in vals],
            *[pl.col(c).alias(f"{c}_a") for c in extra],
        )
        right = db.select(
            *keys,
            *[pl.col(v).cast(pl.Float64).alias(f"{v}_b") for v in vals],
            *[pl.col(c).alias(f"{c}_b") for c in extra],
        )
        j = (
            left.join(right, on=keys, how="full", coalesce=True, nulls_equal=True)
            .with_columns([(pl.col(f"{v}_b") - pl.col(f"{v}_a")).alias(f"{v}_diff") for v in vals])
            .sort(keys, nulls_last=True)
        )
        only_a = j.filter(pl.all_horizontal([pl.col(f"{v}_b").is_null() for v in vals])).height
        only_b = j.filter(pl.all_horizontal([pl.col(f"{v}_a").is_null() for v in vals])).height
        notes = [
            f"A = {a.run.run_id} (agent {a.run.agent_label}); B = {b.run.run_id} (agent {b.run.agent_label}); "
            "diff = B − A. An empty side means that run has no rows for the row (missing, not zero).",
            f"Rows only in A: {only_a}; only in B: {only_b}.",
        ]

        def fmt(x: object) -> str:
            if x is None or (isinstance(x, float) and math.isnan(x)):
                return "missing"
            return f"{x:.4g}" if isinstance(x, float) else str(x)

        display = j.select(
            *keys, *[pl.col(c).map_elements(fmt, return_dtype=pl.String) for c in j.columns if c not in keys]
        )
        out.append(Table(f"compare_{name}", f"{ta.title}: A vs B", j, display, notes, section=ta.section))
    return out


def build_compare(
    run_a: str | Path, run_b: str | Path, out: str | Path | None = None, *, reference: str | None = None
) -> ReportPaths:
    ra, rb = open_run(run_a), open_run(run_b)
    ref_a, ref_b = _check_reportable(ra, reference), _check_reportable(rb, reference)
    a, b = compute(ra, reference=ref_a), compute(rb, reference=ref_b)
    out = Path(out) if out is not None else a.run.path / REPORT / f"compare-{b.run.run_id}"
    tables = compare_tables(a, b)
    meta = [
        ("run A", f"{a.run.run_id} ({a.run.path}); agent {a.run.agent_label}"),
        ("run B", f"{b.run.run_id} ({b.run.path}); agent {b.run.agent_label}"),
        ("config hash", f"A {a.run.config_hash or '?'}; B {b.run.config_hash or '?'}"),
    ]
    preface = [
        "Each table joins the two runs on its row keys: <value>_a, <value>_b and <value>_diff = B − A."
    ]
    preface += [f"{r.run_id}: {c}" for r in (a.run, b.run) for c in r.agent_caveats]
    warnings = tuple(f"run {r.run_id}: {d}" for r in (a.run, b.run) for d in r.damaged)
    md, html_ = render(
        f"P-Mem report comparison: {a.run.run_id} vs {b.run.run_id}", meta, preface, tables, {}, warnings
    )
    with ReportWriter(out) as w:
        csvs = _write_tables(tables, w)
        md_path, html_path = w.write_text(MARKDOWN, md), w.write_text(HTML, html_)
    return ReportPaths(out, md_path, html_path, tuple(csvs), (), warnings)
