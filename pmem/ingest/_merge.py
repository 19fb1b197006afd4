"""The merge: the partitions' applied operations, in global arrival order, as one write log.

Each row of the stream is one piece of evidence (its position among the ingested rows is its evidence
index) followed by the operations applied for its facts, in fact order. Replaying exactly the calls the
partitions made, in that order, gives the graph sequential ingestion gives: an operation's outcome
depends only on its key's history, which is the same in the partition as here. The rows of a batch go to
the graph together (``pmem.graph.apply_log``: write batches, byte-identical to one call per row).

A fact row (see :mod:`pmem.ingest._stream`) is the same: its evidence, then its one operation citing it,
exactly as given. A batch of fact rows only is turned into its write log column-wise
(:func:`fact_log`); in a batch with text rows, the fact rows' operations are listed with the
partitions' (:func:`fact_row_operations`).

What the driver replays into its graph is the batch's *write log* (:func:`batch_log`, :func:`fact_log`;
``pmem.graph.shards``): its rows numbered by arrival seq, each observation with its valid time. The same
log, split by key owner, is what a sharded ingest (``--shards``) writes to its parts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from pmem.graph.seams import WRITE_LOG_SCHEMA
from pmem.ingest._stream import is_fact_row

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


def batch_log(
    events: pa.RecordBatch, first: int, applied: list[Any], valid_times: list[str | None], seq: int
) -> pa.Table:
    """The write log (``pmem.graph.seams.WRITE_LOG_SCHEMA``) of ``events`` (positions ``first``...):
    each row's observation (evidence ``position``, with its ``valid_times`` entry), then its row's
    operations from ``applied`` (``(position, fact, op, key, value, evidence)``, sorted by position and
    fact); the rows numbered from arrival seq ``seq``."""
    texts: list[Any] = events.column("text").to_pylist()
    sources: list[Any] = events.column("source").to_pylist()
    times: list[Any] = events.column("time").to_pylist()
    columns: dict[str, list[Any]] = {name: [] for name in WRITE_LOG_SCHEMA.names}
    op, text, source, time, key, value, evidence, valid_time, _ = columns.values()
    at = 0
    for i, (t, s, tm, vt) in enumerate(zip(texts, sources, times, valid_times, strict=True)):
        position = first + i
        op.append(None)
        text.append(t)
        source.append(s or "user")
        time.append(tm)
        key.append(None)
        value.append(None)
        evidence.append(position)
        valid_time.append(vt)
        while at < len(applied) and applied[at][0] == position:
            _, _, name, k, v, ev = applied[at]
            op.append(name)
            text.append(None)
            source.append(None)
            time.append(None)
            key.append(k)
            value.append(v)
            evidence.append(None if ev < 0 else ev)
            valid_time.append(None)
            at += 1
    if at != len(applied):
        msg = f"merge: {len(applied) - at} operation(s) name rows outside positions {first}..{first + len(texts) - 1}"
        raise RuntimeError(msg)
    columns["seq"] = list(range(seq, seq + len(op)))
    return pa.table(columns, schema=WRITE_LOG_SCHEMA)


def fact_log(events: pa.RecordBatch, first: int, seq: int) -> pa.Table:
    """Fact rows (positions from ``first``) as their write log, column-wise: each row's observation (its
    evidence text, source, time and valid time), then its operation citing it (``evidence`` = its
    position); the rows numbered from arrival seq ``seq``."""
    n = events.num_rows
    order = np.empty(2 * n, np.int64)
    order[0::2] = np.arange(n)  # observation rows come first in the concatenation, operations after
    order[1::2] = np.arange(n, 2 * n)
    take = pa.array(order, pa.int64())
    evidence = pa.array(np.arange(first, first + n, dtype=np.int64))
    observed = {name: events.column(name) for name in ("text", "source", "time", "valid_time")}
    observed["evidence"] = evidence
    operated = {name: events.column(name) for name in ("op", "key", "value")} | {"evidence": evidence}
    columns = []
    for field in WRITE_LOG_SCHEMA:
        if field.name == "seq":
            columns.append(pa.array(np.arange(seq, seq + 2 * n, dtype=np.int64)))
            continue
        observation = observed.get(field.name, pa.nulls(n, field.type))
        operation = operated.get(field.name, pa.nulls(n, field.type))
        columns.append(
            pa.concat_arrays([observation.cast(field.type), operation.cast(field.type)]).take(take)
        )
    return pa.table(columns, schema=WRITE_LOG_SCHEMA)
