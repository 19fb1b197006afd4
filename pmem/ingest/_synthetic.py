"""A generated stream for trying ``pmem ingest`` and measuring it: ALFWorld-Revision-style object moves
(with retractions, conflicting reports and confirmations) mixed with FactConsolidation-style numbered
facts, over a chosen number of keys. The sentences are the benchmarks' own templates, so the heuristic
agent extracts them and every operation type occurs.

>>> rows = list(synthetic_rows(6, keys=2, seed=1))
>>> len(rows), sorted(rows[0])
(6, ['id', 'source', 'text'])
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
        import pyarrow as pa
        import pyarrow.parquet as pq

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
