"""Where an ingest writes its merged batches: one state file, or a sharded state's parts.

The driver merges each batch into one write log (its rows' evidence, each followed by the operations
applied for it) and hands it to its :class:`Output`:

- :class:`StateFile` applies it to the driver's graph, which each checkpoint saves and whose last
  checkpoint becomes ``out``;
- :class:`Shards` (``--shards``) splits it by key owner and sends each piece to the worker owning those
  keys, which appends it to its part's log; the driver's graph keeps the identity registry only, and the
  finished state is a directory of parts (:mod:`pmem.graph.shards`), each built from its log at the end.

Both count the fact rows written and those the graph refused (a failed precondition) as
:class:`Written`; a sharded output learns of the refused ones when its parts are built.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow.compute as pc

from pmem._atomic import file_sha256
from pmem.graph import StateFileError, is_sharded
from pmem.graph.seams import apply_log, split_log
from pmem.graph.shards import REGISTRY, index_digest, part_name, write_index
from pmem.ingest._parts import owned_parts
from pmem.ingest._workdir import publish_directory, publish_state

if TYPE_CHECKING:
    import pyarrow as pa

    from pmem.graph import ProvenanceGraph


@dataclass(frozen=True)
class Written:
    """Fact rows whose operation was written, and how many of them the graph refused."""

    fact_rows: int = 0
    refused: int = 0

    def __add__(self, other: Written) -> Written:
        return Written(self.fact_rows + other.fact_rows, self.refused + other.refused)


class Output(Protocol):
    """An ingest's output: opened on the workers, written batch by batch, settled before each checkpoint,
    built and published at the end."""

    @property
    def layout(self) -> int | None:
        """The partitions of a sharded output, None for one state file (a resumed ingest must match)."""

    def resume(self, saved: dict[str, Any] | None) -> None:
        """Go on from the manifest's part for this output (None: a fresh start)."""

    async def open(self, workers: list[Any], graph: ProvenanceGraph, state: bytes | None) -> None:
        """Give the ``workers`` what they go on from; ``graph`` is the driver's, restored from ``state``
        (the checkpoint, None on a fresh start)."""

    def next_seq(self) -> int:
        """The arrival seq of the next write log's first row."""

    async def write(self, log: pa.Table, of_fact_rows: np.ndarray[Any, np.dtype[np.bool_]] | None) -> Written:
        """Write one batch's ``log``; ``of_fact_rows``: which of its operations are fact rows' (None:
        all). What is known written so far and not yet counted."""

    async def settle(self) -> Written:
        """Everything written made durable for a checkpoint; what was not yet counted."""

    def saved(self) -> dict[str, Any] | None:
        """The output's part of the manifest (None: nothing of its own)."""

    async def build(self, events: int) -> tuple[dict[str, int], Written]:
        """The finished output of ``events`` events, ready to publish: its graph's statistics, and what
        was written and not yet counted."""

    def publish(self, checkpoint: Path, sha256: str) -> tuple[str, int]:
        """Make the built output ``out`` (``checkpoint``: the last one, whose sha256 is given): its
        digest and its bytes on disk."""

    def digest(self) -> str | None:
        """The digest of what ``out`` holds now (None: nothing this output could have written)."""


def output_for(out: Path, work_root: Path, parts: int | None) -> Output:
    """The output an ingest to ``out`` writes through (``work_root``: its working folder): a sharded
    state of ``parts`` parts, or one state file (None)."""
    return StateFile(out) if parts is None else Shards(out, work_root, parts)


class StateFile:
    """One state file: the driver's graph is the state; its last checkpoint becomes ``out``."""

    layout = None

    def __init__(self, out: Path) -> None:
        self._out = out
        self._graph: ProvenanceGraph | None = None  # the driver's graph, once opened

    def resume(self, saved: dict[str, Any] | None) -> None:
        """A single state file has nothing of its own in the manifest: the checkpoint is the state."""

    async def open(self, workers: list[Any], graph: ProvenanceGraph, state: bytes | None) -> None:
        import ray

        self._graph = graph
        state_ref = ray.put(state)  # every worker goes on from the checkpoint's graph
        await asyncio.gather(*(w.restore.remote(state_ref) for w in workers))
        del state_ref

    def next_seq(self) -> int:
        return self._opened().seq + 1

    async def write(self, log: pa.Table, of_fact_rows: np.ndarray[Any, np.dtype[np.bool_]] | None) -> Written:
        applied = apply_log(self._opened(), log)
        fact_applied = applied if of_fact_rows is None else applied[of_fact_rows]
        # a fact row whose operation the graph did not apply (a failed precondition) is a refused write
        return Written(len(fact_applied), len(fact_applied) - int(np.count_nonzero(fact_applied)))

    async def settle(self) -> Written:
        return Written()  # applied as written

    def saved(self) -> dict[str, Any] | None:
        return None

    async def build(self, events: int) -> tuple[dict[str, int], Written]:
        return self._opened().stats(), Written()  # the last checkpoint's graph: it is the state

    def publish(self, checkpoint: Path, sha256: str) -> tuple[str, int]:
        publish_state(checkpoint, self._out, sha256)
        return sha256, self._out.stat().st_size

    def digest(self) -> str | None:
        return file_sha256(self._out) if self._out.is_file() else None

    def _opened(self) -> ProvenanceGraph:
        if self._graph is None:
            msg = "the output is not open"
            raise RuntimeError(msg)
        return self._graph


