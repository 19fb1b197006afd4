"""Model replicas shared by every runner of a sweep.

A `vllm` model is started once, by the driver (its replica actors hold the GPUs); each runner then
talks to those replicas' OpenAI-compatible endpoints through the `openai` client, routing all calls of
one history to one replica (prefix-cache reuse) and the histories of a runner across replicas. Without
this, every runner would launch its own replicas and ask for ``runners x replicas`` GPUs.

A call that fails on one replica (after the client's retries) is tried on the next one, so a replica
that is restarting does not fail a history while others are up.

The replicas require a bearer token (the model's ``api_key``, or one drawn when its pool starts):
:class:`Hosted` carries it to the runners' clients, outside ``client`` and out of its repr, so it
reaches no config, log or ``run.toml``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pmem.models._types import CallContext, Completion

if TYPE_CHECKING:
    import numpy as np

    from pmem.runner._config import ModelSpec

#: `openai` client options a hosted model's runners inherit from its `[models.ROLE]` table (the key
#: travels separately, as :attr:`Hosted.api_key`: the pool may have drawn it).
_CLIENT_OPTIONS = (
    "concurrency",
    "max_retries",
    "timeout_s",
    "backoff_s",
    "structured",
    "enable_thinking",
    "extra_body",
    "batch_size",
)


@dataclass(frozen=True)
class Hosted:
    """Where a driver-hosted model's replicas answer, and how runners should call them."""

    role: str
    model_id: str
    urls: tuple[str, ...]
    client: tuple[tuple[str, Any], ...]
    #: the bearer token the replicas require; never in a repr
    api_key: str | None = field(default=None, repr=False)


class HostedModels:
    """Starts `vllm` models in the driver; ``hosted`` is handed to the runners; ``stop()`` at the end."""

    def __init__(self) -> None:
        self.models: list[Any] = []
        self.hosted: dict[str, Hosted] = {}

    def start(self, specs: dict[str, ModelSpec]) -> dict[str, Hosted]:
        try:
            return self._start(specs)
        except BaseException:
            self.stop()  # the caller gets no handle to stop models that did start: their GPUs come back now
            raise

    def _start(self, specs: dict[str, ModelSpec]) -> dict[str, Hosted]:
        from pmem.models import make_chat_model, make_embedder

        for key, spec in specs.items():
            if spec.backend != "vllm":
                continue
            opts = spec.as_dict()
            model = (make_embedder if spec.role == "embedder" else make_chat_model)(opts)
            urls = _start(model)
            if urls is None:
                continue  # this build of the backend cannot be shared: each runner starts its own
            self.models.append(model)
            client = {k: v for k, v in opts.items() if k in _CLIENT_OPTIONS}
            if spec.role != "embedder" and "structured" not in client:
                client["structured"] = getattr(model, "structured", "structured_outputs")
            api_key = getattr(model, "api_key", None) or opts.get("api_key")
            self.hosted[key] = Hosted(
                spec.role, str(model.model_id), tuple(urls), tuple(sorted(client.items())), api_key=api_key
            )
        return self.hosted

    def stop(self) -> None:
        for m in self.models:
            stop = getattr(m, "stop", None)
            if stop is not None:
                with contextlib.suppress(Exception):
                    stop()
        self.models = []


def _start(model: Any) -> list[str] | None:
    """The replicas' base URLs, or None for a backend that cannot hand its endpoints out."""
    start = getattr(model, "start", None)
    if start is None:
        return None
    return list(asyncio.run(start())) or None


def _order(key: str, n: int) -> list[int]:
    first = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % n
    return [(first + i) % n for i in range(n)]


class RoutedChat:
    """Chat over a hosted model's replicas: one history -> one replica; failover to the next."""

    def __init__(self, hosted: Hosted) -> None:
        from pmem.models import make_chat_model

        self.model_id = hosted.model_id
        self.replicas = [
            make_chat_model(
                {
                    "backend": "openai",
                    "url": u,
                    "model": hosted.model_id,
                    **dict(hosted.client),
                    "api_key": hosted.api_key,
                }
            )
            for u in hosted.urls
        ]

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        purpose: str,
        max_tokens: int = 256,
        temperature: float = 0.0,
        schema: dict[str, Any] | None = None,
        context: CallContext | None = None,
    ) -> Completion:
        key = (context.history_id if context and context.history_id else None) or str(messages[:1])
        last: Completion | None = None
        for i in _order(key, len(self.replicas)):
            c = await self.replicas[i].complete(
                messages,
                purpose=purpose,
                max_tokens=max_tokens,
                temperature=temperature,
                schema=schema,
                context=context,
            )
            if c.error is None:
                return c
            last = c
        assert last is not None
        return last


class RoutedEmbedder:
    def __init__(self, hosted: Hosted) -> None:
        from pmem.models import make_embedder

        self.model_id = hosted.model_id
        self.replicas = [
            make_embedder(
                {
                    "backend": "openai",
                    "url": u,
                    "model": hosted.model_id,
                    **dict(hosted.client),
                    "api_key": hosted.api_key,
                }
            )
            for u in hosted.urls
        ]

    async def embed(self, texts: Sequence[str], *, context: CallContext | None = None) -> np.ndarray:
        key = (context.history_id if context and context.history_id else None) or (texts[0] if texts else "")
        order = _order(key, len(self.replicas))
        for n, i in enumerate(order):
            try:
                return await self.replicas[i].embed(texts, context=context)
            except Exception:
                if n == len(order) - 1:
                    raise
        raise AssertionError("unreachable")
