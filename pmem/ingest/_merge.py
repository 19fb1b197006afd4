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


def write_batch(events: pa.RecordBatch, first: int, applied: list[Any]) -> pa.Table:
    """``events`` (positions ``first``...) as observations, each followed by its row's operations from
    ``applied`` (``(position, fact, op, key, value, evidence)``, sorted by position and fact)."""
    texts: list[Any] = events.column("text").to_pylist()
    sources: list[Any] = events.column("source").to_pylist()
    times: list[Any] = events.column("time").to_pylist()
    columns: dict[str, list[Any]] = {name: [] for name in WRITE_BATCH_SCHEMA.names}
    op, text, source, time, key, value, evidence = columns.values()
    at = 0
    for i, (t, s, tm) in enumerate(zip(texts, sources, times, strict=True)):
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
    return pa.table(columns, schema=WRITE_BATCH_SCHEMA)


def merge_batch(graph: ProvenanceGraph, events: pa.RecordBatch, first: int, applied: list[Any]) -> None:
    """Observe ``events`` and replay ``applied`` into ``graph``, in arrival order, as one write batch."""
    graph.apply_batch(write_batch(events, first, applied))
