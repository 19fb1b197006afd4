"""Column-wise bulk apply: a whole write batch through numpy and pyarrow, byte-identical to the loop.

A write batch is an Arrow table of :data:`WRITE_BATCH_SCHEMA`: one row per observation (``op`` null) or
per operation. :func:`apply_batch` leaves the graph exactly as the row-by-row loop would::

    for row in batch:
        if row.op is None:
            graph.observe(row.text, row.source or "user", row.time)
        else:
            evidence = None if row.evidence is None else f"e{row.evidence}"
            graph.apply(row.op, row.key, row.value, evidence=evidence)

(same ``to_bytes()``, same hidden write state: seq, per-key heads, the ``_last_eid`` fast path, the insertion
order of every sparse dict), but refuses an invalid batch whole, before writing anything.

How. Every row consumes exactly one arrival seq and every operation row exactly one operation-log slot,
so both follow from the row's position. Keys are created first, in first-touch order. A key is *simple*
when all its rows in the batch are accepts and it has no open alternatives: then each accept either
repeats the value before it (support of the current head) or creates a version superseding it, which
numpy computes per key group after one stable sort. Every other key is *mixed*: its operations run
through the graph's own code in batch order (``apply`` for accepts, the op's handler otherwise: the one
definition of their semantics), appending behind the existing state under provisional version ids; the
two tails are then merged by batch position and the provisional ids renumbered wherever they are
referenced, and each sparse dict's new entries are put in the order the loop would have inserted them.

Speed. The graph's integer columns, per-key heads included, are typed (int64 ``array``), so a simple
operation costs numpy work and block copies, plus the Python strings the graph keeps (the evidence text;
the value is shared); a batch's keys are looked up all at once (:mod:`pmem.graph._keyindex`), not with one
dict probe each. What is left is the mixed keys: each of their
operations is one Python call, as in the loop, so the gain falls with the share of mixed keys in a
batch (``python -m benchmarks.bulk`` measures both on one stream).

>>> import pyarrow as pa
>>> from pmem.graph import ProvenanceGraph
>>> g = ProvenanceGraph()
>>> batch = pa.table(
...     {
...         "op": [None, "accept", None, "accept", "reject"],
...         "text": ["budget is 30k", None, "budget is 50k", None, None],
...         "source": [None] * 5,
...         "time": [None] * 5,
...         "key": [None, "budget", None, "budget", "budget"],
...         "value": [None, "30k", None, "50k", None],
...         "evidence": [None, 0, None, 1, None],
...     },
...     schema=WRITE_BATCH_SCHEMA,
... )
>>> result = g.apply_batch(batch)
>>> result.applied.tolist(), g.head_value("budget"), g.seq
([True, True, True], '30k', 5)
"""

from __future__ import annotations

import gc
from array import array
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._codes import ACCEPT, CONTEST, NONE, NOOP, OPS, RESOLVE
from pmem.graph._graph import _ACCEPT_APPLIED, _SUPPORT_RESULT
from pmem.graph._keyindex import key_ids
from pmem.graph._validate import key_problem, preview

if TYPE_CHECKING:
    from collections.abc import Iterable

    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph

_STR: pa.DataType = pa.string()
_LSTR: pa.DataType = pa.large_string()
#: The one definition of a write batch. ``op`` null: an observation (``text``, ``source`` (null or ""
#: means "user"), ``time``); otherwise an operation (``key``, ``value``, ``evidence``: the index n of
#: evidence id ``e<n>``, which may be observed earlier in the same batch). A row's other fields are
#: ignored, as the loop ignores them.
WRITE_BATCH_SCHEMA: pa.Schema = pa.schema(
    [
        ("op", _STR),
        ("text", _LSTR),
        ("source", _STR),
        ("time", _STR),
        ("key", _STR),
        ("value", _LSTR),
        ("evidence", pa.int64()),
    ]
)

