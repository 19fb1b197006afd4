"""The model layer's public shapes: what a chat call returns and how it is logged.

Kept free of any backend so that memories, benchmarks and the runner can type against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

#: Purpose tags a call may carry; free-form strings are allowed, these are the ones the project uses.
PURPOSES = ("extract", "annotate", "identity", "answer", "lookup", "prune", "gate", "crud", "dedupe", "judge")


@dataclass(frozen=True)
class CallContext:
    """Who is calling: used for request logging and for routing one history to one replica."""

    history_id: str | None = None
    arm: str | None = None


@dataclass(frozen=True)
class Completion:
    """One chat completion. ``parsed`` is set when a schema was given and the text parsed."""

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

    @classmethod
    def failed(cls, *, model: str, purpose: str, latency_s: float, error: str) -> Completion:
        """A call that got no reply: empty text, no tokens, and why."""
        return cls(
            text="",
            model=model,
            purpose=purpose,
            prompt_tokens=0,
            completion_tokens=0,
            latency_s=latency_s,
            error=error,
        )


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


@runtime_checkable
class ChatModel(Protocol):
    """Async chat completion. Backends: heuristic, openai, vllm."""

    model_id: str

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        purpose: str,
        max_tokens: int = 256,
        temperature: float = 0.0,
        schema: dict[str, Any] | None = None,
        context: CallContext | None = None,
    ) -> Completion: ...


@runtime_checkable
class Embedder(Protocol):
    """Batch of texts -> (n, d) float32, rows L2-normalized."""

    model_id: str

    async def embed(self, texts: Sequence[str], *, context: CallContext | None = None) -> np.ndarray: ...
