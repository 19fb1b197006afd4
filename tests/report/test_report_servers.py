"""The servers' access logs against requests/: every request a server answered is one row."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl

from benchmarks.synthetic import write_fixture_run
from pmem.report._load import open_run
from pmem.report._metrics import compute
from pmem.rundir import LOGS

#: the line uvicorn writes for an answered request (as llama-cpp-python's and vLLM's servers log it)
LINE = 'INFO:     127.0.0.1:{port} - "POST /v1/chat/completions HTTP/1.1" {status} {reason}\n'
HEALTH = 'INFO:     127.0.0.1:52822 - "GET /v1/models HTTP/1.1" 200 OK\n'


def _write_logs(run: Path, statuses: list[int]) -> None:
    logs = run / LOGS
    logs.mkdir(exist_ok=True)
    half = len(statuses) // 2
    for i, part in enumerate((statuses[:half], statuses[half:])):
        lines = [HEALTH] + [LINE.format(port=30000 + n, status=s, reason="OK") for n, s in enumerate(part)]
        (logs / f"agent_m-replica-{i}.log").write_text("".join(lines))
    (logs / "sweep-progress.log").write_text(LINE.format(port=1, status=200, reason="OK"))  # not a server's


def test_the_servers_access_lines_are_counted_against_the_rows_per_status(tmp_path: Path) -> None:
    run = write_fixture_run(
        tmp_path / "run", seed=5, n_alf=2, fc_questions=4, run_id="run-s", agent_backend="llamacpp"
    )
    req = pl.read_parquet(run / "requests")
    statuses = [s for s in req["http_status"].to_list() if s is not None]
    assert statuses, "the fixture's requests carry no http_status"
    _write_logs(run, statuses)
    table = compute(open_run(run)).tables["server_requests"]
    got = {r["http_status"]: (r["received"], r["recorded"]) for r in table.data.iter_rows(named=True)}
    assert got == {s: (n, n) for s, n in Counter(statuses).items()}
    assert "every request the servers answered is one requests/ row" in table.footer[0]
    assert f"{len(statuses):,} requests received" in table.footer[0]

    # a request a server answered that the harness did not record is a difference, named
    _write_logs(run, [*statuses, 200])
    table = compute(open_run(run)).tables["server_requests"]
    assert "+1 requests the servers answered are not requests/ rows" in table.footer[0]


def test_a_run_without_server_logs_says_so_instead_of_counting_zero(tmp_path: Path) -> None:
    run = write_fixture_run(tmp_path / "run", seed=6, n_alf=2, fc_questions=4, run_id="run-t")
    table = compute(open_run(run)).tables["server_requests"]
    assert table.empty and any("No server log" in n for n in table.notes)
