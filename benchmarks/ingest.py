"""`pmem perf ingest`: what `pmem ingest` costs, each figure against a baseline measured in the same run.

The measurements (choose with ``--only``):

- ``bulk``: column-wise :meth:`ProvenanceGraph.apply_batch` against one ``observe``/``apply`` call per
  row, on a synthetic operation stream (90% accepts, the rest every other op type); identical bytes
  required (:mod:`benchmarks.bulk`).
- ``partitions``: the whole write path (heuristic agent, hashing embedder) over a generated stream
  (:mod:`pmem.ingest._synthetic`), with 1 and then 2 key partitions (Ray workers) on an embedded Ray;
  the two state files must be byte-identical. Prints the driver's wall time per stage, the peak memory
  of the driver and of each worker, and the state file's size.
- ``equivalence``: the acceptance check at scale: the generated stream ingested with ``--partitions 1``
  and ``--partitions 4`` gives byte-identical files, equal to feeding the same rows to the ``pmem`` arm
  one by one (:func:`pmem.ingest.ingest_sequential`); frontiers compared too.
- ``scale`` (only when asked for): a long generated stream (10,000,000 events over 1,000,000 keys by
  default) ingested with 2 partitions, soft identity off unless ``--scale-identity`` (its exact scan
  costs new keys x registered keys): the peak memory of the driver and of each worker, the state size.
- ``replicas``: extraction fanned out over agent replicas: the local OpenAI-compatible stand-in server
  at a fixed latency (20 ms), hosted as 1 and then 2 replicas by Ray actors exactly as vLLM replicas are
  (``backend = "vllm"``, ``launcher = "standin"``), each replica taking ``--slots`` requests at once
  from each worker; throughput of the extraction stage with 2 replicas over 1.
- ``ids`` (only when asked for): the ingest's duplicate-id check over ``--id-rows`` distinct ids in
  batches of 8,192, each in its own process: every id in a dict (the baseline) against
  :class:`pmem.ingest._seen.SeenIds` holding ``--ids-in-memory`` and the rest in runs on disk: wall
  seconds and the process's peak resident memory above its start.
- ``facts`` (only when asked for): structured facts at memory speed. A stream of fact rows (10,000,000
  over 1,000,000 keys by default; :func:`pmem.ingest._synthetic.write_fact_stream`: seeded, 95% accepts,
  the other ops 1% each, values from a small vocabulary and 10% unique ones) is written as JSONL and as
  Parquet (kept in ``--workdir`` for the next run), then each is ingested end to end by the ``pmem
  ingest`` command, in its own process with its embedded Ray, with ``--partitions 1`` and ``2``: wall
  seconds (the command's, Ray's start included), rows/s, the driver's peak memory, the state's size,
  against the target (``--fact-target-s``, 60 s); the four states must be byte-identical.
  ``--fact-profile DIR`` samples each command with py-spy and prints where its time went.
- ``moonshot`` (only when asked for): the longest structured stream, ingested as a sharded state with
  bounded workers (issue 44). A fact stream of ``--moon-rows`` over ``--moon-keys`` keys (30,000,000 over
  3,000,000) and a baseline of ``--moon-base-rows`` over ``--moon-base-keys`` (10,000,000 over 1,000,000),
  both Parquet, each ingested by ``pmem ingest --partitions 2 --shards --parts P`` with ``P`` sized for
  ``--part-rows`` fact rows per part (a multiple of 2): facts/s of each and their ratio, the driver's and
  each worker's peak memory, the state's size. Then the long ingest again, killed (SIGKILL to its
  process group, its embedded Ray included) once a checkpoint holds half the stream, and run again: its
  state must hold the same union as the uninterrupted one (:func:`pmem.graph.shards.union_difference`).
  The long state is kept in ``--workdir`` under the name ``pmem perf reader --rows R --keys K --parts P``
  reads (the lazy reader's figures on it).

    python -m benchmarks.ingest --events 200000 --keys 20000
    pmem perf ingest --only facts --workdir /data/perf     # 10M facts, 1M keys, four ways
    pmem perf ingest --only moonshot --workdir /data/perf  # 30M facts over 3M keys, against 10M
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

SECTIONS = ("bulk", "partitions", "replicas")
#: measured only when asked for (``--only``): long runs
LONG_SECTIONS = ("equivalence", "scale", "facts", "ids", "moonshot")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--only",
        choices=(*SECTIONS, *LONG_SECTIONS),
        action="append",
        help="run only these (default: all but the long ones: equivalence, scale)",
    )
    p.add_argument("--bulk-events", type=int, default=10_000_000, help="rows of the bulk-apply stream")
    p.add_argument("--bulk-keys", type=int, default=1_000_000, help="keys of the bulk-apply stream")
    p.add_argument("--events", type=int, default=200_000, help="events of the generated ingest stream")
    p.add_argument("--keys", type=int, default=20_000, help="keys of the generated ingest stream")
    p.add_argument("--replica-events", type=int, default=4_000, help="events of the extraction measurement")
    p.add_argument("--latency-ms", type=float, default=20.0, help="the stand-in server's latency per call")
    p.add_argument("--slots", type=int, default=4, help="requests each worker keeps at each replica")
    p.add_argument("--scale-events", type=int, default=10_000_000, help="events of the scale run")
    p.add_argument("--scale-keys", type=int, default=1_000_000, help="keys of the scale run")
    p.add_argument(
        "--scale-identity",
        action="store_true",
        help="soft identity on in the scale run (off by default: its scan is quadratic in the keys)",
    )
    p.add_argument("--fact-rows", type=int, default=10_000_000, help="rows of the fact stream (facts)")
    p.add_argument("--fact-keys", type=int, default=1_000_000, help="keys of the fact stream (facts)")
    p.add_argument("--fact-seed", type=int, default=0, help="seed of the fact stream (facts)")
    p.add_argument(
        "--fact-target-s", type=float, default=60.0, help="the end-to-end target per ingest (facts)"
    )
    p.add_argument(
        "--fact-profile",
        type=Path,
        help="sample each ingest with py-spy into this folder and summarize (facts)",
    )
    p.add_argument("--fact-address", help="a Ray cluster the ingests join (facts; default: each embeds one)")
    p.add_argument(
        "--moon-rows", type=int, default=30_000_000, help="rows of the long fact stream (moonshot)"
    )
    p.add_argument("--moon-keys", type=int, default=3_000_000, help="keys of the long fact stream (moonshot)")
    p.add_argument("--moon-base-rows", type=int, default=10_000_000, help="rows of the baseline (moonshot)")
    p.add_argument("--moon-base-keys", type=int, default=1_000_000, help="keys of the baseline (moonshot)")
    p.add_argument(
        "--part-rows",
        type=int,
        default=2_000_000,
        help="fact rows per part the parts are sized for (moonshot)",
    )
    p.add_argument("--no-kill", action="store_true", help="skip the killed and resumed ingest (moonshot)")
    p.add_argument("--workdir", type=Path, help="where streams and states go (default: a temporary folder)")
    p.add_argument("--id-rows", type=int, default=10_000_000, help="ids of the duplicate-id check (ids)")
    p.add_argument(
        "--ids-in-memory", type=int, default=1_000_000, help="ids the bounded check holds in memory (ids)"
    )


def run(args: argparse.Namespace) -> int:
    wanted = set(args.only or SECTIONS)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="pmem-perf-ingest-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        if "bulk" in wanted:
            _bulk(args)
        if "partitions" in wanted:
            _partitions(args, root)
        if "replicas" in wanted:
            _replicas(args, root)
        if "equivalence" in wanted:
            _equivalence(args, root)
        if "scale" in wanted:
            _scale(args, root)
        if "facts" in wanted:
            _facts(args, root)
        if "ids" in wanted:
            _ids(args, root)
        if "moonshot" in wanted:
            _moonshot(args, root)
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


#: One measurement of the duplicate-id check, run in its own process (argv: mode, ids, in memory, folder).
_IDS_CHILD = """
import resource, sys, time
from pathlib import Path
from pmem.ingest._seen import SeenIds
mode, n, in_memory, folder = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
seen = SeenIds(folder, in_memory=in_memory) if mode == "runs" else SeenIds(held={})
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
for start in range(0, n, 8192):
    ids = [f"evt-{i:010d}-{(i * 2654435761) % 1000003:07d}" for i in range(start, min(n, start + 8192))]
    seen.first_rows(ids, list(range(start, start + len(ids))))
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
print(f"{time.perf_counter() - t:.3f} {grown:.1f}")
"""


def _ids(args: argparse.Namespace, root: Path) -> None:
    figures = {}
    for mode in ("dict", "runs"):
        argv = [
            sys.executable,
            "-c",
            _IDS_CHILD,
            mode,
            str(args.id_rows),
            str(args.ids_in_memory),
            str(root / "seen"),
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        seconds, grown = (float(x) for x in done.stdout.split())
        figures[mode] = (seconds, grown)
    (dict_s, dict_mb), (runs_s, runs_mb) = figures["dict"], figures["runs"]
    print(
        f"duplicate-id check, {args.id_rows:,} ids: a dict of every id {dict_s:.1f} s, +{dict_mb:,.0f} MiB; "
        f"{args.ids_in_memory:,} in memory and the rest in runs on disk {runs_s:.1f} s, +{runs_mb:,.0f} MiB "
        f"({dict_mb / max(runs_mb, 1):.1f}x less memory, {runs_s / max(dict_s, 1e-9):.1f}x the time)"
    )


def _bulk(args: argparse.Namespace) -> dict[str, float]:
    from benchmarks.bulk import measure_apart

    r = measure_apart(args.bulk_events, args.bulk_keys)  # its heap must not count in the ingest figures after
    print(
        f"bulk apply, {args.bulk_events:,} observation+operation pairs over {args.bulk_keys:,} keys: "
        f"sequential {r['sequential_s']:.1f} s, apply_batch {r['bulk_s']:.2f} s -> {r['ratio']:.1f}x "
        f"(target >= 10x); identical bytes: {bool(r['identical'])}; state {r['state_bytes'] / 2**20:,.0f} MiB"
    )
    return r


@contextlib.contextmanager
def _local_ray(**resources: Any) -> Iterator[None]:
    """A new local Ray for one measurement (never a cluster found on the machine)."""
    import ray

    from pmem.runner._connect import quiet_token_notice

    with quiet_token_notice():
        ray.init(
            address="local",
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=False,
            **resources,
        )
    try:
        yield
    finally:
        ray.shutdown()


def _uncached_defaults() -> Any:
    """The embedded defaults without the response cache: it would measure SQLite, not the pipeline."""
    from pmem.ingest import IngestSpec

    return dataclasses.replace(IngestSpec.default(), cache=False)


def _ingest(stream: Path, out: Path, partitions: int, config: Any) -> Any:
    from pmem.ingest import ingest

    shutil.rmtree(out.with_name(out.name + ".ingest"), ignore_errors=True)
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    report = ingest(stream, out, config=config, partitions=partitions, progress=False)
    return report, time.perf_counter() - t0


def _partitions(args: argparse.Namespace, root: Path) -> None:

    from pmem.ingest._synthetic import write_synthetic_stream

    stream = write_synthetic_stream(root / "stream.jsonl", args.events, keys=args.keys, seed=0)
    spec = _uncached_defaults()
    with _local_ray():
        results = {}
        for n in (1, 2):
            results[n] = _ingest(stream, root / f"state-{n}.arrow", n, spec)[0]
            print(f"  {n} partition(s): " + "\n    ".join(results[n].lines()))
        bare = {n: _bare_fan_out(stream, n, spec) for n in (1, 2)}
    r1, r2 = results[1], results[2]
    same = (root / "state-1.arrow").read_bytes() == (root / "state-2.arrow").read_bytes()
    steady1 = r1.events / r1.wall_s
    print(
        f"partitioned ingest, {args.events:,} events over {args.keys:,} keys (heuristic agent, hashing embedder): "
        f"1 worker {r1.wall_s:.1f} s, 2 workers {r2.wall_s:.1f} s -> {r1.wall_s / r2.wall_s:.2f}x "
        f"(target >= 1.7x); identical bytes: {same}; {steady1:,.0f} events/s with 1 worker; "
        f"state {r1.state_bytes / 2**20:,.1f} MiB"
    )
    print(
        f"  same-run baseline: the workers' extraction alone, no driver work (the machine's ceiling for "
        f"this CPU-bound Python on its cores): 1 worker {bare[1]:.1f} s, 2 workers {bare[2]:.1f} s -> "
        f"{bare[1] / bare[2]:.2f}x"
    )


def _bare_fan_out(stream: Path, workers: int, spec: Any) -> float:
    """Seconds for ``workers`` partition workers to extract every row, batches sent straight to them."""
    import ray

    from pmem.ingest._stream import read_stream
    from pmem.ingest._worker import IngestWorker, extraction_rows

    cls: Any = ray.remote(IngestWorker)  # Ray's handles are untyped here
    actors: list[Any] = [cls.options(num_cpus=1).remote(spec, {}, None, i) for i in range(workers)]
    try:
        ray.get([a.extract.remote([(0, 1, "warm-up", "user", None, None)]) for a in actors])
        batches = [b.events for b in read_stream(stream, batch_rows=spec.batch_events)]
        t0 = time.perf_counter()
        refs, first = [], 0
        for ev in batches:
            rows = extraction_rows(ev, first)
            first += ev.num_rows
            size = -(-len(rows) // workers)
            refs += [a.extract.remote(rows[i * size : (i + 1) * size]) for i, a in enumerate(actors)]
        ray.get(refs)
        return time.perf_counter() - t0
    finally:
        for a in actors:
            ray.kill(a)


def _equivalence(args: argparse.Namespace, root: Path) -> None:

    from pmem.graph import ProvenanceGraph
    from pmem.ingest import ingest_sequential
    from pmem.ingest._synthetic import write_synthetic_stream

    stream = write_synthetic_stream(root / "equivalence.jsonl", args.events, keys=args.keys, seed=2)
    spec = _uncached_defaults()
    t0 = time.perf_counter()
    reference = ingest_sequential(stream, config=spec).to_bytes()
    sequential_s = time.perf_counter() - t0
    with _local_ray():
        walls = {n: _ingest(stream, root / f"equivalence-{n}.arrow", n, spec)[1] for n in (1, 4)}
    states = {n: (root / f"equivalence-{n}.arrow").read_bytes() for n in (1, 4)}
    frontier = ProvenanceGraph.from_bytes(reference).frontier()
    print(
        f"equivalence, {args.events:,} generated events over {args.keys:,} keys: sequential `pmem` arm "
        f"{sequential_s:.0f} s, --partitions 1 {walls[1]:.0f} s, --partitions 4 {walls[4]:.0f} s; "
        f"partitions 1 == 4 byte-identical: {states[1] == states[4]}; equal to the sequential arm's bytes: "
        f"{states[1] == reference}; frontier equal: {ProvenanceGraph.from_bytes(states[4]).frontier() == frontier} "
        f"({len(frontier):,} cells)"
    )


def _scale(args: argparse.Namespace, root: Path) -> None:
    """The long stream end to end with 2 partitions: peak memory of driver and workers, state size."""
    from pmem.ingest._synthetic import write_synthetic_stream

    stream = write_synthetic_stream(root / "scale.jsonl", args.scale_events, keys=args.scale_keys, seed=3)
    base = _uncached_defaults()
    write = {**dict(base.write), "identity": bool(args.scale_identity)}
    # a checkpoint serializes the whole merged graph: every million events, not every 50,000
    spec = dataclasses.replace(base, write=tuple(sorted(write.items())), checkpoint_every=1_000_000)
    with _local_ray():
        report, wall = _ingest(stream, root / "scale.arrow", 2, spec)
    print(
        f"scale run, {args.scale_events:,} events over {args.scale_keys:,} keys, 2 partitions, soft identity "
        f"{'on' if args.scale_identity else 'off'}: {wall:,.0f} s; stream {stream.stat().st_size / 2**20:,.0f} MiB"
    )
    print("  " + "\n  ".join(report.lines()))
    print(f"  state file {(root / 'scale.arrow').stat().st_size / 2**20:,.0f} MiB")
    stream.unlink()


def _facts(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """The fact stream as JSONL and Parquet, each ingested by `pmem ingest` with 1 and 2 partitions."""
    from pmem.ingest._synthetic import write_fact_stream

    rows, keys = args.fact_rows, args.fact_keys
    results: list[dict[str, Any]] = []
    for suffix in (".jsonl", ".parquet"):
        stream = root / f"facts-{rows}-{keys}-seed{args.fact_seed}{suffix}"
        if not stream.exists():  # the same name is the same rows: a stream written before is reused
            t0 = time.perf_counter()
            write_fact_stream(stream, rows, keys=keys, seed=args.fact_seed)
            print(
                f"wrote {stream.name} ({stream.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
        for partitions, shards in ((1, False), (2, False), (2, True)):
            name = f"facts-state-{suffix[1:]}-{partitions}{'-shards' if shards else ''}"
            results.append(_ingest_command(stream, root / name, partitions, args, shards=shards))
            r = results[-1]
            flag = f"--partitions {partitions}{' --shards' if shards else ''}"
            print(
                f"  {suffix[1:]:<8} {flag:<24}: {r['wall_s']:6.1f} s end to end "
                f"({r['rows'] / r['wall_s']:,.0f} rows/s; the ingest itself {r['ingest_s']:.1f} s, stages "
                f"{', '.join(f'{k} {v:.1f}' for k, v in r['stage_s'].items() if v >= 0.05)}); driver peak "
                f"{r['peak_rss_mb'].get('driver', 0):,.0f} MiB, workers "
                f"{', '.join(f'{v:,.0f}' for k, v in r['peak_rss_mb'].items() if k != 'driver')} MiB; state "
                f"{r['state_bytes'] / 2**20:,.0f} MiB -> {'met' if r['wall_s'] <= args.fact_target_s else 'NOT met'}",
                flush=True,
            )
            if shards:
                driver = r["peak_rss_mb"].get("driver", 0)
                print(
                    f"    sharded: driver peak {driver:,.0f} MiB (target <= {SHARDED_DRIVER_MIB:,} MiB: "
                    f"{'met' if driver <= SHARDED_DRIVER_MIB else 'NOT met'}); the union loaded in "
                    f"{r['union_load_s']:.1f} s, peak {r['union_peak_mb']:,.0f} MiB",
                    flush=True,
                )
            if r.get("profile"):
                print("    " + "\n    ".join(r["profile"]), flush=True)
    whole = [r for r in results if not r["shards"]]
    same = len({r["state_sha256"] for r in whole} | {r["union_sha256"] for r in results if r["shards"]}) == 1
    slowest = max(r["wall_s"] for r in whole)
    print(
        f"fact rows, {rows:,} over {keys:,} keys, `pmem ingest` end to end: slowest {slowest:.1f} s "
        f"(target <= {args.fact_target_s:.0f} s: {'met' if slowest <= args.fact_target_s else 'NOT met'}); "
        f"the four states and the sharded states' unions byte-identical: {same}"
    )
    return results


#: The longest stream's facts/s may be this much slower than the baseline's (issue 44).
MOONSHOT_SLOWDOWN = 1.5
_MOON_WORKERS = 2


def _moonshot(args: argparse.Namespace, root: Path) -> None:
    """The long fact stream and its baseline, each as a sharded state with parts of ``--part-rows`` rows;
    then the long one killed halfway and resumed, its union compared with the uninterrupted one's."""
    from benchmarks.reader import fact_paths
    from pmem.graph.shards import union_difference
    from pmem.ingest._synthetic import write_fact_stream
    from pmem.ingest._workdir import workdir_of

    runs = {}
    for label, rows, keys in (
        ("baseline", args.moon_base_rows, args.moon_base_keys),
        ("long", args.moon_rows, args.moon_keys),
    ):
        parts = _MOON_WORKERS * max(1, -(-rows // (args.part_rows * _MOON_WORKERS)))
        stream, out = fact_paths(root, rows, keys, args.fact_seed, parts)  # where pmem perf reader reads
        if not stream.exists():
            t0 = time.perf_counter()
            write_fact_stream(stream, rows, keys=keys, seed=args.fact_seed)
            print(
                f"wrote {stream.name} ({stream.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
        argv = _sharded_argv(stream, out, parts)
        _remove(out)
        shutil.rmtree(workdir_of(out), ignore_errors=True)
        t0 = time.perf_counter()
        report = _report_of(subprocess.run(argv, capture_output=True, text=True, check=False), argv)
        wall = time.perf_counter() - t0
        peaks = report["peak_rss_mb"]
        runs[label] = {"rows": rows, "wall_s": wall, "out": out, "stream": stream, "parts": parts}
        print(
            f"  {label:<8} {rows:,} facts over {keys:,} keys, --partitions {_MOON_WORKERS} --shards --parts {parts}: "
            f"{wall:,.1f} s end to end ({rows / wall:,.0f} facts/s; the ingest itself {report['wall_s']:,.1f} s, "
            f"stages {', '.join(f'{k} {v:.1f}' for k, v in report['stage_s'].items() if v >= 0.05)}); driver peak "
            f"{peaks.get('driver', 0):,.0f} MiB, workers "
            f"{', '.join(f'{v:,.0f}' for k, v in peaks.items() if k != 'driver')} MiB; state "
            f"{report['state_bytes'] / 2**20:,.0f} MiB on disk",
            flush=True,
        )
        if label == "baseline":
            _remove(out)  # gigabytes: the long run's disk
        shutil.rmtree(workdir_of(out), ignore_errors=True)
    base, long = runs["baseline"], runs["long"]
    ratio = (base["rows"] / base["wall_s"]) / (long["rows"] / long["wall_s"])
    print(
        f"moonshot: {long['rows']:,} facts at {long['rows'] / long['wall_s']:,.0f} facts/s against the "
        f"{base['rows']:,}-fact baseline's {base['rows'] / base['wall_s']:,.0f}: a fact takes {ratio:.2f}x the baseline's time "
        f"(target <= {MOONSHOT_SLOWDOWN}x: {'met' if ratio <= MOONSHOT_SLOWDOWN else 'NOT met'})",
        flush=True,
    )
    if args.no_kill:
        return
    killed = long["out"].with_name(long["out"].name + "-killed")
    argv = _sharded_argv(long["stream"], killed, long["parts"])
    _remove(killed)
    shutil.rmtree(workdir_of(killed), ignore_errors=True)
    at = _kill_halfway(argv, workdir_of(killed) / "manifest.json", long["rows"] // 2)
    t0 = time.perf_counter()
    report = _report_of(subprocess.run(argv, capture_output=True, text=True, check=False), argv)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    difference = union_difference(killed, long["out"])
    print(
        f"  killed at {at:,} events (a checkpoint's), resumed from {report['resumed_from']:,} in {wall:,.1f} s "
        f"(attempt {report['attempts']}); its union is the uninterrupted one's: "
        f"{'yes' if difference is None else f'NO ({difference})'} (compared part by part in "
        f"{time.perf_counter() - t1:,.1f} s)",
        flush=True,
    )
    _remove(killed)
    shutil.rmtree(workdir_of(killed), ignore_errors=True)
    if difference is not None:
        raise SystemExit(1)


def _sharded_argv(stream: Path, out: Path, parts: int) -> list[str]:
    argv = [sys.executable, "-m", "pmem.cli", "ingest", str(stream), "--out", str(out), "--shards"]
    return [*argv, "--partitions", str(_MOON_WORKERS), "--parts", str(parts), "--no-progress", "--json"]


def _report_of(done: subprocess.CompletedProcess[str], argv: list[str]) -> dict[str, Any]:
    """The JSON report a finished ``pmem ingest --json`` printed."""
    if done.returncode != 0:
        msg = f"{' '.join(argv[2:])} failed ({done.returncode}): {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    report: dict[str, Any] = json.JSONDecoder().raw_decode(done.stdout, done.stdout.index("{"))[0]
    return report


def _kill_halfway(argv: list[str], manifest: Path, events: int) -> int:
    """Run ``argv`` in a session of its own and SIGKILL the whole session's process group once its
    manifest names a checkpoint of at least ``events`` events; the events checkpointed."""
    import os
    import signal

    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        while proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):  # not written yet, or being replaced
                done = json.loads(manifest.read_text())["report"]["events"]
                if done >= events:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return int(done)
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    msg = (
        f"the ingest ended ({proc.returncode}) before a checkpoint held {events:,} events: nothing was killed"
    )
    raise RuntimeError(msg)


#: The driver's peak memory a sharded ingest (``--shards``) is held to, in MiB (issue 33).
SHARDED_DRIVER_MIB = 1024

_UNION_SCRIPT = """
import hashlib, resource, sys, time
from pmem.graph import ProvenanceGraph
t0 = time.perf_counter()
graph = ProvenanceGraph.load(sys.argv[1])
took = time.perf_counter() - t0
print(hashlib.sha256(graph.to_bytes()).hexdigest(), took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def _union_of(out: Path) -> tuple[str, float, float]:
    """The SHA-256 of a sharded state's union (``ProvenanceGraph.load(out).to_bytes()``), the seconds
    ``load`` took and the process's peak MiB, in a child process (its heap is not this one's)."""
    done = subprocess.run(
        [sys.executable, "-c", _UNION_SCRIPT, str(out)], capture_output=True, text=True, check=True
    )
    sha, took, peak = done.stdout.split()
    return sha, float(took), float(peak)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _ingest_command(
    stream: Path, out: Path, partitions: int, args: argparse.Namespace, *, shards: bool = False
) -> dict[str, Any]:
    """One `pmem ingest` in its own process: its report, with the command's wall time (and a profile);
    with ``shards``, also its union's digest, load time and peak memory (:func:`_union_of`)."""
    shutil.rmtree(out.with_name(out.name + ".ingest"), ignore_errors=True)
    _remove(out)
    argv = [sys.executable, "-m", "pmem.cli", "ingest", str(stream), "--out", str(out)]
    argv += ["--partitions", str(partitions), "--no-progress", "--json"]
    if shards:
        argv.append("--shards")
    if args.fact_address:
        argv += ["--address", args.fact_address]
    samples = None
    if args.fact_profile is not None:
        args.fact_profile.mkdir(parents=True, exist_ok=True)
        samples = args.fact_profile / f"{out.name}.txt"
        beside = Path(sys.executable).with_name("py-spy")  # the environment's own, else the one on PATH
        spy = str(beside) if beside.exists() else "py-spy"
        argv = [
            spy,
            "record",
            "--nonblocking",
            "--format",
            "raw",
            "--rate",
            "50",
            "-o",
            str(samples),
            "--",
            *argv,
        ]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        msg = f"pmem ingest {stream.name} --partitions {partitions} failed ({done.returncode}): {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    report, _ = json.JSONDecoder().raw_decode(done.stdout, done.stdout.index("{"))  # py-spy may print after
    union = _union_of(out) if shards else None
    shutil.rmtree(out.with_name(out.name + ".ingest"), ignore_errors=True)  # gigabytes: keep the disk free
    _remove(out)
    return {
        "stream": stream.name,
        "partitions": partitions,
        "shards": shards,
        **(
            {"union_sha256": union[0], "union_load_s": union[1], "union_peak_mb": union[2]}
            if union is not None
            else {}
        ),
        "rows": report["events"] + report["rejects"],
        "wall_s": wall,
        "ingest_s": report["wall_s"],
        "stage_s": report["stage_s"],
        "peak_rss_mb": report["peak_rss_mb"],
        "state_bytes": report["state_bytes"],
        "state_sha256": report["state_sha256"],
        "profile": _profile_lines(samples) if samples is not None and samples.exists() else None,
    }


def _profile_lines(samples: Path, top: int = 12) -> list[str]:
    """py-spy's raw samples (``frame;frame;... count`` per line) summarized: where the driver's time went,
    by function (inclusive, the pmem ones) and by the frame that was running (self)."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in samples.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]  # one entry per function
        for frame in dict.fromkeys(frames):
            if "pmem/" in frame:
                inclusive[frame] = inclusive.get(frame, 0) + n
        own[frames[-1]] = own.get(frames[-1], 0) + n
    if not total:
        return []

    def rows(counts: dict[str, int]) -> list[str]:
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return [f"{100 * n / total:5.1f}%  {frame}" for frame, n in ranked]

    return [
        f"py-spy, {total:,} samples; inclusive (pmem frames):",
        *rows(inclusive),
        "self (the frame running):",
        *rows(own),
    ]


def _replicas(args: argparse.Namespace, root: Path) -> None:

    from pmem.ingest._synthetic import write_synthetic_stream

    stream = write_synthetic_stream(root / "replicas.jsonl", args.replica_events, keys=args.keys, seed=1)
    # logical GPUs: the stand-in replicas are placed exactly as vLLM replicas are (one GPU each)
    with _local_ray(num_gpus=2):
        rates = {n: _extraction_rate(stream, n, args) for n in (1, 2)}
    print(
        f"extraction over stand-in replicas at {args.latency_ms:.0f} ms/call, {args.slots} slots per worker and "
        f"replica, 2 workers, {args.replica_events:,} events: 1 replica {rates[1]:,.0f} events/s, "
        f"2 replicas {rates[2]:,.0f} events/s -> {rates[2] / rates[1]:.2f}x (target >= 1.8x)"
    )


def _extraction_rate(stream: Path, replicas: int, args: argparse.Namespace) -> float:
    """Events/s of the ingest's extraction stage alone: batches fanned out over 2 workers, whose calls
    go to the hosted replicas."""
    from pmem.ingest._pool import WorkerPool
    from pmem.ingest._spec import parse_ingest_config
    from pmem.ingest._stream import read_stream

    spec = parse_ingest_config(
        {
            "models": {
                "agent": {
                    "backend": "vllm",
                    "model": "heuristic",
                    "launcher": "standin",
                    "replicas": replicas,
                    "latency_ms": args.latency_ms,
                    "concurrency": args.slots,
                },
                "embedder": {"backend": "hashing"},
            },
            "ingest": {"cache": False, "concurrency": 64},
        }
    )
    pool = WorkerPool(spec, 2, say=lambda _: None)
    hosted = pool.host_models()
    try:
        pool.start(hosted, None)
        batches = list(read_stream(stream, batch_rows=spec.batch_events))
        return asyncio.run(_fan_out(pool, batches))
    finally:
        pool.stop()


async def _fan_out(pool: Any, batches: list[Any]) -> float:
    await asyncio.gather(*(w.extract.remote([(0, 1, "warm-up", "user", None, None)]) for w in pool.workers))
    t0 = time.perf_counter()
    first = 0
    in_flight: list[Any] = []
    for batch in batches:  # two batches in flight, as the ingest keeps them
        in_flight.append(pool.extract(batch, first))
        first += batch.events.num_rows
        if len(in_flight) == 2:
            await asyncio.gather(*in_flight.pop(0))
    for refs in in_flight:
        await asyncio.gather(*refs)
    return first / (time.perf_counter() - t0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
