"""The run directory and its commit protocol.

A batch of completed histories becomes visible in one step: its files are written under
``_staging/<runner>/<batch>/``, then a commit record ``_commits/<batch>.json`` (the durable record of
which histories are complete) is written atomically, then the staged files are renamed into the
datasets. A reader never sees a file that is not committed and never a half-written one (every file
appears by ``os.replace``); a crash before the record leaves only staging, which recovery deletes; a
crash after it is rolled forward by recovery. File names are unique per batch, so a history redone
after a crash cannot produce a second copy of committed rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pmem.runner._schemas import SCHEMAS

DATASETS = ("results", "writes", "requests", "histories")
COMMITS = "_commits"
STAGING = "_staging"


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` so that readers see either nothing or the whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(path.parent)


def write_table(path: Path, rows: list[dict[str, Any]], dataset: str) -> int:
    """Write rows as Parquet with the dataset's fixed schema (so every part of a run agrees)."""
    schema = SCHEMAS[dataset]
    table = pa.Table.from_pylist(rows, schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return table.num_rows


def safe_name(text: str, limit: int = 80) -> str:
    out = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)
    return out[:limit] or "_"


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

    # -- layout ---------------------------------------------------------------------------------
    def ensure(self) -> None:
        for d in (*DATASETS, "states", COMMITS, STAGING):
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
        """Publish a staged batch: the commit record first (the point of no return), then the files."""
        record = {
            "batch": batch.batch_id,
            "staging": str(batch.root.relative_to(self.root)),
            "units": batch.units,
            "moves": batch.moves,
            "drop": batch.drop,
            "time": time.time(),
        }
        atomic_write_bytes(self.root / COMMITS / f"{batch.batch_id}.json", json.dumps(record).encode(), fsync=True)
        self._roll_forward(record)

    def _roll_forward(self, record: dict[str, Any]) -> None:
        staging = self.root / record["staging"]
        for src_rel, dest_rel in record["moves"]:
            src, dest = staging / src_rel, self.root / dest_rel
            if src.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dest)
        for rel in record.get("drop", []):
            with contextlib.suppress(FileNotFoundError):
                (self.root / rel).unlink()
        shutil.rmtree(staging, ignore_errors=True)

    def write_failure(self, uid: str, row: dict[str, Any]) -> str:
        """A failed history's status row; its own file, replaced if the history fails again."""
        rel = f"histories/failed-{uid}.parquet"
        tmp = self.root / STAGING / f".failed-{uid}-{uuid.uuid4().hex[:8]}.parquet"
        write_table(tmp, [row], "histories")
        dest = self.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
        return rel

    # -- reading state ----------------------------------------------------------------------------
    def commit_records(self) -> list[dict[str, Any]]:
        out = []
        cdir = self.root / COMMITS
        if not cdir.is_dir():
            return out
        for p in sorted(cdir.glob("*.json")):
            try:
                out.append(json.loads(p.read_text()))
            except (OSError, json.JSONDecodeError) as exc:
                # Commit records are written by rename, so a damaged one is not a crash artefact.
                msg = f"{p}: damaged commit record ({exc}); the run directory was modified by hand?"
                raise RuntimeError(msg) from exc
        return out

    def completed(self) -> set[str]:
        return {u for rec in self.commit_records() for u in rec["units"]}

    def failed(self) -> set[str]:
        return {p.name[len("failed-") : -len(".parquet")] for p in (self.root / "histories").glob("failed-*.parquet")}

    def recover(self, runner_token: str | None = None) -> set[str]:
        """Roll committed batches forward and delete uncommitted staging (all runners, or one).

        Returns the units of batches that were rolled forward. Must only run while no live runner
        writes to the staging being recovered.
        """
        done: set[str] = set()
        records = {rec["staging"]: rec for rec in self.commit_records()}
        for rec in records.values():
            if runner_token is not None and not rec["staging"].startswith(f"{STAGING}/{runner_token}/"):
                continue
            staged = self.root / rec["staging"]
            if staged.exists() or any((self.root / r).exists() for r in rec.get("drop", [])):
                self._roll_forward(rec)
            missing = [d for _, d in rec["moves"] if not (self.root / d).exists()]
            if missing:
                # Data files are not fsynced one by one; after a power loss a record can outlive its
                # files. Then the batch is not complete: drop the record (and what is left of it) so
                # its histories run again, rather than trusting a record with holes.
                for _, d in rec["moves"]:
                    with contextlib.suppress(FileNotFoundError):
                        (self.root / d).unlink()
                (self.root / COMMITS / f"{rec['batch']}.json").unlink()
                continue
            done.update(rec["units"])
        sroot = self.root / STAGING
        targets = [self.staging_dir(runner_token)] if runner_token else [p for p in sroot.iterdir()] if sroot.is_dir() else []
        for t in targets:
            if t.is_file():
                t.unlink()
            elif t.is_dir():
                shutil.rmtree(t, ignore_errors=True)
        # failed-* rows of units completed later are stale: a batch drops them, recovery finishes it
        completed = self.completed()
        for uid in self.failed() & completed:
            with contextlib.suppress(FileNotFoundError):
                (self.root / "histories" / f"failed-{uid}.parquet").unlink()
        return done
