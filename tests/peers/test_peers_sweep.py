"""A sweep with the mem0 arm against an OpenAI-compatible server on 127.0.0.1 (the stand-in): the
histories complete, every request is a row, and each history's Mem0 store is kept under states/ as the
P-Mem graph is, committed with the batch."""

from __future__ import annotations

import importlib.util
import io
import tarfile
from pathlib import Path

import polars as pl
import pytest

from pmem.runner import load_config, run_sweep

pytestmark = [
    pytest.mark.peers,  # make test-peers: installing the extra does not change make test
    pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="needs the mem0 extra"),
]


def test_a_peer_sweep_keeps_each_historys_store_and_counts_every_request(tmp_path: Path, ray_cluster) -> None:
    from pmem.models.server import ServerThread

    with ServerThread() as server:
        (tmp_path / "c.toml").write_text(
            f"""name = "peer-sweep"
[run]
runners = 1
[models.agent]
backend = "openai"
url = "{server.url}"
model = "heuristic"
[models.embedder]
backend = "hashing"
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = [1]
cases = 2
arms = ["mem0", "add-only"]
"""
        )
        res = run_sweep(load_config(tmp_path / "c.toml"), out=tmp_path / "runs", progress_enabled=False)
        served = server.stats["requests"]
    assert res.failed == 0
    hist = pl.read_parquet(next((res.run_dir / "histories").glob("part-*.parquet")))
    mem0 = hist.filter(pl.col("arm") == "mem0")
    assert mem0.height == 2 and set(mem0["status"]) == {"complete"}
    for rel, size in zip(mem0["state_path"], mem0["state_bytes"], strict=True):
        assert rel.startswith("states/mem0/") and rel.endswith(".tar")
        data = (res.run_dir / rel).read_bytes()
        assert len(data) == size
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            assert "history.db" in tar.getnames()
    requests = pl.concat([pl.read_parquet(f) for f in (res.run_dir / "requests").glob("*.parquet")])
    sent = requests.filter((pl.col("purpose") != "embed") & ~pl.col("cached"))
    assert sent.height == served > 0  # every request the server received is one row
