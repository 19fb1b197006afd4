"""A state's files read through memory maps: a table's rows without copying them, each file checked
against its digest when first read unless trusted, and the pages read released on demand (:class:`Maps`);
a mapped int64 column searched and gathered a chunk at a time (:class:`Ints`). What
:class:`pmem.graph.StateReader` and a sharded state's union numbering (:mod:`pmem.graph.shards`) read
with."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pmem.graph._persist._sealing import (
    StateFileError,
    _Algorithm,
    _check_file_digest,
    _frames,
    _refuse,
    _sealed_digest,
)
from pmem.graph._persist._state import FLAT_SINCE, FORMAT, READABLE_VERSIONS, _check_algorithm, _payloads

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


def mapped_segment(path: Path, maps: Maps, listed: str | None = None) -> pa.Table:
    """A sealed Arrow file of a sharded state (a log segment, a union numbering, a search index),
    memory-mapped through ``maps`` (and unless it trusts the bytes, checked whole, and against the digest
    its index lists, ``listed``, before Arrow reads it: :meth:`Maps.buffer`)."""
    data = maps.buffer(path, listed, "the sharded state's index")
    try:
        return pa.ipc.open_file(data).read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise _refuse(path, f"truncated or damaged ({type(exc).__name__}: {exc})") from exc


class Maps:
    """The files a reader maps, each through one read-only memory map: Arrow reads the tables without
    copying, and :meth:`release` drops the pages read so far from the process's resident memory (they
    are the file's: a later read faults them in again from the page cache).

    Unless ``trusted``, a file's bytes are checked against the digest it is sealed with when it is first
    asked for (:meth:`buffer`), before anything parses them: a file a read never needs is never hashed,
    and a damaged one is refused (a flipped bit Arrow would parse can crash the process, or answer with
    another value). ``trusted``: the bytes are handed to Arrow unchecked, for a caller that checked them.
    """

    def __init__(self, *, trusted: bool = False) -> None:
        self.trusted = trusted
        self._maps: dict[Path, mmap.mmap] = {}  # each file mapped, by path
        self._buffers: dict[Path, pa.Buffer] = {}  # each file checked (or trusted), by path
        self._algorithms: dict[Path, _Algorithm] = {}  # each file checked: the digest it is sealed with

    def _map(self, path: Path) -> mmap.mmap:
        """The file at ``path``, mapped once (and kept)."""
        if path not in self._maps:
            try:
                with path.open("rb") as f:
                    if not os.fstat(f.fileno()).st_size:  # mmap refuses an empty file
                        raise _refuse(path, "an empty file (truncated)")
                    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except FileNotFoundError:
                raise _refuse(path, "file not found") from None
            except OSError as exc:
                raise _refuse(path, f"unreadable ({type(exc).__name__}: {exc})") from exc
            # a read takes a row here and there: without this, each page fault reads ahead (megabytes a row)
            mapped.madvise(mmap.MADV_RANDOM)
            self._maps[path] = mapped
        return self._maps[path]

    def buffer(self, path: Path, listed: str | None = None, lister: str = "its state") -> pa.Buffer:
        """The bytes of the file at ``path``, mapped: unless trusted, checked first (once) against the
        digest the file is sealed with, every byte read once and its pages released as it goes, and
        against ``listed``, the digest ``lister`` (its state's metadata or index) lists for it (the sealed
        digest is then the bytes' own, so that comparing it names a file of another state).

        Raises:
            StateFileError: the file is missing or empty; unless trusted, its bytes do not match its
                digest, it has none, or it is not the file ``listed`` names.
        """
        mapped = self._map(path)
        if path not in self._buffers:
            if not self.trusted:
                page = mmap.PAGESIZE

                def hashed(end: int) -> None:  # what is hashed need not stay resident
                    mapped.madvise(mmap.MADV_DONTNEED, 0, end - end % page)

                # read ahead while hashing: page by page, a file not in the page cache is read from disk
                # at a tenth of the speed (measured from disk: 26 against 208 MB/s)
                mapped.madvise(mmap.MADV_SEQUENTIAL)
                try:
                    algorithm = _check_file_digest(mapped, path, hashed)
                finally:
                    mapped.madvise(mmap.MADV_DONTNEED)
                    mapped.madvise(mmap.MADV_RANDOM)
                if algorithm is None:
                    if _frames(mapped) is None:  # not framed as an Arrow file: cut short or overwritten
                        raise _refuse(path, "truncated or damaged (not a whole Arrow file)")
                    raise _refuse(path, "it carries no digest to verify (written before schema 3)")
                self._algorithms[path] = algorithm
            self._buffers[path] = pa.py_buffer(mapped)
        if listed is not None and not self.trusted and self.sealed(path) != listed:
            raise _refuse(path, f"its digest is not the one {lister} lists (a file of another state?)")
        return self._buffers[path]

    def sealed(self, path: Path) -> str:
        """The digest the file at ``path`` carries, read from its two frames (mapped, not checked: a read
        of the file through :meth:`buffer` checks it)."""
        try:
            return _sealed_digest(self._map(path))
        except ValueError as exc:
            raise _refuse(path, str(exc)) from None

    def algorithm(self, path: Path) -> _Algorithm | None:
        """The digest the file at ``path`` was checked with; None when trusted or not read yet."""
        return self._algorithms.get(path)

    def release(self) -> None:
        for mapped in self._maps.values():
            mapped.madvise(mmap.MADV_DONTNEED)


def mapped_table(
    path: Path, maps: Maps, listed: str | None = None, lister: str = "the state's metadata"
) -> pa.Table:
    """The table of one file of a directory state (schema 4 or later), memory-mapped through ``maps``
    (see :meth:`Maps.buffer`; ``listed``: the digest ``lister`` lists for it)."""
    data = maps.buffer(path, listed, lister)
    try:
        return pa.ipc.open_file(data).read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise _refuse(path, f"truncated or damaged ({type(exc).__name__}: {exc})") from exc


def mapped_tables(path: Path, names: tuple[str, ...], maps: Maps) -> list[pa.Table]:
    """Tables ``names`` of a state of schema 4 or later (either layout), memory-mapped through ``maps``
    (see :meth:`Maps.buffer`: a state file is checked whole, a directory's files each as it is read,
    here unlisted: :class:`pmem.graph.StateReader` matches them with its metadata)."""
    if path.is_dir():
        return [mapped_table(path / f"{n}.arrow", maps) for n in names]
    data = maps.buffer(path)
    try:
        outer = pa.ipc.open_file(data).read_all()
        meta = outer.schema.metadata or {}
        flat = {str(v).encode() for v in READABLE_VERSIONS if v >= FLAT_SINCE}
        version = meta.get(b"schema_version")
        if meta.get(b"format") != FORMAT.encode() or version not in flat:
            raise _refuse(
                path,
                f"reading without loading needs a state of schema {FLAT_SINCE} or later (load and save it again)",
            )
        algorithm = maps.algorithm(path)
        if algorithm is not None:
            _check_algorithm(algorithm, int(version), path)
        found = dict(zip(outer.column("table").to_pylist(), _payloads(outer), strict=True))
        return [pa.ipc.open_stream(found[n]).read_all() for n in names]
    except StateFileError:
        raise
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError, ValueError, KeyError) as exc:
        raise _refuse(path, f"truncated or damaged ({type(exc).__name__}: {exc})") from exc
