"""A graph as flat Arrow tables, and back: the state format of schemas 4 to 6 (the one place it is
defined; 4 and 5 differ only in their files' digest, :mod:`pmem.graph._state`; 6 adds the operations'
``retracts`` and ``retracts_erased``).

A state is seven flat tables, one row per node or per edge, whose columns any Arrow engine reads without
P-Mem (``docs/core.md`` documents every column):

- ``evidence``: one row per observation (``id`` n of ``e<n>``, ``seq``, ``text``, ``source``, ``time``,
  ``valid_time``, ``erased``).
- ``versions``: one row per version (``id`` n of ``v<n>``, ``key``, ``key_id``, ``value``, ``status`` by
  name, ``valid_from``, ``valid_to``, ``evidence``, ``supersedes``, ``alternative_of``, ``previous``,
  ``support``, premises). Statuses are written out: a head closed lazily in memory is ``superseded``.
- ``operations``: the operation log, one row per entry (``seq``, ``requested``, ``op``, ``key``,
  ``value``, ``evidence``, ``applied``, ``reason``, ``version``, ``undoes``, ``alias``, premises, and
  for a reject or revoke the value it retracts). A state of schema 4 or 5 has no ``retracts``: each
  applied retraction is read as retracting the value of the version it acted on (see
  :func:`retracted_before_6`).
- ``edges``: the edges that are not columns of ``versions``: supported-by edges added after a version
  was created (a repeated value, a noop, a resolve) and revokes edges (one per tombstone). The
  supported-by edge of a version's creating evidence, supersedes and alternative-of are ``versions``
  columns.
- ``keys``: one row per key (``id``, ``key``, ``head``, ``newest``, ``alternatives``: the open ones).
- ``identity`` and ``registry_keys``: the soft key-identity registry's decisions and keys.

Plus ``metadata`` (``name``, ``value`` rows), built by :mod:`pmem.graph._state` with the file digests.
Integer references are ids (row numbers of their table); "none" is null. Saving reads the graph's
columns; loading rebuilds them, and a loaded graph saves to the same tables.

>>> from pmem.graph import ProvenanceGraph
>>> g = ProvenanceGraph()
>>> _ = g.apply("accept", "budget", "$30k", evidence=g.observe("Budget is $30k"))
>>> _ = g.apply("accept", "budget", "$50k")
>>> graph_tables(g)["versions"].select(["key", "value", "status"]).to_pylist()[1]
{'key': 'budget', 'value': '$50k', 'status': 'active'}
"""

from __future__ import annotations

import json
from array import array
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._codes import ACTIVE, EDGE_KINDS, ERASED, LOG_OPS, NONE, REJECT, REVOKE, STATUSES, SUPERSEDED
from pmem.graph._texts import TextColumn
from pmem.graph._validate import valid_instant

if TYPE_CHECKING:
    from collections.abc import Iterator

    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._identity import KeyRegistry

# pyarrow's stubs type an array by its element type, which these column builders do not carry along
_pa: Any = pa
_I64: pa.DataType = pa.int64()
_STR: pa.DataType = pa.string()
_LSTR: pa.DataType = pa.large_string()
_BOOL: pa.DataType = pa.bool_()
_IDS: pa.DataType = pa.list_(pa.int64())
_CODE8: pa.DataType = pa.dictionary(pa.int8(), pa.string())
_CODE32: pa.DataType = pa.dictionary(pa.int32(), pa.string())


def _required(name: str, kind: pa.DataType) -> pa.Field[Any]:
    return pa.field(name, kind, nullable=False)


def _optional(name: str, kind: pa.DataType) -> pa.Field[Any]:
    return pa.field(name, kind)


