"""The `openai` backend: any OpenAI-compatible endpoint (vLLM, llama.cpp server, Ray Serve LLM).

Keep-alive HTTP/1.1 over asyncio (:mod:`pmem.models._transport`), bounded concurrency, retries with
exponential backoff on 429/5xx/timeouts/connection errors and non-JSON bodies (never on 401/403: a
wrong or missing ``api_key`` fails at once); after the last retry the call fails with an error naming
the endpoint (returned in ``Completion.error``; embedders raise
:class:`ModelCallError`). Structured output goes out as
``response_format`` (OpenAI JSON schema) and/or vLLM's ``structured_outputs: {"json": schema}``;
``chat_template_kwargs: {"enable_thinking": false}`` keeps Qwen3 out of thinking mode. Token counts
come from the server's ``usage``.

Options (``[models.agent]`` keys): ``url`` (base URL ending in ``/v1``), ``model``, ``api_key``,
``concurrency`` (64), ``max_retries`` (4), ``timeout_s`` (120), ``backoff_s`` (0.25),
``structured`` (``response_format`` | ``structured_outputs`` | ``both``), ``enable_thinking``
(false; ``"omit"`` sends no ``chat_template_kwargs``), ``extra_body`` (a table merged into requests),
``batch_size`` (embeddings, 64).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pmem.models._errors import ModelCallError
from pmem.models._transport import ConnectionPool, TransportError, check_url
from pmem.models._types import CallContext, Completion

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


class OpenAIClient:
    """One endpoint: a keep-alive connection pool per event loop, a concurrency bound and retries."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        concurrency: int = 64,
        max_retries: int = 4,
        timeout_s: float = 120.0,
        backoff_s: float = 0.25,
        backoff_max_s: float = 8.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.concurrency = int(concurrency)
        self.max_retries = int(max_retries)
        self.timeout_s = float(timeout_s)
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        check_url(self.base_url)  # a malformed URL fails here, not on the first call
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: ConnectionPool | None = None
        self._sem: asyncio.Semaphore | None = None
        self.requests_sent = 0

    def _ensure(self) -> tuple[ConnectionPool, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._loop is not loop:
            # connections belong to their loop: a new asyncio.run() needs a new pool
            self._pool = ConnectionPool(self.base_url, limit=self.concurrency, headers=self._headers)
            self._sem = asyncio.Semaphore(self.concurrency)
            self._loop = loop
        assert self._sem is not None
        return self._pool, self._sem

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(self.backoff_max_s, max(0.0, float(retry_after)))
            except ValueError:
                pass
        base = min(self.backoff_max_s, self.backoff_s * (2 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)  # jitter spreads retries of concurrent callers

    async def post_json(
        self, path: str, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        pool, sem = self._ensure()
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        last, failover, retry_after = "no attempt made", False, None
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self._delay(attempt, retry_after))
            retry_after = None
            try:
                async with sem:
                    self.requests_sent += 1
                    resp = await pool.request(
                        "POST", path, headers=headers, body=body, timeout_s=self.timeout_s
                    )
            except TimeoutError:
                last, failover = f"timed out after {self.timeout_s:g} s", True
                continue
            except TransportError as exc:
                last, failover = str(exc), True
                continue
            status, raw = resp.status, resp.body
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {raw[:300].decode('utf-8', 'replace')}"
                failover = status >= 500
                retry_after = resp.headers.get("retry-after")
                continue
            if status in (401, 403):
                # a credential problem is not transient: retrying (or failing over to a replica that
                # shares the key) cannot fix it. The message names the URL, never the key.
                sent = "the configured api_key" if self.api_key else "no api_key"
                msg = (
                    f"POST {url} refused the credentials (HTTP {status}; {sent} was sent): "
                    f"{raw[:300].decode('utf-8', 'replace')}"
                )
                raise ModelCallError(msg, endpoint=url)
            if status >= 300:
                where = f" (Location: {resp.headers['location']})" if "location" in resp.headers else ""
                msg = f"POST {url} rejected the request: HTTP {status}{where}: {raw[:500].decode('utf-8', 'replace')}"
                raise ModelCallError(msg, endpoint=url)
            try:
                return json.loads(raw)
            except ValueError:
                last, failover = f"response body is not JSON: {raw[:120]!r}", True
        msg = f"POST {url} failed after {attempts} attempt(s): {last}"
        raise ModelCallError(msg, endpoint=url, failover=failover)

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._loop is asyncio.get_running_loop():
            await pool.aclose()


def _client_from_spec(spec: ModelSpec, url: str | None = None) -> OpenAIClient:
    url = url or spec.url
    if not url:
        msg = f"backend {spec.backend!r} needs a 'url' (base URL ending in /v1) in its model config"
        raise ValueError(msg)
    return OpenAIClient(
        url,
        api_key=spec.option("api_key"),
        concurrency=int(spec.option("concurrency", 64)),
        max_retries=int(spec.option("max_retries", 4)),
        timeout_s=float(spec.option("timeout_s", 120.0)),
        backoff_s=float(spec.option("backoff_s", 0.25)),
    )


def parse_json_text(text: str) -> tuple[Any, str | None]:
    """Parse a model's JSON reply (tolerating a ``` fence); (value, None) or (None, reason)."""
    m = _FENCE.match(text)
    try:
        return json.loads(m.group(1) if m else text), None
    except ValueError as exc:
        return None, f"response is not valid JSON: {exc}"


class OpenAIChatModel:
    def __init__(
        self,
        client: OpenAIClient,
        model: str,
        *,
        structured: str = "response_format",
        enable_thinking: bool | str = False,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if structured not in ("response_format", "structured_outputs", "both"):
            msg = f"structured must be response_format, structured_outputs or both, not {structured!r}"
            raise ValueError(msg)
        self.client = client
        self.model_id = model
        self.structured = structured
        self.enable_thinking = enable_thinking
        self.extra_body = dict(extra_body or {})

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> OpenAIChatModel:
        if not spec.model:
            msg = f"backend {spec.backend!r} needs a 'model' (the served model name) in its model config"
            raise ValueError(msg)
        return cls(
            _client_from_spec(spec),
            spec.model,
            structured=str(spec.option("structured", "response_format")),
            enable_thinking=spec.option("enable_thinking", False),
            extra_body=dict(spec.option("extra_body", ()) or ()),
        )

    def payload(
        self,
        messages: Sequence[dict[str, str]],
        max_tokens: int,
        temperature: float,
        schema: dict[str, Any] | None,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model_id,
            "messages": [dict(m) for m in messages],
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if self.enable_thinking != "omit":
            payload["chat_template_kwargs"] = {"enable_thinking": bool(self.enable_thinking)}
        if schema is not None:
            if self.structured in ("response_format", "both"):
                payload["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": schema, "strict": True},
                }
            if self.structured in ("structured_outputs", "both"):
                payload["structured_outputs"] = {"json": schema}
        payload.update(self.extra_body)
        return payload

    async def complete_or_raise(
        self,
        messages: Sequence[dict[str, str]],
        *,
        purpose: str,
        max_tokens: int = 256,
        temperature: float = 0.0,
        schema: dict[str, Any] | None = None,
        context: CallContext | None = None,
    ) -> Completion:
        """Like :meth:`complete`, but a failed call raises :class:`ModelCallError` (for routers)."""
        t0 = time.perf_counter()
        data = await self.client.post_json(
            "/chat/completions",
            self.payload(messages, max_tokens, temperature, schema),
            {"X-Purpose": purpose},
        )
        try:
            text = data["choices"][0]["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            msg = f"POST {self.client.base_url}/chat/completions returned no choices[0].message: {exc}"
            raise ModelCallError(msg, endpoint=self.client.base_url) from exc
        usage = data.get("usage") or {}
        parsed, parse_error = parse_json_text(text) if schema is not None else (None, None)
        return Completion(
            text=text,
            model=str(data.get("model") or self.model_id),
            purpose=purpose,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            latency_s=time.perf_counter() - t0,
            parsed=parsed,
            parse_error=parse_error,
        )

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
        try:
            return await self.complete_or_raise(
                messages,
                purpose=purpose,
                max_tokens=max_tokens,
                temperature=temperature,
                schema=schema,
                context=context,
            )
        except ModelCallError as exc:
            return Completion.failed(
                model=self.model_id, purpose=purpose, latency_s=time.perf_counter() - t0, error=str(exc)
            )

    async def aclose(self) -> None:
        await self.client.aclose()


class OpenAIEmbedder:
    def __init__(self, client: OpenAIClient, model: str, *, batch_size: int = 64) -> None:
        self.client = client
        self.model_id = model
        self.batch_size = int(batch_size)

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> OpenAIEmbedder:
        if not spec.model:
            msg = f"backend {spec.backend!r} needs a 'model' (the served embedding model name)"
            raise ValueError(msg)
        return cls(_client_from_spec(spec), spec.model, batch_size=int(spec.option("batch_size", 64)))

    async def _batch(self, texts: list[str]) -> tuple[np.ndarray, int]:
        data = await self.client.post_json(
            "/embeddings", {"model": self.model_id, "input": texts}, {"X-Purpose": "embed"}
        )
        try:
            rows = sorted(data["data"], key=lambda d: d["index"])
            vectors = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"POST {self.client.base_url}/embeddings returned no usable data[].embedding: {exc}"
            raise ModelCallError(msg, endpoint=self.client.base_url) from exc
        if vectors.shape[0] != len(texts):
            msg = f"POST {self.client.base_url}/embeddings returned {vectors.shape[0]} vectors for {len(texts)} inputs"
            raise ModelCallError(msg, endpoint=self.client.base_url)
        return vectors, int((data.get("usage") or {}).get("prompt_tokens") or 0)

    async def embed_usage(
        self, texts: Sequence[str], *, context: CallContext | None = None
    ) -> tuple[np.ndarray, int, bool]:
        texts = list(texts)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32), 0, False
        parts = await asyncio.gather(
            *(self._batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size))
        )
        vectors = np.concatenate([p[0] for p in parts], axis=0)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms == 0, 1.0, norms)
        return vectors.astype(np.float32, copy=False), sum(p[1] for p in parts), False

    async def embed(self, texts: Sequence[str], *, context: CallContext | None = None) -> np.ndarray:
        return (await self.embed_usage(texts, context=context))[0]

    async def aclose(self) -> None:
        await self.client.aclose()
