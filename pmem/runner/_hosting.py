"""Model replicas shared by every runner of a sweep.

A hosted model (`vllm` on GPUs, `llamacpp` on CPUs: :data:`pmem.models.HOSTED_BACKENDS`) is
started once, by the driver (its replica actors hold the GPUs or CPUs); each runner then talks to those
replicas' OpenAI-compatible endpoints through `openai` clients, routed as the `vllm` backend routes (:mod:`pmem.models._routing`: all calls of one history to one replica, prefix-cache
reuse; the histories of a runner across replicas; a call that fails on a replica that looks down is
tried on the next one, so a replica that is restarting does not fail a history while others are up).
Without this, every runner would launch its own replicas and ask for ``runners x replicas`` GPUs.

The replicas require a bearer token (the model's ``api_key``, or one drawn when its pool starts):
:class:`Hosted` carries it to the runners' clients, outside ``client`` and out of its repr, so it
reaches no config, log or ``run.toml``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pmem.models import (
    HOSTED_BACKENDS,
    PooledModel,
    RoutedChatModel,
    openai_replicas,
)
from pmem.models import RoutedEmbedder as _RoutedEmbedder
from pmem.rundir import safe_name

if TYPE_CHECKING:
    from pathlib import Path

    from pmem.models import ChatModel, Embedder, PooledModel
    from pmem.runner._config import RoleSpec


@dataclass(frozen=True)
class Hosted:
    """Where a driver-hosted model's replicas answer, and how runners should call them."""

    role: str
    model_id: str
    urls: tuple[str, ...]
    #: the `openai` client options of the runners' clients: the engine's defaults under the model table's
    client: tuple[tuple[str, Any], ...]
    #: the bearer token the replicas require; never in a repr
    api_key: str | None = field(default=None, repr=False)
    #: how runners pick a replica for a call (the engine's: :data:`pmem.models._routing.ROUTING_POLICIES`)
    routing: str = "affinity"

    def replicas(self) -> list[Any]:
        """One `openai` client per replica."""
        kind = "embed" if self.role == "embedder" else "chat"
        return openai_replicas(kind, self.urls, self.model_id, dict(self.client), self.api_key)


def keep_server_logs(model: ChatModel | Embedder | PooledModel, folder: Path, key: str) -> None:
    """Keep the server logs of ``model``'s replicas, if it launched any, in ``folder`` (the run's
    ``logs/``), named after its role ``key``, before the model is stopped (which removes them). The
    report counts their access lines against ``requests/``: the sweep's hosts and the judging pass's
    judge alike."""
    with contextlib.suppress(Exception):  # logs are kept where they can be; a replica that is gone is not
        model.save_logs(folder, safe_name(key))


class HostedModels:
    """Starts hosted models in the driver; ``hosted`` is handed to the runners; ``stop()`` at the end."""

    def __init__(self) -> None:
        self.models: list[PooledModel] = []
        self.keyed: list[tuple[str, PooledModel]] = []  # (role key, model), for naming their logs
        self.hosted: dict[str, Hosted] = {}

    def start(self, specs: dict[str, RoleSpec]) -> dict[str, Hosted]:
        try:
            return self._start(specs)
        except BaseException:
            self.stop()  # the caller gets no handle to stop models that did start: their GPUs come back now
            raise

    def _start(self, specs: dict[str, RoleSpec]) -> dict[str, Hosted]:

        # roles whose tables are the same (an agent that also judges) share one pool of replicas
        pools: dict[tuple[str, Any], PooledModel] = {}
        roles: dict[str, PooledModel] = {}
        for key, spec in specs.items():
            if spec.backend not in HOSTED_BACKENDS:
                continue
            kind = "embed" if spec.role == "embedder" else "chat"
            shared = pools.get((kind, spec.spec))
            if shared is None:
                built = spec.model()
                assert isinstance(built, PooledModel)
                shared = pools[(kind, spec.spec)] = built
                self.models.append(shared)
                self.keyed.append((key, shared))
            roles[key] = shared

        async def start_all() -> list[list[str]]:
            # every pool at once: a vLLM server's start is minutes, mostly spent waiting
            return list(await asyncio.gather(*(m.start() for m in self.models)))

        started = dict(zip((id(m) for m in self.models), asyncio.run(start_all()), strict=True))
        for key, model in roles.items():
            # the engine's client defaults (dialect, window, concurrency) under the table's own options
            client = model.client_options(restarts_replicas=False)
            self.hosted[key] = Hosted(
                specs[key].role,
                str(model.model_id),
                tuple(started[id(model)]),
                tuple(sorted(client.items())),
                api_key=model.api_key,
                routing=model.routing,
            )
        return self.hosted

    def save_logs(self, folder: Path) -> None:
        """Keep every replica's server log in ``folder`` (the run's ``logs/``) before they are stopped."""
        for key, model in self.keyed:
            keep_server_logs(model, folder, key)

    def stop(self) -> None:
        for m in self.models:
            with contextlib.suppress(Exception):
                m.stop()
        self.models, self.keyed = [], []


class RoutedChat(RoutedChatModel):
    """Chat over a hosted model's replicas: one history -> one replica; failover to the next."""

    def __init__(self, hosted: Hosted) -> None:
        super().__init__(hosted.model_id, hosted.replicas(), routing=hosted.routing)


class RoutedEmbedder(_RoutedEmbedder):
    """Embeddings over a hosted model's replicas, routed as chat is."""

    def __init__(self, hosted: Hosted) -> None:
        super().__init__(hosted.model_id, hosted.replicas(), routing=hosted.routing)
