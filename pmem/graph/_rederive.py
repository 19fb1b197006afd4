"""Undo and erasure: a key re-derived by replaying its own operations with a change.

Both are defined by replay (see ``pmem.graph._replay``): the graph is what replaying the log gives when
an undone operation, or every operation citing erased evidence, is left out. An operation's outcome
depends only on its own key's history (and, for authority and valid time, on evidence and settings that
the change does not touch), so only the keys holding a left-out operation are re-derived: their
operations are replayed, in order and at their own seqs, into a scratch graph that shares this graph's
evidence, and the scratch key's versions, edges and log outcomes are written back.

Nothing admitted is deleted. A version keeps its id as long as the operation that created it still
creates one; a version no replayed operation creates any more keeps its place in the key's history with
status ``undone`` (value kept: undoing the undo restores it) or ``erased`` (value gone, with the text of
its evidence). A left-out operation stays in the log, not applied, with the reason. Premises recorded on
a version are kept with it.

A reject or revoke is replayed with the value it retracts (``GraphStore.op_retracts``), never with
whatever the head is then: where that value is not the head it is a noop, so that undoing or erasing
the statement it retracted equals never having said it. An erasure that leaves no operation of the key
able to state that value again takes it out of the retraction too (its text must go with the evidence),
and the retraction is left out of every later replay (``retracts_erased``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pmem.graph._codes import ERASED, NONE, NOOP, OPS, UNDO
from pmem.graph._types import OpResult

if TYPE_CHECKING:
    from pmem.graph._graph import ProvenanceGraph

_TOKEN = "<re-derived evidence>"  # the scratch graph's evidence fast path (see ProvenanceGraph.apply)
_ERASED_EVIDENCE = "its evidence was erased"
_ERASED_TARGET = "the value it retracts was erased"
#: the operations that state their value (a version of it is created or supported): not a retraction's
#: target, not a noop's naming of the head
_STATING = frozenset({OPS.index("accept"), OPS.index("contest"), OPS.index("reject"), OPS.index("resolve")})


@dataclass(frozen=True)
class ErasureReceipt:
    """What :meth:`ProvenanceGraph.erase` did: never any erased text.

    ``changed``: key -> (frontier value before, after) for every key whose value changed;
    ``erased_versions``: ids of the versions that existed only through the evidence.
    """

    evidence: str
    changed: dict[str, tuple[str | None, str | None]]
    erased_versions: tuple[str, ...]
    operations: int = 0  # operations that cited it, now left out


@dataclass(frozen=True)
class MergeReceipt:
    """What :meth:`ProvenanceGraph.unmerge` did: ``changed`` as for erasure, over the two keys."""

    alias: str
    key: str
    changed: dict[str, tuple[str | None, str | None]]
    operations: int = 0  # operations moved to the alias


@dataclass
class OpIndex:
    """Operations by key, by evidence and by seq.

    Built on the first undo or erase, column-wise over the whole log (so that writes pay nothing for
    it); the operations logged since are added one by one on each later use.
    """

    upto: int = 0
    key_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sorted key ids ...
    key_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ... and their operations
    ev_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ev_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    seqs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # seq of each indexed op
    tail_key: dict[int, list[int]] = field(default_factory=dict)  # operations logged after the build
    tail_ev: dict[int, list[int]] = field(default_factory=dict)
    tail_seq: dict[int, int] = field(default_factory=dict)

    def sync(self, g: ProvenanceGraph) -> OpIndex:
        if self.upto == 0 and g.storage.op_code:
            self._build(g)
        extra, target, v_key, v_ev, v_from = (
            g.storage.op_extra,
            g.storage.op_target,
            g.storage.v_key,
            g.storage.v_ev,
            g.storage.v_from,
        )
        for i in range(self.upto, len(g.storage.op_code)):
            e = extra.get(i)
            if e is None:
                t = target[i]
                seq, kid, ev = v_from[t], v_key[t], v_ev[t]
            else:
                seq, kid, ev = e[0], e[1], e[2]
            self.tail_key.setdefault(kid, []).append(i)
            if ev != NONE:
                self.tail_ev.setdefault(ev, []).append(i)
            self.tail_seq[seq] = i
        self.upto = len(g.storage.op_code)
        return self

    def _build(self, g: ProvenanceGraph) -> None:
        n = len(g.storage.op_code)
        target = np.array(g.storage.op_target, dtype=np.int64)
        kid, ev, seq = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        extra = np.zeros(n, np.bool_)
        at = np.fromiter(g.storage.op_extra, np.int64, len(g.storage.op_extra))
        extra[at] = True
        created = np.flatnonzero(~extra)
        t = target[created]
        kid[created] = np.array(g.storage.v_key, dtype=np.int64)[t]
        ev[created] = np.array(g.storage.v_ev, dtype=np.int64)[t]
        seq[created] = np.array(g.storage.v_from, dtype=np.int64)[t]
        rows = list(g.storage.op_extra.values())
        for column, field_at in ((seq, 0), (kid, 1), (ev, 2)):
            column[at] = np.fromiter((r[field_at] for r in rows), np.int64, len(rows))
        order = np.argsort(kid, kind="stable")
        self.key_of, self.key_ops = kid[order], order
        cited = np.flatnonzero(ev != NONE)
        order = cited[np.argsort(ev[cited], kind="stable")]
        self.ev_of, self.ev_ops = ev[order], order
        self.seqs = seq
        self.upto = n

    def by_key(self, kid: int) -> list[int]:
        """The key's operations, in log order."""
        a, b = np.searchsorted(self.key_of, [kid, kid + 1])
        ops: list[int] = self.key_ops[a:b].tolist()
        return ops + self.tail_key.get(kid, [])

    def by_ev(self, ev: int) -> list[int]:
        """The operations citing evidence ``ev``, in log order."""
        a, b = np.searchsorted(self.ev_of, [ev, ev + 1])
        ops: list[int] = self.ev_ops[a:b].tolist()
        return ops + self.tail_ev.get(ev, [])

    def by_seq(self, seq: int) -> int | None:
        """The operation that arrived at ``seq`` (None: no operation did)."""
        i = int(np.searchsorted(self.seqs, seq))
        if i < len(self.seqs) and self.seqs[i] == seq:
            return i
        return self.tail_seq.get(seq)


