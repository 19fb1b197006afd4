"""The parts of a sharded state a worker writes (``pmem ingest --shards``): logs while the ingest runs,
states at the end, one part at a time.

A sharded state's parts are not its workers: ``--parts`` may be any multiple of ``--partitions``, and
worker ``w`` writes the parts ``p`` with ``p % workers == w`` (a multiple, so that the keys of those parts
are exactly the keys whose writes the worker commits: :func:`~pmem.graph.partitions_of` takes the same
hash modulo either count).

While the ingest runs a part is its write log only: each batch's rows for the part are appended to the
part's open log segment, and nothing else is held. The part's graph is built at the end (:meth:`PartLogs.
build`), from its segments, saved, and dropped before the worker's next part is built: a worker's memory
is bounded by its largest part's graph, whatever the stream's length, and the user bounds that with the
number of parts.

Whether a write was refused (an operation whose precondition failed: ``refused`` in the report) is known
once the part's graph replays it, at the end. The report counts the refused writes of fact rows only
(a text row's refused writes are counted when its worker makes them), so a part keeps, beside each
segment, the seqs of its text rows' operations (``<segment>.text-ops``): none in a stream of fact rows
only.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pmem._atomic import atomic_write_parquet
from pmem.graph import ProvenanceGraph
from pmem.graph.seams import LogSegment, apply_log, localize, read_segment
from pmem.graph.shards import LOG, part_name
from pmem.ingest._memory import release_freed_memory

if TYPE_CHECKING:
    from numpy.typing import NDArray

#: The suffix of a segment's companion: the seqs of its text rows' operations.
TEXT_OPS = ".text-ops"

#: A sealed segment: (name, digest).
Sealed = tuple[str, str]


def owned_parts(worker: int, workers: int, parts: int) -> list[int]:
    """The parts worker ``worker`` of ``workers`` writes (``parts`` a multiple of ``workers``).

    >>> owned_parts(1, 2, 6)
    [1, 3, 5]
    """
    check_parts(parts, workers)
    return list(range(worker, parts, workers))


def check_parts(parts: int, workers: int) -> None:
    """Refuse a part count that is not a positive multiple of the workers'.

    >>> check_parts(4, 3)
    Traceback (most recent call last):
    ...
    ValueError: --parts 4 is not a multiple of --partitions 3 (each worker writes the parts of the keys it commits)
    """
    if parts < 1 or parts % workers:
        msg = (
            f"--parts {parts} is not a multiple of --partitions {workers} "
            "(each worker writes the parts of the keys it commits)"
        )
        raise ValueError(msg)


@dataclass
class _Part:
    """One part's log while the ingest runs."""

    folder: Path
    sealed: list[Sealed]  # its closed segments, in order
    segment: LogSegment | None = None  # the one being written
    text_ops: list[NDArray[np.int64]] = field(default_factory=list)  # of the open segment


@dataclass(frozen=True)
class BuiltPart:
    """A part written into the state: its index, its graph's stats, its segments' digests (by path from
    the state's root) and the fact rows' writes its graph refused."""

    index: int
    stats: dict[str, int]
    digests: dict[str, str]
    refused: int


