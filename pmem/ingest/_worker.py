"""A partition worker: extraction for any rows, and the writes of the keys its partition owns.

Each worker runs P-Mem's write path (:class:`pmem.memory.writepath.WritePath`) over its own :class:`PartitionGraph`. Keys are
assigned to partitions by :func:`partition_of`, so every write to one key happens in one worker, in
arrival order, against that key's real head; a write never reads another key's head, so partitions
never wait for each other. The worker does not keep the evidence: it reports each operation it applied
(op, key, value, evidence index) and the driver replays them, in global arrival order, into the one
graph that is saved (see :mod:`pmem.ingest._merge`).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import sys
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from pmem.graph import OpResult, ProvenanceGraph, valid_instant
from pmem.ingest._calls import UnusedEmbedder, build_models, for_row, open_ingest_cache
from pmem.models import RequestLog, records_to_table

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pyarrow as pa

    from pmem.ingest._spec import IngestSpec
    from pmem.models import RequestRecord
    from pmem.runner import Hosted

#: (row position, fact index, requested op, canonical key, value, evidence index): one applied call.
Applied = tuple[int, int, str, str, str | None, int]
#: What the driver sends for one routed fact (see :func:`commit_item`).
Item = tuple[int, int, int, str, str | None, str, str, int, str, str | None]
#: What the driver sends for extraction: (row position, stream row number, text, source, time,
#: valid time).
Row = tuple[int, int, str, str, str | None, str | None]
#: What extraction returns for a row: its facts ``(key, value, status, event)``, the extraction's
#: error, and the valid time its evidence is admitted with (the row's own, else an extracted one).
Extracted = tuple[list[Any], str | None, str | None]
_SINK: contextvars.ContextVar[list[tuple[str, str, str | None, str | None]] | None] = contextvars.ContextVar(
    "pmem_ingest_sink", default=None
)


def extraction_rows(events: pa.RecordBatch, first: int) -> list[Row]:
    """A batch's rows as the workers' :meth:`IngestWorker.extract` takes them (positions from ``first``)."""
    names = ("row", "text", "source", "time", "valid_time")
    columns: list[list[Any]] = [events.column(c).to_pylist() for c in names]
    return list(zip(range(first, first + events.num_rows), *columns, strict=True))


def reset_peak_rss() -> bool:
    """Count this process's peak resident memory afresh from now, where the system allows (Linux), so
    that an ingest in a long-lived process reports its own peak, not the process's; False elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the high-water mark (VmHWM) of this process, nothing else
    except OSError:
        return False
    return True


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB: since :func:`reset_peak_rss` on Linux (``VmHWM``),
    since the process started elsewhere (``ru_maxrss``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # reported in kB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / 2**20 if sys.platform == "darwin" else peak / 1024, 1)  # bytes there, KiB on Linux


def partition_of(key: str, partitions: int) -> int:
    """The partition owning ``key``: a stable hash, the same in every process and on every run."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % partitions


class PartitionGraph(ProvenanceGraph):
    """A graph holding a partition's keys. Evidence lives on the driver: applies are recorded with
    the evidence id they name, for the merge, and run here without it: no outcome depends on it (an
    ingest configures no source authority, and its write path names no premises), except its valid
    time, which an ``accept`` compares with the head's. So evidence with a valid time is known here by
    that alone (:meth:`date_evidence`), and the applies citing it carry it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dated: dict[str, int] = {}  # evidence id -> index, for evidence known by its valid time

    def date_evidence(self, position: int, valid_time: str) -> None:
        """Evidence ``e<position>`` (observed on the driver) is valid from ``valid_time``."""
        text, at = valid_instant(valid_time, "ingest")
        self._dated[f"e{position}"] = position
        self._ev_valid[position] = text
        self._valid_at[position] = at

    def _evidence_index(self, evidence: object, op: str, key: str) -> int:
        n = self._dated.get(evidence) if type(evidence) is str else None
        return n if n is not None else super()._evidence_index(evidence, op, key)

    def apply(
        self,
        op: str,
        key: str,
        value: str | None = None,
        evidence: str | None = None,
        *,
        depends_on: Iterable[str] | None = None,
        alias: str | None = None,
    ) -> OpResult:
        if depends_on is not None or alias is not None:
            msg = "an ingest partition records no premises or aliases (the merge would not carry them)"
            raise ValueError(msg)
        cited = evidence if evidence is not None and evidence in self._dated else None
        result = super().apply(op, key, value, cited)
        sink = _SINK.get()
        if sink is not None:
            sink.append((op, key, value, evidence))
        return result


def commit_item(
    position: int,
    row: int,
    fact_index: int,
    key: str,
    value: str | None,
    status: str,
    fact_key: str,
    event: int,
    text: str,
    valid_time: str | None = None,
) -> Item:
    """One routed fact: its row's position among the ingested rows (= its evidence index) and number in
    the stream, its index in the row, the canonical key, the extracted fact (value, status, key as
    extracted, attributed event), the unit's text and its evidence's valid time."""
    return (position, row, fact_index, key, value, status, fact_key, event, text, valid_time)


class IngestWorker:
    """Runs as a Ray actor (``ray.remote(IngestWorker)``); usable in-process as well."""

    def __init__(
        self,
        spec: IngestSpec,
        hosted: dict[str, Hosted] | None = None,
        cache_path: str | None = None,
        index: int = 0,
    ) -> None:
        self.index = index
        self.log = RequestLog()
        self.cache = open_ingest_cache(cache_path)
        agent = build_models(spec.agent, hosted or {}, self.cache, self.log, f"agent:{spec.agent.model_id}")
        self.path = spec.write_path(agent, UnusedEmbedder())
        self.path.track_attribution = False  # an ingest never audits: no per-event record to grow with
        self.path.adopt_graph(PartitionGraph())
        self.concurrency = self.path.writer.concurrency
        self._turn = asyncio.Condition()
        self._committed = 0  # the last batch whose commit has finished

    def ready(self) -> int:
        return self.index

    def restore(self, state: bytes | None) -> int:
        """Start from a checkpoint's graph (every key's chain; this worker writes only its own)."""
        graph = PartitionGraph() if state is None else PartitionGraph.from_bytes(state)
        self.path.adopt_graph(graph)
        return len(graph)

    async def extract(self, rows: list[Row]) -> list[Extracted]:
        """Extraction of each row: its facts ``(key, value, status, event)``, any error, and its
        evidence's valid time (the write path's choice: :meth:`WritePath.evidence_valid_time`)."""
        from pmem.bench import Event

        sem = asyncio.Semaphore(self.concurrency)

        async def one(row: Row) -> Extracted:
            position, number, text, source, time, valid_time = row
            event = Event(position, text, time=time, source=source, valid_time=valid_time)
            with for_row(number):
                async with sem:
                    (ex,) = await self.path.extract([[event]])
            facts = [(f.key, f.value, f.status, f.event) for f in ex.facts]
            return facts, ex.error, self.path.evidence_valid_time(event, ex.facts)

        return list(await asyncio.gather(*(one(r) for r in rows)))

    async def commit(self, batch: int, items: list[Item]) -> list[Applied]:
        """Apply routed facts: each key's in arrival order, different keys concurrently.

        Batches are numbered 1, 2, ... by the driver, which sends the next before the last is done: each
        waits for its predecessor here, whatever order the calls arrive in, so a key's facts are never
        applied out of arrival order."""
        async with self._turn:
            await self._turn.wait_for(lambda: self._committed == batch - 1)
        try:
            return await self._commit(items)
        finally:
            async with self._turn:
                self._committed = batch
                self._turn.notify_all()

    async def _commit(self, items: list[Item]) -> list[Applied]:
        from pmem.memory.writepath import Fact

        by_key: dict[str, list[Item]] = defaultdict(list)
        for item in items:
            by_key[item[3]].append(item)
        applied: list[Applied] = []
        sem = asyncio.Semaphore(self.concurrency)

        graph = self.path.graph
        assert isinstance(graph, PartitionGraph)
        for item in items:
            if item[9] is not None:
                graph.date_evidence(item[0], item[9])

        async def chain(chain_items: list[Item]) -> None:
            for position, row, fidx, key, value, status, fact_key, event, text, _ in chain_items:
                sink: list[tuple[str, str, str | None, str | None]] = []
                token = _SINK.set(sink)
                try:
                    fact = Fact(fact_key, value, status, event)
                    with for_row(row, fidx):
                        async with sem:
                            await self.path.write_fact(fact, key, text, f"e{position}", position)
                finally:
                    _SINK.reset(token)
                for op, k, v, ev in sink:
                    applied.append((position, fidx, op, k, v, -1 if ev is None else int(ev[1:])))

        await asyncio.gather(*(chain(c) for c in by_key.values()))
        applied.sort(key=lambda a: (a[0], a[1]))
        return applied

    def peak_rss_mb(self) -> float:
        """This worker process's peak resident memory."""
        return peak_rss_mb()

    def drain(self) -> dict[str, Any]:
        """The request records and write-log noops since the last drain (then forgotten); the calls
        they record are in the response cache first."""
        if self.cache is not None:
            self.cache.flush()
        records: list[RequestRecord] = self.log.drain()
        # the write log: its noops are the refused writes (bad extractions and annotations)
        noops = [(r.reason or "") for r in self.path.writer.take_write_log() if not r.applied]
        return {"requests": records_to_table(records), "refused": noops}
