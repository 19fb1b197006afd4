"""The operation log: per entry a code (requested | effective << 3 | applied << 6) and a target version.

An operation that created its target version takes its seq, key, evidence and value from that version
(the log reads them through the versions it was made with); every other one keeps them in ``op_extra``.
``undo_of``, ``op_alias``, ``op_deps`` are sparse; so is a retraction's target (``op_retracts``: the
value a reject or revoke retracts), and ``retracts_erased``."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._ops._codes import ACCEPT_APPLIED, ERASED, NONE, NOOP, REJECT, REVOKE, UNDO
from pmem.graph._ops._opindex import OpIndex
from pmem.graph._ops._store._arrays import (
    OperationArrays,
    extend,
    flags,
    ints,
    own,
    restore_columns,
    typed,
    view,
)
from pmem.graph._ops._store._versions import VersionColumns


class OperationLog:
    """The log of every operation, by position, over the versions ``versions`` (which its entries target).

    >>> from pmem.graph._ops._store._versions import VersionColumns
    >>> log = OperationLog(VersionColumns())
    >>> log.append(1, UNDO, NOOP, 0, NONE, False, NONE, None, "nothing to undo")
    >>> log.operation(0)[6], log.applied(0)
    ('nothing to undo', False)
    """

    def __init__(self, versions: VersionColumns) -> None:
        self._versions = versions  # what the entries that created their target read their fields from
        self.op_code: array[int] = array("q")
        self.op_target: array[int] = array("q")
        self.op_extra: dict[int, tuple[int, int, int, str | None, str | None]] = {}
        self.undo_of: dict[int, int] = {}  # an undo operation -> the operation it undoes
        self.op_alias: dict[int, str] = {}  # an operation -> the key as extracted, when merged (sparse)
        self.op_deps: dict[int, tuple[int, ...]] = {}  # an operation -> the premise key ids it named
        # A reject or revoke -> the value it retracts: the one it named, else its key's head's when it
        # arrived (none: the key had no head). A replay in which that value is not the head leaves it a
        # noop, so that undoing or erasing what it retracted equals never having said it (issue 41).
        self.op_retracts: dict[int, str] = {}
        # retractions whose value only erased evidence stated: the value is gone, and they are left out
        # of every replay (no operation left can make it a head again)
        self.retracts_erased: set[int] = set()
        self._index: OpIndex | None = None  # built by the first undo or erase (not saved)

    # ------------------ writing

    def append(
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
        """Append an entry; ``created``: the operation created ``target``, which then holds its seq, key,
        evidence and value."""
        if not created:
            self.op_extra[len(self.op_code)] = (seq, kid, ev, value, reason)
        self.op_code.append(req | eff << 3 | applied << 6)
        self.op_target.append(target)

    def append_accept(self, vid: int) -> None:
        """An applied accept that created ``vid`` (the write's hot path)."""
        self.op_code.append(ACCEPT_APPLIED)
        self.op_target.append(vid)

    def append_undo(
        self, seq: int, kid: int, ev: int, target: int, reason: str | None, applied: bool
    ) -> None:
        """An undo of operation ``target`` (of key ``kid``) at ``seq``: applied, or not with ``reason``.
        Replays ask for the target of a refused one too."""
        self.undo_of[len(self.op_code)] = target
        self.append(seq, UNDO, UNDO if applied else NOOP, kid, ev, applied, NONE, None, reason)

    def record_alias(self, op: int, alias: str) -> None:
        """Operation ``op`` wrote the key extracted as ``alias`` (soft identity merged it)."""
        self.op_alias[op] = alias

    def record_premise_keys(self, op: int, kids: tuple[int, ...]) -> None:
        """Operation ``op`` named the keys ``kids`` as premises."""
        self.op_deps[op] = kids

    def record_retracts(self, value: str) -> None:
        """The operation logged next retracts ``value``."""
        self.op_retracts[len(self.op_code)] = value

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

    def move(self, ops: Iterable[int], kid: int) -> None:
        """Operations ``ops`` belong to key ``kid`` now (an unmerge; those that created their version
        move with it). The index is rebuilt at its next use."""
        for i in ops:
            e = self.op_extra.get(i)
            if e is not None:
                self.op_extra[i] = (e[0], kid, e[2], e[3], e[4])
        self._index = None

    def replace(
        self,
        kid: int,
        ops: list[int],
        left_out: dict[int, str],
        left_out_values: dict[int, str | None],
        replayed: dict[int, int],
        source: OperationLog,
        vmap: dict[int, int],
    ) -> None:
        """Key ``kid``'s entries ``ops`` as a replay gave them in ``source`` (``replayed``: each replayed
        operation's position there; versions mapped through ``vmap``); those ``left_out`` (position ->
        why) become noops keeping ``left_out_values``. Undos stay as they are."""
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

    def extend(
        self, code: np.ndarray, target: np.ndarray, extra: Iterable[tuple[int, tuple[Any, ...]]]
    ) -> None:
        """Log operations (their codes and targets); ``extra``: (log position, (seq, key, evidence,
        value, reason)) of those that created no version, in order."""
        extend(self.op_code, code)
        extend(self.op_target, target)
        self.op_extra.update(extra)

    def record_retracted(self, retracted: Iterable[tuple[int, str]]) -> None:
        """(log position, the value it retracts) of retractions just logged, in order."""
        self.op_retracts.update(retracted)

    def load(self, ops: OperationArrays, version_values: pa.Array[Any]) -> None:
        """Take the log of a saved state (an empty log only; its versions loaded first, ``version_values``
        their values), each entry that reads exactly as its target version (what created it) stored as
        that version."""
        self.op_code, self.op_target = typed(ops.code), typed(ops.target)
        target, seq, kid, ev = ops.target, ops.seq, ops.key, ops.evidence
        own_fields = target >= 0
        if own_fields.any():
            t = np.where(own_fields, target, 0)
            own_fields &= self._versions.matches_created(t, seq, kid, ev)
            values: Any = ops.value  # the stubs' element types do not meet across these calls
            rows: Any = pa.array(t)
            theirs: Any = version_values.take(rows)
            same: Any = pc.fill_null(pc.equal(values, theirs), False)
            own_fields &= same.to_numpy(zero_copy_only=False)
            own_fields &= ops.reason.is_null().to_numpy(zero_copy_only=False)
        apart = np.flatnonzero(~own_fields)
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
        self.undo_of, self.op_alias = own(ops.undoes), own(ops.alias)
        self.op_deps, self.op_retracts = own(ops.premise_keys), own(ops.retracts)
        self.retracts_erased = set(np.flatnonzero(ops.retracts_erased).tolist())

    def restore(self, columns: Mapping[str, Any]) -> None:
        """Set the columns of :data:`COLUMNS` that ``columns`` holds."""
        restore_columns(self, COLUMNS, columns)

    # ------------------ reading one entry

    def count(self) -> int:
        return len(self.op_code)

    def request(self, i: int) -> tuple[int, int, str | None, int, int]:
        """What operation ``i`` requested: (op code, key id, value, evidence index, seq)."""
        e = self.op_extra.get(i)
        if e is None:
            kid, value, ev, seq = self._versions.created(self.op_target[i])
            return self.op_code[i] & 7, kid, value, ev, seq
        return self.op_code[i] & 7, e[1], e[3], e[2], e[0]

    def operation(self, i: int) -> tuple[int, int, int, str | None, int, int, str | None, str | None]:
        """Entry ``i``: (seq, op code, key id, value, evidence, target version, reason, retracts)."""
        code, target = self.op_code[i], self.op_target[i]
        e = self.op_extra.get(i)
        if e is None:  # the operation created its target, which holds its seq, key, evidence and value
            kid, made, ev, seq = self._versions.created(target)
            return seq, code, kid, made, ev, target, None, self.op_retracts.get(i)
        seq, kid, ev, value, reason = e
        return seq, code, kid, value, ev, target, reason, self.op_retracts.get(i)

    def target(self, i: int) -> int:
        """The version operation ``i`` acted on (NONE: none)."""
        return self.op_target[i]

    def created_target(self, i: int) -> int:
        """The version operation ``i`` created (NONE: it created none)."""
        return NONE if i in self.op_extra else self.op_target[i]

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

    # ------------------ reading column-wise (copies)

    def retracted_values(self) -> dict[int, str]:
        """What each retraction retracts, derived from the log (states before schema 6 did not record
        it): a revoke's named value; else, for one applied, the value of the version it acted on (a
        revoke's or a reject's retracted head; for a reject with a replacement, the version that
        replacement supersedes). One that acted on nothing, or on a version erased since, retracts
        nothing recorded: it replays as it always did."""
        versions = self._versions
        out: dict[int, str] = {}
        requested = view(self.op_code) & 7
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
                target = versions.supersedes(target)
            if target != NONE and versions.status(target) != ERASED:
                out[i] = versions.value(target)
        return out

    def columns(self, start: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (key id, evidence, seq) of each entry from ``start`` on, column-wise (NONE: none)."""
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
            own_entries = self.op_extra
            at = np.fromiter((i for i in range(max(n, 0)) if i + start in own_entries), np.int64)
        else:
            at = np.fromiter(self.op_extra, np.int64, len(self.op_extra))
        extra[at] = True
        created = np.flatnonzero(~extra)
        t = target[created]
        if len(t):
            kid[created], ev[created], seq[created] = self._versions.created_columns(t)
        rows = [self.op_extra[i + start] for i in at.tolist()] if start else list(self.op_extra.values())
        for column, field_at in ((seq, 0), (kid, 1), (ev, 2)):
            column[at] = np.fromiter((r[field_at] for r in rows), np.int64, len(rows))
        return kid, ev, seq

    def checked_seqs(self) -> np.ndarray:
        """The arrival seq of every entry (a copy), for a loaded state's check.

        Raises:
            ValueError: an entry of its own names no operation, or an operation names a version the
                versions do not hold (a damaged state).
        """
        n = len(self.op_code)
        for i in self.op_extra:
            if not 0 <= i < n:
                msg = f"an operation entry names operation {i}, of {n}"
                raise ValueError(msg)
        created = np.ones(n, np.bool_)
        created[np.fromiter(self.op_extra, np.int64, len(self.op_extra))] = False
        if n:
            target = np.frombuffer(self.op_target, np.int64)[created]
            if len(target) and (int(target.min()) < 0 or int(target.max()) >= self._versions.count()):
                msg = "an operation names a version the state does not hold"
                raise ValueError(msg)
        return self.columns()[2]

    def of_key(self, kid: int) -> list[int]:
        """The positions of key ``kid``'s operations, in order, found column-wise: an operation's key is
        its target version's, or its own when the log keeps one (a noop, a failed one). A Python loop
        over a million-operation log took 160 ms per key (``Memory.why``)."""
        n = len(self.op_code)
        if not n:
            return []
        targets = np.frombuffer(self.op_target, np.int64)
        keys = np.full(n, NONE, np.int64)
        has = targets != NONE
        keys[has] = self._versions.keys_of(targets[has])
        if self.op_extra:
            at = np.fromiter(self.op_extra, np.int64, len(self.op_extra))
            keys[at] = np.fromiter((e[1] for e in self.op_extra.values()), np.int64, len(self.op_extra))
        return np.flatnonzero(keys == kid).tolist()

    def index(self) -> OpIndex:
        """The log's index by key, evidence and seq, brought up to date (built at the first use)."""
        if self._index is None:
            self._index = OpIndex()
        if self._index.upto < len(self.op_code):
            self._index.extend(*self.columns(self._index.upto))
        return self._index

    def counts(self, n_ops: int) -> dict[str, int]:
        """``operations``, ``failed_operations`` and ``by_op_<code>``: entries by effective type (``n_ops``)."""
        # column-wise: a sharded state's load compares these with its index (10M operations: a Python
        # loop over the codes took seconds)
        codes = view(self.op_code)
        by_op = np.bincount((codes >> 3) & 7, minlength=n_ops)
        return {
            "operations": len(self.op_code),
            "failed_operations": int(np.count_nonzero((codes >> 6) == 0)),
            **{f"by_op_{code}": int(by_op[code]) for code in range(n_ops)},
        }

    def arrays(self, version_values: pa.Array[Any]) -> OperationArrays:
        """The log, column-wise; ``version_values``: the versions' values, which most entries take theirs from."""
        n = len(self.op_code)
        target = ints(self.op_target)
        # An operation that created its target version takes seq, key, evidence and value from it
        # (:meth:`operation`); every other one keeps them in op_extra: (seq, key, evidence, value,
        # reason), read here in one pass.
        extra = self.op_extra
        rows = np.fromiter(extra, np.int64, len(extra))
        at = target.copy()  # the row whose value an entry reads: its version's, or its own (after them)
        at[rows] = len(version_values) + np.arange(len(rows), dtype=np.int64)
        kid, ev, seq = self.columns()
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
            ints(self.op_code),
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
            flags(n, self.retracts_erased),
        )


#: the group's columns
COLUMNS = frozenset(vars(OperationLog(VersionColumns()))) - {"_versions", "_index"}
