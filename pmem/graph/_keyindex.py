"""Key names to key ids for a whole batch at once: the graph's key names as sorted 64-bit hashes.

:func:`~pmem.graph._bulk.apply_batch` looks up every distinct key of a batch. One dict probe each costs
about a microsecond once the key dict outgrows the CPU caches (a million keys), which made the lookup
the largest single cost of a batch. The index answers a batch with one polars hash of the names, one
numpy ``searchsorted`` and one Arrow comparison of the names it found.

It is exact. A name whose hash is not indexed is no key (equal names hash equally). A hash that is
indexed is confirmed by comparing the names; a name that fails the comparison (two names sharing a
64-bit hash) is looked up in the graph's dict, which stays the one authority on key ids.

A key id, once given, is never removed or renumbered, so the index covers the ids below ``covered``
and catches up with the names admitted since (by ``apply``, or by a batch) on each lookup.

>>> from pmem.graph import ProvenanceGraph
>>> g = ProvenanceGraph()
>>> _ = g.apply("accept", "a", "1"), g.apply("accept", "b", "2")
>>> key_ids(g, pa.array(["b", "c", "a"])).tolist()
[1, -1, 0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph

_NAMES = pa.large_string()


def _hashes(names: pa.Array[Any]) -> NDArray[np.uint64]:
    import polars as pl  # here, not at import: `import pmem.graph` stays free of it (only batches hash)

    return pl.Series(names).hash(seed=0).to_numpy()


class KeyIndex:
    """Sorted hashes of the first ``covered`` key names of one graph, with their ids and the names."""

    def __init__(self, names: list[str]) -> None:
        self.source = names  # the graph's own list: the index answers for that list only
        self.covered = 0
        self.hashes: NDArray[np.uint64] = np.empty(0, np.uint64)
        self.ids: NDArray[np.int64] = np.empty(0, np.int64)  # key id of each sorted hash
        self.names: pa.Array[Any] = pa.array([], _NAMES)  # by key id

    def catch_up(self) -> None:
        """Index the names admitted since the last lookup."""
        start = self.covered
        if len(self.source) == start:
            return
        new = pa.array(self.source[start:], _NAMES)
        h = _hashes(new)
        order = np.argsort(h, kind="stable")
        h = h[order]
        at = np.searchsorted(self.hashes, h)  # merge: one memmove, not a sort of the whole index
        self.hashes = np.insert(self.hashes, at, h)
        self.ids = np.insert(self.ids, at, order + start)
        self.names = pa.concat_arrays([self.names, new])
        self.covered = len(self.source)

    def lookup(self, names: pa.Array[Any], kid: dict[str, int]) -> NDArray[np.int64]:
        """The key id of each name (no nulls), -1 for a name that is no key; ``kid``: the graph's dict."""
        self.catch_up()
        out = np.full(len(names), -1, np.int64)
        if not len(names) or not self.covered:
            return out
        h = _hashes(names)
        order = np.argsort(h)  # sorted queries: searchsorted walks the index forward, cache-friendly (2-3x)
        h = h[order]
        at = np.minimum(np.searchsorted(self.hashes, h), len(self.hashes) - 1)
        hit = self.hashes[at] == h
        found = order[hit]
        if not len(found):
            return out
        ids = self.ids[at[hit]]
        take = pa.array(found, pa.int64())
        same = pc.equal(names.take(take).cast(_NAMES), self.names.take(pa.array(ids, pa.int64())))
        confirmed = same.to_numpy(zero_copy_only=False)
        out[found[confirmed]] = ids[confirmed]
        shared = found[~confirmed]  # a hash shared by two names: only the dict can tell them apart
        if len(shared):
            texts = cast("list[str]", names.take(pa.array(shared, pa.int64())).to_pylist())
            out[shared] = [kid.get(t, -1) for t in texts]
        return out


def key_ids(graph: ProvenanceGraph, names: pa.Array[Any]) -> NDArray[np.int64]:
    """The key id of each of ``names`` (a string array without nulls) in ``graph``; -1: not a key."""
    index = graph._key_index
    if index is None or index.source is not graph.storage.key_names:
        index = graph._key_index = KeyIndex(graph.storage.key_names)
    return index.lookup(names, graph.storage.kid)
