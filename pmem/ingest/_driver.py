"""``pmem ingest``: one P-Mem state from a stream of any length, across a Ray cluster.

The write path is P-Mem's (:class:`pmem.memory.writepath.WritePath`, what ``pmem.Memory`` and the
``pmem`` arm run), cut where its semantics allow:

1. **Read** (driver): the stream in batches of ``batch_events`` rows (:mod:`pmem.ingest._stream`).
2. **Extract** (all workers): each batch is split into one contiguous slice per worker; extraction of a
   row depends on nothing but the row, so it fans out across every worker and, through them, across
   every agent replica. At most two batches are in flight (the next batch is extracted while the
   current one is routed and committed): that is the backpressure.
3. **Route** (driver, in arrival order): soft key identity reads the registry of every key seen so far,
   so it runs in one place, in order; the candidate keys of a batch are embedded in one call.
4. **Commit** (the worker owning each key): the operation of a fact depends on its key's head only
   (annotation sees the key's head and the row's text; the controller lowers against the key's head),
   so each key's facts are applied, in arrival order, in the partition that owns the key; no write reads
   another key's head, and nothing else is shared between partitions.
5. **Merge** (driver): the applied operations of all partitions, in global arrival order, interleaved
   with the rows' evidence, are written into the one graph with :meth:`ProvenanceGraph.apply_batch`.
   The result is byte-identical to feeding the same rows to that write path one by one.

Fact rows (already-extracted facts, see :mod:`pmem.ingest._stream`) skip extraction and routing: their
key is the one given. Each partition applies the fact rows of its keys before the text rows after them
are committed, so that those are annotated against heads that hold them: a batch's fact rows go with its
commit (one Ray call per partition and batch, never per row); a run of batches of fact rows only is sent
to nobody, and each partition reads it from the stream itself before its next commit
(:meth:`IngestWorker.catch_up`). A batch of fact rows only makes no model call and no Ray call: it
becomes one write log, column-wise (:func:`fact_log`), read in batches that grow while the
stream holds fact rows only (``fact_batch_events``).

Durability: every ``checkpoint_every`` events (at a batch end) the merged graph and then a manifest
naming it are written atomically, unless writing it would take more than
:data:`~pmem.ingest._checkpoint.CHECKPOINT_SHARE` of the time since the last one (a fast stream over a
large graph: checkpoints would otherwise dominate it; the end of the stream is always checkpointed); a
re-run of the same command resumes from the last manifest, and model calls made after it are answered by
the response cache (see :mod:`pmem.ingest._checkpoint` and :mod:`pmem.ingest._workdir`).

The driver (:class:`_Ingest`) coordinates: a :class:`~pmem.ingest._pool.WorkerPool` (the replicas and
the workers), an :class:`~pmem.ingest._output.Output` (one state file, or a sharded state's parts) and a
:class:`~pmem.ingest._checkpoint.Checkpointer` (the manifest and the checkpoints it names).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem._lock import hold_exclusive
from pmem.bench import Event
from pmem.graph import ProvenanceGraph, is_sharded
from pmem.ingest._calls import build_models, for_row, open_ingest_cache
from pmem.ingest._checkpoint import Checkpointer
from pmem.ingest._memory import peak_rss_mb, reset_peak_rss
from pmem.ingest._merge import FACT_ROW, batch_log, fact_log, fact_row_operations
from pmem.ingest._output import Written, output_for
from pmem.ingest._parts import check_parts
from pmem.ingest._pool import WorkerPool
from pmem.ingest._report import IngestReport, Progress
from pmem.ingest._seen import SeenIds
from pmem.ingest._spec import IngestSpec, load_ingest_config
from pmem.ingest._stream import (
    Position,
    StreamBatch,
    StreamError,
    check_format,
    count_rows,
    is_fact_row,
    read_stream,
)
from pmem.ingest._workdir import Workdir, workdir_of
from pmem.ingest._worker import (
    FactRun,
    RoutedFact,
    partition_facts,
    partitions_of,
)
from pmem.memory.writepath import WritePath, event_line
from pmem.models import RequestLog, records_to_table
from pmem.runner import connect, embedded

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pmem.models import ResponseCache

#: Text rows that gave no fact the report quotes (it counts them all).
NO_FACT_EXAMPLES = 3
#: Characters of such a row's text the report quotes.
EXAMPLE_CHARS = 80


@dataclass(frozen=True)
class _InFlight:
    """A routed batch whose partitions are committing it."""

    batch: StreamBatch
    first: int
    commits: list[Any]  # the partitions' applied calls for the batch
    waits: list[Any]  # calls that must end before it is merged (catching up with fact rows)
    facts: int  # facts written: extracted ones and fact rows
    valid_times: list[str | None] | None  # each row's evidence's valid time (None: fact rows only)
    no_fact: list[dict[str, Any]]  # its text rows that gave no fact (row, text, reason)


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    return batch.column(name).to_pylist()


def ingest(
    stream: str | Path,
    out: str | Path,
    *,
    config: str | Path | IngestSpec | None = None,
    partitions: int = 1,
    address: str | None = None,
    skip_bad: bool = False,
    progress: bool = True,
    log: TextIO | None = None,
    shards: bool = False,
    parts: int | None = None,
) -> IngestReport:
    """Build one P-Mem state at ``out`` from ``stream`` (JSONL, Parquet or Arrow; one event per row).

    Re-running the same call after an interruption resumes from the last checkpoint and ends in the
    same bytes; ``partitions`` changes the speed, never the bytes.

    With ``shards``, ``out`` is a sharded state (a directory, see ``pmem.graph.shards``): each worker
    writes the part of the keys it owns and the driver never holds the graph; ``ProvenanceGraph.load(out)``
    gives the graph sequential ingestion gives, byte for byte. It has ``parts`` parts (default:
    ``partitions``; a multiple of it): a worker builds its parts one at a time at the end, so more parts
    bound its memory lower (:mod:`pmem.ingest._parts`). A resumed ingest must give the same ``parts``.
    """
    spec = config if isinstance(config, IngestSpec) else load_ingest_config(config)
    if partitions < 1:
        msg = f"partitions must be at least 1, got {partitions}"
        raise ValueError(msg)
    if parts is not None and not shards:
        msg = "--parts is the parts of a sharded state: give --shards with it"
        raise ValueError(msg)
    if shards:
        parts = partitions if parts is None else parts
        check_parts(parts, partitions)
    import ray  # before anything is written: Ray is the eval extra's, maybe not installed

    stream, out = Path(stream), Path(out)
    check_paths(stream, out, sharded=shards)
    check_format(stream)  # a file that is not what its name says: one line, before Ray starts
    workdir = workdir_of(out)
    workdir.mkdir(exist_ok=True)
    # one ingest per output for its whole run: a second one is refused here, before any model starts
    lock = hold_exclusive(
        workdir / ".lock", f"--out {out}", hint="wait for that ingest to end, or give another --out"
    )
    started = False
    try:
        job = _Ingest(spec, stream, out, partitions, skip_bad, progress, log or sys.stderr, parts)
        done = job.already_complete()  # before Ray starts: a finished ingest answers at once
        if done is not None:
            return done
        if embedded(address) and not _ray_initialized():
            # the embedded Ray gets this machine's CPUs: refuse before spending seconds starting it
            check_partitions(partitions, spec.worker_cpus, float(os.cpu_count() or 1))
        started = connect(address)
        check_partitions(partitions, spec.worker_cpus)
        return job.execute()
    finally:
        if started:
            import ray

            ray.shutdown()
        lock.release()


def _ray_initialized() -> bool:
    import ray

    return bool(ray.is_initialized())


def check_paths(stream: Path, out: Path, *, sharded: bool = False) -> None:
    """The stream is a readable file and ``out`` a state file (``sharded``: a sharded state's directory)
    that can be written and destroys no input.

    Raises:
        FileNotFoundError: the stream, or ``out``'s folder, does not exist.
        ValueError: the stream is not a regular file; ``out`` is a folder, the stream itself, or a path
            inside the ingest's working folder; ``out``'s folder cannot be written.
    """
    if stream.is_dir():
        msg = f"{stream}: is a directory, not a stream file (give one .jsonl, .parquet or .arrow file)"
        raise ValueError(msg)
    if not stream.exists():
        msg = f"{stream}: stream file not found"
        raise FileNotFoundError(msg)
    if not stream.is_file():
        msg = f"{stream}: not a regular file (a FIFO or a device): the stream is read twice, so give a file"
        raise ValueError(msg)
    if sharded and out.exists() and not is_sharded(out):
        what = "a directory that holds no sharded state" if out.is_dir() else "a file"
        msg = f"--out {out}: is {what}; --shards writes a directory there (give a new path)"
        raise ValueError(msg)
    if out.is_dir() and not sharded:
        msg = f"--out {out}: is a directory; give the state file's path (for example {out / 'state.arrow'})"
        raise ValueError(msg)
    if not out.parent.is_dir():
        msg = f"--out {out}: the directory {out.parent} does not exist"
        raise FileNotFoundError(msg)
    real_stream, real_out = stream.resolve(), out.resolve()
    if real_out == real_stream:
        msg = f"--out {out}: is the stream itself; the state would overwrite it (give another path)"
        raise ValueError(msg)
    if real_stream.is_relative_to(workdir_of(real_out)):
        msg = f"--out {out}: the stream {stream} is inside its working folder {workdir_of(out)}, which the ingest rewrites"
        raise ValueError(msg)
    if not os.access(out.parent, os.W_OK | os.X_OK):
        msg = f"--out {out}: the directory {out.parent} is not writable (read-only or no permission)"
        raise ValueError(msg)


#: the least CPU an ingest worker is given; the node's CPUs over this bound ``--partitions``
MIN_WORKER_CPUS = 0.25


def check_partitions(partitions: int, worker_cpus: float | None, cpus: float | None = None) -> None:
    """``partitions`` workers fit the driver's node (where they run, beside the response cache): its
    ``cpus``, or, when not given, the CPUs Ray reports for the driver's node.

    Raises:
        ValueError: more partitions than the node can run, with the bound.
    """
    if cpus is None:
        import ray

        node = ray.get_runtime_context().get_node_id()
        cpus = next((n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["NodeID"] == node), 0.0)
    each = worker_cpus or MIN_WORKER_CPUS
    bound = max(1, int(cpus / each + 1e-9))
    if partitions > bound:
        msg = (
            f"--partitions {partitions}: this node can run at most {bound} ingest workers "
            f"({cpus:g} CPUs, {each:g} CPU each; the workers run on the driver's node); pass --partitions {bound} or less"
        )
        raise ValueError(msg)


#: Batches sent for extraction ahead of the one being routed.
EXTRACT_AHEAD = 2


class _Ingest:
    """One ingest run: the coordinator of its stages over a :class:`WorkerPool`, an :class:`Output` and
    a :class:`Checkpointer`."""

    def __init__(
        self,
        spec: IngestSpec,
        stream: Path,
        out: Path,
        partitions: int,
        skip_bad: bool,
        progress: bool,
        log: TextIO,
        parts: int | None = None,
    ) -> None:
        self.report = IngestReport(str(stream), str(out), partitions, spec=spec.public())
        # the workers are Ray actors whose working directory need not be this process's (a cluster
        # joined with --address starts them elsewhere): every path they are given is absolute
        stream, out = stream.absolute(), out.absolute()
        self.spec, self.stream, self.out = spec, stream, out
        self.skip_bad, self.show_progress, self.log = skip_bad, progress, log
        self.work = Workdir(workdir_of(out))
        self.output = output_for(out, self.work.root, parts)
        self.checkpoints = Checkpointer(
            self.work, stream, identity=spec.identity_hash(), layout=self.output.layout
        )
        self.pool = WorkerPool(spec, partitions, self.say)
        self.driver_log = RequestLog()  # the driver's own model calls (soft identity)
        self.cache: ResponseCache | None = None  # the driver's response cache, once running
        # the write path's driver side (soft identity) and its graph, once running
        self.write_path: WritePath | None = None
        self.graph = ProvenanceGraph()
        self._since_checkpoint = 0  # events merged since the last checkpoint
        self._restored: bytes | None = None  # the checkpoint resumed from, until the workers have it
        # every event id read so far with its row (ids are unique), the older ones in runs on disk
        self.ids = SeenIds(self.work.root / "seen", in_memory=spec.ids_in_memory)
        self._routed_to = Position()  # where the last batch routed ends
        self._unsent: FactRun | None = None  # batches of fact rows only that the partitions have not seen

    def say(self, text: str) -> None:
        print(f"[pmem ingest] {text}", file=self.log, flush=True)

    # ------------------------------------------------------------------ set-up

    def already_complete(self) -> IngestReport | None:
        """The finished ingest's report when ``out`` is its output and the stream has not grown since."""
        done = self.checkpoints.finished(self.output.digest)
        if done is None:
            return None
        self.say(f"already complete: {self.out} holds this stream, which has not grown; nothing to do")
        return IngestReport(**done)

    def execute(self) -> IngestReport:
        """Resume or start, run to the end of the stream, save; the models are stopped in any case."""
        t_start = time.monotonic()
        reset_peak_rss()  # the report's driver peak is this attempt's, even in a long-lived process
        self.work.create()
        resumed = self.checkpoints.resume()
        position = Position(0, 0)
        if resumed is not None:
            position = resumed.position
            self.report.go_on_from(resumed.report)
            self.work.drop_rejects_from(position.row + 1)
            for names, rows in self.work.ids_until(position.row):
                self.ids.first_rows(names, rows)  # the checkpoint's rows: each id once
            self.output.resume(resumed.output)
            self._restored = resumed.state  # the driver holds it only until the workers have it
            self.say(
                f"resuming at row {position.row + 1:,} ({self.report.events:,} events in "
                f"{self.checkpoints.last_checkpoint[0].name})"
            )
        self.report.attempts = self.checkpoints.attempt
        del resumed

        hosted = self.pool.host_models()  # outside the event loop: the pools start their own
        try:
            asyncio.run(self._run(hosted, position))
        except Exception as exc:
            # a worker's failure (a model call that failed for good) arrives wrapped by Ray: raise the
            # worker's own exception, which names the call; the last checkpoint stays resumable
            cause = getattr(exc, "as_instanceof_cause", None)
            raise (cause() if callable(cause) else exc) from None
        finally:
            self.pool.stop()
            if self.cache is not None:
                self.cache.close()  # the last connection: the cache is one file again (no -wal)
            self.ids.close()  # its runs are this attempt's scratch
        return self._finish(time.monotonic() - t_start)

    async def _run(self, hosted: dict[str, Any], position: Position) -> None:
        cache = str(self.work.cache_path) if self.spec.cache else None
        self.cache = open_ingest_cache(cache)  # the driver's own calls: soft identity
        agent = build_models(
            self.spec.agent, hosted, self.cache, self.driver_log, f"agent:{self.spec.agent.model_id}"
        )
        embedder = build_models(self.spec.embedder, hosted, self.cache, self.driver_log, "embedder")
        self.write_path = self.spec.write_path(agent, embedder)  # the driver's part of it: soft identity
        state, self._restored = self._restored, None
        if state is not None:
            self.write_path.adopt_graph(ProvenanceGraph.from_bytes(state))
            await self.write_path.restore_key_vectors()
        self.graph = self.write_path.graph
        self.pool.start(hosted, cache)
        await self.output.open(self.pool.workers, self.graph, state)
        del state  # the graph and the workers' copies are what the run goes on from
        await self._loop(position)
        t = time.monotonic()
        self.report.graph, written = await self.output.build(self.report.events)
        self.report.stage_s["build"] += time.monotonic() - t
        self._count(written)
        rss = await self.pool.peak_rss_mb()
        self.report.peak_rss_mb = {"driver": peak_rss_mb(), **{f"worker{i}": m for i, m in enumerate(rss)}}

    def _writer(self) -> WritePath:
        if self.write_path is None:
            msg = "the ingest is not running"
            raise RuntimeError(msg)
        return self.write_path

    # ------------------------------------------------------------------ the loop

    def _batches(self, position: Position) -> Iterator[StreamBatch | StreamError]:
        """The stream's batches; a bad row ends it with its error (after the batches before it)."""
        try:
            yield from read_stream(
                self.stream,
                start=position,
                batch_rows=self.spec.batch_events,
                skip_bad=self.skip_bad,
                ids=self.ids,
                fact_batch_rows=self.spec.fact_batch_events,
            )
        except StreamError as exc:
            yield exc

    async def _loop(self, position: Position) -> None:
        """Batches in flight: batches b+1 .. b+EXTRACT_AHEAD are extracted and batch b routed while
        batch b-1 commits; a batch is merged (and checkpointed) in order once its commits are back.
        Extracting more than one batch ahead keeps the workers busy while the driver routes and
        merges (on the driver's cores, the sequential part)."""
        total = count_rows(self.stream) if self.show_progress else None  # JSONL: a pass over the file
        bar = Progress(total, position.row, self.show_progress, self.log)
        stage = self.report.stage_s
        self._since_checkpoint = 0
        error: StreamError | None = None
        batches = self._batches(position)
        ahead: deque[tuple[StreamBatch | StreamError, int, list[Any]]] = deque()
        next_first = self.report.events
        exhausted = False

        def extract_ahead(extra: int) -> None:
            """Read and send for extraction until ``extra`` batches wait behind the current one."""
            nonlocal next_first, exhausted
            while not exhausted and len(ahead) <= extra:
                t = time.monotonic()
                item = next(batches, None)
                stage["read"] += time.monotonic() - t
                if item is None:
                    exhausted = True
                    return
                if isinstance(item, StreamError):  # the stream ends with it
                    exhausted = True
                    ahead.append((item, next_first, []))
                    return
                ahead.append((item, next_first, self.pool.extract(item, next_first)))
                next_first += item.events.num_rows

        committing: _InFlight | None = None
        self._routed_to, self._unsent = position, None  # the workers hold everything before position
        try:
            extract_ahead(0)
            while ahead:
                current, first, pending = ahead.popleft()
                if isinstance(current, StreamError):
                    error = current
                    break
                extract_ahead(EXTRACT_AHEAD - 1)
                routed = await self._route(current, first, pending)
                if committing is not None:
                    position = await self._merge_committed(committing, bar)
                committing = routed
            if committing is not None:
                position = await self._merge_committed(committing, bar)
                committing = None
        finally:
            bar.close()
        await self._checkpoint(position)
        if error is not None:
            raise error

    async def _route(self, batch: StreamBatch, first: int, extract_refs: list[Any]) -> _InFlight:
        """Wait for a batch's extraction, route its keys in arrival order, send each partition its facts
        and the fact rows of its keys."""
        stage = self.report.stage_s
        ev = batch.events
        is_fact = is_fact_row(ev)
        fact_rows = int(is_fact.sum())
        workers = len(self.pool.workers)
        items: list[list[Any]] = [[] for _ in range(workers)]
        valid_times: list[str | None] | None = None
        n_facts = fact_rows
        no_fact: list[dict[str, Any]] = []
        if fact_rows < ev.num_rows:  # text rows: their extraction, then their keys' identity
            t = time.monotonic()
            extracted = [r for part in await asyncio.gather(*extract_refs) for r in part]
            stage["extract"] += time.monotonic() - t
            t = time.monotonic()
            n_facts += await self._route_text_rows(ev, first, is_fact, extracted, items, no_fact)
            valid_times = _column(ev, "valid_time")  # a fact row's own; a text row's as extracted
            for i, (_, _, valid_time) in zip(np.flatnonzero(~is_fact).tolist(), extracted, strict=True):
                valid_times[i] = valid_time
            stage["route"] += time.monotonic() - t
        t = time.monotonic()
        start, self._routed_to = self._routed_to, batch.end
        refs: list[Any] = []
        waits: list[Any] = []
        if valid_times is None:  # fact rows only: the partitions read them when they next need them
            self._hold_back(batch, start, first)
        else:
            if self._unsent is not None:
                waits = self.pool.catch_up(self._unsent)
                self._unsent = None
            facts = partition_facts(ev, first, workers)
            for i in range(workers):
                if items[i] or facts[i] is not None:
                    refs.append(self.pool.commit(i, items[i], facts[i]))
        stage["route"] += time.monotonic() - t
        return _InFlight(batch, first, refs, waits, n_facts, valid_times, no_fact)

    def _hold_back(self, batch: StreamBatch, start: Position, first: int) -> None:
        """Add a batch of fact rows only (after ``start``, its first event ``first``) to the run the
        partitions have not seen."""
        dropped = tuple(_column(batch.rejects, "row"))
        run = self._unsent
        if run is None:
            # the workers read the stream: by its absolute path, whatever their working directory
            self._unsent = FactRun(str(self.stream), start, batch.end.row, first, dropped)
        else:
            self._unsent = dataclasses.replace(run, end_row=batch.end.row, dropped=run.dropped + dropped)

    async def _route_text_rows(
        self,
        ev: pa.RecordBatch,
        first: int,
        is_fact: np.ndarray[Any, np.dtype[np.bool_]],
        extracted: list[Any],
        items: list[list[Any]],
        no_fact: list[dict[str, Any]],
    ) -> int:
        """Route the extracted facts of the text rows in arrival order into each partition's ``items``;
        how many facts there were. The rows that gave none are added to ``no_fact`` (the first
        :data:`NO_FACT_EXAMPLES` of them with their text and the extraction's error)."""
        path = self._writer()
        text_rows = np.flatnonzero(~is_fact).tolist()
        taken = ev.take(pa.array(text_rows, pa.int64()))
        rows = _column(taken, "row")
        lines = _unit_texts(_column(taken, "text"), _column(taken, "time"))
        routed_items: list[Any] = []
        embedded = await self._embed_candidates(extracted, rows[0] if rows else 0)
        identity = path.key_vectors_needed()
        canonical = self.graph.registry.canonical
        texts = _column(taken, "text")
        for j, (i, (facts, error, valid_time)) in enumerate(zip(text_rows, extracted, strict=True)):
            if not facts:
                # counted when the batch is merged: a checkpoint's report holds the rows it holds
                quote = texts[j] if len(texts[j]) <= EXAMPLE_CHARS else texts[j][: EXAMPLE_CHARS - 3] + "..."
                no_fact.append({"row": rows[j], "text": quote, "reason": error})
                continue
            # most rows name keys routed before: their canonical keys are what routing would return,
            # without a model call, so only rows with a new key go through it
            routed = [canonical(f[0]) for f in facts] if identity else [f[0] for f in facts]
            if None in routed:
                with for_row(rows[j]):
                    keys = await path.route_keys([f[0] for f in facts], embedded)
            else:
                keys = cast("list[str]", routed)
            for fidx, ((fact_key, value, status, event), key) in enumerate(zip(facts, keys, strict=True)):
                routed_items.append(
                    RoutedFact(
                        first + i, rows[j], fidx, key, value, status, fact_key, event, lines[j], valid_time
                    )
                )
        owners = partitions_of(
            pa.array([item.key for item in routed_items], pa.string()), len(self.pool.workers)
        )
        for item, owner in zip(routed_items, owners.tolist(), strict=True):
            items[owner].append(item)
        return len(routed_items)

    async def _merge_committed(self, done: _InFlight, bar: Progress) -> Position:
        """Merge a committed batch into the graph, write its side files, checkpoint when due."""
        stage = self.report.stage_s
        batch = done.batch
        has_text = done.valid_times is not None
        t = time.monotonic()
        await asyncio.gather(*done.waits)
        parts = await asyncio.gather(*done.commits)
        # only text rows made model calls (extraction, annotation) to drain
        drained = await self.pool.drain() if has_text else []
        stage["commit"] += time.monotonic() - t

        t = time.monotonic()
        # the batch's write log: its rows' evidence, each followed by the operations applied for it
        seq = self.output.next_seq()
        if done.valid_times is None:
            log = fact_log(batch.events, done.first, seq)
            of_fact_rows = None  # every operation is a fact row's
        else:
            operations = [a for part in parts for a in part]
            operations += fact_row_operations(batch.events, done.first)
            operations.sort(key=lambda a: (a[0], a[1]))
            log = batch_log(batch.events, done.first, operations, done.valid_times, seq)
            of_fact_rows = np.fromiter((a[1] == FACT_ROW for a in operations), np.bool_, len(operations))
        self._count(await self.output.write(log, of_fact_rows))
        if self.cache is not None and has_text:
            self.cache.flush()  # the driver's calls about to be logged are in the cache first
        # request rows as Arrow: the workers convert theirs (in parallel, cheap to ship), the driver
        # only concatenates and counts them, column-wise
        requests = pa.concat_tables(
            [records_to_table(self.driver_log.drain()), *(d["requests"] for d in drained)]
        )
        for d in drained:
            self.report.refused += len(d["refused"])
        self.report.count_calls(requests)
        self._write_side_files(batch, requests)
        self.report.facts += done.facts
        self.report.no_fact_rows += len(done.no_fact)
        room = NO_FACT_EXAMPLES - len(self.report.no_fact_examples)
        self.report.no_fact_examples += done.no_fact[: max(room, 0)]
        self.report.events += batch.events.num_rows
        self.report.rejects += batch.rejects.num_rows
        stage["merge"] += time.monotonic() - t
        bar.update(batch.end.row - bar.done, done.facts)
        self._since_checkpoint += batch.events.num_rows
        due = self._since_checkpoint >= self.spec.checkpoint_every
        if due and self.checkpoints.affordable(self.graph):
            await self._checkpoint(batch.end)
            self._since_checkpoint = 0
        return batch.end

    async def _embed_candidates(self, extracted: list[Any], row: int) -> dict[str, Any]:
        """One embedding call for the batch's candidate keys the registry does not know yet."""
        path = self._writer()
        if not path.key_vectors_needed():
            return {}
        registry = self.graph.registry
        new = list(
            dict.fromkeys(
                f[0] for facts, _, _ in extracted for f in facts if registry.canonical(f[0]) is None
            )
        )
        if not new:
            return {}
        with for_row(row):
            vectors = await path.writer.embed(new)
        # one sparse product scores them all against the keys registered so far; routing in arrival
        # order then scores each against the keys registered since (the same decisions, faster)
        registry.prescore(new, vectors)
        return dict(zip(new, vectors, strict=True))

    def _write_side_files(self, batch: StreamBatch, requests: pa.Table) -> None:
        first_row = int(batch.events.column("row")[0].as_py()) if batch.events.num_rows else batch.end.row
        if requests.num_rows:
            self.work.write_requests(first_row, self.checkpoints.attempt, requests)
        if batch.rejects.num_rows:
            rejected_first = int(batch.rejects.column("row")[0].as_py())
            self.work.write_rejects(min(first_row, rejected_first), pa.Table.from_batches([batch.rejects]))
        ids = batch.events.select(["id", "row"]).filter(pc.is_valid(batch.events.column("id")))
        if ids.num_rows:
            self.work.write_ids(first_row, pa.Table.from_batches([ids]))

    def _count(self, written: Written) -> None:
        self.report.fact_rows += written.fact_rows
        self.report.refused += written.refused

    # ------------------------------------------------------------------ durability

    async def _checkpoint(self, position: Position) -> None:
        t = time.monotonic()
        self._count(await self.output.settle())
        took = self.checkpoints.save(self.graph, events=self.report.events, since=t)
        self.report.stage_s["checkpoint"] += took
        self.checkpoints.commit(position, self.report.to_dict(), self.output.saved())

    def _finish(self, wall_s: float) -> IngestReport:
        """Publish the state, then mark the manifest done (a kill in between leaves a resumable ingest)."""
        # the loop ends with a checkpoint of the finished graph: a single state file is that file (its
        # bytes are not held in memory, which at ten million events is gigabytes)
        checkpoint, sha256 = self.checkpoints.last_checkpoint
        self.report.state_sha256, self.report.state_bytes = self.output.publish(checkpoint, sha256)
        self.report.wall_s = round(wall_s, 3)
        self.report.stage_s = {k: round(v, 3) for k, v in self.report.stage_s.items()}
        self.checkpoints.finish(self.report.to_dict(), self.output.saved(), self.report.state_sha256)
        self.work.write_report(self.report.to_dict())
        return self.report


def _unit_texts(texts: list[str], times: list[str | None]) -> list[str]:
    """Each row's unit text, as the write path renders a one-event unit."""

    return [event_line(Event(0, text, time=t)) for text, t in zip(texts, times, strict=True)]
