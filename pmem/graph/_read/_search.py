"""Search a saved state's current values without loading it, through a per-part index.

The index holds, for each part of a state (the one part of a file or directory state), each cell with a
current value as its ``key: value`` text hashed into character n-grams (:func:`sparse_char_ngrams`, the
``hashing`` embedder's vectors): one sealed Arrow file a part, ``part-N.arrow`` in the state's search
folder (:func:`search_index_dir`), rows of the key and the vector's nonzero columns and weights.

A query is hashed the same way and scored against each part's rows a batch at a time: a row's score is
its cosine similarity to the query, which depends on that row alone, so the best ``k`` of the union are
the best ``k`` of the parts' best ``k``. Scores are rounded to :data:`SCORE_DECIMALS` decimals and ties
go to the smaller key. Memory: one batch of one part,
and the ``k`` best found so far. Each file records the digest of the part it was built from: an index
of another state, or of this one before it changed, is refused rather than read.

>>> import tempfile
>>> from pmem.graph import ProvenanceGraph, StateReader
>>> g = ProvenanceGraph()
>>> for key, value in [("alice.city", "Paris"), ("bob.city", "Rome"), ("alice.job", "nurse")]:
...     _ = g.apply("accept", key, value, evidence=g.observe(f"{key} is {value}"))
>>> state = tempfile.mkdtemp() + "/state.arrow"
>>> g.save(state)
>>> build_search_index(StateReader(state)).cells
3
>>> [(hit.key, hit.value, round(hit.score, 2)) for hit in StateReader(state).search("which city is Bob in", k=2)]
[('bob.city', 'Rome', 0.44), ('alice.city', 'Paris', 0.29)]
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._identity._hashing import HASHING_DIM, HASHING_NGRAMS, embedding_text, sparse_char_ngrams
from pmem.graph._persist._mapped import mapped_segment
from pmem.graph._persist._sealing import StateFileError
from pmem.graph._read._write_log import LogSegment

if TYPE_CHECKING:
    from collections.abc import Callable

    from pmem.graph._persist._mapped import Maps
    from pmem.graph._read._reader import StateReader

__all__ = ["DEFAULT_DIM", "IndexStats", "SearchIndexError", "build_search_index", "search_index_dir"]

#: Columns of the hashed vectors, unless the build names others.
DEFAULT_DIM = HASHING_DIM
#: The n-gram lengths hashed.
NGRAMS = HASHING_NGRAMS
#: The largest ``dim`` an index takes: its columns are stored as uint16.
MAX_DIM = 1 << 16
#: Decimals a score is rounded to (float32 sums of a few dozen products hold about 7).
SCORE_DECIMALS = 6
INDEX_FORMAT = "pmem-search-index"
INDEX_SCHEMA = pa.schema(
    [("key", pa.string()), ("columns", pa.list_(pa.uint16())), ("weights", pa.list_(pa.float32()))]
)
_REBUILD = "build it again with `pmem index STATE`"


class SearchIndexError(StateFileError):
    """A state's search index is missing, damaged, incomplete, or not the index of the state as it is."""


@dataclass(frozen=True)
class IndexStats:
    """What :func:`build_search_index` wrote: ``cells`` indexed in ``parts`` files of ``bytes`` in all,
    under ``folder``."""

    folder: Path
    parts: int
    cells: int
    bytes: int
    dim: int


def search_index_dir(state: str | Path) -> Path:
    """Where the search index of ``state`` lives: ``STATE/search/`` for a directory or sharded state,
    ``STATE.search/`` beside a state file."""
    path = Path(state)
    return path / "search" if path.is_dir() else path.with_name(f"{path.name}.search")


def part_index_path(state: str | Path, part: int) -> Path:
    """The index file of ``state``'s part ``part``."""
    return search_index_dir(state) / f"part-{part}.arrow"