#: Every table of a state and its columns, in file order (``metadata`` is :mod:`pmem.graph._state`'s).
SCHEMAS: dict[str, pa.Schema] = {
    "evidence": pa.schema(
        [
            _required("id", _I64),
            _required("seq", _I64),
            _required("text", _LSTR),
            _required("source", _CODE32),
            _optional("time", _STR),
            _optional("valid_time", _STR),
            _required("erased", _BOOL),
        ]
    ),
    "versions": pa.schema(
        [
            _required("id", _I64),
            _required("key", _CODE32),
            _required("key_id", _I64),
            _required("value", _LSTR),
            _required("status", _CODE8),
            _required("valid_from", _I64),
            _optional("valid_to", _I64),
            _optional("evidence", _I64),
            _optional("supersedes", _I64),
            _optional("alternative_of", _I64),
            _optional("previous", _I64),
            _required("support", _I64),
            _optional("premise_keys", _IDS),
            _optional("premise_versions", _IDS),
        ]
    ),
    "operations": pa.schema(
        [
            _required("id", _I64),
            _required("seq", _I64),
            _required("requested", _CODE8),
            _required("op", _CODE8),
            _required("key", _CODE32),
            _required("key_id", _I64),
            _optional("value", _LSTR),
            _optional("evidence", _I64),
            _required("applied", _BOOL),
            _optional("reason", _STR),
            _optional("version", _I64),
            _optional("undoes", _I64),
            _optional("alias", _STR),
            _optional("premise_keys", _IDS),
            _optional("retracts", _LSTR),
            _required("retracts_erased", _BOOL),
        ]
    ),
    "edges": pa.schema(
        [
            _required("kind", _CODE8),
            _optional("version", _I64),
            _optional("evidence", _I64),
            _required("seq", _I64),
            _optional("tombstone", _I64),
        ]
    ),
    "keys": pa.schema(
        [
            _required("id", _I64),
            _required("key", _STR),
            _optional("head", _I64),
            _optional("newest", _I64),
            _optional("alternatives", _IDS),
        ]
    ),
    "identity": pa.schema(
        [
            _required("candidate", _STR),
            _optional("shortlisted", _STR),
            _optional("score", pa.float64()),
            _required("verdict", _STR),
            _optional("canonical", _STR),
        ]
    ),
    "registry_keys": pa.schema([_required("key", _STR)]),
}
TABLES: tuple[str, ...] = tuple(SCHEMAS)

_SUPPORTED_BY, _REVOKES = EDGE_KINDS.index("supported-by"), EDGE_KINDS.index("revokes")


# --------------------------------------------------------------------------------------- writing


def _np(column: array[int] | list[int], dtype: type = np.int64) -> NDArray[Any]:
    """A copy of a graph column (a view would pin a typed column's buffer: no append while alive)."""
    return np.array(column, dtype=dtype)


def _ref(ids: NDArray[np.int64]) -> pa.Array[Any]:
    """An id column with -1 ("none") as null."""
    return cast("pa.Array[Any]", _pa.array(ids, type=_I64, mask=ids < 0))


def _codes(indices: NDArray[Any], names: list[str] | tuple[str, ...], kind: pa.DataType) -> pa.Array[Any]:
    index_type = cast("pa.DictionaryType[Any, Any]", kind).index_type
    codes = _pa.DictionaryArray.from_arrays(_pa.array(indices, type=index_type), _pa.array(names, type=_STR))
    return cast("pa.Array[Any]", codes)


def _keys_of(mapping: dict[int, Any]) -> NDArray[np.int64]:
    return np.fromiter(mapping, np.int64, len(mapping))


def _values_of(mapping: dict[int, int]) -> NDArray[np.int64]:
    return np.fromiter(mapping.values(), np.int64, len(mapping))


def _sparse(n: int, mapping: dict[int, Any], kind: pa.DataType) -> pa.Array[Any]:
    """A column of ``n`` rows holding ``mapping``'s values at its keys (in any order), null elsewhere."""
    if not mapping:
        return cast("pa.Array[Any]", _pa.nulls(n, type=kind))
    if kind == _I64:  # ids: one numpy scatter, -1 (null) elsewhere
        ids = np.full(n, -1, np.int64)
        ids[_keys_of(mapping)] = _values_of(mapping)
        return _ref(ids)
    return _scattered(n, _keys_of(mapping), _pa.array(list(mapping.values()), type=kind))


