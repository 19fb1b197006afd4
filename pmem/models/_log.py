"""The request log: one :class:`RequestRecord` per model call, to be written to ``requests/``.

The runner drains the rows of one history when the history completes and writes them with
:func:`records_to_table` (columns of DESIGN.md's ``requests/`` dataset).

>>> log = RequestLog()
>>> log.add(RequestRecord("h1", "pmem", "extract", "heuristic", 10, 3, False, 0.001, None, True))
>>> [r.history_id for r in log.drain("h1")], len(log)
(['h1'], 0)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from pmem.models._types import CallContext, Completion, Embedding, RequestRecord
from pmem.rundir import REQUESTS, SchemaError

if TYPE_CHECKING:
    import pyarrow as pa

#: The request log's columns: those of the run directory's ``requests/`` dataset (:data:`pmem.rundir.REQUESTS`,
#: the one definition) that a :class:`RequestRecord` carries, in that dataset's order. The runner adds the
#: unit's keys (``run_id``, ``unit_id``, ...) when it writes ``requests/``.
REQUEST_COLUMNS: tuple[str, ...] = tuple(
    c for c in REQUESTS.columns if c in {f.name for f in fields(RequestRecord)}
)


def requests_schema() -> pa.Schema:
    """The Arrow schema of :data:`REQUEST_COLUMNS` (types from :data:`pmem.rundir.REQUESTS`)."""
    import pyarrow as pa

    full = REQUESTS.schema
    return pa.schema([full.field(c) for c in REQUEST_COLUMNS])


def records_from(completion: Completion, context: CallContext | None) -> list[RequestRecord]:
    """The request rows of one call: one per HTTP request it made (failed attempts first, each with its
    status and error), or one row for a call no server saw (a cache hit, an in-process model).

    The reply's raw text is kept (``reply``) when it did not parse or stopped at ``max_tokens``.
    """
    ctx = context or CallContext()
    c = completion

    def row(**values: Any) -> RequestRecord:
        base: dict[str, Any] = {
            "history_id": ctx.history_id,
            "arm": ctx.arm,
            "purpose": c.purpose,
            "model": c.model,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cached": False,
            "latency_s": 0.0,
            "error": None,
            "tokens_estimated": False,
        }
        return RequestRecord(**{**base, **values})

    rows = [
        row(http_attempt=i + 1, http_status=a.status, error=a.error, latency_s=a.latency_s)
        for i, a in enumerate(c.attempts)
    ]
    if c.error is not None and rows:
        # the call's own message (it names the endpoint and the number of attempts) on its last request
        rows[-1] = replace(rows[-1], error=c.error)
        return rows
    kept = c.text if (c.parse_error is not None or c.truncated) and c.text else None
    sent = c.http_status is not None and not c.cached
    rows.append(
        row(
            prompt_tokens=c.prompt_tokens,
            completion_tokens=c.completion_tokens,
            cached=c.cached,
            latency_s=c.latency_s,
            # a reply that did not parse is not a failed call: the write path records it as a noop with its reason
            error=c.error,
            tokens_estimated=c.tokens_estimated,
            http_attempt=len(rows) + 1 if sent else None,
            http_status=c.http_status if sent else None,
            finish_reason=c.finish_reason,
            parse_error=c.parse_error,
            reply=kept,
        )
    )
    return rows


#: the purpose every embedding request is logged under, at write and at read time alike (an embedding
#: request cannot be told to be a write cost, so the report charges none as one)
EMBED_PURPOSE = "embed"


def embedding_records(
    embedding: Embedding, context: CallContext | None, model: str, latency_s: float
) -> list[RequestRecord]:
    """The request rows of one embedding call: one per HTTP request it sent (failed attempts too, each
    with its status and error; the answered ones with the server's ``usage`` tokens), plus one row
    ``cached`` for the texts the vector cache answered (their tokens estimated); a call no server saw
    and no cache answered (an in-process model) is one row of its own.

    >>> import numpy as np
    >>> from pmem.models._types import EmbedRequest
    >>> e = Embedding(np.zeros((3, 2)), 12, False, (EmbedRequest(200, 0.1, 12),), cached_texts=1, cached_tokens=4)
    >>> [(r.http_status, r.prompt_tokens, r.cached) for r in embedding_records(e, None, "m", 0.2)]
    [(200, 12, False), (None, 4, True)]
    """
    ctx = context or CallContext()

    def row(**values: Any) -> RequestRecord:
        return RequestRecord(
            ctx.history_id,
            ctx.arm,
            EMBED_PURPOSE,
            model,
            **{
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cached": False,
                "latency_s": 0.0,
                "error": None,
                **values,
            },
        )

    rows = [
        row(
            prompt_tokens=r.prompt_tokens,
            latency_s=r.latency_s,
            error=r.error,
            http_attempt=i + 1,
            http_status=r.status,
        )
        for i, r in enumerate(embedding.requests)
    ]
    if embedding.cached_texts:
        rows.append(
            row(
                prompt_tokens=embedding.cached_tokens, cached=True, tokens_estimated=True, latency_s=latency_s
            )
        )
    if not rows:
        rows.append(
            row(
                prompt_tokens=embedding.prompt_tokens,
                tokens_estimated=embedding.tokens_estimated,
                latency_s=latency_s,
            )
        )
    return rows


def failure_records(
    exc: BaseException, context: CallContext | None, purpose: str, model: str, latency_s: float
) -> list[RequestRecord]:
    """The request rows of a call that raised: one per HTTP request it sent (a
    :class:`~pmem.models.ModelCallError` carries them), the call's own message on the last; one row
    when it sent none.

    >>> from pmem.models._errors import ModelCallError
    >>> from pmem.models._types import Attempt
    >>> exc = ModelCallError("gave up after 2 attempts", attempts=(Attempt(503, "busy", 0.1), Attempt(None, "refused", 0.0)))
    >>> [(r.http_status, r.error) for r in failure_records(exc, None, "embed", "m", 0.3)]
    [(503, 'busy'), (None, 'ModelCallError: gave up after 2 attempts')]
    """
    ctx = context or CallContext()
    message = f"{type(exc).__name__}: {exc}"[:500]
    attempts = getattr(exc, "attempts", ()) or ()
    rows = [
        RequestRecord(
            ctx.history_id,
            ctx.arm,
            purpose,
            model,
            0,
            0,
            False,
            a.latency_s,
            a.error,
            http_attempt=i + 1,
            http_status=a.status,
        )
        for i, a in enumerate(attempts)
    ]
    if rows:
        rows[-1] = replace(rows[-1], error=message)
        return rows
    return [RequestRecord(ctx.history_id, ctx.arm, purpose, model, 0, 0, False, latency_s, message)]


class RequestLog:
    """Thread-safe in-memory sink of request rows, grouped by history for atomic per-history writes."""

    def __init__(self) -> None:
        self._rows: list[RequestRecord] = []
        self._lock = threading.Lock()

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._rows.append(record)

    def add_completion(self, completion: Completion, context: CallContext | None) -> None:
        """One row per HTTP request of the call (see :func:`records_from`)."""
        rows = records_from(completion, context)
        with self._lock:
            self._rows.extend(rows)

    def add_embedding(
        self, embedding: Embedding, context: CallContext | None, model: str, latency_s: float
    ) -> None:
        """One row per HTTP request of the embedding call (see :func:`embedding_records`)."""
        rows = embedding_records(embedding, context, model, latency_s)
        with self._lock:
            self._rows.extend(rows)

    def add_failure(
        self, exc: BaseException, context: CallContext | None, purpose: str, model: str, latency_s: float
    ) -> None:
        """The rows of a call that raised (see :func:`failure_records`)."""
        rows = failure_records(exc, context, purpose, model, latency_s)
        with self._lock:
            self._rows.extend(rows)

    def records(self, history_id: str | None = None, arm: str | None = None) -> list[RequestRecord]:
        """A copy of the rows (of one history/arm when given), in call order."""
        with self._lock:
            return [r for r in self._rows if _match(r, history_id, arm)]

    def drain(self, history_id: str | None = None, arm: str | None = None) -> list[RequestRecord]:
        """Remove and return the rows (of one history/arm when given; all rows otherwise)."""
        with self._lock:
            taken = [r for r in self._rows if _match(r, history_id, arm)]
            self._rows = [r for r in self._rows if not _match(r, history_id, arm)]
            return taken

    def __len__(self) -> int:
        return len(self._rows)


def _match(r: RequestRecord, history_id: str | None, arm: str | None) -> bool:
    return (history_id is None or r.history_id == history_id) and (arm is None or r.arm == arm)


def records_to_table(records: Iterable[RequestRecord], **constants: Any) -> pa.Table:
    """Rows -> an Arrow table with :data:`REQUEST_COLUMNS`, plus ``constants`` (e.g. ``run_id``) as columns.

    A constant must be another column of ``requests/``: anything else raises :class:`pmem.rundir.SchemaError`
    rather than leaving a column no reader knows.
    """
    import pyarrow as pa

    rows = list(records)
    schema = requests_schema()
    table = pa.table(
        {
            name: pa.array([getattr(r, name) for r in rows], type=schema.field(name).type)
            for name in REQUEST_COLUMNS
        }
    )
    full = REQUESTS.schema
    for name, value in constants.items():
        if name not in REQUESTS.columns or name in REQUEST_COLUMNS:
            msg = f"requests: {name!r} is not a column a constant can fill (columns: {', '.join(REQUESTS.columns)})"
            raise SchemaError(msg)
        table = table.append_column(
            full.field(name), pa.array([value] * len(rows), type=full.field(name).type)
        )
    return table
