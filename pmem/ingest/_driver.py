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
naming it are written atomically, unless writing it would take more than :data:`CHECKPOINT_SHARE` of
the time since the last one (a fast stream over a large graph: checkpoints would otherwise dominate it;
the end of the stream is always checkpointed); a re-run of the same command resumes from the last
manifest, and model calls made after it are answered by the response cache (see
:mod:`pmem.ingest._workdir`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import sys
import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem._atomic import atomic_write_bytes, file_sha256
from pmem._lock import hold_exclusive
from pmem.bench import Event
from pmem.graph import ProvenanceGraph, StateFileError, apply_log, is_sharded
from pmem.graph.shards import REGISTRY, index_digest, part_name, split_log, write_index
from pmem.ingest._calls import build_models, for_row, open_ingest_cache
from pmem.ingest._merge import FACT_ROW, batch_log, fact_log, fact_row_operations
from pmem.ingest._spec import IngestSpec, load_ingest_config
from pmem.ingest._stream import (
    Position,
    StreamBatch,
    StreamError,
    check_format,
    count_rows,
    is_fact_row,
    read_stream,
    row_word,
)
from pmem.ingest._workdir import (
    ResumeError,
    Workdir,
    publish_directory,
    publish_state,
    stream_check,
    workdir_of,
)
from pmem.ingest._worker import (
    FactRun,
    IngestWorker,
    commit_item,
    extraction_rows,
    partition_facts,
    partitions_of,
    peak_rss_mb,
    reset_peak_rss,
)
from pmem.memory.writepath import event_line, no_fact_reason
from pmem.models import HOSTED_BACKENDS, RequestLog, records_to_table
from pmem.runner import HostedModels, connect, embedded

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pmem.graph import ProvenanceGraph
    from pmem.models import ResponseCache

#: The driver-side stages whose wall time the report gives (extract and commit: waiting on workers).
STAGES = ("read", "extract", "route", "commit", "merge", "checkpoint")
#: The most of the wall time checkpoints may take: a due checkpoint waits while writing it would take
#: more than this share of the time since the last one ended (its cost predicted from the last one's,
#: in proportion to the events in the graph: a checkpoint writes the whole graph).
CHECKPOINT_SHARE = 0.05
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


@dataclass
class IngestReport:
    """What an ingest did: counts, model use, and where the time went."""

    stream: str
    out: str
    partitions: int
    events: int = 0
    rejects: int = 0
    facts: int = 0  # extracted facts and fact rows
    fact_rows: int = 0  # rows that were facts already: no extraction
    refused: int = 0
    #: text rows whose extraction gave no fact (kept as evidence, nothing written), and the first few
    no_fact_rows: int = 0
    no_fact_examples: list[dict[str, Any]] = field(default_factory=list)
    graph: dict[str, int] = field(default_factory=dict)
    calls: dict[str, dict[str, int]] = field(default_factory=dict)
    stage_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    wall_s: float = 0.0
    resumed_from: int = 0
    attempts: int = 1
    state_bytes: int = 0
    state_sha256: str = ""
    #: peak resident memory (MiB) of the driver and of each worker, this attempt
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The report as a person reads it."""
        ops = {k[3:]: v for k, v in self.graph.items() if k.startswith("op_") and v}
        calls = sum(c["calls"] for c in self.calls.values())
        cached = sum(c["cached"] for c in self.calls.values())
        tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for c in self.calls.values())
        rate = self.events / self.wall_s if self.wall_s else 0.0
        out = [
            f"ingested {self.events:,} events ({self.rejects:,} rejected) into {self.out} "
            f"({self.state_bytes:,} bytes) with {self.partitions} partition(s) in {self.wall_s:.1f} s "
            f"({rate:,.0f} events/s)",
            f"facts {self.facts:,} ({self.fact_rows:,} fact rows); keys {self.graph.get('keys', 0):,}; "
            f"cells {self.graph.get('cells', 0):,}; "
            f"operations {self.graph.get('operations', 0):,} "
            f"({', '.join(f'{k} {v:,}' for k, v in ops.items()) or 'none'}); refused writes {self.refused:,}",
            f"model calls {calls:,} ({cached:,} from the cache), tokens {tokens:,}: "
            + ", ".join(f"{p} {c['calls']:,}" for p, c in sorted(self.calls.items())),
            "driver wall time by stage: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.stage_s.items()),
        ]
        if self.no_fact_rows:
            out.insert(2, self.no_fact_line())
        if self.peak_rss_mb:
            out.append(
                "peak memory (MiB): " + ", ".join(f"{k} {v:,.0f}" for k, v in self.peak_rss_mb.items())
            )
        if self.resumed_from:
            out.append(f"resumed from event {self.resumed_from:,} (attempt {self.attempts})")
        return out

    def no_fact_line(self) -> str:
        """How many text rows gave no fact, the first few quoted, and why (what the agent reads).

        >>> r = IngestReport("s.jsonl", "s.arrow", 1, events=3, no_fact_rows=1, spec={"agent": {"backend": "x"}})
        >>> r.no_fact_examples.append({"row": 2, "text": "Bob left.", "reason": None})
        >>> print(r.no_fact_line())
        text rows that gave no fact: 1 of 3 (line 2 "Bob left."): the agent's replies held no fact (see ...)
        """

        word = row_word(Path(self.stream))
        quoted = "; ".join(
            f"{word} {e['row']} {json.dumps(e['text'], ensure_ascii=False)}"
            + (f" ({e['reason']})" if e.get("reason") else "")
            for e in self.no_fact_examples
        )
        more = "; ..." if self.no_fact_rows > len(self.no_fact_examples) else ""
        backend = str(self.spec.get("agent", {}).get("backend", ""))
        why = no_fact_reason(backend, f"{workdir_of(Path(self.out)) / 'requests'}/")
        text_rows = self.events - self.fact_rows
        return f"text rows that gave no fact: {self.no_fact_rows:,} of {text_rows:,} ({quoted}{more}): {why}"


def nothing_ingested(report: IngestReport, agent_backend: str) -> str | None:
    """Why an ingest of a non-empty stream holds no fact (None when it holds some, or the stream was
    empty): every row rejected, or the agent extracted nothing (the default agent reads only the
    benchmarks' sentence templates).

    >>> nothing_ingested(IngestReport("s.jsonl", "s.arrow", 1, events=3, facts=0), "heuristic")[:40]
    'extracted no fact from 3 events: the def'
    """
    if report.facts:
        return None
    if report.events == 0 and report.rejects:
        return f"every row of the stream was rejected ({report.rejects:,}; see {workdir_of(Path(report.out)) / 'rejects'})"
    if report.events == 0:
        return None

    why = no_fact_reason(agent_backend, "the state's .ingest/requests/")
    return f"extracted no fact from {report.events:,} events: {why}"


class _Progress:
    """A tqdm bar (events, events/s, facts/s, ETA) on a terminal; a line every ``interval`` s otherwise."""

    def __init__(
        self, total: int | None, initial: int, enabled: bool, stream: TextIO, interval: float = 10.0
    ) -> None:
        self.enabled, self.stream, self.interval = enabled, stream, interval
        self.total, self.done, self.facts = total, initial, 0
        self.t0 = self._last = time.monotonic()
        self.start = initial
        self._bar: Any = None
        if enabled and stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, initial=initial, unit="ev", file=stream, dynamic_ncols=True, desc="ingest"
            )

    def update(self, events: int, facts: int) -> None:
        self.done += events
        self.facts += facts
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        if self._bar is not None:
            self._bar.update(events)
            self._bar.set_postfix_str(f"facts/s={self.facts / elapsed:,.0f}", refresh=False)
            return
        now = time.monotonic()
        if self.enabled and now - self._last >= self.interval:
            self._last = now
            rate = (self.done - self.start) / elapsed
            eta = f", ETA {(self.total - self.done) / rate:,.0f} s" if self.total and rate else ""
            print(
                f"[pmem ingest] {self.done:,}/{self.total or '?'} events, {rate:,.0f} events/s, "
                f"{self.facts / elapsed:,.0f} facts/s{eta}",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


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
) -> IngestReport:
    """Build one P-Mem state at ``out`` from ``stream`` (JSONL, Parquet or Arrow; one event per row).

    Re-running the same call after an interruption resumes from the last checkpoint and ends in the
    same bytes; ``partitions`` changes the speed, never the bytes.

    With ``shards``, ``out`` is a sharded state (a directory, see ``pmem.graph.shards``): each worker
    writes the part of the keys it owns and the driver never holds the graph; ``ProvenanceGraph.load(out)``
    gives the graph sequential ingestion gives, byte for byte. ``partitions`` then fixes the parts: a
    resumed ingest must give the same.
    """
    spec = config if isinstance(config, IngestSpec) else load_ingest_config(config)
    if partitions < 1:
        msg = f"partitions must be at least 1, got {partitions}"
        raise ValueError(msg)
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
        job = _Ingest(spec, stream, out, partitions, skip_bad, progress, log or sys.stderr, shards)
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
    def __init__(
        self,
        spec: IngestSpec,
        stream: Path,
        out: Path,
        partitions: int,
        skip_bad: bool,
        progress: bool,
        log: TextIO,
        shards: bool = False,
    ) -> None:
        self.report = IngestReport(str(stream), str(out), partitions, spec=spec.public())
        # the workers are Ray actors whose working directory need not be this process's (a cluster
        # joined with --address starts them elsewhere): every path they are given is absolute
        stream, out = stream.absolute(), out.absolute()
        self.spec, self.stream, self.out, self.partitions = spec, stream, out, partitions
        self.sharded = shards
        self.skip_bad, self.show_progress, self.log = skip_bad, progress, log
        self.work = Workdir(workdir_of(out))
        self.calls: dict[str, dict[str, int]] = defaultdict(
            lambda: {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0}
        )
        self.driver_log = RequestLog()
        self.attempt = 1
        self.hosts: Any = None
        self._file_check: dict[str, Any] | None = None
        self.cache: ResponseCache | None = None
        self._since_checkpoint = 0
        self._restored: bytes | None = None  # the checkpoint resumed from, until the workers have it
        self.ids: dict[str, int] = {}  # every event id read so far -> its row (ids are unique)
        self._turns: list[int] = []  # per worker, the commit calls sent to it (they run in this order)
        self._appends_sent: list[int] = []  # per worker, the part appends sent to it (likewise)
        self._routed_to = Position()  # where the last batch routed ends
        self._unsent: FactRun | None = None  # batches of fact rows only that the partitions have not seen
        # when the last checkpoint ended, how long it took, and the events in the graph it wrote
        self._checkpointed = (0.0, 0.0, 0)
        # a sharded ingest (--shards): the last arrival seq written to the parts' logs, each part's
        # sealed log segments ([name, digest], in order), the appends sent and not yet answered (with
        # the seqs of their batch's fact-row operations), and the state being built before publishing
        self.seq = 0
        self.segments: list[list[list[str]]] = [[] for _ in range(partitions)]
        self._appending: deque[tuple[list[Any], np.ndarray[Any, np.dtype[np.int64]]]] = deque()
        self._built: Path | None = None

    def say(self, text: str) -> None:
        print(f"[pmem ingest] {text}", file=self.log, flush=True)

    # ------------------------------------------------------------------ set-up

    def _resume_point(self) -> tuple[dict[str, Any] | None, bytes | None]:
        doc = self.work.read_manifest()
        if doc is None:
            return None, None
        self._refuse_another_ingests(doc)
        return doc, self._read_checkpoint(doc)

    def _refuse_another_ingests(self, doc: dict[str, Any]) -> None:
        """A checkpoint of another stream or config is the user's to remove: one line saying so."""
        problems = []
        check = doc.get("stream_check") or {}
        position = Position(**doc["position"])
        if stream_check(self.stream, position.offset) != check:
            what = "the rows already ingested differ" if check.get("prefix") else "the stream file differs"
            problems.append(f"{what} (checkpoint of {doc.get('stream')})")
        if doc.get("spec") != self.spec.identity_hash():
            problems.append("the models or write options differ")
        layout = doc.get("shards", {}).get("partitions")
        if layout != (self.partitions if self.sharded else None):

            def said(n: int | None) -> str:
                return f"--shards with {n} partitions" if n else "no --shards"

            problems.append(
                f"the output layout differs ({said(layout)} then, {said(self.partitions if self.sharded else None)} now)"
            )
        if problems:
            msg = (
                f"{self.work.root} holds a checkpoint of another ingest: {'; '.join(problems)}. "
                f"Remove {self.work.root} (and {self.out}) to start over, or pass the same stream and config."
            )
            raise ResumeError(msg)

    def _read_checkpoint(self, doc: dict[str, Any]) -> bytes:
        """The manifest's checkpoint, checked against its sha256."""
        path = self.work.root / doc["checkpoint"]
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            msg = f"{self.work.manifest_path} names {path.name}, which is missing; remove {self.work.root} to start over"
            raise ResumeError(msg) from None
        if hashlib.sha256(data).hexdigest() != doc["checkpoint_sha256"]:
            msg = f"{path}: checksum does not match the manifest; remove {self.work.root} to start over"
            raise ResumeError(msg)
        return data

    def already_complete(self) -> IngestReport | None:
        """The finished ingest's report when ``out`` is its output and the stream has not grown since."""
        doc = self.work.read_manifest()
        if doc is None or not doc.get("done"):
            return None
        self._refuse_another_ingests(doc)  # another stream or config: its one-line error
        if not self._complete(doc):
            return None
        self.say(f"already complete: {self.out} holds this stream, which has not grown; nothing to do")
        return IngestReport(**doc["report"])

    def execute(self) -> IngestReport:
        """Resume or start, run to the end of the stream, save; the models are stopped in any case."""
        t_start = time.monotonic()
        reset_peak_rss()  # the report's driver peak is this attempt's, even in a long-lived process
        self.work.create()
        doc, state = self._resume_point()
        self.attempt = int(doc.get("attempts", 0)) + 1 if doc else 1
        position = Position(**doc["position"]) if doc else Position(0, 0)
        self.position = position
        if doc is not None:
            for k in ("events", "rejects", "facts", "fact_rows", "refused", "no_fact_rows"):
                setattr(self.report, k, int(doc["report"].get(k, 0)))
            self.report.no_fact_examples = list(doc["report"].get("no_fact_examples", []))
            for purpose, c in doc["report"]["calls"].items():
                self.calls[purpose] = dict(c)
            self.report.resumed_from = self.report.events
            self.work.drop_rejects_from(position.row + 1)
            self.ids = self.work.read_ids_until(position.row)
            self.last_checkpoint = (self.work.root / doc["checkpoint"], doc["checkpoint_sha256"])
            if self.sharded:
                self.seq = int(doc["shards"]["seq"])
                self.segments = [[list(s) for s in part] for part in doc["shards"]["segments"]]
            self.say(
                f"resuming at row {position.row + 1:,} ({self.report.events:,} events in {doc['checkpoint']})"
            )
        self.report.attempts = self.attempt

        hosted = self._host_models()  # outside the event loop: the pools start their own
        try:
            self._restored, state = state, None  # the driver holds it only until the workers have it
            asyncio.run(self._run(hosted, position))
        except Exception as exc:
            # a worker's failure (a model call that failed for good) arrives wrapped by Ray: raise the
            # worker's own exception, which names the call; the last checkpoint stays resumable
            cause = getattr(exc, "as_instanceof_cause", None)
            raise (cause() if callable(cause) else exc) from None
        finally:
            self._stop_models()
        return self._finish(time.monotonic() - t_start)

    async def _run(self, hosted: dict[str, Any], position: Position) -> None:
        import ray

        cache = str(self.work.cache_path) if self.spec.cache else None
        self.cache = open_ingest_cache(cache)  # the driver's own calls: soft identity
        agent = build_models(
            self.spec.agent, hosted, self.cache, self.driver_log, f"agent:{self.spec.agent.model_id}"
        )
        embedder = build_models(self.spec.embedder, hosted, self.cache, self.driver_log, "embedder")
        self.path = self.spec.write_path(agent, embedder)  # the driver's part of it: soft identity
        state, self._restored = self._restored, None
        if state is not None:
            graph = ProvenanceGraph.from_bytes(state)
            self.path.adopt_graph(graph)
            await self.path.restore_key_vectors()
        self.graph: ProvenanceGraph = self.path.graph
        self.workers = self._start_workers(hosted, cache)
        self._turns = [0] * len(self.workers)
        self._appends_sent = [0] * len(self.workers)
        if self.sharded:  # each worker goes on from its part's log (the checkpoint holds the registry)
            resumed = state is not None
            await asyncio.gather(
                *(
                    w.open_part.remote(
                        str(self._part_folder(i)), [tuple(s) for s in self.segments[i]], resumed
                    )
                    for i, w in enumerate(self.workers)
                )
            )
            del state
        else:
            state_ref = ray.put(state)
            await asyncio.gather(*(w.restore.remote(state_ref) for w in self.workers))
            del state, state_ref  # the graph and the workers' copies are what the run goes on from
        await self._loop(position)
        if self.sharded:
            await self._build_sharded_state()
        rss = await asyncio.gather(*(w.peak_rss_mb.remote() for w in self.workers))
        self.report.peak_rss_mb = {"driver": peak_rss_mb(), **{f"worker{i}": m for i, m in enumerate(rss)}}

    def _complete(self, doc: dict[str, Any]) -> bool:
        """The output is the manifest's and the stream holds nothing after the ingested rows."""
        if self.sharded:
            try:
                if not is_sharded(self.out) or index_digest(self.out) != doc.get("out_sha256"):
                    return False
            except StateFileError:
                return False
        elif not self.out.is_file() or file_sha256(self.out) != doc.get("out_sha256"):
            return False
        return bool(doc["stream_check"]["bytes"] == self.stream.stat().st_size)

    def _host_models(self) -> dict[str, Any]:

        specs = {f"agent:{self.spec.agent.model_id}": self.spec.agent, "embedder": self.spec.embedder}
        if not any(s.backend in HOSTED_BACKENDS for s in specs.values()):
            return {}
        self.hosts = HostedModels()
        self.say("starting model replicas")
        hosted = self.hosts.start(specs)
        # A row is not a conversation: no replica holds a prefix worth returning to, so each call goes
        # to the replica with the fewest calls in flight (a sweep pins a history to one replica instead).
        return {k: dataclasses.replace(h, routing="least-busy") for k, h in hosted.items()}

    def _stop_models(self) -> None:
        import ray

        for w in getattr(self, "workers", []):
            ray.kill(w)
        if self.hosts is not None:
            self.hosts.stop()

    def _start_workers(self, hosted: dict[str, Any], cache: str | None) -> list[Any]:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cpus = self.spec.worker_cpus
        if not cpus:
            total = ray.cluster_resources().get("CPU", 1.0)
            cpus = min(1.0, total / self.partitions)
        # the workers share the response cache file with the driver: they run on the driver's node
        node = ray.get_runtime_context().get_node_id()
        cls = ray.remote(IngestWorker)
        return [
            cls.options(
                num_cpus=cpus,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            ).remote(self.spec, hosted, cache, i)
            for i in range(self.partitions)
        ]

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

    def _extract(self, batch: StreamBatch, first: int) -> list[Any]:
        """Send a batch's text rows for extraction, split across every worker (none: no call)."""
        rows = extraction_rows(batch.events, first)
        n = len(self.workers)
        size = -(-len(rows) // n) if rows else 0
        return [
            self.workers[i].extract.remote(rows[i * size : (i + 1) * size])
            for i in range(n)
            if rows[i * size : (i + 1) * size]
        ]

    async def _loop(self, position: Position) -> None:
        """Batches in flight: batches b+1 .. b+EXTRACT_AHEAD are extracted and batch b routed while
        batch b-1 commits; a batch is merged (and checkpointed) in order once its commits are back.
        Extracting more than one batch ahead keeps the workers busy while the driver routes and
        merges (on the driver's cores, the sequential part)."""
        total = count_rows(self.stream) if self.show_progress else None  # JSONL: a pass over the file
        bar = _Progress(total, position.row, self.show_progress, self.log)
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
                ahead.append((item, next_first, self._extract(item, next_first)))
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
        items: list[list[Any]] = [[] for _ in self.workers]
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
                for i, worker in enumerate(self.workers):
                    self._turns[i] += 1
                    waits.append(worker.catch_up.remote(self._turns[i], self._unsent, len(self.workers)))
                self._unsent = None
            facts = partition_facts(ev, first, len(self.workers))
            for i, worker in enumerate(self.workers):
                if items[i] or facts[i] is not None:
                    self._turns[i] += 1
                    refs.append(worker.commit.remote(self._turns[i], items[i], facts[i]))
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
        text_rows = np.flatnonzero(~is_fact).tolist()
        taken = ev.take(pa.array(text_rows, pa.int64()))
        rows = _column(taken, "row")
        lines = _unit_texts(_column(taken, "text"), _column(taken, "time"))
        routed_items: list[Any] = []
        embedded = await self._embed_candidates(extracted, rows[0] if rows else 0)
        identity = self.path.key_vectors_needed()
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
                    keys = await self.path.route_keys([f[0] for f in facts], embedded)
            else:
                keys = cast("list[str]", routed)
            for fidx, ((fact_key, value, status, event), key) in enumerate(zip(facts, keys, strict=True)):
                routed_items.append(
                    commit_item(
                        first + i, rows[j], fidx, key, value, status, fact_key, event, lines[j], valid_time
                    )
                )
        owners = partitions_of(pa.array([item[3] for item in routed_items], pa.string()), len(self.workers))
        for item, owner in zip(routed_items, owners.tolist(), strict=True):
            items[owner].append(item)
        return len(routed_items)

    async def _merge_committed(self, done: _InFlight, bar: _Progress) -> Position:
        """Merge a committed batch into the graph, write its side files, checkpoint when due."""
        stage = self.report.stage_s
        batch = done.batch
        has_text = done.valid_times is not None
        t = time.monotonic()
        await asyncio.gather(*done.waits)
        parts = await asyncio.gather(*done.commits)
        # only text rows made model calls (extraction, annotation) to drain
        drained = await asyncio.gather(*(w.drain.remote() for w in self.workers)) if has_text else []
        stage["commit"] += time.monotonic() - t

        t = time.monotonic()
        # the batch's write log: its rows' evidence, each followed by the operations applied for it
        seq = (self.seq if self.sharded else self.graph.seq) + 1
        if done.valid_times is None:
            log = fact_log(batch.events, done.first, seq)
            of_fact_rows = None  # every operation is a fact row's
        else:
            operations = [a for part in parts for a in part]
            operations += fact_row_operations(batch.events, done.first)
            operations.sort(key=lambda a: (a[0], a[1]))
            log = batch_log(batch.events, done.first, operations, done.valid_times, seq)
            of_fact_rows = np.fromiter((a[1] == FACT_ROW for a in operations), np.bool_, len(operations))
        if self.sharded:
            await self._append_to_parts(log, of_fact_rows)
        else:
            applied = apply_log(self.graph, log)
            fact_applied = applied if of_fact_rows is None else applied[of_fact_rows]
            # a fact row whose operation the graph did not apply (a failed precondition) is a refused write
            self.report.refused += len(fact_applied) - int(np.count_nonzero(fact_applied))
            self.report.fact_rows += len(fact_applied)
        if self.cache is not None and has_text:
            self.cache.flush()  # the driver's calls about to be logged are in the cache first
        # request rows as Arrow: the workers convert theirs (in parallel, cheap to ship), the driver
        # only concatenates and counts them, column-wise
        requests = pa.concat_tables(
            [records_to_table(self.driver_log.drain()), *(d["requests"] for d in drained)]
        )
        for d in drained:
            self.report.refused += len(d["refused"])
        self._count_calls(requests)
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
        if self._since_checkpoint >= self.spec.checkpoint_every and self._checkpoint_affordable():
            await self._checkpoint(batch.end)
            self._since_checkpoint = 0
        return batch.end

    def _checkpoint_affordable(self) -> bool:
        """Whether checkpoints stay within CHECKPOINT_SHARE of the wall time if one is written now."""
        ended, took, events = self._checkpointed
        predicted = took * self.report.events / max(events, 1)
        return predicted <= CHECKPOINT_SHARE * (time.monotonic() - ended)

    async def _embed_candidates(self, extracted: list[Any], row: int) -> dict[str, Any]:
        """One embedding call for the batch's candidate keys the registry does not know yet."""
        if not self.path.key_vectors_needed():
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
            vectors = await self.path.writer.embed(new)
        # one sparse product scores them all against the keys registered so far; routing in arrival
        # order then scores each against the keys registered since (the same decisions, faster)
        registry.prescore(new, vectors)
        return dict(zip(new, vectors, strict=True))

    def _count_calls(self, requests: pa.Table) -> None:
        if not requests.num_rows:
            return
        counted = requests.select(["purpose", "cached", "prompt_tokens", "completion_tokens"])
        counted = counted.set_column(1, "cached", pc.cast(counted.column("cached"), pa.int64()))
        sums = counted.group_by("purpose").aggregate(
            [
                ("purpose", "count"),
                ("cached", "sum"),
                ("prompt_tokens", "sum"),
                ("completion_tokens", "sum"),
            ]
        )
        for row in sums.to_pylist():
            c = self.calls[row["purpose"]]
            c["calls"] += int(row["purpose_count"])
            for name in ("cached", "prompt_tokens", "completion_tokens"):
                c[name] += int(row[f"{name}_sum"] or 0)

    def _write_side_files(self, batch: StreamBatch, requests: pa.Table) -> None:
        first_row = int(batch.events.column("row")[0].as_py()) if batch.events.num_rows else batch.end.row
        if requests.num_rows:
            self.work.write_requests(first_row, self.attempt, requests)
        if batch.rejects.num_rows:
            rejected_first = int(batch.rejects.column("row")[0].as_py())
            self.work.write_rejects(min(first_row, rejected_first), pa.Table.from_batches([batch.rejects]))
        ids = batch.events.select(["id", "row"]).filter(pc.is_valid(batch.events.column("id")))
        if ids.num_rows:
            self.work.write_ids(first_row, pa.Table.from_batches([ids]))

    # ------------------------------------------------------------------ a sharded ingest

    def _part_folder(self, index: int) -> Path:
        """Where part ``index`` writes its log segments while the ingest runs."""
        return self.work.root / "shards" / part_name(index)

    async def _append_to_parts(
        self, log: pa.Table, of_fact_rows: np.ndarray[Any, np.dtype[np.bool_]] | None
    ) -> None:
        """Send a batch's write ``log`` to the parts, split by key owner, without holding it: at most one
        earlier batch's appends are still unanswered when this returns. ``of_fact_rows``: which of its
        operations are fact rows' (None: all)."""
        ops = pc.is_valid(log.column("op")).to_numpy(zero_copy_only=False)
        fact_seqs = log.column("seq").to_numpy()[ops]
        if of_fact_rows is not None:
            fact_seqs = fact_seqs[of_fact_rows]
        self.seq += log.num_rows
        pieces = split_log(log, len(self.workers))
        refs = []
        for i, (worker, piece) in enumerate(zip(self.workers, pieces, strict=True)):
            if piece.num_rows:
                self._appends_sent[i] += 1
                refs.append(worker.append.remote(self._appends_sent[i], piece))
        self._appending.append((refs, fact_seqs))
        while len(self._appending) > 1:
            await self._answered()

    async def _answered(self) -> None:
        """Wait for the oldest batch's appends: its fact rows whose operation a part did not apply are
        refused writes."""
        refs, fact_seqs = self._appending.popleft()
        refused = [s for unapplied in await asyncio.gather(*refs) for s in unapplied]
        self.report.refused += int(np.isin(fact_seqs, np.array(refused, np.int64)).sum())
        self.report.fact_rows += len(fact_seqs)

    async def _seal_parts(self) -> None:
        """Every append answered, then each part's open log segment sealed (a checkpoint names them)."""
        while self._appending:
            await self._answered()
        sealed = await asyncio.gather(*(w.seal.remote() for w in self.workers))
        for part, segment in zip(self.segments, sealed, strict=True):
            if segment is not None:
                part.append(list(segment))

    def _shards_manifest(self) -> dict[str, Any]:
        return {"partitions": self.partitions, "seq": self.seq, "segments": self.segments}

    async def _build_sharded_state(self) -> None:
        """The finished sharded state, in a fresh folder beside ``out`` (published by ``_finish``): the
        registry's state, each worker's part, and the index naming every file's digest."""
        import secrets
        import shutil

        for stale in self.out.parent.glob(f".{self.out.name}.*.tmp"):  # a build a kill interrupted
            shutil.rmtree(stale, ignore_errors=True)
        root = self.out.with_name(f".{self.out.name}.{secrets.token_hex(6)}.tmp")
        root.mkdir()
        self.graph.save(root / REGISTRY, layout="directory")
        parts = await asyncio.gather(*(w.write_part.remote(str(root)) for w in self.workers))
        stats = {name: sum(p[name] for p, _ in parts) for name in parts[0][0]}
        stats["evidence"] = self.report.events  # each part holds the evidence its keys cite: one per row
        digests = {name: digest for _, files in parts for name, digest in files.items()}
        write_index(root, self.partitions, self.seq, stats, digests)
        self.report.graph = stats
        self._built = root

    # ------------------------------------------------------------------ durability

    async def _checkpoint(self, position: Position) -> None:
        t = time.monotonic()
        if self.sharded:
            await self._seal_parts()
        path, sha256 = self.work.write_checkpoint(self.report.events, self.graph)
        self.report.calls = {k: dict(v) for k, v in sorted(self.calls.items())}
        ended = time.monotonic()
        self._checkpointed = (ended, ended - t, self.report.events)
        self.report.stage_s["checkpoint"] += ended - t
        self.position = position
        self.last_checkpoint = (path, sha256)
        self.work.write_manifest(self._manifest())
        self.work.drop_checkpoints_but(path)

    def _stream_check(self) -> dict[str, Any]:
        if self.position.offset > 0:  # JSONL: the ingested prefix, which grows
            return stream_check(self.stream, self.position.offset)
        if self._file_check is None:  # Parquet, Arrow: the whole file, hashed once
            self._file_check = stream_check(self.stream, 0)
        return self._file_check

    def _manifest(self, **extra: Any) -> dict[str, Any]:
        path, sha = self.last_checkpoint
        return {
            "stream": str(self.stream),
            "stream_check": self._stream_check(),
            "spec": self.spec.identity_hash(),
            "position": {"row": self.position.row, "offset": self.position.offset},
            "checkpoint": path.name,
            "checkpoint_sha256": sha,
            "attempts": self.attempt,
            "report": self.report.to_dict(),
            "done": False,
            **({"shards": self._shards_manifest()} if self.sharded else {}),
            **extra,
        }

    def _finish(self, wall_s: float) -> IngestReport:
        """Save the state, then mark the manifest done (a kill in between leaves a resumable ingest)."""
        import json

        # the loop ends with a checkpoint of the finished graph: the state is that file (its bytes are
        # not held in memory, which at ten million events is gigabytes)
        checkpoint, sha256 = self.last_checkpoint
        if self.sharded:
            assert self._built is not None
            sha256 = index_digest(self._built)
            publish_directory(self._built, self.out)
            self.report.state_bytes = sum(p.stat().st_size for p in self.out.rglob("*") if p.is_file())
        else:
            publish_state(checkpoint, self.out, sha256)
            self.report.graph = self.graph.stats()
            self.report.state_bytes = self.out.stat().st_size
        self.report.wall_s = round(wall_s, 3)
        self.report.calls = {k: dict(v) for k, v in sorted(self.calls.items())}
        self.report.stage_s = {k: round(v, 3) for k, v in self.report.stage_s.items()}
        self.report.state_sha256 = sha256
        self.work.write_manifest(self._manifest(done=True, out_sha256=self.report.state_sha256))
        atomic_write_bytes(
            self.work.root / "report.json", json.dumps(self.report.to_dict(), indent=2).encode()
        )
        return self.report


def _unit_texts(texts: list[str], times: list[str | None]) -> list[str]:
    """Each row's unit text, as the write path renders a one-event unit."""

    return [event_line(Event(0, text, time=t)) for text, t in zip(texts, times, strict=True)]
