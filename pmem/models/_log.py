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
from typing import TYPE_CHECKING, Any

from pmem.models._types import CallContext, Completion, RequestRecord

if TYPE_CHECKING:
    import pyarrow as pa

#: Column order of a run's ``requests/`` dataset (DESIGN.md), then the model layer's extras.
REQUEST_COLUMNS = (
    "history_id",
    "arm",
    "purpose",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "cached",
    "latency_s",
    "error",
    "tokens_estimated",
)


def requests_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("history_id", pa.string()),
            ("arm", pa.string()),
            ("purpose", pa.string()),
            ("model", pa.string()),
            ("prompt_tokens", pa.int64()),
            ("completion_tokens", pa.int64()),
            ("cached", pa.bool_()),
            ("latency_s", pa.float64()),
            ("error", pa.string()),
            ("tokens_estimated", pa.bool_()),
        ]
    )


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
        error=completion.error or (f"parse: {completion.parse_error}" if completion.parse_error else None),
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
    """Rows -> an Arrow table with :data:`REQUEST_COLUMNS` (plus ``constants`` as columns, e.g. run_id)."""
    import pyarrow as pa

    rows = list(records)
    schema = requests_schema()
    columns = {name: [getattr(r, name) for r in rows] for name in REQUEST_COLUMNS}
    table = pa.table({name: pa.array(columns[name], type=schema.field(name).type) for name in REQUEST_COLUMNS})
    for name, value in constants.items():
        table = table.append_column(name, pa.array([value] * len(rows)))
    return table
