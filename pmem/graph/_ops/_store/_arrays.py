"""The store's column groups as a saved state holds them (``*Arrays``), and the helpers every group uses
to copy, extend and load its integer columns."""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa


class EvidenceArrays(NamedTuple):
    """Every evidence node, column-wise, as the state tables hold them. Exported, its arrays are copies and
    its sparse columns read-only views of the store's, valid until its next write; given to
    ``GraphStore.load_arrays``, its dicts become the store's own."""

    seq: np.ndarray  # arrival seq
    text: pa.Array[Any] | pa.ChunkedArray[Any]  # erased ones blank
    source: np.ndarray  # int32 code into ``sources``
    sources: tuple[str, ...]
    time: Mapping[int, str]  # observation times (sparse)
    valid: Mapping[int, str]  # valid times (sparse)
    erased: np.ndarray  # bool


class VersionArrays(NamedTuple):
    """Every version, column-wise, lazily closed ones written out as superseded (copies and views as
    :class:`EvidenceArrays`)."""

    key: np.ndarray
    status: np.ndarray  # int8
    valid_from: np.ndarray
    valid_to: np.ndarray  # NONE: open
    evidence: np.ndarray  # creating evidence, NONE: none
    supersedes: np.ndarray  # NONE: none
    previous: np.ndarray  # the key's arrival chain, NONE: the first
    support: np.ndarray
    alternative_of: Mapping[int, int]  # sparse
    premises: Mapping[int, tuple[tuple[int, int], ...]]  # sparse: (premise key, its head then), ...


class OperationArrays(NamedTuple):
    """The operation log, column-wise, every entry's seq, key, evidence and value decoded (copies and
    views as :class:`EvidenceArrays`)."""

    code: np.ndarray  # requested | effective << 3 | applied << 6
    target: np.ndarray  # NONE: none
    seq: np.ndarray
    key: np.ndarray
    evidence: np.ndarray  # NONE: none
    value: pa.Array[Any]  # large_string, null: none
    reason: pa.Array[Any]  # string, null: none
    undoes: Mapping[int, int]  # sparse
    alias: Mapping[int, str]  # sparse
    premise_keys: Mapping[int, tuple[int, ...]]  # sparse
    retracts: Mapping[int, str]  # sparse
    retracts_erased: np.ndarray  # bool


class EdgeArrays(NamedTuple):
    """Supported-by edges added after their version's creation, and tombstones (revokes edges)."""

    support_version: np.ndarray
    support_evidence: np.ndarray
    support_seq: np.ndarray
    tombstone_version: np.ndarray
    tombstone_evidence: np.ndarray
    tombstone_seq: np.ndarray


class KeyArrays(NamedTuple):
    """Every key by id: its name, head and newest version, and its head's open alternatives."""

    name: pa.Array[Any]  # string
    head: np.ndarray  # NONE: an empty cell
    newest: np.ndarray
    open_alternatives: dict[int, tuple[int, ...]]  # sparse, non-empty


def ints(column: array[int] | list[int], dtype: type = np.int64) -> np.ndarray:
    """A copy of an integer column (a view would pin a typed column's buffer: no append while alive)."""
    return np.array(column, dtype=dtype)


def view(column: array[int]) -> np.ndarray:
    """A read-only int64 view of a typed column (empty: an empty array); only for the length of one
    expression or a function that appends nothing (a view pins the column's buffer)."""
    return np.frombuffer(column, np.int64) if len(column) else np.zeros(0, np.int64)


def typed(values: np.ndarray) -> array[int]:
    """An integer column as the store keeps it (``array("q")``), from the array's memory in one copy."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).data.cast("B"))
    return out


def extend(column: array[int] | list[Any], values: np.ndarray) -> None:
    """Append ``values`` to a column: one block copy for a typed column, else the objects."""
    if isinstance(column, array):
        column.frombytes(np.ascontiguousarray(values, dtype=np.int64).data.cast("B"))
    else:
        column.extend(values.tolist())


def own(mapping: Mapping[int, Any]) -> dict[int, Any]:
    """A loaded sparse column as the store keeps it: a dict built for the load is taken as it is (a
    column of every evidence's time holds an entry per node), anything else copied."""
    return mapping if type(mapping) is dict else dict(mapping)


def flags(n: int, rows: set[int]) -> np.ndarray:
    """``n`` booleans, true at ``rows``."""
    out = np.zeros(n, np.bool_)
    out[np.fromiter(rows, np.int64, len(rows))] = True
    return out


def restore_columns(group: object, names: frozenset[str], columns: Mapping[str, Any]) -> None:
    """Set the columns of ``group`` (one of the store's column groups, whose column names are ``names``)
    that ``columns`` holds; the store has checked every name belongs to some group."""
    for name in names & columns.keys():
        setattr(group, name, columns[name])
