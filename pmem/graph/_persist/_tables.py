"""A graph as flat Arrow tables, and back: the state format of schemas 4 to 6 (the one place it is
defined; 4 and 5 differ only in their files' digest, :mod:`pmem.graph._persist._state`; 6 adds the operations'
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
  ``GraphStore.retracted_values``).
- ``edges``: the edges that are not columns of ``versions``: supported-by edges added after a version
  was created (a repeated value, a noop, a resolve) and revokes edges (one per tombstone). The
  supported-by edge of a version's creating evidence, supersedes and alternative-of are ``versions``
  columns.
- ``keys``: one row per key (``id``, ``key``, ``head``, ``newest``, ``alternatives``: the open ones).
- ``identity`` and ``registry_keys``: the soft key-identity registry's decisions and keys.

Plus ``metadata`` (``name``, ``value`` rows), built by :mod:`pmem.graph._persist._state` with the file digests.
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
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._ops._codes import EDGE_KINDS, LOG_OPS, STATUSES
from pmem.graph._ops._store import EdgeArrays, EvidenceArrays, KeyArrays, OperationArrays, VersionArrays

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._identity._registry import KeyRegistry

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


#: Every table of a state and its columns, in file order (``metadata`` is :mod:`pmem.graph._persist._state`'s).
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


def _ref(ids: NDArray[np.int64]) -> pa.Array[Any]:
    """An id column with -1 ("none") as null."""
    return cast("pa.Array[Any]", _pa.array(ids, type=_I64, mask=ids < 0))


def _codes(indices: NDArray[Any], names: list[str] | tuple[str, ...], kind: pa.DataType) -> pa.Array[Any]:
    index_type = cast("pa.DictionaryType[Any, Any]", kind).index_type
    codes = _pa.DictionaryArray.from_arrays(_pa.array(indices, type=index_type), _pa.array(names, type=_STR))
    return cast("pa.Array[Any]", codes)


def _keys_of(mapping: Mapping[int, Any]) -> NDArray[np.int64]:
    return np.fromiter(mapping, np.int64, len(mapping))


def _values_of(mapping: Mapping[int, int]) -> NDArray[np.int64]:
    return np.fromiter(mapping.values(), np.int64, len(mapping))


def _sparse(n: int, mapping: Mapping[int, Any], kind: pa.DataType) -> pa.Array[Any]:
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


def _id_lists(n: int, mapping: Mapping[int, tuple[int, ...]]) -> pa.Array[Any]:
    """A list<int64> column of ``n`` rows: ``mapping``'s tuples at its keys, null elsewhere."""
    return _sparse(n, {k: list(v) for k, v in mapping.items()}, _IDS)


def graph_tables(graph: ProvenanceGraph) -> dict[str, pa.Table]:
    """The graph's flat tables (:data:`SCHEMAS`), deterministic: the same graph gives equal tables."""
    return dict(iter_graph_tables(graph))


def iter_graph_tables(graph: ProvenanceGraph) -> Iterator[tuple[str, pa.Table]]:
    """:func:`graph_tables` one at a time, each made when asked for (a writer holds one at a time)."""
    store = graph.storage
    keys = store.keys.arrays()
    yield "evidence", _evidence(store.evidence.arrays())
    values = store.versions.value_array()  # the versions' values, and most operations'
    yield "versions", _versions(store.version_arrays(), keys.name, values)
    yield "operations", _operations(store.log.arrays(values), keys.name)
    del values
    yield "edges", _edges(store.edges.arrays())
    yield "keys", _keys(keys)
    yield from _registry_tables(graph.registry_in_use).items()


def _evidence(ev: EvidenceArrays) -> pa.Table:
    n = len(ev.seq)
    columns = [
        _pa.array(np.arange(n, dtype=np.int64)),
        _pa.array(ev.seq),
        ev.text,
        _codes(ev.source, ev.sources, _CODE32),
        _sparse(n, ev.time, _STR),
        _sparse(n, ev.valid, _STR),
        _pa.array(ev.erased),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["evidence"])


