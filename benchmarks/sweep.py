"""`pmem perf sweep`: 5,000 ALFWorld-Revision histories through P-Mem on the local Ray, 1 vs 2 runners.

Prints, from one invocation on one embedded Ray:
- the sweep with one runner and with two (same config, separate run directories), their wall times and
  the speed-up, and whether both left the same artifacts (same result keys and predictions);
- a sweep whose agent calls go to the local OpenAI-compatible server with a fixed 20 ms latency, and
  how busy it kept the server: calls x latency / (wall x capacity), where capacity is the number of
  requests the sweep may have in flight at the server (like a vLLM replica's batch slots).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cases", type=int, default=625, help="cases per L (L = 1..8): 625 -> 5,000 histories"
    )
    parser.add_argument("--arm", default="pmem", help="arm to run (default: pmem, the commit path)")
    parser.add_argument("--in-flight", type=int, default=64, help="histories in flight per runner")
    parser.add_argument("--server-cases", type=int, default=50, help="cases per L for the server part (x8)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="the server's latency per call")
    parser.add_argument(
        "--capacity",
        default="8,16",
        help="requests the server serves at once (its batch slots), comma-separated to try several",
    )
    parser.add_argument(
        "--skip-server",
        action="store_true",
        help="only the 1- vs 2-runner sweep; skip the server-slot measurement",
    )
    parser.add_argument("--keep", default=None, help="keep the run directories under this folder")


def _spec(cases: int, arm: str, runners: int, in_flight: int, agent: dict[str, Any] | None = None) -> Any:
    from pmem.runner import parse_config

    return parse_config(
        {
            "name": "perf-sweep",
            "arms": [arm],
            "run": {
                "runners": runners,
                "in_flight": in_flight,
                "batch": 256,
                "flush_s": 2.0,
                "cache": False,
                "progress_s": 30.0,
            },
            "models": {"agent": agent or {"backend": "heuristic"}, "embedder": {"backend": "hashing"}},
            "benchmarks": [
                {"name": "alfworld-revision", "subset": "chains", "L": list(range(1, 9)), "cases": cases}
            ],
        },
        source="perf",
    )


def _keys(run_dir: Path) -> list[tuple[str, str, str, str]]:
    import polars as pl

    df = pl.read_parquet(
        sorted((run_dir / "results").glob("*.parquet")),
        columns=["history_id", "arm", "question_id", "prediction"],
    )
    return sorted(df.iter_rows())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace) -> int:
    import ray

    from pmem.runner import run_sweep

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pmem-perf-sweep-"))
    root.mkdir(parents=True, exist_ok=True)
    from pmem.runner._connect import connect

    started = connect(None)  # the embedded mode's own local Ray, never a cluster found on the machine
    cpus = int(ray.cluster_resources().get("CPU", 1))
    n_hist = 8 * args.cases
    print(
        f"perf sweep: {n_hist:,} ALFWorld-Revision chain histories (L=1..8) through '{args.arm}', heuristic agent, "
        f"hashing embedder, local Ray with {cpus} CPUs, {args.in_flight} histories in flight per runner"
    )
    times: dict[int, float] = {}
    dirs: dict[int, Path] = {}
    try:
        for runners in (1, 2):
            spec = _spec(args.cases, args.arm, runners, args.in_flight)
            t0 = time.perf_counter()
            res = run_sweep(spec, out=root / f"r{runners}", progress_enabled=False)
            wall = time.perf_counter() - t0
            times[runners], dirs[runners] = res.exec_s, res.run_dir
            print(
                f"  {runners} runner(s): {res.completed:,} histories complete, {res.failed} failed, "
                f"{res.calls:,} model calls; sweep {res.exec_s:.1f} s ({res.completed / max(res.exec_s, 1e-9):.0f} "
                f"histories/s), with start-up {wall:.1f} s"
            )
        same = _keys(dirs[1]) == _keys(dirs[2])
        speedup = times[1] / max(times[2], 1e-9)
        print(
            f"  speed-up, 2 runners vs 1: {speedup:.2f}x (target >= 1.5x); same artifacts: {same}; "
            f"2-runner sweep {times[2]:.1f} s (target <= 120 s)"
        )
        if not args.skip_server:
            _server_part(args, root)
    finally:
        if started:
            ray.shutdown()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def _server_part(args: argparse.Namespace, root: Path) -> None:
    for capacity in (int(c) for c in str(args.capacity).split(",") if c.strip()):
        _server_run(args, root, capacity)


def _server_run(args: argparse.Namespace, root: Path, capacity: int) -> None:
    import json

    from pmem.runner import run_sweep

    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.capserver",
            "--port",
            str(port),
            "--latency-ms",
            str(args.latency_ms),
            "--capacity",
            str(capacity),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        runners = 2
        # offer twice the server's slots, as a sweep against a real replica would (it queues the rest)
        agent = {"backend": "openai", "url": url + "/v1", "model": "heuristic", "concurrency": capacity}
        spec = _spec(args.server_cases, args.arm, runners, max(args.in_flight, 4 * capacity), agent)
        res = run_sweep(spec, out=root / f"server-{capacity}", progress_enabled=False)
        acct = json.loads(urllib.request.urlopen(url + "/_perf/busy", timeout=10).read())
        capacity_rps = capacity / (args.latency_ms / 1000.0)
        print(
            f"  local server at {args.latency_ms:.0f} ms/request with {capacity} slots ({capacity_rps:.0f} requests/s "
            f"at most): {int(acct['requests']):,} calls from {res.completed:,} histories in {acct['window_s']:.1f} s "
            f"= {acct['requests'] / acct['window_s']:.0f} requests/s ({100 * acct['requests'] / acct['window_s'] / capacity_rps:.1f}% "
            f"of the ideal) -> server slots {100 * acct['busy']:.1f}% busy (target >= 90%)"
        )
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("sweep", __doc__, add_arguments, run))