def _scattered(n: int, at: NDArray[np.int64], values: pa.Array[Any]) -> pa.Array[Any]:
    """A column of ``n`` rows holding ``values[i]`` at row ``at[i]``, null elsewhere (one take)."""
    where = np.full(n, -1, np.int64)
    where[at] = np.arange(len(at), dtype=np.int64)
    return values.take(_ref(where))


def _id_lists(n: int, mapping: dict[int, tuple[int, ...]]) -> pa.Array[Any]:
    """A list<int64> column of ``n`` rows: ``mapping``'s tuples at its keys, null elsewhere."""
    return _sparse(n, {k: list(v) for k, v in mapping.items()}, _IDS)


def _materialized(graph: ProvenanceGraph) -> tuple[NDArray[np.int8], NDArray[np.int64]]:
    """Status and valid_to with the lazily closed heads written out (see ProvenanceGraph._closing)."""
    status = _np(graph.storage.v_status, np.int8)
    valid_to = _np(graph.storage.v_to)
    n = len(status)
    if n:
        ids = np.arange(n, dtype=np.int64)
        heads = _np(graph.storage.k_head)
        lazy = (status == ACTIVE) & (heads[_np(graph.storage.v_key)] != ids)
        if lazy.any():
            prev = _np(graph.storage.v_prev)
            newest = np.full(n, -1, dtype=np.int64)
            linked = prev >= 0
            np.maximum.at(newest, prev[linked], ids[linked])
            valid_to[lazy] = _np(graph.storage.v_from)[newest[lazy]]
            status[lazy] = SUPERSEDED
    return status, valid_to


def graph_tables(graph: ProvenanceGraph) -> dict[str, pa.Table]:
    """The graph's flat tables (:data:`SCHEMAS`), deterministic: the same graph gives equal tables."""
    return dict(iter_graph_tables(graph))


def iter_graph_tables(graph: ProvenanceGraph) -> Iterator[tuple[str, pa.Table]]:
    """:func:`graph_tables` one at a time, each made when asked for (a writer holds one at a time)."""
    keys = _pa.array(graph.storage.key_names, type=_STR)
    yield "evidence", _evidence(graph)
    values = _pa.array(graph.storage.v_value, type=_LSTR)  # the versions' values, and most operations'
    yield "versions", _versions(graph, keys, values)
    yield "operations", _operations(graph, keys, values)
    del values
    yield "edges", _edges(graph)
    yield "keys", _keys(graph, keys)
    yield from _registry_tables(graph._registry).items()


def _flags(n: int, rows: set[int]) -> NDArray[np.bool_]:
    """``n`` booleans, true at ``rows``."""
    out = np.zeros(n, np.bool_)
    out[np.fromiter(rows, np.int64, len(rows))] = True
    return out


def _evidence(graph: ProvenanceGraph) -> pa.Table:
    n = graph.storage.evidence_count()
    erased = _flags(n, graph.storage.erased)
    columns = [
        _pa.array(np.arange(n, dtype=np.int64)),
        _pa.array(_np(graph.storage.ev_seq)),
        graph.storage.ev_text.to_arrow(),
        _codes(_np(graph.storage.ev_source, np.int32), graph.storage.sources, _CODE32),
        _sparse(n, graph.storage.ev_time, _STR),
        _sparse(n, graph.storage.ev_valid, _STR),
        _pa.array(erased),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["evidence"])


