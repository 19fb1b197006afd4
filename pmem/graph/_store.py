"""The graph's storage: every column of every node kind, and the named operations that write them.

:class:`GraphStore` is the one owner of the columns. :class:`~pmem.graph.ProvenanceGraph` holds one and
applies the six operations through it; the modules that work on whole columns (column-wise writes,
the state tables, re-derivation, replay) reach it as ``graph.storage`` and use the operations below to
write, so an invariant that spans columns (a version's place in its key's arrival chain, the operation
log's compact form) is kept in one place.

Layout. Every node kind is a set of parallel columns indexed by a small integer id, so applying an
operation is a handful of appends and index writes. Integer columns are typed (``array("q")``: int64
without a Python object per entry), which is also what lets column-wise writes read and extend them as
numpy blocks; texts and values are lists of strings. A numpy view pins its column's buffer (``array``
cannot grow while one is alive), so views are only ever made for the length of one expression or one
function that appends nothing. Nothing admitted is ever removed; operations retype statuses, close or
reopen intervals and append edges, except the re-derivations (undo, erase, unmerge), which replace a
key's edges and blank erased texts.

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

from array import array
from typing import TYPE_CHECKING

from pmem.graph._codes import ACTIVE, ERASED, NONE, NOOP, UNDO, UNDONE
from pmem.graph._texts import TextColumn

if TYPE_CHECKING:
    from datetime import datetime


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

    # ------------------------------------------------------------------ writing

    def admit_source(self, source: str) -> int:
        """The code of ``source``, admitting it when new."""
        code = self.source_code.get(source)
        if code is None:
            code = self.source_code[source] = len(self.sources)
            self.sources.append(source)
        return code

    def new_key(self, name: str) -> int:
        """Admit key ``name`` (empty: no head, no version) and return its id."""
        kid = self.kid[name] = len(self.key_names)
        self.key_names.append(name)
        self.k_head.append(NONE)
        self.k_newest.append(NONE)
        return kid

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

    def evidence_count(self) -> int:
        """How many evidence nodes there are (the next one's index)."""
        return len(self.ev_seq)

    def set_valid_time(self, ev: int, text: str, at: datetime) -> None:
        """Evidence ``ev`` states facts true from ``text`` (ISO 8601), parsed as ``at`` (naive UTC)."""
        self.ev_valid[ev] = text
        self.valid_at[ev] = at

    def share_evidence(self, other: GraphStore) -> None:
        """Read ``other``'s evidence (texts, sources, seqs, valid times) and default authority as this
        store's own: a scratch store replaying one of ``other``'s keys (its columns are shared, not copied)."""
        self.ev_text, self.ev_source, self.ev_seq = other.ev_text, other.ev_source, other.ev_seq
        self.sources, self.source_code = other.sources, other.source_code
        self.ev_valid, self.valid_at = other.ev_valid, other.valid_at
        self.default_authority = other.default_authority

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

    # ------------------------------------------------------------------ reading

    def request(self, i: int) -> tuple[int, int, str | None, int, int]:
        """What operation ``i`` requested: (op code, key id, value, evidence index, seq)."""
        e = self.op_extra.get(i)
        if e is None:
            t = self.op_target[i]
            return self.op_code[i] & 7, self.v_key[t], self.v_value[t], self.v_ev[t], self.v_from[t]
        return self.op_code[i] & 7, e[1], e[3], e[2], e[0]

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
