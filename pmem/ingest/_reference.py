"""The reference semantics of an ingest: the same rows fed to P-Mem's write path (:class:`pmem.memory.writepath.WritePath`, what ``pmem.Memory`` and the ``pmem`` arm run) one by one, in process.

A text row is one write unit of the write path (extraction, soft identity, annotation); a fact row (see
:mod:`pmem.ingest._stream`) is, at its place in the stream, its evidence observed in the write path's
graph and its operation applied there to its key exactly as given::

    evidence = graph.observe(text, source, time, valid_time)
    graph.apply(op, key, value, evidence=evidence)

``pmem ingest`` must produce exactly these bytes, whatever ``--partitions`` says; tests and
``pmem perf ingest`` compare against it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.bench import Event
from pmem.ingest._spec import IngestSpec, load_ingest_config
from pmem.ingest._stream import read_stream

if TYPE_CHECKING:
    from pmem.graph import ProvenanceGraph
    from pmem.memory.writepath import WritePath


def ingest_sequential(
    stream: str | Path, *, config: str | Path | IngestSpec | None = None, skip_bad: bool = False
) -> ProvenanceGraph:
    """The graph P-Mem's write path builds from ``stream``'s rows, one write unit (text row) or one
    observation and operation (fact row) per row, in order."""
    spec = config if isinstance(config, IngestSpec) else load_ingest_config(config)
    return asyncio.run(_run(Path(stream), spec, skip_bad))


async def _run(stream: Path, spec: IngestSpec, skip_bad: bool) -> ProvenanceGraph:

    path = spec.write_path(spec.agent.chat_model(), spec.embedder.embedder_model())
    position = 0
    for batch in read_stream(stream, skip_bad=skip_bad):
        units: list[list[Event]] = []  # consecutive text rows, written together (the same as one by one)
        for row in batch.events.to_pylist():
            if row["key"] is None:
                units.append(
                    [
                        Event(
                            position,
                            row["text"],
                            time=row["time"],
                            source=row["source"],
                            valid_time=row["valid_time"],
                        )
                    ]
                )
            else:
                await _write(path, units)
                _write_fact_row(path.graph, row)
            position += 1
        await _write(path, units)
    return path.graph


async def _write(path: WritePath, units: list[list[Any]]) -> None:
    if units:
        await path.write(units)
        units.clear()


def _write_fact_row(graph: ProvenanceGraph, row: dict[str, Any]) -> None:
    evidence = graph.observe(row["text"], row["source"], row["time"], row["valid_time"])
    graph.apply(row["op"], row["key"], row["value"], evidence=evidence)
