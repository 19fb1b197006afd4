"""Histories <-> Arrow: one row per history, events and questions as lists of structs.

Columns follow the dataclass fields (added fields with defaults are picked up automatically);
``dict`` fields are stored as JSON text (keys sorted) because their values are heterogeneous.

>>> from pmem.bench._types import Event, History, Question
>>> h = History("x/y/1", "x", "y", (Event(0, "a"),), (Question("q", "?", ("a",), "current", 0),))
>>> histories_from_arrow(histories_to_arrow([h])) == [h]
True
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from pmem.bench._types import Event, History, Question

FORMAT_VERSION = "1"

_SCALARS: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "str": pa.string(),
    "str | None": pa.string(),
    "int | None": pa.int64(),
    "bool": pa.bool_(),
    "tuple[str, ...]": pa.list_(pa.string()),
    "dict[str, Any]": pa.string(),
}


def _fields(cls: type) -> list[tuple[str, str]]:
    return [(f.name, str(f.type)) for f in dataclasses.fields(cls)]


def _struct(cls: type) -> pa.StructType:
    out = []
    for name, typ in _fields(cls):
        if typ not in _SCALARS:
            msg = f"{cls.__name__}.{name}: type {typ} has no Arrow mapping in pmem.bench._arrow"
            raise TypeError(msg)
        out.append(pa.field(name, _SCALARS[typ]))
    return pa.struct(out)


def _encode(obj: Any) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        row[f.name] = json.dumps(v, sort_keys=True) if isinstance(v, dict) else v
    return row


def _decode(cls: type, row: dict[str, Any]) -> Any:
    kw: dict[str, Any] = {}
    for name, typ in _fields(cls):
        if name not in row:  # a file written before the field was added: the field's default
            continue
        v = row[name]
        if typ == "dict[str, Any]":
            v = json.loads(v) if v is not None else {}
        elif typ == "tuple[str, ...]":
            v = tuple(v or ())
        kw[name] = v
    return cls(**kw)


def history_schema() -> pa.Schema:
    cols = [pa.field(n, _SCALARS[t]) for n, t in _fields(History) if n not in ("events", "questions")]
    cols += [pa.field("events", pa.list_(_struct(Event))), pa.field("questions", pa.list_(_struct(Question)))]
    return pa.schema(cols, metadata={"pmem.bench.format": FORMAT_VERSION})


def histories_to_arrow(histories: Iterable[History]) -> pa.Table:
    schema = history_schema()
    columns: dict[str, list[Any]] = {f.name: [] for f in schema}
    for h in histories:
        for name in columns:
            if name == "events":
                columns[name].append([_encode(e) for e in h.events])
            elif name == "questions":
                columns[name].append([_encode(q) for q in h.questions])
            else:
                v = getattr(h, name)
                columns[name].append(json.dumps(v, sort_keys=True) if isinstance(v, dict) else v)
    return pa.Table.from_pydict(columns, schema=schema)


def histories_from_arrow(table: pa.Table) -> list[History]:
    missing = {f.name for f in history_schema()} - set(table.column_names)
    if missing:
        msg = f"Arrow table is not a pmem history table: columns {sorted(missing)} are missing"
        raise ValueError(msg)
    out: list[History] = []
    for row in table.to_pylist():
        kw: dict[str, Any] = {}
        for name, typ in _fields(History):
            if name == "events":
                kw[name] = tuple(_decode(Event, e) for e in row[name])
            elif name == "questions":
                kw[name] = tuple(_decode(Question, q) for q in row[name])
            elif typ == "dict[str, Any]":
                kw[name] = json.loads(row[name]) if row[name] is not None else {}
            else:
                kw[name] = row[name]
        out.append(History(**kw))
    return out


def write_histories(path: str, histories: Iterable[History]) -> None:
    """Arrow IPC file (Feather v2)."""
    import pyarrow.feather as feather

    feather.write_feather(histories_to_arrow(histories), path, compression="uncompressed")


def read_histories(path: str) -> list[History]:
    import pyarrow.feather as feather

    return histories_from_arrow(feather.read_table(path))
