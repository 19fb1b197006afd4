"""Undo and erasure: a key re-derived by replaying its own operations with a change.

Both are defined by replay (see ``pmem.graph._ops._replay``): the graph is what replaying the log gives when
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

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pmem.graph._ops._codes import ERASED, NONE, OPS, UNDO
from pmem.graph._ops._types import OpResult

if TYPE_CHECKING:
    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._ops._opindex import OpIndex

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


def left_out(g: ProvenanceGraph, ops: list[int]) -> dict[int, str]:
    """Of a key's operations, those the replay leaves out, with the reason: cited erased evidence,
    retracts a value that was erased, or undone by an undo that is itself in effect (an undo is in effect
    unless an undo in effect undoes it, or its own evidence is erased)."""
    store = g.storage
    out: dict[int, str] = {}
    for i in ops:
        if store.evidence.is_erased(store.log.request(i)[3]):
            out[i] = _ERASED_EVIDENCE
        elif store.log.retracts_only_erased(i):
            out[i] = _ERASED_TARGET
    for u in reversed(ops):  # an undo names an earlier operation: the latest undos decide first
        req, _, _, _, seq = store.log.request(u)
        if req == UNDO and u not in out and store.log.applied(u):
            out.setdefault(store.log.undone_op(u), f"undone by the undo at seq {seq}")
    return out


def undo(g: ProvenanceGraph, op_seq: object, evidence: str | None) -> OpResult:
    """:meth:`ProvenanceGraph.undo` (arguments checked here, before anything is written)."""
    if not isinstance(op_seq, int) or isinstance(op_seq, bool):
        msg = f"undo: op_seq must be the seq of an operation (an int), got {op_seq!r}"
        raise ValueError(msg)
    store = g.storage
    ev = NONE if evidence is None else g.evidence_index(evidence, "undo", f"seq {op_seq}")
    idx = store.log.index()
    target = idx.by_seq(op_seq)
    if target is None:
        what = "an observation" if store.evidence.is_seq(op_seq) else "no arrival of this graph"
        msg = f"undo: seq {op_seq} is not an operation ({what}); name the seq of an entry of operations()"
        raise ValueError(msg)
    kid = store.log.request(target)[1]
    skipped = left_out(g, idx.by_key(kid))
    reason = None
    if target in skipped:
        reason = f"operation seq {op_seq} is already left out ({skipped[target]})"
    elif not store.log.applied(target):
        reason = f"operation seq {op_seq} changed nothing (it was not applied)"
    # nothing below can fail
    if reason is not None:
        store.log_undo(kid, ev, target, reason, applied=False)
        return OpResult(False, "noop", reason)
    store.log_undo(kid, ev, target, f"undoes the operation at seq {op_seq}", applied=True)
    rederive(g, kid, store.log.index())
    return OpResult(True, "undo", None)


def erase(g: ProvenanceGraph, evidence_id: object) -> ErasureReceipt:
    """:meth:`ProvenanceGraph.erase`."""
    store = g.storage
    n = g.evidence_index(evidence_id, "evidence", "")
    idx = store.log.index()
    cited = idx.by_ev(n)
    keys = list(dict.fromkeys(store.log.request(i)[1] for i in cited))
    before = {kid: store.head_value(kid) for kid in keys}
    dead_before = {v for kid in keys for v in store.chain(kid) if store.versions.status(v) == ERASED}
    store.erase_evidence(n)
    for kid in keys:
        _erase_targets(
            g, kid, idx, {store.log.request(i)[2] for i in cited if store.log.request(i)[1] == kid}
        )
        rederive(g, kid, idx)
    changed = {
        store.keys.name(kid): (before[kid], store.head_value(kid))
        for kid in keys
        if before[kid] != store.head_value(kid)
    }
    erased = sorted(
        v
        for kid in keys
        for v in store.chain(kid)
        if store.versions.status(v) == ERASED and v not in dead_before
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
    requests = [store.log.request(i) for i in [*ops, *store.log.aliased_operations(store.keys.name(kid))]]
    still = {
        value for req, _, value, ev, _ in requests if req in _STATING and not store.evidence.is_erased(ev)
    }
    gone = {v for v in stated if v is not None} - still
    if gone:
        store.log.forget_retracted_values(ops, gone)


def unmerge(g: ProvenanceGraph, alias: object) -> MergeReceipt:
    """:meth:`ProvenanceGraph.unmerge`."""
    if not isinstance(alias, str):
        msg = f"unmerge: alias must be a key string, got {alias!r}"
        raise ValueError(msg)
    store = g.storage
    idx = store.log.index()
    own = store.keys.id(alias)
    recorded = [i for i in store.log.aliased_operations(alias) if store.log.request(i)[1] != own]
    if not recorded:
        what = (
            "is already a key of its own" if own is not None else "was never recorded (apply(..., alias=...))"
        )
        msg = f"unmerge: no operation to move: alias {alias!r} {what}"
        raise ValueError(msg)
    keys = list(dict.fromkeys(store.log.request(i)[1] for i in recorded))
    moving = set(recorded)
    for kid in keys:  # an undo follows the operation it undoes (and an undo of it, that undo)
        for u in idx.by_key(kid):
            if store.log.is_undo_of_any(u, moving):
                moving.add(u)
    akid = store.keys.admit(alias)
    before = {kid: store.head_value(kid) for kid in (*keys, akid)}
    seqs = {store.log.request(i)[4] for i in moving}
    # versions created by a moving operation move with it (undone ones too)
    adopted = [
        v
        for kid in keys
        for v in store.chain(kid)
        if (o := store.versions.origin(v))[0] == kid and o[1] in seqs
    ]
    # nothing below can fail
    store.move_to_key(adopted, moving, akid)
    idx = store.log.index()
    for kid in keys:
        rederive(g, kid, idx)
    rederive(g, akid, idx, adopted)
    reg = g.registry
    for kid in keys:
        reg.split(alias, store.keys.name(kid))
    changed = {
        store.keys.name(kid): (before[kid], store.head_value(kid))
        for kid in before
        if before[kid] != store.head_value(kid)
    }
    return MergeReceipt(alias, store.keys.name(keys[0]), changed, len(recorded))


def rederive(g: ProvenanceGraph, kid: int, idx: OpIndex, adopted: list[int] | None = None) -> None:
    """Replay key ``kid``'s operations, less those left out, and write the outcome back.

    ``adopted``: versions just moved to this key (by :func:`unmerge`), not yet on its chain.
    """
    store = g.storage
    ops = idx.by_key(kid)
    skipped = left_out(g, ops)
    key = store.keys.name(kid)
    s = g.empty(authority=store.authority.initial(), default_authority=store.authority.default())
    scratch = s.storage
    # the scratch graph reads this graph's evidence (sources for authority, valid times)
    scratch.share_evidence(store)
    settings = store.authority.settings()
    scratch.keys.new(key)
    replayed: dict[int, int] = {}  # this graph's operation -> the scratch graph's
    for i in ops:
        req, _, value, ev, seq = store.log.request(i)
        if req == UNDO or i in skipped:
            continue
        while settings and settings[0][0] < seq:
            _, src, level = settings.pop(0)
            s.set_authority(src, level)
        scratch.rewind(seq - 1)
        # a retraction retracts what it named when it arrived, not what the head is in this replay (the
        # scratch graph's own record of it is not written back: the request is this graph's)
        s.apply_citing(ev, OPS[req], key, value, retracts=store.log.retracted_value(i))
        replayed[i] = scratch.log.count() - 1
    erased_ops = {store.log.request(i)[4] for i, why in skipped.items() if why == _ERASED_EVIDENCE}
    # a left-out operation keeps its value unless the value's text was erased
    left_out_values = {
        i: None if why in (_ERASED_EVIDENCE, _ERASED_TARGET) else store.log.request(i)[2]
        for i, why in skipped.items()
    }
    store.replace_history(kid, ops, skipped, left_out_values, erased_ops, replayed, scratch, adopted or [])
