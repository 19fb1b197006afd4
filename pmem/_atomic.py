"""Crash-consistent file writes: written aside, flushed, fsynced, renamed, directory fsynced.

Shared by the runner (commit records, data files, ``run.toml``) and the report (every output file):
both must leave a reader with the old bytes or the new, never part of either, even when the writer is
killed or the disk fills. ``pmem.graph`` keeps its own copy of the rule, since the core imports nothing
else from ``pmem``.

:func:`file_sha256` is the one place a file's sha256 is computed (commit records, the report's integrity
check, vendored data, converted weights, ingest checkpoints and streams).

A fault-injection hook makes "the writer dies here" testable without timing luck: :func:`checkpoint`
is called at each step of a protocol with the step's name, and tests install a function that kills the
process at the step they choose (see ``tests/runner/test_runner_crash.py``).

>>> import pathlib, tempfile
>>> p = pathlib.Path(tempfile.mkdtemp()) / "a.json"
>>> atomic_write_bytes(p, b"{}")
>>> p.read_bytes()
b'{}'
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

#: bytes read at a time when hashing or copying a file
_BLOCK = 1 << 20

#: temporary files end with this; readers of a directory ignore them
TMP_SUFFIX = ".pmem-tmp"

#: called with a step name at each step of a write protocol; tests replace it to kill the writer there
fault_hook: Callable[[str], None] | None = None


def checkpoint(step: str) -> None:
    """A named point of a write protocol where a test may kill the writer."""
    if fault_hook is not None:
        fault_hook(step)


def file_sha256(
    path: str | os.PathLike[str], *, limit: int | None = None, copy_to: BinaryIO | None = None
) -> str:
    """The sha256 hex digest of the file at ``path``, read in blocks (never held whole).

    ``limit``: hash only the first ``limit`` bytes (fewer when the file is shorter). ``copy_to``: also
    write every block read to this binary file, so a copy and its digest take one read.
    """
    digest = hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            block = f.read(_BLOCK if left is None else min(_BLOCK, left))
            if not block:
                break
            digest.update(block)
            if copy_to is not None:
                copy_to.write(block)
            if left is not None:
                left -= len(block)
    return digest.hexdigest()


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make renames and creations in ``path`` durable (a no-op where the filesystem cannot)."""
    with contextlib.suppress(OSError):
        _fsync_path(path)


def fsync_file(path: Path) -> None:
    """Flush a file written by someone else (Arrow, Parquet writers) to stable storage."""
    _fsync_path(path)


def temp_path(path: Path) -> Path:
    """A fresh name next to ``path`` (same directory, so the rename is atomic)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}")


def write_aside(path: Path, data: bytes) -> Path:
    """Write ``data`` to a new temporary file next to ``path``, flushed and fsynced; return its path.

    The temporary file is removed when writing fails (a full disk), so nothing is left behind.
    """
    tmp = temp_path(path)
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def atomic_write_parquet(path: Path, table: Any) -> None:
    """``path`` holds the Parquet file of ``table`` entirely or keeps what it held (written aside,
    fsynced, renamed)."""
    import pyarrow.parquet as pq

    tmp = temp_path(path)
    pq.write_table(table, tmp)
    fsync_file(tmp)
    os.replace(tmp, path)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` entirely or keeps what it held: written aside, fsynced, renamed, dir fsynced.

    The parent directory must exist: a missing folder is the caller's mistake, not something to paper over.
    """
    path = Path(path)
    _put_in_place(write_aside(path, data), path)


def atomic_copy_file(source: Path, path: Path, sha256: str | None = None) -> None:
    """``path`` becomes a copy of ``source`` as :func:`atomic_write_bytes` would write it, read in blocks
    rather than held whole (a state file of gigabytes). With ``sha256``, the copy must hash to it: a
    source changed on disk raises ``ValueError`` naming it, and ``path`` keeps what it held.
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "xb") as dst:
            digest = file_sha256(source, copy_to=dst)
            dst.flush()
            os.fsync(dst.fileno())
        if sha256 is not None and digest != sha256:
            msg = f"{source}: its bytes no longer hash to {sha256} (changed on disk); {path} was not written"
            raise ValueError(msg)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _put_in_place(tmp, path)


def _put_in_place(tmp: Path, path: Path) -> None:
    checkpoint(f"aside:{path.name}")
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    checkpoint(f"renamed:{path.name}")
    fsync_dir(path.parent)
