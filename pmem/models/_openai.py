"""The `openai` backend: any OpenAI-compatible endpoint (vLLM, llama.cpp server, Ray Serve LLM).

The HTTP client is aiohttp: one session (keep-alive connection pool) per event loop, at most
``concurrency`` requests in flight, retries with exponential backoff and jitter on 429 (honouring
``Retry-After``), 5xx, timeouts, connection errors and non-JSON bodies; never on 401/403 (a wrong or
missing ``api_key`` fails at once) nor on another 3xx/4xx. After the last retry the call fails with an
error naming the endpoint (returned in ``Completion.error``; embedders raise :class:`ModelCallError`).

Proxies and certificates come from the environment, as for any HTTP client: ``HTTP_PROXY`` /
``HTTPS_PROXY`` / ``NO_PROXY`` (aiohttp's own rules, read once when a session opens rather than on every
request) and ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` (read when the client is made). Redirects are not
followed and no cookies are kept.

Structured output goes out in one of several dialects (OpenAI's ``response_format`` JSON schema,
vLLM's ``structured_outputs: {"json": schema}``, llama.cpp's ``response_format: {type: json_object,
schema}``); ``chat_template_kwargs: {"enable_thinking": false}`` keeps
Qwen3 out of thinking mode. Token counts come from the server's ``usage``.

Options (``[models.agent]`` keys): ``url`` (base URL ending in ``/v1``), ``model``, ``api_key``,
``concurrency`` (64), ``max_retries`` (4), ``timeout_s`` (120), ``backoff_s`` (0.25),
``structured`` (the dialect: ``json_schema``, ``structured_outputs``, ``both``, ``json_object`` or
``none``; see :data:`STRUCTURED_DIALECTS`), ``enable_thinking`` (false; ``"omit"`` sends no
``chat_template_kwargs``), ``extra_body`` (a table merged into requests), ``seed`` (sent when set),
``context_tokens`` (the served window, also read from ``max_model_len`` / ``n_ctx``),
``max_reply_tokens`` (a cap on every call's ``max_tokens``), ``batch_size`` (embeddings, 64).

Every HTTP request is an :class:`~pmem.models._types.Attempt` or the reply: a failed call carries all of
them, so the request log has one row per request the server received. A server's refusal of the
structured-output field, or of a prompt longer than its context, is not retried: the error names the
field and the dialect setting, or says the prompt does not fit (``overflow``).
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import SplitResult, urlsplit

import aiohttp
import numpy as np
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from pmem.models._errors import ModelCallError
from pmem.models._spec import STRUCTURED_DIALECTS, ModelSpec, structured_dialect, thaw
from pmem.models._types import (
    ANY_JSON_OBJECT,
    Attempt,
    ChatModel,
    Completion,
    Embedder,
    Embedding,
    EmbedRequest,
    parse_json_text,
)

if TYPE_CHECKING:
    from pmem.models._types import CallContext, CallOptions

#: The `openai` options that shape a client (the rest of a model table names the model or the backend).
CLIENT_OPTIONS = (
    "concurrency",
    "max_retries",
    "timeout_s",
    "backoff_s",
    "structured",
    "enable_thinking",
    "extra_body",
    "batch_size",
    "seed",
    "context_tokens",
    "max_reply_tokens",
)


class Reply(NamedTuple):
    """A server's JSON answer to one call: the body, its HTTP status, the failed attempts before it
    and the latency of the request that answered."""

    data: dict[str, Any]
    status: int
    failed: tuple[Attempt, ...]
    latency_s: float


def check_url(base_url: str) -> SplitResult:
    """The URL's parts, or ValueError when it is not an ``http``/``https`` URL with a host."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = f"model endpoint URL must be http://host[:port]/... or https://..., got {base_url!r}"
        raise ValueError(msg)
    return parts


async def _close_with_loop(session: aiohttp.ClientSession) -> None:
    """Wait until the event loop shuts down (``asyncio.run`` cancels what is left), then close the
    session there, so that a client used under several ``asyncio.run`` calls leaves no open one."""
    try:
        await asyncio.Event().wait()
    finally:
        await session.close()


