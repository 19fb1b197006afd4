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
order of every sparse dict), but refuses an invalid batch whole (as the loop refuses its first invalid
row, a citation of erased evidence included), before writing anything.

How. Every row consumes exactly one arrival seq and every operation row exactly one operation-log slot,
so both follow from the row's position; keys are created first, in first-touch order. The semantics of
the six operations are then applied column-wise, once for all keys, in :class:`_Writer`; the graph's own
``apply`` and handlers stay the definition they must match (``tests/graph/test_graph_bulk.py`` compares
the two, state bytes and hidden state, over every operation type).

- The operations are sorted by key (stably: batch order within a key) and each key's run is cut into
  *units*: a maximal run of accepts and noops (a *block*), or one contest, reject, revoke or resolve.
  In a block only the head's value decides each row (an accept creates a version unless it repeats
  that value, a noop supports the head, names another value or finds the cell empty), and that value
  is the one of the accept before it in the block, else the head's at the block's start: a block of
  any length is one pass of numpy segment operations.
- The other operations change what later ones see (reject and revoke roll back along supersedes edges
  to the nearest live predecessor, contest opens alternatives, resolve promotes one), so a key's units
  are applied in order; but only per key: step s applies the s-th unit of *every* key at once, as
  numpy over all of them, so a batch takes as many steps as its longest run has units (a handful on a
  stream over many keys; a key with many contests, rejects, revokes or resolves in one batch takes
  about two steps for each, which then cost a few numpy calls per operation).
- A reject or revoke records the value it retracts (``GraphStore.op_retracts``): the one it names,
  else its head's, by value code (or by version, for a head whose value is none of the batch's).
  Replay passes the recorded values beside the batch (``retracts``), and one that is not the head's
  fails as the loop's ``apply(..., retracts=...)`` does.
- The scan's state per key is its head, the head value's code, its newest version and its open
  alternatives. An alternative is found by (key, value) in a table of pairs, and is open while the
  key's *epoch* (its count of closings) is the one it was opened in, so closing them is one increment;
  each closed alternative's valid_to and status are written after the scan, from the closing that
  ended its epoch.
- A version the batch creates is named ``v0 + j`` (``j``: its operation) while the batch runs, in
  placeholder rows of the status, supersedes and valid_to columns, so that rollback walks old and new
  versions alike through one numpy view. Afterwards the created ones are packed in batch order (the
  loop's numbering) and every reference renumbered once. The sparse dicts receive their new entries in
  the loop's insertion order: by operation, except support counts (at a version's first support) and
  open alternatives (a key re-enters at the first alternative it opens after its last closing).

A graph with source authority goes through the loop itself (``_loop``): there an accept may be lowered
to a contest, an outcome the scan does not model. With valid times, an accept may enter its key's history
instead (its evidence valid before a version the key may hold: ``_late_accepts``): a batch whose dated
facts come in order goes column-wise; one with a few such accepts goes column-wise around them, each alone
through the loop (``_split_around``); one with many, through the loop whole.

Speed. The graph's integer columns, per-key heads included, are typed (int64 ``array``), so the scan's
results go into them as block copies; the batch's keys are looked up at once in a hash table
(:mod:`pmem.graph._read._keyindex`), and its values are interned, so that a head an earlier batch made has its
value code found by the recorded address of its value object, without reading the value list. What is
left per row is the Python objects the graph keeps: the evidence text, a tuple in the operation log for
each operation that created no version, a support count per supported version, and the garbage
collector's pass over the new tuples once the batch is done. ``python -m benchmarks.bulk`` measures
the whole against the loop on one stream (``docs/performance.md``).

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
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._ops._bulk_writer import _col, _np, _Writer
from pmem.graph._ops._codes import (
    ACCEPT,
    CONTEST,
    NONE,
    OPS,
    RESOLVE,
)
from pmem.graph._ops._validate import key_problems, preview
from pmem.graph._read._keyindex import key_ids, name_hashes

if TYPE_CHECKING:
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
_I64 = np.int64
_STEP_COST = 60  # operations whose column-wise saving over the loop pays for one step of the scan (measured)
_FEW_STEPS = 64  # a scan of at most this many steps is cheap whatever the batch (a few milliseconds)
_OP_CODE = {name: code for code, name in enumerate(OPS)}


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


