"""The ingest's checkpoint protocol: the one owner of ``STATE.ingest/manifest.json`` and the checkpoint
files it names.

A checkpoint is the merged graph saved (``checkpoint-EVENTS.arrow``), then a manifest naming it,
replaced atomically: a kill at any point leaves the last manifest and the file it names. The manifest
also holds what a resumed ingest must find unchanged (the stream's fingerprint, the spec's identity,
the output's layout), the report's counters, and the output's own part (a sharded output's log
segments). Every field of it is read and written here; the driver, ``pmem erase`` and the command line
go through :class:`Checkpointer`, :func:`checkpointed_events` and :func:`rewrite_checkpoint`.

>>> import tempfile
>>> from pmem.graph import ProvenanceGraph
>>> root = Path(tempfile.mkdtemp()) / "s.arrow.ingest"
>>> stream = root.parent / "s.jsonl"
>>> _ = stream.write_text('{"text": "hi"}\\n')
>>> work = Workdir(root); work.create()
>>> points = Checkpointer(work, stream, identity="spec", layout=None)
>>> points.resume() is None  # nothing written yet
True
>>> points.save(ProvenanceGraph(), events=1, since=time.monotonic()) >= 0
True
>>> points.commit(Position(1, 15), {"events": 1}, None)
>>> checkpointed_events(work)
1
>>> Checkpointer(work, stream, identity="spec", layout=None).resume().position
Position(row=1, offset=15)
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem._atomic import atomic_write_bytes, file_sha256
from pmem.ingest._stream import Position
from pmem.ingest._workdir import Workdir

if TYPE_CHECKING:
    from collections.abc import Callable

    from pmem.graph import ProvenanceGraph

MANIFEST_FORMAT = "pmem-ingest"
MANIFEST_VERSION = 1
#: The most of the wall time checkpoints may take: a due checkpoint waits while writing it would take
#: more than this share of the time since the last one ended (its cost predicted from the last one's,
#: in proportion to what the graph it writes holds: see :func:`checkpoint_size`).
CHECKPOINT_SHARE = 0.05
#: The manifest's field for the output's own part (a sharded output's; its layout is ``partitions``).
_OUTPUT_FIELD = "shards"


class ResumeError(ValueError):
    """A checkpoint that does not belong to this stream or config: the user decides what to do."""


def stream_check(path: Path, offset: int) -> dict[str, Any]:
    """What must be unchanged for a checkpoint at byte ``offset`` of ``path`` to be resumed.

    A JSONL stream (``offset`` > 0) is checked on the bytes already ingested only, so a stream that grew
    since (a log appended to) or whose bad line after the checkpoint was fixed is resumed; a Parquet or
    Arrow file is checked whole.
    """
    return {
        "bytes": offset if offset > 0 else path.stat().st_size,
        "prefix": offset > 0,
        "sha256": file_sha256(path, limit=offset if offset > 0 else None),
    }


@dataclass(frozen=True)
class Resumed:
    """Where an ingest goes on from: its last checkpoint."""

    position: Position  # the stream's position after the checkpointed rows
    report: dict[str, Any]  # the report as it was at the checkpoint (its counters go on from there)
    state: bytes  # the checkpointed graph, checked against the manifest's sha256
    output: dict[str, Any] | None  # the output's own part (None: a single state file)


class Checkpointer:
    """The checkpoints of one ingest run: resuming from the last, deciding when the next is due, writing
    it, and marking the ingest done.

    Args:
        work: the ingest's working folder.
        stream: the stream being ingested (its fingerprint is checked on resume).
        identity: the spec's identity hash (models and write options).
        layout: the output's layout: its partitions for a sharded output, None for one state file.
    """

    def __init__(self, work: Workdir, stream: Path, *, identity: str, layout: int | None) -> None:
        self._work = work
        self._stream = stream
        self._identity = identity
        self._layout = layout
        # this run's attempt: one more than the manifest's when resuming
        self.attempt = 1
        # the position and file of the last checkpoint (written or resumed from); None before one
        self._position = Position(0, 0)
        self._last: tuple[Path, str] | None = None
        # a Parquet or Arrow stream's fingerprint, hashed once (a JSONL prefix's grows with each checkpoint)
        self._file_check: dict[str, Any] | None = None
        # when the last checkpoint ended, how long it took, and the size of the graph it wrote
        self._checkpointed = (0.0, 0.0, 0)

    # ------------------------------------------------------------------ resuming

    def resume(self) -> Resumed | None:
        """The last checkpoint to go on from (None: no manifest, a fresh start).

        Raises:
            ResumeError: the manifest is another ingest's (stream, spec or layout), unreadable, or names a
                checkpoint that is missing or does not match its sha256.
        """
        doc = _read_manifest(self._work)
        if doc is None:
            return None
        self._refuse_another_ingests(doc)
        state = self._read_checkpoint(doc)
        self.attempt = int(doc.get("attempts", 0)) + 1
        self._position = Position(**doc["position"])
        self._last = (self._work.root / doc["checkpoint"], doc["checkpoint_sha256"])
        return Resumed(self._position, doc["report"], state, doc.get(_OUTPUT_FIELD))

    def finished(self, out_digest: Callable[[], str | None]) -> dict[str, Any] | None:
        """The finished ingest's report when the output is its own (``out_digest``: the output's digest
        now, None when there is none) and the stream has not grown since; None otherwise.

        Raises:
            ResumeError: the manifest is another ingest's.
        """
        doc = _read_manifest(self._work)
        if doc is None or not doc.get("done"):
            return None
        self._refuse_another_ingests(doc)  # another stream or config: its one-line error
        if out_digest() != doc.get("out_sha256"):
            return None
        if doc["stream_check"]["bytes"] != self._stream.stat().st_size:
            return None
        report: dict[str, Any] = doc["report"]
        return report

    def _refuse_another_ingests(self, doc: dict[str, Any]) -> None:
        """A checkpoint of another stream or config is the user's to remove: one line saying so."""
        problems = []
        check = doc.get("stream_check") or {}
        position = Position(**doc["position"])
        if stream_check(self._stream, position.offset) != check:
            what = "the rows already ingested differ" if check.get("prefix") else "the stream file differs"
            problems.append(f"{what} (checkpoint of {doc.get('stream')})")
        if doc.get("spec") != self._identity:
            problems.append("the models or write options differ")
        layout = (doc.get(_OUTPUT_FIELD) or {}).get("partitions")
        if layout != self._layout:

            def said(n: int | None) -> str:
                return f"--shards with {n} partitions" if n else "no --shards"

            problems.append(f"the output layout differs ({said(layout)} then, {said(self._layout)} now)")
        if problems:
            root = self._work.root
            msg = (
                f"{root} holds a checkpoint of another ingest: {'; '.join(problems)}. "
                f"Remove {root} (and {self._work.out}) to start over, or pass the same stream and config."
            )
            raise ResumeError(msg)

    def _read_checkpoint(self, doc: dict[str, Any]) -> bytes:
        """The manifest's checkpoint, checked against its sha256 (the bytes checked are the bytes returned)."""
        root = self._work.root
        path = root / doc["checkpoint"]
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            msg = (
                f"{self._work.manifest_path} names {path.name}, which is missing; remove {root} to start over"
            )
            raise ResumeError(msg) from None
        if hashlib.sha256(data).hexdigest() != doc["checkpoint_sha256"]:
            msg = f"{path}: checksum does not match the manifest; remove {root} to start over"
            raise ResumeError(msg)
        return data

    # ------------------------------------------------------------------ writing

    def affordable(self, graph: ProvenanceGraph) -> bool:
        """Whether checkpoints stay within :data:`CHECKPOINT_SHARE` of the wall time if one of ``graph``
        is written now: its cost is predicted from the last one's, in proportion to the graph's
        :func:`checkpoint_size` (a driver that holds only the registry, as a sharded ingest's does, costs
        what its last checkpoint did, however long the stream)."""
        ended, took, size = self._checkpointed
        predicted = took * max(checkpoint_size(graph), 1) / max(size, 1)
        return predicted <= CHECKPOINT_SHARE * (time.monotonic() - ended)

    def save(self, graph: ProvenanceGraph, *, events: int, since: float) -> float:
        """Save ``graph`` (after ``events`` events) as the next checkpoint; the seconds the checkpoint has
        taken since it began at ``since`` (a monotonic time: settling the output counts too). It is
        resumable once :meth:`commit` names it.

        Saved straight to the file and hashed from it: the state's bytes are never all in memory at once.
        """
        path = self._work.checkpoint_path(events)
        graph.save(path)
        self._last = (path, file_sha256(path))
        ended = time.monotonic()
        self._checkpointed = (ended, ended - since, checkpoint_size(graph))
        return ended - since

    def commit(self, position: Position, report: dict[str, Any], output: dict[str, Any] | None) -> None:
        """Name the checkpoint just saved in the manifest, at ``position``, with the ``report`` and the
        ``output``'s own part; older checkpoint files are removed."""
        self._position = position
        self._write(report, output)
        self._work.drop_checkpoints_but(self.last_checkpoint[0])

    def finish(self, report: dict[str, Any], output: dict[str, Any] | None, out_sha256: str) -> None:
        """Mark the ingest done: its output (whose digest is ``out_sha256``) is the last checkpoint's."""
        self._write(report, output, done=True, out_sha256=out_sha256)

    @property
    def last_checkpoint(self) -> tuple[Path, str]:
        """The last checkpoint's file and sha256."""
        if self._last is None:
            msg = "no checkpoint has been written or resumed from"
            raise RuntimeError(msg)
        return self._last

    def _stream_check(self) -> dict[str, Any]:
        if self._position.offset > 0:  # JSONL: the ingested prefix, which grows
            return stream_check(self._stream, self._position.offset)
        if self._file_check is None:  # Parquet, Arrow: the whole file, hashed once
            self._file_check = stream_check(self._stream, 0)
        return self._file_check

    def _write(self, report: dict[str, Any], output: dict[str, Any] | None, **extra: Any) -> None:
        path, sha = self.last_checkpoint
        doc = {
            "stream": str(self._stream),
            "stream_check": self._stream_check(),
            "spec": self._identity,
            "position": {"row": self._position.row, "offset": self._position.offset},
            "checkpoint": path.name,
            "checkpoint_sha256": sha,
            "attempts": self.attempt,
            "report": report,
            "done": False,
            **({_OUTPUT_FIELD: output} if output is not None else {}),
            **extra,
        }
        _write_manifest(self._work, doc)