class PartLogs:
    """The parts one worker writes, each a folder of log segments while the ingest runs.

    Args:
        folders: each part's log folder, by part index.
        kept: each part's segments the last checkpoint names (``(name, digest)``, in order); any other
            segment there was written after it and is removed, with any half-written one.

    Example:
        >>> import tempfile
        >>> from pmem.graph.seams import conform
        >>> root = Path(tempfile.mkdtemp())
        >>> logs = PartLogs({0: root / "part-0"}, {0: []})
        >>> logs.append(0, conform(pa.table({"text": ["a note"], "evidence": [0], "seq": [1]})))
        >>> [(part, name) for part, name, _ in logs.seal()]
        [(0, 'log-000000000001.arrow')]
    """

    def __init__(self, folders: dict[int, Path], kept: dict[int, list[Sealed]]) -> None:
        self._parts: dict[int, _Part] = {}  # by part index
        for index, folder in folders.items():
            folder.mkdir(parents=True, exist_ok=True)
            names = [name for name, _ in kept.get(index, [])]
            wanted = {folder / n for n in names} | {folder / f"{n}{TEXT_OPS}" for n in names}
            for stale in {*folder.glob("*.arrow"), *folder.glob(f"*{TEXT_OPS}")} - wanted:
                stale.unlink()  # written after the checkpoint: the resumed ingest writes it again
            for tmp in folder.glob(".*"):  # a file being written when the ingest stopped
                tmp.unlink()
            self._parts[index] = _Part(folder, list(kept.get(index, [])))
        self._kept = {index: list(part.sealed) for index, part in self._parts.items()}

    def append(self, index: int, piece: pa.Table, text_ops: NDArray[np.int64] | None = None) -> None:
        """Append ``piece`` (part ``index``'s rows of a batch's write log) to the part's open segment;
        ``text_ops``: the seqs of its operation rows that are text rows' (None: none)."""
        part = self._part(index)
        if part.segment is None:
            first = int(piece.column("seq")[0].as_py())
            part.segment = LogSegment(part.folder / f"log-{first:012d}.arrow")
        part.segment.write(piece)
        if text_ops is not None and len(text_ops):
            part.text_ops.append(text_ops)

    def seal(self) -> list[tuple[int, str, str]]:
        """Close every open segment (sealed, fsynced; its text rows' operations beside it): (part, name,
        digest) of each."""
        closed = []
        for index, part in self._parts.items():
            if part.segment is None:
                continue
            segment, part.segment = part.segment, None
            if part.text_ops:
                seqs = pa.array(np.concatenate(part.text_ops), pa.int64())
                atomic_write_parquet(
                    segment.path.with_name(f"{segment.path.name}{TEXT_OPS}"), pa.table({"seq": seqs})
                )
                part.text_ops = []
            digest = segment.close()
            part.sealed.append((segment.path.name, digest))
            closed.append((index, segment.path.name, digest))
        return closed

    def replay_kept(self, graph: ProvenanceGraph) -> int:
        """Replay the segments the last checkpoint named, of every part, into ``graph``: the heads of
        this worker's keys at that checkpoint. Returns the rows replayed."""
        rows = 0
        for index, kept in self._kept.items():
            folder = self._parts[index].folder
            for name, digest in kept:
                piece = read_segment(folder / name, digest)
                apply_log(graph, localize(piece, graph.storage.evidence.count()))
                rows += piece.num_rows
        return rows

    def build(self, root: Path) -> list[BuiltPart]:
        """Write each part into the sharded state being built at ``root``, one at a time: its graph,
        replayed from its sealed segments (verified against their digests), saved as ``part-N/`` (the
        directory layout) and dropped; its segments hard-linked into ``part-N/log/`` (copied where the
        file system cannot link)."""
        built = []
        for index in sorted(self._parts):
            release_freed_memory()  # the last part's graph (or the ingest's batches) handed back first
            built.append(self._build(index, root / part_name(index)))
        release_freed_memory()
        return built

    def _build(self, index: int, folder: Path) -> BuiltPart:
        part = self._part(index)
        if part.segment is not None:
            msg = f"part {index} has a segment still open: seal() before build()"
            raise RuntimeError(msg)
        graph = ProvenanceGraph()
        refused = 0
        for name, digest in part.sealed:
            piece = read_segment(part.folder / name, digest)
            applied = apply_log(graph, localize(piece, graph.storage.evidence.count()))
            ops = pc.is_valid(piece.column("op")).to_numpy(zero_copy_only=False)
            unapplied = piece.column("seq").to_numpy()[ops][~applied]
            refused += int(np.count_nonzero(~np.isin(unapplied, self._text_ops(part.folder / name))))
            del piece
        graph.save(folder, layout="directory")
        stats = graph.stats()
        del graph
        (folder / LOG).mkdir()
        digests = {}
        for name, digest in part.sealed:
            try:
                os.link(part.folder / name, folder / LOG / name)
            except OSError:
                shutil.copyfile(part.folder / name, folder / LOG / name)
            digests[f"{folder.name}/{LOG}/{name}"] = digest
        return BuiltPart(index, stats, digests, refused)

    @staticmethod
    def _text_ops(segment: Path) -> NDArray[np.int64]:
        companion = segment.with_name(f"{segment.name}{TEXT_OPS}")
        if not companion.exists():
            return np.zeros(0, np.int64)
        seqs: Any = pq.read_table(companion).column("seq")
        return np.asarray(seqs.to_numpy(), np.int64)

    def _part(self, index: int) -> _Part:
        part = self._parts.get(index)
        if part is None:
            msg = f"this worker writes no part {index} (its parts: {sorted(self._parts)})"
            raise RuntimeError(msg)
        return part
