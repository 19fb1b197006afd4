"""The ingest's working directory next to its output: checkpoints, cache, request log, rejects.

``pmem ingest STREAM --out STATE`` keeps everything it needs to resume in ``STATE.ingest/``:

- ``manifest.json``: the last durable checkpoint: where in the stream it is, which graph file holds
  the state up to there (and that file's sha256), the stream's fingerprint and the spec's identity,
  and the counters of the report. It is replaced atomically, after the graph file it names is on disk.
- ``checkpoint-EVENTS.arrow``: the merged graph after EVENTS events (older ones are removed once a
  newer manifest names a newer file).
- ``cache.sqlite``: the model layer's response cache; a re-run after a kill answers from it every call
  that was already made.
- ``requests/rows-FIRST-aATTEMPT.parquet``: one file per batch and attempt of the model layer's request
  rows (``history_id`` names the stream row).
- ``rejects/rows-FIRST.parquet``: rows skipped under ``--skip-bad``, with the reason.
- ``ids/rows-FIRST.parquet``: the ``id`` (and row) of each ingested event that has one: ids are unique,
  and a resumed ingest must still know the ids read before its checkpoint.
- ``seen/run-N.arrow``: the older ids of this attempt's duplicate check, sorted by hash
  (:mod:`pmem.ingest._seen`); rebuilt from ``ids/`` by each attempt.
- ``report.json``: the ingest report, when the ingest is complete.
- ``.lock`` (and ``.lock.holder``, who holds it): the running ingest's exclusive lock (:mod:`pmem._lock`).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from collections.abc import Iterator

from pmem._atomic import (
    atomic_copy_file,
    atomic_write_bytes,
    atomic_write_parquet,
    fsync_dir,
    temp_path,
)

#: The working folder's name: the output's, with this added.
_SUFFIX = ".ingest"


def workdir_of(out: Path) -> Path:
    return out.with_name(out.name + _SUFFIX)


@dataclass
class Workdir:
    """The working folder's layout, and its side files (request rows, rejects, ids); the manifest and
    the checkpoints it names are :mod:`pmem.ingest._checkpoint`'s."""

    root: Path

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def out(self) -> Path:
        """The output the folder is the working folder of."""
        return self.root.with_name(self.root.name.removesuffix(_SUFFIX))

    @property
    def report_path(self) -> Path:
        return self.root / "report.json"

    @property
    def cache_path(self) -> Path:
        return self.root / "cache.sqlite"

    def create(self) -> None:
        for sub in ("", "requests", "rejects", "ids"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def checkpoint_path(self, events: int) -> Path:
        return self.root / f"checkpoint-{events:012d}.arrow"

    def drop_checkpoints_but(self, keep: Path) -> None:
        for p in self.root.glob("checkpoint-*.arrow"):
            if p != keep:
                p.unlink(missing_ok=True)

    def write_report(self, report: dict[str, Any]) -> None:
        """The finished ingest's report, as ``report.json``."""
        atomic_write_bytes(self.report_path, json.dumps(report, indent=2).encode())

    def write_requests(self, first_row: int, attempt: int, table: pa.Table) -> None:
        if table.num_rows:
            atomic_write_parquet(self.root / "requests" / f"rows-{first_row:012d}-a{attempt}.parquet", table)

    def write_rejects(self, first_row: int, table: pa.Table) -> None:
        if table.num_rows:
            atomic_write_parquet(self.root / "rejects" / f"rows-{first_row:012d}.parquet", table)

    def write_ids(self, first_row: int, table: pa.Table) -> None:
        if table.num_rows:
            atomic_write_parquet(self.root / "ids" / f"rows-{first_row:012d}.parquet", table)

    def ids_until(self, last_row: int) -> Iterator[tuple[list[str], list[int]]]:
        """The ids of the events up to row ``last_row`` (a checkpoint's) with their rows, a batch's file
        at a time; the files of batches after it are removed (the re-run writes them again)."""
        for p in sorted((self.root / "ids").glob("rows-*.parquet")):
            if int(p.stem.split("-")[1]) > last_row:
                p.unlink()
                continue
            table = pq.read_table(p)
            names: list[str] = table.column("id").to_pylist()  # type: ignore[assignment]  # no nulls written
            rows: list[int] = table.column("row").to_pylist()  # type: ignore[assignment]
            yield names, rows

    def drop_rejects_from(self, first_row: int) -> None:
        """Rejects of batches after the checkpoint are written again by the re-run (same rows)."""
        for p in (self.root / "rejects").glob("rows-*.parquet"):
            if int(p.stem.split("-")[1]) >= first_row:
                p.unlink()


def publish_state(checkpoint: Path, out: Path, sha256: str) -> None:
    """``out`` becomes the finished ingest's state, atomically: a second name (a hard link) of its last
    checkpoint, whose bytes nothing changes in place (a later checkpoint, or an erasure, is a new file
    renamed over the old name), so a state of gigabytes is neither copied nor stored twice; a copy
    checked against ``sha256`` where the file system has no hard link to give."""
    tmp = temp_path(out)
    try:
        os.link(checkpoint, tmp)
    except OSError:
        atomic_copy_file(checkpoint, out, sha256)
        return
    try:
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(out.parent)


def publish_directory(built: Path, out: Path) -> None:
    """``out`` becomes the directory ``built`` (a sharded state written beside it), atomically: renamed
    onto it; a sharded state already there (an earlier run's) is moved aside first and then removed."""
    import secrets
    import shutil

    aside = None
    if out.exists():
        aside = out.with_name(f".{out.name}.{secrets.token_hex(6)}.old")
        os.replace(out, aside)
    os.replace(built, out)
    fsync_dir(out.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
