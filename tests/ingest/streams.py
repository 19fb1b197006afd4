"""Stream files for the ingest tests: the same rows as JSONL, Parquet or Arrow (file or stream format),
and the events ``read_stream`` gives back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from pmem.ingest._stream import StreamBatch, read_stream

#: A text event's fields, and a fact row's (an already-extracted fact adds key, op and value).
EVENT_FIELDS = ("text", "source", "time", "valid_time", "id")
FACT_FIELDS = (*EVENT_FIELDS, "key", "op", "value")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def as_table(rows: list[dict[str, Any]], fields: tuple[str, ...] = EVENT_FIELDS) -> pa.Table:
    """``rows`` as a table of string columns ``fields`` (a field a row lacks is null)."""
    return pa.Table.from_pylist(
        [{f: r.get(f) for f in fields} for r in rows], schema=pa.schema([(f, pa.string()) for f in fields])
    )


def write_parquet(path: Path, table: pa.Table, row_group_size: int = 4) -> Path:
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def write_arrow(path: Path, table: pa.Table, chunk: int = 4, *, stream_format: bool = False) -> Path:
    opener = ipc.new_stream if stream_format else ipc.new_file
    with opener(str(path), table.schema) as writer:
        for batch in table.to_batches(max_chunksize=chunk):
            writer.write_batch(batch)
    return path


def events_of(batches: Iterable[StreamBatch]) -> list[dict[str, Any]]:
    """The events of ``batches``, row by row."""
    return [row for b in batches for row in b.events.to_pylist()]


def read_events(path: Path, **options: Any) -> list[dict[str, Any]]:
    """The events ``read_stream(path, **options)`` gives, row by row."""
    return events_of(read_stream(path, **options))
