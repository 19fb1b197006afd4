"""Generated streams for trying ``pmem ingest`` and measuring it.

- :func:`write_synthetic_stream`: text rows, ALFWorld-Revision-style object moves (with retractions,
  conflicting reports and confirmations) mixed with FactConsolidation-style numbered facts, over a chosen
  number of keys. The sentences are the benchmarks' own templates, so the heuristic agent extracts them
  and every operation type occurs.
- :func:`write_fact_stream`: fact rows (already-extracted facts, no model needed), generated column-wise
  (ten million rows in seconds): 95% accepts, the other ops 1% each, values from a small vocabulary and
  some unique ones, a few rows with their own evidence text or an observation time.

>>> rows = list(synthetic_rows(6, keys=2, seed=1))
>>> len(rows), sorted(rows[0])
(6, ['id', 'source', 'text'])
>>> fact_table(4, keys=3, seed=1).column_names
['key', 'op', 'value', 'source', 'time', 'text']
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pmem.bench.alfworld_templates import (
    CONFIRMATION,
    CONFLICT_REPORT,
    RETRACTION,
    STALE_RECORD,
    TWO_STEP,
    UPDATE,
)

_OBJECTS = ("apple", "mug", "book", "pen", "towel", "keychain", "laptop", "vase", "plate", "spoon")
_PLACES = ("countertop", "drawer", "shelf", "cabinet", "fridge", "sidetable", "desk", "sofa", "bed", "sink")
_FC = (
    ("The chairperson of {s} is {o}.", "Company"),
    ("The head coach of {s} is {o}.", "Club"),
    ("The chief executive officer of {s} is {o}.", "Firm"),
    ("The capital of {s} is {o}.", "Republic"),
)
_PEOPLE = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Niklaus", "Radia")


def _place(rng: random.Random) -> str:
    return f"{rng.choice(_PLACES)} {rng.randint(1, 9)}"


def synthetic_rows(events: int, *, keys: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """``events`` stream rows over about ``keys`` keys (half objects' locations, half facts)."""
    rng = random.Random(seed)
    state: dict[int, dict[str, Any]] = {}
    line = 0
    for i in range(events):
        k = rng.randrange(max(1, keys))
        s = state.setdefault(k, {})
        row: dict[str, Any] = {"id": f"ev{i}"}
        if k % 2 == 0:
            # object moves carry no time: the heuristic agent's templates expect the bare sentence
            text = _alfworld(rng, k, s)
            source = "observer"
        else:
            row["time"] = f"2026-01-01T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}"
            line += 1
            template, kind = _FC[(k // 2) % len(_FC)]
            who = f"{rng.choice(_PEOPLE)} {rng.choice(_PEOPLE)}son"
            text = f"{line}. " + template.format(s=f"{kind} {k}", o=who)
            source = "fact"
        row.update(text=text, source=source)
        yield row


def _alfworld(rng: random.Random, k: int, s: dict[str, Any]) -> str:
    obj = f"{_OBJECTS[k % len(_OBJECTS)]} {k}"
    here = s.get("at")
    if here is None:
        s["at"] = _place(rng)
        return STALE_RECORD.format(obj=obj, loc=s["at"])
    if s.get("conflict"):
        s["at"] = rng.choice(s.pop("conflict"))
        return CONFIRMATION.format(obj=obj, loc=s["at"])
    r = rng.random()
    if r < 0.1 and s.get("moved_from"):
        text = RETRACTION.format(obj=obj, v2=here)
        s["at"] = s.pop("moved_from")
        return text
    if r < 0.2:
        other = _place(rng)
        if other != here:
            s["conflict"] = [here, other]
        return CONFLICT_REPORT.format(obj=obj, loc=other)
    to = _place(rng)
    s["moved_from"] = here
    s["at"] = to
    if r < 0.3:
        return TWO_STEP.format(obj=obj, a=here, c=_place(rng), b=to)
    return UPDATE.format(obj=obj, a=here, b=to)


def write_synthetic_stream(path: str | Path, events: int, *, keys: int, seed: int = 0) -> Path:
    """Write the rows as JSONL (or Parquet when ``path`` ends in ``.parquet``); returns ``path``."""
    path = Path(path)
    rows = synthetic_rows(events, keys=keys, seed=seed)
    if path.suffix == ".parquet":
        schema = pa.schema([(c, pa.string()) for c in ("id", "text", "source", "time")])
        with pq.ParquetWriter(path, schema) as w:
            chunk: list[dict[str, Any]] = []
            for row in rows:
                chunk.append(row)
                if len(chunk) == 100_000:
                    w.write_table(pa.Table.from_pylist(chunk, schema=schema))
                    chunk = []
            if chunk:
                w.write_table(pa.Table.from_pylist(chunk, schema=schema))
        return path
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


#: A fact row's op: (op, share); ``accept`` is left out of a row (the default).
FACT_OP_MIX = (
    ("accept", 0.95),
    ("contest", 0.01),
    ("reject", 0.01),
    ("revoke", 0.01),
    ("resolve", 0.01),
    ("noop", 0.01),
)
_ATTRIBUTES = ("city", "employer", "title", "team")
_VOCABULARY = (
    "Lyon", "Paris", "Berlin", "Oslo", "Lima", "Quito", "Accra", "Hanoi",
    "Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Wonka", "Stark",
    "engineer", "designer", "manager", "analyst", "platform", "search", "billing", "growth",
)  # fmt: skip
_UNIQUE_VALUES = 0.1  # share of values (of the ops that name one) seen nowhere else
_WITH_TEXT = 0.01  # share of rows that bring their own evidence text
_WITH_TIME = 0.1  # share of rows that carry an observation time


def fact_table(rows: int, *, keys: int, seed: int = 0, first: int = 0) -> pa.Table:
    """``rows`` fact rows over ``keys`` keys (``person_N.city``, ...) as a table, column-wise; ``first``
    numbers the rows (a long stream is made of tables of consecutive rows, each from its own seed)."""
    rng = np.random.default_rng(seed)
    index = _text(np.arange(first, first + rows))
    key = rng.integers(0, max(1, keys), size=rows)
    names = _joined(
        "person_", _text(key // len(_ATTRIBUTES)), ".", _pick(_ATTRIBUTES, key % len(_ATTRIBUTES))
    )
    op = rng.choice(len(FACT_OP_MIX), size=rows, p=[share for _, share in FACT_OP_MIX])
    stated = np.isin(op, [0, 1, 4])  # accept, contest, resolve name a value
    common = _pick(_VOCABULARY, rng.integers(0, len(_VOCABULARY), size=rows))
    value = _where(stated, _where(rng.random(rows) < _UNIQUE_VALUES, _joined("value ", index), common), None)
    seconds: Any = pa.array(1_767_225_600 + np.arange(first, first + rows), pa.timestamp("s"))  # 2026 on
    return pa.table(
        {
            "key": names,
            "op": _where(op > 0, _pick([name for name, _ in FACT_OP_MIX], op), None),  # accept: the default
            "value": value,
            "source": _where(rng.random(rows) < 0.1, "support", "crm"),
            "time": _where(rng.random(rows) < _WITH_TIME, pc.strftime(seconds, "%Y-%m-%dT%H:%M:%SZ"), None),
            "text": _where(rng.random(rows) < _WITH_TEXT, _joined("imported note ", index), None),
        }
    )


def _text(numbers: np.ndarray[Any, Any]) -> Any:
    return pc.cast(pa.array(numbers, pa.int64()), pa.string())


def _pick(names: Iterable[str], at: np.ndarray[Any, Any]) -> Any:
    return pa.array(list(names), pa.string()).take(pa.array(at, pa.int64()))


def _joined(*parts: Any) -> Any:
    join: Any = pc.binary_join_element_wise
    return join(*parts, "")


def _where(mask: np.ndarray[Any, Any], then: Any, otherwise: Any) -> Any:
    def column(value: Any) -> Any:
        return pa.scalar(value, pa.string()) if value is None or isinstance(value, str) else value

    return pc.if_else(pa.array(mask, pa.bool_()), column(then), column(otherwise))


def _jsonl_lines(table: pa.Table) -> memoryview:
    """The rows as JSON lines, column-wise (the generated texts hold nothing JSON escapes); the first
    column is never null."""
    pieces = [
        pc.fill_null(_joined(f'{", " if i else ""}"{name}": "', table.column(name), '"'), "")
        for i, name in enumerate(table.column_names)
    ]
    lines: Any = pc.cast(_joined("{", *pieces, "}\n"), pa.large_string())
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    offsets = np.frombuffer(lines.buffers()[1], np.int64)[lines.offset : lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[int(offsets[0]) : int(offsets[-1])]


#: Rows generated (and written) at a time: a long stream is never held whole.
_FACT_BLOCK = 1_000_000


def write_fact_stream(path: str | Path, rows: int, *, keys: int, seed: int = 0) -> Path:
    """Write ``rows`` fact rows over ``keys`` keys (see :func:`fact_table`) as JSONL, or Parquet when
    ``path`` ends in ``.parquet``: the same rows either way, for a seed; returns ``path``."""
    path = Path(path)
    blocks = (
        fact_table(min(_FACT_BLOCK, rows - first), keys=keys, seed=seed * 1_000_003 + first, first=first)
        for first in range(0, rows, _FACT_BLOCK)
    )
    if path.suffix == ".parquet":
        schema = pa.schema([(name, pa.string()) for name in ("key", "op", "value", "source", "time", "text")])
        with pq.ParquetWriter(path, schema) as writer:
            for table in blocks:
                writer.write_table(table.cast(schema), row_group_size=128 * 1024)
        return path
    with open(path, "wb") as f:
        for table in blocks:
            f.write(_jsonl_lines(table))
    return path
