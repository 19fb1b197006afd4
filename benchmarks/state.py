"""`pmem perf state`: save and load a state against plain pyarrow on the same tables; one key of a big one.

1. A graph of ``--ops`` operations (the stream of ``pmem perf core``) is saved and loaded in both layouts
   (one file; a directory of one Arrow file per table). The baseline, in the same run, is what any
   Arrow store of these tables pays at least: the same tables written with plain ``pyarrow.ipc`` (no
   checksum, no fsync, no atomic rename) and read back (no verification, no graph rebuilt). Save is
   ``graph.save`` (tables made, written, digest, fsync, rename); load is ``ProvenanceGraph.load`` alone
   (the check that the loaded graph's counts are the saved one's is not timed).
   Target: save + load of 1M operations <= 1 s.
2. A state of ``--big-ops`` operations is saved, and ``pmem.graph.read_key_versions`` reads one key from
   it without loading the rest (memory-mapped): the median and the slowest of ``--lookups`` random keys,
   against ``ProvenanceGraph.load`` of the same state. Target: <= 50 ms per key at 10M operations.

Wall clock, best of ``--repeat``; on a shared machine only the ratios of one run mean much.
"""

from __future__ import annotations

import gc
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.core import graph_loop, make_stream

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    import pyarrow as pa

    from pmem.graph import ProvenanceGraph


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ops", type=int, default=1_000_000, help="operations of the save/load graph")
    parser.add_argument("--keys", type=int, default=100_000, help="its distinct keys")
    parser.add_argument(
        "--big-ops", type=int, default=10_000_000, help="operations of the one-key state (0: skip)"
    )
    parser.add_argument("--big-keys", type=int, default=1_000_000, help="its distinct keys")
    parser.add_argument("--lookups", type=int, default=20, help="random keys read from the big state")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions (best is reported)")


def _timed(call: Callable[[], object]) -> float:
    """Seconds ``call`` takes; what it returns is freed after the clock stops."""
    gc.collect()
    t0 = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - t0
    del result
    return seconds


def _plain_round_trip(tables: dict[str, pa.Table], directory: Path) -> tuple[float, float]:
    """Write ``tables`` with plain pyarrow, one IPC file each, and read them back: (write s, read s)."""
    import pyarrow as pa

    def write() -> None:
        for name, table in tables.items():
            with (
                pa.OSFile(str(directory / f"{name}.arrow"), "wb") as sink,
                pa.ipc.new_file(sink, table.schema) as w,
            ):
                w.write_table(table)

    def read() -> None:
        for name in tables:
            pa.ipc.open_file(pa.memory_map(str(directory / f"{name}.arrow"))).read_all()

    return _timed(write), _timed(read)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size


def _save_load(graph: ProvenanceGraph, tmp: Path, repeat: int) -> None:
    from pmem.graph import ProvenanceGraph
    from pmem.graph._persist._tables import graph_tables

    plain = tmp / "plain"
    plain.mkdir()
    best: dict[str, float] = {}
    same = True
    for _ in range(repeat):
        tables = graph_tables(graph)
        w, r = _plain_round_trip(tables, plain)
        del tables
        best["plain write"] = min(best.get("plain write", w), w)
        best["plain read"] = min(best.get("plain read", r), r)
        for layout in ("file", "directory"):
            path = tmp / f"state-{layout}"
            s = _timed(lambda: graph.save(path, layout=layout))  # noqa: B023 - called at once
            gc.collect()
            t0 = time.perf_counter()
            loaded = ProvenanceGraph.load(path)
            r = time.perf_counter() - t0  # the load alone, not the check below
            same &= loaded.stats() == graph.stats()
            del loaded
            best[f"{layout} save"] = min(best.get(f"{layout} save", s), s)
            best[f"{layout} load"] = min(best.get(f"{layout} load", r), r)
    plain_total = best["plain write"] + best["plain read"]
    print(
        f"plain pyarrow  : write {best['plain write']:.2f} s + read {best['plain read']:.2f} s = {plain_total:.2f} s"
    )
    for layout in ("file", "directory"):
        save, load = best[f"{layout} save"], best[f"{layout} load"]
        size = _size(tmp / f"state-{layout}") / 2**20
        print(
            f"{layout:<9} save : {save:.2f} s, load {load:.2f} s = {save + load:.2f} s "
            f"({(save + load) / plain_total:.2f}x plain pyarrow; {size:,.0f} MiB) (target <= 1 s)"
        )
    print(f"round trip     : same graph {same}")


def _one_key(ops: int, keys: int, lookups: int, tmp: Path) -> None:
    from pmem.graph import ProvenanceGraph, read_key_versions

    print(f"building a {ops:,}-operation graph over {keys:,} keys ...", flush=True)
    graph, _ = graph_loop(*make_stream(ops, keys, seed=11))
    names = random.Random(5).sample(graph.keys(), lookups)
    expected = {k: graph.versions(k) for k in names}
    for layout in ("file", "directory"):
        path = tmp / f"big-{layout}"
        graph.save(path, layout=layout)
    del graph
    gc.collect()
    for layout in ("file", "directory"):
        path = tmp / f"big-{layout}"
        times, right = [], True
        for key in names:
            t0 = time.perf_counter()
            got = read_key_versions(path, key)
            times.append(time.perf_counter() - t0)
            right &= got == expected[key]
        load = _timed(lambda: ProvenanceGraph.load(path))  # noqa: B023
        median, worst = statistics.median(times) * 1e3, max(times) * 1e3
        print(
            f"one key, {layout:<9}: median {median:.1f} ms, slowest {worst:.1f} ms of {lookups} keys "
            f"(same versions as the graph: {right}); load of the whole state {load:.1f} s = "
            f"{load * 1e3 / median:,.0f}x a key (target <= 50 ms; {_size(path) / 2**20:,.0f} MiB)"
        )


def run(args: argparse.Namespace) -> int:
    print(f"building a {args.ops:,}-operation graph over {args.keys:,} keys ...", flush=True)
    graph, _ = graph_loop(*make_stream(args.ops, args.keys))
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        _save_load(graph, tmp, args.repeat)
        del graph
        if args.big_ops:
            _one_key(args.big_ops, args.big_keys, args.lookups, tmp)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS       : {peak:,.0f} MB")
    return 0


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("state", __doc__, add_arguments, run))