class OpenAIClient:
    """One endpoint: an aiohttp session per event loop, a concurrency bound and retries."""

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
        parts = check_url(base_url)  # a malformed URL fails here, not on the first call
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.concurrency = int(concurrency)
        self.max_retries = int(max_retries)
        self.timeout_s = float(timeout_s)
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self._headers = {
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": "pmem",
        }
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._origin = f"{parts.scheme}://{parts.netloc}"
        # the system's CA store, or SSL_CERT_FILE / SSL_CERT_DIR as they are now (aiohttp's default
        # context was made when aiohttp was imported)
        self._ssl: ssl.SSLContext | bool = ssl.create_default_context() if parts.scheme == "https" else True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closer: asyncio.Task[None] | None = None
        self._sem: asyncio.Semaphore | None = None
        self._proxy: tuple[URL | None, aiohttp.BasicAuth | None] = (None, None)
        self.requests_sent = 0

    def _ensure(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            # connections belong to their loop: a new asyncio.run() needs a new session
            try:  # the environment's proxy for this endpoint, by the rules aiohttp's trust_env applies
                self._proxy = get_env_proxy_for_url(URL(self.base_url))
            except LookupError:
                self._proxy = (None, None)
            # trust_env would look the proxy and ~/.netrc up again on every request, in a worker thread
            # each time (it doubles the client's CPU per request), and netrc credentials would clash
            # with the Authorization header: the proxy is resolved once, above.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.concurrency, ssl=self._ssl),
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
            self._closer = loop.create_task(_close_with_loop(self._session))
            self._sem = asyncio.Semaphore(self.concurrency)
            self._loop = loop
        assert self._sem is not None
        return self._session, self._sem

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(self.backoff_max_s, max(0.0, float(retry_after)))
            except ValueError:
                pass
        base = min(self.backoff_max_s, self.backoff_s * (2 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)  # jitter spreads retries of concurrent callers

    async def post_json(
        self,
        path: str,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
        refusal: Callable[[int, str], ModelCallError | None] | None = None,
    ) -> Reply:
        """POST ``payload``; the JSON reply with its status and the failed attempts before it.

        ``refusal(status, body)`` may turn a non-2xx answer into the call's own error (not retried, not
        failed over): a server that refuses a request field refuses it on every retry and replica.
        Every failure raises :class:`ModelCallError` carrying all attempts made.
        """
        url = f"{self.base_url}{path}"
        session, sem = self._ensure()
        proxy, proxy_auth = self._proxy
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        last, failover, retry_after = "no attempt made", False, None
        attempts = self.max_retries + 1
        failed: list[Attempt] = []
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self._delay(attempt, retry_after))
            retry_after = None
            status: int | None = None
            async with sem:
                # timed inside the bound: waiting for a free slot is queueing, not the call
                t0 = time.perf_counter()
                try:
                    self.requests_sent += 1
                    async with session.post(
                        url,
                        data=body,
                        headers=headers,
                        proxy=proxy,
                        proxy_auth=proxy_auth,
                        allow_redirects=False,
                    ) as resp:
                        status, raw = resp.status, await resp.read()
                        resp_headers = resp.headers
                except TimeoutError:
                    last, failover = f"timed out after {self.timeout_s:g} s", True
                except aiohttp.ClientConnectorError as exc:
                    last, failover = f"cannot connect to {self._origin}: {exc}", True
                except aiohttp.ClientError as exc:  # dropped connections, malformed responses
                    last, failover = f"{type(exc).__name__} from {self._origin}: {exc}", True
                latency = time.perf_counter() - t0
            if status is None:
                failed.append(Attempt(None, last, latency))
                continue
            text = raw[:500].decode("utf-8", "replace")
            if status >= 300 and refusal is not None:
                refused = refusal(status, raw.decode("utf-8", "replace"))
                if refused is not None:
                    failed.append(Attempt(status, str(refused), latency))
                    refused.attempts = tuple(failed)
                    raise refused
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {text[:300]}"
                failover = status >= 500
                retry_after = resp_headers.get("Retry-After")
                failed.append(Attempt(status, last, latency))
                continue
            if status in (401, 403):
                # a credential problem is not transient: retrying (or failing over to a replica that
                # shares the key) cannot fix it. The message names the URL, never the key.
                sent = "the configured api_key" if self.api_key else "no api_key"
                msg = f"POST {url} refused the credentials (HTTP {status}; {sent} was sent): {text[:300]}"
                failed.append(Attempt(status, msg, latency))
                raise ModelCallError(msg, endpoint=url, attempts=tuple(failed))
            if status >= 300:
                location = resp_headers.get("Location")
                where = f" (Location: {location})" if location else ""
                msg = f"POST {url} rejected the request: HTTP {status}{where}: {text}"
                failed.append(Attempt(status, msg, latency))
                raise ModelCallError(msg, endpoint=url, attempts=tuple(failed))
            try:
                return Reply(json.loads(raw), status, tuple(failed), latency)
            except ValueError:
                last, failover = f"response body is not JSON: {raw[:120]!r}", True
                failed.append(Attempt(status, last, latency))
        msg = f"POST {url} failed after {attempts} attempt(s): {last}"
        raise ModelCallError(msg, endpoint=url, failover=failover, attempts=tuple(failed))

    async def aclose(self) -> None:
        session, closer, self._session, self._closer = self._session, self._closer, None, None
        if session is not None and self._loop is asyncio.get_running_loop():
            if closer is not None:
                closer.cancel()  # it closes the session as it ends
                await asyncio.gather(closer, return_exceptions=True)
            await session.close()


def client_from_spec(spec: ModelSpec, url: str | None = None) -> OpenAIClient:
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


def _model_name(spec: ModelSpec, what: str) -> str:
    if not spec.model:
        msg = f"backend {spec.backend!r} needs a 'model' (the served {what} name) in its model config"
        raise ValueError(msg)
    return spec.model


#: what a server says when a prompt does not fit its context (vLLM, llama.cpp, OpenAI)
_OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "exceed context window",
    "exceeds the context",
    "context window",
    "max_model_len",
)