@dataclass
class _Ops:
    """The operation rows of a validated batch, as columns over operation rows."""

    rows: NDArray[np.int64]  # batch row of each operation row
    code: NDArray[np.int64]  # requested op code
    kid: NDArray[np.int64]  # key id; a key new to the graph: -2 - its index in new_names
    new_names: list[str]  # the keys new to the graph, in first-touch order
    new_keys: pa.Array[Any]  # the same, as Arrow
    new_hashes: NDArray[np.uint64]  # and their key-index hashes
    vcode: NDArray[np.int64]  # index into values (-1: null)
    values: list[str]  # the distinct values, in first-appearance order (retracted ones after them)
    ev: NDArray[np.int64]  # evidence index, -1: none
    tcode: NDArray[np.int64]  # the value a retraction is given to retract, index into values (-1: none)


def _validate(
    graph: ProvenanceGraph, table: pa.Table, retracts: pa.Array[Any] | None = None
) -> tuple[NDArray[np.bool_], _Ops]:
    """Check every row as the loop would, without writing; raise for the first refused row.

    ``retracts``: per row, the value a reject or revoke row is given to retract (replay's, checked by
    the graph that recorded it).
    """
    op_col = _col(table, "op")
    is_op = _np(pc.is_valid(op_col))
    is_obs = ~is_op
    obs_rows = np.flatnonzero(is_obs)
    op_rows = np.flatnonzero(is_op)
    errors: list[tuple[int, str, str]] = []

    text = _col(table, "text")
    if text.null_count:
        bad = obs_rows[~_np(pc.is_valid(text))[obs_rows]]
        if len(bad):
            errors.append((int(bad[0]), "text", "observe: text must be a string, got None"))

    idx = pa.array(op_rows, type=pa.int64())
    code = _np(pc.index_in(op_col.take(idx), value_set=_OP_NAMES).fill_null(-1)).astype(_I64)
    keys = _col(table, "key").take(idx)
    kid, new_keys, new_hashes, problem = _key_ids(graph, keys)
    op_values = _col(table, "value").take(idx)
    n_ops = len(op_rows)
    if retracts is not None:  # one code space for values and retracted values: compared by code
        op_values = pa.concat_arrays([op_values, retracts.take(idx).cast(_LSTR)])
    venc = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(op_values))
    codes = _np(venc.indices.fill_null(-1)).astype(_I64)
    vcode, tcode = codes[:n_ops], codes[n_ops:] if retracts is not None else np.full(n_ops, -1, _I64)
    evc = _col(table, "evidence").take(idx)
    ev = _np(evc.fill_null(-1)).astype(_I64)

    # Fields are checked in apply's order (op, key, value, evidence): a row names its first refusal.
    bad_key = kid == -1
    if problem:
        bad_key |= np.isin(-2 - kid, np.fromiter(problem, _I64, len(problem)))
    needs_value = (code == ACCEPT) | (code == CONTEST) | (code == RESOLVE)
    bad_value = needs_value & (vcode < 0)
    # an operation may name evidence observed before it: in the graph, or earlier in this batch
    store = graph.storage
    seen = store.evidence.count() + np.cumsum(is_obs)[op_rows]
    bad_ev = _np(pc.is_valid(evc)) & ((ev < 0) | (ev >= seen))
    if store.evidence.has_erasures():  # erased evidence cannot be cited any more
        bad_ev |= np.isin(ev, store.evidence.erased_ids())
    refused = np.zeros(len(op_rows), np.bool_)
    for mask, field in ((code < 0, "op"), (bad_key, "key"), (bad_value, "value"), (bad_ev, "evidence")):
        first = np.flatnonzero(mask & ~refused)  # a row is reported for its first refused field only
        if len(first):
            j = int(first[0])
            op = op_col[int(op_rows[j])].as_py()
            why = problem.get(-2 - int(kid[j]), "")
            erased = store.evidence.is_erased(int(ev[j]))
            detail = _detail(field, op, keys[j].as_py(), why, ev[j], seen[j], erased)
            errors.append((int(op_rows[j]), field, detail))
        refused |= mask
    if errors:
        row, field, detail = min(errors)
        raise _refuse(row, field, detail)
    new_names = cast("list[str]", new_keys.to_pylist())
    values = [sys.intern(v) for v in cast("list[str]", venc.dictionary.to_pylist())]
    columns = (code, kid, new_names, new_keys, new_hashes, vcode, values, ev, tcode)
    return is_obs, _Ops(op_rows.astype(_I64), *columns)


