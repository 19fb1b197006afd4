"""End-to-end sweeps on the session's Ray cluster, with a real arm over the real model layer."""

from __future__ import annotations

import argparse
import threading
import time
import tomllib
from collections import Counter
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from runner_helpers import TINY, PoisonProxy, config, read, result_keys, runner_pids, tiny_chains_body

import pmem
from pmem._source import source_commit
from pmem.runner import load_config, run_sweep
from pmem.runner._cli_sweep import add_arguments
from pmem.runner._cli_sweep import run as cli_run

BODY = f"""
arms = ["{TINY}"]
[run]
runners = 2
in_flight = 4
batch = 4
flush_s = 0.2
progress_s = 1
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = [1, 2]
cases = 5
[[benchmarks]]
name = "alfworld-revision"
subset = "retraction"
d = 0
cases = 4
"""


def test_sweep_artifacts_then_resume_skips_everything(ray_cluster, tmp_path: Path) -> None:
    spec = load_config(config(tmp_path, BODY))
    res = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    run = res.run_dir
    assert (res.total, res.completed, res.failed) == (14, 14, 0)
    assert run.name == res.run_id and res.run_id.startswith("t-")
    keys = result_keys(run)
    assert len(keys) == 10 + 4 * 2 and len(set(keys)) == len(keys)
    results = read(run, "results")
    # the tiny arm commits every move, so it answers the chains correctly
    chains = [
        c
        for c, s in zip(
            results.column("correct").to_pylist(), results.column("subset").to_pylist(), strict=True
        )
        if s == "chains"
    ]
    assert chains and all(chains)
    assert set(results.column("L").to_pylist()) == {1, 2, None}
    assert set(results.column("question_type").to_pylist()) == {
        "current",
        "before_retraction",
        "after_retraction",
    }
    hist = read(run, "histories")
    assert Counter(hist.column("status").to_pylist()) == {"complete": 14}
    # states load back as graphs, one per history
    paths = hist.column("state_path").to_pylist()
    g = pmem.ProvenanceGraph.load(run / paths[0])
    assert g.frontier()
    # and the report reads every one of them as flat tables, with Polars
    from pmem.report import build_report

    build_report(run)
    kept = pl.read_csv(run / "report" / "tables" / "state_contents.csv")
    arms = Counter(hist.column("arm").to_pylist())
    assert dict(zip(kept["arm"], kept["histories"], strict=True)) == arms
    assert (kept["versions/history"] > 0).all()
    assert kept.select(pl.col("^.* %$")).null_count().sum_horizontal().item() == 0
    assert all(b > 0 for b in hist.column("state_bytes").to_pylist())
    reqs = read(run, "requests")
    assert reqs.num_rows == sum(hist.column("model_calls").to_pylist()) > 0
    assert set(reqs.column("purpose").to_pylist()) == {"extract", "answer"}
    assert read(run, "writes").num_rows == sum(hist.column("facts").to_pylist())
    assert "config_hash" in (run / "run.toml").read_text()
    # the checkout's commit the sweep ran (None, left out, outside a git checkout), and the report says it
    recorded = tomllib.loads((run / "run.toml").read_text())["run"]
    assert recorded.get("commit") == source_commit()
    header = (run / "report" / "report.md").read_text()
    assert f"by commit {source_commit() or 'not recorded'}" in header and "- **report**: written 20" in header
    parts = sorted(p.name for p in (run / "results").iterdir())

    again = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    assert again.run_dir == run
    assert (again.skipped, again.completed, again.calls) == (14, 14, 0)
    assert sorted(p.name for p in (run / "results").iterdir()) == parts


def test_limit_runs_first_n_per_subset(ray_cluster, tmp_path: Path) -> None:
    spec = load_config(config(tmp_path, BODY))
    res = run_sweep(spec, out=tmp_path / "runs", limit=2, progress_enabled=False)
    hist = read(res.run_dir, "histories")
    ids = sorted(hist.column("history_id").to_pylist())
    assert res.total == 6 and len(ids) == 6
    assert ids == sorted(
        [
            "alfworld-revision/chains/L1/case000",
            "alfworld-revision/chains/L1/case001",
            "alfworld-revision/chains/L2/case000",
            "alfworld-revision/chains/L2/case001",
            "alfworld-revision/retraction/d0/case000",
            "alfworld-revision/retraction/d0/case001",
        ]
    )


