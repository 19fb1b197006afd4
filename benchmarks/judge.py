"""`pmem perf judge`: the judge of a sweep config on the calibration set, before its figures are believed.

The judge (``[models.judge]`` of ``--config``, started as a sweep starts it: Ray-hosted llama.cpp
replicas for the Qwen tier) judges the 360 answers of ``datasets/locomo-judge/calibration.jsonl``, whose
verdicts are known, twice in one run:

- **model alone**: every answer to the model with today's prompt (the baseline: what the rules add);
- **rules + model**: the judge a sweep uses (:func:`pmem.runner._judge.judge_answer`): LoCoMo's
  deterministic rules first (the topical rule where the config's embedder is all-MiniLM-L6-v2), the
  model for the rest.

It prints, for each, the accept rate per kind with its Wilson interval, how many the rules decided,
whether each kind of 20+ cases meets the target (wrong <= 10%, right >= 90%), and the seconds per
model verdict. ``--handwritten FILE`` judges a fresh hand-written file's answers instead (an
out-of-sample check of a judge tuned on the set). Replies go through a response cache (``--cache``; the second pass asks the model nothing
new), so a rerun after a rule change costs no model time. ``--out FILE`` writes every verdict as Parquet.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import polars as pl

from pmem.bench import CalibrationCase, calibration_cases, judge_messages, parse_judge_reply
from pmem.bench._judge_calibration import handwritten_cases
from pmem.models import ChatModel, ResponseCache
from pmem.report._judge import calibration_lines, calibration_summary
from pmem.runner import (
    ConfigError,
    connect,
    judge_calibration,
    judge_version,
    load_config,
    measures_topics,
)

DEFAULT_CONFIG = "jobs/accuracy_qwen.toml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default=DEFAULT_CONFIG, help="a sweep config whose [models.judge] is measured"
    )
    parser.add_argument(
        "--cache", default="runs/judge-calibration-cache.sqlite", help="response cache ('' for none)"
    )
    parser.add_argument("--kinds", default=None, help="comma-separated kinds to keep (default: all)")
    parser.add_argument(
        "--handwritten",
        type=Path,
        default=None,
        help="judge the paraphrase and vague-topical answers of this file (handwritten.json's format) "
        "instead of the calibration set: an out-of-sample check",
    )
    parser.add_argument("--out", type=Path, default=None, help="write every verdict to this Parquet file")
    parser.add_argument(
        "--concurrency", type=int, default=None, help="judge calls in flight (default: the config's)"
    )


async def _model_alone(
    judge: ChatModel, cases: list[CalibrationCase], concurrency: int
) -> list[tuple[bool | None, str]]:
    """Every case to the model with today's LoCoMo prompt, no rules before it."""
    sem = asyncio.Semaphore(concurrency)

    async def one(c: CalibrationCase) -> tuple[bool | None, str]:
        msgs = judge_messages("", c.question_id, c.question, c.gold, c.response, benchmark="locomo")
        async with sem:
            reply = await judge.complete(msgs, purpose="judge", max_tokens=10, temperature=0.0)
        return parse_judge_reply(reply.text), "model"

    return list(await asyncio.gather(*(one(c) for c in cases)))


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_config(args.config)
    except ConfigError as exc:
        print(f"pmem perf judge: error: {exc}")
        return 2
    if spec.judge is None:
        print(f"pmem perf judge: error: {args.config} has no [models.judge]")
        return 2
    cases = handwritten_cases(args.handwritten) if args.handwritten else calibration_cases()
    if args.kinds:
        wanted = {k.strip() for k in args.kinds.split(",")}
        cases = [c for c in cases if c.kind in wanted]
    concurrency = args.concurrency or spec.run.judge_concurrency
    started = connect(None)
    cache = ResponseCache(args.cache) if args.cache else None
    judge = spec.judge.chat_model(cache)
    # the topical rule, where the config's embedder is the one it was measured with
    embedder = spec.embedder.embedder_model(cache) if measures_topics(spec.embedder.model_id) else None
    try:
        t0 = time.perf_counter()
        alone = asyncio.run(_model_alone(judge, cases, concurrency))
        model_s = time.perf_counter() - t0
        both = asyncio.run(judge_calibration(judge, cases, concurrency, embedder))
    finally:
        judge.stop()
        if embedder is not None:
            embedder.stop()
        if started:
            import ray

            ray.shutdown()
    frames = {}
    for name, verdicts in (
        ("model alone", alone),
        ("rules + model", [(j.verdict, j.rule) for _, j in both]),
    ):
        frames[name] = pl.DataFrame(
            {
                "kind": [c.kind for c in cases],
                "expected": [c.expected for c in cases],
                "verdict": [v for v, _ in verdicts],
                "rule": [r for _, r in verdicts],
            },
            schema={"kind": pl.String, "expected": pl.Boolean, "verdict": pl.Boolean, "rule": pl.String},
        )
    print(
        f"perf judge: {spec.judge.model_id} ({spec.judge.spec.backend}), judge version "
        f"{judge_version(spec.embedder.model_id)}, on {len(cases)} calibration cases; "
        f"model alone: {model_s:.0f} s, {model_s / max(1, len(cases)):.2f} s per verdict at {concurrency} in flight"
    )
    for name, frame in frames.items():
        print(f"{name}:")
        for line in calibration_lines(calibration_summary(frame)):
            print(line)
    if args.out is not None:
        rows = frames["rules + model"].with_columns(
            pl.Series("case_id", [c.id for c in cases]),
            pl.Series("response", [c.response for c in cases]),
            pl.Series("raw", [j.raw for _, j in both]),
            pl.Series("model_alone", [v for v, _ in alone]),
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        rows.write_parquet(args.out)
        print(f"verdicts: {args.out}")
    return 0


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("judge", __doc__, add_arguments, run))
