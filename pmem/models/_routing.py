"""Routing calls over replicas of one model, with failover: the one implementation.

Used by the `vllm` backend (the driver's own replicas, which it can restart) and by the runners of a
sweep (:mod:`pmem.runner._hosting`: the driver's replicas, reached by URL). The rules:

- a call's key is its ``CallContext.history_id`` (else the start of its first message); a
  :class:`~pmem.models._ring.HashRing` gives every key an order of replicas, so one history's calls
  reach one replica (prefix-cache reuse) while histories spread;
- a replica that fails a call with :class:`ModelCallError` whose ``failover`` is true (connection
  refused or dropped, timeout, 5xx: the replica looks down) is marked down and the call goes to the
  next replica of the order; replicas marked down are tried last;
- any other failure (401/403, another 4xx) is the call's own and is not tried elsewhere;
- with the ``least-busy`` policy (servers that answer one request at a time, like llama.cpp's, keep no
  prefix cache worth pinning a history for) the replicas with fewer calls in flight come first, the
  ring order breaking ties;
- with a ``revive`` hook (the `vllm` pool's restart), a replica marked down is restarted in the
  background, and when every replica failed, a second pass waits for those restarts.

Replicas are `openai` clients (:func:`openai_replicas`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from pmem.models._errors import ModelCallError
from pmem.models._ring import HashRing
from pmem.models._types import (
    Attempt,
    CallContext,
    CallOptions,
    ChatModel,
    Completion,
    Embedder,
    Embedding,
    EmbedRequest,
    Model,
)

T = TypeVar("T")


def route_key(context: CallContext | None, fallback: str) -> str:
    """Route by history; calls without one spread by content."""
    if context is not None and context.history_id:
        return context.history_id
    return fallback[:512]


#: how a router orders replicas: ``affinity`` (one history -> one replica) or ``least-busy``
ROUTING_POLICIES = ("affinity", "least-busy")


class ReplicaRouter:
    """Failover order over ``n`` replicas for a key, and the restarts of replicas that failed."""

    def __init__(
        self, n: int, revive: Callable[[int], Awaitable[Any]] | None = None, policy: str = "affinity"
    ) -> None:
        if policy not in ROUTING_POLICIES:
            msg = f"routing must be one of {', '.join(ROUTING_POLICIES)}, not {policy!r}"
            raise ValueError(msg)
        self.ring = HashRing(n)
        self._revive = revive
        self.policy = policy
        self.down: dict[int, asyncio.Future[Any]] = {}  # replica -> its restart
        self.failovers = 0
        self.in_flight = [0] * n

    def _mark_down(self, index: int) -> None:
        # without a restart to wait for, a replica keeps its place: its keys go back to it at once
        if self._revive is not None and (index not in self.down or self.down[index].done()):
            self.down[index] = asyncio.ensure_future(self._revive(index))

    def order(self, key: str) -> list[int]:
        order = self.ring.order(key)
        if self.policy == "least-busy":
            order.sort(key=lambda i: self.in_flight[i])  # stable: the ring breaks ties
        up = [i for i in order if i not in self.down or self.down[i].done()]
        return up + [i for i in order if i not in up]  # down ones last: they may be back by then

    async def route(self, key: str, call: Callable[[int], Awaitable[T]]) -> T:
        """``call(index)`` on the key's replicas in order until one succeeds; the last error otherwise."""
        last: ModelCallError | None = None
        passes = 2 if self._revive is not None else 1  # the second pass waits for the restarts
        for attempt in range(passes):
            for index in self.order(key):
                if attempt and index in self.down:
                    with contextlib.suppress(Exception):
                        await self.down[index]
                self.in_flight[index] += 1
                try:
                    return await call(index)
                except ModelCallError as exc:
                    if not exc.failover:
                        raise
                    last = exc
                    self.failovers += 1
                    self._mark_down(index)
                finally:
                    self.in_flight[index] -= 1
        assert last is not None
        raise last


class _Replicated(Model):
    """Replicas of one model behind a :class:`ReplicaRouter`."""

    def __init__(
        self,
        model_id: str,
        replicas: Sequence[Any] = (),
        revive: Callable[[int], Awaitable[Any]] | None = None,
        routing: str = "affinity",
    ) -> None:
        self.model_id = model_id
        self.replicas: list[Any] = []
        self.router: ReplicaRouter | None = None
        self.routing = routing
        if replicas:
            self._attach(replicas, revive)

    def _attach(self, replicas: Sequence[Any], revive: Callable[[int], Awaitable[Any]] | None = None) -> None:
        self.replicas = list(replicas)
        self.router = ReplicaRouter(len(self.replicas), revive, self.routing)
        if self.replicas:
            for name in ("context_tokens", "reply_token_limit"):  # the replicas' clients know them
                if getattr(self, name, None) is None:
                    setattr(self, name, getattr(self.replicas[0], name, None))

    async def _ready(self) -> ReplicaRouter:
        """The router, once there are replicas (a hosting subclass launches them here)."""
        assert self.router is not None, "no replicas"
        return self.router

    def replica_for(self, history_id: str) -> int:
        """The replica that serves ``history_id`` while all are up."""
        assert self.router is not None, "start() the model first"
        return self.router.ring.order(history_id)[0]

    async def aclose(self) -> None:
        for r in self.replicas:
            await r.aclose()


class RoutedChatModel(_Replicated, ChatModel):
    """A chat model over replicas (:class:`ChatModel` each, usually `openai` clients)."""

    replicas: list[ChatModel]

    async def generate(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        router = await self._ready()
        key = route_key(options.context, str(messages[0].get("content", "")) if messages else "")
        tried: list[Attempt] = []  # every request the call made, on every replica it was tried on

        async def on(index: int) -> Completion:
            try:
                return await self.replicas[index].generate(messages, options)
            except ModelCallError as exc:
                tried.extend(exc.attempts)
                exc.attempts = tuple(tried)
                raise

        completion = await router.route(key, on)
        return (
            dataclasses.replace(completion, attempts=(*tried, *completion.attempts)) if tried else completion
        )


class RoutedEmbedder(_Replicated, Embedder):
    """An embedder over replicas (:class:`Embedder` each, usually `openai` clients)."""

    replicas: list[Embedder]

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        router = await self._ready()
        texts = list(texts)
        key = route_key(context, texts[0] if texts else "")
        tried: list[Attempt] = []  # every request the call made, on every replica it was tried on

        async def on(index: int) -> Embedding:
            try:
                return await self.replicas[index].embed_usage(texts, context=context)
            except ModelCallError as exc:
                tried.extend(exc.attempts)
                exc.attempts = tuple(tried)
                raise

        embedding = await router.route(key, on)
        if not tried:
            return embedding
        before = tuple(EmbedRequest(a.status, a.latency_s, error=a.error) for a in tried)
        return embedding._replace(requests=(*before, *embedding.requests))
