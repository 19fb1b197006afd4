"""Engine-neutral hosting: a model served by replicas it launches itself (Ray actors of
:mod:`pmem.models._replicas`), reached through `openai` clients, routed to by
:mod:`pmem.models._routing` and restarted when they fail. Each engine (:mod:`pmem.models._vllm`,
:mod:`pmem.models._llamacpp`) derives from :class:`PooledModel` and gives its replicas' configuration,
its weights' preparation and its structured-output dialect; nothing here knows an engine.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pmem.models._launch import ReplicaConfig
from pmem.models._openai import CLIENT_OPTIONS, openai_replicas
from pmem.models._replicas import ReplicaPool
from pmem.models._routing import ReplicaRouter, _Replicated

if TYPE_CHECKING:
    from pathlib import Path

    from pmem.models._spec import ModelSpec

__all__ = ["PooledModel"]

#: client options of a pool's own replica clients, unless the model table sets them
_REPLICA_CLIENT_DEFAULTS = {"max_retries": 1, "timeout_s": 300.0, "backoff_s": 0.05}


class PooledModel(_Replicated):
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
        """The replicas' configuration and how many to run (each engine's own)."""
        msg = f"{cls.__name__} names no engine: a subclass gives its replicas' configuration"
        raise NotImplementedError(msg)

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> Any:
        config, replicas = cls.replica_config(spec)
        return cls(config, replicas, spec)

    def default_structured(self) -> str:
        """The structured-output dialect of this engine (OpenAI's ``json_schema`` unless it says)."""
        return "json_schema"

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
                    await asyncio.to_thread(self.prepare)
                    try:
                        urls = await asyncio.to_thread(self.pool.start)
                    except asyncio.CancelledError:
                        # Ctrl-C (asyncio.run cancels its task): the thread would wait out its start,
                        # and the loop's executor waits for the thread; cancel() ends it at once
                        self.pool.cancel()
                        raise
                    clients = openai_replicas(
                        self.kind, urls, self.model_id, self.client_options(), self.api_key
                    )
                    self._attach(clients, self._revive)
        assert self.router is not None
        return self.router

    def prepare(self) -> None:
        """Ready what the replicas load before any starts, in the caller's process (an engine's own;
        nothing by default)."""

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

    def save_logs(self, folder: Path, prefix: str) -> list[Path]:
        return self.pool.save_logs(folder, prefix)