def index(g: ProvenanceGraph) -> OpIndex:
    if g._op_index is None:
        g._op_index = OpIndex()
    return g._op_index.sync(g)


def left_out(g: ProvenanceGraph, ops: list[int]) -> dict[int, str]:
    """Of a key's operations, those the replay leaves out, with the reason: cited erased evidence,
    retracts a value that was erased, or undone by an undo that is itself in effect (an undo is in effect
    unless an undo in effect undoes it, or its own evidence is erased)."""
    out: dict[int, str] = {}
    erased, undo_of, inert = g.storage.erased, g.storage.undo_of, g.storage.retracts_erased
    for i in ops:
        if g.storage.request(i)[3] in erased:
            out[i] = _ERASED_EVIDENCE
        elif i in inert:
            out[i] = _ERASED_TARGET
    code = g.storage.op_code
    for u in reversed(ops):  # an undo names an earlier operation: the latest undos decide first
        if u in undo_of and u not in out and code[u] >> 6:
            target = undo_of[u]
            out.setdefault(target, f"undone by the undo at seq {g.storage.request(u)[4]}")
    return out


def undo(g: ProvenanceGraph, op_seq: object, evidence: str | None) -> OpResult:
    """:meth:`ProvenanceGraph.undo` (arguments checked here, before anything is written)."""
    if not isinstance(op_seq, int) or isinstance(op_seq, bool):
        msg = f"undo: op_seq must be the seq of an operation (an int), got {op_seq!r}"
        raise ValueError(msg)
    ev = NONE if evidence is None else g._evidence_index(evidence, "undo", f"seq {op_seq}")
    idx = index(g)
    target = idx.by_seq(op_seq)
    if target is None:
        what = "an observation" if op_seq in set(g.storage.ev_seq) else "no arrival of this graph"
        msg = f"undo: seq {op_seq} is not an operation ({what}); name the seq of an entry of operations()"
        raise ValueError(msg)
    kid = g.storage.request(target)[1]
    skipped = left_out(g, idx.by_key(kid))
    reason = None
    if target in skipped:
        reason = f"operation seq {op_seq} is already left out ({skipped[target]})"
    elif not g.storage.op_code[target] >> 6:
        reason = f"operation seq {op_seq} changed nothing (it was not applied)"
    # nothing below can fail
    g.storage.seq = seq = g.storage.seq + 1
    n = len(g.storage.op_code)
    g.storage.undo_of[n] = target  # kept for a refused undo too: replay asks for the same
    if reason is not None:
        g.storage.log(seq, UNDO, NOOP, kid, ev, False, NONE, None, reason)
        idx.sync(g)
        return OpResult(False, "noop", reason)
    g.storage.log(seq, UNDO, UNDO, kid, ev, True, NONE, None, f"undoes the operation at seq {op_seq}")
    idx.sync(g)
    rederive(g, kid, idx)
    return OpResult(True, "undo", None)


