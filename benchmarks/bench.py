"""``pmem perf bench``: load the 262k FactConsolidation subsets and build their histories.

Each repetition starts cold (caches cleared, sha256 verified again) and times, for sh_262k and mh_262k
together: verify + read + parse the fact stream + build the two histories (events, questions, stale
targets from the template parser). The baseline, measured in the same run, is a plain ``json.load`` of
the same two files; the ratio says what the history building costs on top of reading the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

TARGET_S = 5.0
SUBSETS = ("sh_262k", "mh_262k")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=5, help="cold repetitions (default 5)")
    parser.add_argument("--arrow", action="store_true", help="also time Arrow serialization of the histories")


def _clear_caches() -> None:
    from pmem.bench import _data, _factconsolidation

    _data._verified.cache_clear()
    _factconsolidation._load_raw_cached.cache_clear()
    _factconsolidation._analyze_cached.cache_clear()


def run(args: argparse.Namespace) -> int:
    from pmem.bench._data import verified_path
    from pmem.bench._factconsolidation import build_history, data_file

    paths = [verified_path(data_file(s)) for s in SUBSETS]
    base, full, arrow = [], [], []
    histories = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        for p in paths:
            with p.open(encoding="utf-8") as f:
                json.load(f)
        base.append(time.perf_counter() - t0)

        _clear_caches()
        t0 = time.perf_counter()
        histories = [build_history(s) for s in SUBSETS]
        full.append(time.perf_counter() - t0)
        if args.arrow:
            from pmem.bench._arrow import histories_from_arrow, histories_to_arrow

            t0 = time.perf_counter()
            histories_from_arrow(histories_to_arrow(histories))
            arrow.append(time.perf_counter() - t0)
    events = sum(len(h.events) for h in histories)
    questions = sum(len(h.questions) for h in histories)
    base_s, full_s = statistics.median(base), statistics.median(full)
    print(
        f"factconsolidation 262k: {len(histories)} histories, {events:,} events, {questions} questions "
        f"(median of {len(full)} cold runs)"
    )
    print(f"  baseline json.load of the two files : {base_s * 1000:8.1f} ms")
    print(
        f"  verify + load + parse + build        : {full_s * 1000:8.1f} ms  ({full_s / base_s:.1f}x baseline)"
    )
    if arrow:
        a = statistics.median(arrow)
        print(f"  Arrow round trip of the histories    : {a * 1000:8.1f} ms  ({a / base_s:.1f}x baseline)")
    print(
        f"  target <= {TARGET_S:.0f} s: {'met' if full_s <= TARGET_S else 'NOT met'} (worst run {max(full):.3f} s)"
    )
    return 0 if full_s <= TARGET_S else 1


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("bench", __doc__, add_arguments, run))
