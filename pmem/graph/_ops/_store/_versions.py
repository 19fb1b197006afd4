"""The versions' columns: key, value, status, valid interval, creating evidence, supersedes target;
alternative-of target, the arrival chain where it leaves the supersedes chain, extra support and
premises sparse."""

from __future__ import annotations

import operator
from array import array
from collections.abc import Iterable, Mapping
from itertools import repeat
from types import MappingProxyType
from typing import Any, cast

import numpy as np
import pyarrow as pa

from pmem.graph._ops._codes import ACTIVE, ERASED, NONE, SUPERSEDED, UNDONE
from pmem.graph._ops._store._arrays import VersionArrays, extend, ints, own, restore_columns, typed


class VersionColumns:
    """Every version by id (public id ``v<n>``).

    A version stored as active that is no longer its key's head was closed lazily: it *is* superseded,
    closed when its newest superseder arrived (:meth:`closing`); reads and the state tables write it out
    so. Which versions are heads the keys know: the methods that need it take the head.

    >>> versions = VersionColumns()
    >>> versions.append_open(0, "$30k", ACTIVE, 1, NONE, NONE)
    0
    >>> versions.value(0), versions.chain(0)
    ('$30k', [0])
    """

    def __init__(self) -> None:
        self.v_key: array[int] = array("q")
        self.v_value: list[str] = []
        self.v_status: array[int] = array("q")
        self.v_from: array[int] = array("q")
        self.v_to: array[int] = array("q")
        self.v_ev: array[int] = array("q")  # creating evidence: the version's first supported-by edge
        self.v_prev: array[int] = array("q")  # supersedes edge target
        # previous version of the same key (the per-key arrival chain), kept only where it differs from
        # the supersedes target, which is the common case (sparse)
        self.v_older: dict[int, int] = {}
        self.v_alt: dict[int, int] = {}  # alternative-of edge target (sparse)
        self.v_extra_support: dict[int, int] = {}  # support beyond the creating assertion (sparse)
        # premises (sparse): version -> ((premise key id, the premise's head when asserted), ...) from the
        # latest assertion of that version with depends_on
        self.dep: dict[int, tuple[tuple[int, int], ...]] = {}

    # ------------------ writing

    def append_open(self, kid: int, value: str, status: int, seq: int, ev: int, prev: int) -> int:
        """Append an open version of key ``kid`` superseding ``prev`` (created at ``seq`` from evidence
        ``ev``), its key's newest unless :meth:`link_older` then says which arrived before it (the key
        knows that version once it has the new one's id); its id."""
        vid = len(self.v_key)
        self.v_key.append(kid)
        self.v_value.append(value)
        self.v_status.append(status)
        self.v_from.append(seq)
        self.v_to.append(NONE)
        self.v_ev.append(ev)
        self.v_prev.append(prev)
        return vid

    def link_older(self, vid: int, older: int) -> None:
        """The version of ``vid``'s key that arrived just before it is ``older`` (not the one it supersedes)."""
        self.v_older[vid] = older

    def holds(self, vid: int, value: str) -> bool:
        """Whether version ``vid`` (NONE: none) holds ``value``."""
        return vid != NONE and self.v_value[vid] == value

    def close(self, vid: int, status: int, seq: int) -> None:
        """Close version ``vid`` at ``seq`` with ``status`` (superseded, contradicted, revoked)."""
        self.v_status[vid] = status
        self.v_to[vid] = seq

    def close_at(self, vids: Iterable[int], seq: int) -> None:
        """Close ``vids`` at ``seq``, their statuses kept (open alternatives: never authoritative)."""
        v_to = self.v_to
        for v in vids:
            v_to[v] = seq

    def reopen(self, vid: int) -> None:
        """Make version ``vid`` active and open again (a rollback to it)."""
        self.v_status[vid] = ACTIVE
        self.v_to[vid] = NONE

    def set_status(self, vid: int, status: int) -> None:
        self.v_status[vid] = status

    def insert_below(self, above: int, vid: int) -> None:
        """Version ``above`` now supersedes ``vid`` (entering the history under it); ``above`` keeps its
        arrival chain."""
        if above not in self.v_older:
            self.v_older[above] = self.v_prev[above]
        self.v_prev[above] = vid

    def promote(self, vid: int, incumbent: int) -> None:
        """Alternative ``vid`` won its contest: active, superseding the contradicted ``incumbent`` (its
        arrival-chain link was stored explicitly at creation: an alternative has no supersedes target)."""
        self.v_status[vid] = ACTIVE
        self.v_prev[vid] = incumbent

    def set_alternative_of(self, vid: int, head: int) -> None:
        self.v_alt[vid] = head

    def add_support(self, vid: int) -> None:
        """Count one more assertion of version ``vid``."""
        self.v_extra_support[vid] = self.v_extra_support.get(vid, 0) + 1

    def set_premises(self, vid: int, premises: tuple[tuple[int, int], ...]) -> None:
        self.dep[vid] = premises

    def move(self, vids: Iterable[int], kid: int) -> None:
        """Versions ``vids`` belong to key ``kid`` now (an unmerge)."""
        for v in vids:
            self.v_key[v] = kid

    def open_window(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Extend the status, supersedes and valid_to columns by ``n`` placeholder versions (active, no
        link, open) and return writable views of the three whole columns: a column-wise writer reads and
        writes old and new versions through them in place. The views must be released (deleted) before
        :meth:`close_window`, which resizes the columns."""
        for col, fill in ((self.v_status, ACTIVE), (self.v_prev, NONE), (self.v_to, NONE)):
            col.frombytes(np.full(n, fill, np.int64).data.cast("B"))
        return (
            np.frombuffer(self.v_status, np.int64),
            np.frombuffer(self.v_prev, np.int64),
            np.frombuffer(self.v_to, np.int64),
        )

    def close_window(
        self, end: int, key: np.ndarray, values: list[str], valid_from: np.ndarray, ev: np.ndarray
    ) -> None:
        """End the window: the three columns keep their first ``end`` rows (the created versions packed
        at the front of the placeholders), and the created versions' key, value, seq and evidence are
        appended to the other columns."""
        for col in (self.v_status, self.v_prev, self.v_to):
            del col[end:]
        extend(self.v_key, key)
        self.v_value.extend(values)
        extend(self.v_from, valid_from)
        extend(self.v_ev, ev)

    def record_links(
        self, older: Iterable[tuple[int, int]], alternative_of: Iterable[tuple[int, int]]
    ) -> None:
        """Created versions' arrival-chain links (where kept apart) and alternative-of edges, in order."""
        self.v_older.update(older)
        self.v_alt.update(alternative_of)

    def count_support(self, counted: list[int], counts: np.ndarray) -> None:
        """``counts`` more assertions of each of the versions ``counted`` (in the order of their first support)."""
        have = np.fromiter(map(self.v_extra_support.get, counted, repeat(0)), np.int64, len(counted))
        self.v_extra_support.update(zip(counted, (have + counts).tolist(), strict=True))

    def replay_into(
        self,
        kid: int,
        versions: list[int],
        source: VersionColumns,
        created: Iterable[int],
        erased_seqs: set[int],
        seq: int,
    ) -> tuple[dict[int, int], int]:
        """Make key ``kid``'s ``versions`` what a replay of its operations gave in ``source`` (a scratch
        store's versions): ``created`` are the source versions the replayed operations created, each
        matched to the version here of the same creating seq (a new one appended where there is none).
        A version matched by none becomes undone at ``seq``, or erased (its value blanked) when its
        creating seq is in ``erased_seqs``. Statuses, intervals, links, support and the arrival chain
        are rewritten; the source -> here version map (NONE -> NONE) and the key's newest version."""
        by_from = {self.v_from[v]: v for v in versions}  # a version is known by its creating operation's seq
        vmap: dict[int, int] = {NONE: NONE}  # scratch version -> this store's
        for sv in created:
            v = by_from.get(source.v_from[sv])
            if v is None:  # created now by an operation that created nothing before
                v = len(self.v_key)
                self.v_value.append(source.v_value[sv])
                for column, cell in (
                    (self.v_key, kid),
                    (self.v_status, 0),
                    (self.v_from, source.v_from[sv]),
                    (self.v_to, NONE),
                    (self.v_ev, source.v_ev[sv]),
                    (self.v_prev, NONE),
                ):
                    column.append(cell)
                versions.append(v)
            vmap[sv] = v
        live = {v: sv for sv, v in vmap.items() if sv != NONE}
        for v in versions:
            self.v_older.pop(v, None)
            self.v_alt.pop(v, None)
            self.v_extra_support.pop(v, None)
            found = live.get(v)
            if found is None:  # no replayed operation creates it any more
                gone = self.v_from[v] in erased_seqs
                if self.v_status[v] not in (UNDONE, ERASED) or gone:
                    self.v_status[v] = ERASED if gone else UNDONE
                    if self.v_to[v] == NONE:
                        self.v_to[v] = seq
                if gone:
                    self.v_value[v] = ""
                self.v_prev[v] = NONE
                continue
            sv = found
            self.v_status[v] = source.v_status[sv]
            self.v_to[v] = source.v_to[sv]
            self.v_prev[v] = vmap[source.v_prev[sv]]
            alt = source.v_alt.get(sv)
            if alt is not None:
                self.v_alt[v] = vmap[alt]
            support = source.v_extra_support.get(sv)
            if support is not None:
                self.v_extra_support[v] = support
        # the key's arrival chain, over every version it ever had (by creating seq)
        ordered = sorted(versions, key=lambda v: self.v_from[v])
        older = NONE
        for v in ordered:
            if self.v_prev[v] != older:
                self.v_older[v] = older
            older = v
        return vmap, ordered[-1] if ordered else NONE

    def load(self, arrays: VersionArrays, values: pa.Array[Any]) -> None:
        """Take the columns of a saved state (empty columns only); ``values``: the versions' values."""
        self.v_key = typed(arrays.key)
        self.v_value = cast("list[str]", values.to_pylist())
        self.v_status = typed(arrays.status)
        self.v_from, self.v_to, self.v_ev = (
            typed(arrays.valid_from),
            typed(arrays.valid_to),
            typed(arrays.evidence),
        )
        prev = arrays.supersedes
        self.v_prev = typed(prev)
        self.v_alt = own(arrays.alternative_of)
        apart = np.flatnonzero(arrays.previous != prev)
        self.v_older = dict(zip(apart.tolist(), arrays.previous[apart].tolist(), strict=True))
        more = np.flatnonzero(arrays.support != 1)
        self.v_extra_support = dict(zip(more.tolist(), (arrays.support[more] - 1).tolist(), strict=True))
        self.dep = own(arrays.premises)

    def restore(self, columns: Mapping[str, Any]) -> None:
        """Set the columns of :data:`COLUMNS` that ``columns`` holds."""
        restore_columns(self, COLUMNS, columns)

    # ------------------ reading one version or one key's chain

    def count(self) -> int:
        return len(self.v_key)

    def key(self, vid: int) -> int:
        return self.v_key[vid]

    def origin(self, vid: int) -> tuple[int, int]:
        """Version ``vid``'s key id and the seq of the operation that created it."""
        return self.v_key[vid], self.v_from[vid]

    def created(self, vid: int) -> tuple[int, str, int, int]:
        """What the operation that created ``vid`` named: (key id, value, evidence, seq)."""
        return self.v_key[vid], self.v_value[vid], self.v_ev[vid], self.v_from[vid]

    def value(self, vid: int) -> str:
        return self.v_value[vid]

    def status(self, vid: int) -> int:
        """Version ``vid``'s stored status (a lazily closed one still reads active: see :meth:`closing`)."""
        return self.v_status[vid]

    def supersedes(self, vid: int) -> int:
        """The version ``vid`` supersedes (NONE: none)."""
        return self.v_prev[vid]

    def creating_evidence(self, vid: int) -> int:
        """The evidence that created version ``vid`` (NONE: none)."""
        return self.v_ev[vid]

    def support(self, vid: int) -> int:
        """How many assertions support version ``vid``."""
        return 1 + self.v_extra_support.get(vid, 0)

    def has_premises(self) -> bool:
        """Whether any head was asserted with premises."""
        return bool(self.dep)

    def premises(self, vid: int) -> tuple[tuple[int, int], ...]:
        """Version ``vid``'s premises: (key id, that key's head when asserted), ...; () without."""
        return self.dep.get(vid, ())

    def chain(self, newest: int) -> list[int]:
        """The arrival chain ending at version ``newest`` (a key's newest), newest first."""
        out, older, prev, v = [], self.v_older, self.v_prev, newest
        while v != NONE:
            out.append(v)
            v = older.get(v, prev[v])
        return out

    def closing(self, newest: int, head: int) -> dict[int, int]:
        """Versions on the chain ending at ``newest`` closed lazily (active, superseded, not the ``head``)
        -> the seq their newest superseder arrived at."""
        status, prev, start = self.v_status, self.v_prev, self.v_from
        closed: dict[int, int] = {}
        for v in self.chain(newest):  # newest first, so the first superseder seen is the newest
            p = prev[v]
            if p != NONE and p != head and p not in closed and status[p] == ACTIVE:
                closed[p] = start[v]
        return closed

    def predecessor_to_reopen(self, vid: int) -> int:
        """The most recent merely superseded predecessor of ``vid`` along supersedes edges (NONE: none)."""
        p = self.v_prev[vid]
        # a predecessor stored as active is one closed lazily by accept, i.e. superseded
        while p != NONE and self.v_status[p] != SUPERSEDED and self.v_status[p] != ACTIVE:
            p = self.v_prev[p]
        return p

    def fields(self, vid: int, closing: dict[int, int]) -> tuple[int, str, int, int, int, int, int, int, int]:
        """Version ``vid`` as read: (key id, value, status, valid from, valid to, creating evidence,
        support, supersedes, alternative of), NONE where absent; a lazily closed version reads
        superseded (``closing``: its key's :meth:`closing`)."""
        closed_at = closing.get(vid)
        if closed_at is None:
            status, to = self.v_status[vid], self.v_to[vid]
        else:
            status, to = SUPERSEDED, closed_at
        return (
            self.v_key[vid],
            self.v_value[vid],
            status,
            self.v_from[vid],
            to,
            self.v_ev[vid],
            1 + self.v_extra_support.get(vid, 0),
            self.v_prev[vid],
            self.v_alt.get(vid, NONE),
        )

    # ------------------ reading column-wise (copies)

    def typed_edges(self) -> Iterable[tuple[int, int, int]]:
        """The edges stored on the versions as (kind, version, target): creating supported-by (0),
        supersedes (1), alternative-of (2)."""
        for vid, (prev, ev) in enumerate(zip(self.v_prev, self.v_ev, strict=True)):
            if ev != NONE:
                yield (0, vid, ev)
            if prev != NONE:
                yield (1, vid, prev)
        for vid, alt in sorted(self.v_alt.items()):
            yield (2, vid, alt)

    def with_evidence(self) -> int:
        """How many versions were created from evidence."""
        return len(self.v_ev) - self.v_ev.count(NONE)

    def statuses_of(self, versions: np.ndarray) -> np.ndarray:
        """The stored status of each of ``versions`` (a copy)."""
        statuses: np.ndarray = np.frombuffer(self.v_status, np.int64)[versions]
        return statuses

    def values_of(self, versions: list[int]) -> tuple[str, ...]:
        """The value of each of ``versions``, the very string objects stored (interned by the caller)."""
        if len(versions) == 1:
            return (self.v_value[versions[0]],)
        return tuple(operator.itemgetter(*versions)(self.v_value))

    def created_columns(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (key id, creating evidence, creating seq) of each of the versions ``targets`` (copies)."""
        return (
            np.frombuffer(self.v_key, np.int64)[targets],
            np.frombuffer(self.v_ev, np.int64)[targets],
            np.frombuffer(self.v_from, np.int64)[targets],
        )

    def keys_of(self, targets: np.ndarray) -> np.ndarray:
        """The key id of each of the versions ``targets`` (a copy)."""
        keys: np.ndarray = np.frombuffer(self.v_key, np.int64)[targets]
        return keys

    def keys(self) -> np.ndarray:
        """Every version's key id (a copy)."""
        return np.array(self.v_key, np.int64)

    def supports(self) -> np.ndarray:
        """Every version's support: its assertions (a copy)."""
        support = np.ones(len(self.v_key), np.int64)
        if self.v_extra_support:
            more = np.fromiter(self.v_extra_support, np.int64, len(self.v_extra_support))
            support[more] += np.fromiter(self.v_extra_support.values(), np.int64, len(more))
        return support

    def value_array(self) -> pa.Array[Any]:
        """Every version's value, as an Arrow array."""
        return pa.array(self.v_value, pa.large_string())

    def matches_created(
        self, targets: np.ndarray, seq: np.ndarray, kid: np.ndarray, ev: np.ndarray
    ) -> np.ndarray:
        """Per row, whether version ``targets[i]`` was created at ``seq[i]`` on key ``kid[i]`` from
        evidence ``ev[i]``."""
        same: np.ndarray = np.frombuffer(self.v_from, np.int64)[targets] == seq
        same &= np.frombuffer(self.v_key, np.int64)[targets] == kid
        same &= np.frombuffer(self.v_ev, np.int64)[targets] == ev
        return same

    def materialized_status(self, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every version's status (int8) and valid_to, with the lazily closed ones written out as
        superseded at their newest superseder's seq (see :meth:`closing`; ``heads``: every key's head
        by id); copies."""
        status = np.array(self.v_status, np.int8)
        valid_to = np.array(self.v_to, np.int64)
        n = len(status)
        if n:
            ids = np.arange(n, dtype=np.int64)
            lazy = (status == ACTIVE) & (heads[np.array(self.v_key, np.int64)] != ids)
            if lazy.any():
                prev = np.array(self.v_prev, np.int64)
                newest = np.full(n, NONE, dtype=np.int64)
                linked = prev >= 0
                np.maximum.at(newest, prev[linked], ids[linked])
                valid_to[lazy] = np.array(self.v_from, np.int64)[newest[lazy]]
                status[lazy] = SUPERSEDED
        return status, valid_to

    def arrays(self, heads: np.ndarray) -> VersionArrays:
        """Every version, column-wise (values: :meth:`value_array`; ``heads`` as :meth:`materialized_status`)."""
        status, valid_to = self.materialized_status(heads)
        prev = ints(self.v_prev)
        previous = prev.copy()  # the arrival chain: the supersedes target unless stored apart
        previous[np.fromiter(self.v_older, np.int64, len(self.v_older))] = np.fromiter(
            self.v_older.values(), np.int64, len(self.v_older)
        )
        return VersionArrays(
            ints(self.v_key),
            status,
            ints(self.v_from),
            valid_to,
            ints(self.v_ev),
            prev,
            previous,
            self.supports(),
            MappingProxyType(self.v_alt),
            MappingProxyType(self.dep),
        )


#: the group's columns
COLUMNS = frozenset(vars(VersionColumns()))
