"""``pmem bench``: list benchmarks, verify data, print the FactConsolidation parser coverage.

Usage::

    pmem bench list [--longmemeval PATH]
    pmem bench verify [--longmemeval PATH]
    pmem bench coverage [--subset sh_6k ...] [--show-misses N]
    pmem bench judge-set [--write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pmem.bench._data import DataError, datasets_root, record_file, verify_all
from pmem.bench._factconsolidation import SUBSETS, analyze_subset, build_history, gold_not_final, load_raw
from pmem.bench._judge_calibration import (
    CALIBRATION_FILE,
    HANDWRITTEN_FILE,
    build_calibration,
    calibration_cases,
    write_calibration,
)
from pmem.bench._locomo import load_locomo
from pmem.bench._longmemeval import load_longmemeval, subset_for
from pmem.bench._registry import iter_histories, list_benchmarks

COVERAGE_TARGET = 0.99


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", metavar="ACTION")
    p = sub.add_parser("list", help="benchmarks, subsets, history and question counts, data sources")
    p.add_argument("--longmemeval", type=Path, default=None, help="official LongMemEval file to count")
    p = sub.add_parser("verify", help="check every vendored file against datasets/MANIFEST.json")
    p.add_argument("--longmemeval", type=Path, default=None, help="also check this LongMemEval file")
    p = sub.add_parser("coverage", help="template-parser coverage, overwritten keys, stale denominators")
    p.add_argument(
        "--subset",
        action="append",
        default=None,
        choices=SUBSETS,
        help="FactConsolidation subset (repeatable)",
    )
    p.add_argument("--show-misses", type=int, default=20, help="list at most N unparsed facts per subset")
    p = sub.add_parser("judge-set", help="the judge's calibration set: cases per kind; --write rebuilds it")
    p.add_argument(
        "--write", action="store_true", help=f"rebuild datasets/{CALIBRATION_FILE} and its manifest entry"
    )


_JUDGE_SET_LICENCE = "CC BY-NC 4.0 (derived from LoCoMo, snap-research/LoCoMo; see locomo/LICENSE)"


def _judge_set(args: argparse.Namespace) -> int:
    root = datasets_root()
    if args.write:
        cases = build_calibration(root / HANDWRITTEN_FILE)
        write_calibration(root / CALIBRATION_FILE, cases)
        record_file(
            CALIBRATION_FILE,
            source="built by pmem.bench._judge_calibration from locomo/locomo10.json and locomo-judge/handwritten.json",
            licence=_JUDGE_SET_LICENCE,
            obtain="pmem bench judge-set --write",
        )
    else:
        cases = calibration_cases()
    kinds: dict[tuple[str, bool], int] = {}
    for c in cases:
        kinds[(c.kind, c.expected)] = kinds.get((c.kind, c.expected), 0) + 1
    for (kind, expected), n in kinds.items():
        print(f"{kind:<16} {'right' if expected else 'wrong':<6} {n:>4}")
    print(f"{len(cases)} cases{' written to ' + str(root / CALIBRATION_FILE) if args.write else ''}")
    return 0


def _list(args: argparse.Namespace) -> int:
    rows: list[tuple[str, str, str, str, str]] = []
    sources: list[tuple[str, str]] = []
    for info in list_benchmarks():
        sources.append((info.name, info.source))
        for subset in info.subsets:
            params = {}
            if info.name == "longmemeval":
                if args.longmemeval is None:
                    rows.append((info.name, subset, "-", "-", "not run: data not provided"))
                    continue

                try:
                    if subset_for(args.longmemeval) != subset:
                        rows.append((info.name, subset, "-", "-", "not run: data not provided"))
                        continue
                except DataError:
                    pass
                params = {"path": args.longmemeval}
            try:
                hs = list(iter_histories(info.name, subset, **params))
            except (DataError, ValueError) as exc:
                rows.append((info.name, subset, "-", "-", f"error: {exc}"))
                continue
            nq = sum(len(h.questions) for h in hs)
            note = ""
            if info.name == "alfworld-revision":
                by = sorted({next(iter(h.params.items())) for h in hs}, key=str)
                note = ", ".join(f"{k}={v}" for k, v in by if k in ("L", "d")) or "counterbalanced"
            elif info.name == "longmemeval":
                ku = sum(1 for h in hs if h.questions[0].qtype == "knowledge-update")
                note = f"knowledge-update: {ku}"
            elif info.name == "locomo":
                from collections import Counter

                types = Counter(q.qtype for h in hs for q in h.questions)
                note = ", ".join(f"{t} {n}" for t, n in types.most_common())
            rows.append((info.name, subset, f"{len(hs):,}", f"{nq:,}", note))
    widths = [
        max(len(r[i]) for r in [*rows, ("benchmark", "subset", "histories", "questions", "")])
        for i in range(4)
    ]
    print(
        f"{'benchmark':<{widths[0]}}  {'subset':<{widths[1]}}  {'histories':>{widths[2]}}  "
        f"{'questions':>{widths[3]}}  notes"
    )
    for r in rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}  {r[4]}")
    print("\ndata sources:")
    for name, src in sources:
        print(f"  {name}: {src}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    root = datasets_root()
    print(f"datasets: {root}")
    ok = True
    for rel, good, message in verify_all(root):
        ok &= good
        print(f"  {'ok  ' if good else 'FAIL'} {rel}" + ("" if good else f": {message}"))

    for subset in SUBSETS:
        try:
            h = build_history(subset)
            print(f"  ok   factconsolidation/{subset}: {len(h.events):,} facts, {len(h.questions)} questions")
        except DataError as exc:
            ok = False
            print(f"  FAIL factconsolidation/{subset}: {exc}")

    try:
        convs = load_locomo()
        turns = sum(len(s.turns) for c in convs for s in c.sessions)
        print(
            f"  ok   locomo: {len(convs)} conversations, {turns:,} turns, {sum(len(c.qa) for c in convs):,} questions"
        )
    except DataError as exc:
        ok = False
        print(f"  FAIL locomo: {exc}")
    if args.longmemeval is not None:
        try:
            data = load_longmemeval(args.longmemeval)
            print(f"  ok   longmemeval/{data.subset}: {len(data.records)} questions, official sha256")
        except DataError as exc:
            ok = False
            print(f"  FAIL longmemeval: {exc}")
    else:
        print("  --   longmemeval: not run: data not provided")
    print("all files verified" if ok else "verification FAILED")
    return 0 if ok else 1


def _coverage(args: argparse.Namespace) -> int:
    subsets = args.subset or list(SUBSETS)
    worst = 1.0
    print(
        f"{'subset':<9} {'facts':>7} {'parsed':>7} {'coverage':>9} {'keys':>7} {'overwritten':>11} "
        f"{'stale-denominator':>17}"
    )
    details: list[str] = []
    for subset in subsets:
        stream = analyze_subset(subset)
        hist = build_history(subset)
        denom = sum(1 for q in hist.questions if q.stale)
        worst = min(worst, stream.coverage)
        den = f"{denom}/{len(hist.questions)}" if subset.startswith("sh") else "n/a (mh)"
        ow = f"{stream.overwritten:,} ({stream.overwritten / max(stream.keys, 1):.0%})"
        print(
            f"{subset:<9} {stream.total:>7,} {len(stream.facts):>7,} {stream.coverage:>9.2%} "
            f"{stream.keys:>7,} {ow:>11} {den:>17}"
        )
        for number, text in stream.misses[: args.show_misses]:
            details.append(f"  miss {subset} #{number}: {text}")
        if len(stream.misses) > args.show_misses:
            details.append(f"  ... {len(stream.misses) - args.show_misses} more misses in {subset}")
        if subset.startswith("sh"):
            for q, gold, key, values in gold_not_final(stream, load_raw(subset)):
                details.append(f"  note {subset}: gold {gold!r} is an earlier value of {key} {values}: {q}")
    print(
        f"\nrelation templates: see pmem/bench/_facts.py; coverage target {COVERAGE_TARGET:.0%}: "
        f"{'met' if worst >= COVERAGE_TARGET else 'NOT met'} (lowest {worst:.2%})"
    )
    misses = [d for d in details if not d.startswith("  note")]
    notes = [d for d in details if d.startswith("  note")]
    print("misses: none" if not misses else "misses:")
    for d in misses:
        print(d)
    if notes:
        print(
            "data notes (single-hop gold equals an EARLIER value of the key the question names; these "
            "questions are outside the stale denominator):"
        )
        for d in notes:
            print(d)
    print(
        "stale-rate denominator: single-hop questions whose gold equals the final value of an "
        "overwritten key named in the question"
    )
    return 0 if worst >= COVERAGE_TARGET else 1


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "bench_command", None)
    actions = {"list": _list, "verify": _verify, "coverage": _coverage, "judge-set": _judge_set}
    if action not in actions:
        print("usage: pmem bench {list,verify,coverage,judge-set}", file=sys.stderr)
        return 2
    try:
        return actions[action](args)
    except DataError as exc:  # the data is not here (a pip install without the repository, say)
        print(f"pmem bench {action}: error: {exc}", file=sys.stderr)
        return 2