class Shards:
    """A sharded state: its log split by key owner into ``parts``, each appended to by the worker that
    commits its keys (worker ``w`` of ``W`` writes the parts ``p % W == w``: :mod:`pmem.ingest._parts`)
    and built at the end; the driver never holds the graph, only the identity registry (its
    checkpoints' graph)."""

    def __init__(self, out: Path, work_root: Path, parts: int) -> None:
        self._out = out
        self._work_root = work_root
        self._parts = parts
        self._workers: list[Any] = []
        self._graph: ProvenanceGraph | None = None  # the driver's: the registry
        # the last arrival seq written to the parts' logs, and each part's sealed log segments
        # ([name, digest], in order): a checkpoint names them
        self._seq = 0
        self._segments: list[list[list[str]]] = [[] for _ in range(parts)]
        self._appends_sent: list[int] = []  # per worker, the appends sent to it (they run in this order)
        self._appending: deque[list[Any]] = deque()  # the appends sent and not yet answered, per batch
        self._built: Path | None = None  # the state being built before publishing

    @property
    def layout(self) -> int:
        return self._parts

    def resume(self, saved: dict[str, Any] | None) -> None:
        if saved is not None:
            self._seq = int(saved["seq"])
            self._segments = [[list(s) for s in part] for part in saved["segments"]]

    async def open(self, workers: list[Any], graph: ProvenanceGraph, state: bytes | None) -> None:
        # each worker goes on from its parts' logs (the checkpoint holds the registry)
        self._workers, self._graph = workers, graph
        self._appends_sent = [0] * len(workers)
        opened = []
        for w, worker in enumerate(workers):
            mine = owned_parts(w, len(workers), self._parts)
            folders = {p: str(self._part_folder(p)) for p in mine}
            kept = {p: [(name, digest) for name, digest in self._segments[p]] for p in mine}
            opened.append(worker.open_parts.remote(folders, kept, state is not None))
        await asyncio.gather(*opened)

    def _part_folder(self, index: int) -> Path:
        """Where part ``index`` writes its log segments while the ingest runs."""
        return self._work_root / "shards" / part_name(index)

    def next_seq(self) -> int:
        return self._seq + 1

    async def write(self, log: pa.Table, of_fact_rows: np.ndarray[Any, np.dtype[np.bool_]] | None) -> Written:
        """Send the ``log`` to the parts' workers, split by key owner, without holding it: at most one
        earlier batch's appends are still unanswered when this returns. Whether a write was refused is
        known when the parts are built (:meth:`build` counts them)."""
        ops = pc.is_valid(log.column("op")).to_numpy(zero_copy_only=False)
        op_seqs = log.column("seq").to_numpy()[ops]
        # the text rows' operations: a part counts the refused writes of the others (fact rows')
        text_ops = None if of_fact_rows is None else op_seqs[~of_fact_rows]
        self._seq += log.num_rows
        workers = len(self._workers)
        sends: list[list[Any]] = [[] for _ in range(workers)]
        for p, piece in enumerate(split_log(log, self._parts)):
            if piece.num_rows:
                mine = None
                if text_ops is not None and len(text_ops):
                    mine = np.intersect1d(piece.column("seq").to_numpy(), text_ops)
                sends[p % workers].append((p, piece, mine))
        refs = []
        for w, pieces in enumerate(sends):
            if pieces:
                self._appends_sent[w] += 1
                refs.append(self._workers[w].append.remote(self._appends_sent[w], pieces))
        self._appending.append(refs)
        while len(self._appending) > 1:
            await asyncio.gather(*self._appending.popleft())
        return Written(len(op_seqs) if of_fact_rows is None else int(np.count_nonzero(of_fact_rows)))

    async def settle(self) -> Written:
        """Every append answered, then each part's open log segment sealed (a checkpoint names them)."""
        while self._appending:
            await asyncio.gather(*self._appending.popleft())
        sealed = await asyncio.gather(*(w.seal.remote() for w in self._workers))
        for part, name, digest in (s for worker in sealed for s in worker):
            self._segments[part].append([name, digest])
        return Written()

    def saved(self) -> dict[str, Any]:
        return {"partitions": self._parts, "seq": self._seq, "segments": self._segments}

    async def build(self, events: int) -> tuple[dict[str, int], Written]:
        """The finished sharded state, in a fresh folder beside ``out``: the registry's state, each
        part (its worker builds its parts one at a time) and the index naming every file's digest; the
        fact rows' writes the parts refused."""
        assert self._graph is not None
        for stale in self._out.parent.glob(f".{self._out.name}.*.tmp"):  # a build a kill interrupted
            shutil.rmtree(stale, ignore_errors=True)
        root = self._out.with_name(f".{self._out.name}.{secrets.token_hex(6)}.tmp")
        root.mkdir()
        self._graph.save(root / REGISTRY, layout="directory")
        parts = [
            p
            for worker in await asyncio.gather(*(w.write_parts.remote(str(root)) for w in self._workers))
            for p in worker
        ]
        stats = {name: sum(p.stats[name] for p in parts) for name in parts[0].stats}
        stats["evidence"] = events  # each part holds the evidence its keys cite: one per row
        digests = {name: digest for p in parts for name, digest in p.digests.items()}
        write_index(root, self._parts, self._seq, stats, digests)
        self._built = root
        return stats, Written(refused=sum(p.refused for p in parts))

    def publish(self, checkpoint: Path, sha256: str) -> tuple[str, int]:
        if self._built is None:
            msg = "the sharded state is not built"
            raise RuntimeError(msg)
        digest = index_digest(self._built)
        publish_directory(self._built, self._out)
        return digest, sum(p.stat().st_size for p in self._out.rglob("*") if p.is_file())

    def digest(self) -> str | None:
        try:
            return index_digest(self._out) if is_sharded(self._out) else None
        except StateFileError:
            return None
