"""`pmem perf client` (``python -m benchmarks.client``) runs end to end at a small size and reports what it
measured: no timing is asserted here (the machine may be shared), only that each figure is there and
consistent with the ideal it is compared to."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POINTS = [("20", 64, 3200), ("200", 256, 1280)]


def _figures(out: str) -> None:
    assert re.search(r"heuristic: [\d,]+ calls/s in process", out), out
    for latency, workers, ideal in POINTS:
        point = f"{latency} ms x {workers} workers"
        for label in (rf"openai client, {point}, run 1", rf"baseline, bare aiohttp session, {point}"):
            match = re.search(rf"{label}: ([\d,]+) req/s; ideal {ideal:,} req/s; ratio ([\d.]+)", out)
            assert match, (label, out)
            rate, ratio = float(match.group(1).replace(",", "")), float(match.group(2))
            assert rate > 0 and abs(ratio - rate / ideal) < 0.002
        target = "target ratio >= 0.97" if latency == "200" else "no target"
        assert re.search(rf"openai client, {point}: best .* median .*; {target}", out), out


def _run(module_and_args: list[str]) -> str:
    """What ``python -m <module> <args>`` prints, run from the repository's root."""
    command = [sys.executable, "-m", *module_and_args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=True, cwd=ROOT).stdout


def test_client_benchmark_reports_both_points_and_the_baseline() -> None:
    out = _run(
        [
            "benchmarks.client",
            "--requests",
            "320",
            "--repeat",
            "1",
            "--heuristic-calls",
            "300",
        ]
    )
    _figures(out)


def test_pmem_perf_client_runs_the_benchmark() -> None:
    """The CLI entry imports the benchmark only when asked; it takes the same options."""
    from pmem.cli import PERF

    assert PERF["client"][0] == "benchmarks.client"
    out = _run(
        [
            "pmem.cli",
            "perf",
            "client",
            "--requests",
            "256",
            "--repeat",
            "1",
            "--heuristic-calls",
            "100",
            "--latency-ms",
            "20",
            "--concurrency",
            "64",
            "--no-aiohttp",
        ]
    )
    assert re.search(r"openai client, 20 ms x 64 workers, run 1: [\d,]+ req/s; ideal 3,200 req/s", out), out
    assert "baseline" not in out and "200 ms" not in out


def test_pmem_perf_client_without_the_benchmarks_package_says_so(tmp_path) -> None:
    """Outside a source checkout (no importable ``benchmarks``) the command fails with one clear line."""
    code = (
        "import sys; sys.modules['benchmarks'] = None; from pmem.cli import main; "
        "sys.exit(main(['perf', 'client']))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "source checkout" in lines[0] and "Traceback" not in res.stderr, res.stderr
