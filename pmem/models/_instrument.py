"""Wrappers that add the response cache and the request log around any chat model or embedder."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pmem.models._log import record_from
from pmem.models._tokens import estimate_tokens
from pmem.models._types import CallContext, Completion, RequestRecord

if TYPE_CHECKING:
    from pmem.models._cache import ResponseCache
    from pmem.models._log import RequestLog
    from pmem.models._types import ChatModel, Embedder


class InstrumentedChatModel:
    """Cache lookups before the backend, request rows after it. Errors are logged, never cached."""

    def __init__(self, inner: ChatModel, *, cache: ResponseCache | None = None, log: RequestLog | None = None):
        self.inner = inner
        self.model_id = inner.model_id
        self.cache = cache
        self.log = log
        self.backend_calls = 0

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
        t0 = time.perf_counter()
        key = None
        completion = None
        if self.cache is not None:
            key = self.cache.chat_key(
                self.model_id, messages, purpose=purpose, max_tokens=max_tokens, temperature=temperature, schema=schema
            )
            hit = self.cache.get(key)
            if hit is not None:
                completion = _from_cache(hit, purpose, schema, time.perf_counter() - t0)
        if completion is None:
            self.backend_calls += 1
            completion = await self.inner.complete(
                messages, purpose=purpose, max_tokens=max_tokens, temperature=temperature, schema=schema,
                context=context,
            )
            if self.cache is not None and key is not None and completion.error is None:
                self.cache.put(key, {
                    "text": completion.text,
                    "model": completion.model,
                    "prompt_tokens": completion.prompt_tokens,
                    "completion_tokens": completion.completion_tokens,
                    "tokens_estimated": completion.tokens_estimated,
                })
        if self.log is not None:
            self.log.add(record_from(completion, context))
        return completion

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


def _from_cache(hit: dict[str, Any], purpose: str, schema: dict[str, Any] | None, latency: float) -> Completion:
    text = hit["text"]
    parsed, parse_error = None, None
    if schema is not None:
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            parse_error = f"response is not valid JSON: {exc}"
    return Completion(
        text=text,
        model=hit["model"],
        purpose=purpose,
        prompt_tokens=int(hit["prompt_tokens"]),
        completion_tokens=int(hit["completion_tokens"]),
        cached=True,
        latency_s=latency,
        parsed=parsed,
        parse_error=parse_error,
        tokens_estimated=bool(hit.get("tokens_estimated", False)),
    )


class InstrumentedEmbedder:
    """Per-text vector cache; one ``embed`` request row per call (purpose ``embed``)."""

    def __init__(self, inner: Embedder, *, cache: ResponseCache | None = None, log: RequestLog | None = None):
        self.inner = inner
        self.model_id = inner.model_id
        self.cache = cache
        self.log = log
        self.backend_calls = 0

    async def embed(self, texts: Sequence[str], *, context: CallContext | None = None) -> np.ndarray:
        t0 = time.perf_counter()
        texts = list(texts)
        known = self.cache.get_vectors(self.model_id, texts) if self.cache is not None else {}
        missing = [i for i in range(len(texts)) if i not in known]
        tokens, estimated = 0, True
        out: np.ndarray | None = None
        if missing:
            self.backend_calls += 1
            todo = [texts[i] for i in missing]
            try:
                usage = getattr(self.inner, "embed_usage", None)
                if usage is not None:
                    fresh, tokens, estimated = await usage(todo, context=context)
                else:
                    fresh = await self.inner.embed(todo, context=context)
                    tokens = sum(estimate_tokens(t) for t in todo)
            except Exception as exc:
                if self.log is not None:
                    self._log(context, 0, True, False, time.perf_counter() - t0, str(exc))
                raise
            if self.cache is not None:
                self.cache.put_vectors(self.model_id, todo, fresh)
            dim = fresh.shape[1]
            out = np.empty((len(texts), dim), dtype=np.float32)
            out[missing] = fresh
        elif texts:
            dim = next(iter(known.values())).shape[0]
            out = np.empty((len(texts), dim), dtype=np.float32)
        else:
            out = await self.inner.embed([], context=context)
        for i, vec in known.items():
            out[i] = vec
        if self.log is not None:
            self._log(context, tokens, estimated, not missing, time.perf_counter() - t0, None)
        return out

    def _log(self, context: CallContext | None, tokens: int, estimated: bool, cached: bool, latency: float,
             error: str | None) -> None:
        ctx = context or CallContext()
        assert self.log is not None
        self.log.add(RequestRecord(ctx.history_id, ctx.arm, "embed", self.model_id, tokens, 0, cached, latency, error,
                                   estimated))
