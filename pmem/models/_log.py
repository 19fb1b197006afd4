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
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from pmem.models._types import CallContext, Completion, RequestRecord
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


def record_from(completion: Completion, context: CallContext | None) -> RequestRecord:
    ctx = context or CallContext()
    return RequestRecord(
        history_id=ctx.history_id,
        arm=ctx.arm,
        purpose=completion.purpose,
        model=completion.model,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        cached=completion.cached,
        latency_s=completion.latency_s,
        # a reply that did not parse is not a failed call: the write path records it as a noop with its reason
        error=completion.error,
        tokens_estimated=completion.tokens_estimated,
    )


class RequestLog:
    """Thread-safe in-memory sink of request rows, grouped by history for atomic per-history writes."""

    def __init__(self) -> None:
        self._rows: list[RequestRecord] = []
        self._lock = threading.Lock()

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._rows.append(record)

    def add_completion(self, completion: Completion, context: CallContext | None) -> None:
        self.add(record_from(completion, context))

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
