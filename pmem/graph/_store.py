"""The graph's storage: every column of every node kind, and the named operations that read and write them.

:class:`GraphStore` is the one owner of the columns: no other module reads or writes one
(``tests/graph/test_graph_ownership.py``). :class:`~pmem.graph.ProvenanceGraph` holds one and decides
the six operations' outcomes, writing them through the store; the modules that work on whole columns
reach it as ``graph.storage`` and call its sections' operations: re-derivation (undo, erasure, unmerge)
replaces a key's history, ``apply_batch`` extends the columns column-wise, the state tables read and load
them as arrays (:class:`EvidenceArrays` and its siblings). So every invariant that spans columns (a
version's place in its key's arrival chain, lazily closed heads, the operation log's compact form) is kept
in this one place.

Layout. Every node kind is a set of parallel columns indexed by a small integer id, so applying an
operation is a handful of appends and index writes. Integer columns are typed (``array("q")``: int64
without a Python object per entry), which is also what lets column-wise writes read and extend them as
numpy blocks; texts and values are lists of strings. A numpy view pins its column's buffer (``array``
cannot grow while one is alive), so views are only ever made for the length of one expression or one
function that appends nothing, except the window :meth:`GraphStore.open_version_window` lends a batch.
Nothing admitted is ever removed; operations retype statuses, close or reopen intervals and append edges,
except the re-derivations (undo, erase, unmerge), which replace a key's edges and blank erased texts.

- evidence: ``ev_*`` (text, source code, arrival seq; time and valid time sparse); public id ``e<n>``.
- keys: ``key_names`` / ``kid`` (name <-> id), per key id its ``k_head`` and ``k_newest`` version, and the
  head's ``open_alts``.
- versions: ``v_*`` (key, value, status, valid_from, valid_to, creating evidence, supersedes target;
  alternative-of target, the arrival chain where it leaves the supersedes chain, extra support and
  premises sparse); public id ``v<n>``.
- supported-by edges added after creation: ``sb_*``; tombstones (revokes edges): ``tb_*``.
- the operation log: ``op_code`` (requested | effective << 3 | applied << 6) and ``op_target``; an
  operation that created its target version takes seq, key, evidence and value from it, every other one
  keeps them in ``op_extra``; ``undo_of``, ``op_alias``, ``op_deps`` sparse; a retraction's target
  (``op_retracts``: the value a reject or revoke retracts) sparse, and ``retracts_erased``.

>>> store = GraphStore()
>>> kid = store.new_key("budget")
>>> v = store.append_version(kid, "$30k", ACTIVE, seq=1, ev=NONE, prev=NONE)
>>> store.set_head(kid, v)
>>> store.head_value(kid), store.chain(kid)
('$30k', [0])
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Mapping
from itertools import repeat
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._codes import (
    ACCEPT_APPLIED,
    ACTIVE,
    ALTERNATIVE,
    CONTESTED,
    CONTRADICTED,
    ERASED,
    NONE,
    NOOP,
    REJECT,
    REVOKE,
    SUPERSEDED,
    UNDO,
    UNDONE,
)
from pmem.graph._keyindex import KeyIndex
from pmem.graph._opindex import OpIndex
from pmem.graph._texts import TextColumn
from pmem.graph._validate import valid_instant

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from datetime import datetime


#: a valid time as given (ISO 8601) and as parsed (naive UTC)
ValidTime: TypeAlias = "tuple[str, datetime]"
#: the source an erased evidence is left with: who made the statement goes with it
ERASED_SOURCE = "erased"


class EvidenceArrays(NamedTuple):
    """Every evidence node, column-wise, as the state tables hold them. Exported, its arrays are copies and
    its sparse columns read-only views of the store's, valid until its next write; given to
    ``GraphStore.load_arrays``, its dicts become the store's own."""

    seq: np.ndarray  # arrival seq
    text: pa.Array[Any] | pa.ChunkedArray[Any]  # erased ones blank
    source: np.ndarray  # int32 code into ``sources``
    sources: tuple[str, ...]
    time: Mapping[int, str]  # observation times (sparse)
    valid: Mapping[int, str]  # valid times (sparse)
    erased: np.ndarray  # bool


class VersionArrays(NamedTuple):
    """Every version, column-wise, lazily closed ones written out as superseded (copies and views as
    :class:`EvidenceArrays`)."""

    key: np.ndarray
    status: np.ndarray  # int8
    valid_from: np.ndarray
    valid_to: np.ndarray  # NONE: open
    evidence: np.ndarray  # creating evidence, NONE: none
    supersedes: np.ndarray  # NONE: none
    previous: np.ndarray  # the key's arrival chain, NONE: the first
    support: np.ndarray
    alternative_of: Mapping[int, int]  # sparse
    premises: Mapping[int, tuple[tuple[int, int], ...]]  # sparse: (premise key, its head then), ...


class OperationArrays(NamedTuple):
    """The operation log, column-wise, every entry's seq, key, evidence and value decoded (copies and
    views as :class:`EvidenceArrays`)."""

    code: np.ndarray  # requested | effective << 3 | applied << 6
    target: np.ndarray  # NONE: none
    seq: np.ndarray
    key: np.ndarray
    evidence: np.ndarray  # NONE: none
    value: pa.Array[Any]  # large_string, null: none
    reason: pa.Array[Any]  # string, null: none
    undoes: Mapping[int, int]  # sparse
    alias: Mapping[int, str]  # sparse
    premise_keys: Mapping[int, tuple[int, ...]]  # sparse
    retracts: Mapping[int, str]  # sparse
    retracts_erased: np.ndarray  # bool


class EdgeArrays(NamedTuple):
    """Supported-by edges added after their version's creation, and tombstones (revokes edges)."""

    support_version: np.ndarray
    support_evidence: np.ndarray
    support_seq: np.ndarray
    tombstone_version: np.ndarray
    tombstone_evidence: np.ndarray
    tombstone_seq: np.ndarray


class KeyArrays(NamedTuple):
    """Every key by id: its name, head and newest version, and its head's open alternatives."""

    name: pa.Array[Any]  # string
    head: np.ndarray  # NONE: an empty cell
    newest: np.ndarray
    open_alternatives: dict[int, tuple[int, ...]]  # sparse, non-empty


def _ints(column: array[int] | list[int], dtype: type = np.int64) -> np.ndarray:
    """A copy of an integer column (a view would pin a typed column's buffer: no append while alive)."""
    return np.array(column, dtype=dtype)


