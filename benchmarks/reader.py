"""`pmem perf reader`: a cluster-scale sharded state read without loading it (``pmem.graph.StateReader``).

A stream of ``--rows`` fact rows over ``--keys`` keys (the one ``pmem perf ingest --only facts`` writes) is
ingested by ``pmem ingest --partitions N --parts P --shards`` (skipped when ``--workdir`` already holds the
state: ``pmem perf ingest --only moonshot`` leaves its long one there), then
each measurement runs in a fresh process, so that its memory is its own:

- **open**: ``StateReader(STATE)``, its wall time and resident memory after it (the default reader checks
  each file against its digest when a read first needs it: a key's first read of a part hashes that
  part's files; with ``--trusted``, the same measurements of ``StateReader(STATE, trusted=True)``, which
  hands the bytes to Arrow unchecked, run first in the same run, and the default's ratios to them);
- **one key**: ``cell`` and ``versions`` of ``--samples`` random keys: the median and the slowest; and each
  key's cell as of half the log (``cell_as_of``);
- **frontier**: every non-empty cell streamed as Arrow batches: wall time and the process's peak
  resident memory (anonymous memory and mapped file pages, as the kernel counts them);
- **search** (with ``--search``): the state's search index built by ``pmem index`` when it has none (wall
  time, peak resident memory, size), then ``--samples`` queries (each a sampled key's words), the best 10
  cells each: the median and the slowest, and the peak resident memory of the searches;
- **the baseline, in the same run**: ``ProvenanceGraph.load(STATE)`` of the union, its wall time and peak,
  and the same answers from it. The reader's answers must equal the load's: each sampled key's cell and
  history, and the frontier (compared by count and an order-free digest of its (key, value) rows); with
  ``--search``, each query's hits, from every cell of the loaded frontier hashed and scored.

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
_MODES = ("reader", "trusted", "load", "index")
#: the modes that read through a ``StateReader`` (checking each file, or trusting the bytes)
_READERS = ("reader", "trusted")
#: cells a query asks for
_HITS = 10


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
    parser.add_argument(
        "--trusted",
        action="store_true",
        help="also measure StateReader(STATE, trusted=True) (the bytes unchecked) first, and print ratios to it",
    )
    parser.add_argument(
        "--search",
        action="store_true",
        help="also search: build the index if the state has none, time queries",
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

    from pmem.graph._read._search import search_index_dir
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
    queries = [key.replace("_", " ").replace(".", " ") for key in sample] if args.search else []
    if args.search and not search_index_dir(state).is_dir():
        built = _child("index", state, sample, root)
        print(
            f"index   pmem index: {built['cells']:,} cells in {built['index_s']:.1f} s, peak resident "
            f"{built['peak_rss_mb']:,.0f} MiB, {built['bytes'] / 2**20:,.0f} MiB on disk",
            flush=True,
        )
    trusted = _child("trusted", state, sample, root, queries) if args.trusted else None
    if trusted is not None:
        _print_reader("trusted", trusted)
    reader = _child("reader", state, sample, root, queries)
    _print_reader("reader", reader)
    if trusted is not None:
        ratios = ", ".join(
            f"{name} {reader[field] / trusted[field]:.2f}x" if trusted[field] else f"{name} -"
            for name, field in _RATIOS
        )
        same = reader["answers"] == trusted["answers"] and reader["frontier"] == trusted["frontier"]
        print(f"        checked / trusted: {ratios}; the same answers: {same}", flush=True)
    if queries:
        print(
            f"search  {len(queries)} queries, {_HITS} cells each: median {reader['search_median_ms']:,.0f} ms, slowest "
            f"{reader['search_max_ms']:,.0f} ms, peak resident {reader['search_peak_mb']:,.0f} MiB",
            flush=True,
        )
    if args.no_load:
        return 0
    load = _child("load", state, sample, root, queries)
    same = (
        reader["answers"] == load["answers"]
        and reader["past"] == load["past"]
        and reader["frontier"] == load["frontier"]
        and _same_hits(reader["hits"], load["hits"])
    )
    print(
        f"load    ProvenanceGraph.load {load['open_s']:.1f} s, peak resident {load['before_frontier_mb']:,.0f} MiB; "
        f"one key from the loaded graph: median {load['key_median_ms']:.2f} ms | the reader's answers are "
        f"the load's: {same} ({len(sample)} cells and histories, and cells as of half the log; the frontier of "
        f"{load['frontier_rows']:,} cells{'; each query' + chr(39) + 's hits' if queries else ''})",
        flush=True,
    )
    if queries:
        print(
            f"        the load's search (every cell hashed and scored): {load['search_s']:.1f} s for all queries"
        )
    return 0 if same else 1


#: what ``--trusted`` compares, by the name it prints
_RATIOS = (
    ("open", "open_s"),
    ("key median", "key_median_ms"),
    ("key slowest", "key_max_ms"),
    ("frontier", "frontier_s"),
    ("frontier peak", "peak_rss_mb"),
    ("as-of median", "past_median_ms"),
)


def _print_reader(name: str, reader: dict[str, Any]) -> None:
    print(
        f"{name:<7} open {reader['open_s'] * 1e3:,.0f} ms, resident {reader['open_rss_mb']:,.0f} MiB (target < 1 s, "
        f"500 MB) | one key, value and history: median {reader['key_median_ms']:.1f} ms, slowest "
        f"{reader['key_max_ms']:.1f} ms (target < 50 ms; first read of each part {reader['part_first_ms']}) | "
        f"frontier {reader['frontier_rows']:,} cells in {reader['frontier_s']:.1f} s, peak resident "
        f"{reader['peak_rss_mb']:,.0f} MiB (anonymous {reader['peak_anon_mb']:,.0f} MiB; target < 10 s, 1 GB; the "
        f"reads before it peaked at {reader['before_frontier_mb']:,.0f} MiB) | a key's cell as of half the log: "
        f"median {reader['past_median_ms']:.1f} ms, slowest {reader['past_max_ms']:.1f} ms",
        flush=True,
    )


def _same_hits(found: list[list[tuple[str, float]]], expected: list[list[tuple[str, float]]]) -> bool:
    """The reader's hits are the brute force's: the same keys in order, the same scores to float rounding."""
    return all(
        [k for k, _ in a] == [k for k, _ in b]
        and all(abs(x - y) <= 2e-6 for (_, x), (_, y) in zip(a, b, strict=True))
        for a, b in zip(found, expected, strict=True)
    ) and len(found) == len(expected)


def _child(
    mode: str, state: Path, sample: list[str], root: Path, queries: list[str] | None = None
) -> dict[str, Any]:
    out = root / f"answers-{mode}.pickle"
    asked = json.dumps({"keys": sample, "queries": queries or []})
    argv = [sys.executable, "-m", "benchmarks.reader", mode, str(state), str(out), asked]
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


def _measure(mode: str, state: Path, sample: list[str], queries: list[str]) -> dict[str, Any]:
    import statistics

    import numpy as np
    import polars as pl
    import pyarrow as pa

    from pmem.graph import ProvenanceGraph, StateReader
    from pmem.graph._read._search import build_search_index
    from pmem.graph.seams import partition_of
    from pmem.ingest._memory import peak_rss_mb, reset_peak_rss

    if mode == "index":
        t0 = time.perf_counter()
        stats = build_search_index(StateReader(state))
        return {
            "index_s": time.perf_counter() - t0,
            "peak_rss_mb": peak_rss_mb(),
            "cells": stats.cells,
            "bytes": stats.bytes,
        }
    t0 = time.perf_counter()
    reading = mode in _READERS
    source: Any = StateReader(state, trusted=mode == "trusted") if reading else ProvenanceGraph.load(state)
    opened = time.perf_counter() - t0
    open_rss, _ = _rss_mb()
    answers, times = [], []
    part_first: dict[int, float] = {}  # the first read of each part's key: it checks the part's files
    parts = source.parts if reading else 1
    for key in sample:
        t = time.perf_counter()
        answer = (source.cell(key), source.versions(key))
        times.append(time.perf_counter() - t)
        answers.append(answer)
        part_first.setdefault(partition_of(key, parts) if parts > 1 else 0, times[-1])
    at = source.seq // 2
    past, past_times = [], []
    # the load replays half the log once (not timed per key)
    then: Any = None if reading else source.as_of(at)
    for key in sample:
        t = time.perf_counter()
        past.append(source.cell_as_of(key, at) if reading else then.cell(key))
        past_times.append(time.perf_counter() - t)
    del then
    before_frontier_mb = peak_rss_mb()  # the open's and the reads' peak (the load's, for the load)
    reset_peak_rss()  # the frontier's peak is its own, not the reads' before it
    t = time.perf_counter()
    rows, digest, peak_anon = 0, 0, 0.0
    items: list[tuple[str, str]] = []  # the load's frontier, which its search scores
    if reading:
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
    reset_peak_rss()
    hits, search_times = [], []
    t = time.perf_counter()
    if reading:
        for query in queries:
            t = time.perf_counter()
            hits.append([(c.key, c.score) for c in source.search(query, _HITS)])
            search_times.append(time.perf_counter() - t)
    elif queries:
        hits = _brute_search(items, queries)
    search_s = time.perf_counter() - t
    return {
        "hits": hits,
        "search_median_ms": statistics.median(search_times) * 1e3 if search_times else 0.0,
        "search_max_ms": max(search_times, default=0.0) * 1e3,
        "search_peak_mb": peak_rss_mb(),
        "search_s": search_s,
        "open_s": opened,
        "open_rss_mb": open_rss,
        "key_median_ms": statistics.median(times) * 1e3,
        "key_max_ms": max(times) * 1e3,
        "part_first_ms": ", ".join(f"{p}: {part_first[p] * 1e3:,.0f} ms" for p in sorted(part_first)),
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


def _brute_search(items: list[tuple[str, str]], queries: list[str]) -> list[list[tuple[str, float]]]:
    """Each query's best cells among ``items`` (key, value), every one hashed and scored as the index
    scores them (a chunk at a time), ranked as ``StateReader.search`` ranks."""
    import heapq

    import numpy as np
    import scipy.sparse

    from pmem.graph import embedding_text, sparse_char_ngrams
    from pmem.graph._read._search import DEFAULT_DIM, NGRAMS, SCORE_DECIMALS

    vectors = np.stack([np.zeros(DEFAULT_DIM, np.float32) for _ in queries], axis=1)
    for i, query in enumerate(queries):
        _, columns, weights = sparse_char_ngrams([embedding_text(query)], DEFAULT_DIM, NGRAMS)
        vectors[columns, i] = weights
    best: list[list[tuple[float, str]]] = [[] for _ in queries]
    chunk = 65_536
    for start in range(0, len(items), chunk):
        part = items[start : start + chunk]
        texts = [embedding_text(f"{key}: {value}") for key, value in part]
        offsets, columns, weights = sparse_char_ngrams(texts, DEFAULT_DIM, NGRAMS)
        matrix = scipy.sparse.csr_matrix((weights, columns, offsets), shape=(len(part), DEFAULT_DIM))
        scores = np.round(np.asarray(matrix @ vectors).astype(np.float64), SCORE_DECIMALS)
        for i in range(len(queries)):
            rows = np.flatnonzero(scores[:, i] > 0)
            candidates = [(-float(scores[r, i]), part[r][0]) for r in rows.tolist()]
            best[i] = heapq.nsmallest(_HITS, best[i] + candidates)
    return [[(key, -score) for score, key in found] for found in best]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] in _MODES:  # a measurement's child process
        mode, state_path, out_path, asked_json = sys.argv[1:]
        asked = json.loads(asked_json)
        measured = _measure(mode, Path(state_path), asked["keys"], asked["queries"])
        with open(out_path, "wb") as f:
            pickle.dump(measured, f)
        raise SystemExit(0)
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("reader", __doc__, add_arguments, run))
