"""The typed provenance graph.

Storage is columnar: every node kind is a set of parallel Python lists indexed by a small integer id,
so that applying an operation is a handful of list appends and index writes (see ``pmem perf core``).
Nothing admitted is ever removed from these lists; operations only retype statuses, close or reopen
intervals, and append edges.

Node kinds and where they live:

- evidence: ``_ev_*`` (text, source, time, arrival seq); public id ``e<n>``.
- version: ``_v_*`` (key, value, status, valid_from, valid_to, creating evidence, support,
  supersedes target, alternative-of target); public id ``v<n>``.
- operation: ``_op_*`` (requested and effective op, key, value, evidence, applied, reason, target
  version, seq).
- tombstone: ``_tb_*`` (revoked version, seq, evidence).

Edges: *supersedes* and *alternative-of* are at most one per version and are stored on the version
(``_v_prev``, ``_v_alt``); *supported-by* edges are ``_sb_*`` (version, evidence, seq); *revokes* edges
are the tombstones themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pmem.graph._codes import (
    ACCEPT,
    ACTIVE,
    ALTERNATIVE,
    CONTEST,
    CONTESTED,
    CONTRADICTED,
    NONE,
    NOOP,
    OP_CODES,
    OPS,
    REJECT,
    RESOLVE,
    REVOKE,
    REVOKED,
    STATUSES,
    SUPERSEDED,
)
from pmem.graph._types import Cell, Evidence, Operation, OpResult, Version

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from pmem.graph._identity import KeyRegistry

# Applied results carry no per-call data, so one frozen instance per op serves every call.
_APPLIED = {name: OpResult(True, name, None) for name in OPS}
_SUPPORT_RESULT = OpResult(True, "noop", "value equals the current head: counted as support")


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

    def __init__(self, registry: KeyRegistry | None = None) -> None:
        self._seq = 0
        # evidence
        self._ev_text: list[str] = []
        self._ev_source: list[str] = []
        self._ev_time: list[str | None] = []
        self._ev_seq: list[int] = []
        self._ev_index: dict[str, int] = {}
        # keys
        self._key_names: list[str] = []
        self._key_index: dict[str, int] = {}
        self._head: list[int] = []  # key id -> head version id, or NONE
        self._key_versions: list[list[int]] = []  # key id -> version ids in arrival order
        self._open_alts: dict[int, list[int]] = {}  # key id -> open alternatives of its head
        # versions
        self._v_key: list[int] = []
        self._v_value: list[str] = []
        self._v_status: list[int] = []
        self._v_from: list[int] = []
        self._v_to: list[int] = []
        self._v_ev: list[int] = []
        self._v_support: list[int] = []
        self._v_prev: list[int] = []  # supersedes edge target
        self._v_alt: list[int] = []  # alternative-of edge target
        # supported-by edges
        self._sb_version: list[int] = []
        self._sb_ev: list[int] = []
        self._sb_seq: list[int] = []
        # tombstones (each one is also the source of a revokes edge)
        self._tb_version: list[int] = []
        self._tb_seq: list[int] = []
        self._tb_ev: list[int] = []
        # operation log
        self._op_seq: list[int] = []
        self._op_req: list[int] = []
        self._op_eff: list[int] = []
        self._op_key: list[int] = []
        self._op_value: list[str | None] = []
        self._op_ev: list[int] = []
        self._op_applied: list[bool] = []
        self._op_reason: list[str | None] = []
        self._op_target: list[int] = []
        self._registry = registry
        self._handlers = (
            self._accept,
            self._contest,
            self._reject,
            self._revoke,
            self._resolve,
            self._noop,
        )

    # ------------------------------------------------------------------ writing

    def observe(self, text: str, source: str = "user", time: str | None = None) -> str:
        """Admit an observation as an evidence node and return its id."""
        if type(text) is not str:
            msg = f"observe: text must be a string, got {type(text).__name__}"
            raise ValueError(msg)
        if type(source) is not str or not source:
            msg = "observe: source must be a non-empty string"
            raise ValueError(msg)
        if time is not None and type(time) is not str:
            time = _format_time(time)
        self._seq = seq = self._seq + 1
        n = len(self._ev_text)
        self._ev_text.append(text)
        self._ev_source.append(source)
        self._ev_time.append(time)
        self._ev_seq.append(seq)
        eid = f"e{n}"
        self._ev_index[eid] = n
        return eid

    def apply(self, op: str, key: str, value: str | None = None, evidence: str | None = None) -> OpResult:
        """Apply one typed operation to ``key``.

        A failed precondition is recorded in the operation log as a noop with its reason and changes no
        status. Invalid arguments (unknown op, missing or ill-typed value, unknown evidence id) raise
        ``ValueError`` and record nothing.
        """
        code = OP_CODES.get(op)
        if code is None:
            msg = f"unknown operation {op!r}; expected one of {', '.join(OPS)}"
            raise ValueError(msg)
        if type(key) is not str or not key:
            msg = f"{op}: key must be a non-empty string, got {key!r}"
            raise ValueError(msg)
        if value is not None and type(value) is not str:
            msg = f"{op} {key}: value must be a string or None, got {type(value).__name__}"
            raise ValueError(msg)
        if evidence is None:
            ev = NONE
        else:
            ev = self._ev_index.get(evidence, NONE)
            if ev == NONE:
                msg = f"{op} {key}: unknown evidence id {evidence!r} (use the id returned by observe)"
                raise ValueError(msg)
        return self._handlers[code](key, value, ev)

    def _key_id(self, key: str) -> int:
        kid = self._key_index.get(key)
        if kid is None:
            kid = len(self._key_names)
            self._key_index[key] = kid
            self._key_names.append(key)
            self._head.append(NONE)
            self._key_versions.append([])
        return kid

    def _new_version(self, kid: int, value: str, status: int, seq: int, ev: int, prev: int, alt: int) -> int:
        vid = len(self._v_key)
        self._v_key.append(kid)
        self._v_value.append(value)
        self._v_status.append(status)
        self._v_from.append(seq)
        self._v_to.append(NONE)
        self._v_ev.append(ev)
        self._v_support.append(1)
        self._v_prev.append(prev)
        self._v_alt.append(alt)
        self._key_versions[kid].append(vid)
        if ev != NONE:
            self._sb_version.append(vid)
            self._sb_ev.append(ev)
            self._sb_seq.append(seq)
        return vid

    def _log(
        self,
        seq: int,
        req: int,
        eff: int,
        kid: int,
        value: str | None,
        ev: int,
        applied: bool,
        reason: str | None,
        target: int,
    ) -> None:
        self._op_seq.append(seq)
        self._op_req.append(req)
        self._op_eff.append(eff)
        self._op_key.append(kid)
        self._op_value.append(value)
        self._op_ev.append(ev)
        self._op_applied.append(applied)
        self._op_reason.append(reason)
        self._op_target.append(target)

    def _fail(self, req: int, kid: int, value: str | None, ev: int, reason: str) -> OpResult:
        self._seq = seq = self._seq + 1
        self._log(seq, req, NOOP, kid, value, ev, False, reason, NONE)
        return OpResult(False, "noop", reason)

    def _support(self, req: int, kid: int, vid: int, value: str | None, ev: int, seq: int) -> None:
        self._v_support[vid] += 1
        if ev != NONE:
            self._sb_version.append(vid)
            self._sb_ev.append(ev)
            self._sb_seq.append(seq)
        self._log(seq, req, NOOP, kid, value, ev, True, None, vid)

    def _close_open_alternatives(self, kid: int, seq: int, status: int) -> None:
        alts = self._open_alts.pop(kid, None)
        if alts:
            v_to, v_status = self._v_to, self._v_status
            for a in alts:
                v_to[a] = seq
                v_status[a] = status

    def _accept(self, key: str, value: str | None, ev: int) -> OpResult:
        if value is None:
            msg = f"accept {key}: a value is required"
            raise ValueError(msg)
        kid = self._key_index.get(key)
        if kid is None:
            kid = self._key_id(key)
        head = self._head[kid]
        self._seq = seq = self._seq + 1
        if head != NONE:
            if self._v_value[head] == value:
                self._v_support[head] += 1
                if ev != NONE:
                    self._sb_version.append(head)
                    self._sb_ev.append(ev)
                    self._sb_seq.append(seq)
                self._log(seq, ACCEPT, NOOP, kid, value, ev, True, _SUPPORT_RESULT.reason, head)
                return _SUPPORT_RESULT
            self._v_status[head] = SUPERSEDED
            self._v_to[head] = seq
            if kid in self._open_alts:
                self._close_open_alternatives(kid, seq, ALTERNATIVE)
        vid = self._new_version(kid, value, ACTIVE, seq, ev, head, NONE)
        self._head[kid] = vid
        self._log(seq, ACCEPT, ACCEPT, kid, value, ev, True, None, vid)
        return _APPLIED["accept"]

    def _reject(self, key: str, value: str | None, ev: int) -> OpResult:
        kid = self._key_index.get(key, NONE)
        head = self._head[kid] if kid != NONE else NONE
        if head == NONE:
            return self._fail(REJECT, self._key_id(key), value, ev, "reject: the key has no current head")
        self._seq = seq = self._seq + 1
        self._v_status[head] = CONTRADICTED
        self._v_to[head] = seq
        self._close_open_alternatives(kid, seq, ALTERNATIVE)
        if value is not None:
            vid = self._new_version(kid, value, ACTIVE, seq, ev, head, NONE)
            self._head[kid] = vid
        else:
            vid = self._rollback(kid, head)
        self._log(seq, REJECT, REJECT, kid, value, ev, True, None, vid)
        return _APPLIED["reject"]

    def _revoke(self, key: str, value: str | None, ev: int) -> OpResult:
        kid = self._key_index.get(key, NONE)
        head = self._head[kid] if kid != NONE else NONE
        if head == NONE:
            return self._fail(REVOKE, self._key_id(key), value, ev, "revoke: the key has no current head")
        if value is not None and value != self._v_value[head]:
            reason = f"revoke names {value!r} but the current head is {self._v_value[head]!r}"
            return self._fail(REVOKE, kid, value, ev, reason)
        self._seq = seq = self._seq + 1
        self._v_status[head] = REVOKED
        self._v_to[head] = seq
        self._close_open_alternatives(kid, seq, ALTERNATIVE)
        self._tb_version.append(head)
        self._tb_seq.append(seq)
        self._tb_ev.append(ev)
        vid = self._rollback(kid, head)
        self._log(seq, REVOKE, REVOKE, kid, value, ev, True, None, head)
        return _APPLIED["revoke"]

    def _rollback(self, kid: int, retracted: int) -> int:
        """Reopen the most recent merely-superseded predecessor along supersedes edges; empty if none."""
        prev, status = self._v_prev, self._v_status
        p = prev[retracted]
        while p != NONE and status[p] != SUPERSEDED:
            p = prev[p]
        if p != NONE:
            status[p] = ACTIVE
            self._v_to[p] = NONE
        self._head[kid] = p
        return p

    def _contest(self, key: str, value: str | None, ev: int) -> OpResult:
        if value is None:
            msg = f"contest {key}: a value is required"
            raise ValueError(msg)
        kid = self._key_index.get(key, NONE)
        head = self._head[kid] if kid != NONE else NONE
        if head == NONE:
            return self._fail(CONTEST, self._key_id(key), value, ev, "contest: the key has no current head")
        self._seq = seq = self._seq + 1
        if self._v_value[head] == value:
            self._support(CONTEST, kid, head, value, ev, seq)
            return OpResult(True, "noop", "contest repeats the current head's value: counted as support")
        alts = self._open_alts.setdefault(kid, [])
        for a in alts:
            if self._v_value[a] == value:
                self._support(CONTEST, kid, a, value, ev, seq)
                return OpResult(True, "noop", "contest repeats an open alternative: counted as its support")
        vid = self._new_version(kid, value, ALTERNATIVE, seq, ev, NONE, head)
        alts.append(vid)
        self._v_status[head] = CONTESTED
        self._log(seq, CONTEST, CONTEST, kid, value, ev, True, None, vid)
        return _APPLIED["contest"]

    def _resolve(self, key: str, value: str | None, ev: int) -> OpResult:
        if value is None:
            msg = f"resolve {key}: a value is required"
            raise ValueError(msg)
        kid = self._key_index.get(key, NONE)
        head = self._head[kid] if kid != NONE else NONE
        if head == NONE:
            return self._fail(RESOLVE, self._key_id(key), value, ev, "resolve: the key has no current head")
        if self._v_status[head] != CONTESTED:
            return self._fail(RESOLVE, kid, value, ev, "resolve: the cell is not contested")
        alts = self._open_alts.get(kid, [])
        if self._v_value[head] == value:
            winner = head
        else:
            winner = next((a for a in alts if self._v_value[a] == value), NONE)
            if winner == NONE:
                reason = f"resolve: {value!r} is neither the head's value nor an alternative's"
                return self._fail(RESOLVE, kid, value, ev, reason)
        self._seq = seq = self._seq + 1
        v_status, v_to = self._v_status, self._v_to
        for loser in (head, *alts):
            if loser != winner:
                v_status[loser] = CONTRADICTED
                v_to[loser] = seq
        del self._open_alts[kid]
        v_status[winner] = ACTIVE
        if winner != head:
            self._v_prev[winner] = head  # the promoted value supersedes the contradicted incumbent
            self._head[kid] = winner
        self._v_support[winner] += 1
        if ev != NONE:
            self._sb_version.append(winner)
            self._sb_ev.append(ev)
            self._sb_seq.append(seq)
        self._log(seq, RESOLVE, RESOLVE, kid, value, ev, True, None, winner)
        return _APPLIED["resolve"]

    def _noop(self, key: str, value: str | None, ev: int) -> OpResult:
        kid = self._key_id(key)
        self._seq = seq = self._seq + 1
        head = self._head[kid]
        if head == NONE:
            self._log(seq, NOOP, NOOP, kid, value, ev, True, None, NONE)
        else:
            self._support(NOOP, kid, head, value, ev, seq)
        return _APPLIED["noop"]

    # ------------------------------------------------------------------ identity

    @property
    def registry(self) -> KeyRegistry:
        """The soft key-identity registry whose decisions are saved with this graph."""
        if self._registry is None:
            from pmem.graph._identity import KeyRegistry

            self._registry = KeyRegistry()
        return self._registry

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        """Number of keys ever written (empty cells included)."""
        return len(self._key_names)

    @property
    def seq(self) -> int:
        """The last arrival seq handed out (evidence and operations share one counter)."""
        return self._seq

    def keys(self) -> list[str]:
        """Every key ever written, sorted."""
        return sorted(self._key_names)

    def head_value(self, key: str) -> str | None:
        """The current value of ``key`` (None when empty or unknown): the cheapest read."""
        kid = self._key_index.get(key)
        if kid is None:
            return None
        head = self._head[kid]
        return None if head == NONE else self._v_value[head]

    def _version(self, vid: int) -> Version:
        ev = self._v_ev[vid]
        to = self._v_to[vid]
        prev = self._v_prev[vid]
        alt = self._v_alt[vid]
        return Version(
            id=f"v{vid}",
            key=self._key_names[self._v_key[vid]],
            value=self._v_value[vid],
            status=STATUSES[self._v_status[vid]],
            valid_from=self._v_from[vid],
            valid_to=None if to == NONE else to,
            evidence=None if ev == NONE else f"e{ev}",
            support=self._v_support[vid],
            supersedes=None if prev == NONE else f"v{prev}",
            alternative_of=None if alt == NONE else f"v{alt}",
        )

    def versions(self, key: str) -> list[Version]:
        """Every version of ``key`` in arrival order (empty list for an unknown key)."""
        kid = self._key_index.get(key)
        if kid is None:
            return []
        return [self._version(v) for v in self._key_versions[kid]]

    def version(self, version_id: str) -> Version:
        vid = _parse_id(version_id, "v", len(self._v_key))
        return self._version(vid)

    def cell(self, key: str) -> Cell | None:
        """The materialized cell of ``key``; None when the key was never written."""
        kid = self._key_index.get(key)
        if kid is None:
            return None
        return self._cell(kid)

    def _cell(self, kid: int) -> Cell:
        head = self._head[kid]
        alts = self._open_alts.get(kid, ())
        shown = {head, *alts}
        history = [self._version(v) for v in reversed(self._key_versions[kid]) if v not in shown]
        if head == NONE:
            return Cell(self._key_names[kid], None, "empty", [], history, 0)
        status = "contested" if self._v_status[head] == CONTESTED else "active"
        return Cell(
            key=self._key_names[kid],
            value=self._v_value[head],
            status=status,
            alternatives=[self._v_value[a] for a in alts],
            history=history,
            support=self._v_support[head],
        )

    def frontier(self) -> dict[str, Cell]:
        """The active frontier: every non-empty cell, sorted by key."""
        out: dict[str, Cell] = {}
        names, head = self._key_names, self._head
        for kid in sorted(range(len(names)), key=names.__getitem__):
            if head[kid] != NONE:
                out[names[kid]] = self._cell(kid)
        return out

    def frontier_items(self) -> list[tuple[str, str]]:
        """``(key, current value)`` for every non-empty cell, sorted by key: the cheap frontier."""
        names, head, value = self._key_names, self._head, self._v_value
        return sorted((names[k], value[h]) for k, h in enumerate(head) if h != NONE)

    def evidence(self, evidence_id: str) -> Evidence:
        n = self._ev_index.get(evidence_id)
        if n is None:
            msg = f"unknown evidence id {evidence_id!r}"
            raise KeyError(msg)
        return Evidence(evidence_id, self._ev_text[n], self._ev_source[n], self._ev_time[n], self._ev_seq[n])

    def operations(self, key: str | None = None) -> Iterator[Operation]:
        """The operation log in order, optionally for one key (failed preconditions included)."""
        kid = None if key is None else self._key_index.get(key, NONE)
        names = self._key_names
        for i in range(len(self._op_seq)):
            k = self._op_key[i]
            if kid is not None and k != kid:
                continue
            ev, target = self._op_ev[i], self._op_target[i]
            yield Operation(
                seq=self._op_seq[i],
                requested=OPS[self._op_req[i]],
                op=OPS[self._op_eff[i]],
                key=names[k],
                value=self._op_value[i],
                evidence=None if ev == NONE else f"e{ev}",
                applied=self._op_applied[i],
                reason=self._op_reason[i],
                version=None if target == NONE else f"v{target}",
            )

    def edges(self) -> Iterator[tuple[str, str, str]]:
        """Every typed edge as ``(kind, source id, target id)``; tombstones are ``t<n>``."""
        for vid, (prev, alt) in enumerate(zip(self._v_prev, self._v_alt, strict=True)):
            if prev != NONE:
                yield ("supersedes", f"v{vid}", f"v{prev}")
            if alt != NONE:
                yield ("alternative-of", f"v{vid}", f"v{alt}")
        for v, e in zip(self._sb_version, self._sb_ev, strict=True):
            yield ("supported-by", f"v{v}", f"e{e}")
        for t, v in enumerate(self._tb_version):
            yield ("revokes", f"t{t}", f"v{v}")

    def stats(self) -> dict[str, int]:
        """Node and edge counts, plus operations by effective type."""
        by_op = {name: 0 for name in OPS}
        for code in self._op_eff:
            by_op[OPS[code]] += 1
        failed = self._op_applied.count(False)
        return {
            "evidence": len(self._ev_text),
            "keys": len(self._key_names),
            "cells": sum(1 for h in self._head if h != NONE),
            "versions": len(self._v_key),
            "operations": len(self._op_seq),
            "failed_operations": failed,
            "tombstones": len(self._tb_version),
            "supported_by_edges": len(self._sb_version),
            **{f"op_{name}": n for name, n in by_op.items()},
        }

    def render(self, keys: Iterable[str] | None = None, disclose: Iterable[str] = ()) -> str:
        """Deterministic text of the frontier (or of ``keys``, in the order given), one line per cell."""
        from pmem.graph._render import render_cells

        return render_cells(self, keys, disclose)

    # ------------------------------------------------------------------ state

    def save(self, path: str | Path) -> None:
        """Write the whole graph to ``path`` as Arrow IPC, atomically (write aside, then rename)."""
        from pmem.graph._state import save_graph

        save_graph(self, path)

    @classmethod
    def load(cls, path: str | Path, registry: KeyRegistry | None = None) -> ProvenanceGraph:
        """Read a graph written by :meth:`save`; a damaged or truncated file raises ``StateFileError``."""
        from pmem.graph._state import load_graph

        return load_graph(cls, path, registry)

    def to_bytes(self) -> bytes:
        from pmem.graph._state import graph_to_bytes

        return graph_to_bytes(self)


def _parse_id(text: str, prefix: str, bound: int) -> int:
    if isinstance(text, str) and text.startswith(prefix) and text[1:].isdigit():
        n = int(text[1:])
        if n < bound:
            return n
    msg = f"unknown id {text!r}"
    raise KeyError(msg)


def _format_time(time: object) -> str:
    iso = getattr(time, "isoformat", None)
    if iso is None:
        msg = f"observe: time must be a string or a datetime, got {type(time).__name__}"
        raise ValueError(msg)
    return iso()
