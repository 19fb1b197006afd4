"""`pmem perf reader`: a cluster-scale sharded state read without loading it (``pmem.graph.StateReader``).

A stream of ``--rows`` fact rows over ``--keys`` keys (the one ``pmem perf ingest --only facts`` writes) is
ingested by ``pmem ingest --partitions N --parts P --shards`` (skipped when ``--workdir`` already holds the
state: ``pmem perf ingest --only moonshot`` leaves its long one there), then
each measurement runs in a fresh process, so that its memory is its own:

- **open**: ``StateReader(STATE)``, its wall time and resident memory after it;
- **one key**: ``cell`` and ``versions`` of ``--samples`` random keys: the median and the slowest; and each
  key's cell as of half the log (``cell_as_of``);
- **frontier**: every non-empty cell streamed as Arrow batches: wall time and the process's peak
  resident memory (anonymous memory and mapped file pages, as the kernel counts them);
- **the baseline, in the same run**: ``ProvenanceGraph.load(STATE)`` of the union, its wall time and peak,
  and the same answers from it. The reader's answers must equal the load's: each sampled key's cell and
  history, and the frontier (compared by count and an order-free digest of its (key, value) rows).

Targets (issue 44): open under 1 s and 500 MB; a key's value and history under 50 ms; the frontier under 10 s
and 1 GB; each answer the load's.
"""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

#: the child's modes: one measurement each, answers pickled to the file given
_MODES = ("reader", "load")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=10_000_000, help="fact rows of the stream")
    parser.add_argument("--keys", type=int, default=1_000_000, help="its distinct keys")
    parser.add_argument(
        "--partitions", type=int, default=2, help="workers of the ingest that writes the state"
    )
    parser.add_argument("--parts", type=int, help="parts of the sharded state (default: --partitions)")
    parser.add_argument("--samples", type=int, default=20, help="random keys read one at a time")
    parser.add_argument("--seed", type=int, default=0, help="the stream's and the sample's seed")
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/pmem-perf-reader"), help="where the stream and state live"
    )
    parser.add_argument(
        "--no-load", action="store_true", help="skip the full load (the baseline and the check)"
    )


def fact_paths(root: Path, rows: int, keys: int, seed: int, parts: int) -> tuple[Path, Path]:
    """The fact stream (Parquet) of ``rows`` rows over ``keys`` keys and its sharded state of ``parts``
    parts, in ``root``: the names this benchmark reads, and ``pmem perf ingest --only moonshot`` writes."""
    return (
        root / f"facts-{rows}-{keys}-seed{seed}.parquet",
        root / f"state-{rows}-{keys}-seed{seed}-p{parts}",
    )


def run(args: argparse.Namespace) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pmem.ingest._synthetic import write_fact_stream

    root = args.workdir
    root.mkdir(parents=True, exist_ok=True)
    parts = args.parts or args.partitions
    stream, state = fact_paths(root, args.rows, args.keys, args.seed, parts)
    if not stream.exists():
        t0 = time.perf_counter()
        write_fact_stream(stream, args.rows, keys=args.keys, seed=args.seed)
        print(f"wrote {stream.name} in {time.perf_counter() - t0:.1f} s", flush=True)
    if not state.exists():
        t0 = time.perf_counter()
        argv = [sys.executable, "-m", "pmem.cli", "ingest", str(stream), "--out", str(state)]
        argv += [
            "--partitions",
            str(args.partitions),
            "--parts",
            str(parts),
            "--shards",
            "--no-progress",
            "--json",
        ]
        subprocess.run(argv, check=True, capture_output=True)
        print(f"ingested {stream.name} with --shards in {time.perf_counter() - t0:.1f} s", flush=True)
    size = sum(p.stat().st_size for p in state.rglob("*") if p.is_file())
    keys = [str(k) for k in pc.unique(pq.read_table(stream, columns=["key"]).column("key")).to_pylist()]
    sample = random.Random(args.seed).sample(sorted(keys), args.samples)
    del keys
    print(f"state: {state} ({size / 2**20:,.0f} MiB, {parts} parts); {len(sample)} random keys")

    reader = _child("reader", state, sample, root)
    print(
        f"reader  open {reader['open_s'] * 1e3:,.0f} ms, resident {reader['open_rss_mb']:,.0f} MiB (target < 1 s, "
        f"500 MB) | one key, value and history: median {reader['key_median_ms']:.1f} ms, slowest "
        f"{reader['key_max_ms']:.1f} ms (target < 50 ms) | frontier {reader['frontier_rows']:,} cells in "
        f"{reader['frontier_s']:.1f} s, peak resident {reader['peak_rss_mb']:,.0f} MiB "
        f"(anonymous {reader['peak_anon_mb']:,.0f} MiB; target < 10 s, 1 GB; the reads before it peaked at "
        f"{reader['before_frontier_mb']:,.0f} MiB) | a key's cell as of half the log: "
        f"median {reader['past_median_ms']:.1f} ms, slowest {reader['past_max_ms']:.1f} ms",
        flush=True,
    )
    if args.no_load:
        return 0
    load = _child("load", state, sample, root)
    same = (
        reader["answers"] == load["answers"]
        and reader["past"] == load["past"]
        and reader["frontier"] == load["frontier"]
    )
    print(
        f"load    ProvenanceGraph.load {load['open_s']:.1f} s, peak resident {load['before_frontier_mb']:,.0f} MiB; "
        f"one key from the loaded graph: median {load['key_median_ms']:.2f} ms | the reader's answers are "
        f"the load's: {same} ({len(sample)} cells and histories, and cells as of half the log; the frontier of "
        f"{load['frontier_rows']:,} cells)",
        flush=True,
    )
    return 0 if same else 1


