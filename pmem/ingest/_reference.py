"""The reference semantics of an ingest: the same rows fed to the ``pmem`` arm one by one, in process.

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
    """The graph the ``pmem`` arm builds from ``stream``'s rows, one write unit per row, in order."""
    spec = config if isinstance(config, IngestSpec) else load_ingest_config(config)
    return asyncio.run(_run(Path(stream), spec, skip_bad))


async def _run(stream: Path, spec: IngestSpec, skip_bad: bool) -> ProvenanceGraph:
    from pmem.arms._base import ModelSet
    from pmem.arms._pmem import PMemArm
    from pmem.bench._types import Event
    from pmem.runner._bindings import build_chat, build_embedder

    arm = PMemArm(
        "pmem",
        ModelSet(agent=build_chat(spec.agent), embedder=build_embedder(spec.embedder)),
        spec.arm_options(),
    )
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
        await arm.ingest(events)
    graph = arm.graph()
    assert graph is not None  # the state read keeps a graph
    return graph
