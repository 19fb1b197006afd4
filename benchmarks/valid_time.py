"""`python -m benchmarks.valid_time`: replaying fact rows with valid times, against the same rows undated.

A write log of ``--rows`` fact rows (each an observation and the accept citing it, over ``--rows / 10``
keys) is replayed into a new graph with ``pmem.graph.apply_log`` three ways in one process, one after the
other: undated (the baseline), a ``--dated`` share of the observations dated in arrival order (valid
times that only grow), the same in order but for a ``--late`` share of them dated a day early, and the
same share dated at random. A batch goes column-wise unless one of its accepts may enter its key's history
(``pmem.graph._ops._bulk``): facts dated in order cost about what undated ones do; a batch with a few late
accepts is split around them, each alone through the per-call loop; facts dated at random (many late
ones a batch) go through the loop whole.
Prints each way's seconds and its ratio to the baseline; on a shared machine only the ratios of one run
mean anything.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    import argparse


def write_log(rows: int, dated: float, order: str, seed: int = 0, late: float = 0.0) -> pa.Table:
    """``rows`` fact rows as an ingest logs them (``pmem.ingest._merge.fact_log``: each observation, then
    the accept citing it); ``dated`` of the observations carry a valid time: growing with arrival
    (``order="in"``; ``late`` of them a day early), drawn at random (``"random"``), or none (``dated`` 0)."""
    from pmem.ingest._merge import fact_log

    rng = np.random.default_rng(seed)
    is_dated = rng.random(rows) < dated
    if order == "in":
        seconds = np.arange(rows) - 86_400 * (rng.random(rows) < late)
    else:
        seconds = rng.integers(0, rows, rows)
    start = datetime(2025, 1, 1)
    valid = [
        (start + timedelta(seconds=int(s))).isoformat() if d else None
        for s, d in zip(seconds, is_dated, strict=True)
    ]
    events = pa.RecordBatch.from_pydict(
        {
            "text": [f"fact {i}" for i in range(rows)],
            "source": ["user"] * rows,
            "time": pa.nulls(rows, pa.string()),
            "valid_time": pa.array(valid, pa.string()),
            "op": ["accept"] * rows,
            "key": [f"k{k}" for k in rng.integers(0, max(rows // 10, 1), rows)],
            "value": [f"v{v}" for v in rng.integers(0, 7, rows)],
        }
    )
    return fact_log(events, 0, 1)


def replay_seconds(log: pa.Table) -> float:
    from pmem.graph import ProvenanceGraph, apply_log

    graph = ProvenanceGraph()
    t0 = time.perf_counter()
    apply_log(graph, log)
    return time.perf_counter() - t0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000, help="fact rows (observation + accept each)")
    parser.add_argument(
        "--dated", type=float, default=0.1, help="share of the observations with a valid time"
    )
    parser.add_argument(
        "--late", type=float, default=0.001, help="share of the in-order dated observations a day early"
    )
    parser.add_argument("--seed", type=int, default=0, help="the log's seed")


def run(args: argparse.Namespace) -> int:
    ways = {
        "undated": write_log(args.rows, 0.0, "in", args.seed),
        f"{args.dated:.0%} dated in order": write_log(args.rows, args.dated, "in", args.seed),
        f"{args.late:.1%} of them late": write_log(args.rows, args.dated, "in", args.seed, args.late),
        f"{args.dated:.0%} dated at random": write_log(args.rows, args.dated, "random", args.seed),
    }
    base = None
    for name, log in ways.items():
        seconds = replay_seconds(log)
        base = base or seconds
        print(
            f"{name:<24} apply_log of {args.rows:,} fact rows: {seconds:.2f} s ({seconds / base:.2f}x undated)"
        )
    return 0


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("valid_time", __doc__, add_arguments, run))