def _key_ids(
    graph: ProvenanceGraph, keys: pa.Array[Any]
) -> tuple[NDArray[np.int64], pa.Array[Any], NDArray[np.uint64], dict[int, str]]:
    """The key id of each operation row: -1 for a null key, -2 - i for the i-th key new to the graph
    (first-touch order); those new keys, their key-index hashes, and why new keys are refused (by i)."""
    valid = None if not keys.null_count else np.flatnonzero(_np(pc.is_valid(keys)))
    names = keys if valid is None else keys.take(pa.array(valid, type=pa.int64()))
    hashes = name_hashes(names)
    found = key_ids(graph, names, hashes)
    new = np.flatnonzero(found < 0)
    enc = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(names.take(pa.array(new, pa.int64()))))
    found[new] = -2 - _np(enc.indices).astype(_I64)
    new_keys = enc.dictionary
    _, first = np.unique(found[new], return_index=True)  # sorted codes: the last new key's first
    new_hashes = hashes[new[first[::-1]]]
    kid = found if valid is None else np.full(len(keys), -1, _I64)
    if valid is not None:
        kid[valid] = found
    return kid, new_keys, new_hashes, key_problems(new_keys)


def _detail(field: str, op: str, key: str | None, problem: str, ev: int, seen: int, erased: bool) -> str:
    if field == "op":
        return f"apply: unknown operation {preview(op)}; op must be one of {', '.join(OPS)}"
    if field == "key":
        if key is None:
            return f"apply {op}: key must be a non-empty string, got None"
        return f"apply {op}: key {problem}; got {preview(key)}"
    if field == "value":
        return f"{op} {key}: a value is required"
    if erased:
        return f"{op} {key}: evidence e{int(ev)} was erased (it cannot be cited any more)"
    return f"{op} {key}: unknown evidence index {int(ev)} ({int(seen)} evidence observed before this row)"


def apply_batch(
    graph: ProvenanceGraph, batch: pa.Table | pa.RecordBatch, retracts: pa.Array[Any] | None = None
) -> BatchResult:
    """Apply a write batch column-wise; the graph ends exactly as after the row-by-row loop.

    Raises ``ValueError`` naming the row and field of the first row the loop would refuse (or the field
    of a schema mismatch), and then writes nothing. ``retracts`` (replay's, not the public schema's):
    per row, the value a reject or revoke retracts, as ``apply(..., retracts=...)`` takes it.
    """
    table = _table(batch)
    first_evidence = graph.storage.evidence.count()
    if table.num_rows == 0:
        return BatchResult(np.zeros(0, np.int8), np.zeros(0, np.bool_), first_evidence)
    # The batch allocates container objects (log tuples, value and key lists) by the hundred thousand;
    # the cyclic GC would collect every 700 of them and now and then traverse the whole graph (measured:
    # 1.6x slower, and more as the graph grows). They hold no cycles, so collection is paused throughout.
    enabled = gc.isenabled()
    gc.disable()
    try:
        is_obs, ops = _validate(graph, table, retracts)
        # Nothing below can fail.
        store = graph.storage
        at_most = _split_at_most(table.num_rows)
        late = _late_accepts(graph, ops, at_most) if _dated(store) else []
        if 0 < len(late) <= at_most:
            # a few accepts may enter their key's history (valid time): each goes alone through the
            # loop, and the rows between them column-wise. An accept not listed cannot enter history
            # however the listed ones end (they were counted as heads its key may hold).
            return _split_around(graph, table, is_obs, retracts, late, first_evidence)
        if store.authority.configured() or late:
            # an accept may be lowered (authority) or enter the history (valid time): outcomes the
            # column-wise pass does not model, so the rows go through the loop itself
            code = _loop(graph, table, is_obs, retracts)
        else:
            code = _column_wise(graph, table, is_obs, ops, retracts)
    finally:
        if enabled:
            gc.enable()
    return BatchResult(((code >> 3) & 7).astype(np.int8), (code >> 6).astype(np.bool_), first_evidence)


def _column_wise(
    graph: ProvenanceGraph,
    table: pa.Table,
    is_obs: NDArray[np.bool_],
    ops: _Ops,
    retracts: pa.Array[Any] | None,
) -> NDArray[np.int64]:
    """The validated rows written column-wise; the operation rows' result codes."""
    writer = _Writer(graph, table, is_obs, ops)
    # a batch whose scan takes more steps than it saves (a few keys with long runs) costs less through
    # the loop: each step costs a few dozen numpy calls however few keys it takes
    slow = writer.steps > _FEW_STEPS and writer.steps * _STEP_COST > writer.n
    return _loop(graph, table, is_obs, retracts) if slow else writer.run()


def _dated(store: Any) -> bool:
    """Valid time may change an outcome: the graph has valid times, and no source authority (with it,
    every batch takes the loop)."""
    return bool(store.evidence.has_valid_times()) and not store.authority.configured()


