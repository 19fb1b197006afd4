"""The typed provenance graph: the six operations, materialization and the graph's public reads.

Its columns are a :class:`~pmem.graph._ops._store.GraphStore` (``graph.storage``): column groups, one per
node kind, each the one owner of its columns (see that package for the layout). The store writes what it
is told; the graph decides every operation's outcome (an accept's fast path too: ``apply``).

Edges: *supersedes* and *alternative-of* are at most one per version and are stored on the version
(``v_prev``, ``v_alt``); *supported-by* edges are the version's creating evidence plus ``sb_*``;
*revokes* edges are the tombstones.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, TypeVar

from pmem.graph._identity._registry import KeyRegistry
from pmem.graph._ops._bulk import apply_batch as apply_write_batch
from pmem.graph._ops._codes import (
    ACCEPT,
    LOG_OPS,
    NONE,
    OPS,
)
from pmem.graph._ops._listen import WRITES, WriteCall
from pmem.graph._ops._materialize import cell_of, edges_of, operations_of, outranked, version_of
from pmem.graph._ops._operations import APPLIED_ACCEPT, Operations
from pmem.graph._ops._rederive import erase as erase_evidence
from pmem.graph._ops._rederive import undo as undo_operation
from pmem.graph._ops._rederive import unmerge as split_alias
from pmem.graph._ops._render import render_cells
from pmem.graph._ops._replay import as_of as replay_as_of
from pmem.graph._ops._store import GraphStore
from pmem.graph._ops._types import (
    SUPPORT_RESULT,
    Cell,
    Evidence,
    Operation,
    OpResult,
    Version,
)
from pmem.graph._ops._validate import check_key, check_text, format_time, preview, valid_instant
from pmem.graph._persist._guard import load_recorded, save_checked
from pmem.graph._persist._state import build_graph, decode_tables, graph_to_bytes
from pmem.graph.shards import is_sharded, load_sharded

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path

    import pyarrow as pa

    from pmem.graph._ops._bulk import BatchResult
    from pmem.graph._ops._listen import WriteListener
    from pmem.graph._ops._rederive import ErasureReceipt, MergeReceipt
    from pmem.graph._persist._state import Layout

    #: An operation other than accept: (key, value, evidence index) -> result.
    _Handler: TypeAlias = Callable[[str, str | None, int], OpResult]


_T = TypeVar("_T")

_NO_SOURCE = object()  # no caller's source is this object: observe looks the first one up
_CITED = "<evidence cited by index>"  # the evidence id apply_citing hands apply (see ProvenanceGraph.apply)


class ProvenanceGraph:
    """A typed, append-only provenance graph with one current value per key.

    >>> g = ProvenanceGraph()
    >>> e1 = g.observe("The budget is $30k.")
    >>> _ = g.apply("accept", "project.budget", "$30k", evidence=e1)
    >>> e2 = g.observe("Budget raised to $50k.")
    >>> _ = g.apply("accept", "project.budget", "$50k", evidence=e2)
    >>> e3 = g.observe("The raise to $50k was an error.")
    >>> g.apply("reject", "project.budget", evidence=e3).op
    'reject'
    >>> g.cell("project.budget").value
    '$30k'
    >>> [(v.value, v.status) for v in g.versions("project.budget")]
    [('$30k', 'active'), ('$50k', 'contradicted')]
    """

    def __init__(
        self,
        registry: KeyRegistry | None = None,
        *,
        authority: Mapping[str, int] | None = None,
        default_authority: int = 1,
    ) -> None:
        self._store = store = GraphStore()  # every column: the one owner (pmem.graph._ops._store)
        if authority is not None and not isinstance(authority, Mapping):
            msg = f"ProvenanceGraph: authority must be a mapping of source -> level, got {preview(authority)}"
            raise ValueError(msg)
        # configured by the constructor (maybe empty): a saved state records it
        store.authority.configure(
            _checked_level(default_authority, "default_authority"), authority is not None
        )
        if authority is not None:
            for source, level in authority.items():
                self._set_authority(source, level, -1)
        self._last_eid: str | None = None  # observe-then-apply fast path: no id index needed
        self._last_ev = NONE
        # ... and the source of the last observation, with its code (none before the first)
        self._last_source: object = _NO_SOURCE
        self._last_code = NONE
        self._registry = registry
        self._listener: WriteListener | None = None  # told of each outermost public write (listen)
        self._telling = False  # inside a write the listener is being told of: its own calls are not told
        # apply's accept fast path calls these, bound once: the store and its groups are made with the
        # graph and never replaced (pmem perf core)
        self._find_key, self._holds, self._accept = store.keys.find, store.versions.holds, store.accept
        self._has_valid_times, self._ranks_sources = (
            store.evidence.has_valid_times,
            store.authority.configured,
        )
        self._ops = ops = Operations(store)  # the operations' semantics, over this graph's store
        # accept is inlined in apply(); every other operation has a handler
        self._handlers: dict[str, _Handler] = {
            "contest": ops.contest,
            "reject": ops.reject,
            "revoke": ops.revoke,
            "resolve": ops.resolve,
            "noop": ops.noop,
        }

    # ------------------------------------------------------------------ writing

    def listen(self, listener: WriteListener | None) -> None:
        """Tell ``listener`` of each outermost public write from now on (None: nobody); see
        :mod:`pmem.graph._ops._listen`. One listener at a time: a journal (:class:`JournaledGraph`) is one."""
        self._listener = listener

    def _told(self, call: WriteCall, write: Callable[[], _T]) -> _T:
        """Make ``write`` with the listener told of ``call`` around it; the write's own calls (a
        replay's applies, a batch's rows) are not told, the outer call stands for them."""
        listener = self._listener
        assert listener is not None  # a write asks only when one listens
        self._telling = True
        try:
            listener.writing()
            result = write()
            listener.written(call)
        finally:
            self._telling = False
        return result

    def observe(
        self, text: str, source: str = "user", time: str | None = None, valid_time: str | None = None
    ) -> str:
        """Admit an observation as an evidence node and return its id.

        ``time`` is when it was observed (free text, or a datetime); ``valid_time`` (an ISO 8601 date or
        datetime) is when the facts it states became true: an ``accept`` citing evidence valid before
        the head's enters the key's history at its place instead of displacing the head.
        Every argument is checked before anything is written: a refused call leaves no trace.
        """
        if self._listener is not None and not self._telling:
            call = WriteCall("observe", (text, source, time, valid_time))
            return self._told(call, lambda: self.observe(text, source, time, valid_time))
        store = self._store
        if type(text) is not str or not text.isascii():
            check_text(text, "text", "observe")
        code: int | None = self._last_code  # a writer's observations mostly share one source
        if source is not self._last_source:
            code = store.evidence.source_id(source) if type(source) is str else None
            if code is None:  # a source not seen before
                check_text(source, "source", "observe", non_empty=True)
        if time is not None:
            time = time if type(time) is str else format_time(time)
            check_text(time, "time", "observe")
        valid = None if valid_time is None else valid_instant(valid_time, "observe")
        # nothing below can fail
        if code is None:
            code = store.evidence.admit_source(source)
        if source is not self._last_source:
            self._last_source, self._last_code = source, code
        n = store.add_evidence(text, code, time, valid)
        self._last_eid = eid = f"e{n}"
        self._last_ev = n
        return eid

    def apply(
        self,
        op: str,
        key: str,
        value: str | None = None,
        evidence: str | None = None,
        *,
        depends_on: Iterable[str] | None = None,
        alias: str | None = None,
        retracts: str | None = None,
    ) -> OpResult:
        """Apply one typed operation to ``key``.

        A failed precondition is recorded in the operation log as a noop with its reason and changes no
        status. Invalid arguments (unknown op, a key that is empty or holds control characters, a missing
        or ill-typed value, a string with a lone surrogate, an unknown evidence id) raise ``ValueError``
        naming the argument and record nothing (see ``pmem.graph._ops._validate``).

        ``depends_on`` names the keys this fact was derived from: the operation records their current
        heads (each must have one, and none may be ``key``), and once one of those heads changes the
        cell reads as stale (``Cell.stale``) until the fact is asserted again with current premises. An
        empty ``depends_on`` is no premise at all (it clears nothing).

        ``alias`` is the key as the write path extracted it, when soft identity mapped it onto ``key``:
        :meth:`unmerge` can then move the operation back to a key of its own.

        A ``reject`` or ``revoke`` records the value it retracts: ``retracts`` (for a revoke, its
        ``value`` names it too), else the head's value when it arrives. It is applied only while that
        value is the head's (else a noop with the reason), so a replay without the statement it
        retracted (``as_of``, ``undo``, ``erase``) leaves it a noop instead of retracting another value.
        """
        if self._listener is not None and not self._telling:
            # premises are read twice (the write, the listener): an iterator is read once, into a list
            named = depends_on if depends_on is None or isinstance(depends_on, str) else list(depends_on)
            call = WriteCall("apply", (op, key, value, evidence, named, alias, retracts))
            return self._told(
                call,
                lambda: self.apply(
                    op, key, value, evidence, depends_on=named, alias=alias, retracts=retracts
                ),
            )
        store = self._store
        if depends_on is not None or alias is not None or retracts is not None:
            return self._apply_recorded(op, key, value, evidence, depends_on, alias, retracts)
        # accept is ~90% of a write stream: a valid accept of a known key, citing no evidence or the one
        # just observed, is one store write when all it does is supersede the head: no evidence states a
        # valid time (to place it by), no authority is configured (to weigh) and the head holds another
        # value (a repeat is support, not a new version). See `pmem perf core`.
        if (
            op == "accept"
            and type(value) is str
            and value.isascii()
            and (evidence is None or evidence is self._last_eid)
            and type(key) is str
            and not self._has_valid_times()
            and not self._ranks_sources()
            and (known := self._find_key(key)) is not None
            and not self._holds(known[1], value)
        ):
            self._accept(known[0], known[1], value, NONE if evidence is None else self._last_ev)
            return APPLIED_ACCEPT
        # Every argument is checked before anything is written (a refused call leaves no trace). The
        # cheap tests in front only skip the full checks for the common, obviously valid case.
        handler: _Handler | None = None
        if op != "accept":
            handler = self._handlers.get(op) if type(op) is str else None
            if handler is None:
                msg = f"apply: unknown operation {preview(op)}; op must be one of {', '.join(OPS)}"
                raise ValueError(msg)
        found = store.lookup(key) if type(key) is str else None
        if found is None:  # a key admitted before is valid: only new keys need the full check
            check_key(key, f"apply {op}")
        if value is None:
            if op == "accept" or op == "contest" or op == "resolve":
                msg = f"{op} {key}: a value is required"
                raise ValueError(msg)
        elif type(value) is not str or not value.isascii():
            check_text(value, "value", f"apply {op} {key}", optional=True)
        if evidence is None:
            ev = NONE
        elif evidence is self._last_eid:
            ev = self._last_ev
        else:
            ev = self.evidence_index(evidence, op, key)
        if handler is not None:
            return handler(key, value, ev)
        assert value is not None  # accept without a value was refused above
        if found is None:
            kid, head, current = store.keys.new(key), NONE, None
        else:
            kid, head, current = found
        if current is not None:
            if current == value:
                return self._ops.support(ACCEPT, kid, head, value, ev, store.next_seq(), SUPPORT_RESULT)
            if store.evidence.has_valid_times() and self._ops.valid_before(ev, head):
                return self._ops.enter_history(kid, value, ev)  # a late fact does not roll the present back
            if store.authority.configured() and outranked(store, ev, (head,)):
                return self._ops.contest(
                    key, value, ev, ACCEPT
                )  # a lower-ranked source cannot displace the head
        store.accept(kid, head, value, ev)
        return APPLIED_ACCEPT

    def _apply_recorded(
        self,
        op: str,
        key: str,
        value: str | None,
        evidence: str | None,
        depends_on: Iterable[str] | None,
        alias: str | None,
        retracts: str | None = None,
    ) -> OpResult:
        """``apply`` with premises, the key as extracted and/or the value a retraction retracts, each
        recorded with the operation."""
        store = self._store
        premises = () if depends_on is None else self._premises(op, key, depends_on)
        if alias is not None:
            check_key(alias, f"apply {op} {key}", "alias")
            if alias == key:
                msg = f"apply {op} {key}: alias must differ from the key (it names the key as extracted)"
                raise ValueError(msg)
        if retracts is not None:
            check_text(retracts, "retracts", f"apply {op} {key}")
            if op != "reject" and op != "revoke":
                msg = f"apply {op} {key}: retracts names what a reject or revoke retracts, not a {op}"
                raise ValueError(msg)
            if op == "revoke" and value is not None and value != retracts:
                msg = f"apply revoke {key}: value {value!r} and retracts {retracts!r} name different values"
                raise ValueError(msg)
        with self._ops.retracting(retracts):
            result = self.apply(op, key, value, evidence)  # checks the other arguments before writing
        n = store.log.count() - 1
        if alias is not None:
            store.log.record_alias(n, alias)
        if premises:  # an empty depends_on is no premise at all
            store.record_premises(n, premises, result.applied)
        return result

    def _premises(self, op: str, key: str, depends_on: Iterable[str]) -> tuple[tuple[int, int], ...]:
        """``depends_on`` checked: (key id, current head) per distinct premise key, in order."""
        store = self._store
        if isinstance(depends_on, str) or not hasattr(depends_on, "__iter__"):
            msg = f"apply {op} {key}: depends_on must be a list or tuple of keys, got {preview(depends_on)}"
            raise ValueError(msg)
        out: dict[int, int] = {}
        for name in depends_on:
            kid = store.keys.id(name) if type(name) is str else None
            if kid is None or store.keys.head(kid) == NONE:
                msg = f"apply {op} {key}: premise {preview(name)} has no current value (depends_on names keys with a head)"
                raise ValueError(msg)
            if name == key:
                msg = f"apply {op} {key}: a fact cannot depend on its own key"
                raise ValueError(msg)
            out.setdefault(kid, store.keys.head(kid))
        return tuple(out.items())

    def changed_premises(self, cell: Cell) -> frozenset[str]:
        """Of ``cell.stale``, the premises whose own head changed (the others are stale through theirs)."""
        store = self._store
        if not cell.stale:
            return frozenset()
        kid = store.keys.id(cell.key)
        premises = () if kid is None else store.versions.premises(store.keys.head(kid))
        return frozenset(store.keys.name(pk) for pk, pv in premises if store.keys.head(pk) != pv)

    def apply_batch(self, batch: pa.Table | pa.RecordBatch) -> BatchResult:
        """Apply a write batch (``pmem.graph.WRITE_BATCH_SCHEMA``) column-wise, as one call.

        The graph ends exactly as after observing or applying its rows one by one (see
        ``pmem.graph._ops._bulk``); an invalid row raises ``ValueError`` naming it, and then nothing is written.
        """
        if self._listener is not None and not self._telling:
            return self._told(WriteCall("apply_batch", (batch,)), lambda: apply_write_batch(self, batch))
        return apply_write_batch(self, batch)

    def as_of(self, seq: int | None = None, *, time: str | None = None) -> ProvenanceGraph:
        """A read-only graph equal to replaying what arrived up to ``seq`` and was observed up to ``time``.

        Both bounds are optional (neither: a read-only copy). An operation is observed when its evidence
        is; an arrival without a time takes the latest time before it (see ``pmem.graph._ops._replay``). The
        identity registry's decisions carry no seq and are copied whole.
        """
        replayed = replay_as_of(self, seq, time)
        replayed.__class__ = ReadOnlyGraph  # built by the writers, then frozen
        return replayed

    def empty(self, registry: KeyRegistry | None = None, **settings: Any) -> ProvenanceGraph:
        """A new, empty, writable in-memory :class:`ProvenanceGraph` (never a subclass: no journal, not
        read-only), as replays build into, with the constructor's ``registry`` and keyword ``settings``
        (``authority``, ``default_authority``). Nothing of this graph is copied.

        >>> ProvenanceGraph().as_of().empty().apply("accept", "k", "v").applied
        True
        """
        return ProvenanceGraph(registry, **settings)

    def evidence_index(self, evidence: object, op: str, key: str) -> int:
        """The index of evidence id ``evidence`` cited by operation ``op`` on ``key`` (``op``
        ``"evidence"``: only read, so erased evidence is found too).

        Raises:
            ValueError: not an id of this graph's evidence, or erased and cited by an operation.
        """
        store = self._store
        if type(evidence) is str and evidence[:1] == "e" and evidence[1:].isdigit():
            n = int(evidence[1:])
            if n < store.evidence.count() and evidence == f"e{n}":
                if op != "evidence" and store.evidence.is_erased(n):
                    msg = f"{op} {key}: evidence {evidence} was erased (it cannot be cited any more)"
                    raise ValueError(msg)
                return n
        msg = f"{op} {key}: unknown evidence id {preview(evidence)} (evidence must be an id returned by observe)"
        raise ValueError(msg)

    def remember_observed(self, ev: int) -> None:
        """Make evidence ``ev`` the one :meth:`apply`'s observe-then-apply fast path takes, as
        :meth:`observe` does: for this package's column-wise writes, which admit evidence themselves."""
        self._last_eid, self._last_ev = f"e{ev}", ev

    def apply_citing(self, ev: int, op: str, key: str, value: str | None = None, **recorded: Any) -> OpResult:
        """:meth:`apply` citing evidence by its index ``ev`` (NONE: none), for this package's replays,
        which hold indexes rather than ids (the index is trusted: no id is formatted or checked)."""
        if ev == NONE:
            return self.apply(op, key, value, None, **recorded)
        last = self._last_eid, self._last_ev
        self._last_eid, self._last_ev = _CITED, ev  # apply's observe-then-apply fast path takes it
        try:
            return self.apply(op, key, value, _CITED, **recorded)
        finally:
            self._last_eid, self._last_ev = last

    # ------------------------------------------------------------------ undo and erasure

    def undo(self, op_seq: int, evidence: str | None = None) -> OpResult:
        """Undo the operation at seq ``op_seq``: its key becomes what replaying the log without it gives.

        Later operations on the key are kept and re-applied in order. Recorded as an ``undo`` operation
        naming ``op_seq`` (undoing that undo restores the operation). A seq that is not an operation
        raises ``ValueError``; an operation that changed nothing (not applied, or already undone) is not
        undone: the undo is logged, not applied, with the reason. Versions that only the undone
        operation created keep their place with status ``undone``.
        """
        if self._listener is not None and not self._telling:
            return self._told(
                WriteCall("undo", (op_seq, evidence)), lambda: undo_operation(self, op_seq, evidence)
            )
        return undo_operation(self, op_seq, evidence)

    def unmerge(self, alias: str) -> MergeReceipt:
        """Split a soft-identity merge: every operation recorded with ``alias`` moves to key ``alias``.

        Both keys become what replaying the log with those operations on ``alias`` gives (undos of a
        moved operation move with it); the registry records the split and never merges the pair again.
        An alias no operation was recorded with raises ``ValueError``.
        """
        if self._listener is not None and not self._telling:
            return self._told(WriteCall("unmerge", (alias,)), lambda: split_alias(self, alias))
        return split_alias(self, alias)

    def erase(self, evidence_id: str) -> ErasureReceipt:
        """Erase evidence: its text is gone from the graph and from every byte saved afterwards.

        Every operation that cited it is treated as never having happened (its keys are re-derived by
        replay without them; a value other evidence also stated survives through that evidence's own
        operation); versions that existed only through it get status ``erased`` and no value. The
        evidence keeps its id and arrival seq (every later arrival is numbered after it) and loses what
        identifies the statement: its text, time, valid time and source (``"erased"``; the source's name
        leaves the graph when nothing else names it). The receipt names the evidence, the keys whose
        value changed (before, after) and the versions erased; it holds no erased text.
        """
        if self._listener is not None and not self._telling:
            return self._told(WriteCall("erase", (evidence_id,)), lambda: self.erase(evidence_id))
        receipt = erase_evidence(self, evidence_id)
        if receipt.evidence == self._last_eid:  # the observe-then-apply fast path must not cite it either
            self._last_eid, self._last_ev = None, NONE
        self._last_source, self._last_code = _NO_SOURCE, NONE  # the erased source's code may be renamed
        return receipt

    # ------------------------------------------------------------------ source authority

    def set_authority(self, source: str, level: int) -> None:
        """Rank ``source`` at ``level`` from now on (earlier operations keep the outcome they had).

        An operation whose evidence's source ranks below the source that created a key's head cannot
        displace it: ``accept`` is lowered to ``contest`` (the claim is kept as an alternative and the
        cell is contested), ``reject`` and ``revoke`` are not applied (``insufficient authority``), and
        ``resolve`` needs a rank at least every competitor's. Unlisted sources, and operations without
        evidence, rank at ``default_authority``.
        """
        if self._listener is not None and not self._telling:
            self._told(WriteCall("set_authority", (source, level)), lambda: self.set_authority(source, level))
            return
        check_text(source, "source", "set_authority", non_empty=True)
        self._set_authority(source, level, self._store.seq)

    def _set_authority(self, source: str, level: object, after: int) -> None:
        if type(source) is not str or not source:
            msg = f"authority: a source must be a non-empty string, got {preview(source)}"
            raise ValueError(msg)
        self._store.authority.set(source, _checked_level(level, f"authority of {source!r}"), after)

    def authority(self, source: str) -> int:
        """The level ``source`` ranks at now (``default_authority`` when unlisted or not configured)."""
        return self._store.authority.level(source)

    # ------------------------------------------------------------------ identity

    @property
    def registry(self) -> KeyRegistry:
        """The soft key-identity registry whose decisions are saved with this graph."""
        if self._registry is None:
            self._registry = KeyRegistry()
        return self._registry

    @property
    def registry_in_use(self) -> KeyRegistry | None:
        """The identity registry when one was given or used; None otherwise (:attr:`registry` makes one)."""
        return self._registry

    @property
    def storage(self) -> GraphStore:
        """The graph's columns (:class:`pmem.graph._ops._store.GraphStore`): for this package's modules that
        work on whole columns (column-wise writes, state tables, re-derivation, replay); not public API."""
        return self._store

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        """Number of keys ever written (empty cells included)."""
        return self._store.keys.count()

    @property
    def seq(self) -> int:
        """The last arrival seq handed out (evidence and operations share one counter)."""
        return self._store.seq

    def keys(self) -> list[str]:
        """Every key ever written, sorted."""
        return sorted(self._store.keys.names())

    def __iter__(self) -> Iterator[str]:
        """Every key ever written, sorted (empty cells included)."""
        return iter(self.keys())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._store.keys.id(key) is not None

    def head_value(self, key: str) -> str | None:
        """The current value of ``key`` (None when empty or unknown): the cheapest read."""
        store = self._store
        kid = store.keys.id(key)
        return None if kid is None else store.head_value(kid)

    def versions(self, key: str) -> list[Version]:
        """Every version of ``key`` in arrival order (empty list for an unknown key)."""
        store = self._store
        kid = store.keys.id(key)
        if kid is None:
            return []
        closing = store.closing(kid)
        return [version_of(store, v, closing) for v in reversed(store.chain(kid))]

    def version(self, version_id: str) -> Version:
        vid = _parse_id(version_id, "v", self._store.versions.count())
        return version_of(self._store, vid)

    def cell(self, key: str) -> Cell | None:
        """The materialized cell of ``key``; None when the key was never written."""
        kid = self._store.keys.id(key) if isinstance(key, str) else None
        return None if kid is None else cell_of(self._store, kid)

    def frontier(self) -> dict[str, Cell]:
        """The active frontier: key -> cell for every non-empty cell, in key order.

        >>> g = ProvenanceGraph()
        >>> _ = g.apply("accept", "b.x", "2", evidence=g.observe("b.x is 2"))
        >>> _ = g.apply("accept", "a.x", "1", evidence=g.observe("a.x is 1"))
        >>> {key: cell.value for key, cell in g.frontier().items()}
        {'a.x': '1', 'b.x': '2'}
        """
        return {key: cell_of(self._store, kid) for key, kid in sorted(self._store.keys.cells())}

    def frontier_items(self) -> list[tuple[str, str]]:
        """``(key, current value)`` for every non-empty cell, sorted by key: the cheap frontier."""
        return sorted(self._store.current_values())

    def has_observation_times(self) -> bool:
        """Whether any evidence carries an observation time (``as_of(time=...)`` needs one).

        >>> g = ProvenanceGraph()
        >>> _ = g.observe("no time here")
        >>> g.has_observation_times()
        False
        """
        return self._store.evidence.has_observation_times()

    def evidence(self, evidence_id: str) -> Evidence:
        store = self._store
        try:
            n = self.evidence_index(evidence_id, "evidence", "")
        except ValueError:
            msg = f"unknown evidence id {evidence_id!r}"
            raise KeyError(msg) from None
        return Evidence(evidence_id, *store.evidence.fields(n))

    def operations(self, key: str | None = None) -> Iterator[Operation]:
        """The operation log in order, optionally for one key (failed preconditions included)."""
        store = self._store
        kid = None
        if key is not None:
            kid = store.keys.id(key)
            if kid is None:
                return
        yield from operations_of(store, kid)

    def edges(self) -> Iterator[tuple[str, str, str]]:
        """Every typed edge as ``(kind, source id, target id)``; tombstones are ``t<n>``."""
        yield from edges_of(self._store)

    def stats(self) -> dict[str, int]:
        """Node and edge counts, plus operations by effective type."""
        counts = self._store.counts(len(LOG_OPS))
        for code, name in enumerate(LOG_OPS):
            counts[f"op_{name}"] = counts.pop(f"by_op_{code}")
        return counts

    def render(self, keys: Iterable[str] | None = None, disclose: Iterable[str] = ()) -> str:
        """Deterministic text of the frontier (or of ``keys``, in the order given), one line per cell."""
        return render_cells(self, keys, disclose)

    # ------------------------------------------------------------------ state

    def save(self, path: str | Path, *, layout: Layout = "file", new: bool = False) -> None:
        """Write the whole graph to ``path`` as flat Arrow tables, atomically (write aside, then rename).

        ``layout="file"``: one Arrow IPC file holding every table; ``"directory"``: ``path/<table>.arrow``,
        one Arrow IPC file per table, which any Arrow engine scans without P-Mem (``docs/core.md``). The
        parent directory must exist (``FileNotFoundError`` otherwise); files get the default permissions.

        A save over a state this graph loaded or saved before checks, under a lock, that the state is
        still that version, else raises ``StateChangedError`` naming both and writes nothing (another
        process saved it meanwhile: no write is lost silently). ``new=True`` refuses any state found at
        ``path`` (``pmem.graph._persist._guard``).

        >>> import tempfile, polars
        >>> g = ProvenanceGraph()
        >>> _ = g.apply("accept", "budget", "$30k")
        >>> state = tempfile.mkdtemp() + "/state"
        >>> g.save(state, layout="directory")
        >>> polars.read_ipc(f"{state}/versions.arrow").select("key", "value", "status").row(0)
        ('budget', '$30k', 'active')
        """
        save_checked(self, path, layout, new=new)

    @classmethod
    def load(cls, path: str | Path, registry: KeyRegistry | None = None) -> ProvenanceGraph:
        """Read a graph written by :meth:`save` (either layout, or an older schema's file), or the union
        of a sharded state (``pmem ingest --shards``: see ``pmem.graph.shards``); a damaged or truncated
        state raises ``StateFileError``. The version loaded is recorded: a later :meth:`save` over it
        checks that it has not changed."""
        if is_sharded(path):
            return load_sharded(cls, path, registry)
        return load_recorded(cls, path, registry)

    def to_bytes(self) -> bytes:
        """The exact bytes :meth:`save` writes."""
        return graph_to_bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes, registry: KeyRegistry | None = None) -> ProvenanceGraph:
        """Inverse of :meth:`to_bytes` (for states kept in object stores or Arrow columns)."""
        return build_graph(cls, *decode_tables(data), registry)