def _child(mode: str, state: Path, sample: list[str], root: Path) -> dict[str, Any]:
    out = root / f"answers-{mode}.pickle"
    argv = [sys.executable, "-m", "benchmarks.reader", mode, str(state), str(out), json.dumps(sample)]
    subprocess.run(argv, check=True)
    with out.open("rb") as f:
        found: dict[str, Any] = pickle.load(f)
    out.unlink()
    return found


def _rss_mb() -> tuple[float, float]:
    """This process's resident memory now, and its anonymous part (MiB)."""
    fields = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["RssAnon"].split()[0]) / 1024


def _measure(mode: str, state: Path, sample: list[str]) -> dict[str, Any]:
    import statistics

    import numpy as np
    import polars as pl
    import pyarrow as pa

    from pmem.graph import ProvenanceGraph, StateReader
    from pmem.ingest._memory import peak_rss_mb, reset_peak_rss

    t0 = time.perf_counter()
    source: Any = StateReader(state) if mode == "reader" else ProvenanceGraph.load(state)
    opened = time.perf_counter() - t0
    open_rss, _ = _rss_mb()
    answers, times = [], []
    for key in sample:
        t = time.perf_counter()
        if mode == "reader":
            answer = (source.cell(key), source.versions(key))
        else:
            answer = (source.cell(key), source.versions(key))
        times.append(time.perf_counter() - t)
        answers.append(answer)
    at = source.seq // 2
    past, past_times = [], []
    # the load replays half the log once (not timed per key)
    then: Any = None if mode == "reader" else source.as_of(at)
    for key in sample:
        t = time.perf_counter()
        past.append(source.cell_as_of(key, at) if mode == "reader" else then.cell(key))
        past_times.append(time.perf_counter() - t)
    del then
    before_frontier_mb = peak_rss_mb()  # the open's and the reads' peak (the load's, for the load)
    reset_peak_rss()  # the frontier's peak is its own, not the reads' before it
    t = time.perf_counter()
    rows, digest, peak_anon = 0, 0, 0.0
    if mode == "reader":
        for batch in source.frontier_batches():
            frame = pl.DataFrame(pa.Table.from_batches([batch]).select(["key", "value"]))
            rows += batch.num_rows
            digest ^= int(np.bitwise_xor.reduce(frame.hash_rows(seed=0).to_numpy()))
            peak_anon = max(peak_anon, _rss_mb()[1])
    else:
        items = source.frontier_items()
        frame = pl.DataFrame(items, schema=["key", "value"], orient="row")
        rows, digest = len(items), int(np.bitwise_xor.reduce(frame.hash_rows(seed=0).to_numpy()))
    frontier_s = time.perf_counter() - t
    return {
        "open_s": opened,
        "open_rss_mb": open_rss,
        "key_median_ms": statistics.median(times) * 1e3,
        "key_max_ms": max(times) * 1e3,
        "answers": answers,
        "past": past,
        "past_median_ms": statistics.median(past_times) * 1e3,
        "past_max_ms": max(past_times) * 1e3,
        "frontier_rows": rows,
        "frontier": (rows, digest),
        "frontier_s": frontier_s,
        "peak_rss_mb": peak_rss_mb(),
        "before_frontier_mb": before_frontier_mb,
        "peak_anon_mb": peak_anon,
    }


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] in _MODES:  # a measurement's child process
        mode, state_path, out_path, keys_json = sys.argv[1:]
        measured = _measure(mode, Path(state_path), json.loads(keys_json))
        with open(out_path, "wb") as f:
            pickle.dump(measured, f)
        raise SystemExit(0)
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("reader", __doc__, add_arguments, run))