def _split_at_most(rows: int) -> int:
    """How many late accepts a batch of ``rows`` rows is split around: a split costs a column-wise pass's
    fixed cost (its own validation, a few dozen numpy calls), which pays while late rows are rarer than
    about one in a thousand; with more, the whole batch takes the loop."""
    return max(8, rows // 1024)


def _split_around(
    graph: ProvenanceGraph,
    table: pa.Table,
    is_obs: NDArray[np.bool_],
    retracts: pa.Array[Any] | None,
    late: list[int],
    first_evidence: int,
) -> BatchResult:
    """``table`` (validated whole) with each ``late`` row alone through the loop and the rows between
    them column-wise, in order; the outcomes of its operation rows, in batch order."""
    codes: list[NDArray[np.int64]] = []
    start = 0
    for row in [*late, table.num_rows]:
        if row > start:
            part = table.slice(start, row - start)
            part_retracts = None if retracts is None else retracts.slice(start, row - start)
            part_obs, part_ops = _validate(graph, part, part_retracts)  # refuses nothing: checked whole
            codes.append(_column_wise(graph, part, part_obs, part_ops, part_retracts))
        if row < table.num_rows:
            one = None if retracts is None else retracts.slice(row, 1)
            codes.append(_loop(graph, table.slice(row, 1), is_obs[row : row + 1], one))
        start = row + 1
    code = np.concatenate(codes)
    return BatchResult(((code >> 3) & 7).astype(np.int8), (code >> 6).astype(np.bool_), first_evidence)


def _late_accepts(graph: ProvenanceGraph, ops: _Ops, at_most: int) -> list[int]:
    """The batch rows of the accepts that may enter their key's history instead of superseding its head,
    in order; at most ``at_most + 1`` of them (one more only says: too many to split around). Entering
    history is the one outcome valid time changes (``ProvenanceGraph.apply``: the accept cites evidence
    valid before the evidence that made the head), which the column-wise pass does not model.

    Judged without the heads the batch makes: an accept citing dated evidence may enter history when
    its evidence is valid before that of any version its key could hold as head when it arrives: a
    version of the key's history or an open alternative before the batch, or one an earlier operation of
    the batch made (each operation citing dated evidence on the key is counted as making one). A batch
    of facts whose valid times come in order is judged safe and goes column-wise, however many of its
    rows are dated; a graph with a single dated fact no longer sends every later batch to the loop.
    """
    store = graph.storage
    dated = np.fromiter(
        (store.evidence.valid_instant(e) is not None for e in ops.ev.tolist()), np.bool_, len(ops.ev)
    )
    if not dated.any():
        return []  # no accept cites dated evidence: none can enter history
    keys = set(ops.kid[dated].tolist())  # only these keys' accepts can
    latest: dict[int, datetime] = {}  # per key: the latest valid time of a version it may hold
    for kid in keys:
        if kid >= 0:  # a key new to the graph holds nothing yet
            made = (
                store.evidence.valid_instant(store.versions.creating_evidence(v))
                for v in (*store.chain(kid), *store.keys.alternatives(kid))
            )
            found = [at for at in made if at is not None]
            if found:
                latest[kid] = max(found)
    late: list[int] = []
    for j in np.flatnonzero(np.isin(ops.kid, np.fromiter(keys, _I64, len(keys)))).tolist():
        kid = int(ops.kid[j])
        mine = store.evidence.valid_instant(int(ops.ev[j])) if dated[j] else None
        if mine is None:
            continue
        held = latest.get(kid)
        if ops.code[j] == ACCEPT and held is not None and mine < held:
            late.append(int(ops.rows[j]))
            if len(late) > at_most:
                break
        if held is None or mine > held:
            latest[kid] = mine
    return late


def _loop(
    graph: ProvenanceGraph, table: pa.Table, is_obs: NDArray[np.bool_], retracts: pa.Array[Any] | None = None
) -> NDArray[np.int64]:
    """The validated rows through ``observe`` and ``apply``; the operation rows' result codes.

    An operation's evidence goes in as apply's observe-then-apply fast path takes it (the index under a
    token id, as the loop's ``observe`` leaves it), so no id is formatted or parsed; the batch was
    checked whole before. The fast path's state is then left as the loop leaves it.
    """
    out = []
    columns = [_col(table, name).to_pylist() for name in WRITE_BATCH_SCHEMA.names]
    columns.append([None] * len(is_obs) if retracts is None else retracts.to_pylist())
    rows = zip(*columns, strict=True)
    observe, apply = graph.observe, graph.apply_citing
    for obs, (op, text, source, time, key, value, ev, target) in zip(is_obs.tolist(), rows, strict=True):
        if obs:
            observe(text, source or "user", time)
            continue
        result = apply(NONE if ev is None else ev, op, key, value, retracts=target)
        out.append(_OP_CODE[result.op] << 3 | result.applied << 6)
    return np.array(out, dtype=_I64)
