"""`pmem sweep CONFIG.toml`: run a sweep and print the run directory as the last line.

Progress is one line on stderr that fits the terminal; ``--verbose`` adds the details (also in the run's
progress log). stdout gets a short result (``--summary``: the table per cell) and, last, the run
directory, which scripts read: ``pmem report $(pmem sweep CONFIG | tail -n 1)``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pmem._exit import EXIT_INTERRUPTED
from pmem.memory.writepath import no_fact_reason
from pmem.models import MissingDependencyError, one_line
from pmem.rundir import PROGRESS_LOG
from pmem.runner._config import ConfigError, load_config
from pmem.runner._driver import SweepInterrupted, check_runners, run_sweep
from pmem.runner._summary import arms_without_facts, print_result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="sweep config (TOML), e.g. jobs/quickstart.toml")
    parser.add_argument(
        "--out", default=None, help="parent folder of runs/<run-id>/ (default: [run] out, or $PMEM_OUT)"
    )
    parser.add_argument(
        "--address", default=None, help="an existing Ray cluster (default: embedded local Ray)"
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds to wait for the --address cluster (default: [run] connect_timeout_s, 60)",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="run only the first N histories of each subset"
    )
    parser.add_argument("--predict-only", action="store_true", help="answer only; skip the judging pass")
    parser.add_argument("--fail-on-error", action="store_true", help="exit non-zero when any history failed")
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 even when an arm's extraction wrote no fact (default: exit 1 and say why; "
        "[run] allow_empty)",
    )
    parser.add_argument("--runners", type=int, default=None, help="runner actors (default: [run] runners)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="progress details too: histories done per subset and arm, runner stats "
        f"(always written to RUN_DIR/{PROGRESS_LOG})",
    )
    parser.add_argument(
        "--summary",
        action="store_true",
        help="end with the table of accuracy per benchmark, subset, parameter, arm and question type",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:  # before the sweep started: nothing to keep
        print("interrupted before the sweep started; nothing was run", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    try:
        spec = load_config(args.config)
        if args.limit is not None and args.limit < 1:
            msg = f"--limit must be >= 1, got {args.limit}"
            raise ValueError(msg)
        check_runners(args.runners)
        res = run_sweep(
            spec,
            out=args.out,
            address=args.address,
            limit=args.limit,
            predict_only=True if args.predict_only else None,
            runners=args.runners,
            progress_enabled=not args.quiet,
            connect_timeout_s=args.connect_timeout,
            verbose=args.verbose,
        )
    except SweepInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ConfigError, RuntimeError, ValueError, MissingDependencyError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    print_result(res, table=args.summary)
    fail_on_error = args.fail_on_error or spec.run.fail_on_error
    empty = _nothing_written(res.run_dir, spec.agents[0].backend if len(spec.agents) == 1 else "")
    allow_empty = args.allow_empty or spec.run.allow_empty
    if empty:
        print(
            f"pmem sweep: {empty}; "
            + ("accepted (allow_empty)" if allow_empty else "--allow-empty accepts it"),
            file=sys.stderr,
        )
    print(res.run_dir, flush=True)
    if empty and not allow_empty:
        return 1
    return 1 if (fail_on_error and res.failed) else 0


def _nothing_written(run_dir: Any, agent_backend: str) -> str | None:
    """Why arms whose extraction ran wrote no fact in the whole run (None when every such arm wrote)."""

    silent = arms_without_facts(run_dir)
    if not silent:
        return None
    arms = ", ".join(f"{arm} ({calls:,} extraction calls)" for arm, calls in silent.items())
    return f"no fact was extracted by {arms}: {no_fact_reason(agent_backend, f'{run_dir}/requests/')}"