def checkpoint_size(graph: ProvenanceGraph) -> int:
    """What a checkpoint of ``graph`` writes grows with: its arrivals and its registered keys.

    >>> from pmem.graph import ProvenanceGraph
    >>> g = ProvenanceGraph()
    >>> _ = g.observe("the budget is $30k"); _ = g.apply("accept", "budget", "$30k", "e0")
    >>> checkpoint_size(g)
    2
    """
    registry = graph.registry_in_use
    return graph.seq + (0 if registry is None else registry.key_count)


def checkpointed_events(work: Workdir) -> int | None:
    """The events the last checkpoint in ``work`` holds; None when there is none.

    Raises:
        ResumeError: the manifest cannot be read.
    """
    doc = _read_manifest(work)
    return None if doc is None else int(doc.get("report", {}).get("events", 0))


def rewrite_checkpoint(work: Workdir, edit: Callable[[Path], bool]) -> tuple[Path, bool] | None:
    """Let ``edit`` rewrite the last checkpoint's file in place (it returns whether it changed it); the
    manifest then names the file's new sha256, and for a finished ingest its output's too (the same
    command run again publishes the rewritten graph). Other checkpoint files are removed. The
    checkpoint's path and whether it changed; None when ``work`` holds no manifest.

    Raises:
        ResumeError: the manifest cannot be read.
    """
    doc = _read_manifest(work)
    if doc is None:
        return None
    checkpoint = work.root / doc["checkpoint"]
    changed = edit(checkpoint)
    if changed:
        sha = file_sha256(checkpoint)
        doc["checkpoint_sha256"] = sha
        if doc.get("done"):
            doc["out_sha256"] = sha
        _write_manifest(work, doc)
    work.drop_checkpoints_but(checkpoint)
    return checkpoint, changed


def _read_manifest(work: Workdir) -> dict[str, Any] | None:
    try:
        text = work.manifest_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        msg = (
            f"{work.manifest_path}: not a readable ingest manifest ({exc}); remove {work.root} to start over"
        )
        raise ResumeError(msg) from None
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        msg = f"{work.manifest_path}: not an ingest manifest; remove {work.root} to start over"
        raise ResumeError(msg)
    return doc


def _write_manifest(work: Workdir, doc: dict[str, Any]) -> None:
    doc = {**doc, "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION}
    atomic_write_bytes(work.manifest_path, json.dumps(doc, indent=2, sort_keys=True).encode())
