"""The semantics of the operations besides an accept's fast path: contest, reject, revoke, resolve and
noop, an accept's two other outcomes (support for a repeated value, a late fact entering the history at
its valid-time place), and failed preconditions, each written to the graph's store.

:class:`Operations` is the graph's (:class:`~pmem.graph.ProvenanceGraph` builds one over its store and
calls it from ``apply``); it holds the one piece of state an operation carries besides its arguments: the
value a reject or revoke is asked to retract (:meth:`Operations.retracting`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from pmem.graph._ops._codes import (
    ACCEPT,
    ACTIVE,
    CONTEST,
    CONTESTED,
    CONTRADICTED,
    NONE,
    NOOP,
    OPS,
    REJECT,
    RESOLVE,
    REVOKE,
    REVOKED,
)
from pmem.graph._ops._materialize import outranked
from pmem.graph._ops._types import CONTEST_REPEATS_ALT, CONTEST_REPEATS_HEAD, OpResult

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pmem.graph._ops._store import GraphStore

# Applied results carry no per-call data, so one frozen instance per op serves every call.
APPLIED = {name: OpResult(True, name, None) for name in OPS}
APPLIED_ACCEPT = APPLIED["accept"]
_INSUFFICIENT = "insufficient authority"


class Operations:
    """The operations of one graph over its ``store`` (see the module)."""

    def __init__(self, store: GraphStore) -> None:
        self.store = store  # the graph's store (set once: the graph never replaces it)
        # apply(..., retracts=X) hands X to the reject or revoke about to run through here: apply's
        # argument checks run inline on its hot path, and the target rides along rather than through them
        self._retracting: str | None = None

    @contextmanager
    def retracting(self, value: str | None) -> Iterator[None]:
        """A reject or revoke applied inside the block retracts ``value`` (None: the head's)."""
        self._retracting = value
        try:
            yield
        finally:
            self._retracting = None

    def valid_before(self, ev: int, version: int) -> bool:
        """Whether evidence ``ev`` is valid before the evidence that created ``version`` (both dated)."""
        store = self.store
        mine, theirs = (
            store.evidence.valid_instant(ev),
            store.evidence.valid_instant(store.versions.creating_evidence(version)),
        )
        return mine is not None and theirs is not None and mine < theirs

    def enter_history(self, kid: int, value: str, ev: int) -> OpResult:
        """Accept a value valid before the head's: a superseded version at its valid-time place."""
        store = self.store
        seq = store.next_seq()
        store.close_lazily_closed(kid)  # supersedes links change below
        at = store.evidence.valid_instant(ev)
        assert at is not None  # apply() enters history only for dated evidence
        above, below = store.place_by_valid_time(kid, at)
        vid = store.insert_superseded(kid, value, seq, ev, above, below)
        store.log.append(seq, ACCEPT, ACCEPT, kid, ev, True, vid, created=True)
        return APPLIED_ACCEPT

    def fail(self, req: int, kid: int, value: str | None, ev: int, reason: str) -> OpResult:
        store = self.store
        store.log.append(store.next_seq(), req, NOOP, kid, ev, False, NONE, value, reason)
        return OpResult(False, "noop", reason)

    def support(
        self, req: int, kid: int, vid: int, value: str | None, ev: int, seq: int, result: OpResult
    ) -> OpResult:
        store = self.store
        store.add_support(vid, ev, seq)
        store.log.append(seq, req, NOOP, kid, ev, True, vid, value, result.reason)
        return result

    def head_of(self, key: str) -> int | None:
        """The id of ``key`` when it has a head."""
        store = self.store
        kid = store.keys.id(key)
        return kid if kid is not None and store.keys.head(kid) != NONE else None

    def _retracting_now(self, named: str | None, kid: int | None) -> None:
        """Record what the retraction about to be logged retracts: ``named``, else the head's value of
        key ``kid`` (None: no head, nothing recorded)."""
        store = self.store
        target = named
        if target is None and kid is not None:
            target = store.versions.value(store.keys.head(kid))
        if target is not None:
            store.log.record_retracts(target)

    def _retraction(
        self, op: int, key: str, value: str | None, ev: int, named: str | None, how: str, closed_as: int
    ) -> tuple[int, int, int] | OpResult:
        """What a reject and a revoke share: their preconditions, checked in order (``key`` has a head,
        ``ev``'s source may displace it, and it holds the ``named`` value when one is; ``how`` the value is
        named: "retracts", "names"), then the retraction's seq, with the head closed as ``closed_as`` and
        its open alternatives closed. (key id, head, seq) when they held, else the failure, logged."""
        store = self.store
        kid = self.head_of(key)
        self._retracting_now(named, kid)
        name = OPS[op]
        if kid is None:
            return self.fail(
                op, self.store.keys.admit(key), value, ev, f"{name}: the key has no current head"
            )
        head, current = store.head_and_value(kid)
        if store.authority.configured() and outranked(store, ev, (head,)):
            return self.fail(op, kid, value, ev, _INSUFFICIENT)
        if named is not None and named != current:
            reason = f"{name} {how} {named!r} but the current head is {current!r}"
            return self.fail(op, kid, value, ev, reason)
        seq = store.next_seq()
        store.versions.close(head, closed_as, seq)
        store.close_open_alternatives(kid, seq)
        return kid, head, seq

    def reject(self, key: str, value: str | None, ev: int) -> OpResult:
        store = self.store
        checked = self._retraction(REJECT, key, value, ev, self._retracting, "retracts", CONTRADICTED)
        if isinstance(checked, OpResult):
            return checked
        kid, head, seq = checked
        if value is not None:
            vid = store.append_version(kid, value, ACTIVE, seq, ev, head)
            store.keys.set_head(kid, vid)
            store.log.append(seq, REJECT, REJECT, kid, ev, True, vid, created=True)
        else:
            store.reopen_predecessor(kid, head)
            store.log.append(seq, REJECT, REJECT, kid, ev, True, head)
        return APPLIED["reject"]

    def revoke(self, key: str, value: str | None, ev: int) -> OpResult:
        store = self.store
        named = value if value is not None else self._retracting
        how = "names" if value is not None else "retracts"
        checked = self._retraction(REVOKE, key, value, ev, named, how, REVOKED)
        if isinstance(checked, OpResult):
            return checked
        kid, head, seq = checked
        store.edges.add_tombstone(head, seq, ev)
        store.reopen_predecessor(kid, head)
        store.log.append(seq, REVOKE, REVOKE, kid, ev, True, head, value)
        return APPLIED["revoke"]

    def contest(self, key: str, value: str | None, ev: int, req: int = CONTEST) -> OpResult:
        """``req``: the requested op (an accept lowered to contest by source authority is logged so)."""
        store = self.store
        kid = self.head_of(key)
        if kid is None:
            return self.fail(
                CONTEST, self.store.keys.admit(key), value, ev, "contest: the key has no current head"
            )
        head, current = store.head_and_value(kid)
        seq = store.next_seq()
        if current == value:
            return self.support(req, kid, head, value, ev, seq, CONTEST_REPEATS_HEAD)
        for a in store.keys.alternatives(kid):
            if store.versions.value(a) == value:
                return self.support(req, kid, a, value, ev, seq, CONTEST_REPEATS_ALT)
        assert value is not None  # apply() refuses contest without a value
        vid = store.add_alternative(kid, value, seq, ev)
        store.log.append(seq, req, CONTEST, kid, ev, True, vid, created=True)
        return APPLIED["contest"]

    def resolve(self, key: str, value: str | None, ev: int) -> OpResult:
        store = self.store
        kid = self.head_of(key)
        if kid is None:
            return self.fail(
                RESOLVE, self.store.keys.admit(key), value, ev, "resolve: the key has no current head"
            )
        head, current = store.head_and_value(kid)
        if store.versions.status(head) != CONTESTED:
            return self.fail(RESOLVE, kid, value, ev, "resolve: the cell is not contested")
        alts = store.keys.alternatives(kid)
        if store.authority.configured() and outranked(store, ev, (head, *alts)):
            return self.fail(RESOLVE, kid, value, ev, _INSUFFICIENT)
        if current == value:
            winner = head
        else:
            winner = next((a for a in alts if store.versions.value(a) == value), NONE)
            if winner == NONE:
                reason = f"resolve: {value!r} is neither the head's value nor an alternative's"
                return self.fail(RESOLVE, kid, value, ev, reason)
        seq = store.next_seq()
        store.settle(kid, winner, seq)
        store.add_support(winner, ev, seq)
        store.log.append(seq, RESOLVE, RESOLVE, kid, ev, True, winner, value)
        return APPLIED["resolve"]

    def noop(self, key: str, value: str | None, ev: int) -> OpResult:
        store = self.store
        kid = self.store.keys.admit(key)
        head, current = store.head_and_value(kid)
        if current is not None and value is not None and value != current:
            # evidence for another value is no support for the head: a failed precondition, like revoke's
            reason = f"noop names {value!r} but the current head is {current!r}: not counted as support"
            return self.fail(NOOP, kid, value, ev, reason)
        seq = store.next_seq()
        if head == NONE:
            store.log.append(seq, NOOP, NOOP, kid, ev, True, NONE, value)
            return APPLIED["noop"]
        return self.support(NOOP, kid, head, value, ev, seq, APPLIED["noop"])
