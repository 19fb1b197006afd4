"""`pmem ingest` end to end on the session's Ray: same bytes as sequential ingestion for any number of
partitions, resumable after SIGKILL without repeated model calls, bad rows named, nothing half-written."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pmem.graph import ProvenanceGraph
from pmem.ingest import IngestSpec, ResumeError, StreamError, ingest, ingest_sequential, parse_ingest_config
from pmem.ingest._synthetic import write_synthetic_stream
from pmem.ingest._workdir import workdir_of

REPO = Path(__file__).resolve().parents[2]
SMALL = {"batch_events": 64, "checkpoint_every": 128}


def _config(
    tmp_path: Path, name: str = "ingest.toml", embedder_dim: int = 1024, **ingest_options: object
) -> Path:
    options = {**SMALL, **ingest_options}
    lines = [
        "[models.agent]",
        'backend = "heuristic"',
        "[models.embedder]",
        'backend = "hashing"',
        f"dim = {embedder_dim}",
        "[ingest]",
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in options.items()]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _request_rows(out: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for p in sorted((workdir_of(out) / "requests").glob("*.parquet")):
        rows.extend(pq.read_table(p).to_pylist())
    return rows


def test_any_partition_count_gives_the_bytes_of_sequential_ingestion(ray_cluster, tmp_path: Path) -> None:
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 700, keys=80, seed=3)
    cfg = _config(tmp_path)
    reference = ingest_sequential(stream, config=cfg).to_bytes()
    stats = ProvenanceGraph.from_bytes(reference).stats()
    # the stream exercises the write path: every operation type but reject shows up
    assert all(stats[f"op_{op}"] > 0 for op in ("accept", "contest", "revoke", "resolve", "noop")), stats
    for partitions in (1, 3):
        out = tmp_path / f"state-{partitions}.arrow"
        report = ingest(stream, out, config=cfg, partitions=partitions, progress=False)
        assert out.read_bytes() == reference, f"--partitions {partitions} differs from sequential ingestion"
        assert report.events == 700 and report.rejects == 0
        assert report.graph == stats
        assert report.facts == 700  # one template fact per row
        assert report.calls["extract"]["calls"] == 700
        assert report.calls["annotate"]["calls"] == 700
        assert set(report.stage_s) == {"read", "extract", "route", "commit", "merge", "checkpoint", "build"}
        # the state opens with the core's loader and `pmem inspect`
        assert ProvenanceGraph.load(out).stats() == stats
        shown = subprocess.run(
            [sys.executable, "-m", "pmem.cli", "inspect", str(out)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "location" in shown.stdout and "chairperson" in shown.stdout
        # every request row names the stream row it served
        rows = _request_rows(out)
        assert rows and all(str(r["history_id"]).startswith("row:") for r in rows)
        assert {r["arm"] for r in rows} == {"ingest"}
        # the report's counts by purpose are those of the request rows
        totals: dict[str, dict[str, int]] = {}
        for r in rows:
            t = totals.setdefault(str(r["purpose"]), dict.fromkeys(report.calls["extract"], 0))
            t["calls"] += 1
            t["cached"] += int(bool(r["cached"]))
            t["prompt_tokens"] += int(r["prompt_tokens"])
            t["completion_tokens"] += int(r["completion_tokens"])
        assert report.calls == totals


@pytest.mark.parametrize("shards", [False, True])
def test_the_response_cache_is_one_file_when_the_ingest_returns(
    ray_cluster, tmp_path: Path, shards: bool
) -> None:
    """Every process closes its cache connections before ingest returns: its write-ahead log is folded
    in then, not whenever a garbage collector or a killed worker gets to it (an erasure that lists the
    files holding a text saw ``cache.sqlite-wal`` vanish between listing and erasing)."""
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 60, keys=10, seed=4)
    out = tmp_path / ("state" if shards else "state.arrow")
    ingest(stream, out, config=_config(tmp_path), partitions=2, progress=False, shards=shards)
    work = workdir_of(out)
    assert (work / "cache.sqlite").is_file()
    assert sorted(p.name for p in work.glob("cache.sqlite*")) == ["cache.sqlite"]


def test_a_rerun_of_a_complete_ingest_does_nothing_and_a_grown_stream_continues(
    ray_cluster, tmp_path: Path
) -> None:
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 300, keys=40, seed=5)
    # an embedder other than the registry's own: a resume must score new keys with its vectors
    cfg = _config(tmp_path, embedder_dim=512)
    out = tmp_path / "state.arrow"
    first = ingest(stream, out, config=cfg, progress=False)
    again = ingest(stream, out, config=cfg, progress=False)
    assert again.state_sha256 == first.state_sha256 and again.attempts == first.attempts
    # a log that grew: only the new rows are ingested, and the state is that of the whole stream
    more = (
        # new keys arrive after the resume, so they are scored against the restored registry
        write_synthetic_stream(tmp_path / "more.jsonl", 500, keys=90, seed=6).read_text().splitlines()[300:]
    )
    with open(stream, "a") as f:
        f.write("\n".join(more) + "\n")
    grown = ingest(stream, out, config=cfg, progress=False)
    assert grown.resumed_from == 300 and grown.events == 500
    assert out.read_bytes() == ingest_sequential(stream, config=cfg).to_bytes()
    # the report counts the whole stream's calls: the checkpoint's and this attempt's
    assert grown.calls["extract"]["calls"] == 500 and grown.facts == 500


def test_a_key_soft_identity_merged_routes_to_its_canonical_key_whenever_it_recurs(
    ray_cluster, tmp_path: Path
) -> None:
    texts = [
        "1. The chairperson of Company 7 is Ada Lovelace.",
        "2. The current chairperson of Company 7 is Grace Hopper.",  # merged into the first key
        "3. The chairperson of Company 9 is Alan Turing.",
        "4. The current chairperson of Company 7 is Edsger Dijkstra.",  # the merged key again
    ]
    stream = tmp_path / "s.jsonl"
    stream.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = _config(tmp_path, batch_events=2)  # the recurrence arrives in a later batch too
    out = tmp_path / "state.arrow"
    report = ingest(stream, out, config=cfg, partitions=2, progress=False)
    assert report.calls["identity"]["calls"] >= 1
    graph = ProvenanceGraph.load(out)
    assert sorted(graph.keys()) == ["company_7.chairperson", "company_9.chairperson"]
    assert graph.head_value("company_7.chairperson") == "Edsger Dijkstra"
    assert out.read_bytes() == ingest_sequential(stream, config=cfg).to_bytes()


def test_the_reported_driver_peak_is_the_ingests_not_the_processs(ray_cluster, tmp_path: Path) -> None:
    """A library call in a long-lived process: memory the caller used before is not the ingest's peak."""
    if sys.platform != "linux":
        pytest.skip("the peak is counted afresh per ingest only where the system allows it (Linux)")
    block = b"\x01" * (1536 * 2**20)  # written, so resident: the process's peak is now above it
    del block
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 60, keys=10, seed=2)
    report = ingest(stream, tmp_path / "state.arrow", config=_config(tmp_path), progress=False)
    assert 0 < report.peak_rss_mb["driver"] < 1536, report.peak_rss_mb