def build_search_index(
    reader: StateReader, *, dim: int = DEFAULT_DIM, batch_rows: int = 16_384
) -> IndexStats:
    """Index the current values of the state ``reader`` reads, part by part (see the module docstring),
    replacing any index it had. Each part's file is written aside and renamed into place when whole.

    Args:
        reader: the state, open.
        dim: columns of the hashed vectors (at most :data:`MAX_DIM`).
        batch_rows: cells hashed at a time (memory: one such batch).

    Returns:
        What was written.
    """
    if not 0 < dim <= MAX_DIM:
        msg = f"dim={dim}: a search index hashes into 1 to {MAX_DIM} columns"
        raise ValueError(msg)
    folder = search_index_dir(reader.path)
    folder.mkdir(exist_ok=True)
    meta = {"dim": str(dim), "ngrams": f"{NGRAMS[0]},{NGRAMS[1]}"}
    cells = size = 0
    for part in range(reader.parts):
        path = part_index_path(reader.path, part)
        segment = LogSegment(path, INDEX_SCHEMA, INDEX_FORMAT, {**meta, "state": reader.identity(part)})
        try:
            for batch in reader.frontier_batches(batch_rows, part=part):
                segment.write(_hashed(batch, dim))
                cells += batch.num_rows
        except BaseException:
            segment.abandon()
            raise
        segment.close()
        size += path.stat().st_size
    return IndexStats(folder, reader.parts, cells, size, dim)


def _hashed(frontier: pa.RecordBatch, dim: int) -> pa.Table:
    """Index rows of a batch of the frontier: each key with its ``key: value`` text's hashed vector."""
    keys = frontier.column("key").to_pylist()
    values = frontier.column("value").to_pylist()
    texts = [embedding_text(f"{key}: {value}") for key, value in zip(keys, values, strict=True)]
    offsets, columns, weights = sparse_char_ngrams(texts, dim, NGRAMS, np.float32)
    bounds = pa.array(offsets.astype(np.int32), pa.int32())
    column_type, weight_type = INDEX_SCHEMA.field("columns").type, INDEX_SCHEMA.field("weights").type
    return pa.table(
        {
            "key": frontier.column("key"),
            "columns": pa.ListArray.from_arrays(
                bounds, pa.array(columns.astype(np.uint16)), type=column_type
            ),
            "weights": pa.ListArray.from_arrays(bounds, pa.array(weights), type=weight_type),
        },
        schema=INDEX_SCHEMA,
    )


class PartIndexes:
    """A state's per-part index files, opened for search by :class:`~pmem.graph.StateReader`."""

    def __init__(self, state: Path, identities: list[str], maps: Maps) -> None:
        self._tables: list[pa.Table] = []  # each part's index, mapped
        self.dim = 0
        for part, identity in enumerate(identities):
            path = part_index_path(state, part)
            if not path.exists():
                what = "no search index" if part == 0 else f"no index of part {part} (an unfinished build?)"
                msg = f"{search_index_dir(state)}: {what}: {_REBUILD}"
                raise SearchIndexError(msg)
            try:
                table = mapped_segment(path, maps)
            except StateFileError as exc:
                raise SearchIndexError(f"{exc}: {_REBUILD}") from None
            meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
            if meta.get("format") != INDEX_FORMAT or not table.schema.equals(INDEX_SCHEMA):
                msg = f"{path}: not a P-Mem search index: {_REBUILD}"
                raise SearchIndexError(msg)
            if meta.get("state") != identity:
                msg = f"{path}: the index of another state, or of this one before it changed: {_REBUILD}"
                raise SearchIndexError(msg)
            dim = int(meta["dim"]) if meta.get("dim", "").isdigit() else 0  # 0: damaged, refused below
            if (
                meta.get("ngrams") != f"{NGRAMS[0]},{NGRAMS[1]}"
                or not 0 < dim <= MAX_DIM
                or (self.dim and dim != self.dim)
            ):
                msg = f"{path}: hashed unlike the other parts, or unlike this version's search: {_REBUILD}"
                raise SearchIndexError(msg)
            self.dim = dim
            self._tables.append(table)

    def search(
        self, query: str, k: int, min_score: float | None, release: Callable[[], None]
    ) -> list[tuple[str, float]]:
        """The ``k`` best (key, score) of every part, best first (ties: the smaller key first), none
        scoring 0 or below ``min_score``; ``release`` is called after each batch (its pages are read)."""
        _, columns, weights = sparse_char_ngrams([embedding_text(query)], self.dim, NGRAMS, np.float32)
        vector = np.zeros(self.dim, np.float32)
        vector[columns] = weights
        best = _Best(k, min_score)
        for table in self._tables:
            for batch in table.to_batches():
                # rounded: rows that tie (the same n-grams but for ones the query lacks) differ in the last
                # bits with the order their columns are summed in, which ranking must not see
                best.offer(batch, np.round(_scores(batch, vector).astype(np.float64), SCORE_DECIMALS))
                release()
        return best.hits()