def erase(g: ProvenanceGraph, evidence_id: object) -> ErasureReceipt:
    """:meth:`ProvenanceGraph.erase`."""
    n = g._evidence_index(evidence_id, "evidence", "")
    idx = index(g)
    cited = idx.by_ev(n)
    keys = list(dict.fromkeys(g.storage.request(i)[1] for i in cited))
    before = {kid: g.storage.head_value(kid) for kid in keys}
    dead_before = {v for kid in keys for v in g.storage.chain(kid) if g.storage.v_status[v] == ERASED}
    g.storage.erased.add(n)
    g.storage.ev_text[n] = ""
    if g._last_ev == n:  # the observe-then-apply fast path must not cite it either
        g._last_eid, g._last_ev = None, NONE
    for kid in keys:
        _erase_targets(
            g, kid, idx, {g.storage.request(i)[2] for i in cited if g.storage.request(i)[1] == kid}
        )
        rederive(g, kid, idx)
    names = g.storage.key_names
    changed = {
        names[kid]: (before[kid], g.storage.head_value(kid))
        for kid in keys
        if before[kid] != g.storage.head_value(kid)
    }
    erased = sorted(
        v
        for kid in keys
        for v in g.storage.chain(kid)
        if g.storage.v_status[v] == ERASED and v not in dead_before
    )
    return ErasureReceipt(f"e{n}", changed, tuple(f"v{v}" for v in erased), len(cited))


def _erase_targets(g: ProvenanceGraph, kid: int, idx: OpIndex, stated: set[str | None]) -> None:
    """Take out of key ``kid``'s retractions the values ``stated`` (by the operations of the evidence
    just erased) that no operation left can state again: none of the key's operations whose evidence is
    not erased, nor one recorded with the key's name as its alias (an unmerge would move it here).

    The value is then gone from the log (the retraction's target, and a revoke's value naming it), and
    the retraction is left out of every later replay: no replay can make that value the head again.
    """
    store = g.storage
    ops = idx.by_key(kid)
    alias_of = store.op_alias
    name = store.key_names[kid]
    still = {
        g.storage.request(i)[2]
        for i in [*ops, *(i for i, a in alias_of.items() if a == name)]
        if g.storage.request(i)[0] in _STATING and g.storage.request(i)[3] not in store.erased
    }
    gone = {v for v in stated if v is not None} - still
    if not gone:
        return
    for i in ops:
        if store.op_retracts.get(i) in gone:
            del store.op_retracts[i]
            store.retracts_erased.add(i)
            e = store.op_extra.get(i)
            if e is not None and e[3] in gone:  # a revoke's value named it
                store.op_extra[i] = (e[0], e[1], e[2], None, e[4])