def _versions(graph: ProvenanceGraph, keys: pa.Array[Any], values: pa.Array[Any]) -> pa.Table:
    n = len(graph.storage.v_key)
    key_id = _np(graph.storage.v_key)
    status, valid_to = _materialized(graph)
    prev = _np(graph.storage.v_prev)
    previous = prev.copy()  # the arrival chain: the supersedes target unless stored apart
    older = graph.storage.v_older
    previous[_keys_of(older)] = _values_of(older)
    support = np.ones(n, np.int64)
    extra = graph.storage.v_extra_support
    support[_keys_of(extra)] += _values_of(extra)
    deps = graph.storage.dep
    columns = [
        _pa.array(np.arange(n, dtype=np.int64)),
        _pa.DictionaryArray.from_arrays(_pa.array(key_id.astype(np.int32)), keys),
        _pa.array(key_id),
        values,
        _codes(status, STATUSES, _CODE8),
        _pa.array(_np(graph.storage.v_from)),
        _ref(valid_to),
        _ref(_np(graph.storage.v_ev)),
        _ref(prev),
        _sparse(n, graph.storage.v_alt, _I64),
        _ref(previous),
        _pa.array(support),
        _id_lists(n, {v: tuple(k for k, _ in p) for v, p in deps.items()}),
        _id_lists(n, {v: tuple(pv for _, pv in p) for v, p in deps.items()}),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["versions"])


def _operations(graph: ProvenanceGraph, keys: pa.Array[Any], versions: pa.Array[Any]) -> pa.Table:
    """The operation log; ``versions`` are the versions' values (``graph.storage.v_value`` as Arrow)."""
    n = len(graph.storage.op_code)
    code = _np(graph.storage.op_code)
    target = _np(graph.storage.op_target)
    # An operation that created its target version takes seq, key, evidence and value from it
    # (ProvenanceGraph.operations); every other one keeps them in _op_extra: (seq, key, evidence,
    # value, reason), read here in one pass.
    extra = graph.storage.op_extra
    rows = np.fromiter(extra, np.int64, len(extra))
    apart = np.zeros(n, np.bool_)
    apart[rows] = True
    own = np.flatnonzero(~apart)
    at = target.copy()  # the row whose value an entry reads: its version's, or its own (after them)
    at[rows] = len(versions) + np.arange(len(rows), dtype=np.int64)
    extra_seq, extra_key, extra_ev, extra_value, extra_reason = (
        cast("tuple[tuple[Any, ...], ...]", tuple(zip(*extra.values(), strict=True))) or ((),) * 5
    )
    seq, key_id, ev = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    for column, kept, of_version in (
        (seq, extra_seq, graph.storage.v_from),
        (key_id, extra_key, graph.storage.v_key),
        (ev, extra_ev, graph.storage.v_ev),
    ):
        column[rows] = np.array(kept, dtype=np.int64)
        column[own] = np.frombuffer(of_version, np.int64)[target[own]]  # a read: no buffer kept
    values = pa.concat_arrays([versions, _pa.array(extra_value, type=_LSTR)]).take(_pa.array(at))
    reasons = _scattered(n, rows, _pa.array(extra_reason, type=_STR))
    columns = [
        _pa.array(np.arange(n, dtype=np.int64)),
        _pa.array(seq),
        _codes((code & 7).astype(np.int8), LOG_OPS, _CODE8),
        _codes(((code >> 3) & 7).astype(np.int8), LOG_OPS, _CODE8),
        _pa.DictionaryArray.from_arrays(_pa.array(key_id.astype(np.int32)), keys),
        _pa.array(key_id),
        values,
        _ref(ev),
        _pa.array((code >> 6).astype(np.bool_)),
        reasons,
        _ref(target),
        _sparse(n, graph.storage.undo_of, _I64),
        _sparse(n, graph.storage.op_alias, _STR),
        _id_lists(n, graph.storage.op_deps),
        _sparse(n, graph.storage.op_retracts, _LSTR),
        _pa.array(_flags(n, graph.storage.retracts_erased)),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["operations"])