def _versions(v: VersionArrays, keys: pa.Array[Any], values: pa.Array[Any]) -> pa.Table:
    n = len(v.key)
    columns = [
        _pa.array(np.arange(n, dtype=np.int64)),
        _pa.DictionaryArray.from_arrays(_pa.array(v.key.astype(np.int32)), keys),
        _pa.array(v.key),
        values,
        _codes(v.status, STATUSES, _CODE8),
        _pa.array(v.valid_from),
        _ref(v.valid_to),
        _ref(v.evidence),
        _ref(v.supersedes),
        _sparse(n, v.alternative_of, _I64),
        _ref(v.previous),
        _pa.array(v.support),
        _id_lists(n, {u: tuple(k for k, _ in p) for u, p in v.premises.items()}),
        _id_lists(n, {u: tuple(pv for _, pv in p) for u, p in v.premises.items()}),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["versions"])


def _operations(ops: OperationArrays, keys: pa.Array[Any]) -> pa.Table:
    n = len(ops.code)
    code = ops.code
    columns = [
        _pa.array(np.arange(n, dtype=np.int64)),
        _pa.array(ops.seq),
        _codes((code & 7).astype(np.int8), LOG_OPS, _CODE8),
        _codes(((code >> 3) & 7).astype(np.int8), LOG_OPS, _CODE8),
        _pa.DictionaryArray.from_arrays(_pa.array(ops.key.astype(np.int32)), keys),
        _pa.array(ops.key),
        ops.value,
        _ref(ops.evidence),
        _pa.array((code >> 6).astype(np.bool_)),
        ops.reason,
        _ref(ops.target),
        _sparse(n, ops.undoes, _I64),
        _sparse(n, ops.alias, _STR),
        _id_lists(n, ops.premise_keys),
        _sparse(n, ops.retracts, _LSTR),
        _pa.array(ops.retracts_erased),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["operations"])


def _edges(e: EdgeArrays) -> pa.Table:
    sb, tb = len(e.support_version), len(e.tombstone_version)
    kind = np.concatenate([np.full(sb, _SUPPORTED_BY, np.int8), np.full(tb, _REVOKES, np.int8)])
    tombstone = np.concatenate([np.full(sb, -1, np.int64), np.arange(tb, dtype=np.int64)])
    columns = [
        _codes(kind, EDGE_KINDS, _CODE8),
        _pa.array(np.concatenate([e.support_version, e.tombstone_version])),
        _ref(np.concatenate([e.support_evidence, e.tombstone_evidence])),
        _pa.array(np.concatenate([e.support_seq, e.tombstone_seq])),
        _ref(tombstone),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["edges"])


