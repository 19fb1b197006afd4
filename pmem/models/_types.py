"""The model layer's public shapes: what a call takes and returns, and the two base classes.

Kept free of any backend so that memories, benchmarks and the runner can type against it.

Every chat model is a :class:`ChatModel`: callers use ``complete(messages, purpose=..., ...)``, whose
keywords are written out once, here; a backend implements :meth:`ChatModel.generate`, which takes the
same keywords as one :class:`CallOptions`. Embedders likewise implement :meth:`Embedder.embed_usage`.
Both have ``start``/``stop``/``aclose``, no-ops unless a backend holds processes or connections, so
that their owners call them on any model without probing.

>>> import asyncio
>>> class Echo(ChatModel):
...     model_id = "echo"
...     async def generate(self, messages, options):
...         return Completion(messages[-1]["content"], self.model_id, options.purpose, 1, 1)
>>> asyncio.run(Echo().complete([{"role": "user", "content": "hi"}], purpose="answer")).text
'hi'
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from pmem.models._errors import ModelCallError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import numpy as np

#: Purpose tags a call may carry; free-form strings are allowed, these are the ones the project uses.
PURPOSES = ("extract", "annotate", "identity", "answer", "lookup", "prune", "gate", "crud", "dedupe", "judge")

#: The schema of a call that wants a JSON object and says nothing of its fields (an OpenAI request's
#: ``response_format: {"type": "json_object"}``). Backends send it as their plain JSON mode, not as a
#: schema: llama-cpp-python compiles ``{"type": "object"}`` into a grammar under which Qwen2.5-1.5B
#: answers Mem0's extraction prompt with ``{"memory": []}`` (5 tokens) where its JSON mode gives the
#: 17 facts of the unit (518 tokens), same prompt, greedy decoding.
ANY_JSON_OBJECT: dict[str, Any] = {"type": "object"}

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


@dataclass(frozen=True)
class CallContext:
    """Who is calling: used for request logging and for routing one history to one replica."""

    history_id: str | None = None
    arm: str | None = None


@dataclass(frozen=True, slots=True)
class CallOptions:
    """How one chat call is made: the keywords of :meth:`ChatModel.complete`, as one value that
    wrappers (cache, log, router) pass down unchanged."""

    purpose: str
    max_tokens: int = 256
    temperature: float = 0.0
    schema: dict[str, Any] | None = None
    context: CallContext | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP request of a call that did not give the call its reply (it failed, and the call was
    retried, failed over, or gave up). The request log writes each as a row of its own."""

    status: int | None  # the HTTP status; None when no response came (timeout, refused connection)
    error: str
    latency_s: float


@dataclass(frozen=True)
class Completion:
    """One chat completion. ``parsed`` is set when a schema was given and the text parsed.

    ``attempts`` are the failed HTTP requests made before this reply (or, for a failed call, all of
    them); ``http_status`` and ``finish_reason`` are the reply's own. ``overflow`` marks a call refused
    because its prompt does not fit the model's context.
    """

    text: str
    model: str
    purpose: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False
    latency_s: float = 0.0
    error: str | None = None
    parsed: Any = None
    parse_error: str | None = None
    tokens_estimated: bool = False
    finish_reason: str | None = None
    http_status: int | None = None
    attempts: tuple[Attempt, ...] = ()
    overflow: bool = False

    @property
    def truncated(self) -> bool:
        """The reply stopped at ``max_tokens`` (``finish_reason == "length"``)."""
        return self.finish_reason == "length"

    @classmethod
    def failed(
        cls,
        *,
        model: str,
        purpose: str,
        latency_s: float,
        error: str,
        attempts: tuple[Attempt, ...] = (),
        overflow: bool = False,
    ) -> Completion:
        """A call that got no reply: empty text, no tokens, and why."""
        return cls(
            text="",
            model=model,
            purpose=purpose,
            prompt_tokens=0,
            completion_tokens=0,
            latency_s=latency_s,
            error=error,
            attempts=attempts,
            overflow=overflow,
        )


def parse_json_text(text: str) -> tuple[Any, str | None]:
    """Parse a model's JSON reply (tolerating a ``` fence); (value, None) or (None, reason).

    >>> parse_json_text('```json\\n{"a": 1}\\n```')
    ({'a': 1}, None)
    """
    m = _FENCE.match(text)
    try:
        return json.loads(m.group(1) if m else text), None
    except ValueError as exc:
        return None, f"response is not valid JSON: {exc}"