def _overflow(status: int, body: str) -> bool:
    low = body.lower()
    return status in (400, 413, 422, 500) and any(m in low for m in _OVERFLOW_MARKERS)


class OpenAIChatModel(ChatModel):
    def __init__(
        self,
        client: OpenAIClient,
        model: str,
        *,
        structured: str = "json_schema",
        enable_thinking: bool | str = False,
        extra_body: dict[str, Any] | None = None,
        seed: int | None = None,
        context_tokens: int | None = None,
        reply_token_limit: int | None = None,
    ) -> None:
        self.client = client
        self.model_id = model
        self.structured = structured_dialect(structured)
        self.enable_thinking = enable_thinking
        self.extra_body = dict(extra_body or {})
        self.seed = None if seed is None else int(seed)
        self.context_tokens = None if context_tokens is None else int(context_tokens)
        self.reply_token_limit = None if reply_token_limit is None else int(reply_token_limit)

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> OpenAIChatModel:
        return cls(
            client_from_spec(spec),
            _model_name(spec, "model"),
            structured=str(spec.option("structured", "json_schema")),
            enable_thinking=spec.option("enable_thinking", False),
            extra_body=thaw(spec.option("extra_body")) or {},
            seed=spec.option("seed"),
            context_tokens=context_tokens_of(spec),
            reply_token_limit=spec.option("max_reply_tokens"),
        )

    def payload(self, messages: Sequence[dict[str, str]], options: CallOptions) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model_id,
            "messages": [dict(m) for m in messages],
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
        }
        if self.seed is not None:
            payload["seed"] = self.seed
        if self.enable_thinking != "omit":
            payload["chat_template_kwargs"] = {"enable_thinking": bool(self.enable_thinking)}
        schema = options.schema
        if schema == ANY_JSON_OBJECT and self.structured != "none":
            # every dialect's servers have a plain JSON mode, and only it leaves the object's fields free
            payload["response_format"] = {"type": "json_object"}
        elif schema is not None:
            if self.structured in ("json_schema", "both"):
                payload["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": schema, "strict": True},
                }
            if self.structured in ("structured_outputs", "both"):
                payload["structured_outputs"] = {"json": schema}
            if self.structured == "json_object":
                payload["response_format"] = {"type": "json_object", "schema": schema}
        payload.update(self.extra_body)
        return payload

    def _refusal(self, structured: bool) -> Callable[[int, str], ModelCallError | None]:
        """The errors a server gives for the request itself, which no retry or replica can fix."""
        url = f"{self.client.base_url}/chat/completions"

        def check(status: int, body: str) -> ModelCallError | None:
            line = " ".join(body.split())[:300]
            if _overflow(status, body):
                msg = f"POST {url}: the prompt does not fit the model's context (HTTP {status}): {line}"
                return ModelCallError(msg, endpoint=url, overflow=True)
            low = body.lower()
            fields = ("response_format", "json_schema", "structured_outputs", "json_object")
            if structured and status in (400, 422, 500, 501) and any(f in low for f in fields):
                others = ", ".join(d for d in STRUCTURED_DIALECTS if d != self.structured)
                msg = (
                    f"POST {url} refused the structured-output field of dialect {self.structured!r} "
                    f"(HTTP {status}): {line}. Set 'structured' in the model's table to the server's "
                    f"dialect ({others}); llama.cpp's server takes 'json_object'"
                )
                return ModelCallError(msg, endpoint=url)
            return None

        return check

    async def generate(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        structured = options.schema is not None and self.structured != "none"
        reply = await self.client.post_json(
            "/chat/completions",
            self.payload(messages, options),
            {"X-Purpose": options.purpose},
            refusal=self._refusal(structured),
        )
        data = reply.data
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            msg = f"POST {self.client.base_url}/chat/completions returned no choices[0].message: {exc}"
            # the request that answered without a message is an attempt of its own
            tried = (*reply.failed, Attempt(reply.status, msg, reply.latency_s))
            raise ModelCallError(msg, endpoint=self.client.base_url, attempts=tried) from exc
        usage = data.get("usage") or {}
        parsed, parse_error = parse_json_text(text) if options.schema is not None else (None, None)
        finish = choice.get("finish_reason")
        return Completion(
            text=text,
            model=str(data.get("model") or self.model_id),
            purpose=options.purpose,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            latency_s=reply.latency_s,  # the request that answered: not the queue, nor earlier attempts
            parsed=parsed,
            parse_error=parse_error,
            finish_reason=None if finish is None else str(finish),
            http_status=reply.status,
            attempts=reply.failed,
        )

    async def aclose(self) -> None:
        await self.client.aclose()


def context_tokens_of(spec: ModelSpec) -> int | None:
    """The served model's context window from its table: ``context_tokens``, else ``max_model_len``
    (vLLM) or ``n_ctx`` (llama.cpp); None when none is given."""
    for key in ("context_tokens", "max_model_len", "n_ctx"):
        value = spec.option(key)
        if value:
            return int(value)
    return None


class OpenAIEmbedder(Embedder):
    def __init__(self, client: OpenAIClient, model: str, *, batch_size: int = 64) -> None:
        self.client = client
        self.model_id = model
        self.batch_size = int(batch_size)

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> OpenAIEmbedder:
        return cls(
            client_from_spec(spec),
            _model_name(spec, "embedding model"),
            batch_size=int(spec.option("batch_size", 64)),
        )

    async def _batch(self, texts: list[str]) -> tuple[np.ndarray, tuple[EmbedRequest, ...]]:
        """One POST: the vectors, and the call's HTTP requests (failed attempts first, then the reply
        with the server's ``usage``); a reply without usable vectors fails with all of them."""
        reply = await self.client.post_json(
            "/embeddings", {"model": self.model_id, "input": texts}, {"X-Purpose": "embed"}
        )
        failed = tuple(EmbedRequest(a.status, a.latency_s, error=a.error) for a in reply.failed)
        where = f"POST {self.client.base_url}/embeddings"
        try:
            rows = sorted(reply.data["data"], key=lambda d: d["index"])
            vectors = _embedding_matrix([r["embedding"] for r in rows], len(texts), self.client.base_url)
        except (KeyError, TypeError, ModelCallError) as exc:
            msg = (
                str(exc)
                if isinstance(exc, ModelCallError)
                else f"{where} returned no usable data[].embedding: {exc!r}"
            )
            attempts = (*reply.failed, Attempt(reply.status, msg, reply.latency_s))
            raise ModelCallError(msg, endpoint=self.client.base_url, attempts=attempts) from exc
        tokens = int((reply.data.get("usage") or {}).get("prompt_tokens") or 0)
        return vectors, (*failed, EmbedRequest(reply.status, reply.latency_s, tokens))

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        texts = list(texts)
        if not texts:
            return Embedding(np.zeros((0, 0), dtype=np.float32), 0, False)
        parts = await asyncio.gather(
            *(self._batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)),
            return_exceptions=True,
        )
        done = [p for p in parts if not isinstance(p, BaseException)]
        requests = tuple(r for p in done for r in p[1])
        # answered batches of a call that fails are requests too: they stay in the call's record
        answered = tuple(
            Attempt(r.status, r.error or "answered; the call failed", r.latency_s) for r in requests
        )
        failures = [p for p in parts if isinstance(p, BaseException)]
        if failures:
            first = failures[0]
            if isinstance(first, ModelCallError):
                others = [a for f in failures[1:] if isinstance(f, ModelCallError) for a in f.attempts]
                first.attempts = (*answered, *others, *first.attempts)
            raise first
        dims = sorted({p[0].shape[1] for p in done})
        if len(dims) > 1:
            msg = (
                f"POST {self.client.base_url}/embeddings returned vectors of {dims} dimensions across batches"
            )
            raise ModelCallError(msg, endpoint=self.client.base_url, attempts=answered)
        vectors = np.concatenate([p[0] for p in done], axis=0)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms == 0, 1.0, norms)
        tokens = sum(r.prompt_tokens for r in requests)
        return Embedding(vectors.astype(np.float32, copy=False), tokens, False, requests)

    async def aclose(self) -> None:
        await self.client.aclose()