_OP_NAMES = pa.array(OPS, type=pa.string())
_SUPPORT_CODE = ACCEPT | NOOP << 3 | 1 << 6  # an accept that repeated the head's value
_SUPPORT_REASON = _SUPPORT_RESULT.reason
# Passed as the evidence id of the mixed path's apply() calls, with _last_ev set to the row's evidence
# index: apply's observe-then-apply fast path then takes the index as it is (no id to format or parse).
_TOKEN = "<apply_batch evidence>"
_I64 = np.int64


@dataclass(frozen=True)
class BatchResult:
    """Outcome of :meth:`ProvenanceGraph.apply_batch`, one entry per operation row, in batch order.

    ``op`` holds effective op codes (index into ``OPS``, as :attr:`OpResult.op` would name them),
    ``applied`` whether each operation applied, and ``first_evidence`` the index n of the first evidence
    id ``e<n>`` the batch observed (the next index when it observed none).
    """

    op: NDArray[np.int8]
    applied: NDArray[np.bool_]
    first_evidence: int


def _refuse(row: int, field: str, detail: str) -> ValueError:
    return ValueError(f"apply_batch: row {row} ({field}): {detail}")


def _table(batch: object) -> pa.Table:
    if isinstance(batch, pa.RecordBatch):
        table = pa.Table.from_batches([batch])
    elif isinstance(batch, pa.Table):
        table = batch
    else:
        msg = f"apply_batch: batch must be a pyarrow Table or RecordBatch, got {type(batch).__name__}"
        raise ValueError(msg)
    got, want = table.schema, WRITE_BATCH_SCHEMA
    for i, field in enumerate(want):
        if i >= len(got) or got.field(i).name != field.name:
            found = got.field(i).name if i < len(got) else "nothing"
            msg = f"apply_batch: field {i} must be {field.name!r}, got {found!r} (see WRITE_BATCH_SCHEMA)"
            raise ValueError(msg)
        if got.field(i).type != field.type:
            msg = f"apply_batch: field {field.name!r} must be {field.type}, got {got.field(i).type}"
            raise ValueError(msg)
    if len(got) > len(want):
        msg = f"apply_batch: unexpected field {got.field(len(want)).name!r} (see WRITE_BATCH_SCHEMA)"
        raise ValueError(msg)
    return table


def _np(array: pa.Array[Any] | pa.ChunkedArray[Any]) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def _col(table: pa.Table, name: str) -> pa.Array[Any]:
    column: pa.Array[Any] = table.column(name).combine_chunks()
    return column


@dataclass
class _Ops:
    """The operation rows of a validated batch, as columns over operation rows."""

    rows: NDArray[np.int64]  # batch row of each operation row
    code: NDArray[np.int64]  # requested op code
    key: NDArray[np.int64]  # index into kdict
    kdict: pa.Array[Any]  # distinct keys in first-touch order
    kid_u: NDArray[np.int64]  # their key ids; -1: not in the graph yet
    new_names: list[str]  # the keys not in the graph yet, in first-touch order
    values: pa.Array[Any]  # large_string over operation rows
    vcode: NDArray[np.int64]  # index into vdict (-1: null)
    vdict: pa.Array[Any]
    ev: NDArray[np.int64]  # evidence index, -1: none