def _scores(batch: pa.RecordBatch, query: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``query``: its own cells summed, so that a row scores the same in
    whatever batch or part it is. SciPy's CSR product where SciPy is installed (the evaluation extra);
    NumPy's, the same scores to float32 rounding and some 40 times slower, on the light install."""
    columns = cast("pa.ListArray[Any]", batch.column("columns"))
    offsets = columns.offsets.to_numpy()
    offsets = offsets - offsets[0]
    flat = pc.list_flatten(columns).to_numpy(zero_copy_only=False)
    weights = pc.list_flatten(batch.column("weights")).to_numpy(zero_copy_only=False)
    sparse = _scipy_sparse()
    if sparse is not None:
        matrix = sparse.csr_matrix((weights, flat, offsets), shape=(batch.num_rows, len(query)))
        return np.asarray(matrix @ query)
    # never an empty row (its text holds its key): reduceat sums each row's own cells, the last row's
    # with an appended 0 (the sum unchanged)
    products = np.append(weights * query[flat.astype(np.int64)], np.float32(0))
    return np.add.reduceat(products, offsets[:-1]) if batch.num_rows else np.zeros(0, np.float32)


def _scipy_sparse() -> Any:
    """``scipy.sparse``, or None on the light install (where it is not, or its import is blocked)."""
    try:
        import scipy.sparse  # an optional dependency: imported where it is used
    except ImportError:
        return None
    return scipy.sparse


class _Best:
    """The ``k`` best rows offered so far, as (score, key), ties broken by the smaller key."""

    def __init__(self, k: int, min_score: float | None) -> None:
        self._k = k
        self._floor = min_score
        self._heap: list[tuple[float, _Reversed]] = []  # the worst kept on top

    def offer(self, batch: pa.RecordBatch, scores: np.ndarray) -> None:
        keep = scores > 0
        if self._floor is not None:
            keep &= scores >= self._floor
        if len(self._heap) == self._k:  # a row must at least tie the worst kept
            keep &= scores >= self._heap[0][0]
        rows = np.flatnonzero(keep)
        if len(rows) > self._k:  # the batch's k best, and every row tied with its k-th
            cut = -np.partition(-scores[rows], self._k - 1)[self._k - 1]
            rows = rows[scores[rows] >= cut]
        keys = batch.column("key").take(rows).to_pylist()
        for row, key in zip(rows.tolist(), keys, strict=True):
            item = (float(scores[row]), _Reversed(str(key)))
            if len(self._heap) < self._k:
                heapq.heappush(self._heap, item)
            elif item > self._heap[0]:
                heapq.heapreplace(self._heap, item)

    def hits(self) -> list[tuple[str, float]]:
        return [(item.key, score) for score, item in sorted(self._heap, reverse=True)]


@dataclass(frozen=True, order=False)
class _Reversed:
    """A key ordered backwards, so that a heap of (score, key) keeps the smaller key of a tie."""

    key: str

    def __lt__(self, other: _Reversed) -> bool:
        return self.key > other.key

    def __gt__(self, other: _Reversed) -> bool:
        return self.key < other.key
