"""The table printed at the end of a sweep (from the run's files, so it is the same on a resume)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pmem.runner._driver import SweepResult


def summary_rows(run_dir: Path) -> list[dict[str, object]]:
    """Accuracy per (benchmark, subset, params, arm, question type) from results/, with failures."""
    import polars as pl

    res = sorted((run_dir / "results").glob("*.parquet"))
    hist = sorted((run_dir / "histories").glob("*.parquet"))
    rows: list[dict[str, object]] = []
    if res:
        df = pl.scan_parquet(res).group_by(["benchmark", "subset", "L", "d", "arm", "question_type"]).agg(
            pl.len().alias("n"),
            pl.col("correct").cast(pl.Float64).mean().alias("acc"),
            pl.col("stale").cast(pl.Float64).mean().alias("stale"),
            pl.col("read_chars").mean().alias("read_chars"),
        ).sort(["benchmark", "subset", "L", "d", "question_type", "arm"], nulls_last=True).collect()
        rows = df.to_dicts()
    if hist:
        f = pl.scan_parquet(hist).filter(pl.col("status") == "failed").group_by(["benchmark", "subset", "arm"]).agg(
            pl.len().alias("failed")).collect()
        for r in f.to_dicts():
            rows.append({**r, "question_type": "(failed histories)", "n": r["failed"]})
    return rows


def print_summary(res: SweepResult, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    print(f"run {res.run_id}: {res.total} histories x arms; {res.skipped} skipped (already complete), "
          f"{res.completed} complete, {res.failed} failed, {res.redone} redone after runner loss, "
          f"{res.judged} judged; {res.calls} model calls, {res.tokens} tokens; {res.wall_s:.1f}s", file=out)
    if True:
        rows = summary_rows(res.run_dir)
        if rows:
            print(f"{'benchmark/subset':32} {'params':8} {'arm':18} {'question type':20} {'n':>5} {'acc':>6} "
                  f"{'stale':>6} {'chars':>7}", file=out)
            for r in rows:
                ps = " ".join(f"{k}={r[k]}" for k in ("L", "d") if r.get(k) is not None)
                acc = "" if r.get("acc") is None else f"{100 * r['acc']:.1f}"
                st = "" if r.get("stale") is None else f"{100 * r['stale']:.1f}"
                ch = "" if r.get("read_chars") is None else f"{r['read_chars']:.0f}"
                print(f"{r['benchmark'] + '/' + r['subset']:32} {ps:8} {r['arm']:18} {r['question_type']:20} "
                      f"{r['n']:>5} {acc:>6} {st:>6} {ch:>7}", file=out)
    for f in res.failures[:10]:
        print(f"failed: {f['subset']} {f['arm']} {f['history_id']}: {(f['error'] or '').splitlines()[-1][:200]}",
              file=out)
    if len(res.failures) > 10:
        print(f"... and {len(res.failures) - 10} more failed histories (see histories/failed-*.parquet)", file=out)