def test_a_checkpoint_of_another_config_or_stream_is_refused(ray_cluster, tmp_path: Path) -> None:
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 150, keys=20, seed=1)
    out = tmp_path / "state.arrow"
    ingest(stream, out, config=_config(tmp_path), progress=False)
    other = _config(tmp_path, "other.toml", annotate="controller")
    with pytest.raises(ResumeError, match="models or write options differ"):
        ingest(stream, out, config=other, progress=False)
    stream.write_text(stream.read_text().replace("Update", "Update", 1).replace("apple", "pear", 1))
    with pytest.raises(ResumeError, match="rows already ingested differ"):
        ingest(stream, out, config=_config(tmp_path), progress=False)


def test_a_bad_row_is_named_nothing_is_half_written_and_the_fixed_stream_resumes(
    ray_cluster, tmp_path: Path
) -> None:
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 400, keys=50, seed=2)
    lines = stream.read_text().splitlines()
    good_line = lines[299]
    lines[299] = '{"source": "observer"}'  # line 300: no text
    stream.write_text("\n".join(lines) + "\n")
    cfg = _config(tmp_path)
    out = tmp_path / "state.arrow"
    with pytest.raises(StreamError, match=r"s\.jsonl: line 300: field 'text' is missing"):
        ingest(stream, out, config=cfg, progress=False)
    assert not out.exists()
    manifest = json.loads((workdir_of(out) / "manifest.json").read_text())
    # everything before the bad row's batch is durable; nothing of it or after it is
    assert manifest["position"]["row"] == 256 and manifest["report"]["events"] == 256
    checkpoint = ProvenanceGraph.load(workdir_of(out) / manifest["checkpoint"])
    assert checkpoint.stats()["evidence"] == 256

    lines[299] = good_line
    stream.write_text("\n".join(lines) + "\n")
    report = ingest(stream, out, config=cfg, progress=False)
    assert report.resumed_from == 256 and report.events == 400 and report.attempts == 2
    assert out.read_bytes() == ingest_sequential(stream, config=cfg).to_bytes()