def _edges(graph: ProvenanceGraph) -> pa.Table:
    sb, tb = len(graph.storage.sb_version), len(graph.storage.tb_version)
    kind = np.concatenate([np.full(sb, _SUPPORTED_BY, np.int8), np.full(tb, _REVOKES, np.int8)])
    tombstone = np.concatenate([np.full(sb, -1, np.int64), np.arange(tb, dtype=np.int64)])
    columns = [
        _codes(kind, EDGE_KINDS, _CODE8),
        _pa.array(np.concatenate([_np(graph.storage.sb_version), _np(graph.storage.tb_version)])),
        _ref(np.concatenate([_np(graph.storage.sb_ev), _np(graph.storage.tb_ev)])),
        _pa.array(np.concatenate([_np(graph.storage.sb_seq), _np(graph.storage.tb_seq)])),
        _ref(tombstone),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["edges"])


def _keys(graph: ProvenanceGraph, keys: pa.Array[Any]) -> pa.Table:
    n = len(keys)
    columns = [
        _pa.array(np.arange(n, dtype=np.int64)),
        keys,
        _ref(_np(graph.storage.k_head)),
        _ref(_np(graph.storage.k_newest)),
        _id_lists(n, {k: tuple(v) for k, v in graph.storage.open_alts.items() if v}),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["keys"])


def _registry_tables(reg: KeyRegistry | None) -> dict[str, pa.Table]:
    decisions = reg.decisions if reg is not None else []
    identity = pa.Table.from_pylist(
        [
            {
                "candidate": d.candidate,
                "shortlisted": d.shortlisted,
                "score": d.score,
                "verdict": d.verdict,
                "canonical": d.canonical,
            }
            for d in decisions
        ],
        schema=SCHEMAS["identity"],
    )
    registry_keys = pa.table(
        [_pa.array(reg.keys if reg is not None else [], type=_STR)], schema=SCHEMAS["registry_keys"]
    )
    return {"identity": identity, "registry_keys": registry_keys}


def graph_metadata(graph: ProvenanceGraph) -> dict[str, str]:
    """The graph's metadata entries: seq, the code tables, registry and authority (JSON where structured)."""
    reg = graph._registry
    return {
        "seq": str(graph.storage.seq),
        "statuses": json.dumps(STATUSES),
        "ops": json.dumps(LOG_OPS),
        "edge_kinds": json.dumps(EDGE_KINDS),
        "registry": json.dumps(reg.config() if reg is not None else None, sort_keys=True),
        "authority": json.dumps(
            {
                "configured": graph.storage.authority is not None,
                "from_start": graph.storage.authority_from_start,
                "default": graph.storage.default_authority,
                "settings": [list(s) for s in graph.storage.authority_log],
            },
            sort_keys=True,
        ),
    }


# --------------------------------------------------------------------------------------- reading


def _ints(table: pa.Table, name: str) -> NDArray[np.int64]:
    """An id column as int64 with null as -1."""
    column: Any = table.column(name)
    if column.null_count:
        column = column.fill_null(-1)
    return cast("NDArray[np.int64]", column.to_numpy()).astype(np.int64, copy=False)


def _typed(values: NDArray[Any]) -> array[int]:
    out = array("q")
    block = np.ascontiguousarray(values, dtype=np.int64)
    out.frombytes(block.data.cast("B"))  # from the array's memory: no bytes object in between
    return out


def _present(table: pa.Table, name: str) -> tuple[list[int], list[Any]]:
    """The row numbers where column ``name`` is not null, and its values there."""
    column: Any = table.column(name)
    if column.null_count == len(column):
        return [], []
    rows = pc.indices_nonzero(pc.is_valid(column))
    return rows.to_pylist(), column.take(rows).to_pylist()


