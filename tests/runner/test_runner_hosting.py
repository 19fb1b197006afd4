"""vllm replicas are started once by the driver and shared by every runner (stand-in server on CPU)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import TINY, config, read

from pmem.models import _replicas
from pmem.models.server import ServerThread
from pmem.runner import _driver, _schedule, load_config, run_sweep
from pmem.runner._hosting import Hosted, RoutedChat, RoutedEmbedder

SECRET = "hosted-test-key-4b9e2d7c1a6f3e8b"


def test_routed_clients_send_the_key_and_hide_it() -> None:
    """Runners reach hosted replicas with the Hosted key; without it they are refused; reprs hide it."""
    with ServerThread(api_key=SECRET) as srv:
        for role, cls in (("agent", RoutedChat), ("embedder", RoutedEmbedder)):
            model = "heuristic" if role == "agent" else "hashing"
            hosted = Hosted(
                role, model, (srv.url, srv.url), (("max_retries", 3), ("backoff_s", 0.01)), api_key=SECRET
            )
            assert SECRET not in repr(hosted) and SECRET not in str(hosted)
            routed = cls(hosted)
            keyless = cls(Hosted(role, model, (srv.url,), (("max_retries", 3),)))
            if role == "agent":
                msg = [{"role": "user", "content": "### KEY_A\na.b\n### KEY_B\na.b"}]
                assert asyncio.run(routed.complete(msg, purpose="identity")).error is None
                c = asyncio.run(keyless.complete(msg, purpose="identity"))
                assert c.error is not None and "HTTP 401" in c.error
            else:
                assert asyncio.run(routed.embed(["apple 1"])).shape == (1, 1024)
                with pytest.raises(Exception, match="HTTP 401"):
                    asyncio.run(keyless.embed(["apple 1"]))
        assert srv.stats["unauthorized"] == 2  # one each: a refused key is not retried


def test_runners_share_the_drivers_replicas(
    ray_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = int(ray_cluster.cluster_resources().get("GPU", 0))
    assert gpus >= 3
    # 3 replicas x 1 GPU, 2 runners: only sharing fits the session's 4 logical GPUs (unshared needs 6)
    body = f"""
arms = ["{TINY}"]
[run]
runners = 2
in_flight = 4
flush_s = 0.2
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = 2
cases = 6
"""
    # record the key the pool draws, and each replica's log just before the pool removes it
    keys: list[str] = []
    logs: dict[str, bytes] = {}
    draw, stop = _replicas._new_api_key, _replicas.ReplicaPool.stop

    def recorded_draw() -> str:
        keys.append(draw())
        return keys[-1]

    def recorded_stop(pool: Any) -> None:
        for info in pool.info() if pool.actors else []:
            logs[info["log"]] = Path(info["log"]).read_bytes()
        stop(pool)

    monkeypatch.setattr(_replicas, "_new_api_key", recorded_draw)
    monkeypatch.setattr(_replicas.ReplicaPool, "stop", recorded_stop)
    # the servers' logs are kept in logs/ as the sweep goes (here at every turn of its loop), each
    # replica's in one file rewritten, so that a killed sweep keeps them: after each save, the files in
    # logs/ and the histories complete then
    kept: list[tuple[int, int]] = []
    keep = _schedule.RunnerPool.keep_logs

    def counted_keep(runners: Any) -> None:
        keep(runners)
        files = list((runners.store.root / "logs").glob("*-replica-*.log"))
        kept.append((len(files), len(runners.store.completed())))

    monkeypatch.setattr(_driver, "_LOG_SAVE_S", 0.0)
    monkeypatch.setattr(_schedule.RunnerPool, "keep_logs", counted_keep)
    p = config(tmp_path, body, name="hosted")
    p.write_text(
        p.read_text().replace(
            '[models.agent]\nbackend = "heuristic"',
            '[models.agent]\nbackend = "vllm"\nmodel = "heuristic"\nlauncher = "standin"\nreplicas = 3\n'
            "health_timeout_s = 60",
        )
    )
    res = run_sweep(load_config(p), out=tmp_path / "runs", progress_enabled=False)
    assert (res.completed, res.failed) == (6, 0), res.failures
    reqs = read(res.run_dir, "requests")
    assert set(reqs.column("model").to_pylist()) >= {"heuristic"}
    assert all(read(res.run_dir, "results").column("correct").to_pylist())
    # the replicas required a key drawn for this sweep, which reached no file of the run, nor their logs
    assert len(keys) == 1 and len(logs) == 3 and all(b"serving" in log for log in logs.values())
    key = keys[0].encode()
    assert (res.run_dir / "run.toml").is_file() and key not in (res.run_dir / "run.toml").read_bytes()
    files = [f for f in Path(res.run_dir).rglob("*") if f.is_file()]
    assert files and not [f for f in files if key in f.read_bytes()]
    assert not any(key in log for log in logs.values())
    assert not any(Path(log).exists() for log in logs)  # removed with the pool
    saved = sorted((res.run_dir / "logs").glob("*-replica-*.log"))
    # saved at the loop's first turn, before any history ran, and again at the end; one file a replica
    assert kept[0] == (3, 0) and kept[-1] == (3, 6) and len(saved) == 3, kept
    assert sorted(p.read_bytes() for p in saved) == sorted(logs.values())  # each its server's whole log
    # the replicas were stopped with the sweep: their GPUs come back (killing actors is asynchronous)
    deadline = time.monotonic() + 30
    while ray_cluster.available_resources().get("GPU", 0) < gpus and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_cluster.available_resources().get("GPU", 0) == gpus


def test_runners_keep_their_own_retries_over_hosted_replicas() -> None:
    """Runners cannot restart the driver's replicas: their clients keep the `openai` retries (which ride
    out a restart) and take the engine's other defaults (dialect, window, one request at a time)."""
    from pmem.models import make_chat_model

    model = make_chat_model(
        {"backend": "vllm", "model": "heuristic", "launcher": "standin", "max_model_len": 4096}
    )
    own = model.client_options()
    runners = model.client_options(restarts_replicas=False)
    assert own["max_retries"] == 1 and "max_retries" not in runners and "backoff_s" not in runners
    assert runners["structured"] == own["structured"] and runners["context_tokens"] == 4096


