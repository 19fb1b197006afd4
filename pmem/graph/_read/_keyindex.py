"""The batch path's index of a graph: key names to key ids at once, and its versions' value objects.

:func:`~pmem.graph._ops._bulk.apply_batch` looks up the key of every operation row of a batch. One dict probe
each costs about a microsecond once the key dict outgrows the CPU caches (a million keys). The index
answers a batch with one hash of the names (:func:`name_hashes`: numpy over the Arrow buffers, so the
core needs no optional library), a few numpy gathers into an open-addressing table
(linear probing at a load of at most one half; a slot holds the high half of a name's 64-bit hash as a
fingerprint and the key id, so a probe reads 8 bytes) and one Arrow comparison of the names it found.

It is exact. A name none of whose probed slots holds its fingerprint is no key (equal names hash
equally, and nothing is ever removed from the table). A name whose fingerprint is found is confirmed by
comparing the names; one that fails the comparison (two names sharing a fingerprint) is looked up in
the graph's dict, which stays the one authority on key ids.

A key id, once given, is never removed or renumbered, so the index covers the ids below ``covered``
and catches up with the names admitted since (by ``apply``, or by a batch) on each lookup; a batch hands
over the names it admits with their hashes (:meth:`KeyIndex.add`), which it has computed anyway.

The index also records, per version a batch made, the address of its value object
(:attr:`KeyIndex.value_addr`), with which the next batch finds a head's value without reading the
graph's value list. The graph does not save the index; a loaded graph builds its own.

>>> from pmem.graph import ProvenanceGraph
>>> g = ProvenanceGraph()
>>> _ = g.apply("accept", "a", "1"), g.apply("accept", "b", "2")
>>> key_ids(g, pa.array(["b", "c", "a"])).tolist()
[1, -1, 0]
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph

_NAMES = pa.large_string()
_MIN_SLOTS = 1 << 10
_LOW = np.uint64(0xFFFFFFFF)
_HIGH = np.uint64(0xFFFFFFFF00000000)
# The name hash's constants: the golden ratio's and MurmurHash3's 64-bit finalizer multipliers.
_SEED = np.uint64(0x9E3779B97F4A7C15)
_MUL_A = np.uint64(0xFF51AFD7ED558CCD)
_MUL_B = np.uint64(0xC4CEB9FE1A85EC53)
_S32, _S33 = np.uint64(32), np.uint64(33)
#: the bytes of a name's last word, by how many are left (a word holds 8): the rest are zeroed
_TAIL = np.array([0, *((1 << (8 * r)) - 1 for r in range(1, 8)), (1 << 64) - 1], np.uint64)
_WORD = np.dtype("<u8")


def _name_bytes(
    names: pa.Array[Any] | pa.ChunkedArray[Any],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.uint8]]:
    """Each name's start and length in one copy of the names' UTF-8 bytes, padded with 8 zero bytes
    (so that the last word of every name can be read as a whole)."""
    array = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    width = np.dtype(np.int64 if pa.types.is_large_string(array.type) else np.int32)
    _, offsets, data = array.buffers()
    if offsets is None:  # an empty array may have no buffers
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(8, np.uint8)
    bounds = np.frombuffer(memoryview(offsets), width, len(array) + 1, array.offset * width.itemsize)
    at = bounds.astype(np.int64)
    first, last = int(at[0]), int(at[-1])
    raw = np.zeros(last - first + 8, np.uint8)
    if data is not None and last > first:
        raw[: last - first] = np.frombuffer(memoryview(data), np.uint8, last - first, first)
    return at[:-1] - first, np.diff(at), raw


def _hashes(names: pa.Array[Any] | pa.ChunkedArray[Any]) -> NDArray[np.uint64]:
    """The 64-bit hash of each name (of its UTF-8 bytes: ``string`` and ``large_string`` alike).

    Column-wise over the Arrow buffers, with numpy alone (the core's dependencies): each name is read 8
    bytes at a time, its last word zero-padded, every word mixed into a state seeded with the length by
    one multiply-xorshift round, and the state finished with MurmurHash3's 64-bit finalizer. Python
    loops over the longest name's words, not over names. Two names may share a hash (the index compares
    names to confirm), so only the spread matters: the slot is the low bits, the fingerprint the high.

    >>> h = _hashes(pa.array(["apple_1.location", "", "apple_1.location"]))
    >>> bool(h[0] == h[2]), bool(h[0] != h[1]), h.dtype.name
    (True, True, 'uint64')
    >>> bool((_hashes(pa.array(["é"], pa.large_string())) == _hashes(pa.array(["é"]))).all())
    True
    """
    start, length, raw = _name_bytes(names)
    # every byte offset of the padded copy read as a little-endian word (unaligned reads: numpy copies)
    words = np.ndarray((len(raw) - 7,), _WORD, raw, 0, (1,))
    with np.errstate(over="ignore"):  # the arithmetic is modulo 2**64 by design
        h = (length.astype(np.uint64) + np.uint64(1)) * _SEED
        rest, at = length, start  # bytes left and where they start, of the names still being read
        reading: NDArray[np.int64] | None = None  # their positions (None: all of them)
        while len(rest):
            word = words[at]
            if (rest < 8).any():
                word &= _TAIL[np.clip(rest, 0, 8)]
            mixed = ((h if reading is None else h[reading]) ^ word) * _MUL_A
            mixed ^= mixed >> _S32
            if reading is None:
                h = mixed
            else:
                h[reading] = mixed
            more = rest > 8
            if not more.all():
                keep = np.flatnonzero(more)
                reading = keep if reading is None else reading[keep]
                rest, at = rest[keep], at[keep]
            rest, at = rest - 8, at + 8
        h ^= h >> _S33
        h *= _MUL_B
        h ^= h >> _S33
        h *= _MUL_A
        h ^= h >> _S33
    return h


def name_hashes(names: pa.Array[Any] | pa.ChunkedArray[Any]) -> NDArray[np.uint64]:
    """:func:`_hashes`, for callers that hand them to :meth:`KeyIndex.lookup` and :meth:`KeyIndex.add`."""
    return _hashes(names)


def _fingerprints(hashes: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The high half of each hash, where a slot keeps it (as never 0: a slot of 0 is empty)."""
    high = hashes & _HIGH
    return np.where(high == 0, np.uint64(1 << 32), high)


