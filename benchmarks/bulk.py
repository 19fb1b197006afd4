"""`python -m benchmarks.bulk`: ProvenanceGraph.apply_batch against the observe/apply loop on one stream.

The stream is a write path's: each event is one observation row followed by one operation row citing it
(90% accepts; the other 10% spread evenly over contest, reject, revoke, resolve and noop), over many keys,
values drawn from a small vocabulary so that repeated values (support), contests, resolves and rollbacks
all happen. Both sides consume the same events: the loop calls ``apply(op, key, value, observe(text,
source))`` per event (the id observe returns takes apply's fast path, so this is the fastest loop), the
bulk side passes the same rows as Arrow batches of ``--batch-rows`` rows to ``apply_batch`` (the rows,
lists and batches are all built before timing). Both are timed on the wall clock in the same process,
one after the other, and the two graphs' saved states must be identical to the byte (compared by digest,
so that the first graph is gone while the second is built). On a shared machine only the ratio of one
run means anything, and it moves by +-20% between runs.
"""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import resource
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    import argparse

    from numpy.typing import NDArray

    from pmem.graph import ProvenanceGraph

#: (op, share of operation rows); the order is pmem.graph.OPS
OP_MIX = (
    ("accept", 0.90),
    ("contest", 0.02),
    ("reject", 0.02),
    ("revoke", 0.02),
    ("resolve", 0.02),
    ("noop", 0.02),
)
VOCABULARY = 6  # distinct values per stream


class Stream:
    """A synthetic write stream, as columns (numpy) and as the loop's Python lists."""

    def __init__(self, events: int, keys: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.events = events
        self.op: NDArray[np.int64] = rng.choice(len(OP_MIX), size=events, p=[p for _, p in OP_MIX])
        self.key: NDArray[np.int64] = rng.integers(0, keys, size=events)
        value = rng.integers(0, VOCABULARY, size=events)
        # revoke, noop and reject name a value half of the time; accept, contest and resolve always do
        optional = np.isin(self.op, (2, 3, 5)) & (rng.random(events) < 0.5)
        self.value: NDArray[np.int64] = np.where(optional, -1, value)
        self.source: NDArray[np.int64] = np.where(rng.random(events) < 0.01, 1, 0)  # 0: user, 1: doc
        self.key_names = [f"entity_{k}.attribute" for k in range(keys)]
        self.value_names = [f"value {v}" for v in range(VOCABULARY)]
        self.texts = [f"observation {i}" for i in range(events)]

    def rows(self) -> list[tuple[str, str, str | None, str, str]]:
        """(op, key, value, text, source) per event, for the loop."""
        from pmem.graph import OPS

        keys, values, sources = self.key_names, self.value_names, ("user", "doc")
        return [
            (OPS[o], keys[k], None if v < 0 else values[v], text, sources[s])
            for o, k, v, text, s in zip(
                self.op.tolist(),
                self.key.tolist(),
                self.value.tolist(),
                self.texts,
                self.source.tolist(),
                strict=True,
            )
        ]

    def table(self) -> pa.Table:
        """Observation and operation rows interleaved, in WRITE_BATCH_SCHEMA (operation i cites e<i>)."""
        from pmem.graph import OPS, WRITE_BATCH_SCHEMA

        n = self.events
        event = np.repeat(np.arange(n, dtype=np.int64), 2)
        is_op = np.tile(np.array([False, True]), n)

        def pick(names: pa.Array[Any], index: NDArray[np.int64], mask: NDArray[np.bool_]) -> pa.Array[Any]:
            indices: Any = pa.array(index, mask=mask, type=pa.int64())  # null index -> null row
            return names.take(indices)

        value = self.value[event]
        columns = [
            pick(pa.array(OPS, type=pa.string()), self.op[event], ~is_op),
            pick(pa.array(self.texts, type=pa.large_string()), event, is_op),
            pick(pa.array(["user", "doc"], type=pa.string()), self.source[event], is_op),
            pa.nulls(2 * n, type=pa.string()),
            pick(pa.array(self.key_names, type=pa.string()), self.key[event], ~is_op),
            pick(
                pa.array(self.value_names, type=pa.large_string()), np.maximum(value, 0), ~is_op | (value < 0)
            ),
            pa.array(event, mask=~is_op, type=pa.int64()),
        ]
        return pa.table(columns, schema=WRITE_BATCH_SCHEMA)


def measure(events: int, keys: int, batch_rows: int = 200_000, seed: int = 0) -> dict[str, float]:
    """Time the loop and apply_batch on the same stream; check the two states are byte-identical.

    Each side's input is built before its timing starts, and only while that side runs; only the loop's
    state digest is kept while apply_batch runs (at 10,000,000 events each graph, and more so the writing
    of its state, take gigabytes). ``peak_rss_mib`` is the process's peak resident memory.
    """
    from pmem.graph import ProvenanceGraph

    rows = Stream(events, keys, seed).rows()
    gc.collect()
    seq_graph = ProvenanceGraph()
    observe, apply = seq_graph.observe, seq_graph.apply
    t0 = time.perf_counter()
    for op, key, value, text, source in rows:
        apply(op, key, value, observe(text, source))
    sequential = time.perf_counter() - t0
    del rows, observe, apply
    expected = _digest(seq_graph)
    del seq_graph

    # the same stream again (it is seeded), built once the loop's graph is gone
    table = Stream(events, keys, seed).table()
    batches = [table.slice(a, batch_rows) for a in range(0, table.num_rows, batch_rows)]
    gc.collect()
    bulk_graph = ProvenanceGraph()
    t0 = time.perf_counter()
    for batch in batches:
        bulk_graph.apply_batch(batch)
    bulk = time.perf_counter() - t0
    rows_in = table.num_rows
    del table, batches
    state = _digest(bulk_graph)
    return {
        "sequential_s": sequential,
        "bulk_s": bulk,
        "ratio": sequential / bulk,
        "rows": float(rows_in),
        "identical": float(state == expected),
        "state_bytes": float(state[1]),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def profile(events: int, keys: int, batch_rows: int = 200_000, seed: int = 0) -> dict[str, float]:
    """apply_batch over the same stream under cProfile, on a fresh graph: the seconds per batch under the
    profiler, and those spent in C-level column work (Arrow kernels, numpy sorts and scans, a Polars
    plan, the typed columns growing), which no change to the Python objects the graph keeps would touch.
    Set against a 10x budget, what is left of it is what everything else would have to fit in."""
    import cProfile
    import pstats

    from pmem.graph import ProvenanceGraph

    table = Stream(events, keys, seed).table()
    batches = [table.slice(a, batch_rows) for a in range(0, table.num_rows, batch_rows)]
    del table
    gc.collect()
    graph = ProvenanceGraph()
    profiler = cProfile.Profile()
    profiler.enable()
    for batch in batches:
        graph.apply_batch(batch)
    profiler.disable()
    stats = pstats.Stats(profiler)
    column = 0.0
    for (filename, _, name), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if filename.endswith(("pyarrow/compute.py", "pyarrow/_compute.pyx")) or (
            filename == "~" and any(kind in name for kind in _COLUMN_KINDS)
        ):
            column += own
    return {"batches": float(len(batches)), "total_s": stats.total_tt, "column_s": column}  # type: ignore[attr-defined]


#: the receivers of a builtin method whose time is column work (cProfile names builtins "<method 'x'
#: of 'numpy.ndarray' objects>")
_COLUMN_KINDS = ("'numpy.", "'array.array'", "PyLazyFrame", "'pyarrow.")


def _digest(graph: ProvenanceGraph) -> tuple[bytes, int]:
    """SHA-256 and size of the graph's saved state, one file per table (``save(layout="directory")``):
    written table by table it peaks at a fraction of what one file or ``to_bytes`` takes (at 10,000,000
    events, gigabytes less); the bytes are hashed from the files, not kept."""
    digest = hashlib.sha256()
    size = 0
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "state"
        graph.save(path, layout="directory")
        for file in sorted(path.iterdir()):
            digest.update(file.name.encode())
            data = file.read_bytes()
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
            size += len(data)
    return digest.digest(), size


def measure_apart(events: int, keys: int, batch_rows: int = 200_000, seed: int = 0) -> dict[str, float]:
    """:func:`measure` in a child process (its ``pid`` added), for a process that measures more after it.

    At the issue's size the two graphs and the stream take about 10 GB; freed, most of it stays with the
    allocator of the process that held it, and would count in the peak memory of whatever that process
    measured next (``pmem perf ingest`` reports the ingest driver's).
    """
    context = multiprocessing.get_context("spawn")  # forking a process that runs threads (Ray's) is unsafe
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_measure_with_pid, events, keys, batch_rows, seed).result()


def _measure_with_pid(events: int, keys: int, batch_rows: int, seed: int) -> dict[str, float]:
    return {**measure(events, keys, batch_rows, seed), "pid": float(os.getpid())}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--events", type=int, default=10_000_000, help="events (observation + operation rows)"
    )
    parser.add_argument("--keys", type=int, default=1_000_000, help="distinct keys")
    parser.add_argument("--batch-rows", type=int, default=200_000, help="rows per apply_batch call")
    parser.add_argument("--seed", type=int, default=0, help="stream seed")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="then apply_batch once more under cProfile: its column work against the 10x budget",
    )