def _keys(k: KeyArrays) -> pa.Table:
    n = len(k.name)
    columns = [
        _pa.array(np.arange(n, dtype=np.int64)),
        k.name,
        _ref(k.head),
        _ref(k.newest),
        _id_lists(n, k.open_alternatives),
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
    reg = graph.registry_in_use
    return {
        "seq": str(graph.seq),
        "statuses": json.dumps(STATUSES),
        "ops": json.dumps(LOG_OPS),
        "edge_kinds": json.dumps(EDGE_KINDS),
        "registry": json.dumps(reg.config() if reg is not None else None, sort_keys=True),
        "authority": json.dumps(graph.storage.authority.config(), sort_keys=True),
    }


# --------------------------------------------------------------------------------------- reading


def _ints(table: pa.Table, name: str) -> NDArray[np.int64]:
    """An id column as int64 with null as -1."""
    column: Any = table.column(name)
    if column.null_count:
        column = column.fill_null(-1)
    return cast("NDArray[np.int64]", column.to_numpy()).astype(np.int64, copy=False)


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
    store = graph.storage
    versions = tables["versions"]
    values: Any = versions.column("value").combine_chunks()
    store.load_arrays(
        _evidence_arrays(tables["evidence"]),
        _key_arrays(tables["keys"]),
        _version_arrays(versions),
        values,
        _edge_arrays(tables["edges"]),
        _operation_arrays(tables["operations"]),
        int(meta["seq"]),
    )
    if before_6:
        store.restore({"op_retracts": store.log.retracted_values()})
    store.authority.load(json.loads(meta["authority"]))
    identity = tables["identity"].to_pylist()
    reg_keys = cast("list[str]", tables["registry_keys"].column("key").to_pylist())
    reg_config = json.loads(meta.get("registry", "null"))
    if identity or reg_keys or reg_config is not None or registry is not None:
        graph.registry.restore(reg_keys, identity, reg_config)
    return graph


def _evidence_arrays(table: pa.Table) -> EvidenceArrays:
    source: Any = table.column("source").combine_chunks()
    return EvidenceArrays(
        _ints(table, "seq"),
        table.column("text"),
        source.indices.to_numpy(),
        tuple(source.dictionary.to_pylist()),
        dict(zip(*_present(table, "time"), strict=True)),
        dict(zip(*_present(table, "valid_time"), strict=True)),
        table.column("erased").to_numpy(zero_copy_only=False),
    )


def _key_arrays(table: pa.Table) -> KeyArrays:
    rows, alts = _present(table, "alternatives")
    return KeyArrays(
        table.column("key").combine_chunks(),
        _ints(table, "head"),
        _ints(table, "newest"),
        {kid: tuple(a) for kid, a in zip(rows, alts, strict=True) if a},
    )


def _version_arrays(table: pa.Table) -> VersionArrays:
    rows, keys = _present(table, "premise_keys")
    _, heads = _present(table, "premise_versions")
    return VersionArrays(
        _ints(table, "key_id"),
        _dictionary_codes(table, "status", STATUSES),
        _ints(table, "valid_from"),
        _ints(table, "valid_to"),
        _ints(table, "evidence"),
        _ints(table, "supersedes"),
        _ints(table, "previous"),
        _ints(table, "support"),
        dict(zip(*_present(table, "alternative_of"), strict=True)),
        {v: tuple(zip(k, h, strict=True)) for v, k, h in zip(rows, keys, heads, strict=True)},
    )


def _edge_arrays(table: pa.Table) -> EdgeArrays:
    kind = _dictionary_codes(table, "kind", EDGE_KINDS)
    version, ev, seq = _ints(table, "version"), _ints(table, "evidence"), _ints(table, "seq")
    sb, tb = kind == _SUPPORTED_BY, kind == _REVOKES
    if np.count_nonzero(sb) + np.count_nonzero(tb) != len(kind):
        msg = "the edges table holds a kind other than supported-by and revokes"
        raise ValueError(msg)
    return EdgeArrays(version[sb], ev[sb], seq[sb], version[tb], ev[tb], seq[tb])


def _operation_arrays(table: pa.Table) -> OperationArrays:
    requested = _dictionary_codes(table, "requested", LOG_OPS)
    effective = _dictionary_codes(table, "op", LOG_OPS)
    applied = table.column("applied").to_numpy(zero_copy_only=False).astype(np.int64)
    rows, deps = _present(table, "premise_keys")
    return OperationArrays(
        requested | effective << 3 | applied << 6,
        _ints(table, "version"),
        _ints(table, "seq"),
        _ints(table, "key_id"),
        _ints(table, "evidence"),
        table.column("value").combine_chunks(),
        table.column("reason").combine_chunks(),
        dict(zip(*_present(table, "undoes"), strict=True)),
        dict(zip(*_present(table, "alias"), strict=True)),
        {n: tuple(k) for n, k in zip(rows, deps, strict=True)},
        dict(zip(*_present(table, "retracts"), strict=True)),
        table.column("retracts_erased").to_numpy(zero_copy_only=False),
    )


#: The schema whose operations table records what each retraction retracts.
SCHEMA_WITH_RETRACTS = 6


def _without_retracts(table: pa.Table) -> pa.Table:
    """An operations table of schema 4 or 5 with the columns schema 6 added (none retracts anything
    yet: ``GraphStore.retracted_values`` derives that from the log)."""
    n = table.num_rows
    if "retracts" in table.schema.names:  # not what schema 4 or 5 wrote: the schema check refuses it
        return table
    table = table.append_column(SCHEMAS["operations"].field("retracts"), _pa.nulls(n, type=_LSTR))
    return table.append_column(
        SCHEMAS["operations"].field("retracts_erased"), _pa.array(np.zeros(n, np.bool_))
    )