def _typed(values: np.ndarray) -> array[int]:
    """An integer column as the store keeps it (``array("q")``), from the array's memory in one copy."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).data.cast("B"))
    return out


def _extend(column: array[int] | list[Any], values: np.ndarray) -> None:
    """Append ``values`` to a column: one block copy for a typed column, else the objects."""
    if isinstance(column, array):
        column.frombytes(np.ascontiguousarray(values, dtype=np.int64).data.cast("B"))
    else:
        column.extend(values.tolist())


def _own(mapping: Mapping[int, Any]) -> dict[int, Any]:
    """A loaded sparse column as the store keeps it: a dict built for the load is taken as it is (a
    column of every evidence's time holds an entry per node), anything else copied."""
    return mapping if type(mapping) is dict else dict(mapping)


def _flags(n: int, rows: set[int]) -> np.ndarray:
    """``n`` booleans, true at ``rows``."""
    out = np.zeros(n, np.bool_)
    out[np.fromiter(rows, np.int64, len(rows))] = True
    return out


class GraphStore:
    """The columns of one provenance graph (see the module docstring for the layout)."""

    def __init__(self) -> None:
        self.seq = 0  # the last arrival seq handed out (evidence and operations share it)
        # source authority: None (not configured) behaves exactly as before there was any
        self.authority: dict[str, int] | None = None  # source -> level now
        self.authority_log: list[tuple[int, str, int]] = []  # (after seq, source, level); seq -1: initial
        self.default_authority = 1
        self.authority_from_start = False  # configured by the graph's constructor (maybe empty)
        # evidence
        self.ev_text = TextColumn()  # Arrow-backed: written once, read rarely (pmem.graph._texts)
        self.ev_source: array[int] = array("q")  # code into sources
        self.ev_seq: array[int] = array("q")
        self.ev_time: dict[int, str] = {}  # sparse: only evidence that carries a time
        self.ev_valid: dict[int, str] = {}  # sparse: evidence that says when its facts became true
        self.valid_at: dict[int, datetime] = {}  # the same, parsed (naive UTC): not saved
        self.sources: list[str] = []
        self.source_code: dict[str, int] = {}
        self.erased: set[int] = set()  # erased evidence
        # keys: an id per name; per key id its head and newest version (a head's value is v_value[head])
        self.kid: dict[str, int] = {}
        self.key_names: list[str] = []
        self.k_head: array[int] = array("q")
        self.k_newest: array[int] = array("q")
        self.open_alts: dict[int, list[int]] = {}  # key id -> open alternatives of its head
        # versions
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
        # latest assertion of that version with depends_on; operation -> premise key ids it requested
        self.dep: dict[int, tuple[tuple[int, int], ...]] = {}
        self.op_deps: dict[int, tuple[int, ...]] = {}
        # supported-by edges added after creation (noop, repeated values, resolve)
        self.sb_version: array[int] = array("q")
        self.sb_ev: array[int] = array("q")
        self.sb_seq: array[int] = array("q")
        # tombstones (each one is also the source of a revokes edge)
        self.tb_version: array[int] = array("q")
        self.tb_seq: array[int] = array("q")
        self.tb_ev: array[int] = array("q")
        # operation log
        self.op_code: array[int] = array("q")
        self.op_target: array[int] = array("q")
        self.op_extra: dict[int, tuple[int, int, int, str | None, str | None]] = {}
        self.undo_of: dict[int, int] = {}  # an undo operation -> the operation it undoes
        self.op_alias: dict[int, str] = {}  # an operation -> the key as extracted, when merged (sparse)
        # A reject or revoke -> the value it retracts: the one it named, else its key's head's when it
        # arrived (none: the key had no head). A replay in which that value is not the head leaves it a
        # noop, so that undoing or erasing what it retracted equals never having said it (issue 41).
        self.op_retracts: dict[int, str] = {}
        # retractions whose value only erased evidence stated: the value is gone, and they are left out
        # of every replay (no operation left can make it a head again)
        self.retracts_erased: set[int] = set()
        self._op_index: OpIndex | None = None  # built by the first undo or erase (not saved)
        self._key_index: KeyIndex | None = None  # apply_batch's key lookup (not saved)

    # ------------------ admitting and writing, one operation at a time (ProvenanceGraph)

    def next_seq(self) -> int:
        """Hand out the next arrival seq (evidence and operations share the counter)."""
        self.seq += 1
        return self.seq

    def admit_source(self, source: str) -> int:
        """The code of ``source``, admitting it when new."""
        code = self.source_code.get(source)
        if code is None:
            code = self.source_code[source] = len(self.sources)
            self.sources.append(source)
        return code

    def add_evidence(self, text: str, source: int, time: str | None, valid: ValidTime | None) -> int:
        """Admit an evidence node (``source``: a code of :meth:`admit_source`; ``valid``: the valid time
        it states, as given and parsed) at the next seq; its index."""
        n = len(self.ev_seq)
        self.seq = seq = self.seq + 1  # next_seq, inlined: observe is half of a write (pmem perf core)
        self.ev_text.append(text)
        self.ev_source.append(source)
        self.ev_seq.append(seq)
        if time is not None:
            self.ev_time[n] = time
        if valid is not None:
            self.set_valid_time(n, *valid)
        return n

    def set_valid_time(self, ev: int, text: str, at: datetime) -> None:
        """Evidence ``ev`` states facts true from ``text`` (ISO 8601), parsed as ``at`` (naive UTC)."""
        self.ev_valid[ev] = text
        self.valid_at[ev] = at

    def new_key(self, name: str) -> int:
        """Admit key ``name`` (empty: no head, no version) and return its id."""
        kid = self.kid[name] = len(self.key_names)
        self.key_names.append(name)
        self.k_head.append(NONE)
        self.k_newest.append(NONE)
        return kid

    def admit_key(self, name: str) -> int:
        """The id of key ``name``, admitting it (empty) when new."""
        kid = self.kid.get(name)
        return self.new_key(name) if kid is None else kid

    def append_version(self, kid: int, value: str, status: int, seq: int, ev: int, prev: int) -> int:
        """Append a version of key ``kid`` superseding ``prev`` (open, created at ``seq`` from evidence
        ``ev``) as the key's newest, keeping its arrival chain; return its id."""
        vid = len(self.v_key)
        self.v_key.append(kid)
        self.v_value.append(value)
        self.v_status.append(status)
        self.v_from.append(seq)
        self.v_to.append(NONE)
        self.v_ev.append(ev)
        self.v_prev.append(prev)
        newest = self.k_newest
        if newest[kid] != prev:
            self.v_older[vid] = newest[kid]
        newest[kid] = vid
        return vid

    def set_head(self, kid: int, vid: int) -> None:
        """Make version ``vid`` (NONE: no version, an empty cell) the head of key ``kid``."""
        self.k_head[kid] = vid

    def accept(self, name: str, value: str, ev: int, *, decided: bool = False) -> bool:
        """Accept ``value`` on key ``name``: a new active head superseding the old one, logged; whether
        it did. The hottest path of a write (``pmem perf core``).

        Unless ``decided`` (the graph weighed this accept and it supersedes: see
        ``ProvenanceGraph.apply``), only when that is all an accept does: the key exists, its head is
        empty or holds another value, no evidence states a valid time (to place it by) and no authority
        is configured (to weigh); when not, nothing is written and the graph decides.

        The displaced head is closed lazily: a version stored as active that is no longer its key's
        head *is* superseded, closed when its newest superseder arrived (:meth:`closing`). This saves
        two random writes per accept. A contested head is closed eagerly, with its alternatives."""
        kid = self.kid.get(name)
        if kid is None:
            return False
        head = self.k_head[kid]
        if not decided and (
            self.valid_at or self.authority is not None or (head != NONE and self.v_value[head] == value)
        ):
            return False  # the graph weighs it (a repeat is support, not a new version)
        self.seq = seq = self.seq + 1
        if kid in self.open_alts:
            self.v_status[head] = SUPERSEDED
            self.v_to[head] = seq
            self.close_open_alternatives(kid, seq)
        # append_version, set_head and log, inlined: the one call a write makes here (pmem perf core); the
        # two are kept equal by tests/graph/test_graph_store.py
        vid = len(self.v_key)
        newest = self.k_newest
        if newest[kid] != head:
            self.v_older[vid] = newest[kid]
        self.k_head[kid] = newest[kid] = vid
        self.v_key.append(kid)
        self.v_value.append(value)
        self.v_status.append(ACTIVE)
        self.v_from.append(seq)
        self.v_to.append(NONE)
        self.v_ev.append(ev)
        self.v_prev.append(head)
        self.op_code.append(ACCEPT_APPLIED)
        self.op_target.append(vid)
        return True

    def close(self, vid: int, status: int, seq: int) -> None:
        """Close version ``vid`` at ``seq`` with ``status`` (superseded, contradicted, revoked)."""
        self.v_status[vid] = status
        self.v_to[vid] = seq

    def reopen(self, vid: int) -> None:
        """Make version ``vid`` active and open again (a rollback to it)."""
        self.v_status[vid] = ACTIVE
        self.v_to[vid] = NONE

    def close_lazily_closed(self, kid: int) -> None:
        """Write down the closing of ``kid``'s versions closed lazily (:meth:`closing`): before its
        supersedes links change, which the lazy reading depends on."""
        for p, closed_at in self.closing(kid).items():
            self.close(p, SUPERSEDED, closed_at)

    def insert_superseded(self, kid: int, value: str, seq: int, ev: int, above: int, below: int) -> int:
        """A version of ``kid`` entering its history between ``below`` (what it supersedes; NONE: the
        bottom) and ``above`` (which now supersedes it), closed at once; its id."""
        vid = self.append_version(kid, value, SUPERSEDED, seq, ev, below)
        self.v_to[vid] = seq
        if above not in self.v_older:  # the version now superseding this one keeps its arrival chain
            self.v_older[above] = self.v_prev[above]
        self.v_prev[above] = vid
        return vid

    def reopen_predecessor(self, kid: int, retracted: int) -> None:
        """Make the most recent merely superseded predecessor of ``retracted`` (along supersedes edges)
        active again as ``kid``'s head; no such version: the cell is empty (a rollback)."""
        p = self.v_prev[retracted]
        # a predecessor stored as active is one closed lazily by accept, i.e. superseded
        while p != NONE and self.v_status[p] != SUPERSEDED and self.v_status[p] != ACTIVE:
            p = self.v_prev[p]
        if p != NONE:
            self.reopen(p)
        self.set_head(kid, p)

    def place_by_valid_time(self, kid: int, at: datetime) -> tuple[int, int]:
        """Where a version valid from ``at`` enters ``kid``'s history: (the version that will supersede
        it, the one it supersedes or NONE), walking down from the head past the versions valid later."""
        above = self.k_head[kid]
        below = self.v_prev[above]
        while below != NONE and (when := self.valid_at.get(self.v_ev[below])) is not None and when > at:
            above, below = below, self.v_prev[below]
        return above, below

    def add_alternative(self, kid: int, value: str, seq: int, ev: int) -> int:
        """A contest: ``value`` as an open alternative of ``kid``'s head, which becomes contested; its id."""
        head = self.k_head[kid]
        vid = self.append_version(kid, value, ALTERNATIVE, seq, ev, NONE)
        self.v_alt[vid] = head
        self.open_alts[kid] = [*self.open_alts.get(kid, ()), vid]
        self.v_status[head] = CONTESTED
        return vid

    def settle(self, kid: int, winner: int, seq: int) -> None:
        """Resolve ``kid``'s contest for ``winner`` (its head or an open alternative): every other open
        version is contradicted at ``seq``, and the winner is the active head."""
        head = self.k_head[kid]
        for loser in (head, *self.open_alts.pop(kid, ())):
            if loser != winner:
                self.close(loser, CONTRADICTED, seq)
        self.v_status[winner] = ACTIVE
        if winner != head:
            # the promoted value supersedes the contradicted incumbent; its arrival-chain link was
            # stored explicitly at creation (an alternative has no supersedes target then)
            self.v_prev[winner] = head
            self.set_head(kid, winner)

    def close_open_alternatives(self, kid: int, seq: int) -> None:
        """Close the open alternatives of ``kid``'s head at ``seq`` (their status stays: never authoritative)."""
        alts = self.open_alts.pop(kid, None)
        if alts:
            v_to = self.v_to
            for a in alts:
                v_to[a] = seq

    def add_support(self, vid: int, ev: int, seq: int) -> None:
        """Count one more assertion of version ``vid``: a supported-by edge from ``ev`` (when given)."""
        self.v_extra_support[vid] = self.v_extra_support.get(vid, 0) + 1
        if ev != NONE:
            self.sb_version.append(vid)
            self.sb_ev.append(ev)
            self.sb_seq.append(seq)

    def add_tombstone(self, vid: int, seq: int, ev: int) -> None:
        """A tombstone revoking version ``vid`` at ``seq`` on evidence ``ev``."""
        self.tb_version.append(vid)
        self.tb_seq.append(seq)
        self.tb_ev.append(ev)

    def log(
        self,
        seq: int,
        req: int,
        eff: int,
        kid: int,
        ev: int,
        applied: bool,
        target: int,
        value: str | None = None,
        reason: str | None = None,
        created: bool = False,
    ) -> None:
        """Append an operation-log entry; ``created``: the operation created ``target``, which then holds
        its seq, key, evidence and value."""
        if not created:
            self.op_extra[len(self.op_code)] = (seq, kid, ev, value, reason)
        self.op_code.append(req | eff << 3 | applied << 6)
        self.op_target.append(target)

    def record_alias(self, op: int, alias: str) -> None:
        """Operation ``op`` wrote the key extracted as ``alias`` (soft identity merged it)."""
        self.op_alias[op] = alias

    def record_premises(self, op: int, premises: tuple[tuple[int, int], ...], applied: bool) -> None:
        """Operation ``op`` named ``premises`` ((key id, its head then), ...); an applied one whose target
        is its key's head now holds them as that head's premises."""
        self.op_deps[op] = tuple(kid for kid, _ in premises)
        target = self.op_target[op]
        if applied and target != NONE and target == self.k_head[self.v_key[target]]:
            self.dep[target] = premises

    def record_retracts(self, value: str) -> None:
        """The operation logged next retracts ``value``."""
        self.op_retracts[len(self.op_code)] = value

    def configure_authority(self, default: int, from_start: bool) -> None:
        """Rank unlisted sources at ``default``; ``from_start``: the constructor configured authority
        (maybe empty), which a saved state records."""
        self.default_authority = default
        self.authority_from_start = from_start
        if from_start:
            self.authority = {}

    def set_authority(self, source: str, level: int, after: int) -> None:
        """Rank ``source`` at ``level`` from after seq ``after`` (-1: from the start)."""
        if self.authority is None:
            self.authority = {}
        self.authority[source] = level
        self.authority_log.append((after, source, level))

    # ------------------ undo, erasure, unmerge (pmem.graph._rederive): a key's history replaced

    def rewind(self, seq: int) -> None:
        """Hand out ``seq + 1`` next: a scratch store replaying a key's operations at their own seqs."""
        self.seq = seq

    def log_undo(self, kid: int, ev: int, target: int, reason: str | None, applied: bool) -> None:
        """Log an undo of operation ``target`` (of key ``kid``) at the next seq: applied, or not with
        ``reason``. Replays ask for the target of a refused one too."""
        self.undo_of[len(self.op_code)] = target
        effect = UNDO if applied else NOOP
        self.log(self.next_seq(), UNDO, effect, kid, ev, applied, NONE, None, reason)

    def erase_evidence(self, ev: int) -> None:
        """Mark evidence ``ev`` erased and blank what identifies the statement: its text, its time, its
        valid time, and its source (which becomes :data:`ERASED_SOURCE`; the source's name leaves the
        graph too when no other evidence and no authority setting names it). Its id and seq stay: every
        later arrival is numbered after it. Its operations are re-derived by the caller."""
        self.erased.add(ev)
        self.ev_text[ev] = ""
        self.ev_time.pop(ev, None)
        self.ev_valid.pop(ev, None)
        self.valid_at.pop(ev, None)
        code = self.ev_source[ev]
        name = self.sources[code]
        if name == ERASED_SOURCE:
            return
        if self.ev_source.count(code) == 1 and name not in (self.authority or {}):
            # the name is no one else's: its code stays (the codes after it keep their numbers) and
            # reads ERASED_SOURCE, which names the first code of that text (as a load derives it)
            self.sources[code] = ERASED_SOURCE
            del self.source_code[name]
            self.source_code[ERASED_SOURCE] = min(code, self.source_code.get(ERASED_SOURCE, code))
        else:
            self.ev_source[ev] = self.admit_source(ERASED_SOURCE)

    def forget_retracted_values(self, ops: list[int], gone: set[str]) -> None:
        """Of retractions ``ops``, those that retract one of the values ``gone`` (erased, and stated by
        no operation left) lose that value (a revoke's value naming it too) and are left out of every
        later replay."""
        for i in ops:
            if self.op_retracts.get(i) in gone:
                del self.op_retracts[i]
                self.retracts_erased.add(i)
                e = self.op_extra.get(i)
                if e is not None and e[3] in gone:  # a revoke's value named it
                    self.op_extra[i] = (e[0], e[1], e[2], None, e[4])

    def move_to_key(self, versions: list[int], ops: set[int], kid: int) -> None:
        """Move ``versions`` and the operations ``ops`` to key ``kid`` (an unmerge; both keys are then
        re-derived by the caller). The operation index is rebuilt at its next use."""
        for v in versions:
            self.v_key[v] = kid
        for i in ops:
            e = self.op_extra.get(i)
            if e is not None:
                self.op_extra[i] = (e[0], kid, e[2], e[3], e[4])
        self._op_index = None

    def share_evidence(self, other: GraphStore) -> None:
        """Read ``other``'s evidence (texts, sources, seqs, valid times) as this store's own: a scratch
        store replaying one of ``other``'s keys (its columns are shared, not copied)."""
        self.ev_text, self.ev_source, self.ev_seq = other.ev_text, other.ev_source, other.ev_seq
        self.sources, self.source_code = other.sources, other.source_code
        self.ev_valid, self.valid_at = other.ev_valid, other.valid_at

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
        own = [v for v in self.chain(kid) if self.v_key[v] == kid]  # a chain may pass through moved versions
        versions = list(dict.fromkeys([*own, *adopted]))
        by_from = {self.v_from[v]: v for v in versions}  # a version is known by its creating operation's seq
        vmap: dict[int, int] = {NONE: NONE}  # scratch version -> this store's
        for t in replayed.values():
            if t in source.op_extra:
                continue  # created nothing
            sv = source.op_target[t]
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
                gone = self.v_from[v] in erased_ops
                if self.v_status[v] not in (UNDONE, ERASED) or gone:
                    self.v_status[v] = ERASED if gone else UNDONE
                    if self.v_to[v] == NONE:
                        self.v_to[v] = self.seq
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
        self.k_newest[kid] = ordered[-1] if ordered else NONE
        self.set_head(kid, vmap[source.k_head[0]])
        alts = source.open_alts.get(0)
        if alts:
            self.open_alts[kid] = [vmap[a] for a in alts]
        else:
            self.open_alts.pop(kid, None)
        self._replace_edges(kid, source, vmap)
        for i in ops:
            req, _, _, ev, seq = self.request(i)
            if req == UNDO:
                continue
            if i in left_out:
                self.op_code[i] = req | NOOP << 3
                self.op_target[i] = NONE
                self.op_extra[i] = (seq, kid, ev, left_out_values[i], f"left out: {left_out[i]}")
                continue
            t = replayed[i]
            self.op_code[i] = source.op_code[t]
            self.op_target[i] = vmap[source.op_target[t]]
            e = source.op_extra.get(t)
            if e is None:
                self.op_extra.pop(i, None)
            else:
                self.op_extra[i] = (e[0], kid, e[2], e[3], e[4])

    def _replace_edges(self, kid: int, source: GraphStore, vmap: dict[int, int]) -> None:
        """Supported-by edges and tombstones of the key: ``source``'s, in place of the old ones."""
        for names in (("sb_version", "sb_ev", "sb_seq"), ("tb_version", "tb_seq", "tb_ev")):
            columns: list[array[int]] = [getattr(self, name) for name in names]
            v_key = self.v_key
            keep = [j for j, v in enumerate(columns[0]) if v_key[v] != kid]
            if len(keep) != len(columns[0]):
                columns = [array("q", [column[j] for j in keep]) for column in columns]
            replayed: list[array[int]] = [getattr(source, name) for name in names]
            columns[0].extend(vmap[v] for v in replayed[0])
            for name, column, added in zip(names, columns, replayed, strict=True):
                if name != names[0]:
                    column.extend(added)
                setattr(self, name, column)

    # ------------------ column-wise extension (apply_batch, pmem.graph._bulk): the same entries, in
    # the same dict insertion orders, as the per-operation writes would make

    def extend_keys(self, names: list[str]) -> None:
        """Admit the new keys ``names`` (empty cells), in order."""
        k0 = len(self.key_names)
        self.kid.update(zip(names, range(k0, k0 + len(names)), strict=True))
        self.key_names.extend(names)
        empty = np.full(len(names), NONE, np.int64).tobytes()
        self.k_head.frombytes(empty)
        self.k_newest.frombytes(empty)

    def extend_evidence(
        self, texts: pa.Array[Any], sources: np.ndarray, seqs: np.ndarray, times: dict[int, str]
    ) -> None:
        """Admit evidence nodes: their texts (kept as Arrow), source codes and seqs; ``times``: the
        observation times of those that have one, by index from the first new node (0)."""
        n0 = len(self.ev_seq)
        self.ev_text.extend_arrow(texts)
        _extend(self.ev_source, sources)
        _extend(self.ev_seq, seqs)
        self.ev_time.update((n0 + i, time) for i, time in times.items())

    def open_version_window(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Extend the status, supersedes and valid_to columns by ``n`` placeholder versions (active, no
        link, open) and return writable views of the three whole columns: a column-wise writer reads and
        writes old and new versions through them in place. The views must be released (deleted) before
        :meth:`close_version_window`, which resizes the columns."""
        for col, fill in ((self.v_status, ACTIVE), (self.v_prev, NONE), (self.v_to, NONE)):
            col.frombytes(np.full(n, fill, np.int64).data.cast("B"))
        return (
            np.frombuffer(self.v_status, np.int64),
            np.frombuffer(self.v_prev, np.int64),
            np.frombuffer(self.v_to, np.int64),
        )

    def close_version_window(
        self, end: int, key: np.ndarray, values: list[str], valid_from: np.ndarray, ev: np.ndarray
    ) -> None:
        """End the window: the three columns keep their first ``end`` rows (the created versions packed
        at the front of the placeholders), and the created versions' key, value, seq and evidence are
        appended to the other columns."""
        for col in (self.v_status, self.v_prev, self.v_to):
            del col[end:]
        _extend(self.v_key, key)
        self.v_value.extend(values)
        _extend(self.v_from, valid_from)
        _extend(self.v_ev, ev)

    def extend_log(
        self, code: np.ndarray, target: np.ndarray, extra: Iterable[tuple[int, tuple[Any, ...]]]
    ) -> None:
        """Log operations (their codes and targets); ``extra``: (log position, (seq, key, evidence,
        value, reason)) of those that created no version, in order."""
        _extend(self.op_code, code)
        _extend(self.op_target, target)
        self.op_extra.update(extra)

    def record_retracted(self, retracted: Iterable[tuple[int, str]]) -> None:
        """(log position, the value it retracts) of retractions just logged, in order."""
        self.op_retracts.update(retracted)

    def extend_support(
        self, versions: np.ndarray, ev: np.ndarray, seqs: np.ndarray, counted: list[int], counts: np.ndarray
    ) -> None:
        """Supported-by edges (``versions`` from evidence ``ev`` at ``seqs``), and ``counts`` more
        assertions of each of the versions ``counted`` (in the order of their first support)."""
        _extend(self.sb_version, versions)
        _extend(self.sb_ev, ev)
        _extend(self.sb_seq, seqs)
        have = np.fromiter(map(self.v_extra_support.get, counted, repeat(0)), np.int64, len(counted))
        self.v_extra_support.update(zip(counted, (have + counts).tolist(), strict=True))

    def extend_tombstones(self, versions: np.ndarray, seqs: np.ndarray, ev: np.ndarray) -> None:
        """Tombstones revoking ``versions`` at ``seqs`` on evidence ``ev``."""
        _extend(self.tb_version, versions)
        _extend(self.tb_seq, seqs)
        _extend(self.tb_ev, ev)

    def record_links(
        self, older: Iterable[tuple[int, int]], alternative_of: Iterable[tuple[int, int]]
    ) -> None:
        """Created versions' arrival-chain links (where kept apart) and alternative-of edges, in order."""
        self.v_older.update(older)
        self.v_alt.update(alternative_of)

    def update_open_alternatives(
        self,
        closed: Iterable[int],
        extended: Iterable[tuple[int, list[int]]],
        opened: Iterable[tuple[int, list[int]]],
    ) -> None:
        """Keys whose open alternatives were ``closed`` leave the table; ``extended`` ones keep their place
        with more; ``opened`` ones enter it, in order."""
        for kid in closed:
            del self.open_alts[kid]
        for kid, vids in extended:
            self.open_alts[kid] = self.open_alts[kid] + vids  # in place: the key keeps its place
        for kid, vids in opened:
            self.open_alts[kid] = vids

    def set_heads(
        self, kids: np.ndarray, heads: np.ndarray, kids_newest: np.ndarray, newest: np.ndarray
    ) -> None:
        """Keys ``kids`` get the heads ``heads``; keys ``kids_newest`` the newest versions ``newest``."""
        np.frombuffer(self.k_head, np.int64)[kids] = heads
        np.frombuffer(self.k_newest, np.int64)[kids_newest] = newest

    # ------------------ loading a saved state (pmem.graph._tables, _state_legacy)

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
        """Fill an empty store from the arrays of a saved state (what the ``*_arrays`` methods give,
        ``values`` the versions' values), encoding them as the store keeps them: an arrival chain or
        support only where it differs from the common case, an operation's seq, key, evidence and value
        only where its target version does not hold them.

        Raises:
            ValueError: a key named twice.
        """
        self.sources = list(evidence.sources)
        self.source_code = _first_codes(self.sources)
        self.ev_text = TextColumn()
        self.ev_text.extend_arrow(evidence.text)  # as read: no Python string per text
        self.ev_source, self.ev_seq = _typed(evidence.source), _typed(evidence.seq)
        self.ev_time, self.ev_valid = _own(evidence.time), _own(evidence.valid)
        self.valid_at = {n: valid_instant(text, "load")[1] for n, text in self.ev_valid.items()}
        self.erased = set(np.flatnonzero(evidence.erased).tolist())
        self.key_names = cast("list[str]", keys.name.to_pylist())
        self.kid = dict(zip(self.key_names, range(len(self.key_names)), strict=True))
        if len(self.kid) != len(self.key_names):
            msg = "the keys table names a key twice"
            raise ValueError(msg)
        self.k_head, self.k_newest = _typed(keys.head), _typed(keys.newest)
        self.open_alts = {kid: list(a) for kid, a in keys.open_alternatives.items() if a}
        self._load_versions(versions, values)
        self.sb_version, self.sb_ev, self.sb_seq = (
            _typed(edges.support_version),
            _typed(edges.support_evidence),
            _typed(edges.support_seq),
        )
        self.tb_version, self.tb_seq, self.tb_ev = (
            _typed(edges.tombstone_version),
            _typed(edges.tombstone_seq),
            _typed(edges.tombstone_evidence),
        )
        self._load_operations(operations, values)
        self.seq = seq

    def _load_versions(self, versions: VersionArrays, values: pa.Array[Any]) -> None:
        self.v_key = _typed(versions.key)
        self.v_value = cast("list[str]", values.to_pylist())
        self.v_status = _typed(versions.status)
        self.v_from, self.v_to, self.v_ev = (
            _typed(versions.valid_from),
            _typed(versions.valid_to),
            _typed(versions.evidence),
        )
        prev = versions.supersedes
        self.v_prev = _typed(prev)
        self.v_alt = _own(versions.alternative_of)
        apart = np.flatnonzero(versions.previous != prev)
        self.v_older = dict(zip(apart.tolist(), versions.previous[apart].tolist(), strict=True))
        more = np.flatnonzero(versions.support != 1)
        self.v_extra_support = dict(zip(more.tolist(), (versions.support[more] - 1).tolist(), strict=True))
        self.dep = _own(versions.premises)

    def _load_operations(self, ops: OperationArrays, version_values: pa.Array[Any]) -> None:
        self.op_code, self.op_target = _typed(ops.code), _typed(ops.target)
        target, seq, kid, ev = ops.target, ops.seq, ops.key, ops.evidence
        # an entry that reads exactly as its target version (what created it) is stored as that version
        own = target >= 0
        if own.any():
            t = np.where(own, target, 0)
            own &= np.frombuffer(self.v_from, np.int64)[t] == seq
            own &= np.frombuffer(self.v_key, np.int64)[t] == kid
            own &= np.frombuffer(self.v_ev, np.int64)[t] == ev
            values: Any = ops.value  # the stubs' element types do not meet across these calls
            rows: Any = pa.array(t)
            theirs: Any = version_values.take(rows)
            same: Any = pc.fill_null(pc.equal(values, theirs), False)
            own &= same.to_numpy(zero_copy_only=False)
            own &= ops.reason.is_null().to_numpy(zero_copy_only=False)
        apart = np.flatnonzero(~own)
        at: Any = pa.array(apart)
        self.op_extra = dict(
            zip(
                apart.tolist(),
                zip(
                    seq[apart].tolist(),
                    kid[apart].tolist(),
                    ev[apart].tolist(),
                    ops.value.take(at).to_pylist(),
                    ops.reason.take(at).to_pylist(),
                    strict=True,
                ),
                strict=True,
            )
        )
        self.undo_of, self.op_alias = _own(ops.undoes), _own(ops.alias)
        self.op_deps, self.op_retracts = _own(ops.premise_keys), _own(ops.retracts)
        self.retracts_erased = set(np.flatnonzero(ops.retracts_erased).tolist())

    def load_authority(self, config: dict[str, Any]) -> None:
        """Set source authority as :meth:`authority_config` gave it."""
        self.default_authority = int(config["default"])
        self.authority_from_start = bool(config["from_start"])
        if config["configured"]:
            self.authority = {}
            for after, source, level in config["settings"]:
                self.authority[source] = int(level)
                self.authority_log.append((int(after), str(source), int(level)))

    def restore(self, columns: Mapping[str, Any], seq: int | None = None) -> None:
        """Set columns of a loaded state: ``columns`` maps names of :data:`RESTORED` to their contents
        (an integer column as ``array("q")``, ``ev_text`` as a list of strings, sparse ones as dicts);
        ``seq`` is the last seq handed out. The lookups derived from them (key ids from ``key_names``,
        source codes from ``sources``, parsed valid times from ``ev_valid``) are rebuilt.

        Raises:
            ValueError: a name that is not a restorable column.
        """
        unknown = sorted(set(columns) - RESTORED)
        if unknown:
            msg = f"GraphStore.restore: not a restorable column: {', '.join(unknown)}"
            raise ValueError(msg)
        for name, content in columns.items():
            setattr(self, name, TextColumn(content) if name == "ev_text" else content)
        if seq is not None:
            self.seq = seq
        if "key_names" in columns:
            self.kid = {name: kid for kid, name in enumerate(self.key_names)}
        if "sources" in columns:
            self.source_code = _first_codes(self.sources)
        if "ev_valid" in columns:
            self.valid_at = {n: valid_instant(text, "load")[1] for n, text in self.ev_valid.items()}

    def retracted_values(self) -> dict[int, str]:
        """What each retraction retracts, derived from the log (states before schema 6 did not record
        it): a revoke's named value; else, for one applied, the value of the version it acted on (a
        revoke's or a reject's retracted head; for a reject with a replacement, the version that
        replacement supersedes). One that acted on nothing, or on a version erased since, retracts
        nothing recorded: it replays as it always did."""
        out: dict[int, str] = {}
        code = np.frombuffer(self.op_code, np.int64) if len(self.op_code) else np.zeros(0, np.int64)
        requested = code & 7
        for i in np.flatnonzero((requested == REJECT) | (requested == REVOKE)).tolist():
            applied, req = self.op_code[i] >> 6, self.op_code[i] & 7
            extra = self.op_extra.get(i)
            if req == REVOKE and extra is not None and extra[3] is not None:
                out[i] = extra[3]
                continue
            target = self.op_target[i]
            if not applied or target == NONE:
                continue
            if extra is None:  # a reject that created its replacement: it retracted what that supersedes
                target = self.v_prev[target]
            if target != NONE and self.v_status[target] != ERASED:
                out[i] = self.v_value[target]
        return out

    # ------------------ reading one key, version, evidence node or log entry

    def key_id(self, name: str) -> int | None:
        """The id of key ``name``; None when it was never written."""
        return self.kid.get(name)

    def key_name(self, kid: int) -> str:
        return self.key_names[kid]

    def key_count(self) -> int:
        return len(self.key_names)

    def iter_keys(self) -> Iterator[str]:
        """Every key name, in admission order."""
        return iter(self.key_names)

    def lookup(self, name: str) -> tuple[int, int, str | None] | None:
        """Key ``name``'s id, head and head's value ((kid, NONE, None) for an empty cell); None when the
        key was never written. One call for the write's hot path."""
        kid = self.kid.get(name)
        if kid is None:
            return None
        head = self.k_head[kid]
        return kid, head, None if head == NONE else self.v_value[head]

    def head(self, kid: int) -> int:
        """The head version of key ``kid`` (NONE: the cell is empty)."""
        return self.k_head[kid]

    def head_and_value(self, kid: int) -> tuple[int, str | None]:
        """Key ``kid``'s head and its value ((NONE, None) for an empty cell)."""
        head = self.k_head[kid]
        return head, None if head == NONE else self.v_value[head]

    def head_value(self, kid: int) -> str | None:
        """The value of key ``kid``'s head; None when the cell is empty."""
        head = self.k_head[kid]
        return None if head == NONE else self.v_value[head]

    def chain(self, kid: int) -> list[int]:
        """Version ids of key ``kid`` by arrival, newest first."""
        out, older, prev, v = [], self.v_older, self.v_prev, self.k_newest[kid]
        while v != NONE:
            out.append(v)
            v = older.get(v, prev[v])
        return out

    def closing(self, kid: int) -> dict[int, int]:
        """Versions of ``kid`` closed lazily -> the seq their newest superseder arrived at.

        An accept does not close the head it displaces (two random writes saved per accept): a version
        stored as active that is no longer its key's head *is* superseded, closed when its newest
        superseder arrived. Reads and the state tables materialize it through this.
        """
        head = self.k_head[kid]
        status, prev, start = self.v_status, self.v_prev, self.v_from
        closed: dict[int, int] = {}
        for v in self.chain(kid):  # newest first, so the first superseder seen is the newest
            p = prev[v]
            if p != NONE and p != head and p not in closed and status[p] == ACTIVE:
                closed[p] = start[v]
        return closed

    def version_count(self) -> int:
        return len(self.v_key)

    def origin(self, vid: int) -> tuple[int, int]:
        """Version ``vid``'s key id and the seq of the operation that created it."""
        return self.v_key[vid], self.v_from[vid]

    def value(self, vid: int) -> str:
        return self.v_value[vid]

    def status(self, vid: int) -> int:
        """Version ``vid``'s stored status (a lazily closed one still reads active: see :meth:`closing`)."""
        return self.v_status[vid]

    def creating_evidence(self, vid: int) -> int:
        """The evidence that created version ``vid`` (NONE: none)."""
        return self.v_ev[vid]

    def support(self, vid: int) -> int:
        """How many assertions support version ``vid``."""
        return 1 + self.v_extra_support.get(vid, 0)

    def alternatives(self, kid: int) -> list[int]:
        """The open alternatives of key ``kid``'s head (a new list)."""
        return list(self.open_alts.get(kid, ()))

    def has_alternatives(self, kid: int) -> bool:
        return kid in self.open_alts

    def has_premises(self) -> bool:
        """Whether any head was asserted with premises."""
        return bool(self.dep)

    def premises(self, vid: int) -> tuple[tuple[int, int], ...]:
        """Version ``vid``'s premises: (key id, that key's head when asserted), ...; () without."""
        return self.dep.get(vid, ())

    def version_fields(
        self, vid: int, closing: dict[int, int] | None = None
    ) -> tuple[int, str, int, int, int, int, int, int, int]:
        """Version ``vid`` as read: (key id, value, status, valid from, valid to, creating evidence,
        support, supersedes, alternative of), NONE where absent; a lazily closed version reads
        superseded (``closing``: its key's :meth:`closing`, computed once for many versions)."""
        if closing is None:
            closing = self.closing(self.v_key[vid])
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

    def evidence_count(self) -> int:
        """How many evidence nodes there are (the next one's index)."""
        return len(self.ev_seq)

    def source_id(self, source: str) -> int | None:
        """The code of ``source``; None when not seen yet."""
        return self.source_code.get(source)

    def has_valid_times(self) -> bool:
        """Whether any evidence states a valid time."""
        return bool(self.valid_at)

    def valid_instant(self, ev: int) -> datetime | None:
        """When evidence ``ev``'s facts became true (naive UTC); None when it does not say."""
        return self.valid_at.get(ev)

    def is_erased(self, ev: int) -> bool:
        return ev in self.erased

    def has_erasures(self) -> bool:
        return bool(self.erased)

    def has_observation_times(self) -> bool:
        """Whether any evidence carries an observation time."""
        return bool(self.ev_time)

    def evidence_fields(self, ev: int) -> tuple[str, str, str | None, int, str | None]:
        """Evidence ``ev``: (text, source, observation time, seq, valid time)."""
        return (
            self.ev_text[ev],
            self.sources[self.ev_source[ev]],
            self.ev_time.get(ev),
            self.ev_seq[ev],
            self.ev_valid.get(ev),
        )

    def evidence_times(self, ev: int) -> tuple[str | None, str | None]:
        """Evidence ``ev``'s (observation time, valid time), each None when not given."""
        return self.ev_time.get(ev), self.ev_valid.get(ev)

    def has_authority(self) -> bool:
        """Whether source authority is configured (else every source ranks the same)."""
        return self.authority is not None

    def authority_level(self, source: str) -> int:
        """The level ``source`` ranks at now (the default when unlisted or not configured)."""
        return (self.authority or {}).get(source, self.default_authority)

    def rank(self, ev: int) -> int:
        """The authority level of evidence ``ev``'s source now (no evidence: the default)."""
        if ev == NONE:
            return self.default_authority
        return self.authority_level(self.sources[self.ev_source[ev]])

    def initial_authority(self) -> dict[str, int] | None:
        """The source levels the graph was constructed with; None when it was not given any."""
        if not self.authority_from_start:
            return None
        return {source: level for after, source, level in self.authority_log if after < 0}

    def authority_settings(self) -> list[tuple[int, str, int]]:
        """Every authority setting made after construction: (after seq, source, level), in order."""
        return [s for s in self.authority_log if s[0] >= 0]

    def operation_count(self) -> int:
        return len(self.op_code)

    def request(self, i: int) -> tuple[int, int, str | None, int, int]:
        """What operation ``i`` requested: (op code, key id, value, evidence index, seq)."""
        e = self.op_extra.get(i)
        if e is None:
            t = self.op_target[i]
            return self.op_code[i] & 7, self.v_key[t], self.v_value[t], self.v_ev[t], self.v_from[t]
        return self.op_code[i] & 7, e[1], e[3], e[2], e[0]

    def operation(self, i: int) -> tuple[int, int, int, str | None, int, int, str | None, str | None]:
        """Log entry ``i``: (seq, op code, key id, value, evidence, target version, reason, retracts)."""
        code, target = self.op_code[i], self.op_target[i]
        e = self.op_extra.get(i)
        if e is None:  # the operation created its target, which holds its seq, key, evidence and value
            e = (self.v_from[target], self.v_key[target], self.v_ev[target], self.v_value[target], None)
        seq, kid, ev, value, reason = e
        return seq, code, kid, value, ev, target, reason, self.op_retracts.get(i)

    def applied(self, op: int) -> bool:
        """Whether operation ``op`` was applied."""
        return bool(self.op_code[op] >> 6)

    def undone_op(self, op: int) -> int:
        """The log position of the operation undo ``op`` undoes."""
        return self.undo_of[op]

    def retracted_value(self, op: int) -> str | None:
        """The value retraction ``op`` retracts (None: not a retraction, or no head when it arrived)."""
        return self.op_retracts.get(op)

    def retracts_only_erased(self, op: int) -> bool:
        """Whether retraction ``op`` retracts a value only erased evidence stated (a noop in every replay)."""
        return op in self.retracts_erased

    def premise_keys(self, op: int) -> tuple[int, ...]:
        """The key ids operation ``op`` named as premises (() without)."""
        return self.op_deps.get(op, ())

    def alias(self, op: int) -> str | None:
        """The key as extracted, when soft identity merged operation ``op`` onto another key."""
        return self.op_alias.get(op)

    def aliased_operations(self, alias: str) -> list[int]:
        """The operations recorded with ``alias`` as the key they were extracted as, in log order."""
        return sorted(i for i, a in self.op_alias.items() if a == alias)

    def is_undo_of_any(self, op: int, targets: set[int]) -> bool:
        """Whether operation ``op`` is an undo of one of ``targets``."""
        return self.undo_of.get(op, NONE) in targets

    def is_evidence_seq(self, seq: int) -> bool:
        """Whether an observation arrived at ``seq``."""
        ev = np.frombuffer(self.ev_seq, np.int64) if len(self.ev_seq) else np.zeros(0, np.int64)
        i = int(np.searchsorted(ev, seq))  # evidence arrives in seq order
        return i < len(ev) and int(ev[i]) == seq

    # ------------------ reading column-wise (copies): saving, checks, apply_batch's scan

    def current_values(self) -> list[tuple[str, str]]:
        """(key, head value) of every non-empty cell, in admission order."""
        heads, values = self.k_head, self.v_value
        return [(key, values[heads[kid]]) for key, kid in self.kid.items() if heads[kid] != NONE]

    def cells(self) -> list[tuple[str, int]]:
        """(key, key id) of every non-empty cell, in admission order."""
        heads = self.k_head
        return [(key, kid) for key, kid in self.kid.items() if heads[kid] != NONE]

    def edges(self) -> Iterator[tuple[int, int, int]]:
        """Every typed edge as (kind, source, target): the kind indexes ``EDGE_KINDS``; supported-by
        edges go version -> evidence, supersedes and alternative-of version -> version, revokes
        tombstone -> version."""
        for vid, (prev, ev) in enumerate(zip(self.v_prev, self.v_ev, strict=True)):
            if ev != NONE:
                yield (0, vid, ev)
            if prev != NONE:
                yield (1, vid, prev)
        for vid, alt in sorted(self.v_alt.items()):
            yield (2, vid, alt)
        for v, e in zip(self.sb_version, self.sb_ev, strict=True):
            yield (0, v, e)
        for t, v in enumerate(self.tb_version):
            yield (3, t, v)

    def counts(self, n_ops: int) -> dict[str, int]:
        """Node and edge counts, and ``op_<name>``: operations by effective type (``n_ops`` of them)."""
        # column-wise: a sharded state's load compares these with its index (10M operations: a Python
        # loop over the codes took seconds)
        codes = np.frombuffer(self.op_code, np.int64) if len(self.op_code) else np.zeros(0, np.int64)
        by_op = np.bincount((codes >> 3) & 7, minlength=n_ops)
        creating = np.frombuffer(self.v_ev, np.int64) if len(self.v_ev) else np.zeros(0, np.int64)
        return {
            "evidence": len(self.ev_seq),
            "keys": len(self.key_names),
            "cells": len(self.k_head) - self.k_head.count(NONE),
            "versions": len(self.v_key),
            "operations": len(self.op_code),
            "failed_operations": int(np.count_nonzero((codes >> 6) == 0)),
            "tombstones": len(self.tb_version),
            "supported_by_edges": int(np.count_nonzero(creating != NONE)) + len(self.sb_version),
            **{f"by_op_{code}": int(by_op[code]) for code in range(n_ops)},
        }

    def evidence_seqs(self) -> np.ndarray:
        """The arrival seq of every evidence node (a copy)."""
        return np.array(self.ev_seq, np.int64)

    def erased_evidence(self) -> np.ndarray:
        """The indexes of the erased evidence (any order)."""
        return np.fromiter(self.erased, np.int64, len(self.erased))

    def heads_of(self, kids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The head and the newest version of each of the keys ``kids`` (copies)."""
        return (
            np.frombuffer(self.k_head, np.int64)[kids],  # fancy indexing copies: no view outlives this
            np.frombuffer(self.k_newest, np.int64)[kids],
        )

    def statuses_of(self, versions: np.ndarray) -> np.ndarray:
        """The stored status of each of ``versions`` (a copy)."""
        statuses: np.ndarray = np.frombuffer(self.v_status, np.int64)[versions]
        return statuses

    def values_of(self, versions: list[int]) -> tuple[str, ...]:
        """The value of each of ``versions``, the very string objects stored (interned by the caller)."""
        if len(versions) == 1:
            return (self.v_value[versions[0]],)
        return tuple(operator.itemgetter(*versions)(self.v_value))

    def operation_columns(self, start: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (key id, evidence, seq) of each log entry from ``start`` on, column-wise (NONE: none)."""
        n = len(self.op_code) - start
        # a view: nothing appends while this function runs, and none of it is returned
        target = np.frombuffer(self.op_target, np.int64)[start:] if n > 0 else np.zeros(0, np.int64)
        kid, ev, seq = (
            np.empty(len(target), np.int64),
            np.empty(len(target), np.int64),
            np.empty(len(target), np.int64),
        )
        extra = np.zeros(len(target), np.bool_)
        if start:  # a tail (the index catching up): its own entries, not the whole log's
            own = self.op_extra
            at = np.fromiter((i for i in range(max(n, 0)) if i + start in own), np.int64)
        else:
            at = np.fromiter(self.op_extra, np.int64, len(self.op_extra))
        extra[at] = True
        created = np.flatnonzero(~extra)
        t = target[created]
        if len(t):
            kid[created] = np.frombuffer(self.v_key, np.int64)[t]
            ev[created] = np.frombuffer(self.v_ev, np.int64)[t]
            seq[created] = np.frombuffer(self.v_from, np.int64)[t]
        rows = [self.op_extra[i + start] for i in at.tolist()] if start else list(self.op_extra.values())
        for column, field_at in ((seq, 0), (kid, 1), (ev, 2)):
            column[at] = np.fromiter((r[field_at] for r in rows), np.int64, len(rows))
        return kid, ev, seq

    def arrival_seqs(self) -> tuple[np.ndarray, np.ndarray]:
        """The arrival seqs of the evidence and of the operations (copies), for a loaded state's check.

        Raises:
            ValueError: an operation's own entry names no operation, or an operation names a version
                the store does not hold (a damaged state).
        """
        n = len(self.op_code)
        for i in self.op_extra:
            if not 0 <= i < n:
                msg = f"an operation entry names operation {i}, of {n}"
                raise ValueError(msg)
        own = np.ones(n, np.bool_)
        own[np.fromiter(self.op_extra, np.int64, len(self.op_extra))] = False
        if n:
            target = np.frombuffer(self.op_target, np.int64)[own]
            if len(target) and (int(target.min()) < 0 or int(target.max()) >= len(self.v_from)):
                msg = "an operation names a version the state does not hold"
                raise ValueError(msg)
        return self.evidence_seqs(), self.operation_columns()[2]

    def materialized_status(self) -> tuple[np.ndarray, np.ndarray]:
        """Every version's status (int8) and valid_to, with the lazily closed ones written out as
        superseded at their newest superseder's seq (see :meth:`closing`); copies."""
        status = np.array(self.v_status, np.int8)
        valid_to = np.array(self.v_to, np.int64)
        n = len(status)
        if n:
            ids = np.arange(n, dtype=np.int64)
            heads = np.array(self.k_head, np.int64)
            lazy = (status == ACTIVE) & (heads[np.array(self.v_key, np.int64)] != ids)
            if lazy.any():
                prev = np.array(self.v_prev, np.int64)
                newest = np.full(n, NONE, dtype=np.int64)
                linked = prev >= 0
                np.maximum.at(newest, prev[linked], ids[linked])
                valid_to[lazy] = np.array(self.v_from, np.int64)[newest[lazy]]
                status[lazy] = SUPERSEDED
        return status, valid_to

    def version_keys(self) -> np.ndarray:
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

    def key_name_array(self) -> pa.Array[Any]:
        """Every key's name by id, as an Arrow array."""
        return pa.array(self.key_names, pa.string())

    def evidence_arrays(self) -> EvidenceArrays:
        """Every evidence node, column-wise."""
        return EvidenceArrays(
            _ints(self.ev_seq),
            self.ev_text.to_arrow(),
            _ints(self.ev_source, np.int32),
            tuple(self.sources),
            MappingProxyType(self.ev_time),
            MappingProxyType(self.ev_valid),
            _flags(len(self.ev_seq), self.erased),
        )

    def version_arrays(self) -> VersionArrays:
        """Every version, column-wise (values: :meth:`value_array`)."""
        status, valid_to = self.materialized_status()
        prev = _ints(self.v_prev)
        previous = prev.copy()  # the arrival chain: the supersedes target unless stored apart
        previous[np.fromiter(self.v_older, np.int64, len(self.v_older))] = np.fromiter(
            self.v_older.values(), np.int64, len(self.v_older)
        )
        return VersionArrays(
            _ints(self.v_key),
            status,
            _ints(self.v_from),
            valid_to,
            _ints(self.v_ev),
            prev,
            previous,
            self.supports(),
            MappingProxyType(self.v_alt),
            MappingProxyType(self.dep),
        )

    def operation_arrays(self, version_values: pa.Array[Any]) -> OperationArrays:
        """The operation log, column-wise; ``version_values``: :meth:`value_array`, which most entries
        take their value from."""
        n = len(self.op_code)
        target = _ints(self.op_target)
        # An operation that created its target version takes seq, key, evidence and value from it
        # (:meth:`operation`); every other one keeps them in op_extra: (seq, key, evidence, value,
        # reason), read here in one pass.
        extra = self.op_extra
        rows = np.fromiter(extra, np.int64, len(extra))
        at = target.copy()  # the row whose value an entry reads: its version's, or its own (after them)
        at[rows] = len(version_values) + np.arange(len(rows), dtype=np.int64)
        kid, ev, seq = self.operation_columns()
        extra_value, extra_reason = tuple(zip(*((e[3], e[4]) for e in extra.values()), strict=True)) or (
            (),
            (),
        )
        own_values = pa.array(extra_value, type=pa.large_string())
        values = pa.concat_arrays([version_values, own_values]).take(pa.array(at))
        where = np.full(n, NONE, np.int64)
        where[rows] = np.arange(len(rows), dtype=np.int64)
        at_rows: Any = pa.array(where, type=pa.int64(), mask=where < 0)  # null: no reason of its own
        reasons = pa.array(extra_reason, type=pa.string()).take(at_rows)
        return OperationArrays(
            _ints(self.op_code),
            target,
            seq,
            kid,
            ev,
            values,
            reasons,
            MappingProxyType(self.undo_of),
            MappingProxyType(self.op_alias),
            MappingProxyType(self.op_deps),
            MappingProxyType(self.op_retracts),
            _flags(n, self.retracts_erased),
        )

    def edge_arrays(self) -> EdgeArrays:
        """The supported-by edges added after creation, and the tombstones, column-wise."""
        return EdgeArrays(
            _ints(self.sb_version),
            _ints(self.sb_ev),
            _ints(self.sb_seq),
            _ints(self.tb_version),
            _ints(self.tb_ev),
            _ints(self.tb_seq),
        )

    def key_arrays(self) -> KeyArrays:
        """Every key by id, column-wise."""
        return KeyArrays(
            self.key_name_array(),
            _ints(self.k_head),
            _ints(self.k_newest),
            {k: tuple(v) for k, v in self.open_alts.items() if v},
        )

    def authority_config(self) -> dict[str, Any]:
        """Source authority as a state records it: configured, from the start, the default level, and
        every setting (after seq, source, level) in order."""
        return {
            "configured": self.authority is not None,
            "from_start": self.authority_from_start,
            "default": self.default_authority,
            "settings": [list(s) for s in self.authority_log],
        }

    # ------------------ indexes (built at the first use, not saved)

    def key_index(self) -> KeyIndex:
        """The index of the key names (built at the first use, caught up by its own lookups)."""
        if self._key_index is None or self._key_index.source is not self.key_names:
            self._key_index = KeyIndex(self.key_names)
        return self._key_index

    def key_ids(self, names: pa.Array[Any], hashes: np.ndarray | None = None) -> np.ndarray:
        """The id of each key of ``names`` (a string array without nulls); -1: not a key."""
        return self.key_index().lookup(names, self.kid, hashes)

    def operation_index(self) -> OpIndex:
        """The log's index by key, evidence and seq, brought up to date (built at the first use)."""
        if self._op_index is None:
            self._op_index = OpIndex()
        if self._op_index.upto < len(self.op_code):
            self._op_index.extend(*self.operation_columns(self._op_index.upto))
        return self._op_index

    def operations_of(self, kid: int) -> list[int]:
        """The log positions of key ``kid``'s operations, in order, found column-wise: an operation's
        key is its target version's, or its own when the log keeps one (a noop, a failed one). A Python
        loop over a million-operation log took 160 ms per key (``Memory.why``)."""
        n = len(self.op_code)
        if not n:
            return []
        targets = np.frombuffer(self.op_target, np.int64)
        keys = np.full(n, NONE, np.int64)
        has = targets != NONE
        keys[has] = np.frombuffer(self.v_key, np.int64)[targets[has]]
        if self.op_extra:
            at = np.fromiter(self.op_extra, np.int64, len(self.op_extra))
            keys[at] = np.fromiter((e[1] for e in self.op_extra.values()), np.int64, len(self.op_extra))
        return np.flatnonzero(keys == kid).tolist()


def _first_codes(sources: list[str]) -> dict[str, int]:
    """Each source's code: its first in ``sources`` (an erasure may leave a text at two codes)."""
    codes: dict[str, int] = {}
    for code, source in enumerate(sources):
        codes.setdefault(source, code)
    return codes


#: the store's columns: every table of its nodes, edges and log, and the lookups derived from them. No
#: module but this one reads or writes them (tests/graph/test_graph_ownership.py): the others call the
#: store's operations
COLUMNS = frozenset(vars(GraphStore())) - {
    "seq",
    "default_authority",
    "authority_from_start",
    "_op_index",
    "_key_index",
}
#: what :meth:`GraphStore.restore` sets: the columns less the lookups it derives, and the authority settings
RESTORED = (COLUMNS - {"kid", "source_code", "valid_at"}) | {"default_authority", "authority_from_start"}