def test_skip_bad_counts_and_lists_the_rejects(ray_cluster, tmp_path: Path) -> None:
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 200, keys=30, seed=4)
    lines = stream.read_text().splitlines()
    lines[9] = '{"text": 5}'
    lines[99] = '{"text": "ok", "time": ["2026"]}'
    stream.write_bytes(("\n".join(lines) + "\n").encode() + b'{"text": "cut off')
    out = tmp_path / "state.arrow"
    cfg = _config(tmp_path)
    report = ingest(stream, out, config=cfg, skip_bad=True, progress=False)
    assert (report.events, report.rejects) == (198, 3)
    rejects = pq.read_table(workdir_of(out) / "rejects").to_pylist()
    assert sorted(r["row"] for r in rejects) == [10, 100, 201]
    assert any("truncated" in r["reason"] for r in rejects)
    assert out.read_bytes() == ingest_sequential(stream, config=cfg, skip_bad=True).to_bytes()


def _kill_and_resume(ray_cluster, tmp_path: Path, rng: random.Random, *, shards: bool = False) -> None:
    """SIGKILL an ingest at a random moment after its first checkpoint, run it again: the same bytes
    (``shards``: a sharded ingest, whose union must be those bytes)."""
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 3000, keys=300, seed=rng.randrange(1000))
    cfg = _config(tmp_path, batch_events=50, checkpoint_every=100)
    out = tmp_path / "state.arrow"
    argv = [
        sys.executable,
        "-m",
        "pmem.cli",
        "ingest",
        str(stream),
        "--out",
        str(out),
        "--config",
        str(cfg),
        "--partitions",
        "2",
        "--no-progress",
        "--address",
        ray_cluster.get_runtime_context().gcs_address,
        *(["--shards"] if shards else []),
    ]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        manifest = workdir_of(out) / "manifest.json"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None and not manifest.exists():
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.0))  # a random moment after the first checkpoint
        finished = proc.poll() is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    if finished:  # the whole ingest beat the kill: nothing to resume (still a valid outcome)
        assert proc.returncode == 0, proc.stdout.read().decode() if proc.stdout else ""
    # the kill may also land after the ingest finished its work (while Ray shuts down)
    doc = json.loads((workdir_of(out) / "manifest.json").read_text())
    completed = doc.get("done", False)
    named = {name for part in doc.get("shards", {}).get("segments", []) for name, _ in part}
    unnamed = [p for p in (workdir_of(out) / "shards").rglob("*.arrow*") if p.name not in named]
    report = ingest(stream, out, config=cfg, partitions=2, progress=False, shards=shards)
    assert report.events == 3000
    assert completed or (report.attempts == 2 and report.resumed_from >= 100), report
    print(
        f"killed {'after completion' if completed else f'mid-run, resumed from event {report.resumed_from}'}"
        + (f"; {len(unnamed)} log segment(s) written after the checkpoint were dropped" if shards else "")
    )
    state = ProvenanceGraph.load(out).to_bytes() if shards else out.read_bytes()
    assert state == ingest_sequential(stream, config=cfg).to_bytes()
    # no model call was made twice: across every attempt's request rows, a row's chat call (by its
    # stream row and purpose) reached the model at most once; repeats were answered by the cache
    sent = Counter(
        (r["history_id"], r["purpose"])
        for r in _request_rows(out)
        if not r["cached"] and r["purpose"] != "embed"
    )
    assert sent and max(sent.values()) == 1, sent.most_common(3)


