"""Model calls of an ingest: the sweep's clients, each call logged under the stream row it serves.

The write path calls models without saying which row it is working on; the row is set in a context
variable around each piece of work (:func:`for_row`), and the wrappers here put it in the call's
context, so every ``requests/`` row of an ingest names its stream row (``history_id`` = ``row:N``, or
``row:N/F`` for the F-th fact of row N) and ``arm`` = ``ingest``.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from pmem.models import CallContext, ResponseCache
from pmem.runner import RecordingChatModel, RecordingEmbedder, model_client

if TYPE_CHECKING:
    from pmem.models import CallOptions, Completion, Embedding, RequestLog
    from pmem.runner import Hosted, RoleSpec

#: The ``arm`` column of an ingest's request rows.
INGEST_ARM = "ingest"
_ROW: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar("pmem_ingest_row", default=None)


def row_id(row: int, fact: int | None = None) -> str:
    """The ``history_id`` of the calls made for stream row ``row`` (and its ``fact``-th fact)."""
    return f"row:{row}" if fact is None else f"row:{row}/{fact}"


@contextmanager
def for_row(row: int, fact: int | None = None) -> Iterator[None]:
    """Log the model calls made inside the block under stream row ``row``."""
    token = _ROW.set(CallContext(history_id=row_id(row, fact), arm=INGEST_ARM))
    try:
        yield
    finally:
        _ROW.reset(token)


class RowChat(RecordingChatModel):
    """A chat client whose calls carry the current stream row (and fail the batch when they fail)."""

    async def call(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        ctx = _ROW.get()
        if ctx is not None and options.context is None:
            options = dataclasses.replace(options, context=ctx)
        return await super().call(messages, options)


class RowEmbedder(RecordingEmbedder):
    """An embedder whose batches carry the current stream row."""

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        return await super().embed_usage(texts, context=context or _ROW.get())


class UnusedEmbedder(RecordingEmbedder):
    """The embedder of a partition worker: identity is resolved on the driver, so a call is a bug."""

    def __init__(self) -> None:
        self.model_id = "unused"

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        msg = "a partition worker does not embed: soft identity is resolved on the ingest driver"
        raise RuntimeError(msg)


def open_ingest_cache(path: str | None) -> ResponseCache | None:
    """An ingest process's response cache (None when caching is off): entries are held and written
    once per batch (:meth:`ResponseCache.flush`), before the calls are reported to the driver or
    logged, so every logged call is in the cache when a resumed run looks for it."""
    return ResponseCache(path, write_behind=True) if path else None


def build_models(
    spec: RoleSpec, hosted: dict[str, Hosted], cache: ResponseCache | None, log: RequestLog, key: str
) -> Any:
    """The sweep's client for ``spec`` (the driver-hosted replicas when there are some), logged."""
    base = model_client(spec, key, hosted, cache)
    recorder = SimpleNamespace(log=log)
    ctx = CallContext(arm=INGEST_ARM)
    return (RowEmbedder if spec.role == "embedder" else RowChat)(base, recorder, ctx)  # type: ignore[arg-type]
