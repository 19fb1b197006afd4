"""The graph's storage: its column groups, composed, and the writes whose invariants span groups.

Each node kind is a small class owning its parallel columns (``pmem.graph._ops._store``'s modules): the
evidence, the keys, the versions, the edges kept apart from the versions, the operation log, source
authority. :class:`GraphStore` composes them (``store.versions.value(v)``, Polars' namespaces) and keeps
the arrival seq and the writes that touch several groups at once: a version's place in its key's arrival
chain, lazily closed heads, the log's compact form, a key's history replaced by a replay. It writes what it
is told; :class:`~pmem.graph.ProvenanceGraph` decides the six operations' outcomes.

Layout. Every node kind is a set of parallel columns indexed by a small integer id, so applying an
operation is a handful of appends and index writes. Integer columns are typed (``array("q")``: int64
without a Python object per entry), which is also what lets column-wise writes read and extend them as
numpy blocks; texts and values are lists of strings. A numpy view pins its column's buffer (``array``
cannot grow while one is alive), so views are only ever made for the length of one expression or one
function that appends nothing, except the window ``versions.open_window`` lends a batch. Nothing admitted
is ever removed; operations retype statuses, close or reopen intervals and append edges, except the
re-derivations (undo, erase, unmerge), which replace a key's edges and blank erased texts.

>>> store = GraphStore()
>>> kid = store.keys.new("budget")
>>> v = store.append_version(kid, "$30k", ACTIVE, seq=1, ev=NONE, prev=NONE)
>>> store.keys.set_head(kid, v)
>>> store.head_value(kid), store.chain(kid)
('$30k', [0])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from pmem.graph._ops._codes import ACTIVE, ALTERNATIVE, CONTESTED, CONTRADICTED, NONE, SUPERSEDED
from pmem.graph._ops._store import _authority, _edges, _evidence, _keys, _log, _versions
from pmem.graph._ops._store._arrays import (
    EdgeArrays,
    EvidenceArrays,
    KeyArrays,
    OperationArrays,
    VersionArrays,
)
from pmem.graph._ops._store._authority import Authority
from pmem.graph._ops._store._edges import EdgeColumns
from pmem.graph._ops._store._evidence import EvidenceColumns
from pmem.graph._ops._store._keys import KeyColumns
from pmem.graph._ops._store._log import OperationLog
from pmem.graph._ops._store._versions import VersionColumns

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    import numpy as np
    import pyarrow as pa


#: a valid time as given (ISO 8601) and as parsed (naive UTC)
ValidTime: TypeAlias = "tuple[str, datetime]"


class GraphStore:
    """The columns of one provenance graph, in groups (see the module docstring)."""

    def __init__(self) -> None:
        self.seq = 0  # the last arrival seq handed out (evidence and operations share it)
        self.evidence = EvidenceColumns()
        self.keys = KeyColumns()
        self.versions = VersionColumns()
        self.edges = EdgeColumns()  # supported-by edges added after creation, tombstones
        self.log = OperationLog(self.versions)  # entries that created their version read it
        self.authority = Authority()

    # ------------------ writes that span groups, one operation at a time (ProvenanceGraph)

    def next_seq(self) -> int:
        """Hand out the next arrival seq (evidence and operations share the counter)."""
        self.seq += 1
        return self.seq

    def rewind(self, seq: int) -> None:
        """Hand out ``seq + 1`` next: a scratch store replaying a key's operations at their own seqs."""
        self.seq = seq

    def add_evidence(self, text: str, source: int, time: str | None, valid: ValidTime | None) -> int:
        """Admit an evidence node (``source``: a code of ``evidence.admit_source``; ``valid``: the valid
        time it states, as given and parsed) at the next seq; its index."""
        self.seq = seq = self.seq + 1  # next_seq, inlined: observe is half of a write (pmem perf core)
        n = self.evidence.append(text, source, seq, time)
        if valid is not None:
            self.evidence.set_valid_time(n, *valid)
        return n

    def append_version(self, kid: int, value: str, status: int, seq: int, ev: int, prev: int) -> int:
        """Append a version of key ``kid`` superseding ``prev`` (open, created at ``seq`` from evidence
        ``ev``) as the key's newest, keeping its arrival chain; return its id."""
        vid = self.versions.append_open(kid, value, status, seq, ev, prev)
        older = self.keys.push(kid, vid)
        if older != prev:
            self.versions.link_older(vid, older)
        return vid

    def accept(self, kid: int, head: int, value: str, ev: int) -> None:
        """A new active head of key ``kid`` holding ``value`` (from evidence ``ev``), superseding its head
        ``head`` (as the graph just read it: NONE for an empty cell), logged at the next seq: what an
        accept the graph has weighed writes. The hottest path of a write (``pmem perf core``).

        The displaced head is closed lazily: a version stored as active that is no longer its key's head
        *is* superseded, closed when its newest superseder arrived (:meth:`closing`). This saves two
        random writes per accept. A contested head is closed eagerly, with its alternatives."""
        self.seq = seq = self.seq + 1
        versions = self.versions
        vid = versions.append_open(kid, value, ACTIVE, seq, ev, head)
        older, alternatives = self.keys.supersede_head(kid, vid)
        if older != head:
            versions.link_older(vid, older)
        if alternatives is not None:
            versions.close(head, SUPERSEDED, seq)
            versions.close_at(alternatives, seq)
        self.log.append_accept(vid)

    def close_lazily_closed(self, kid: int) -> None:
        """Write down the closing of ``kid``'s versions closed lazily (:meth:`closing`): before its
        supersedes links change, which the lazy reading depends on."""
        for p, closed_at in self.closing(kid).items():
            self.versions.close(p, SUPERSEDED, closed_at)

    def insert_superseded(self, kid: int, value: str, seq: int, ev: int, above: int, below: int) -> int:
        """A version of ``kid`` entering its history between ``below`` (what it supersedes; NONE: the
        bottom) and ``above`` (which now supersedes it), closed at once; its id."""
        vid = self.append_version(kid, value, SUPERSEDED, seq, ev, below)
        self.versions.close(vid, SUPERSEDED, seq)
        self.versions.insert_below(above, vid)
        return vid

    def reopen_predecessor(self, kid: int, retracted: int) -> None:
        """Make the most recent merely superseded predecessor of ``retracted`` (along supersedes edges)
        active again as ``kid``'s head; no such version: the cell is empty (a rollback)."""
        p = self.versions.predecessor_to_reopen(retracted)
        if p != NONE:
            self.versions.reopen(p)
        self.keys.set_head(kid, p)

    def place_by_valid_time(self, kid: int, at: datetime) -> tuple[int, int]:
        """Where a version valid from ``at`` enters ``kid``'s history: (the version that will supersede
        it, the one it supersedes or NONE), walking down from the head past the versions valid later."""
        versions, evidence = self.versions, self.evidence
        above = self.keys.head(kid)
        below = versions.supersedes(above)
        while below != NONE:
            when = evidence.valid_instant(versions.creating_evidence(below))
            if when is None or when <= at:
                break
            above, below = below, versions.supersedes(below)
        return above, below

    def add_alternative(self, kid: int, value: str, seq: int, ev: int) -> int:
        """A contest: ``value`` as an open alternative of ``kid``'s head, which becomes contested; its id."""
        head = self.keys.head(kid)
        vid = self.append_version(kid, value, ALTERNATIVE, seq, ev, NONE)
        self.versions.set_alternative_of(vid, head)
        self.keys.add_alternative(kid, vid)
        self.versions.set_status(head, CONTESTED)
        return vid

    def settle(self, kid: int, winner: int, seq: int) -> None:
        """Resolve ``kid``'s contest for ``winner`` (its head or an open alternative): every other open
        version is contradicted at ``seq``, and the winner is the active head."""
        head = self.keys.head(kid)
        for loser in (head, *self.keys.pop_alternatives(kid)):
            if loser != winner:
                self.versions.close(loser, CONTRADICTED, seq)
        if winner == head:
            self.versions.set_status(winner, ACTIVE)
        else:
            self.versions.promote(winner, head)
            self.keys.set_head(kid, winner)

    def close_open_alternatives(self, kid: int, seq: int) -> None:
        """Close the open alternatives of ``kid``'s head at ``seq`` (their status stays: never authoritative)."""
        self.versions.close_at(self.keys.pop_alternatives(kid), seq)

    def add_support(self, vid: int, ev: int, seq: int) -> None:
        """Count one more assertion of version ``vid``: a supported-by edge from ``ev`` (when given)."""
        self.versions.add_support(vid)
        if ev != NONE:
            self.edges.add_support(vid, ev, seq)

    def record_premises(self, op: int, premises: tuple[tuple[int, int], ...], applied: bool) -> None:
        """Operation ``op`` named ``premises`` ((key id, its head then), ...); an applied one whose target
        is its key's head now holds them as that head's premises."""
        self.log.record_premise_keys(op, tuple(kid for kid, _ in premises))
        target = self.log.target(op)
        if applied and target != NONE and target == self.keys.head(self.versions.key(target)):
            self.versions.set_premises(target, premises)

    def log_undo(self, kid: int, ev: int, target: int, reason: str | None, applied: bool) -> None:
        """Log an undo of operation ``target`` (of key ``kid``) at the next seq: applied, or not with ``reason``."""
        self.log.append_undo(self.next_seq(), kid, ev, target, reason, applied)

    # ------------------ undo, erasure, unmerge (pmem.graph._ops._rederive): a key's history replaced

    def erase_evidence(self, ev: int) -> None:
        """Erase evidence ``ev`` (see ``EvidenceColumns.erase``: a source an authority setting names keeps
        its name). Its operations are re-derived by the caller."""
        self.evidence.erase(ev, self.authority.ranked())

    def move_to_key(self, versions: list[int], ops: set[int], kid: int) -> None:
        """Move ``versions`` and the operations ``ops`` to key ``kid`` (an unmerge; both keys are then
        re-derived by the caller)."""
        self.versions.move(versions, kid)
        self.log.move(ops, kid)

    def share_evidence(self, other: GraphStore) -> None:
        """Read ``other``'s evidence (texts, sources, seqs, valid times) as this store's own: a scratch
        store replaying one of ``other``'s keys (its columns are shared, not copied)."""
        self.evidence.share(other.evidence)

    def replace_history(
        self,
        kid: int,
        ops: list[int],
        left_out: dict[int, str],
        left_out_values: dict[int, str | None],
        erased_ops: set[int],
        replayed: dict[int, int],
        source: GraphStore,
        adopted: list[int],
    ) -> None:
        """Make key ``kid``'s history what a replay of its operations ``ops`` gave in ``source`` (a scratch
        store holding that one key as key 0): ``replayed`` maps each replayed operation to its index
        there; the operations ``left_out`` (index -> why) are logged as not applied, keeping
        ``left_out_values``. A version no replayed operation creates any more becomes undone, or erased
        (its value blanked) when its creating operation's seq is in ``erased_ops``; versions the replay
        creates anew are appended. ``adopted``: versions just moved to this key, not yet on its chain.
        The key's arrival chain, head, open alternatives, supported-by edges, tombstones and log entries
        are rewritten to match."""
        # a version closed lazily keeps the seq it was superseded at (a saved and loaded state holds it
        # written down: without this an erased one closed at the erasure's seq here, at that seq there)
        self.close_lazily_closed(kid)
        versions = self.versions
        own = [
            v for v in self.chain(kid) if versions.key(v) == kid
        ]  # a chain may pass through moved versions
        created = [t for t in map(source.log.created_target, replayed.values()) if t != NONE]
        vmap, newest = versions.replay_into(
            kid, list(dict.fromkeys([*own, *adopted])), source.versions, created, erased_ops, self.seq
        )
        self.keys.set_newest(kid, newest)
        self.keys.set_head(kid, vmap[source.keys.head(0)])
        self.keys.set_alternatives(kid, [vmap[a] for a in source.keys.alternatives(0)])
        self.edges.replace(versions.key, kid, source.edges, vmap)
        self.log.replace(kid, ops, left_out, left_out_values, replayed, source.log, vmap)

    # ------------------ loading a saved state (pmem.graph._persist._tables, _state_legacy)

    def load_arrays(
        self,
        evidence: EvidenceArrays,
        keys: KeyArrays,
        versions: VersionArrays,
        values: pa.Array[Any],
        edges: EdgeArrays,
        operations: OperationArrays,
        seq: int,
    ) -> None:
        """Fill an empty store from the arrays of a saved state (what the groups' ``arrays`` give,
        ``values`` the versions' values), encoding them as the groups keep them: an arrival chain or
        support only where it differs from the common case, an operation's seq, key, evidence and value
        only where its target version does not hold them.

        Raises:
            ValueError: a key named twice.
        """
        self.evidence.load(evidence)
        self.keys.load(keys)
        self.versions.load(versions, values)
        self.edges.load(edges)
        self.log.load(operations, values)
        self.seq = seq

    def restore(self, columns: Mapping[str, Any], seq: int | None = None) -> None:
        """Set columns of a loaded state: ``columns`` maps names of :data:`RESTORED` to their contents
        (an integer column as ``array("q")``, ``ev_text`` as a list of strings, sparse ones as dicts);
        ``seq`` is the last seq handed out. The lookups derived from them (key ids, source codes, parsed
        valid times) are rebuilt.

        Raises:
            ValueError: a name that is not a restorable column.
        """
        unknown = sorted(set(columns) - RESTORED)
        if unknown:
            msg = f"GraphStore.restore: not a restorable column: {', '.join(unknown)}"
            raise ValueError(msg)
        for group in (self.evidence, self.keys, self.versions, self.edges, self.log, self.authority):
            group.restore(columns)
        if seq is not None:
            self.seq = seq

    # ------------------ reads that span groups

    def lookup(self, name: str) -> tuple[int, int, str | None] | None:
        """Key ``name``'s id, head and head's value ((kid, NONE, None) for an empty cell); None when the
        key was never written. One call for the write's hot path."""
        found = self.keys.find(name)
        if found is None:
            return None
        kid, head = found
        return kid, head, None if head == NONE else self.versions.value(head)

    def head_and_value(self, kid: int) -> tuple[int, str | None]:
        """Key ``kid``'s head and its value ((NONE, None) for an empty cell)."""
        head = self.keys.head(kid)
        return head, None if head == NONE else self.versions.value(head)

    def head_value(self, kid: int) -> str | None:
        """The value of key ``kid``'s head; None when the cell is empty."""
        head = self.keys.head(kid)
        return None if head == NONE else self.versions.value(head)

    def chain(self, kid: int) -> list[int]:
        """Version ids of key ``kid`` by arrival, newest first."""
        return self.versions.chain(self.keys.newest(kid))

    def closing(self, kid: int) -> dict[int, int]:
        """Versions of ``kid`` closed lazily -> the seq their newest superseder arrived at.

        An accept does not close the head it displaces (two random writes saved per accept): a version
        stored as active that is no longer its key's head *is* superseded, closed when its newest
        superseder arrived. Reads and the state tables materialize it through this.
        """
        return self.versions.closing(self.keys.newest(kid), self.keys.head(kid))

    def version_fields(
        self, vid: int, closing: dict[int, int] | None = None
    ) -> tuple[int, str, int, int, int, int, int, int, int]:
        """Version ``vid`` as read (see ``VersionColumns.fields``); ``closing``: its key's
        :meth:`closing`, computed once for many versions."""
        if closing is None:
            closing = self.closing(self.versions.key(vid))
        return self.versions.fields(vid, closing)

    def rank(self, ev: int) -> int:
        """The authority level of evidence ``ev``'s source now (no evidence: the default)."""
        if ev == NONE:
            return self.authority.default()
        return self.authority.level(self.evidence.source_name(ev))

    def current_values(self) -> list[tuple[str, str]]:
        """(key, head value) of every non-empty cell, in admission order."""
        value = self.versions.value
        return [(key, value(head)) for key, head in self.keys.heads()]

    def typed_edges(self) -> Iterator[tuple[int, int, int]]:
        """Every typed edge as (kind, source, target): the kind indexes ``EDGE_KINDS``; supported-by
        edges go version -> evidence, supersedes and alternative-of version -> version, revokes
        tombstone -> version."""
        yield from self.versions.typed_edges()
        yield from self.edges.typed_edges()

    def counts(self, n_ops: int) -> dict[str, int]:
        """Node and edge counts, and ``by_op_<code>``: operations by effective type (``n_ops`` of them)."""
        log = self.log.counts(n_ops)
        return {
            "evidence": self.evidence.count(),
            "keys": self.keys.count(),
            "cells": self.keys.cell_count(),
            "versions": self.versions.count(),
            "operations": log.pop("operations"),
            "failed_operations": log.pop("failed_operations"),
            "tombstones": self.edges.tombstone_count(),
            "supported_by_edges": self.versions.with_evidence() + self.edges.support_count(),
            **log,
        }

    def arrival_seqs(self) -> tuple[np.ndarray, np.ndarray]:
        """The arrival seqs of the evidence and of the operations (copies), for a loaded state's check.

        Raises:
            ValueError: an operation's own entry names no operation, or an operation names a version
                the store does not hold (a damaged state).
        """
        ops = self.log.checked_seqs()
        return self.evidence.seqs(), ops

    def materialized_status(self) -> tuple[np.ndarray, np.ndarray]:
        """Every version's status and valid_to, lazily closed ones written out (``VersionColumns``)."""
        return self.versions.materialized_status(self.keys.head_array())

    def version_arrays(self) -> VersionArrays:
        """Every version, column-wise (values: ``versions.value_array``)."""
        return self.versions.arrays(self.keys.head_array())


#: every group's columns: no module but the group's own reads or writes them
#: (tests/graph/test_graph_store.py); the others call the groups' operations
GROUP_COLUMNS = {
    "evidence": _evidence.COLUMNS,
    "keys": _keys.COLUMNS,
    "versions": _versions.COLUMNS,
    "edges": _edges.COLUMNS,
    "log": _log.COLUMNS,
    "authority": _authority.COLUMNS,
}
COLUMNS = frozenset().union(*GROUP_COLUMNS.values())
#: what :meth:`GraphStore.restore` sets: the columns less the lookups derived from them
RESTORED = (
    _evidence.RESTORED
    | _keys.RESTORED
    | _versions.COLUMNS
    | _edges.COLUMNS
    | _log.COLUMNS
    | _authority.COLUMNS
)
