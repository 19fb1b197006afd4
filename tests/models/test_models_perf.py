"""`pmem perf client` runs end to end at a small size and reports what it measured."""

from __future__ import annotations

import re
import subprocess
import sys


def test_perf_client_reports_both_transports_against_the_ideal() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pmem.models._perf", "--requests", "320", "--repeat", "1", "--heuristic-calls", "300"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    heuristic = re.search(r"heuristic: ([\d,]+) calls/s", out)
    ours = re.search(r"openai client run 1: ([\d,]+) req/s .* ideal 3,200 req/s; ratio ([\d.]+)", out)
    reference = re.search(r"bare aiohttp session.*: ([\d,]+) req/s \(ratio ([\d.]+)\)", out)
    assert heuristic and ours and reference, out
    for match in (ours, reference):
        rate, ratio = float(match.group(1).replace(",", "")), float(match.group(2))
        assert rate > 0 and abs(ratio - rate / 3200) < 0.002
