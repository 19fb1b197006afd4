"""The merge: the partitions' applied operations, in global arrival order, into the one graph.

Each row of the stream is one piece of evidence (its position among the ingested rows is its evidence
index) followed by the operations applied for its facts, in fact order. Replaying exactly the calls the
partitions made, in that order, gives the graph sequential ingestion gives: an operation's outcome
depends only on its key's history, which is the same in the partition as here. The rows of a batch go to
the graph as one write batch (:meth:`ProvenanceGraph.apply_batch`, byte-identical to one call per row).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pmem.graph import WRITE_BATCH_SCHEMA

if TYPE_CHECKING:
    from pmem.graph import ProvenanceGraph


def write_batches(
    events: pa.RecordBatch, first: int, applied: list[Any], valid_times: list[str | None]
) -> list[pa.Table | tuple[str, str, str | None, str]]:
    """``events`` (positions ``first``...) as observations, each followed by its row's operations from
    ``applied`` (``(position, fact, op, key, value, evidence)``, sorted by position and fact).

    A write batch has no valid-time column: an observation with a valid time (``valid_times``, one per
    event) ends the write batch before it and is returned as ``(text, source, time, valid_time)``, for
    :meth:`ProvenanceGraph.observe`; its operations start the next write batch."""
    out: list[pa.Table | tuple[str, str, str | None, str]] = []
    texts: list[Any] = events.column("text").to_pylist()
    sources: list[Any] = events.column("source").to_pylist()
    times: list[Any] = events.column("time").to_pylist()
    columns: dict[str, list[Any]] = {name: [] for name in WRITE_BATCH_SCHEMA.names}
    op, text, source, time, key, value, evidence = columns.values()
    at = 0
    for i, (t, s, tm, vt) in enumerate(zip(texts, sources, times, valid_times, strict=True)):
        if vt is not None:
            if op:
                out.append(pa.table(columns, schema=WRITE_BATCH_SCHEMA))
                columns = {name: [] for name in WRITE_BATCH_SCHEMA.names}
                op, text, source, time, key, value, evidence = columns.values()
            out.append((t, s or "user", tm, vt))
        else:
            op.append(None)
            text.append(t)
            source.append(s or "user")
            time.append(tm)
            key.append(None)
            value.append(None)
            evidence.append(None)
        position = first + i
        while at < len(applied) and applied[at][0] == position:
            _, _, name, k, v, ev = applied[at]
            op.append(name)
            text.append(None)
            source.append(None)
            time.append(None)
            key.append(k)
            value.append(v)
            evidence.append(None if ev < 0 else ev)
            at += 1
    if at != len(applied):
        msg = f"merge: {len(applied) - at} operation(s) name rows outside positions {first}..{first + len(texts) - 1}"
        raise RuntimeError(msg)
    if op:
        out.append(pa.table(columns, schema=WRITE_BATCH_SCHEMA))
    return out


def merge_batch(
    graph: ProvenanceGraph,
    events: pa.RecordBatch,
    first: int,
    applied: list[Any],
    valid_times: list[str | None] | None = None,
) -> None:
    """Observe ``events`` (with their evidence's ``valid_times``) and replay ``applied`` into ``graph``,
    in arrival order: write batches, and ``observe`` for evidence with a valid time."""
    for part in write_batches(events, first, applied, valid_times or [None] * events.num_rows):
        if isinstance(part, tuple):
            text, source, time, valid_time = part
            graph.observe(text, source, time, valid_time)
        else:
            graph.apply_batch(part)
