"""The merge: the partitions' applied operations, in global arrival order, into the one graph.

Each row of the stream is one piece of evidence (its position among the ingested rows is its evidence
index) followed by the operations applied for its facts, in fact order. Replaying exactly the calls the
partitions made, in that order, gives the graph sequential ingestion gives: an operation's outcome
depends only on its key's history, which is the same in the partition as here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from pmem.graph import ProvenanceGraph


def merge_batch(graph: ProvenanceGraph, events: pa.RecordBatch, first: int, applied: list[Any]) -> None:
    """Observe ``events`` (positions ``first``...) and replay ``applied`` (sorted by position, fact)."""
    texts: list[Any] = events.column("text").to_pylist()
    sources: list[Any] = events.column("source").to_pylist()
    times: list[Any] = events.column("time").to_pylist()
    at = 0
    for i, (text, source, time) in enumerate(zip(texts, sources, times, strict=True)):
        graph.observe(text, source=source or "user", time=time)
        position = first + i
        while at < len(applied) and applied[at][0] == position:
            _, _, op, key, value, evidence = applied[at]
            graph.apply(op, key, value, evidence=None if evidence < 0 else f"e{evidence}")
            at += 1
    if at != len(applied):
        msg = f"merge: {len(applied) - at} operation(s) name rows outside positions {first}..{first + len(texts) - 1}"
        raise RuntimeError(msg)
