"""A state's files read through memory maps: a table's rows without copying them, and the pages read
released on demand (:class:`Maps`); a mapped int64 column searched and gathered a chunk at a time
(:class:`Ints`). What :class:`pmem.graph.StateReader` and a sharded state's union numbering
(:mod:`pmem.graph.shards`) read with."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pmem.graph._state import (
    FLAT_SINCE,
    FORMAT,
    READABLE_VERSIONS,
    _check_file_digest,
    _payloads,
    _refuse,
    _sealed_digest,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray


def locate(starts: NDArray[np.int64], row: int) -> tuple[int, int]:
    """The chunk holding ``row`` of a column whose chunks start at ``starts`` (then its total length),
    and the row's place in it."""
    if not 0 <= row < starts[-1]:
        msg = f"row {row} is outside a column of {int(starts[-1])} rows"
        raise IndexError(msg)
    chunk = int(np.searchsorted(starts, row, side="right")) - 1
    return chunk, row - int(starts[chunk])


class Ints:
    """A non-null int64 column of a mapped table, read without copying: one element, or a binary search
    when the column ascends."""

    def __init__(self, column: pa.ChunkedArray[Any]) -> None:
        self._chunks: list[NDArray[np.int64]] = [
            chunk.to_numpy(zero_copy_only=True) for chunk in column.chunks if len(chunk)
        ]
        lengths = [len(c) for c in self._chunks]
        self._starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        self._firsts = np.array([c[0] for c in self._chunks], np.int64)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, row: int) -> int:
        chunk, at = locate(self._starts, row)
        return int(self._chunks[chunk][at])

    def count_below(self, values: NDArray[np.int64]) -> NDArray[np.int64]:
        """How many elements are below each of ``values`` (both ascend): one search per chunk the values
        fall in, so they share the pages of their search."""
        out = np.zeros(len(values), np.int64)
        if not self._chunks:  # an empty column (a part with no rows)
            return out
        cuts = np.searchsorted(values, self._firsts, side="right")  # the values from each chunk's first on
        for chunk, (start, end) in enumerate(zip(cuts, [*cuts[1:], len(values)], strict=True)):
            if start < end:
                found = np.searchsorted(self._chunks[chunk], values[start:end], side="left")
                out[start:end] = self._starts[chunk] + found
        return out

    def take(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """The elements at ``rows`` (ascending), a chunk at a time."""
        out = np.empty(len(rows), np.int64)
        cuts = np.searchsorted(rows, self._starts)
        for chunk in range(len(self._chunks)):
            start, end = int(cuts[chunk]), int(cuts[chunk + 1])
            if start < end:
                out[start:end] = self._chunks[chunk][rows[start:end] - self._starts[chunk]]
        return out

    def count_at_most(self, values: NDArray[np.int64]) -> NDArray[np.int64]:
        """How many elements are at most each of ``values`` (the column ascends)."""
        return self.count_below(values + 1)


def mapped_segment(path: Path, maps: Maps) -> pa.Table:
    """A sealed Arrow file of a sharded state (a log segment, a union numbering), memory-mapped through
    ``maps`` and unverified."""
    try:
        return pa.ipc.open_file(maps.buffer(path)).read_all()
    except FileNotFoundError:
        raise _refuse(path, "file not found") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise _refuse(path, f"truncated or damaged ({type(exc).__name__}: {exc})") from exc


class Maps:
    """The files a reader maps, each read through one read-only memory map: Arrow reads the tables
    without copying, and :meth:`release` drops the pages read so far from the process's resident memory
    (they are the file's: a later read faults them in again from the page cache)."""

    def __init__(self, verify: bool) -> None:
        self._verify = verify  # check each file's digest over its bytes when it is mapped
        self._maps: list[mmap.mmap] = []
        self._buffers: dict[Path, pa.Buffer] = {}  # each file mapped, by path (the last map of it)
        self.digests: dict[Path, str] = {}  # with verify: each file's digest, as verified

    def buffer(self, path: Path) -> pa.Buffer:
        """The bytes of the file at ``path``, mapped (and with ``verify``, checked against the digest it
        is sealed with, every byte read once and released).

        Raises:
            StateFileError: with ``verify``, a file whose bytes do not match its digest, or that has none.
        """
        with path.open("rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._maps.append(mapped)
        if self._verify:
            if _check_file_digest(mapped, path) is None:
                raise _refuse(path, "it carries no digest to verify (a state of schema 1 or 2)")
            self.digests[path] = _sealed_digest(mapped)
            mapped.madvise(mmap.MADV_DONTNEED)
        # a read takes a row here and there: without this, each page fault reads ahead (megabytes a row)
        mapped.madvise(mmap.MADV_RANDOM)
        self._buffers[path] = pa.py_buffer(mapped)
        return self._buffers[path]

    def sealed(self, path: Path) -> str:
        """The digest the file mapped from ``path`` carries (read from its two frames, not checked)."""
        try:
            return _sealed_digest(self._buffers[path])
        except ValueError as exc:
            raise _refuse(path, str(exc)) from None

    @property
    def verifying(self) -> bool:
        return self._verify

    def release(self) -> None:
        for mapped in self._maps:
            mapped.madvise(mmap.MADV_DONTNEED)


def mapped_tables(path: Path, names: tuple[str, ...], maps: Maps) -> list[pa.Table]:
    """Tables ``names`` of a state of schema 4 or later (either layout), memory-mapped through ``maps``
    and unverified: Arrow validates the rows a reader takes (``pmem.graph._reader``)."""
    try:
        if path.is_dir():
            return [pa.ipc.open_file(maps.buffer(path / f"{n}.arrow")).read_all() for n in names]
        outer = pa.ipc.open_file(maps.buffer(path)).read_all()
        meta = outer.schema.metadata or {}
        flat = {str(v).encode() for v in READABLE_VERSIONS if v >= FLAT_SINCE}
        if meta.get(b"format") != FORMAT.encode() or meta.get(b"schema_version") not in flat:
            raise _refuse(
                path,
                f"reading without loading needs a state of schema {FLAT_SINCE} or later (load and save it again)",
            )
        found = dict(zip(outer.column("table").to_pylist(), _payloads(outer), strict=True))
        return [pa.ipc.open_stream(found[n]).read_all() for n in names]
    except FileNotFoundError:
        raise _refuse(path, "file not found") from None
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError, ValueError, KeyError) as exc:
        raise _refuse(path, f"truncated or damaged ({type(exc).__name__}: {exc})") from exc