def _dictionary_codes(table: pa.Table, name: str, names: tuple[str, ...]) -> NDArray[np.int64]:
    """A dictionary column as codes into ``names`` (its dictionary may list them in any order)."""
    column: Any = table.column(name).combine_chunks()
    if column.null_count:
        msg = f"column {name!r} of the state has {column.null_count} nulls"
        raise ValueError(msg)
    listed = column.dictionary.to_pylist()
    unknown = [x for x in listed if x not in names]
    if unknown:
        msg = f"column {name!r} of the state names {unknown[0]!r}, which is none of {list(names)}"
        raise ValueError(msg)
    code = np.array([names.index(x) for x in listed], dtype=np.int64)
    indices = cast("NDArray[np.int64]", column.indices.to_numpy()).astype(np.int64)
    return code[indices] if len(code) else indices


def _check_schemas(tables: dict[str, pa.Table]) -> None:
    for name, schema in SCHEMAS.items():
        table = tables.get(name)
        if table is None:
            msg = f"the state has no {name!r} table"
            raise ValueError(msg)
        if not table.schema.equals(schema):
            msg = f"table {name!r} has columns {table.schema.names} of other types than the state format's"
            raise ValueError(msg)
        for field in schema:
            nulls = table.column(field.name).null_count
            if nulls and not field.nullable:
                msg = f"column {field.name!r} of table {name!r} must hold no nulls, found {nulls}"
                raise ValueError(msg)


def build_graph(
    cls: type[ProvenanceGraph],
    tables: dict[str, pa.Table],
    meta: dict[str, str],
    registry: KeyRegistry | None,
) -> ProvenanceGraph:
    """The graph whose :func:`graph_tables` are ``tables`` (and metadata ``meta``).

    Raises ``ValueError`` (or ``KeyError``/``IndexError``) for tables that do not make a graph; the file
    layer turns it into a ``StateFileError`` naming the file.
    """
    before_6 = int(meta.get("schema_version", SCHEMA_WITH_RETRACTS)) < SCHEMA_WITH_RETRACTS
    if before_6:
        tables = {**tables, "operations": _without_retracts(tables["operations"])}
    _check_schemas(tables)
    graph = cls(registry=registry)
    _load_evidence(graph, tables["evidence"])
    _load_keys(graph, tables["keys"])
    _load_versions(graph, tables["versions"])
    _load_edges(graph, tables["edges"])
    _load_operations(graph, tables["operations"], tables["versions"])
    if before_6:
        graph.storage.op_retracts = retracted_before_6(graph)
    graph.storage.seq = int(meta["seq"])
    _load_authority(graph, json.loads(meta["authority"]))
    identity = tables["identity"].to_pylist()
    reg_keys = cast("list[str]", tables["registry_keys"].column("key").to_pylist())
    reg_config = json.loads(meta.get("registry", "null"))
    if identity or reg_keys or reg_config is not None or registry is not None:
        graph.registry.restore(reg_keys, identity, reg_config)
    return graph


def _load_evidence(graph: ProvenanceGraph, table: pa.Table) -> None:
    source: Any = table.column("source").combine_chunks()
    graph.storage.sources = source.dictionary.to_pylist()
    graph.storage.source_code = {s: i for i, s in enumerate(graph.storage.sources)}
    graph.storage.ev_text = TextColumn()
    graph.storage.ev_text.extend_arrow(table.column("text"))  # as read: no Python string per text
    graph.storage.ev_source = _typed(source.indices.to_numpy())
    graph.storage.ev_seq = _typed(_ints(table, "seq"))
    graph.storage.ev_time = dict(zip(*_present(table, "time"), strict=True))
    graph.storage.ev_valid = dict(zip(*_present(table, "valid_time"), strict=True))
    graph.storage.valid_at = {n: valid_instant(text, "load")[1] for n, text in graph.storage.ev_valid.items()}
    erased = table.column("erased").to_numpy(zero_copy_only=False)
    graph.storage.erased = set(np.flatnonzero(erased).tolist())