#: what a reply of per-token vectors most likely means, and what to do about it
_UNPOOLED = (
    "the server seems to return one vector per token (no pooling): start it with a pooling mode "
    "(llama.cpp: --pooling mean; vLLM: an embedding model with its pooler)"
)


def _embedding_matrix(embeddings: list[Any], n_inputs: int, endpoint: str) -> np.ndarray:
    """One finite vector per input, all of one dimension, as an (n, d) float32 matrix; else a one-line
    :class:`ModelCallError` naming the endpoint and the likely fix."""
    where = f"POST {endpoint}/embeddings"
    if len(embeddings) != n_inputs:
        msg = f"{where} returned {len(embeddings)} vectors for {n_inputs} inputs"
        raise ModelCallError(msg, endpoint=endpoint)
    nested = any(isinstance(e, list) and e and isinstance(e[0], list) for e in embeddings)
    if nested:
        msg = f"{where} returned a list of vectors for each input: {_UNPOOLED}"
        raise ModelCallError(msg, endpoint=endpoint)
    lengths = sorted({len(e) for e in embeddings if isinstance(e, list)})
    if len(lengths) != 1 or not all(isinstance(e, list) for e in embeddings):
        msg = f"{where} returned vectors of unequal or unknown dimensions ({lengths or 'none'}) in one reply"
        raise ModelCallError(msg, endpoint=endpoint)
    try:
        vectors = np.asarray(embeddings, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        msg = f"{where} returned embeddings that are not numbers: {exc}"
        raise ModelCallError(msg, endpoint=endpoint) from exc
    if not np.isfinite(vectors).all():
        msg = f"{where} returned embeddings with NaN or infinite values"
        raise ModelCallError(msg, endpoint=endpoint)
    return vectors


def openai_replicas(
    kind: str, urls: Sequence[str], model_id: str, options: Mapping[str, Any], api_key: str | None
) -> list[Any]:
    """One `openai` client per replica URL (``kind``: ``chat`` or ``embed``), configured by
    ``options`` (keys of :data:`pmem.models._openai.CLIENT_OPTIONS`) and carrying the replicas' key."""
    make = OpenAIEmbedder if kind == "embed" else OpenAIChatModel
    return [
        make.from_spec(
            ModelSpec.from_mapping(
                {**options, "backend": "openai", "url": url, "model": model_id, "api_key": api_key}
            )
        )
        for url in urls
    ]
