"""The `vllm` backend: N replicas per model, hosted by Ray actors running ``vllm serve <weights>``.

Three parts, three modules: :mod:`pmem.models._replicas` launches and restarts the servers (Ray
placement, processes, health); :mod:`pmem.models._openai` speaks the OpenAI protocol to each one;
:mod:`pmem.models._routing` routes one history's calls to one replica and fails over to the next when a
replica is down (which this backend then restarts). The pool starts on first use, or on ``start()``.

``launcher``: ``vllm`` runs ``vllm serve``; ``standin`` runs the local heuristic server
(:mod:`pmem.models.server`) instead, so the hosting path (placement, launch, health, routing, restart)
runs on CPU under Ray with logical GPUs; ``auto`` (default) picks ``vllm`` when the ``vllm`` command
and an NVIDIA GPU are present, else ``standin``. Weights come from ``model`` (a local path or a
mounted cache); nothing is downloaded (``HF_HUB_OFFLINE=1`` is set for the child).

Options: ``replicas`` (1), ``tensor_parallel`` (1), ``served_model_name`` (default: the path's last
part), ``vllm_args`` (extra CLI flags, a list), ``gpu_memory_utilization`` (0.9), ``max_model_len``,
``launcher``, ``health_timeout_s`` (900 for vllm, 60 for the stand-in), ``latency_ms`` (stand-in
only), ``api_key`` (default: a random key per pool), plus the `openai` client options (``concurrency``
is per replica; ``max_retries`` defaults to 1, ``backoff_s`` to 0.05 and ``timeout_s`` to 300 here: a
dead replica should fail over quickly, and it is restarted).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.models._openai import CLIENT_OPTIONS
from pmem.models._replicas import ReplicaConfig, ReplicaPool
from pmem.models._routing import ReplicaRouter, RoutedChatModel, RoutedEmbedder, _Replicated, openai_replicas

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec

#: client options of the pool's own replica clients, unless the model table sets them
_REPLICA_CLIENT_DEFAULTS = {"max_retries": 1, "timeout_s": 300.0, "backoff_s": 0.05}


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
    config = ReplicaConfig(
        model=spec.model,
        served_name=served,
        kind=kind,
        launcher=str(spec.option("launcher", "auto")),
        tensor_parallel=int(spec.option("tensor_parallel", 1)),
        gpu_memory_utilization=float(spec.option("gpu_memory_utilization", 0.9)),
        max_model_len=spec.option("max_model_len"),
        vllm_args=tuple(extra),
        health_timeout_s=spec.option("health_timeout_s"),
        latency_ms=float(spec.option("latency_ms", 0.0)),
        host=str(spec.option("host", "auto")),
        env=env,
        api_key=str(spec.option("api_key")) if spec.option("api_key") else None,
    )
    if config.resolved_launcher() == "vllm" and shutil.which("vllm") is None:
        msg = "launcher 'vllm' needs the `vllm` command: pip install 'pmem[gpu]'"
        raise ModuleNotFoundError(msg)
    return config, int(spec.option("replicas", 1))


class _Pooled(_Replicated):
    """Replicas this model launches itself (on first use), routed to, restarted when they fail.

    Engines differ in :meth:`replica_config` (their options and command line), :attr:`client_defaults`
    and :meth:`default_structured`; hosting, routing and restarts are this class's, for every engine.
    """

    kind = "chat"
    #: client options of the pool's own replica clients, unless the model table sets them
    client_defaults: dict[str, Any] = _REPLICA_CLIENT_DEFAULTS

    #: how calls pick a replica (:data:`pmem.models._routing.ROUTING_POLICIES`)
    routing = "affinity"

    def __init__(self, config: ReplicaConfig, replicas: int = 1, spec: ModelSpec | None = None) -> None:
        super().__init__(config.served_name, routing=self.routing)
        self.config = config
        self.spec = spec
        self.pool = ReplicaPool(config, replicas)
        self._start_lock: asyncio.Lock | None = None
        self._retired: list[Any] = []  # clients of replicas that moved (see _revive)
        self.context_tokens = config.max_model_len

    @classmethod
    def replica_config(cls, spec: ModelSpec) -> tuple[ReplicaConfig, int]:
        """The replicas' configuration and how many to run."""
        return _config_from_spec(spec, cls.kind)

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> Any:
        config, replicas = cls.replica_config(spec)
        return cls(config, replicas, spec)

    def default_structured(self) -> str:
        """The structured-output dialect of this engine (vLLM's own field; the stand-in reads either)."""
        return "structured_outputs" if self.config.resolved_launcher() == "vllm" else "both"

    @property
    def structured(self) -> str:
        """How replicas are asked for structured output: the spec's ``structured``, else the engine's."""
        default = self.default_structured()
        return str(self.spec.option("structured", default)) if self.spec is not None else default

    @property
    def api_key(self) -> str | None:
        """The key the replicas require (hand it only to clients of these replicas)."""
        return self.pool.api_key

    def client_options(self, *, restarts_replicas: bool = True) -> dict[str, Any]:
        """The `openai` options of this model's replica clients (the model table's, over the defaults).

        ``restarts_replicas=False``: for clients that cannot restart a failed replica (a sweep's runners),
        which keep the `openai` client's own retries so that they ride out a restart (the pool's clients
        retry once and fail over quickly, as the pool restarts the replica)."""
        configured = {} if self.spec is None else {k: self.spec.option(k) for k in CLIENT_OPTIONS}
        derived: dict[str, Any] = {"context_tokens": self.context_tokens}
        if self.kind == "chat":
            derived["structured"] = self.structured
        defaults = self.client_defaults
        if not restarts_replicas:
            defaults = {k: v for k, v in defaults.items() if k not in ("max_retries", "backoff_s")}
        return {
            **defaults,
            **{k: v for k, v in derived.items() if v is not None},
            **{k: v for k, v in configured.items() if v is not None},
        }

    async def _ready(self) -> ReplicaRouter:
        if self.router is None:
            if self._start_lock is None:
                self._start_lock = asyncio.Lock()
            async with self._start_lock:
                if self.router is None:
                    urls = await asyncio.to_thread(self.pool.start)
                    clients = openai_replicas(
                        self.kind, urls, self.model_id, self.client_options(), self.api_key
                    )
                    self._attach(clients, self._revive)
        assert self.router is not None
        return self.router

    async def _revive(self, index: int) -> None:
        """Restart replica ``index``'s server. When Ray restarted the replica's actor (its process
        died), the server comes back on another port, maybe on another node: the replica's client is
        then replaced by one for the new URL (the old one is closed with the model)."""
        url = await self.pool.ensure(index)
        if url != self.pool.urls[index]:
            self.pool.urls[index] = url
            (client,) = openai_replicas(self.kind, [url], self.model_id, self.client_options(), self.api_key)
            self._retired.append(self.replicas[index])  # calls in flight may still hold it
            self.replicas[index] = client

    async def aclose(self) -> None:
        await super().aclose()
        retired, self._retired = self._retired, []
        for client in retired:
            await client.aclose()

    async def start(self) -> list[str]:
        """Launch the replicas (once) and return their base URLs, in ring order."""
        await self._ready()
        return list(self.pool.urls)

    def stop(self) -> None:
        self.pool.stop()


class VLLMChatModel(_Pooled, RoutedChatModel):
    """Chat over vLLM replicas hosted by Ray actors; same interface as every chat model."""

    kind = "chat"


class VLLMEmbedder(_Pooled, RoutedEmbedder):
    """Embeddings over vLLM pooling replicas (``--runner pooling``) hosted by Ray actors."""

    kind = "embed"
