"""The run directory and its commit protocol.

A batch of completed histories becomes visible in one step:

1. its files are written under ``_staging/<runner>/<batch>/`` and each is fsynced (with its sha256 taken);
2. the commit record ``_commits/<batch>.json`` (which histories are complete, which files, their sha256s)
   is written aside, fsynced, renamed into place, and ``_commits/`` is fsynced: the point of no return;
3. the staged files are renamed into the datasets and their directories fsynced; staging is removed.

A reader never sees a file that is not committed and never a half-written one (every file appears by
``os.replace``). A crash before step 2 leaves only staging, which recovery deletes; a crash after it is
rolled forward by recovery. Recovery also checks committed files against the record's checksums: a
batch with a missing or damaged file is dropped whole (files and record), so its histories run again.
File names are unique per batch, so a history redone after a crash cannot produce a second copy of
committed rows. Each step calls :func:`pmem._atomic.checkpoint`, where tests kill the writer.

The layout (folder and file names) and the commit record (:class:`pmem.rundir.CommitRecord`) are
:mod:`pmem.rundir`'s; this module is the protocol that writes them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pmem._atomic import TMP_SUFFIX, checkpoint, file_sha256, fsync_dir, fsync_file
from pmem.rundir import (
    COMMITS,
    FAILED_HISTORIES_GLOB,
    HISTORIES,
    REQUESTS,
    RESULTS,
    STAGING,
    STATES,
    WRITES,
    CommitRecord,
    CommitRecordError,
    HistoryRow,
    failed_history_file,
    failed_requests_file,
    failed_unit,
    to_table,
)

#: the datasets a commit batch writes (judgments/ are written by the judging pass)
DATASETS = (RESULTS.name, WRITES.name, REQUESTS.name, HISTORIES.name)


def sync_and_hash(path: Path) -> str:
    """fsync a written file and return its sha256 (the bytes are still in the page cache)."""
    fsync_file(path)
    return file_sha256(path)


def write_table(path: Path, rows: Sequence[Any], dataset: str) -> int:
    """Write rows (:mod:`pmem.rundir` row types, or mappings) as Parquet with the dataset's fixed schema,
    so every part of a run agrees; a row with an unknown or without a required column raises
    :class:`pmem.rundir.SchemaError` before anything is written."""
    table = to_table(dataset, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return table.num_rows


@dataclass
class StagedBatch:
    """A batch being assembled in staging: files go in, then :meth:`RunStore.commit` publishes it."""

    batch_id: str
    root: Path
    moves: list[tuple[str, str]]
    units: list[str]
    drop: list[str]

    def path_for(self, dest_rel: str) -> Path:
        """Where to write a file that will appear at ``dest_rel`` in the run directory."""
        staged = self.root / dest_rel
        staged.parent.mkdir(parents=True, exist_ok=True)
        self.moves.append((str(staged.relative_to(self.root)), dest_rel))
        return staged


class RunStore:
    """Everything that touches ``runs/<run-id>/`` goes through here."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        #: problems found by :meth:`recover` (a path and what is wrong), in the order found
        self.damaged: list[str] = []

    # -- layout ---------------------------------------------------------------------------------
    def ensure(self) -> None:
        for d in (*DATASETS, STATES, COMMITS, STAGING):
            (self.root / d).mkdir(parents=True, exist_ok=True)

    def staging_dir(self, runner_token: str) -> Path:
        return self.root / STAGING / runner_token

    # -- writing a batch --------------------------------------------------------------------------
    def stage(self, runner_token: str, batch_id: str) -> StagedBatch:
        root = self.staging_dir(runner_token) / batch_id
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        return StagedBatch(batch_id=batch_id, root=root, moves=[], units=[], drop=[])

    def commit(self, batch: StagedBatch) -> None:
        """Publish a staged batch: data durable, then the record (the point of no return), then the files."""
        sums: dict[str, str] = {}
        for src_rel, dest_rel in batch.moves:
            sums[dest_rel] = sync_and_hash(batch.root / src_rel)
        for d in sorted({(batch.root / src).parent for src, _ in batch.moves}):
            fsync_dir(d)
        checkpoint("data-synced")
        record = CommitRecord(
            batch=batch.batch_id,
            staging=str(batch.root.relative_to(self.root)),
            units=tuple(batch.units),
            moves=tuple(batch.moves),
            drop=tuple(batch.drop),
            sha256=sums,
            time=time.time(),
        )
        record.write(self.root)
        checkpoint("recorded")
        self._roll_forward(record)

    def _roll_forward(self, record: CommitRecord) -> None:
        staging = self.root / record.staging
        dirs: set[Path] = set()
        for i, (src_rel, dest_rel) in enumerate(record.moves):
            src, dest = staging / src_rel, self.root / dest_rel
            if src.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dest)
                dirs.add(dest.parent)
                checkpoint(f"moved:{i}")
        for d in sorted(dirs):
            fsync_dir(d)
        for rel in record.drop:
            with contextlib.suppress(FileNotFoundError):
                (self.root / rel).unlink()
        shutil.rmtree(staging, ignore_errors=True)
        checkpoint("cleaned")

    def write_failure(self, uid: str, row: HistoryRow) -> str:
        """A failed history's status row; its own file, replaced if the history fails again."""
        rel = failed_history_file(uid)
        tmp = self.root / STAGING / f".failed-{uid}-{uuid.uuid4().hex[:8]}.parquet"
        write_table(tmp, [row], HISTORIES.name)
        fsync_file(tmp)
        dest = self.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
        fsync_dir(dest.parent)
        return rel

    def write_failed_requests(self, uid: str, attempt: int, rows: Sequence[Any]) -> str | None:
        """The request rows of a failed run of a history (evidence of what the servers said), in a file of
        their own per run: a later failure or success of the history neither replaces nor drops them.

        Named ``requests/failed-<uid>-<attempt>.parquet``; a resumed sweep runs a history again from
        attempt 0, so a name already taken gets a ``.<n>`` suffix rather than replacing the older evidence.
        """
        if not rows:
            return None
        tmp = self.root / STAGING / f".failed-requests-{uid}-{attempt}-{uuid.uuid4().hex[:8]}.parquet"
        write_table(tmp, rows, REQUESTS.name)
        fsync_file(tmp)
        folder = self.root / REQUESTS.name
        folder.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            rel = failed_requests_file(uid, attempt, n)
            try:
                # a hard link publishes the file whole, like a rename, but never over an existing one
                os.link(tmp, self.root / rel)
            except FileExistsError:
                n += 1
                continue
            except OSError:
                # a file system without hard links: one driver runs a history at a time, so a name
                # free now stays free until the rename
                if (self.root / rel).exists():
                    n += 1
                    continue
                os.replace(tmp, self.root / rel)
            break
        tmp.unlink(missing_ok=True)
        fsync_dir(folder)
        return rel

    # -- reading state ----------------------------------------------------------------------------
    def commit_records(self) -> list[CommitRecord]:
        try:
            return CommitRecord.read_all(self.root)
        except CommitRecordError as exc:
            # Commit records are written by rename, so a damaged one is not a crash artefact.
            msg = f"{exc}; the run directory was modified by hand?"
            raise RuntimeError(msg) from exc

    def completed(self) -> set[str]:
        return {u for rec in self.commit_records() for u in rec.units}

    def failed(self) -> set[str]:
        return {failed_unit(p.name) for p in (self.root / HISTORIES.name).glob(FAILED_HISTORIES_GLOB)}

    def recover(self, runner_token: str | None = None, *, verify: bool = False) -> set[str]:
        """Roll committed batches forward and delete uncommitted staging (all runners, or one).

        A batch whose files are missing, or (with ``verify``) differ from the sha256s its record holds, is
        dropped whole, record and files, so its histories run again; :attr:`damaged` names what was wrong.
        Returns the units of batches that stand. Must only run while no live runner writes to the staging
        being recovered.
        """
        done: set[str] = set()
        records = {rec.staging: rec for rec in self.commit_records()}
        for rec in records.values():
            if runner_token is not None and not rec.staging.startswith(f"{STAGING}/{runner_token}/"):
                continue
            staged = self.root / rec.staging
            if staged.exists() or any((self.root / r).exists() for r in rec.drop):
                self._roll_forward(rec)
            problems = [
                f"{self.root / d.path}: {d.reason} (batch {rec.batch})"
                for d in rec.verify(self.root, checksums=verify)
            ]
            if problems:
                # After a power loss a record can outlive its files (or their pages); a file can also be
                # damaged later. The batch is then not complete: drop it whole so its histories run again,
                # rather than trusting a record with holes.
                self.damaged.extend(problems)
                for _, dest in rec.moves:
                    with contextlib.suppress(FileNotFoundError):
                        (self.root / dest).unlink()
                rec.path(self.root).unlink()
                fsync_dir(self.root / COMMITS)
                continue
            done.update(rec.units)
        sroot = self.root / STAGING
        targets = (
            [self.staging_dir(runner_token)]
            if runner_token
            else [p for p in sroot.iterdir()]
            if sroot.is_dir()
            else []
        )
        for t in targets:
            if t.is_file():
                t.unlink()
            elif t.is_dir():
                shutil.rmtree(t, ignore_errors=True)
        if runner_token is None:
            # a writer killed between writing a file aside and renaming it leaves the temporary file
            for d in (self.root, self.root / COMMITS):
                for tmp in d.glob(f".*{TMP_SUFFIX}"):
                    tmp.unlink(missing_ok=True)
        # failed-* rows of units completed later are stale: a batch drops them, recovery finishes it
        completed = self.completed()
        for uid in self.failed() & completed:
            with contextlib.suppress(FileNotFoundError):
                (self.root / failed_history_file(uid)).unlink()
        return done
