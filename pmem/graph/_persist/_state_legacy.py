"""Reading state files of schemas 1 to 3: one Arrow IPC file of nested tables, before the flat tables.

Those files hold one row per logical table, each an Arrow IPC stream of the graph's storage columns as
they were (dense columns indexed by id, sparse dicts as (index, value) tables). They are read here into
a graph; saving it again writes the current schema (:mod:`pmem.graph._persist._tables`). Nothing writes them.
"""

from __future__ import annotations

import json
from array import array
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._identity._registry import KeyRegistry

I64: pa.DataType = pa.int64()
I32: pa.DataType = pa.int32()
I8: pa.DataType = pa.int8()
STR: pa.DataType = pa.string()
LSTR: pa.DataType = pa.large_string()

_ADDED_IN = {
    "premises": 2,
    "operation_premises": 2,
    "authority": 2,
    "evidence_valid_time": 2,
    "undo": 2,
    "erased": 2,
    "operation_alias": 2,
}


# Dense tables: table name -> [(column, graph attribute holding the column, arrow type)]; integer
# columns are typed storage (array("q")) in the graph, the others lists
_TABLES: dict[str, list[tuple[str, str, pa.DataType]]] = {
    "evidence": [("text", "ev_text", LSTR), ("source", "ev_source", I32), ("seq", "ev_seq", I64)],
    "sources": [("source", "sources", STR)],
    "keys": [("key", "key_names", STR)],
    "versions": [
        ("key", "v_key", I32),
        ("value", "v_value", LSTR),
        ("status", "v_status", I8),
        ("valid_from", "v_from", I64),
        ("valid_to", "v_to", I64),
        ("evidence", "v_ev", I64),
        ("supersedes", "v_prev", I64),
    ],
    "supported_by": [("version", "sb_version", I64), ("evidence", "sb_ev", I64), ("seq", "sb_seq", I64)],
    "tombstones": [("version", "tb_version", I64), ("seq", "tb_seq", I64), ("evidence", "tb_ev", I64)],
    "operations": [("code", "op_code", pa.int16()), ("version", "op_target", I64)],
}
# Sparse tables: table name -> (graph attribute holding a dict, index column, value columns)
_SPARSE: dict[str, tuple[str, tuple[str, pa.DataType], list[tuple[str, pa.DataType]]]] = {
    "evidence_time": ("ev_time", ("evidence", I64), [("time", STR)]),
    "evidence_valid_time": ("ev_valid", ("evidence", I64), [("valid_time", STR)]),
    "undo": ("undo_of", ("operation", I64), [("undoes", I64)]),
    "operation_alias": ("op_alias", ("operation", I64), [("alias", STR)]),
    "alternative_of": ("v_alt", ("version", I64), [("target", I64)]),
    "older": ("v_older", ("version", I64), [("older", I64)]),
    "extra_support": ("v_extra_support", ("version", I64), [("count", I64)]),
    "operation_extra": (
        "op_extra",
        ("operation", I64),
        [("seq", I64), ("key", I64), ("evidence", I64), ("value", LSTR), ("reason", STR)],
    ),
}
_PREMISES = pa.schema([("version", I64), ("key", I64), ("premise_version", I64)])
_OPERATION_PREMISES = pa.schema([("operation", I64), ("key", I64)])
#: source authority: every setting in order; ``after`` is the seq it was made after (-1: the constructor's)
_AUTHORITY = pa.schema([("after", I64), ("source", STR), ("level", I64)])


def missing_tables(tables: dict[str, pa.Table], version: int) -> set[str]:
    """The tables a file of schema ``version`` must hold that ``tables`` lacks."""
    expected = {*_TABLES, *_SPARSE, "open_alternatives", "identity", "registry_keys", *_ADDED_IN}
    expected -= {name for name, since in _ADDED_IN.items() if version < since}
    return expected - tables.keys()