def _load_keys(graph: ProvenanceGraph, table: pa.Table) -> None:
    graph.storage.key_names = cast("list[str]", table.column("key").to_pylist())
    graph.storage.kid = dict(zip(graph.storage.key_names, range(len(graph.storage.key_names)), strict=True))
    if len(graph.storage.kid) != len(graph.storage.key_names):
        msg = "the keys table names a key twice"
        raise ValueError(msg)
    graph.storage.k_head = _typed(_ints(table, "head"))
    graph.storage.k_newest = _typed(_ints(table, "newest"))
    rows, alts = _present(table, "alternatives")
    graph.storage.open_alts = {kid: list(a) for kid, a in zip(rows, alts, strict=True) if a}


def _load_versions(graph: ProvenanceGraph, table: pa.Table) -> None:
    graph.storage.v_key = _typed(_ints(table, "key_id"))
    graph.storage.v_value = cast("list[str]", table.column("value").to_pylist())
    graph.storage.v_status = _typed(_dictionary_codes(table, "status", STATUSES))
    graph.storage.v_from = _typed(_ints(table, "valid_from"))
    graph.storage.v_to = _typed(_ints(table, "valid_to"))
    graph.storage.v_ev = _typed(_ints(table, "evidence"))
    prev = _ints(table, "supersedes")
    graph.storage.v_prev = _typed(prev)
    graph.storage.v_alt = dict(zip(*_present(table, "alternative_of"), strict=True))
    previous = _ints(table, "previous")
    apart = np.flatnonzero(previous != prev)
    graph.storage.v_older = dict(zip(apart.tolist(), previous[apart].tolist(), strict=True))
    support = _ints(table, "support")
    more = np.flatnonzero(support != 1)
    graph.storage.v_extra_support = dict(zip(more.tolist(), (support[more] - 1).tolist(), strict=True))
    rows, keys = _present(table, "premise_keys")
    _, heads = _present(table, "premise_versions")
    graph.storage.dep = {v: tuple(zip(k, h, strict=True)) for v, k, h in zip(rows, keys, heads, strict=True)}


def _load_edges(graph: ProvenanceGraph, table: pa.Table) -> None:
    kind = _dictionary_codes(table, "kind", EDGE_KINDS)
    version, ev, seq = _ints(table, "version"), _ints(table, "evidence"), _ints(table, "seq")
    sb, tb = kind == _SUPPORTED_BY, kind == _REVOKES
    if np.count_nonzero(sb) + np.count_nonzero(tb) != len(kind):
        msg = "the edges table holds a kind other than supported-by and revokes"
        raise ValueError(msg)
    graph.storage.sb_version, graph.storage.sb_ev, graph.storage.sb_seq = (
        _typed(version[sb]),
        _typed(ev[sb]),
        _typed(seq[sb]),
    )
    graph.storage.tb_version, graph.storage.tb_seq, graph.storage.tb_ev = (
        _typed(version[tb]),
        _typed(seq[tb]),
        _typed(ev[tb]),
    )


