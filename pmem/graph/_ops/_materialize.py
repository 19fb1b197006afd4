"""The graph's nodes as the public types, read from its store: a version (:class:`Version`), a key's cell
(:class:`Cell`, its head, open alternatives and history, support, stale premises, and whether authority
holds it), the operation log (:class:`Operation`) and the typed edges. Reads only: the graph
(:class:`~pmem.graph.ProvenanceGraph`) and its replays call these; nothing here writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pmem.graph._ops._codes import CONTESTED, EDGE_KINDS, ERASED, LOG_OPS, NONE, STATUSES, UNDONE
from pmem.graph._ops._types import Cell, Operation, Version

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pmem.graph._ops._store import GraphStore

#: the id prefixes of an edge's ends, by kind (the order of EDGE_KINDS)
_EDGE_ENDS = (("v", "e"), ("v", "v"), ("v", "v"), ("t", "v"))


def outranked(store: GraphStore, ev: int, versions: Iterable[int]) -> bool:
    """Whether evidence ``ev``'s source ranks below the source that created any of ``versions``."""
    rank = store.rank(ev)
    return any(store.rank(store.versions.creating_evidence(v)) > rank for v in versions)


def stale_premises(store: GraphStore, kid: int, visiting: set[int] | None = None) -> tuple[str, ...]:
    """Premise keys of ``kid``'s head that changed since it was asserted, or are stale themselves."""
    premises = store.versions.premises(store.keys.head(kid))
    if not premises:
        return ()
    visiting = visiting or set()
    visiting.add(kid)
    out = [
        store.keys.name(pk)
        for pk, pv in premises
        if store.keys.head(pk) != pv or (pk not in visiting and stale_premises(store, pk, visiting))
    ]
    visiting.discard(kid)
    return tuple(out)


def version_of(store: GraphStore, vid: int, closing: dict[int, int] | None = None) -> Version:
    """Version ``vid`` (``closing``: its key's lazily closed versions, when the caller has them)."""
    kid, value, status, start, to, ev, support, prev, alt = store.version_fields(vid, closing)
    return Version(
        id=f"v{vid}",
        key=store.keys.name(kid),
        value=value,
        status=STATUSES[status],
        valid_from=start,
        valid_to=None if to == NONE else to,
        evidence=None if ev == NONE else f"e{ev}",
        support=support,
        supersedes=None if prev == NONE else f"v{prev}",
        alternative_of=None if alt == NONE else f"v{alt}",
    )


def cell_of(store: GraphStore, kid: int) -> Cell:
    """Key ``kid``'s cell: its head and open alternatives, the rest of its history (undone and erased
    versions left out), support and stale premises."""
    head, current = store.head_and_value(kid)
    alts = store.keys.alternatives(kid)
    shown = {head, *alts}
    closing = store.closing(kid)
    history = [
        version_of(store, v, closing)
        for v in store.chain(kid)
        if v not in shown and store.versions.status(v) != UNDONE and store.versions.status(v) != ERASED
    ]
    if current is None:
        return Cell(store.keys.name(kid), None, "empty", [], history, 0)
    status = "contested" if store.versions.status(head) == CONTESTED else "active"
    # every open claim comes from a source ranked below the head's: only an equal or higher rank can
    # settle it, so the head stands (it is rendered as held, not as an open choice)
    held = (
        status == "contested"
        and store.authority.configured()
        and all(outranked(store, store.versions.creating_evidence(a), (head,)) for a in alts)
    )
    return Cell(
        key=store.keys.name(kid),
        value=current,
        status=status,
        alternatives=[store.versions.value(a) for a in alts],
        history=history,
        support=store.versions.support(head),
        stale=stale_premises(store, kid) if store.versions.has_premises() else (),
        held=held,
    )


def operations_of(store: GraphStore, kid: int | None) -> Iterator[Operation]:
    """The operation log in order (``kid``: only that key's), failed preconditions included."""
    positions: Iterable[int] = range(store.log.count()) if kid is None else store.log.of_key(kid)
    for i in positions:
        seq, code, k, value, ev, target, reason, retracts = store.log.operation(i)
        yield Operation(
            seq=seq,
            requested=LOG_OPS[code & 7],
            op=LOG_OPS[(code >> 3) & 7],
            key=store.keys.name(k),
            value=value,
            evidence=None if ev == NONE else f"e{ev}",
            applied=bool(code >> 6),
            reason=reason,
            version=None if target == NONE else f"v{target}",
            retracts=retracts,
        )


def edges_of(store: GraphStore) -> Iterator[tuple[str, str, str]]:
    """Every typed edge as ``(kind, source id, target id)``; tombstones are ``t<n>``."""
    for kind, source, target in store.typed_edges():
        # supported-by: version -> evidence; supersedes, alternative-of: version -> version;
        # revokes: tombstone -> version
        src, dst = _EDGE_ENDS[kind]
        yield (EDGE_KINDS[kind], f"{src}{source}", f"{dst}{target}")
