"""`pmem bench list|verify|coverage` and `pmem perf bench` print what the issue asks for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pmem.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "longmemeval_synthetic.json"


def test_bench_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "list"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"alfworld-revision\s+chains\s+560\s+560", out)
    assert re.search(r"alfworld-revision\s+retraction\s+280\s+560", out)
    assert re.search(r"alfworld-revision\s+conflict\s+140\s+280", out)
    assert re.search(r"factconsolidation\s+mh_262k\s+1\s+100", out)
    assert re.search(r"longmemeval\s+oracle\s+-\s+-\s+not run: data not provided", out)
    assert re.search(r"locomo\s+locomo10\s+10\s+1,986\s+single-hop 841, adversarial 446, temporal 321", out)
    assert "GENERATED" in out and "MemoryAgentBench" in out and "CC BY-NC 4.0" in out


def test_bench_verify(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "verify"]) == 0
    out = capsys.readouterr().out
    assert (
        "all files verified" in out
        and len(re.findall(r"ok   factconsolidation/\w+: [\d,]+ facts, 100 questions", out)) == 8
    )
    assert "ok   locomo: 10 conversations, 5,882 turns, 1,986 questions" in out
    assert main(["bench", "verify", "--longmemeval", str(FIXTURE)]) == 1
    assert "FAIL longmemeval" in capsys.readouterr().out


def test_bench_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "coverage"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(
        r"^(sh|mh)_(\d+k)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)%\s+([\d,]+)\s+([\d,]+) \(\d+%\)\s+(\S+)",
        out,
        re.MULTILINE,
    )
    assert len(rows) == 8
    for kind, _, _, _, cov, _, _, den in rows:
        assert float(cov) >= 99.0
        assert (den == "n/a") if kind == "mh" else re.fullmatch(r"\d+/100", den)
    assert "coverage target 99%: met" in out