def _load_operations(graph: ProvenanceGraph, table: pa.Table, versions: pa.Table) -> None:
    """The operation log of ``table``; ``versions`` is the table the graph's versions were read from."""
    requested = _dictionary_codes(table, "requested", LOG_OPS)
    effective = _dictionary_codes(table, "op", LOG_OPS)
    applied = table.column("applied").to_numpy(zero_copy_only=False).astype(np.int64)
    graph.storage.op_code = _typed(requested | effective << 3 | applied << 6)
    target = _ints(table, "version")
    graph.storage.op_target = _typed(target)
    seq, key_id, ev = _ints(table, "seq"), _ints(table, "key_id"), _ints(table, "evidence")
    # an entry that reads exactly as its target version (what created it) is stored as that version
    values: Any = table.column("value").combine_chunks()
    reasons: Any = table.column("reason")
    own = target >= 0
    if own.any():
        t = np.where(own, target, 0)
        own &= np.frombuffer(graph.storage.v_from, np.int64)[t] == seq
        own &= np.frombuffer(graph.storage.v_key, np.int64)[t] == key_id
        own &= np.frombuffer(graph.storage.v_ev, np.int64)[t] == ev
        theirs: Any = versions.column("value").combine_chunks().take(_pa.array(t))  # the graph's v_value
        own &= pc.fill_null(pc.equal(values, theirs), False).to_numpy(zero_copy_only=False)
        own &= reasons.is_null().to_numpy(zero_copy_only=False)
    apart = np.flatnonzero(~own)
    at = _pa.array(apart)
    graph.storage.op_extra = dict(
        zip(
            apart.tolist(),
            zip(
                seq[apart].tolist(),
                key_id[apart].tolist(),
                ev[apart].tolist(),
                values.take(at).to_pylist(),
                reasons.take(at).to_pylist(),
                strict=True,
            ),
            strict=True,
        )
    )
    graph.storage.undo_of = dict(zip(*_present(table, "undoes"), strict=True))
    graph.storage.op_alias = dict(zip(*_present(table, "alias"), strict=True))
    rows, deps = _present(table, "premise_keys")
    graph.storage.op_deps = {n: tuple(k) for n, k in zip(rows, deps, strict=True)}
    graph.storage.op_retracts = dict(zip(*_present(table, "retracts"), strict=True))
    inert = table.column("retracts_erased").to_numpy(zero_copy_only=False)
    graph.storage.retracts_erased = set(np.flatnonzero(inert).tolist())


#: The schema whose operations table records what each retraction retracts.
SCHEMA_WITH_RETRACTS = 6


def _without_retracts(table: pa.Table) -> pa.Table:
    """An operations table of schema 4 or 5 with the columns schema 6 added (none retracts anything
    yet: :func:`retracted_before_6` reads that from the graph)."""
    n = table.num_rows
    if "retracts" in table.schema.names:  # not what schema 4 or 5 wrote: the schema check refuses it
        return table
    table = table.append_column(SCHEMAS["operations"].field("retracts"), _pa.nulls(n, type=_LSTR))
    return table.append_column(
        SCHEMAS["operations"].field("retracts_erased"), _pa.array(np.zeros(n, np.bool_))
    )


def retracted_before_6(graph: ProvenanceGraph) -> dict[int, str]:
    """What each retraction of a schema 4 or 5 state retracts, as it records it: a revoke's named value;
    else, for one applied, the value of the version it acted on (a revoke's or a reject's retracted
    head; for a reject with a replacement, the version that replacement supersedes). One that acted on
    nothing, or on a version erased since, retracts nothing recorded: it replays as it always did."""
    store = graph.storage
    out: dict[int, str] = {}
    requested = np.frombuffer(store.op_code, np.int64) & 7 if len(store.op_code) else np.zeros(0, np.int64)
    for i in np.flatnonzero((requested == REJECT) | (requested == REVOKE)).tolist():
        code, req = store.op_code[i], store.op_code[i] & 7
        extra = store.op_extra.get(i)
        if req == REVOKE and extra is not None and extra[3] is not None:
            out[i] = extra[3]
            continue
        target = store.op_target[i]
        if not code >> 6 or target == NONE:
            continue
        if extra is None:  # a reject that created its replacement: it retracted what that supersedes
            target = store.v_prev[target]
        if target != NONE and store.v_status[target] != ERASED:
            out[i] = store.v_value[target]
    return out


def _load_authority(graph: ProvenanceGraph, authority: dict[str, Any]) -> None:
    graph.storage.default_authority = int(authority["default"])
    graph.storage.authority_from_start = bool(authority["from_start"])
    if authority["configured"]:
        graph.storage.authority = {}
        for after, source, level in authority["settings"]:
            graph.storage.authority[source] = int(level)
            graph.storage.authority_log.append((int(after), str(source), int(level)))