def _validate(graph: ProvenanceGraph, table: pa.Table) -> tuple[NDArray[np.bool_], _Ops]:
    """Check every row as the loop would, without writing; raise for the first refused row."""
    is_op = _np(pc.is_valid(_col(table, "op")))
    is_obs = ~is_op
    obs_rows = np.flatnonzero(is_obs)
    op_rows = np.flatnonzero(is_op)
    errors: list[tuple[int, str, str]] = []

    text_ok = _np(pc.is_valid(_col(table, "text")))
    bad = obs_rows[~text_ok[obs_rows]]
    if len(bad):
        errors.append((int(bad[0]), "text", "observe: text must be a string, got None"))

    idx = pa.array(op_rows, type=pa.int64())
    ops = _col(table, "op").take(idx)
    code = _np(pc.index_in(ops, value_set=_OP_NAMES).fill_null(-1)).astype(_I64)
    keys = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(_col(table, "key").take(idx)))
    kidx = _np(keys.indices.fill_null(-1)).astype(_I64)
    kdict = keys.dictionary
    values = _col(table, "value").take(idx)
    venc = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(values))
    vcode = _np(venc.indices.fill_null(-1)).astype(_I64)
    evc = _col(table, "evidence").take(idx)
    ev = _np(evc.fill_null(-1)).astype(_I64)

    # Fields are checked in apply's order (op, key, value, evidence): a row names its first refusal.
    problem: dict[int, str] = {}
    kid_u = key_ids(graph, kdict)
    new_u = np.flatnonzero(kid_u < 0)
    new_names = cast("list[str]", kdict.take(pa.array(new_u, pa.int64())).to_pylist())
    for u, name in zip(new_u.tolist(), new_names, strict=True):  # a known key was valid when admitted
        why = key_problem(name)
        if why is not None:
            problem[u] = why
    bad_key = kidx < 0
    if problem:
        bad_key |= np.isin(kidx, np.fromiter(problem, _I64, len(problem)))
    needs_value = (code == ACCEPT) | (code == CONTEST) | (code == RESOLVE)
    bad_value = needs_value & (vcode < 0)
    # an operation may name evidence observed before it: in the graph, or earlier in this batch
    seen = len(graph.storage.ev_seq) + np.cumsum(is_obs)[op_rows]
    bad_ev = _np(pc.is_valid(evc)) & ((ev < 0) | (ev >= seen))
    refused = np.zeros(len(op_rows), np.bool_)
    for mask, field in ((code < 0, "op"), (bad_key, "key"), (bad_value, "value"), (bad_ev, "evidence")):
        first = np.flatnonzero(mask & ~refused)  # a row is reported for its first refused field only
        if len(first):
            j = int(first[0])
            errors.append((int(op_rows[j]), field, _detail(field, j, ops, kdict, kidx, problem, ev, seen)))
        refused |= mask
    if errors:
        row, field, detail = min(errors)
        raise _refuse(row, field, detail)
    columns = (code, kidx, kdict, kid_u, new_names, values, vcode, venc.dictionary, ev)
    return is_obs, _Ops(op_rows.astype(_I64), *columns)


def _detail(
    field: str,
    j: int,
    ops: pa.Array[Any],
    kdict: pa.Array[Any],
    kidx: NDArray[np.int64],
    problem: dict[int, str],
    ev: NDArray[np.int64],
    seen: NDArray[np.int64],
) -> str:
    op = ops[j].as_py()
    if field == "op":
        return f"apply: unknown operation {preview(op)}; op must be one of {', '.join(OPS)}"
    u = int(kidx[j])
    if field == "key":
        if u < 0:
            return f"apply {op}: key must be a non-empty string, got None"
        return f"apply {op}: key {problem[u]}; got {preview(kdict[u].as_py())}"
    key = kdict[u].as_py()
    if field == "value":
        return f"{op} {key}: a value is required"
    return (
        f"{op} {key}: unknown evidence index {int(ev[j])} ({int(seen[j])} evidence observed before this row)"
    )


def apply_batch(graph: ProvenanceGraph, batch: pa.Table | pa.RecordBatch) -> BatchResult:
    """Apply a write batch column-wise; the graph ends exactly as after the row-by-row loop.

    Raises ``ValueError`` naming the row and field of the first row the loop would refuse (or the field
    of a schema mismatch), and then writes nothing.
    """
    table = _table(batch)
    first_evidence = len(graph.storage.ev_seq)
    if table.num_rows == 0:
        return BatchResult(np.zeros(0, np.int8), np.zeros(0, np.bool_), first_evidence)
    # The batch allocates container objects (log tuples, value and key lists) by the hundred thousand;
    # the cyclic GC would collect every 700 of them and now and then traverse the whole graph (measured:
    # 1.6x slower, and more as the graph grows). They hold no cycles, so collection is paused throughout.
    enabled = gc.isenabled()
    gc.disable()
    try:
        is_obs, ops = _validate(graph, table)
        # Nothing below can fail.
        if graph.storage.authority is not None or graph.storage.valid_at:
            # an accept may be lowered (authority) or enter the history (valid time): outcomes the
            # column-wise pass does not model, so the rows go through the loop itself
            code = _loop(graph, table, is_obs)
        else:
            code = _Writer(graph, table, is_obs, ops).run()
    finally:
        if enabled:
            gc.enable()
    return BatchResult(((code >> 3) & 7).astype(np.int8), (code >> 6).astype(np.bool_), first_evidence)


