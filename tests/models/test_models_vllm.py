"""The `vllm` launcher under Ray with logical GPUs, starting the stand-in server in actors."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from pmem.models import CallContext, make_chat_model, make_embedder
from pmem.models._vllm import ReplicaConfig
from pmem.models.sections import format_sections


def _msg(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": format_sections({"TEXT": f"Update: obj {i} has been moved from a 1 to b {i}."})}]


def test_vllm_command_uses_documented_flags() -> None:
    cfg = ReplicaConfig(model="/models/Qwen3-4B", served_name="qwen", launcher="vllm", max_model_len=8192)
    cmd = cfg.command(8001)
    assert cmd[:3] == ["vllm", "serve", "/models/Qwen3-4B"]
    assert {"--port", "--served-model-name", "--tensor-parallel-size", "--gpu-memory-utilization",
            "--max-model-len", "--enable-prefix-caching"} <= set(cmd)
    embed = ReplicaConfig(model="/models/emb", served_name="emb", kind="embed", launcher="vllm").command(8002)
    assert embed[-2:] == ["--runner", "pooling"]


def test_replicas_route_and_recover(ray_cluster) -> None:
    model = make_chat_model({"backend": "vllm", "model": "heuristic", "launcher": "standin", "replicas": 2,
                             "latency_ms": 30, "max_retries": 0, "timeout_s": 20})
    try:
        urls = asyncio.run(model.start())
        assert len(urls) == 2 and all(u.startswith("http://127.0.0.1:") for u in urls)
        info = model.router.pool.info()
        assert [i["launcher"] for i in info] == ["standin", "standin"] and all(i["alive"] for i in info)

        # one history -> one replica; histories spread over both
        owners = {h: model.replica_for(h) for h in (f"hist-{i}" for i in range(40))}
        assert set(owners.values()) == {0, 1}

        async def history(h: str, n: int):
            return [await model.complete(_msg(i), purpose="extract", context=CallContext(h, "pmem")) for i in range(n)]

        async def sweep(n: int):
            return await asyncio.gather(*(history(h, n) for h in owners))

        before = [r.client.requests_sent for r in model.replicas]
        out = asyncio.run(sweep(2))
        assert all(c.error is None for h in out for c in h)
        sent = [r.client.requests_sent - b for r, b in zip(model.replicas, before, strict=True)]
        expected = [2 * sum(1 for o in owners.values() if o == k) for k in (0, 1)]
        assert sent == expected  # every call went to its history's replica

        # kill one replica's server process while calls are in flight: none is lost
        victim = info[0]["pid"]

        async def killer():
            await asyncio.sleep(0.1)
            os.kill(victim, signal.SIGKILL)

        async def sweep_with_kill():
            results = await asyncio.gather(sweep(6), killer())
            return results[0]

        out = asyncio.run(sweep_with_kill())
        flat = [c for h in out for c in h]
        assert len(flat) == 6 * len(owners) and all(c.error is None for c in flat)
        assert model.router.failovers >= 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = model.router.pool.info()
            if info[0]["alive"] and info[0]["pid"] != victim:
                break
            time.sleep(0.2)
        assert info[0]["restarts"] >= 1 and info[0]["alive"] and info[0]["pid"] != victim
        after = asyncio.run(history("hist-0", 1))
        assert after[0].error is None
    finally:
        model.stop()


def test_vllm_embedder_standin(ray_cluster) -> None:
    emb = make_embedder({"backend": "vllm", "model": "hashing", "launcher": "standin", "replicas": 1})
    try:
        v = asyncio.run(emb.embed(["apple 1", "mug 2"], context=CallContext("h", "a")))
        assert v.shape == (2, 1024)
    finally:
        emb.stop()


def test_vllm_launcher_requires_the_command() -> None:
    import shutil

    if shutil.which("vllm"):
        pytest.skip("vllm is installed here")
    with pytest.raises(ModuleNotFoundError, match=r"pmem\[gpu\]"):
        make_chat_model({"backend": "vllm", "model": "/models/x", "launcher": "vllm"})


def test_tensor_parallel_replica_gets_its_gpus(ray_cluster) -> None:
    model = make_chat_model({"backend": "vllm", "model": "heuristic", "launcher": "standin", "replicas": 1,
                             "tensor_parallel": 2})
    try:
        asyncio.run(model.start())
        (info,) = model.router.pool.info()
        assert len(info["gpu_ids"]) == 2 and info["alive"]
        c = asyncio.run(model.complete(_msg(1), purpose="extract", context=CallContext("h", "a")))
        assert c.error is None and "obj_1.location" in c.text
    finally:
        model.stop()
