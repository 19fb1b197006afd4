"""Erasure reaches the ingest's working folder: no checkpoint, cache entry or side file keeps a copy.

``pmem erase STATE EVIDENCE --out NEW`` erases the evidence from the graph; when STATE was written by
``pmem ingest``, :func:`erase_in_workdir` then scrubs ``STATE.ingest/``:

- the checkpoint the manifest names is erased the same way (evidence ids follow the stream's rows, so the
  id names the same row there), and the manifest names its new digest: an ingest run again resumes from
  the erased graph (and, when the ingest was complete, writes that graph to STATE);
- the response cache loses every entry whose reply holds the erased text or a value only it stated
  (bytes overwritten, file rebuilt, write-ahead log emptied): the next ingest asks the model again;
- request rows and rejected rows have every text field holding one of them replaced by ``[erased]``.

The stream itself is the user's file and is never changed: its erased row lies before the checkpoint,
so an incremental ingest never reads it again; an ingest started afresh (the working folder removed)
reads the stream whole and states the fact again. To keep it out for good, remove the row from the
stream too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pmem._lock import hold_exclusive
from pmem._scrub import ERASED, erase_from_cache, holds, scrub_parquet, scrub_table
from pmem.graph import ProvenanceGraph
from pmem.ingest._checkpoint import rewrite_checkpoint
from pmem.ingest._workdir import Workdir, workdir_of

if TYPE_CHECKING:
    from pmem.graph import ProvenanceGraph


def erase_in_workdir(state: Path, evidence: str, needles: list[str]) -> list[str]:
    """Scrub ``state``'s ingest working folder of ``evidence`` and of ``needles`` (its text and the
    values only it stated); the places cleaned, each a line (none when there is no such folder).

    Raises:
        LockHeldError: an ingest is writing the folder now.
    """

    work = Workdir(workdir_of(state))
    if not work.root.is_dir():
        return []
    cleaned: list[str] = []
    lock = hold_exclusive(
        work.root / ".lock", f"{work.root} (an ingest's working folder)", hint="wait for that ingest to end"
    )
    try:

        def erase(checkpoint: Path) -> bool:
            graph = ProvenanceGraph.load(checkpoint)
            if not _erasable(graph, evidence):
                return False
            graph.erase(evidence)
            graph.save(checkpoint)
            return True

        rewritten = rewrite_checkpoint(work, erase)
        if rewritten is not None and rewritten[1]:
            cleaned.append(f"{rewritten[0]} (the evidence erased; {work.manifest_path} names it)")
        if work.cache_path.is_file():
            cleaned.append(erase_from_cache(work.cache_path, needles))
        for folder in ("requests", "rejects"):
            rows = sum(scrub_parquet(p, needles) for p in sorted((work.root / folder).glob("*.parquet")))
            if rows:
                cleaned.append(f"{work.root / folder} ({rows} rows' text fields set to {ERASED!r})")
        left = [
            str(p.relative_to(work.root))
            for p in sorted(work.root.rglob("*"))
            if p.is_file() and p.name != ".lock" and holds(p, needles)
        ]
        if left:
            msg = f"{work.root}: scrubbed where it could, but these files still hold the erased text or its values: {', '.join(left)}"
            raise OSError(msg)
    finally:
        lock.release()
    return cleaned


def sharded_copies(state: Path, needles: list[str]) -> list[Path]:
    """Every file of the sharded state ``state`` and of its ingest working folder that holds one of
    ``needles`` (byte for byte, or in a Parquet file's rows). ``pmem erase`` names them when it refuses a
    sharded state: its parts keep their evidence in write-log segments (shared with the working folder's,
    hard-linked), which cannot record an erasure."""
    import pyarrow.parquet as pq

    found = []
    for root in (state, workdir_of(state)):
        for path in sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else ():
            if holds(path, needles) or (
                path.suffix == ".parquet" and scrub_table(pq.read_table(path), needles)[1]
            ):
                found.append(path)
    return found


def _erasable(graph: ProvenanceGraph, evidence: str) -> bool:
    """Whether ``graph`` holds ``evidence`` (a checkpoint made before its row holds none); erasing an
    erased one again changes nothing."""
    try:
        graph.evidence(evidence)
    except KeyError:
        return False
    return True