def _loop(graph: ProvenanceGraph, table: pa.Table, is_obs: NDArray[np.bool_]) -> NDArray[np.int64]:
    """The validated rows through ``observe`` and ``apply``; the operation rows' result codes."""
    out = []
    columns = [_col(table, name).to_pylist() for name in WRITE_BATCH_SCHEMA.names]
    rows = zip(*columns, strict=True)
    for obs, (op, text, source, time, key, value, ev) in zip(is_obs.tolist(), rows, strict=True):
        if obs:
            graph.observe(text, source or "user", time)
            continue
        result = graph.apply(op, key, value, evidence=None if ev is None else f"e{ev}")
        out.append(OPS.index(result.op) << 3 | int(result.applied) << 6)
    return np.array(out, dtype=_I64)


def _remap(x: NDArray[np.int64], base: int, final: NDArray[np.int64]) -> NDArray[np.int64]:
    """Provisional ids (>= base) -> final ids; other ids (older ones, -1) unchanged."""
    out = x.copy()
    m = x >= base
    out[m] = final[x[m] - base]
    return out


def _extend(column: array[int] | list[Any], values: np.ndarray) -> None:
    """Append ``values`` to a graph column: one block copy for a typed column, else the objects."""
    if isinstance(column, array):
        column.frombytes(np.ascontiguousarray(values, dtype=_I64).tobytes())
    else:
        column.extend(values.tolist())


def _objects(items: Iterable[Any], count: int) -> NDArray[np.object_]:
    """A 1-d object array holding the very objects given (numpy would unpack tuples into a 2-d array)."""
    return np.fromiter(items, dtype=object, count=count)


def _pop_new(mapping: dict[Any, Any], before: int) -> list[tuple[Any, Any]]:
    """Remove the entries added since ``mapping`` had ``before`` entries (it never deletes); in order."""
    out = [mapping.popitem() for _ in range(len(mapping) - before)]
    out.reverse()
    return out


def _insert_sorted(
    mapping: dict[Any, Any], keys: NDArray[Any], values: NDArray[Any], order_by: np.ndarray
) -> None:
    """Insert ``keys`` -> ``values`` in increasing ``order_by`` (the order the loop inserted them)."""
    order = np.argsort(order_by, kind="stable")
    mapping.update(zip(keys[order].tolist(), values[order].tolist(), strict=True))