def test_roles_with_the_same_table_share_one_pool_started_together(ray_cluster) -> None:
    """An agent that also judges (the same table) is one pool of replicas; another table is its own."""
    from pmem.models import ModelSpec
    from pmem.runner._config import RoleSpec
    from pmem.runner._hosting import HostedModels

    table = {"backend": "vllm", "model": "heuristic", "launcher": "standin", "replicas": 1}
    specs = {
        "agent": RoleSpec("agent", ModelSpec.from_mapping(table)),
        "judge": RoleSpec("judge", ModelSpec.from_mapping(table)),
        "embedder": RoleSpec("embedder", ModelSpec.from_mapping({**table, "model": "hashing"})),
    }
    hosts = HostedModels()
    try:
        hosted = hosts.start(specs)
        assert len(hosts.models) == 2  # the agent's pool serves the judge
        assert hosted["judge"].urls == hosted["agent"].urls and hosted["judge"].role == "judge"
        assert hosted["judge"].api_key == hosted["agent"].api_key
        assert hosted["embedder"].urls != hosted["agent"].urls
        verdict = asyncio.run(
            RoutedChat(hosted["judge"]).complete(
                [{"role": "user", "content": "### KEY_A\na.b\n### KEY_B\na.b"}], purpose="identity"
            )
        )
        assert verdict.error is None and verdict.text == "same"
        other = {**specs, "judge": RoleSpec("judge", ModelSpec.from_mapping({**table, "seed": 1}))}
        hosts.stop()
        hosts = HostedModels()
        hosted = hosts.start(other)
        assert len(hosts.models) == 3 and hosted["judge"].urls != hosted["agent"].urls
    finally:
        hosts.stop()


def test_a_pool_that_fails_to_start_stops_the_others(ray_cluster) -> None:
    """Pools start together; when one cannot start (its port is taken), the sweep gets that one line
    and the pool that did start (or was starting) is stopped: no server of it is left running."""
    import socket
    import uuid

    from pmem.models import ModelSpec
    from pmem.runner._config import RoleSpec
    from pmem.runner._hosting import HostedModels

    marker = f"probe-{uuid.uuid4().hex[:12]}"
    table = {"backend": "vllm", "model": "heuristic", "launcher": "standin", "replicas": 1}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        specs = {
            "agent": RoleSpec("agent", ModelSpec.from_mapping({**table, "port": busy.getsockname()[1]})),
            "embedder": RoleSpec(
                "embedder", ModelSpec.from_mapping({**table, "model": "hashing", "served_model_name": marker})
            ),
        }
        hosts = HostedModels()
        with pytest.raises(ValueError, match="is in use"):
            hosts.start(specs)

    def servers() -> list[str]:  # the processes whose command line names the embedder's pool
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):  # a process that ended while we looked
                if marker.encode() in cmdline.read_bytes():
                    found.append(cmdline.parent.name)
        return found

    assert hosts.models == []
    for _ in range(300):  # stopping kills the actor and its server's process group: wait for the exit
        if not servers():
            break
        time.sleep(0.1)
    assert servers() == []
