"""Erasure in a run directory (issue 29): one command erases an evidence of one history from every copy
the run keeps, the run stays whole (report, resume), and the erased statement does not come back."""

from __future__ import annotations

import json
from pathlib import Path

from runner_helpers import config
from runner_plugins import SECRET, SECRET_VALUE

from pmem.cli import main
from pmem.report import build_report
from pmem.runner import load_config, run_sweep

BODY = """
arms = ["pmem", "raw"]
[run]
runners = 1
flush_s = 0.1
[[benchmarks]]
name = "runner_plugins:secret"
"""


def _holding(folder: Path, needles: list[str]) -> list[str]:
    return [
        str(p.relative_to(folder))
        for p in sorted(folder.rglob("*"))
        if p.is_file() and any(n.encode() in p.read_bytes() for n in needles)
    ]


def test_erase_in_a_run_reaches_every_copy_and_the_run_stays_whole(
    ray_cluster, tmp_path: Path, capsys
) -> None:
    spec = load_config(config(tmp_path, BODY, name="secret"))
    res = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    assert res.failed == 0
    run = res.run_dir
    build_report(run)
    held = _holding(run, [SECRET, SECRET_VALUE])
    assert any(h.startswith("states/pmem/") for h in held) and any(h.startswith("results/") for h in held)
    assert any(h.startswith("cache/") for h in held)

    assert main(["erase", str(run), "e0", "--history", "secret/0"]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["changed"]["pmem"] == {"zorbling_1.location": [SECRET_VALUE, None]}
    assert any("results/" in c for c in receipt["cleaned"]) and any(
        "responses.sqlite" in c for c in receipt["cleaned"]
    )
    assert _holding(run, [SECRET, SECRET_VALUE]) == []

    # the run is whole: its commit records match the files, so a resume runs nothing again (a dropped
    # batch would run the history again and state the fact again), and the report builds
    again = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    assert again.skipped == again.total and again.calls == 0
    build_report(run)
    assert _holding(run, [SECRET, SECRET_VALUE]) == []
    assert main(["erase", str(run), "e0", "--history", "secret/0"]) == 2  # erased already: one line
    assert "erased already" in capsys.readouterr().err
