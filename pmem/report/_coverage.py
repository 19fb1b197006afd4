"""Run coverage: every (benchmark, subset, arm) the plan or config asks for against what the run holds,
with missing, partial, failed and not-run cells named (never shown as zero)."""

from __future__ import annotations

from typing import Any

import polars as pl

from pmem.report._accounting import history_status
from pmem.report._base import Metrics, expected_cells
from pmem.report._load import AGENT_SEP, PLAN, Run, agent_arm
from pmem.report._table import Table
from pmem.rundir import columns as C
from pmem.rundir import failure_reason


def _planned(run: Run) -> pl.DataFrame | None:
    """Histories planned per (benchmark, subset, arm label), from plan.json; None for a run without one."""
    if run.plan is None:
        return None
    rows = [
        {
            C.BENCHMARK: c["benchmark"],
            C.SUBSET: c["subset"],
            C.ARM: agent_arm(c["arm"], c["model"]) if run.arms_by_agent else c["arm"],
            "planned": c["histories"],
            "not_run": c.get("not_run"),  # why an arm was planned as not run (it needs a real model)
        }
        for c in run.plan
    ]
    schema = {
        C.BENCHMARK: pl.String,
        C.SUBSET: pl.String,
        C.ARM: pl.String,
        "planned": pl.Int64,
        "not_run": pl.String,
    }
    # arms not labelled by agent: results/ cannot tell agents apart (one model, or no model column), and a
    # history id counts once however many agents answered it, so a cell needs the largest agent's share
    return (
        pl.DataFrame(rows, schema=schema)
        .group_by(C.BENCHMARK, C.SUBSET, C.ARM)
        .agg(pl.col("planned").max(), pl.col("not_run").drop_nulls().first())
    )


def _cell_status(r: dict[str, Any], planned: bool) -> str:
    """A coverage cell's status; with a plan, complete histories (distinct ones in results/) are counted
    against the planned number, so a cell short of even one history is partial, never ok."""
    done = r.get("result_histories") or 0
    rows = r.get("result_rows") or 0
    failed = r.get("failed") or 0
    why = f" ({failed} failed)" if failed else ""
    if r.get("not_run"):
        return f"not run: {r['not_run']}"
    if planned and r.get("planned") is not None:
        want = r["planned"]
        if done == 0:
            return f"failed: 0 of {want} histories{why}" if failed else f"missing: 0 of {want} histories"
        if done < want:
            return f"partial: {done} of {want} histories{why}"
        return "ok"
    if rows == 0 and failed:
        return f"failed: all {failed} histories failed"
    if rows == 0:
        return "missing: no rows"
    if failed:
        return f"partial: {failed} of {failed + (r.get('complete') or 0)} histories failed"
    return "ok"


#: the kinds of cell status, in the order the coverage line names them
STATUS_KINDS = ("not run", "failed", "missing", "partial")


def status_kind(status: str) -> str:
    """``ok``, or the kind of a cell that is not: ``not run``, ``failed``, ``missing``, ``partial``."""
    return next((k for k in STATUS_KINDS if status.startswith(k)), "ok")


def coverage_line(df: pl.DataFrame) -> str:
    """One line: how many cells hold all their histories and, per kind, the arms whose cells do not."""
    if df.height == 0:
        return "Coverage: the run asks for no cell and holds none."
    kinds = [status_kind(s) for s in df["status"].to_list()]
    arms = df[C.ARM].to_list()
    ok = kinds.count("ok")
    parts = []
    for kind in STATUS_KINDS:
        cells: dict[str, int] = {}
        for k, a in zip(kinds, arms, strict=True):
            if k == kind:
                cells[a] = cells.get(a, 0) + 1
        if cells:
            parts.append(
                f"{kind}: " + ", ".join(f"{a} ({n} cell{'s' if n > 1 else ''})" for a, n in cells.items())
            )
    line = f"Coverage: {ok} of {df.height} (benchmark, subset, arm) cells hold all their histories"
    return line + ("; " + "; ".join(parts) if parts else "") + "."