def run(args: argparse.Namespace) -> int:
    print(
        f"{args.events:,} events over {args.keys:,} keys, batches of {args.batch_rows:,} rows ...", flush=True
    )
    r = measure(args.events, args.keys, args.batch_rows, args.seed)
    events = args.events
    print(f"{'path':<22}{'seconds':>10}{'events/s':>14}")
    print(f"{'observe + apply loop':<22}{r['sequential_s']:>10.2f}{events / r['sequential_s']:>14,.0f}")
    print(f"{'apply_batch':<22}{r['bulk_s']:>10.2f}{events / r['bulk_s']:>14,.0f}")
    print(
        f"ratio {r['ratio']:.1f}x (target >= 10x); rows {r['rows']:,.0f}; state {r['state_bytes'] / 2**20:,.1f} MiB"
    )
    print(f"identical state bytes: {bool(r['identical'])}; peak memory {r['peak_rss_mib']:,.0f} MiB")
    if args.profile:
        p = profile(args.events, args.keys, args.batch_rows, args.seed)
        per = 1000 / p["batches"]
        budget = r["sequential_s"] / 10 * per
        column = p["column_s"] * per
        print(
            f"profile ({p['batches']:,.0f} batches, cProfile): {p['total_s'] * per:.1f} ms per batch, of which "
            f"C-level column work {column:.1f} ms (Arrow kernels, numpy sorts and scans, typed columns growing)"
        )
        print(
            f"10x budget: {budget:.1f} ms per batch (the loop's time / 10); left for everything else "
            f"{budget - column:.1f} ms, which takes {(p['total_s'] - p['column_s']) * per:.1f} ms now"
        )
    return 0 if r["identical"] else 1


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("bulk", __doc__, add_arguments, run))
