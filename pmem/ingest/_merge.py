"""The merge: the partitions' applied operations, in global arrival order, into the one graph.

Each row of the stream is one piece of evidence (its position among the ingested rows is its evidence
index) followed by the operations applied for its facts, in fact order. Replaying exactly the calls the
partitions made, in that order, gives the graph sequential ingestion gives: an operation's outcome
depends only on its key's history, which is the same in the partition as here. The rows of a batch go to
the graph as one write batch (:meth:`ProvenanceGraph.apply_batch`, byte-identical to one call per row).

A fact row (see :mod:`pmem.ingest._stream`) is the same: its evidence, then its one operation citing it,
exactly as given. A batch of fact rows only is turned into its write batch column-wise
(:func:`merge_fact_batch`); in a batch with text rows, the fact rows' operations are listed with the
partitions' (:func:`fact_row_operations`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph import WRITE_BATCH_SCHEMA
from pmem.ingest._stream import is_fact_row

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from pmem.graph import ProvenanceGraph

#: The fact index of a fact row's operation in an applied list (a text row's facts count from 0).
FACT_ROW = -1


def fact_row_operations(
    events: pa.RecordBatch, first: int
) -> list[tuple[int, int, str, str, str | None, int]]:
    """The operation of each fact row of ``events`` (positions from ``first``), as an applied list
    holds it: ``(position, FACT_ROW, op, key, value, position)``, citing the row's own evidence."""
    facts = np.flatnonzero(is_fact_row(events))
    taken = events.take(pa.array(facts, pa.int64()))
    positions: list[int] = (facts + first).tolist()
    ops: list[Any] = taken.column("op").to_pylist()  # set on every fact row
    keys: list[Any] = taken.column("key").to_pylist()
    values: list[str | None] = taken.column("value").to_pylist()
    return [
        (position, FACT_ROW, op, key, value, position)
        for position, op, key, value in zip(positions, ops, keys, values, strict=True)
    ]


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
) -> NDArray[np.bool_]:
    """Observe ``events`` (with their evidence's ``valid_times``) and replay ``applied`` into ``graph``,
    in arrival order: write batches, and ``observe`` for evidence with a valid time. Returns whether the
    graph applied each operation of ``applied``."""
    outcomes = [np.zeros(0, np.bool_)]
    for part in write_batches(events, first, applied, valid_times or [None] * events.num_rows):
        if isinstance(part, tuple):
            text, source, time, valid_time = part
            graph.observe(text, source, time, valid_time)
        else:
            outcomes.append(graph.apply_batch(part).applied)
    return np.concatenate(outcomes)


def fact_write_batch(events: pa.RecordBatch, first: int) -> pa.Table:
    """Fact rows (positions from ``first``) as one write batch, column-wise: each row's observation (its
    evidence text, source and time), then its operation citing it (``evidence`` = its position)."""
    n = events.num_rows
    order = np.empty(2 * n, np.int64)
    order[0::2] = np.arange(n)  # observation rows come first in the concatenation, operations after
    order[1::2] = np.arange(n, 2 * n)
    take = pa.array(order, pa.int64())
    evidence = pa.array(np.arange(first, first + n, dtype=np.int64))
    observed = {name: events.column(name) for name in ("text", "source", "time")}
    operated = {name: events.column(name) for name in ("op", "key", "value")} | {"evidence": evidence}
    columns = []
    for field in WRITE_BATCH_SCHEMA:
        observation = observed.get(field.name, pa.nulls(n, field.type))
        operation = operated.get(field.name, pa.nulls(n, field.type))
        columns.append(pa.concat_arrays([observation, operation]).take(take))
    return pa.table(columns, schema=WRITE_BATCH_SCHEMA)


def merge_fact_batch(graph: ProvenanceGraph, events: pa.RecordBatch, first: int) -> NDArray[np.bool_]:
    """Write a batch of fact rows only (positions from ``first``) into ``graph`` column-wise, as
    ``observe`` + ``apply`` per row would; whether each row's operation applied.

    A write batch has no valid-time column: a row with a valid time is observed on its own, between the
    write batches before and after it (its operation starts the next one)."""
    table = fact_write_batch(events, first)
    valid_time = events.column("valid_time")
    if valid_time.null_count == len(valid_time):
        return graph.apply_batch(table).applied
    outcomes = []
    cut = 0
    dated = np.flatnonzero(pc.is_valid(valid_time).to_numpy(zero_copy_only=False))
    rows = events.take(pa.array(dated, pa.int64())).select(["text", "source", "time", "valid_time"])
    for j, row in zip(dated.tolist(), rows.to_pylist(), strict=True):
        outcomes.append(graph.apply_batch(table.slice(cut, 2 * j - cut)).applied)
        graph.observe(row["text"], row["source"], row["time"], row["valid_time"])
        cut = 2 * j + 1
    outcomes.append(graph.apply_batch(table.slice(cut)).applied)
    return np.concatenate(outcomes)