def test_permanently_failing_history_is_recorded_and_sweep_goes_on(ray_cluster, tmp_path: Path) -> None:
    from runner_plugins import POISON

    from pmem.models.server import ServerThread

    with ServerThread() as srv, PoisonProxy(srv.url, POISON) as proxy:
        body = f"""
arms = ["{TINY}"]
[run]
runners = 1
in_flight = 4
flush_s = 0.2
[[benchmarks]]
name = "runner_plugins:poisoned"
n = 5
poison_at = 2
"""
        p = config(tmp_path, body, name="poison")
        text = p.read_text().replace(
            '[models.agent]\nbackend = "heuristic"',
            f'[models.agent]\nbackend = "openai"\nurl = "{proxy.url}"\nmodel = "heuristic"\n'
            "max_retries = 1\nbackoff_s = 0.01\ntimeout_s = 10",
        )
        p.write_text(text)
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args([str(p), "--out", str(tmp_path / "runs"), "--quiet"])
        assert cli_run(args) == 0
        args.fail_on_error = True
        assert cli_run(args) == 1  # the re-run retries the failed history, which fails again
        assert proxy.poisoned >= 2
    run = next((tmp_path / "runs").iterdir())
    hist = read(run, "histories")
    status = dict(zip(hist.column("history_id").to_pylist(), hist.column("status").to_pylist(), strict=True))
    assert len(status) == 5  # one row per history, even after the retry
    failed = [h for h, s in status.items() if s == "failed"]
    assert failed == ["alfworld-revision/chains/L2/case002"]
    err = [e for e in hist.column("error").to_pylist() if e]
    assert len(err) == 1 and "500" in err[0]
    assert {h for h, *_ in result_keys(run)} == set(status) - set(failed)
    # both failed runs left their calls in requests/, marked, the poisoned request's 500 among them
    evidence = sorted((run / "requests").glob("failed-*.parquet"))
    assert [p.name.split("-", 2)[2] for p in evidence] == ["0.2.parquet", "0.parquet"]
    for p in evidence:
        t = pq.read_table(p)
        assert set(t.column("history_id").to_pylist()) == set(failed)
        assert set(t.column("history_failed").to_pylist()) == {True}
        assert 500 in t.column("http_status").to_pylist()


def test_runner_killed_mid_run_is_replaced_without_duplicates(ray_cluster, tmp_path: Path) -> None:
    ray = ray_cluster
    hold = tmp_path / "held.pid"
    body = tiny_chains_body(cases=16).replace(
        "event_delay_s = 0.01", f'event_delay_s = 0.01\nhold_once = "{hold}"'
    )
    spec = load_config(config(tmp_path, body, name="kill"))
    killed: list[int] = []

    def killer() -> None:
        # the runner holding the first history waits (uncommitted) until it is killed
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (hold.exists() and hold.read_text()):
            time.sleep(0.05)
        pid = int(hold.read_text())
        run_dir = next((tmp_path / "runs").glob("kill-*"))
        for (name, namespace), runner_pid in runner_pids(ray, run_dir).items():
            if runner_pid == pid:
                ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
                killed.append(pid)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    res = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    t.join(5)
    assert killed, "the runner was not killed mid-run"
    assert (res.completed, res.failed) == (16, 0)
    assert res.redone >= 1
    keys = result_keys(res.run_dir)
    assert len(keys) == 16 and len(set(keys)) == 16
    hist = read(res.run_dir, "histories")
    assert len(set(hist.column("unit_id").to_pylist())) == hist.num_rows == 16
    assert not any((res.run_dir / "_staging").iterdir())


def test_judging_pass_fills_verdicts_and_is_cached(ray_cluster, tmp_path: Path) -> None:
    body = f"""
arms = ["{TINY}"]
[run]
runners = 1
flush_s = 0.1
[[benchmarks]]
name = "runner_plugins:judged"
n = 3
[models.judge]
backend = "heuristic"
"""
    spec = load_config(config(tmp_path, body, name="judge"))
    res = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    assert res.judged == 3
    results = read(res.run_dir, "results")
    assert results.column("correct").to_pylist() == [True, True, True]
    assert set(results.column("judge_model").to_pylist()) == {"heuristic"}
    j = read(res.run_dir, "judgments")
    assert j.num_rows == 3 and all(j.column("verdict").to_pylist())
    # a verdict and a superseded/current extraction (the question names its evidence session) each
    assert read(res.run_dir, "requests").column("purpose").to_pylist().count("judge") == 6
    assert "superseded" in j.column_names
    again = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    assert again.judged == 0  # verdicts are kept: nothing is asked twice
    assert read(res.run_dir, "judgments").num_rows == 3
    pred_only = run_sweep(spec, out=tmp_path / "runs", predict_only=True, progress_enabled=False)
    assert pred_only.judged == 0


def test_a_worker_killed_for_memory_is_classified_as_a_runners_death() -> None:
    """Ray reports a worker its memory monitor killed as OutOfMemoryError on the calls in flight, not as
    an actor's death: before, each history was recorded as failed (67 of an accuracy run's in a minute)
    while the runner came back under them. Now it is classified as a runner's death, which the sweep
    replaces and reruns (that path: test_runner_killed_mid_run_is_replaced_without_duplicates). A real
    out-of-memory kill cannot be made safely on the shared test cluster, so this checks the classification."""
    import ray.exceptions as rex

    from pmem.runner._schedule import is_runner_death as _is_actor_death

    assert _is_actor_death(rex.OutOfMemoryError("1 worker was killed due to the node running low on memory"))
    assert _is_actor_death(rex.WorkerCrashedError())
    assert _is_actor_death(rex.ActorDiedError())
    assert not _is_actor_death(RuntimeError("the history's own failure"))
