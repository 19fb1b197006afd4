"""The table printed at the end of a sweep (from the run's files, so it is the same on a resume)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pmem.memory.prompts import template
from pmem.rundir import HISTORIES, REQUESTS, RESULTS, WRITES, failure_reason
from pmem.rundir import columns as C
from pmem.runner._progress import terminal_width, wrap_lines

if TYPE_CHECKING:
    from pmem.runner._driver import SweepResult


#: What the summary of a run with the heuristic agent says first: its calls and scores are not an LLM's.
HEURISTIC_NOTICE = (
    "agent: heuristic (no LLM): rules over the prompt text that read only the benchmarks' sentence "
    "templates; its 'model calls' are rule evaluations in this process and its accuracy checks the "
    "pipeline, not a model (a real agent: [models.agent], docs/models.md)"
)


def summary_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Accuracy per (benchmark, subset, params, arm, question type) from results/, with failures."""
    import polars as pl

    res = sorted((run_dir / RESULTS.name).glob("*.parquet"))
    hist = sorted((run_dir / HISTORIES.name).glob("*.parquet"))
    # Polars rows: each column's values keep its dtype (str keys, int counts, float or None rates)
    rows: list[dict[str, Any]] = []
    if res:
        df = (
            pl.scan_parquet(res)
            .group_by([C.BENCHMARK, C.SUBSET, C.L, C.D, C.ARM, C.QUESTION_TYPE])
            .agg(
                pl.len().alias("n"),
                pl.col(C.CORRECT).cast(pl.Float64).mean().alias("acc"),
                pl.col(C.STALE).cast(pl.Float64).mean().alias(C.STALE),
                pl.col(C.READ_CHARS).mean().alias(C.READ_CHARS),
            )
            .sort([C.BENCHMARK, C.SUBSET, C.L, C.D, C.QUESTION_TYPE, C.ARM], nulls_last=True)
            .collect()
        )
        rows = df.to_dicts()
    if hist:
        f = (
            pl.scan_parquet(hist)
            .filter(pl.col(C.STATUS) == "failed")
            .group_by([C.BENCHMARK, C.SUBSET, C.ARM])
            .agg(pl.len().alias("failed"))
            .collect()
        )
        for r in f.to_dicts():
            rows.append({**r, C.QUESTION_TYPE: "(failed histories)", "n": r["failed"]})
    return rows


def arms_without_facts(run_dir: Path) -> dict[str, int]:
    """Arms whose model extraction ran yet wrote nothing: arm -> extraction calls (requests/ rows with
    the extraction prompt's purpose), for arms with no writes/ row at all. Arms that do not extract
    (long context, retrieval over raw text, template write paths) never appear."""
    import polars as pl

    requests = sorted((run_dir / REQUESTS.name).glob("*.parquet"))
    if not requests:
        return {}
    extract = template("extract").purpose
    calls = (
        pl.scan_parquet(requests)
        .filter(pl.col(C.PURPOSE) == extract)
        .group_by(C.ARM)
        .agg(pl.len().alias("calls"))
        .collect()
    )
    writes = sorted((run_dir / WRITES.name).glob("*.parquet"))
    wrote = (
        set(pl.scan_parquet(writes).select(C.ARM).unique().collect()[C.ARM].to_list()) if writes else set()
    )
    return {r[C.ARM]: r["calls"] for r in calls.sort(C.ARM).to_dicts() if r[C.ARM] not in wrote}


def print_summary(res: SweepResult, stream: TextIO | None = None) -> None:
    """The counts, the table of accuracy per cell (every benchmark, subset, parameter, arm and question
    type: over a hundred rows for the quickstart) and up to ten failures (``pmem sweep --summary``)."""
    out = stream or sys.stdout
    print(
        f"run {res.run_id}: {res.total} histories x arms; {res.skipped} skipped (already complete), "
        f"{res.completed} complete, {res.failed} failed, {res.redone} redone after runner loss, "
        f"{res.judged} judged; {res.calls} model calls, {res.tokens} tokens; {res.wall_s:.1f}s",
        file=out,
    )
    if "heuristic" in res.agents:
        for line in wrap_lines([HEURISTIC_NOTICE], terminal_width(out)):
            print(line, file=out)
    if True:
        rows = summary_rows(res.run_dir)
        if rows:
            print(
                f"{'benchmark/subset':32} {'params':8} {'arm':18} {'question type':20} {'n':>5} {'acc':>6} "
                f"{'stale':>6} {'chars':>7}",
                file=out,
            )
            for r in rows:
                ps = " ".join(f"{k}={r[k]}" for k in (C.L, C.D) if r.get(k) is not None)
                acc = "" if r.get("acc") is None else f"{100 * r['acc']:.1f}"
                st = "" if r.get(C.STALE) is None else f"{100 * r[C.STALE]:.1f}"
                ch = "" if r.get(C.READ_CHARS) is None else f"{r[C.READ_CHARS]:.0f}"
                print(
                    f"{r[C.BENCHMARK] + '/' + r[C.SUBSET]:32} {ps:8} {r[C.ARM]:18} {r[C.QUESTION_TYPE]:20} "
                    f"{r['n']:>5} {acc:>6} {st:>6} {ch:>7}",
                    file=out,
                )
    for f in res.failures[:10]:
        print(
            f"failed: {f[C.SUBSET]} {f[C.ARM]} {f[C.HISTORY_ID]}: {failure_reason(f[C.ERROR], width=400) or ''}",
            file=out,
        )
    if len(res.failures) > 10:
        print(
            f"... and {len(res.failures) - 10} more failed histories (see histories/failed-*.parquet)",
            file=out,
        )


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it (what a user types), else whole."""
    try:
        return str(path.relative_to(Path.cwd()))
    except (ValueError, OSError):  # elsewhere, or the working directory is gone
        return str(path)


def print_result(
    res: SweepResult, *, table: bool = False, stream: TextIO | None = None, width: int | None = None
) -> None:
    """How a sweep ended, before the run directory the caller prints last: the summary table when
    ``table`` (:func:`print_summary`), else a line of counts and, when some history failed, the first
    failure cut to ``width`` (default: the terminal's, since a traceback's last line can be kilobytes of a
    server's reply); then how to get the report. No line is wider than ``width``: the counts wrap, and
    the report's hint goes below its command when both do not fit (a path is never cut)."""

    out = stream or sys.stdout
    width = width or terminal_width(out)
    if table:
        print_summary(res, out)
    else:
        judged = f", {res.judged} answers judged" if res.judged else ""
        counts = (
            f"pmem sweep: {res.completed}/{res.total} histories complete, {res.failed} failed "
            f"({res.skipped} from earlier runs{judged}) in {res.wall_s:.1f}s"
        )
        for line in wrap_lines([counts], width):
            print(line, file=out)
        if res.failures:
            f = res.failures[0]
            head = f"first failure: {f[C.ARM]} {f[C.HISTORY_ID]}: "
            line = head + (failure_reason(f[C.ERROR], width=max(24, width - len(head))) or "")
            print(line if len(line) <= width else line[: width - 1] + "…", file=out)
    command = f"report: pmem report {_shown_path(res.run_dir)}"
    hint = "" if table else "(a table per cell and every failure: --summary)"
    if not hint or len(f"{command} {hint}") <= width:
        print(f"{command} {hint}".rstrip(), file=out)
    else:
        print(command, file=out)
        print(f"    {hint}", file=out)