def unmerge(g: ProvenanceGraph, alias: object) -> MergeReceipt:
    """:meth:`ProvenanceGraph.unmerge`."""
    if not isinstance(alias, str):
        msg = f"unmerge: alias must be a key string, got {alias!r}"
        raise ValueError(msg)
    idx = index(g)
    recorded = sorted(
        i
        for i, a in g.storage.op_alias.items()
        if a == alias and g.storage.request(i)[1] != g.storage.kid.get(alias)
    )
    if not recorded:
        what = (
            "is already a key of its own"
            if alias in g.storage.kid
            else "was never recorded (apply(..., alias=...))"
        )
        msg = f"unmerge: no operation to move: alias {alias!r} {what}"
        raise ValueError(msg)
    keys = list(dict.fromkeys(g.storage.request(i)[1] for i in recorded))
    moving = set(recorded)
    for kid in keys:  # an undo follows the operation it undoes (and an undo of it, that undo)
        for u in idx.by_key(kid):
            if u in g.storage.undo_of and g.storage.undo_of[u] in moving:
                moving.add(u)
    akid = g._key_id(alias)
    before = {kid: g.storage.head_value(kid) for kid in (*keys, akid)}
    seqs = {g.storage.request(i)[4] for i in moving}
    adopted = [
        v
        for kid in keys
        for v in g.storage.chain(kid)
        if g.storage.v_key[v] == kid and g.storage.v_from[v] in seqs
    ]
    # nothing below can fail
    for v in adopted:  # versions created by a moving operation move with it (undone ones too)
        g.storage.v_key[v] = akid
    for i in moving:
        e = g.storage.op_extra.get(i)
        if e is not None:
            g.storage.op_extra[i] = (e[0], akid, e[2], e[3], e[4])
    g._op_index = None  # operations changed keys: the index is rebuilt
    idx = index(g)
    for kid in keys:
        rederive(g, kid, idx)
    rederive(g, akid, idx, adopted)
    reg = g.registry
    for kid in keys:
        reg.split(alias, g.storage.key_names[kid])
    names = g.storage.key_names
    changed = {
        names[kid]: (before[kid], g.storage.head_value(kid))
        for kid in before
        if before[kid] != g.storage.head_value(kid)
    }
    return MergeReceipt(alias, names[keys[0]], changed, len(recorded))


def rederive(g: ProvenanceGraph, kid: int, idx: OpIndex, adopted: list[int] | None = None) -> None:
    """Replay key ``kid``'s operations, less those left out, and write the outcome back.

    ``adopted``: versions just moved to this key (by :func:`unmerge`), not yet on its chain.
    """
    ops = idx.by_key(kid)
    skipped = left_out(g, ops)
    key = g.storage.key_names[kid]
    s = g.empty()
    # the scratch graph reads this graph's evidence (sources for authority, valid times)
    s.storage.share_evidence(g.storage)
    settings = [entry for entry in g.storage.authority_log if entry[0] >= 0]
    if g.storage.authority_from_start:
        s.storage.authority = {src: level for after, src, level in g.storage.authority_log if after < 0}
    s.storage.new_key(key)
    replayed: dict[int, int] = {}  # this graph's operation -> the scratch graph's
    targets = g.storage.op_retracts
    for i in ops:
        req, _, value, ev, seq = g.storage.request(i)
        if req == UNDO or i in skipped:
            continue
        while settings and settings[0][0] < seq:
            _, src, level = settings.pop(0)
            if s.storage.authority is None:
                s.storage.authority = {}
            s.storage.authority[src] = level
        s.storage.seq = seq - 1
        s._last_eid, s._last_ev = _TOKEN, ev
        # a retraction retracts what it named when it arrived, not what the head is in this replay (the
        # scratch graph's own record of it is not written back: the request is this graph's)
        s.apply(OPS[req], key, value, None if ev == NONE else _TOKEN, retracts=targets.get(i))
        replayed[i] = len(s.storage.op_code) - 1
    erased_ops = {g.storage.request(i)[4] for i, why in skipped.items() if why == _ERASED_EVIDENCE}
    # a left-out operation keeps its value unless the value's text was erased
    left_out_values = {
        i: None if why in (_ERASED_EVIDENCE, _ERASED_TARGET) else g.storage.request(i)[2]
        for i, why in skipped.items()
    }
    g.storage.replace_history(
        kid, ops, skipped, left_out_values, erased_ops, replayed, s.storage, adopted or []
    )