def test_sigkill_at_a_random_moment_then_rerun_gives_the_same_bytes(ray_cluster, tmp_path: Path) -> None:
    _kill_and_resume(ray_cluster, tmp_path, random.Random(int(os.environ.get("PMEM_KILL_SEED", "7"))))


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(5))
def test_sigkill_five_trials(ray_cluster, tmp_path: Path, trial: int) -> None:
    _kill_and_resume(ray_cluster, tmp_path, random.Random(1000 + trial))


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(5))
def test_sigkill_of_a_sharded_ingest_five_trials(ray_cluster, tmp_path: Path, trial: int) -> None:
    """A kill between checkpoints leaves log segments no manifest names, and workers mid-append: the
    rerun drops them, replays the named ones, and its union is the sequential state."""
    _kill_and_resume(ray_cluster, tmp_path, random.Random(2000 + trial), shards=True)


def test_config_errors_name_the_file_and_key(tmp_path: Path) -> None:
    spec = parse_ingest_config(
        {"models": {"agent": {"backend": "heuristic"}, "embedder": {"backend": "hashing"}}}
    )
    assert spec == IngestSpec.default()
    bad = _config(tmp_path, batch_events=0)
    from pmem.ingest import load_ingest_config
    from pmem.runner._config import ConfigError

    with pytest.raises(ConfigError, match=r"ingest\.toml: \[ingest\] batch_events: must be at least 1"):
        load_ingest_config(bad)
    with pytest.raises(ConfigError, match=r"\[ingest\]: unknown key 'partitons'"):
        parse_ingest_config(
            {
                "models": {"agent": {"backend": "heuristic"}, "embedder": {"backend": "hashing"}},
                "ingest": {"partitons": 2},
            }
        )
    with pytest.raises(ConfigError, match=r"\[models.embedder\]: is required"):
        parse_ingest_config({"models": {"agent": {"backend": "heuristic"}}})
    # a sweep config works as it is: its [arm_options.pmem] write options are honoured
    sweep = parse_ingest_config(
        {
            "models": {"agent": {"backend": "heuristic"}, "embedder": {"backend": "hashing"}},
            "arms": ["pmem"],
            "arm_options": {"pmem": {"annotate": "controller", "top_k": 3}},
        }
    )
    assert dict(sweep.write) == {"annotate": "controller"}
    assert sweep.identity_hash() != spec.identity_hash()


def test_cli_refuses_bad_input_in_one_line_before_starting_anything(tmp_path: Path) -> None:
    def pmem_ingest(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pmem.cli", "ingest", *argv], capture_output=True, text=True, cwd=REPO
        )

    missing = pmem_ingest(str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "s.arrow"))
    assert missing.returncode == 2 and "nope.jsonl: stream file not found" in missing.stderr
    stream = write_synthetic_stream(tmp_path / "s.jsonl", 5, keys=2)
    no_dir = pmem_ingest(str(stream), "--out", str(tmp_path / "no" / "s.arrow"))
    assert no_dir.returncode == 2 and "does not exist" in no_dir.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[models.agent]\nbackend = "heuristic"\n[models.embedder]\nbackend = "hashing"\n[ingest]\nbatch = 3\n'
    )
    refused = pmem_ingest(str(stream), "--out", str(tmp_path / "s.arrow"), "--config", str(bad))
    assert refused.returncode == 2 and "bad.toml: [ingest]: unknown key 'batch'" in refused.stderr
    assert "Traceback" not in missing.stderr + no_dir.stderr + refused.stderr
    assert not (tmp_path / "s.arrow").exists() and not (tmp_path / "s.arrow.ingest").exists()


def test_a_model_call_that_fails_for_good_stops_the_ingest_naming_the_call(
    ray_cluster, tmp_path: Path
) -> None:
    from pmem.models import ModelCallError

    stream = write_synthetic_stream(tmp_path / "s.jsonl", 50, keys=10)
    cfg = tmp_path / "dead.toml"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg.write_text(
        f'[models.agent]\nbackend = "openai"\nurl = "http://127.0.0.1:{port}/v1"\nmodel = "m"\n'
        'max_retries = 0\n[models.embedder]\nbackend = "hashing"\n'
    )
    out = tmp_path / "state.arrow"
    with pytest.raises(ModelCallError, match=r"extract call to m failed"):
        ingest(stream, out, config=cfg, progress=False)
    assert not out.exists()