def coverage_table(m: Metrics) -> Table:
    run = m.run
    keys = [C.BENCHMARK, C.SUBSET, C.ARM]
    notes = [
        "What the run holds against what its config asked for. A cell with no result rows is reported "
        "as missing, never as zero; failed histories are counted from histories/, and first_error is "
        "the first failure's reason in one line (its whole error is in histories/)."
    ]
    observed = (
        m.hist.group_by(keys).agg(
            result_rows=pl.col("n").sum(), result_histories=pl.col(C.HISTORY_ID).n_unique()
        )
        if m.hist.height
        else pl.DataFrame(
            schema={**{k: pl.String for k in keys}, "result_rows": pl.UInt32, "result_histories": pl.UInt32}
        )
    )
    hst = history_status(run)
    if hst is not None:
        st = (
            hst.group_by(keys)
            .agg(
                complete=(pl.col(C.STATUS) == "complete").sum(),
                failed=(pl.col(C.STATUS) == "failed").sum(),
                other=(~pl.col(C.STATUS).is_in(["complete", "failed"])).sum(),
                first_error=pl.col(C.ERROR).drop_nulls().first(),
            )
            .collect()
            .with_columns(
                first_error=pl.col("first_error").map_elements(failure_reason, return_dtype=pl.String)
            )
        )
    else:
        st = None
        notes.append("histories/ is missing (or lacks benchmark/subset): failed histories cannot be counted.")
    plan = _planned(run)
    if plan is not None:
        notes.append(
            f"Counted against {PLAN}: the histories the latest invocation planned per cell; a cell "
            "whose results hold fewer distinct complete histories is partial."
        )
        exp = plan.select(keys).with_columns(in_config=pl.lit(True))
    else:
        expected: list[dict[str, str]] = []
        for bench, subset, arm in expected_cells(run):
            subsets = (
                [subset]
                if subset is not None
                else (observed.filter(pl.col(C.BENCHMARK) == bench)[C.SUBSET].unique().to_list() or ["(any)"])
            )
            expected += [{C.BENCHMARK: bench, C.SUBSET: s, C.ARM: arm} for s in subsets]
        if run.arms_by_agent and observed.height:
            # several agents: each configured arm is expected once per agent model seen in the results
            models = sorted({a.split(AGENT_SEP, 1)[1] for a in observed[C.ARM].to_list() if AGENT_SEP in a})
            expected = [{**e, C.ARM: agent_arm(e[C.ARM], mo)} for e in expected for mo in models]
        exp = pl.DataFrame(expected, schema={k: pl.String for k in keys}).with_columns(in_config=pl.lit(True))
    allk = pl.concat(
        [exp.select(keys), observed.select(keys), *([st.select(keys)] if st is not None else [])]
    ).unique()
    df = allk.join(exp, on=keys, how="left").join(observed, on=keys, how="left")
    if st is not None:
        df = df.join(st, on=keys, how="left")
    if plan is not None:
        df = df.join(plan, on=keys, how="left")
    df = df.with_columns(pl.col("in_config").fill_null(False)).sort(keys)
    status = []
    for r in df.iter_rows(named=True):
        s = _cell_status(r, plan is not None)
        if not r["in_config"] and exp.height:
            s += " (not in plan)" if plan is not None else " (not in config)"
        status.append(s)
    df = df.with_columns(status=pl.Series(status, dtype=pl.String))
    data = df
    cols = [*keys, "status", *(["planned"] if plan is not None else []), "result_rows", "result_histories"]
    if st is not None:
        cols += ["complete", "failed", "first_error"]
    n_missing = sum(1 for s in status if s.startswith(("missing", "failed")))
    n_not_run = sum(1 for s in status if s.startswith("not run"))
    if n_not_run:
        notes.append(
            f"{n_not_run} cell(s) not run: an arm that sends its own prompts (a peer library) needs a real "
            "model, and this run's agent is the heuristic one; they are not zeros."
        )
    n_partial = sum(1 for s in status if s.startswith("partial"))
    notes.insert(0, coverage_line(df))
    notes.append(f"{n_missing} cell(s) with no rows, {n_partial} partial cell(s).")
    if run.missing:
        notes.append("Missing from the run directory: " + ", ".join(run.missing) + ".")
    if run.damaged:
        notes.append(
            f"{len(run.damaged)} damaged or missing committed file(s) left out (see Integrity warnings)."
        )
    # problems first: a reader should not have to scan a long list of "ok" rows to find them
    shown = data.with_columns(_ok=pl.col("status") == "ok").sort("_ok", *keys).select(cols)
    return Table(
        "coverage",
        "Coverage: missing and partial cells",
        data,
        shown,
        notes,
        keys=tuple(keys),
        values=("result_rows",),
        section="coverage",
        folded=True,
    )
