"""The response cache and the request log, around any chat model or embedder (one place for both).

:func:`pmem.models.make_chat_model` / :func:`~pmem.models.make_embedder` wrap a backend in these when
given a ``cache`` or a ``log``; the lifecycle (``start``/``stop``/``aclose``) passes through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pmem.models._cache import ResponseCache
from pmem.models._log import EMBED_PURPOSE
from pmem.models._tokens import estimate_tokens
from pmem.models._types import (
    CallContext,
    ChatModel,
    Completion,
    Embedder,
    Embedding,
    InnerLimits,
    Model,
    parse_json_text,
)

if TYPE_CHECKING:
    from pathlib import Path

    from pmem.models._log import RequestLog
    from pmem.models._types import CallOptions


class _Wrapper(InnerLimits, Model):
    """A model around another: same id, and the inner model's lifecycle."""

    def __init__(
        self, inner: Any, *, cache: ResponseCache | None = None, log: RequestLog | None = None
    ) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.cache = cache
        self.log = log
        self.backend_calls = 0

    async def start(self) -> list[str]:
        return await self.inner.start()

    def stop(self) -> None:
        self.inner.stop()

    def save_logs(self, folder: Path, prefix: str) -> list[Path]:
        return list(self.inner.save_logs(folder, prefix))

    async def aclose(self) -> None:
        await self.inner.aclose()


class _LeaderGone(Exception):
    """The call that others were sharing ended without a reply (it was cancelled)."""


class InstrumentedChatModel(_Wrapper, ChatModel):
    """Single flight, then the cache, before the backend; request rows after it.

    Identical calls in flight at once (same key as the cache's) are sent once: the others wait for
    that reply and are logged as served without a request (``cached``), so they cost no server call
    even when caching is off. Errors are logged, never cached.
    """

    inner: ChatModel

    def __init__(
        self, inner: Any, *, cache: ResponseCache | None = None, log: RequestLog | None = None
    ) -> None:
        super().__init__(inner, cache=cache, log=log)
        self._inflight: dict[str, asyncio.Future[Completion]] = {}
        self.shared_calls = 0

    async def generate(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        t0 = time.perf_counter()
        key = ResponseCache.chat_key(
            self.model_id,
            messages,
            purpose=options.purpose,
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            schema=options.schema,
        )
        completion = None
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                completion = _from_cache(hit, options, time.perf_counter() - t0)
        if completion is None:
            completion = await self._single_flight(key, messages, options, t0)
        if self.log is not None:
            self.log.add_completion(completion, options.context)
        return completion

    async def _single_flight(
        self, key: str, messages: Sequence[dict[str, str]], options: CallOptions, t0: float
    ) -> Completion:
        pending = self._inflight.get(key)
        if pending is not None:
            try:
                shared = await asyncio.shield(pending)
            except _LeaderGone:
                pass  # the first caller was cancelled: this one makes the call itself
            else:
                self.shared_calls += 1
                # the reply, as a cache hit would give it: no request of its own, parsed afresh
                return dataclasses.replace(
                    shared,
                    purpose=options.purpose,
                    cached=True,
                    latency_s=time.perf_counter() - t0,
                    attempts=(),
                    http_status=None,
                )
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            self.backend_calls += 1
            completion = await self.inner.call(messages, options)
        except BaseException:
            future.set_exception(_LeaderGone())
            future.exception()  # retrieved here: no "never retrieved" warning when nobody waited
            raise
        finally:
            if self._inflight.get(key) is future:
                del self._inflight[key]
        future.set_result(completion)
        if self.cache is not None and completion.error is None:
            self.cache.put(
                key,
                {
                    "text": completion.text,
                    "model": completion.model,
                    "prompt_tokens": completion.prompt_tokens,
                    "completion_tokens": completion.completion_tokens,
                    "tokens_estimated": completion.tokens_estimated,
                    "finish_reason": completion.finish_reason,
                },
            )
        return completion


def _from_cache(hit: dict[str, Any], options: CallOptions, latency: float) -> Completion:
    text = hit["text"]
    # parsed as a fresh reply is (a fenced JSON reply parses on a hit as it did on the miss)
    parsed, parse_error = parse_json_text(text) if options.schema is not None else (None, None)
    return Completion(
        text=text,
        model=hit["model"],
        purpose=options.purpose,
        prompt_tokens=int(hit["prompt_tokens"]),
        completion_tokens=int(hit["completion_tokens"]),
        cached=True,
        latency_s=latency,
        parsed=parsed,
        parse_error=parse_error,
        tokens_estimated=bool(hit.get("tokens_estimated", False)),
        finish_reason=hit.get("finish_reason"),
    )


class InstrumentedEmbedder(_Wrapper, Embedder):
    """Per-text vector cache; the log gets one ``embed`` row per HTTP request the call sent and one
    ``cached`` row for the texts the cache answered (see :func:`pmem.models._log.embedding_records`)."""

    inner: Embedder

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        t0 = time.perf_counter()
        texts = list(texts)
        known = self.cache.get_vectors(self.model_id, texts) if self.cache is not None else {}
        missing = [i for i in range(len(texts)) if i not in known]
        fresh = Embedding(np.zeros((0, 0), dtype=np.float32), 0, True)
        out: np.ndarray | None = None
        if missing:
            self.backend_calls += 1
            todo = [texts[i] for i in missing]
            try:
                fresh = await self.inner.embed_usage(todo, context=context)
            except Exception as exc:
                if self.log is not None:
                    self.log.add_failure(exc, context, EMBED_PURPOSE, self.model_id, time.perf_counter() - t0)
                raise
            if self.cache is not None:
                self.cache.put_vectors(self.model_id, todo, fresh.vectors)
            out = np.empty((len(texts), fresh.vectors.shape[1]), dtype=np.float32)
            out[missing] = fresh.vectors
        elif texts:
            dim = next(iter(known.values())).shape[0]
            out = np.empty((len(texts), dim), dtype=np.float32)
        else:
            out = await self.inner.embed([], context=context)
        for i, vec in known.items():
            out[i] = vec
        result = fresh._replace(
            vectors=out,
            cached_texts=fresh.cached_texts + len(known),
            cached_tokens=fresh.cached_tokens + sum(estimate_tokens(texts[i]) for i in known),
        )
        if self.log is not None:
            self.log.add_embedding(result, context, self.model_id, time.perf_counter() - t0)
        return result
