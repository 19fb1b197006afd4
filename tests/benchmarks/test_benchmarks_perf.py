"""The speed benchmarks run end to end at a small size through `pmem perf NAME`, and each is runnable as
``python -m benchmarks.NAME`` with the same options. No timing is asserted (the machine may be shared)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.cli import PERF, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(PERF))
def test_each_benchmark_is_a_module_of_benchmarks_with_its_own_entry(name: str) -> None:
    module = PERF[name][0]
    assert module == f"benchmarks.{name}"
    proc = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"python -m benchmarks.{name}" in proc.stdout or f"pmem perf {name}" in proc.stdout


def test_perf_bench(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "bench", "--repeat", "1"]) in (0, 1)
    out = capsys.readouterr().out
    assert "36,664 events" in out and "x baseline" in out


def test_perf_arms_prints_both_arms(capsys: pytest.CaptureFixture[str]) -> None:
    main(["perf", "arms", "--subset", "sh_6k", "--passes", "1"])
    out = capsys.readouterr().out
    assert "pmem-oracle" in out and "raw" in out and "targets:" in out


def test_perf_command_prints_both_timings(capsys: pytest.CaptureFixture[str]) -> None:
    main(["perf", "report", "--results", "20000", "--requests", "60000", "--repeat", "1"])
    out = capsys.readouterr().out
    assert "result rows" in out and re.search(r"aggregations \(all \d+ tables", out)
    assert "plain pyarrow read of the same files" in out


def test_perf_ingest_measures_bulk_apply_in_a_child_process(capsys: pytest.CaptureFixture[str]) -> None:
    """At the issue's size the bulk run holds about 10 GB, which would stay with the allocator of the
    process that then reports the ingest driver's peak memory."""
    from benchmarks.ingest import _bulk

    result = _bulk(argparse.Namespace(bulk_events=2000, bulk_keys=100))
    assert result["pid"] != os.getpid()
    assert result["identical"] == 1.0 and result["rows"] == 4000
    assert "2,000 observation+operation pairs over 100 keys" in capsys.readouterr().out


def test_the_bulk_profile_splits_column_work_from_the_rest() -> None:
    """``python -m benchmarks.bulk --profile``: the C-level column work is found, and is part of the total."""
    from benchmarks.bulk import profile

    result = profile(3000, 300, batch_rows=2000)
    assert result["batches"] == 3  # 6,000 rows
    assert 0 < result["column_s"] < result["total_s"]


@pytest.mark.slow
def test_perf_ingest_partitions_at_a_small_size() -> None:
    """Its own embedded Ray, private to the benchmark: Ray's token notice is no setting of the user's."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.ingest",
            "--only",
            "partitions",
            "--events",
            "400",
            "--keys",
            "40",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "partitioned ingest, 400 events over 40 keys" in proc.stdout
    assert "identical bytes: True" in proc.stdout
    assert "Token authentication" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
