"""``pmem rejudge RUN``: judge a finished run's answers again with today's judge.

Usage::

    pmem rejudge RUN [--config JOB.toml] [--cache PATH] [--report DIR]

The judge is the run's own (``run.toml``'s ``[config.models.judge]``) unless ``--config`` names a sweep
config whose ``[models.judge]`` replaces it; its prompts and rules are today's
(:data:`pmem.bench.JUDGE_VERSION`). Each ``needs_judge`` answer gets a new verdict in ``results/``'s
``correct`` and ``judge_*`` columns; the verdict it replaces is kept once in ``prior_correct`` and
``prior_judge`` (a second rejudge keeps the first). LoCoMo answers are also judged against their other
gold (``alt_gold``: the audited one, filled here for a run made before it existed). Resumable: the
verdicts already in ``judgments/`` under today's version are reused, and every model reply goes through
the response cache. ``--report DIR`` rebuilds the run's report there afterwards.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path
from typing import Any

from pmem.bench import Question, audit_corrections, score_question
from pmem.report import build_report
from pmem.rundir import RESULTS, RUN_TOML
from pmem.rundir import columns as C
from pmem.runner import ConfigError, connect, judge_results, load_config, parse_config, update_results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN", type=Path, help="a finished run directory (run.toml, results/)"
    )
    parser.add_argument("--config", default=None, help="a sweep config whose [models.judge] judges instead")
    parser.add_argument(
        "--cache", default=None, help="response cache for the judge's replies (default: the run's own cache)"
    )
    parser.add_argument(
        "--report", default=None, metavar="DIR", help="rebuild the run's report in DIR afterwards"
    )


def fill_alt_gold(root: Path) -> int:
    """Give LoCoMo rows of a run made before the audited gold existed their ``alt_gold`` (the audited
    answer where it differs) and ``alt_f1``; returns how many rows gained one."""
    corrections = audit_corrections()

    def gain(r: dict[str, Any]) -> bool:
        fix = corrections.get(r[C.QUESTION_ID]) if r[C.BENCHMARK] == "locomo" else None
        if fix is None or r.get(C.ALT_GOLD) is not None:
            return False
        q = Question(r[C.QUESTION_ID], r["question"] or "", (fix[0],), r[C.QUESTION_TYPE], 0)
        r[C.ALT_GOLD_KIND], r[C.ALT_GOLD] = "audited", fix[0]
        r[C.ALT_F1] = score_question("locomo", q, r["prediction"] or "").f1
        return True

    return update_results(root, sorted((root / RESULTS.name).glob("*.parquet")), gain)


def _spec(root: Path, config: str | None) -> Any:
    if config is not None:
        return load_config(config)
    doc = tomllib.loads((root / RUN_TOML).read_text(encoding="utf-8"))
    if "config" not in doc:
        msg = f"{root / RUN_TOML}: no [config] table (not a run.toml written by pmem sweep)"
        raise ConfigError(msg)
    return parse_config(doc["config"], source=str(root / RUN_TOML))


def run(args: argparse.Namespace) -> int:
    root: Path = args.run_dir
    if not (root / RESULTS.name).is_dir() or not (root / RUN_TOML).is_file():
        print(
            f"pmem rejudge: error: {root}: not a run directory ({RUN_TOML} and {RESULTS.name}/)",
            file=sys.stderr,
        )
        return 2
    try:
        spec = _spec(root, args.config)
    except (ConfigError, tomllib.TOMLDecodeError) as exc:
        print(f"pmem rejudge: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if spec.judge is None:
        print(
            f"pmem rejudge: error: {root}: the run has no judge (give --config with a [models.judge])",
            file=sys.stderr,
        )
        return 2
    gained = fill_alt_gold(root)
    if gained:
        print(f"[pmem rejudge] {gained} LoCoMo answers gained their audited gold (alt_gold, alt_f1)")
    started = connect(None)
    try:
        judged = judge_results(root, spec.judge, spec.run, embedder_spec=spec.embedder, cache_path=args.cache)
    finally:
        if started:
            import ray

            ray.shutdown()
    print(f"[pmem rejudge] {judged} new verdicts in {root / RESULTS.name}")
    if args.report:
        paths = build_report(str(root), args.report)
        print(f"report: {paths.markdown}")
    return 0
