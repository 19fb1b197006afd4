"""A partition worker: extraction for any rows, and the writes of the keys its partition owns.

Each worker runs P-Mem's write path (:class:`pmem.memory.writepath.WritePath`) over its own :class:`PartitionGraph`. Keys are
assigned to partitions by :func:`partitions_of`, so every write to one key happens in one worker, in
arrival order, against that key's real head; a write never reads another key's head, so partitions
never wait for each other. The worker does not keep the evidence: it reports each operation it applied
(op, key, value, evidence index) and the driver replays them, in global arrival order, into the one
graph that is saved (see :mod:`pmem.ingest._merge`).

Fact rows (see :mod:`pmem.ingest._stream`) are written by the driver, column-wise, with no model; their
operations are also applied here, to the partition owning their key, in arrival order with the text
rows' writes of that key: a text row's fact is annotated and lowered against a head that holds every
fact row of its key before it. They are not reported back (the driver has them). The fact rows of a
batch with text rows come with its commit; a run of batches of fact rows only is sent to nobody: before
the next commit, each partition reads the run from the stream itself and applies its keys' rows
(:meth:`IngestWorker.catch_up`), so a stream of fact rows only costs the partitions nothing.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.bench import Event
from pmem.graph import WRITE_BATCH_SCHEMA, ProvenanceGraph, valid_instant
from pmem.graph.seams import partitions_of
from pmem.ingest._calls import UnusedEmbedder, build_models, for_row, open_ingest_cache
from pmem.ingest._memory import peak_rss_mb
from pmem.ingest._parts import BuiltPart, PartLogs
from pmem.ingest._stream import Position, is_fact_row, read_stream
from pmem.memory.writepath import Fact
from pmem.models import RequestLog, records_to_table

if TYPE_CHECKING:
    from pmem.ingest._spec import IngestSpec
    from pmem.models import RequestRecord
    from pmem.runner import Hosted


class Applied(NamedTuple):
    """One call a partition applied for a routed fact, as the merge replays it (:mod:`pmem.ingest._merge`)."""

    position: int  # the fact's row among the ingested rows (its evidence index)
    fact_index: int  # the fact's index in its row
    op: str  # the operation applied (after lowering)
    key: str  # the canonical key
    value: str | None
    evidence: int  # the evidence index it cited (-1: none)


class RoutedFact(NamedTuple):
    """What the driver sends a partition for one routed fact."""

    position: int  # its row's position among the ingested rows (= its evidence index)
    row: int  # its row's number in the stream
    fact_index: int  # its index in the row
    key: str  # the canonical key (soft identity resolved on the driver)
    value: str | None  # the extracted fact: value, status, key as extracted, attributed event
    status: str
    fact_key: str
    event: int
    text: str  # the unit's text
    valid_time: str | None = None  # its evidence's valid time


class ExtractionRow(NamedTuple):
    """What the driver sends a worker to extract: one text row."""

    position: int  # among the ingested rows
    row: int  # its number in the stream
    text: str
    source: str
    time: str | None
    valid_time: str | None


#: What extraction returns for a row: its facts ``(key, value, status, event)``, the extraction's
#: error, and the valid time its evidence is admitted with (the row's own, else an extracted one).
Extracted = tuple[list[Any], str | None, str | None]
_T = TypeVar("_T")


@dataclass(frozen=True)
class FactRun:
    """Consecutive batches of fact rows only, not sent to the partitions: the rows of ``stream`` after
    ``start`` up to row ``end_row``, the first of them ingested as event ``first``; ``dropped``: the
    rows of the run that were not ingested (refused under ``skip_bad``, a repeated id included)."""

    stream: str
    start: Position
    end_row: int
    first: int
    dropped: tuple[int, ...] = ()


class FactRow(NamedTuple):
    """A fact row as a partition applies it: ``position`` is its evidence index (``e<position>``)."""

    position: int
    key: str
    op: str
    value: str | None
    valid_time: str | None


def extraction_rows(events: pa.RecordBatch, first: int) -> list[ExtractionRow]:
    """A batch's text rows as the workers' :meth:`IngestWorker.extract` takes them (positions from
    ``first``, counting every row: a fact row is extracted by nobody)."""
    text_rows = np.flatnonzero(~is_fact_row(events))
    taken = events.take(pa.array(text_rows, pa.int64()))
    names = ("row", "text", "source", "time", "valid_time")
    columns: list[list[Any]] = [taken.column(c).to_pylist() for c in names]
    return [ExtractionRow(*r) for r in zip((text_rows + first).tolist(), *columns, strict=True)]


#: The columns of a partition's fact rows besides ``position`` (see :class:`FactRow`).
FACT_APPLY_COLUMNS = ("key", "op", "value", "valid_time")


def partition_facts(events: pa.RecordBatch, first: int, partitions: int) -> list[pa.Table | None]:
    """The fact rows of a batch (positions from ``first``) for each partition: ``position`` and
    :data:`FACT_APPLY_COLUMNS` of the rows whose key it owns, in arrival order (None: it owns none)."""
    facts = np.flatnonzero(is_fact_row(events))
    if not len(facts):
        return [None] * partitions
    taken = events.take(pa.array(facts, pa.int64())).select(list(FACT_APPLY_COLUMNS))
    table = pa.Table.from_batches([taken]).add_column(0, "position", pa.array(facts + first, pa.int64()))
    if partitions == 1:
        return [table]
    owner = partitions_of(table.column("key"), partitions)
    parts: list[pa.Table | None] = []
    for p in range(partitions):
        mine = np.flatnonzero(owner == p)
        parts.append(table.take(pa.array(mine, pa.int64())) if len(mine) else None)
    return parts


class PartitionGraph(ProvenanceGraph):
    """A graph holding a partition's keys. Evidence lives on the driver: the worker reports each
    apply with the evidence id it names, for the merge, and it runs here without it: no outcome depends
    on it (an ingest configures no source authority, and its write path names no premises), except its
    valid time, which an ``accept`` compares with the head's. So evidence with a valid time is known
    here by that alone (:meth:`date_evidence`), and the applies citing it carry it; an apply citing
    other evidence cites none here (:meth:`evidence_index`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dated: dict[str, int] = {}  # evidence id -> index, for evidence known by its valid time

    def date_evidence(self, position: int, valid_time: str) -> None:
        """Evidence ``e<position>`` (observed on the driver) is valid from ``valid_time``."""
        text, at = valid_instant(valid_time, "ingest")
        self._dated[f"e{position}"] = position
        self.storage.evidence.set_valid_time(position, text, at)

    def apply_fact_row(self, fact: FactRow) -> None:
        """Apply a fact row (observed on the driver as ``e<position>``)."""
        if fact.valid_time is not None:
            self.date_evidence(fact.position, fact.valid_time)
        # only dated evidence is known here (by its valid time); other evidence is cited by none
        cited = None if fact.valid_time is None else f"e{fact.position}"
        self.apply(fact.op, fact.key, fact.value, cited)

    def apply_fact_rows(self, facts: pa.Table) -> None:
        """Apply fact rows (see :func:`partition_facts`) in order: column-wise, unless one is dated."""
        if not facts.num_rows:
            return
        if facts.column("valid_time").null_count < facts.num_rows:
            # a dated row is cited by its evidence index, which a write batch cannot name here
            for row in facts.to_pylist():
                self.apply_fact_row(_fact_row(row))
            return
        n = facts.num_rows
        columns = {name: facts.column(name) for name in ("op", "key", "value")}
        batch = pa.table(
            [pa.nulls(n, f.type) if f.name not in columns else columns[f.name] for f in WRITE_BATCH_SCHEMA],
            schema=WRITE_BATCH_SCHEMA,
        )
        self.apply_batch(batch)  # its mixed keys go through this graph's own apply()

    def evidence_index(self, evidence: object, op: str, key: str) -> int:
        n = self._dated.get(evidence) if type(evidence) is str else None
        return n if n is not None else super().evidence_index(evidence, op, key)


def _fact_row(row: dict[str, Any]) -> FactRow:
    return FactRow(row["position"], row["key"], row["op"], row["value"], row["valid_time"])


class _Turns:
    """Calls numbered 1, 2, ... run one at a time in that order, whatever order they arrive in."""

    def __init__(self) -> None:
        self._done = asyncio.Condition()
        self._last = 0  # the number of the last call that has finished

    async def take(self, turn: int, work: Callable[[], Awaitable[_T]]) -> _T:
        """Wait for call ``turn - 1`` to finish, then run ``work``; the next call waits for this one."""
        async with self._done:
            await self._done.wait_for(lambda: self._last == turn - 1)
        try:
            return await work()
        finally:
            async with self._done:
                self._last = turn
                self._done.notify_all()


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
        self.spec = spec
        self.log = RequestLog()
        self.cache = open_ingest_cache(cache_path)
        agent = build_models(spec.agent, hosted or {}, self.cache, self.log, f"agent:{spec.agent.model_id}")
        self.write_path = spec.write_path(agent, UnusedEmbedder())
        if self.write_path.provenance:  # premises and aliases would not survive the merge
            msg = "an ingest partition's write path runs without replayable provenance"
            raise RuntimeError(msg)
        self.write_path.track_attribution = False  # an ingest never audits: no per-event record to grow with
        self.write_path.adopt_graph(PartitionGraph())
        self.concurrency = self.write_path.writer.concurrency
        # an async actor runs calls in any order (Ray orders only a synchronous actor's calls): the
        # driver numbers the calls that must run in order, and each waits for its predecessor here
        self._commits = _Turns()  # commit and catch_up
        self._appends = _Turns()  # the parts' appends
        self._parts: PartLogs | None = None  # a sharded ingest's parts this worker writes (open_parts)
        self._replay_first = False  # whether the commits' graph is the parts' logs' before its first use

    def ready(self) -> int:
        return self.index

    def restore(self, state: bytes | None) -> int:
        """Start from a checkpoint's graph (every key's chain; this worker writes only its own)."""
        graph = PartitionGraph() if state is None else PartitionGraph.from_bytes(state)
        self.write_path.adopt_graph(graph)
        return len(graph)

    async def extract(self, rows: list[ExtractionRow]) -> list[Extracted]:
        """Extraction of each row: its facts ``(key, value, status, event)``, any error, and its
        evidence's valid time (the write path's choice: :meth:`WritePath.evidence_valid_time`)."""

        sem = asyncio.Semaphore(self.concurrency)

        async def one(row: ExtractionRow) -> Extracted:
            position, number, text, source, time, valid_time = row
            event = Event(position, text, time=time, source=source, valid_time=valid_time)
            with for_row(number):
                async with sem:
                    (ex,) = await self.write_path.extract([[event]])
            facts = [(f.key, f.value, f.status, f.event) for f in ex.facts]
            return facts, ex.error, self.write_path.evidence_valid_time(event, ex.facts)

        return list(await asyncio.gather(*(one(r) for r in rows)))

    async def commit(
        self, turn: int, items: list[RoutedFact], facts: pa.Table | None = None
    ) -> list[Applied]:
        """Apply routed facts (``items``) and fact rows (``facts``, see :func:`partition_facts`): each
        key's in arrival order, different keys concurrently. Only the items' applied calls are returned.

        Calls (this and :meth:`catch_up`) are numbered 1, 2, ... by the driver (``turn``), which sends
        the next before the last is done: each waits for its predecessor here, whatever order the calls
        arrive in, so a key's facts are never applied out of arrival order."""
        return await self._commits.take(turn, lambda: self._commit(items, facts))

    async def catch_up(self, turn: int, run: FactRun, partitions: int) -> int:
        """Apply the fact rows of ``run`` whose keys this partition owns (of ``partitions``), read from
        the stream here; how many. A call numbered like :meth:`commit`'s."""

        async def apply() -> int:
            graph = self._commit_graph()
            applied, position = 0, run.first
            dropped = pa.array(run.dropped, pa.int64())
            batches = read_stream(
                run.stream, start=run.start, batch_rows=self.spec.fact_batch_events, skip_bad=True
            )
            for batch in batches:
                rows: Any = batch.events.column("row")
                ingested: Any = pc.and_(
                    pc.less_equal(rows, pa.scalar(run.end_row, pa.int64())),
                    pc.invert(pc.is_in(rows, value_set=dropped)),
                )
                events = batch.events.filter(ingested)
                mine = partition_facts(events, position, partitions)[self.index]
                if mine is not None:
                    graph.apply_fact_rows(mine)
                    applied += mine.num_rows
                position += events.num_rows
                if batch.end.row >= run.end_row:
                    break
            return applied

        return await self._commits.take(turn, apply)

    async def _commit(self, items: list[RoutedFact], facts: pa.Table | None) -> list[Applied]:
        graph = self._commit_graph()
        by_key: dict[str, list[RoutedFact | FactRow]] = defaultdict(list)
        for item in items:
            by_key[item.key].append(item)
        if facts is not None and facts.num_rows:
            # fact rows of keys no item names are applied at once, column-wise; the others join their
            # key's chain at their place in arrival order
            chained = pc.is_in(facts.column("key"), value_set=pa.array(list(by_key), pa.string()))
            graph.apply_fact_rows(facts.filter(pc.invert(chained)))
            for row in facts.filter(chained).to_pylist():
                by_key[row["key"]].append(_fact_row(row))
            for chain_items in by_key.values():
                chain_items.sort(key=lambda entry: entry.position)
        applied: list[Applied] = []
        sem = asyncio.Semaphore(self.concurrency)

        for item in items:
            if item.valid_time is not None:
                graph.date_evidence(item.position, item.valid_time)

        async def chain(chain_items: list[RoutedFact | FactRow]) -> None:
            for entry in chain_items:
                if isinstance(entry, FactRow):
                    graph.apply_fact_row(entry)
                    continue
                position, row, fidx, key, value, status, fact_key, event, text, valid_time = entry
                fact = Fact(fact_key, value, status, event)
                # the evidence lives on the driver: here the write cites it only when it is dated (its
                # valid time decides where an accept enters the history), and the merge cites it always
                cited = None if valid_time is None else f"e{position}"
                with for_row(row, fidx):
                    async with sem:
                        write = await self.write_path.write_fact(fact, key, text, cited, position)
                if (
                    write is not None
                ):  # None: nothing applied (a failed annotation is logged by the write path)
                    applied.append(Applied(position, fidx, write.op, write.key, write.value, position))

        await asyncio.gather(*(chain(c) for c in by_key.values()))
        applied.sort(key=lambda a: (a[0], a[1]))
        return applied

    # ------------------------------------------------------------------ a sharded ingest's parts

    def open_parts(
        self, folders: dict[int, str], kept: dict[int, list[tuple[str, str]]], resumed: bool
    ) -> None:
        """Write the parts ``folders`` names (their log folders, by part index) of a sharded ingest
        (``--shards``), going on from the segments ``kept`` (``(name, digest)``: those the last
        checkpoint names, in order; any other segment there is removed, see :class:`PartLogs`). When
        ``resumed``, the commits' graph is the parts' graph at that checkpoint: replayed from those
        segments before the first commit (a stream of fact rows only never needs it)."""
        self._parts = PartLogs({i: Path(f) for i, f in folders.items()}, kept)
        self._replay_first = resumed

    async def append(
        self, turn: int, pieces: list[tuple[int, pa.Table, np.ndarray[Any, Any] | None]]
    ) -> None:
        """Append each piece (part, its rows of a batch's write log, the seqs of its text rows'
        operations) to its part's open log segment. Appends are numbered 1, 2, ... by the driver
        (``turn``) and run whole, one at a time, in that order, whatever order the calls arrive in: a
        segment's rows follow the global arrival seq."""

        async def write() -> None:
            parts = self._opened()
            for index, piece, text_ops in pieces:
                parts.append(index, piece, text_ops)

        await self._appends.take(turn, write)

    def seal(self) -> list[tuple[int, str, str]]:
        """Close the parts' open log segments (sealed, fsynced): (part, name, digest) of each."""
        return self._opened().seal()

    def write_parts(self, root: str) -> list[BuiltPart]:
        """Write this worker's parts into the sharded state being built at ``root``, one at a time (see
        :meth:`PartLogs.build`); the commits' graph is dropped first: nothing commits after the end."""
        self.write_path.adopt_graph(PartitionGraph())
        return self._opened().build(Path(root))

    def _opened(self) -> PartLogs:
        """The parts :meth:`open_parts` gave (a part's other calls come after it)."""
        if self._parts is None:
            msg = "this worker writes no part: open_parts() first"
            raise RuntimeError(msg)
        return self._parts

    def _commit_graph(self) -> PartitionGraph:
        """The commits' graph; on a resumed sharded ingest's first commit, replayed from the parts' logs
        at the checkpoint."""
        if self._replay_first:
            self._replay_first = False
            graph = ProvenanceGraph()
            self._opened().replay_kept(graph)
            self.write_path.adopt_graph(PartitionGraph.from_bytes(graph.to_bytes()))
        graph = self.write_path.graph
        assert isinstance(graph, PartitionGraph)
        return graph

    def close(self) -> None:
        """Close the response cache (its held entries written first): asked before the worker is
        killed, so that no connection of a killed process is left on the file."""
        if self.cache is not None:
            self.cache.close()

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
        noops = [(r.reason or "") for r in self.write_path.writer.take_write_log() if not r.applied]
        return {"requests": records_to_table(records), "refused": noops}