def _checked_level(level: object, what: str) -> int:
    if not isinstance(level, numbers.Integral) or isinstance(level, bool):
        msg = f"{what} must be an integer level, got {preview(level)}"
        raise ValueError(msg)
    return int(level)


def _parse_id(text: str, prefix: str, bound: int) -> int:
    if isinstance(text, str) and text.startswith(prefix) and text[1:].isdigit():
        n = int(text[1:])
        if n < bound:
            return n
    msg = f"unknown id {text!r}"
    raise KeyError(msg)


def _refuse_write(name: str) -> NoReturn:
    msg = f"{name}: this graph is a read-only replay (as_of); write to the graph it was read from"
    raise PermissionError(msg)


class ReadOnlyGraph(ProvenanceGraph):
    """A graph rebuilt by replay (:meth:`ProvenanceGraph.as_of`): every read works, every write
    (:data:`WRITES`) refuses, whatever its arguments.

    >>> ProvenanceGraph().as_of().observe("x")
    Traceback (most recent call last):
    ...
    PermissionError: observe: this graph is a read-only replay (as_of); write to the graph it was read from
    """

    #: the methods that would change the graph: the public writes a listener is told of
    WRITES = tuple(WRITES)


def _refusing(name: str) -> Callable[..., NoReturn]:
    def refuse(self: ReadOnlyGraph, *args: object, **kwargs: object) -> NoReturn:
        _refuse_write(name)

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


for _write in ReadOnlyGraph.WRITES:
    setattr(ReadOnlyGraph, _write, _refusing(_write))