def _column_list(table: pa.Table, column: str) -> list[Any]:
    col = table.column(column)
    if pa.types.is_integer(col.type) and col.null_count == 0:
        values: list[Any] = col.to_numpy().tolist()  # a list for a 1-d array (numpy types it Any)
        return values
    return col.to_pylist()


def _typed_column(table: pa.Table, column: str) -> array[int]:
    """An integer column as the graph's typed storage (``array("q")``), copied in one block."""
    col = table.column(column)
    if not pa.types.is_integer(col.type) or col.null_count:
        what = f"{col.null_count} nulls" if pa.types.is_integer(col.type) else f"type {col.type}"
        msg = f"not a readable P-Mem state: column {column!r} must hold integers, found {what}"
        raise ValueError(msg)
    out = array("q")
    out.frombytes(np.ascontiguousarray(col.to_numpy(), dtype=np.int64).tobytes())
    return out


def build_legacy_graph(
    cls: type[ProvenanceGraph],
    tables: dict[str, pa.Table],
    meta: dict[str, str],
    registry: KeyRegistry | None,
) -> ProvenanceGraph:
    graph = cls(registry=registry)
    restored: dict[str, Any] = {}
    for name, columns in _TABLES.items():
        table = tables[name]
        for column, attr, typ in columns:
            typed = pa.types.is_integer(typ)  # integer columns are typed storage, the others lists
            restored[attr] = _typed_column(table, column) if typed else _column_list(table, column)
    for name, (attr, (index, _), value_columns) in _SPARSE.items():
        if name not in tables:  # a table added after the file's schema version (checked on decoding)
            continue
        table = tables[name]
        keys = _column_list(table, index)
        values = [_column_list(table, c) for c, _ in value_columns]
        rows = values[0] if len(values) == 1 else list(zip(*values, strict=True))
        restored[attr] = dict(zip(keys, rows, strict=True))
    restored["k_head"] = _typed_column(tables["keys"], "head")
    restored["k_newest"] = _typed_column(tables["keys"], "newest")
    alts = tables["open_alternatives"]
    open_alts: dict[int, list[int]] = {}
    for kid, vid in zip(_column_list(alts, "key"), _column_list(alts, "version"), strict=True):
        open_alts.setdefault(kid, []).append(vid)
    restored["open_alts"] = open_alts
    if "erased" in tables:
        restored["erased"] = set(_column_list(tables["erased"], "evidence"))
    authority = json.loads(meta.get("authority", "null")) or {
        "configured": False,
        "from_start": False,
        "default": 1,
    }
    restored["default_level"] = int(authority["default"])
    restored["from_start"] = bool(authority["from_start"])
    if authority["configured"]:
        log = list(zip(*(_column_list(tables["authority"], c) for c in _AUTHORITY.names), strict=True))
        restored["history"] = log
        restored["levels"] = {source: level for _, source, level in log}  # the latest setting wins
    if "premises" in tables:
        premises = tables["premises"]
        deps: dict[int, list[tuple[int, int]]] = {}
        for v, k, pv in zip(*(_column_list(premises, c) for c in _PREMISES.names), strict=True):
            deps.setdefault(v, []).append((k, pv))
        restored["dep"] = {v: tuple(p) for v, p in deps.items()}
        op_premises = tables["operation_premises"]
        op_deps: dict[int, list[int]] = {}
        for n, k in zip(*(_column_list(op_premises, c) for c in _OPERATION_PREMISES.names), strict=True):
            op_deps.setdefault(n, []).append(k)
        restored["op_deps"] = {n: tuple(k) for n, k in op_deps.items()}
    graph.storage.restore(restored, int(meta["seq"]))
    graph.storage.restore({"op_retracts": graph.storage.log.retracted_values()})  # as schema 4 and 5 are read
    identity = tables["identity"].to_pylist()
    reg_keys: list[str] = _column_list(tables["registry_keys"], "key")  # a string column: to_pylist()
    reg_config = json.loads(meta.get("registry", "null"))
    if identity or reg_keys or reg_config is not None or registry is not None:
        graph.registry.restore(reg_keys, identity, reg_config)
    return graph