class _Writer:
    """One validated batch being written (the state before it is read from ``graph`` on creation).

    Integer columns are typed and extended by block copies; a value is the batch's one string object
    for it (as the loop keeps the caller's objects).
    """

    def __init__(self, graph: ProvenanceGraph, table: pa.Table, is_obs: NDArray[np.bool_], ops: _Ops) -> None:
        self.g = graph
        self.table = table
        self.is_obs = is_obs
        self.ops = ops
        self.rows = len(is_obs)
        self.seq0 = graph.storage.seq
        self.v0 = len(graph.storage.v_key)
        self.o0 = len(graph.storage.op_code)
        self.sb0 = len(graph.storage.sb_version)
        self.tb0 = len(graph.storage.tb_version)
        self.es0 = len(graph.storage.v_extra_support)
        self.older0 = len(graph.storage.v_older)
        self.alt0 = len(graph.storage.v_alt)
        self.extra0 = len(graph.storage.op_extra)
        values = ops.vdict.to_pylist()
        self.vpool = _objects([*values, None], len(values) + 1)  # value code -> string (-1: None)

    def run(self) -> NDArray[np.int64]:
        g, ops = self.g, self.ops
        last = (g._last_eid, g._last_ev)
        # keys in first-touch order: every operation on an unknown key creates it, whatever the op
        kid_u = ops.kid_u
        new = np.flatnonzero(kid_u < 0)
        if len(new):
            k0 = len(g.storage.key_names)
            names = ops.new_names
            g.storage.kid.update(zip(names, range(k0, k0 + len(names)), strict=True))
            g.storage.key_names.extend(names)
            empty = np.full(len(names), NONE, _I64).tobytes()
            g.storage.k_head.frombytes(empty)
            g.storage.k_newest.frombytes(empty)
            kid_u[new] = np.arange(k0, k0 + len(names), dtype=_I64)
        u = len(kid_u)
        head_u = np.frombuffer(g.storage.k_head, _I64)[kid_u]  # fancy indexing copies: no view outlives this
        newest_u = np.frombuffer(g.storage.k_newest, _I64)[kid_u]
        known = np.flatnonzero(head_u >= 0)
        head_value = np.full(u, None, dtype=object)
        head_value[known] = _objects(map(g.storage.v_value.__getitem__, head_u[known].tolist()), len(known))
        headcode_u = _np(
            pc.index_in(pa.array(head_value, type=pa.large_string()), value_set=ops.vdict).fill_null(-1)
        ).astype(_I64)
        # A key with any other op in this batch, or with open alternatives, takes the mixed path.
        mixed_u = np.zeros(u, np.bool_)
        mixed_u[ops.key[ops.code != ACCEPT]] = True
        if g.storage.open_alts:
            mixed_u |= np.isin(kid_u, np.fromiter(g.storage.open_alts, _I64, len(g.storage.open_alts)))
        row_mixed = mixed_u[ops.key]
        self._observe()
        mj = np.flatnonzero(row_mixed)
        self._run_mixed(mj)
        g._last_eid, g._last_ev = last
        code = self._merge(mj, np.flatnonzero(~row_mixed), kid_u, head_u, newest_u, headcode_u)
        g.storage.seq = self.seq0 + self.rows
        if self.is_obs.any():
            n = len(g.storage.ev_seq) - 1
            g._last_eid, g._last_ev = f"e{n}", n
        return code

    def _observe(self) -> None:
        g, table = self.g, self.table
        rows = np.flatnonzero(self.is_obs)
        if not len(rows):
            return
        idx = pa.array(rows, type=pa.int64())
        n0 = len(g.storage.ev_seq)
        source: Any = _col(table, "source").take(idx)
        # the loop passes `source or "user"`: null and "" both mean "user"
        empty: Any = pc.fill_null(pc.equal(source, pa.scalar("")), True)
        named: Any = pc.if_else(empty, pa.scalar("user"), source)
        enc = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(named))
        codes = np.empty(len(enc.dictionary), _I64)
        for i, name in enumerate(cast("list[str]", enc.dictionary.to_pylist())):  # in first-appearance order
            c = g.storage.source_code.get(name)
            if c is None:
                c = g.storage.source_code[name] = len(g.storage.sources)
                g.storage.sources.append(name)
            codes[i] = c
        g.storage.ev_text.extend_arrow(_col(table, "text").take(idx))  # kept as Arrow (pmem.graph._texts)
        _extend(g.storage.ev_source, codes[_np(enc.indices).astype(_I64)])
        _extend(g.storage.ev_seq, rows + (self.seq0 + 1))
        time = _col(table, "time").take(idx)
        if time.null_count < len(time):
            has = np.flatnonzero(_np(pc.is_valid(time)))
            g.storage.ev_time.update(
                zip(
                    (has + n0).tolist(),
                    cast("list[str]", time.take(pa.array(has, type=pa.int64())).to_pylist()),
                    strict=True,
                )
            )

    def _run_mixed(self, mj: NDArray[np.int64]) -> None:
        """Operations of mixed keys through the graph's own code, in batch order, each at its row's seq.

        Accept runs through apply() (it is inlined there); every other op through its handler, which is
        what apply() would call once the (already checked) arguments pass.
        """
        if not len(mj):
            return
        g, ops = self.g, self.ops
        op_names = [OPS[c] for c in ops.code[mj].tolist()]
        distinct, where = np.unique(ops.key[mj], return_inverse=True)
        key_names = ops.kdict.take(pa.array(distinct, pa.int64())).to_pylist()
        keys = _objects(key_names, len(key_names))[where].tolist()
        values = self.vpool[ops.vcode[mj]].tolist()
        seqs = (ops.rows[mj] + self.seq0).tolist()
        apply, handlers = g.apply, g._handlers
        g._last_eid = _TOKEN
        for op, key, value, ev, seq in zip(op_names, keys, values, ops.ev[mj].tolist(), seqs, strict=True):
            g.storage.seq = seq
            if op == "accept":
                g._last_ev = ev  # -1 (no evidence) is NONE: the same as evidence=None
                apply(op, key, value, _TOKEN)
            else:
                handlers[op](key, value, ev)

    def _merge(
        self,
        mj: NDArray[np.int64],
        sj: NDArray[np.int64],
        kid_u: NDArray[np.int64],
        head_u: NDArray[np.int64],
        newest_u: NDArray[np.int64],
        headcode_u: NDArray[np.int64],
    ) -> NDArray[np.int64]:
        g, ops = self.g, self.ops
        seq0, v0, o0 = self.seq0, self.v0, self.o0
        vpool = self.vpool
        # ---- simple keys: one stable sort by key, then each accept against the value before it
        order = np.argsort(ops.key[sj], kind="stable")
        j_s = sj[order]
        u_s = ops.key[j_s]
        ns = len(j_s)
        vc = ops.vcode[j_s]
        start = np.ones(ns, np.bool_)
        start[1:] = u_s[1:] != u_s[:-1]
        before = np.empty(ns, _I64)
        before[1:] = vc[:-1]
        before[start] = headcode_u[u_s[start]]
        creates = vc != before  # a head value outside this batch's values has code -1: never equal
        ar = np.arange(ns, dtype=_I64)
        # head after each row: the latest creating row of its key group (sorted index), -1 = old head
        latest = np.maximum.accumulate(np.where(creates | start, ar, 0)) if ns else ar
        head_src = np.where(creates[latest], latest, -1)
        prev_src = np.full(ns, -1, _I64)  # head before each row
        prev_src[1:] = head_src[:-1]
        prev_src[start] = -1
        pos_s = ops.rows[j_s]

        # ---- version ids: versions are numbered in batch order over both paths
        mixed_vpos = np.asarray(g.storage.v_from[v0:], dtype=_I64) - (seq0 + 1)
        vm = len(mixed_vpos)
        creators = np.unique(np.asarray(g.storage.v_key[v0:], dtype=_I64))  # keys holding provisional ids
        created = np.zeros(self.rows, np.bool_)
        created[pos_s[creates]] = True
        created[mixed_vpos] = True
        slot = np.cumsum(created, dtype=_I64) - 1  # row -> index among the batch's new versions
        n_new = int(np.count_nonzero(creates)) + vm
        m_final = slot[mixed_vpos] + v0  # provisional mixed id v0 + t -> final id
        slot_s = np.where(creates, slot[pos_s], -1)

        def ref(src: NDArray[np.int64]) -> NDArray[np.int64]:
            """Versions named by sorted simple rows (their creating row, -1: the key's old head)."""
            ids = head_u[u_s]
            new = src >= 0
            ids[new] = slot_s[src[new]] + v0
            return ids

        target_i = ref(head_src)
        prev_i = ref(prev_src)

        # ---- versions
        c = np.flatnonzero(creates)
        c = c[np.argsort(pos_s[c], kind="stable")]  # creating rows in batch order
        cols: dict[str, np.ndarray] = {
            "v_key": kid_u[u_s[c]],
            "v_value": vpool[vc[c]],
            "v_status": np.zeros(len(c), _I64),  # ACTIVE
            "v_from": pos_s[c] + (seq0 + 1),
            "v_to": np.full(len(c), -1, _I64),
            "v_ev": ops.ev[j_s[c]],
            "v_prev": prev_i[c],
        }
        for attr, col in cols.items():
            lst = getattr(g.storage, attr)
            if vm:
                tail: Any = lst[v0:]
                if attr == "v_prev":
                    tail = _remap(np.array(tail, dtype=_I64), v0, m_final)
                out = np.empty(n_new, dtype=col.dtype)
                out[slot_s[c]] = col
                out[m_final - v0] = tail
                col = out
                del lst[v0:]
            _extend(lst, col)

        # ---- operation log
        code = np.empty(len(ops.rows), _I64)
        target = np.empty(len(ops.rows), _I64)
        code[j_s] = np.where(creates, _ACCEPT_APPLIED, _SUPPORT_CODE)
        target[j_s] = target_i
        if len(mj):
            code[mj] = g.storage.op_code[o0:]
            target[mj] = _remap(np.array(g.storage.op_target[o0:], dtype=_I64), v0, m_final)
            del g.storage.op_code[o0:], g.storage.op_target[o0:]
        _extend(g.storage.op_code, code)
        _extend(g.storage.op_target, target)

        # ---- accepts that repeated the head's value: support, in batch order
        sup = np.flatnonzero(~creates)
        sup = sup[np.argsort(j_s[sup], kind="stable")]
        sup_j = j_s[sup]
        sup_pos = pos_s[sup]
        sup_ev = ops.ev[sup_j]
        sup_seq = sup_pos + (seq0 + 1)
        extra_keys = sup_j + o0
        extra_values = _objects(
            zip(
                sup_seq.tolist(),
                kid_u[u_s[sup]].tolist(),
                sup_ev.tolist(),
                vpool[vc[sup]].tolist(),
                repeat(_SUPPORT_REASON, len(sup)),
                strict=False,  # repeat() is endless
            ),
            len(sup),
        )
        mixed_extra = _pop_new(g.storage.op_extra, self.extra0)
        if mixed_extra:  # re-keyed from provisional log slots, merged in log order
            mk = np.fromiter((k for k, _ in mixed_extra), _I64, len(mixed_extra))
            extra_keys = np.concatenate([extra_keys, mj[mk - o0] + o0])
            extra_values = np.concatenate(
                [extra_values, _objects((v for _, v in mixed_extra), len(mixed_extra))]
            )
            _insert_sorted(g.storage.op_extra, extra_keys, extra_values, extra_keys)
        else:
            g.storage.op_extra.update(zip(extra_keys.tolist(), extra_values.tolist(), strict=True))

        # ---- supported-by edges (one per support with evidence), merged by seq
        with_ev = sup_ev >= 0
        sb_v, sb_e, sb_s = target_i[sup][with_ev], sup_ev[with_ev], sup_seq[with_ev]
        sb0 = self.sb0
        if len(g.storage.sb_version) > sb0:
            tail_s = np.array(g.storage.sb_seq[sb0:], dtype=_I64)
            o = np.argsort(np.concatenate([sb_s, tail_s]), kind="stable")
            tail_v = _remap(np.array(g.storage.sb_version[sb0:], dtype=_I64), v0, m_final)
            sb_v = np.concatenate([sb_v, tail_v])[o]
            sb_e = np.concatenate([sb_e, np.array(g.storage.sb_ev[sb0:], dtype=_I64)])[o]
            sb_s = np.concatenate([sb_s, tail_s])[o]
            del g.storage.sb_version[sb0:], g.storage.sb_ev[sb0:], g.storage.sb_seq[sb0:]
        _extend(g.storage.sb_version, sb_v)
        _extend(g.storage.sb_ev, sb_e)
        _extend(g.storage.sb_seq, sb_s)

        if vm:
            self._renumber_mixed(m_final, creators)
        self._extra_support(target_i[sup], sup_pos, mj, m_final, code, target)

        # ---- previous-version links where the arrival chain leaves the supersedes chain: only at the
        # first version a simple key creates, when its newest version is not its head (after a rollback)
        c_older = (prev_src[c] < 0) & (newest_u[u_s[c]] != head_u[u_s[c]])
        older_keys = slot_s[c][c_older] + v0
        older_values = newest_u[u_s[c]][c_older]
        mixed_older = _pop_new(g.storage.v_older, self.older0)
        if mixed_older:
            mo = np.array(mixed_older, dtype=_I64).reshape(-1, 2)
            older_keys = np.concatenate([older_keys, _remap(mo[:, 0], v0, m_final)])
            older_values = np.concatenate([older_values, _remap(mo[:, 1], v0, m_final)])
            _insert_sorted(g.storage.v_older, older_keys, older_values, older_keys)
        else:
            g.storage.v_older.update(zip(older_keys.tolist(), older_values.tolist(), strict=True))

        # ---- head and newest of simple keys: the last version each created
        if ns:
            end = np.empty(ns, np.bool_)
            end[:-1] = start[1:]
            end[-1] = True
            last = head_src[end]
            changed = last >= 0
            kids = kid_u[u_s[end][changed]]
            final = slot_s[last[changed]] + v0
            np.frombuffer(g.storage.k_head, _I64)[kids] = final
            np.frombuffer(g.storage.k_newest, _I64)[kids] = final
        return code

    def _renumber_mixed(self, m_final: NDArray[np.int64], creators: NDArray[np.int64]) -> None:
        """Provisional version ids of the mixed path -> final ids, wherever they are referred to.

        Only the keys that created versions on the mixed path (``creators``) can refer to them.
        """
        g, v0 = self.g, self.v0
        lookup = m_final.tolist()

        def fix(v: int) -> int:
            return lookup[v - v0] if v >= v0 else v

        tb = g.storage.tb_version
        for i in range(self.tb0, len(tb)):
            tb[i] = fix(tb[i])
        alts = _pop_new(g.storage.v_alt, self.alt0)
        g.storage.v_alt.update((fix(k), fix(v)) for k, v in alts)  # created in batch order: order kept
        open_alts = g.storage.open_alts
        heads, newest = g.storage.k_head, g.storage.k_newest
        for kid in creators.tolist():
            heads[kid], newest[kid] = fix(heads[kid]), fix(newest[kid])
            if kid in open_alts:  # reassigning an existing key keeps its place
                open_alts[kid] = [fix(a) for a in open_alts[kid]]

    def _extra_support(
        self,
        sup_target: NDArray[np.int64],
        sup_pos: NDArray[np.int64],
        mj: NDArray[np.int64],
        m_final: NDArray[np.int64],
        code: NDArray[np.int64],
        target: NDArray[np.int64],
    ) -> None:
        """Support counts; an entry the batch adds goes where the loop inserted it: at its first support."""
        v0 = self.v0
        counts = self.g.storage.v_extra_support
        keys, added, first = [np.zeros(0, _I64)], [np.zeros(0, _I64)], [np.zeros(0, _I64)]
        mixed_new = _pop_new(counts, self.es0)
        if mixed_new:
            # The mixed path's supports (accept or contest repeating a value, noop, resolve) are read back
            # from its log: the first one naming a version is where the loop inserted its entry.
            mcode, mtarget = code[mj], target[mj].astype(_I64)
            eff = (mcode >> 3) & 7
            is_sup = ((mcode >> 6) == 1) & (((eff == NOOP) & (mtarget >= 0)) | (eff == RESOLVE))
            t_uniq, t_first = np.unique(mtarget[is_sup], return_index=True)
            mn = np.array(mixed_new, dtype=_I64).reshape(-1, 2)
            mk = _remap(mn[:, 0], v0, m_final)
            keys.append(mk)
            added.append(mn[:, 1])
            first.append(self.ops.rows[mj][is_sup][t_first][np.searchsorted(t_uniq, mk)])
        if len(sup_target):
            t_uniq, t_first, t_count = np.unique(sup_target, return_index=True, return_counts=True)
            new = t_uniq >= v0  # a version this batch created has no entry yet
            for i in np.flatnonzero(~new).tolist():
                t = int(t_uniq[i])
                have = counts.get(t)
                if have is None:
                    new[i] = True
                else:
                    counts[t] = have + int(t_count[i])
            keys.append(t_uniq[new])
            added.append(t_count[new])
            first.append(sup_pos[t_first[new]])
        _insert_sorted(counts, np.concatenate(keys), np.concatenate(added), np.concatenate(first))
