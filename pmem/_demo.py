"""`pmem demo`: the quickstart sweep on the embedded Ray, then its report; prints the run directory last.

Runs ``jobs/quickstart.toml`` (heuristic agent, hashing embedder: no LLM, no GPU, no network), writes
``RUN_DIR/report/`` when the report package is present (a summary table otherwise).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pmem._bundle import bundled
from pmem._exit import EXIT_INTERRUPTED
from pmem.report import RunError, build_report
from pmem.runner import ConfigError, SweepInterrupted, load_config, print_summary, run_sweep


def _quickstart() -> Path:
    """The quickstart config: the working directory's, the repository's, else the installed copy."""

    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        p = base / "jobs" / "quickstart.toml"
        if p.is_file():
            return p
    shipped = bundled("jobs/quickstart.toml")
    if shipped is not None:
        return shipped
    msg = "jobs/quickstart.toml not found (run `pmem demo` from the repository, or pass --config)"
    raise SystemExit(msg)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "The quickstart: a real sweep of jobs/quickstart.toml (every arm over ALFWorld-Revision, "
        "FactConsolidation and the provenance probes) on an embedded Ray, then its report; prints the run "
        "directory last. Its agent is the deterministic heuristic one (rules over the prompt text, no LLM, "
        "no GPU, no network): the run checks the pipeline, and its scores say nothing of an LLM's."
    )
    parser.add_argument("--config", default=None, help="sweep config (default: jobs/quickstart.toml)")
    parser.add_argument("--out", default=None, help="parent folder of the run directory (default: runs/)")
    parser.add_argument(
        "--limit", type=int, default=None, help="first N histories per subset (a quicker look)"
    )
    parser.add_argument("--no-report", action="store_true", help="skip the report")


def run(args: argparse.Namespace) -> int:

    path = Path(args.config) if args.config else _quickstart()
    try:
        spec = load_config(path)
        res = run_sweep(spec, out=args.out, limit=args.limit)
    except SweepInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("interrupted before the sweep started; nothing was run", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ConfigError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_summary(res)
    status = 0 if res.failed == 0 else 1
    if not args.no_report:
        try:
            paths = build_report(res.run_dir)
        except RunError as exc:  # e.g. every history failed: the summary above says which and why
            print(f"error: no report: {exc}", file=sys.stderr)
            status = 1
        else:
            print(f"report: {paths.markdown}")
    print(res.run_dir, flush=True)
    return status