class KeyIndex:
    """The first ``covered`` key names of one graph in a hash table (key ids below 2**32, which the
    table's slots hold in 32 bits), with the names, and the value addresses of batch-made versions."""

    def __init__(self, names: list[str]) -> None:
        self.source = names  # the graph's own list: the index answers for that list only
        self.covered = 0
        self.by_id: NDArray[np.uint64] = np.empty(0, np.uint64)  # each key's hash
        # a slot holds a key's fingerprint (the high half of its hash) and its id (the low half), 0 when
        # empty: a probe reads 8 bytes; the slot is the hash's low bits
        self.table: NDArray[np.uint64] = np.zeros(_MIN_SLOTS, np.uint64)
        # the names by key id: `main`, then the few admitted since it was last extended (`tail`), so
        # that admitting a name copies the whole column only once the tail has grown to a quarter of it
        self.main: pa.Array[Any] = pa.array([], _NAMES)
        self.tail: pa.Array[Any] = pa.array([], _NAMES)
        # Per version id, the address (``id``) of its value object where a batch made the version (0:
        # unknown): a batch's values are interned, so a later batch finds a head's value among its own
        # by identity, without reading the value list. The index keeps it as the graph's one unsaved
        # batch-side state. It holds because the graph never replaces the value of a version that can
        # be a head (erasure blanks only versions no operation creates any more).
        self.value_addr: array[int] = array("q")

    def catch_up(self) -> None:
        """Index the names admitted since the last lookup."""
        if len(self.source) > self.covered:
            new = pa.array(self.source[self.covered :], _NAMES)
            self.add(new, _hashes(new))

    def add(self, names: pa.Array[Any], hashes: NDArray[np.uint64]) -> None:
        """Index ``names``, the graph's key names from id ``covered`` on, with their ``_hashes``."""
        if not len(names):
            return
        first = self.covered
        self.covered += len(names)
        if len(self.source) < self.covered:
            msg = "KeyIndex.add: names beyond the graph's keys"
            raise ValueError(msg)
        self.by_id = np.concatenate([self.by_id, hashes])
        if 2 * self.covered > len(self.table):  # keep the load at most one half
            size = len(self.table)
            while 2 * self.covered > size:
                size *= 2
            self.table = np.zeros(size, np.uint64)
            self._insert(self.by_id, np.arange(self.covered, dtype=np.uint64))
        else:
            self._insert(hashes, np.arange(first, self.covered, dtype=np.uint64))
        self.tail = pa.concat_arrays([self.tail, names.cast(_NAMES)])
        if 4 * len(self.tail) > len(self.main):
            self.main = pa.concat_arrays([self.main, self.tail])
            self.tail = pa.array([], _NAMES)

    def _insert(self, hashes: NDArray[np.uint64], ids: NDArray[np.uint64]) -> None:
        """Linear probing for all at once: every pending id claims its slot if empty; of several
        claimants of one slot the one read back holds it, and the others probe on."""
        table = self.table
        mask = len(table) - 1
        entry = _fingerprints(hashes) | ids
        slot = (hashes & np.uint64(mask)).astype(np.int64)
        pending = np.arange(len(ids))
        while len(pending):
            at = slot[pending]
            free = table[at] == 0
            claim, where = pending[free], at[free]
            table[where] = entry[claim]
            placed = np.zeros(len(ids), np.bool_)
            placed[claim[table[where] == entry[claim]]] = True
            pending = pending[~placed[pending]]
            slot[pending] = (slot[pending] + 1) & mask

    def _find(self, hashes: NDArray[np.uint64]) -> NDArray[np.int64]:
        """The id in the first slot probed whose fingerprint is each hash's, -1 where none is."""
        out = np.full(len(hashes), -1, np.int64)
        table = self.table
        mask = len(table) - 1
        fingerprint = _fingerprints(hashes)
        slot = (hashes & np.uint64(mask)).astype(np.int64)
        pending = np.arange(len(hashes))
        while len(pending):
            entry = table[slot[pending]]
            hit = (entry & _HIGH) == fingerprint[pending]
            out[pending[hit]] = (entry[hit] & _LOW).astype(np.int64)
            pending = pending[~hit & (entry != 0)]
            slot[pending] = (slot[pending] + 1) & mask
        return out

    def value_addresses(self, versions: NDArray[np.int64]) -> NDArray[np.int64]:
        """The recorded value address of each version (0: none recorded; NONE versions: 0)."""
        known = np.frombuffer(self.value_addr, np.int64) if len(self.value_addr) else np.zeros(1, np.int64)
        inside = (versions >= 0) & (versions < len(self.value_addr))
        return np.where(inside, known[np.where(inside, versions, 0)], 0)

    def record_values(self, first: int, addresses: NDArray[np.int64]) -> None:
        """Record the value addresses of versions ``first``, ``first + 1``, ... (those before: unknown)."""
        gap = first - len(self.value_addr)
        if gap < 0:
            del self.value_addr[first:]
        elif gap:
            self.value_addr.frombytes(bytes(8 * gap))
        self.value_addr.frombytes(np.ascontiguousarray(addresses, np.int64).data.cast("B"))

    @property
    def names(self) -> pa.Array[Any]:
        """The indexed names by key id, as one array."""
        return pa.concat_arrays([self.main, self.tail])

    @property
    def hashes(self) -> NDArray[np.uint64]:
        """The indexed hashes, sorted (for inspection); ``ids``: the key id of each."""
        return self.by_id[self.ids]

    @property
    def ids(self) -> NDArray[np.int64]:
        return np.argsort(self.by_id, kind="stable")

    def _same_names(
        self, names: pa.Array[Any], at: NDArray[np.int64], ids: NDArray[np.int64]
    ) -> NDArray[np.bool_]:
        """Whether each name ``names[at]`` is the name of the key id beside it (ids below ``covered``)."""
        out = np.empty(len(ids), np.bool_)
        m = len(self.main)
        for part, stored, base in ((ids < m, self.main, 0), (ids >= m, self.tail, m)):
            i = np.flatnonzero(part)
            if len(i):
                theirs = stored.take(pa.array(ids[i] - base, pa.int64()))
                mine = names.take(pa.array(at[i], pa.int64())).cast(_NAMES)
                out[i] = pc.equal(mine, theirs).to_numpy(zero_copy_only=False)
        return out

    def lookup(
        self, names: pa.Array[Any], kid: dict[str, int], hashes: NDArray[np.uint64] | None = None
    ) -> NDArray[np.int64]:
        """The key id of each name (no nulls), -1 for a name that is no key; ``kid``: the graph's dict.

        ``hashes``: the names' ``_hashes``, when the caller has them.
        """
        self.catch_up()
        if not len(names) or not self.covered:
            return np.full(len(names), -1, np.int64)
        out = self._find(_hashes(names) if hashes is None else hashes)
        found = np.flatnonzero(out >= 0)
        if not len(found):
            return out
        confirmed = self._same_names(names, found, out[found])
        shared = found[~confirmed]  # a fingerprint shared by two names: only the dict tells them apart
        if len(shared):
            texts = cast("list[str]", names.take(pa.array(shared, pa.int64())).to_pylist())
            out[shared] = [kid.get(t, -1) for t in texts]
        return out


def index_of(graph: ProvenanceGraph) -> KeyIndex:
    """The graph's key index (built on first use; it is not saved)."""
    return graph.storage.keys.index()


def key_ids(
    graph: ProvenanceGraph, names: pa.Array[Any], hashes: NDArray[np.uint64] | None = None
) -> NDArray[np.int64]:
    """The key id of each of ``names`` (a string array without nulls) in ``graph``; -1: not a key."""
    return graph.storage.keys.ids(names, hashes)
