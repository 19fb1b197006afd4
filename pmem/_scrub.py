"""Scrubbing an erased statement out of the files the project writes (one place, for ingest and runs).

``pmem erase`` removes an evidence from a graph (:meth:`pmem.graph.ProvenanceGraph.erase`); these helpers
reach the copies kept beside graphs: Parquet rows whose text fields hold the statement or a value only it
stated, text files (reports, logs), and the values to look for (:func:`stated_only_by`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pmem._atomic import atomic_write_bytes, atomic_write_parquet
from pmem.models import ResponseCache

if TYPE_CHECKING:
    from pmem.graph import ErasureReceipt, ProvenanceGraph

#: what a scrubbed text holds
ERASED = "[erased]"


def stated_only_by(before: ProvenanceGraph, after: ProvenanceGraph, receipt: ErasureReceipt) -> list[str]:
    """The values the erased evidence alone stated: those of the versions it erased and the values it
    displaced from the frontier, that no version left in ``after`` holds and no evidence left mentions."""
    erased = set(receipt.erased_versions)
    candidates = {v.value for key in before for v in before.versions(key) if v.id in erased and v.value}
    candidates |= {old for old, _ in receipt.changed.values() if old}
    if not candidates:
        return []
    kept = {v.value for key in after for v in after.versions(key) if v.value is not None}
    texts = [after.evidence(f"e{i}").text for i in range(after.stats()["evidence"])]
    return sorted(c for c in candidates if c not in kept and not any(c in t for t in texts))


def _scrub_value(value: Any, needles: list[str]) -> tuple[Any, bool]:
    if isinstance(value, str):
        return (ERASED, True) if any(n in value for n in needles) else (value, False)
    if isinstance(value, list):
        pairs = [_scrub_value(v, needles) for v in value]
        return [v for v, _ in pairs], any(hit for _, hit in pairs)
    return value, False


def scrub_table(table: pa.Table, needles: list[str], rows: np.ndarray | None = None) -> tuple[pa.Table, int]:
    """``table`` with every text (a string, or a string in a list) of the rows ``rows`` (a mask; all when
    None) that holds one of ``needles`` replaced by ``[erased]``; and how many rows changed."""
    n = table.num_rows
    scope = np.ones(n, dtype=np.bool_) if rows is None else rows
    touched = np.zeros(n, dtype=np.bool_)
    if not needles or not scope.any():
        return table, 0
    columns: list[Any] = []
    for field, column in zip(table.schema, table.columns, strict=True):
        kind = field.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            hit = np.zeros(n, dtype=np.bool_)
            for needle in needles:
                matched: Any = pc.match_substring(column, needle)
                found: Any = pc.fill_null(matched, False)
                hit |= np.asarray(found.to_numpy(), dtype=np.bool_)
            hit &= scope
            touched |= hit
            columns.append(
                pc.if_else(pa.array(hit), pa.scalar(ERASED, kind), column) if hit.any() else column
            )
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            values = column.to_pylist()
            changed = False
            for i in np.flatnonzero(scope).tolist():
                values[i], scrubbed = _scrub_value(values[i], needles)
                if scrubbed:
                    touched[i] = changed = True
            columns.append(pa.array(values, kind) if changed else column)
        else:
            columns.append(column)
    count = int(touched.sum())
    return (pa.table(columns, schema=table.schema) if count else table), count


def scrub_parquet(
    path: Path, needles: list[str], rows: Callable[[pa.Table], np.ndarray] | None = None
) -> int:
    """Scrub a Parquet file in place (atomically, only when a row changed); the rows changed.
    ``rows`` picks the rows in scope from the file's table (all when None)."""
    table = pq.read_table(path)
    scrubbed, count = scrub_table(table, needles, None if rows is None else rows(table))
    if count:
        atomic_write_parquet(path, scrubbed)
    return count


def holds(path: Path, needles: list[str]) -> bool:
    """Whether the file at ``path`` holds one of ``needles``, byte for byte (a file gone meanwhile, as
    SQLite's ``-shm``/``-wal`` come and go with its connections, holds none)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False
    return any(n.encode() in data for n in needles if n)


def erase_from_cache(path: Path, needles: list[str]) -> str:
    """Delete the response cache entries at ``path`` whose replies hold one of ``needles``; the line a
    receipt lists."""

    responses = ResponseCache(path)
    try:
        deleted = responses.erase_containing(needles)
    finally:
        responses.close()
    return f"{path} ({deleted} entries deleted, file rebuilt, write-ahead log emptied)"


def scrub_text_file(path: Path, needles: list[str]) -> int:
    """Replace each of ``needles`` in a UTF-8 text file by ``[erased]`` (atomically); replacements made,
    or -1 for a file that is not UTF-8 text (it cannot be scrubbed: the caller names it)."""
    data = path.read_bytes()
    if not any(n.encode() in data for n in needles):
        return 0
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return -1
    count = sum(text.count(n) for n in needles)
    for needle in sorted(needles, key=len, reverse=True):
        text = text.replace(needle, ERASED)
    atomic_write_bytes(path, text.encode("utf-8"))
    return count