class EmbedRequest(NamedTuple):
    """One HTTP request an embedding call sent: the server's ``usage`` prompt tokens when it answered,
    else the failure (the call was retried, failed over, or gave up). The request log writes each as a
    row of its own."""

    status: int | None  # the HTTP status; None when no response came (timeout, refused connection)
    latency_s: float
    prompt_tokens: int = 0
    error: str | None = None


class Embedding(NamedTuple):
    """What :meth:`Embedder.embed_usage` returns: the vectors and what they cost.

    ``requests`` are the HTTP requests the call sent, in order (empty when no server saw it: an
    in-process model, or every text answered by the vector cache); ``cached_texts`` of the texts were
    answered by the vector cache, whose estimated prompt tokens are ``cached_tokens``.
    """

    vectors: np.ndarray  # (n, d) float32, rows L2-normalized
    prompt_tokens: int
    tokens_estimated: bool
    requests: tuple[EmbedRequest, ...] = ()
    cached_texts: int = 0
    cached_tokens: int = 0


@dataclass(frozen=True)
class RequestRecord:
    """One row of a run's ``requests/`` dataset (DESIGN.md, run directory contract)."""

    history_id: str | None
    arm: str | None
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    latency_s: float
    error: str | None
    tokens_estimated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    http_attempt: int | None = None
    http_status: int | None = None
    finish_reason: str | None = None
    parse_error: str | None = None
    reply: str | None = None


class Model:
    """What chat models and embedders share: an id and a lifecycle whose steps default to nothing."""

    model_id: str

    async def start(self) -> list[str]:
        """Launch what the model runs on (replica servers); their base URLs, or [] when there is
        nothing to launch or share (an in-process model, a remote endpoint)."""
        return []

    def stop(self) -> None:
        """Release what :meth:`start` took (replica processes, GPUs). Idempotent."""

    def save_logs(self, folder: Path, prefix: str) -> list[Path]:
        """Copy the logs of what :meth:`start` launched (each replica server's) into ``folder`` as
        ``<prefix>-replica-<i>.log``, before :meth:`stop` removes them; the files written, or [] when
        the model launched nothing."""
        return []

    async def aclose(self) -> None:
        """Close this event loop's connections (idle keep-alive sockets)."""


class InnerLimits:
    """The served model's limits, for a model that wraps another (cache, log, a unit's view): read from
    and written to the wrapped model, which is where a backend sets them."""

    inner: Any

    @property
    def context_tokens(self) -> int | None:
        return getattr(self.inner, "context_tokens", None)

    @context_tokens.setter
    def context_tokens(self, value: int | None) -> None:
        self.inner.context_tokens = value

    @property
    def reply_token_limit(self) -> int | None:
        return getattr(self.inner, "reply_token_limit", None)

    @reply_token_limit.setter
    def reply_token_limit(self, value: int | None) -> None:
        self.inner.reply_token_limit = value


class ChatModel(Model):
    """Async chat completion. Backends: heuristic, openai, vllm, llamacpp; wrappers: cache/log, router.

    ``context_tokens`` is the served model's context window in tokens (prompt and reply together), or
    None when unknown or unbounded; arms budget their prompts against it. ``reply_token_limit`` caps
    every call's ``max_tokens`` (a small model that loops inside a JSON array stops there, and its
    reply is recorded as truncated); it applies before any cache key is made.
    """

    context_tokens: int | None = None
    reply_token_limit: int | None = None

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
        """One call. It does not raise when the model fails: ``Completion.error`` says why."""
        return await self.call(messages, CallOptions(purpose, max_tokens, temperature, schema, context))

    async def call(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        """:meth:`complete` with its options as one value (what wrappers forward)."""
        limit = self.reply_token_limit
        if limit is not None and options.max_tokens > limit:
            options = dataclasses.replace(options, max_tokens=limit)
        t0 = time.perf_counter()
        try:
            return await self.generate(messages, options)
        except ModelCallError as exc:
            return Completion.failed(
                model=self.model_id,
                purpose=options.purpose,
                latency_s=time.perf_counter() - t0,
                error=str(exc),
                attempts=exc.attempts,
                overflow=exc.overflow,
            )

    async def generate(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        """What a backend implements: one completion, or :class:`ModelCallError` when the call failed
        for good (so that a router can try another replica)."""
        raise NotImplementedError


class Embedder(Model):
    """Batch of texts -> (n, d) float32, rows L2-normalized. Failures raise :class:`ModelCallError`."""

    async def embed(self, texts: Sequence[str], *, context: CallContext | None = None) -> np.ndarray:
        return (await self.embed_usage(texts, context=context)).vectors

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        """What a backend implements: the vectors, their prompt tokens and whether those are estimated."""
        raise NotImplementedError
