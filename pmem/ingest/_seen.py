"""The event ids a stream has delivered so far, each with the row that first held it, in bounded memory.

Ids are unique: a row repeating an earlier row's id is refused (``duplicate id``), however long ago the
earlier row came. A dict of every id grows with the stream (about 100 bytes an id: a gigabyte at ten
million). :class:`SeenIds` holds the newest ``in_memory`` ids in a dict; when it is full, they are written
to a folder as a **run**: an Arrow file of (hash, id, row) sorted by the id's 64-bit hash, memory-mapped
from then on. A batch's ids are looked up in every run at once (a binary search of their hashes), and a
matching hash is confirmed on the id's text, so a hash collision never refuses a row. Memory: the dict,
and the pages of the runs a lookup touches.

>>> import tempfile
>>> seen = SeenIds(Path(tempfile.mkdtemp()), in_memory=2)
>>> seen.first_rows(["a", "b", "c"], [1, 2, 3])  # new ids: their own rows; "a" and "b" spill to a run
[1, 2, 3]
>>> seen.first_rows(["b", "d", "d"], [4, 5, 6])  # "b" found in the run; the second "d" in the dict
[2, 5, 5]
"""

from __future__ import annotations

import mmap
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash

#: Ids held in memory before they are written as a run (about 100 MB).
IN_MEMORY = 1_000_000
_HASH: pa.DataType = pa.uint64()
_TEXT: pa.DataType = pa.large_string()
_ROW: pa.DataType = pa.int64()
_RUN_SCHEMA = pa.schema([("hash", _HASH), ("id", _TEXT), ("row", _ROW)])


def _hashes(ids: list[str]) -> np.ndarray:
    return np.fromiter((xxhash.xxh3_64_intdigest(i.encode()) for i in ids), np.uint64, len(ids))


class _Run:
    """One run of ids, mapped: its hashes (sorted), ids and rows."""

    def __init__(self, path: Path) -> None:
        with path.open("rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        table = pa.ipc.open_file(pa.py_buffer(self._map)).read_all().combine_chunks()
        self._hash = table.column("hash").chunk(0).to_numpy(zero_copy_only=True)
        self._id = table.column("id").chunk(0)
        self._row = table.column("row").chunk(0).to_numpy(zero_copy_only=True)

    def __len__(self) -> int:
        return len(self._row)

    def rows_of(self, ids: list[str], hashes: np.ndarray) -> np.ndarray:
        """For each id, the row this run holds it at; -1 where it holds none."""
        found = np.full(len(ids), -1, np.int64)
        n = len(self._hash)
        at = np.searchsorted(self._hash, hashes)
        hit = at < n
        hit[hit] = self._hash[at[hit]] == hashes[hit]  # only these can be repeats
        for i in np.flatnonzero(hit).tolist():
            j = int(at[i])
            while j < n and self._hash[j] == hashes[i]:  # the id's text decides (hashes may collide)
                if self._id[j].as_py() == ids[i]:
                    found[i] = self._row[j]
                    break
                j += 1
        return found


class SeenIds:
    """Every id delivered so far with its first row: the newest ``in_memory`` in a dict, the others in
    runs under ``folder`` (see the module doc). Without a folder, every id stays in the dict (``held``,
    when given, is that dict: a caller's own memory of ids, updated in place).

    Args:
        folder: where runs are written (emptied first: the runs are rebuilt from the ids, never resumed).
        in_memory: the ids held in the dict before it is written as a run.
        held: a caller's dict of ids already seen (id -> row), used as the dict (no folder only).
    """

    def __init__(
        self, folder: Path | None = None, in_memory: int = IN_MEMORY, held: dict[str, int] | None = None
    ) -> None:
        if folder is not None and held is not None:
            msg = "SeenIds: a caller's dict of ids is kept whole; give no folder with it"
            raise ValueError(msg)
        self._folder = folder
        self._in_memory = in_memory
        self._recent: dict[str, int] = {} if held is None else held  # the newest ids -> their rows
        self._runs: list[_Run] = []  # the older ones, written and mapped
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)

    def first_rows(self, ids: list[str], rows: list[int]) -> list[int]:
        """For each id with its row, in order: the row that first held the id (its own row when it is
        new, which it then is for the ids after it)."""
        in_runs = np.full(len(ids), -1, np.int64)
        if self._runs and ids:
            hashes = _hashes(ids)
            # looked up in hash order: each run's binary searches then walk its pages in one direction
            order = np.argsort(hashes, kind="stable")
            by_hash, sorted_hashes = [ids[i] for i in order.tolist()], hashes[order]
            found = np.full(len(ids), -1, np.int64)
            for run in self._runs:
                where = np.flatnonzero(found < 0)
                if not len(where):
                    break
                found[where] = run.rows_of([by_hash[i] for i in where.tolist()], sorted_hashes[where])
            in_runs[order] = found
        recent = self._recent
        first = [
            int(older) if older >= 0 else recent.setdefault(event_id, row)
            for event_id, row, older in zip(ids, rows, in_runs.tolist(), strict=True)
        ]
        if self._folder is not None and len(recent) >= self._in_memory:
            self._spill()
        return first

    def __len__(self) -> int:
        return len(self._recent) + sum(len(run) for run in self._runs)

    def close(self) -> None:
        """Forget the runs and remove their folder (an attempt's scratch: the next rebuilds it)."""
        self._runs.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _spill(self) -> None:
        """Write the dict's ids as a run, sorted by hash, and empty the dict."""
        assert self._folder is not None
        ids = list(self._recent)
        hashes = _hashes(ids)
        order = np.argsort(hashes, kind="stable")
        table = pa.table(
            [
                pa.array(hashes[order], pa.uint64()),
                pa.array(ids, pa.large_string()).take(pa.array(order, pa.int64())),
                pa.array(np.fromiter(self._recent.values(), np.int64, len(ids))[order], pa.int64()),
            ],
            schema=_RUN_SCHEMA,
        )
        # written plainly, not synced: the runs are rebuilt from the ids files by a resumed ingest
        path = self._folder / f"run-{len(self._runs):06d}.arrow"
        with pa.ipc.new_file(str(path), _RUN_SCHEMA) as writer:
            writer.write_table(table)
        self._runs.append(_Run(path))
        self._recent.clear()
