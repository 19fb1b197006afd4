"""The reference semantics of an ingest: the same rows fed to P-Mem's write path (:class:`pmem.memory.writepath.WritePath`, what ``pmem.Memory`` and the ``pmem`` arm run) one by one, in process.

``pmem ingest`` must produce exactly these bytes, whatever ``--partitions`` says; tests and
``pmem perf ingest`` compare against it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.ingest._spec import IngestSpec, load_ingest_config
from pmem.ingest._stream import read_stream

if TYPE_CHECKING:
    from pmem.graph import ProvenanceGraph


def ingest_sequential(
    stream: str | Path, *, config: str | Path | IngestSpec | None = None, skip_bad: bool = False
) -> ProvenanceGraph:
    """The graph P-Mem's write path builds from ``stream``'s rows, one write unit per row, in order."""
    spec = config if isinstance(config, IngestSpec) else load_ingest_config(config)
    return asyncio.run(_run(Path(stream), spec, skip_bad))


async def _run(stream: Path, spec: IngestSpec, skip_bad: bool) -> ProvenanceGraph:
    from pmem.bench import Event
    from pmem.models import make_chat_model, make_embedder

    path = spec.write_path(make_chat_model(spec.agent.spec), make_embedder(spec.embedder.spec))
    position = 0
    for batch in read_stream(stream, skip_bad=skip_bad):
        ev = batch.events
        texts: list[Any] = ev.column("text").to_pylist()
        sources: list[Any] = ev.column("source").to_pylist()
        times: list[Any] = ev.column("time").to_pylist()
        valid: list[Any] = ev.column("valid_time").to_pylist()
        events = [
            Event(position + i, text, time=time, source=source, valid_time=vt)
            for i, (text, source, time, vt) in enumerate(zip(texts, sources, times, valid, strict=True))
        ]
        position += len(events)
        await path.write([[e] for e in events])
    return path.graph
