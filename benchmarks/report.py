"""`pmem perf report`: the report's aggregations over a synthetic run of 1,000,000 result rows and
5,000,000 request rows, next to a plain pyarrow read of the same files measured in the same run.

Target: the aggregations (every table of the report, bootstrap intervals included; no plotting or
rendering) finish in <= 5 s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

TARGET_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=int, default=1_000_000, help="result rows (default 1,000,000)")
    parser.add_argument("--requests", type=int, default=5_000_000, help="request rows (default 5,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions; the best is reported")
    parser.add_argument("--keep", default=None, help="write the synthetic run here and keep it")
    parser.add_argument(
        "--render", action="store_true", help="also time plots + report.md/html (not in the target)"
    )
    parser.add_argument(
        "--no-request-context",
        action="store_true",
        help="request rows without benchmark/subset columns (the slower attribution path)",
    )


def _pyarrow_baseline(root: Path) -> float:
    import pyarrow.dataset as ds

    t0 = time.perf_counter()
    for name, cols in (
        (
            "results",
            [
                "benchmark",
                "subset",
                "history_id",
                "arm",
                "question_id",
                "question_type",
                "correct",
                "stale",
                "read_tokens",
                "read_chars",
                "L",
                "d",
            ],
        ),
        ("requests", None),
        ("histories", ["history_id", "arm", "benchmark", "subset", "status"]),
    ):
        d = ds.dataset(root / name, format="parquet")
        if cols is None:  # every column the aggregations read (benchmark/subset only when present)
            want = [
                "history_id",
                "arm",
                "purpose",
                "prompt_tokens",
                "completion_tokens",
                "cached",
                "error",
                "benchmark",
                "subset",
            ]
            cols = [c for c in want if c in d.schema.names]
        d.to_table(columns=cols)
    return time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    from benchmarks.synthetic import write_large_run
    from pmem.report._load import open_run
    from pmem.report._metrics import compute

    tmp = None
    if args.keep:
        root = Path(args.keep)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="pmem-perf-report-")
        root = Path(tmp.name) / "run"
    try:
        t0 = time.perf_counter()
        write_large_run(
            root,
            n_results=args.results,
            n_requests=args.requests,
            request_context=not args.no_request_context,
        )
        gen_s = time.perf_counter() - t0
        run0 = open_run(root)
        results, requests = run0.frame("results"), run0.frame("requests")
        if results is None or requests is None:  # write_large_run writes both
            msg = f"{root}: the synthetic run has no results/ or requests/"
            raise RuntimeError(msg)
        n_res = results.select("correct").collect().height
        n_req = requests.select("purpose").collect().height
        ctx = "without" if args.no_request_context else "with"
        print(
            f"synthetic run: {n_res:,} result rows, {n_req:,} request rows ({ctx} benchmark/subset on requests; "
            f"{gen_s:.1f} s to write) at {root}"
        )
        best_agg = best_base = float("inf")
        for i in range(args.repeat):
            base = _pyarrow_baseline(root)
            t0 = time.perf_counter()
            m = compute(open_run(root))
            agg = time.perf_counter() - t0
            best_agg, best_base = min(best_agg, agg), min(best_base, base)
            print(f"  try {i + 1}: aggregations {agg:.2f} s, pyarrow read of the same columns {base:.2f} s")
        tables = sum(1 for t in m.tables.values() if not t.empty)
        verdict = "PASS" if best_agg <= TARGET_S else "FAIL"
        print(
            f"aggregations (all {len(m.tables)} tables, {tables} non-empty, bootstrap included): best {best_agg:.2f} s "
            f"(target <= {TARGET_S:.0f} s: {verdict})"
        )
        print(
            f"baseline: plain pyarrow read of the same files/columns: best {best_base:.2f} s; "
            f"ratio aggregations / read = {best_agg / best_base:.2f}x"
        )
        if args.render:
            from pmem.report._build import build_report

            t0 = time.perf_counter()
            build_report(root)
            print(f"full report incl. plots and HTML: {time.perf_counter() - t0:.2f} s")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0 if best_agg <= TARGET_S else 1


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("report", __doc__, add_arguments, run))
