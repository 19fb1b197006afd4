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
(:mod:`pmem.graph._keyindex`), and its values are interned, so that a head an earlier batch made has its
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
import itertools
import sys
from array import array
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._codes import (
    ACCEPT,
    ACCEPT_APPLIED,
    ACTIVE,
    ALTERNATIVE,
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
    SUPERSEDED,
)
from pmem.graph._keyindex import index_of, key_ids, name_hashes
from pmem.graph._types import CONTEST_REPEATS_ALT, CONTEST_REPEATS_HEAD, SUPPORT_RESULT
from pmem.graph._validate import key_problems, preview

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
_SUPPORT_REASON = SUPPORT_RESULT.reason
_I64 = np.int64
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


def _np(array: pa.Array[Any] | pa.ChunkedArray[Any]) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def _col(table: pa.Table, name: str) -> pa.Array[Any]:
    chunked = table.column(name)
    # one chunk as it is: combining would copy it (a table sliced from a larger one has sliced chunks)
    column = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    return cast("pa.Array[Any]", column)


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


def _extend(column: array[int] | list[Any], values: np.ndarray) -> None:
    """Append ``values`` to a graph column: one block copy for a typed column, else the objects."""
    if isinstance(column, array):
        column.frombytes(np.ascontiguousarray(values, dtype=_I64).data.cast("B"))
    else:
        column.extend(values.tolist())


def _objects(items: Iterable[Any], count: int) -> NDArray[np.object_]:
    """A 1-d object array holding the very objects given (numpy would unpack tuples into a 2-d array)."""
    return np.fromiter(items, dtype=object, count=count)


def _stable_order(x: NDArray[np.int64]) -> NDArray[np.int64]:
    """``np.argsort(x, kind="stable")`` for non-negative ``x`` below 2**32: two 16-bit radix passes.

    numpy sorts 16-bit integers stably by radix and wider ones by merge sort, which is 5x slower here.
    """
    low = np.argsort((x & 0xFFFF).astype(np.uint16), kind="stable")
    high = (x >> 16)[low]
    if not len(x) or not high.any():
        return low
    if high.max() > 0xFFFF:
        return np.argsort(x, kind="stable")
    return low[np.argsort(high.astype(np.uint16), kind="stable")]


def _runs(start: NDArray[np.bool_]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """For segments marked by ``start`` (``start[0]`` set): each element's segment, and segment starts."""
    firsts = np.flatnonzero(start)
    return np.cumsum(start, dtype=_I64) - 1, firsts


def _last_before(mark: NDArray[np.bool_], first: NDArray[np.int64]) -> NDArray[np.int64]:
    """Per element, the position of the latest marked element strictly before it in its segment, else -1.

    ``first``: the position of each element's segment start.
    """
    pos = np.arange(len(mark), dtype=_I64)
    upto = np.maximum.accumulate(np.where(mark, pos, -1)) if len(mark) else pos
    out = np.empty(len(mark), _I64)
    out[:1] = -1
    out[1:] = upto[:-1]
    out[out < first] = -1
    return out


# Operation codes as the log stores them: requested | effective << 3 | applied << 6.
def _applied(op: int) -> int:
    return op | op << 3 | 1 << 6


def _support_code(req: int) -> int:
    return req | NOOP << 3 | 1 << 6


# Reasons of operations logged with one (an index per operation; 0: none). They are the handlers' own
# texts; the three that name values are formatted per operation (_F_*).
_NOHEAD = {op: f"{OPS[op]}: the key has no current head" for op in (CONTEST, REJECT, REVOKE, RESOLVE)}
_REASONS: tuple[str | None, ...] = (
    None,
    _SUPPORT_REASON,
    CONTEST_REPEATS_HEAD.reason,
    CONTEST_REPEATS_ALT.reason,
    "resolve: the cell is not contested",
    *_NOHEAD.values(),
)
_R_SUPPORT, _R_REPEATS_HEAD, _R_REPEATS_ALT, _R_NOT_CONTESTED = 1, 2, 3, 4
_R_NOHEAD = {op: 5 + i for i, op in enumerate(_NOHEAD)}
_F_REVOKE, _F_NOOP, _F_RESOLVE, _F_REVOKE_TARGET, _F_REJECT_TARGET = 16, 17, 18, 19, 20
_F_LAST = _F_REJECT_TARGET
_STEP_COST = 60  # operations whose column-wise saving over the loop pays for one step of the scan (measured)
_FEW_STEPS = 64  # a scan of at most this many steps is cheap whatever the batch (a few milliseconds)
_KINDS = 5  # a step's groups: blocks (accept and noop), contest, reject, revoke, resolve (their op codes)
_NO_ACCEPT = -3  # no accept before an operation in its block
_UNKNOWN = -2  # the code of a head value that is none of the batch's values (equal to no operation's)


def _reason_text(kind: int, value: str, current: str) -> str:
    if kind == _F_REVOKE:
        return f"revoke names {value!r} but the current head is {current!r}"
    if kind in (_F_REVOKE_TARGET, _F_REJECT_TARGET):
        op = "revoke" if kind == _F_REVOKE_TARGET else "reject"
        return f"{op} retracts {value!r} but the current head is {current!r}"
    if kind == _F_NOOP:
        return f"noop names {value!r} but the current head is {current!r}: not counted as support"
    return f"resolve: {value!r} is neither the head's value nor an alternative's"


class _Writer:
    """One validated batch being written; the state before it is read from ``graph`` on creation.

    Versions the batch creates are named by provisional ids while it runs: operation ``j`` that creates
    one names it ``v0 + j``. The three version columns the operations rewrite (status, supersedes,
    valid_to) are extended by one placeholder per operation, so that the per-key scans read and write
    old and new versions alike through one numpy view; the created ones are then packed in batch order
    (which is the loop's numbering) and every reference renumbered once.
    """

    def __init__(self, graph: ProvenanceGraph, table: pa.Table, is_obs: NDArray[np.bool_], ops: _Ops) -> None:
        self.g = graph
        self.table = table
        self.is_obs = is_obs
        self.ops = ops
        self.rows = len(is_obs)
        self.store = store = graph.storage
        self.seq0 = graph.seq
        self.v0 = store.versions.count()
        self.o0 = store.log.count()
        # value code -> string (-1: None), and back; and each string's address (see KeyIndex.value_addr)
        values = ops.values
        self.vpool = _objects([*values, None], len(values) + 1)
        self.vmap = dict(zip(values, range(len(values)), strict=True))
        self.vaddr = np.fromiter(map(id, values), _I64, len(values))
        self.addr_order = np.argsort(self.vaddr)
        self.addr_sorted = self.vaddr[self.addr_order]
        n = self.n = len(ops.rows)
        self.seq = ops.rows + (self.seq0 + 1)
        # per operation (batch order): what the loop would log and link
        self.code = np.zeros(n, _I64)
        self.target = np.full(n, NONE, _I64)
        self.created = np.zeros(n, np.bool_)
        self.reason = np.zeros(n, np.int8)
        self.support = np.zeros(n, np.bool_)  # counted as support of its target
        self.tomb = np.zeros(n, np.bool_)
        self.older = np.full(n, NONE, _I64)  # a created version's arrival-chain link, where kept
        self.alt_of = np.full(n, NONE, _I64)  # a created alternative's head
        self.alt_epoch = np.full(n, -1, _I64)
        self.cur = np.full(n, NONE, _I64)  # the head a formatted reason names
        self.curcode = np.full(n, _UNKNOWN, _I64)
        # what a retraction retracts: a value code, else (a head whose value is none of the batch's) the
        # version whose value it is; `targeted`: a value is recorded (op_retracts)
        self.targeted = np.zeros(n, np.bool_)
        self.tcode = np.full(n, _UNKNOWN, _I64)
        self.tver = np.full(n, NONE, _I64)
        self.revoke_names = np.where(ops.vcode >= 0, ops.vcode, ops.tcode)  # a revoke's value names it
        # closings of a key's open alternatives: (key slot, epoch closed, seq, resolve winner or NONE)
        self.closes: list[tuple[NDArray[np.int64], ...]] = []
        self.promoted: list[NDArray[np.int64]] = []  # older versions whose supersedes link a resolve set
        # the ids the new keys will get (run admits them in first-touch order), then the scan's order
        new = ops.kid < 0
        ops.kid[new] = store.keys.count() - 2 - ops.kid[new]
        self._plan()
        self.steps = (len(self.groups) - 1 + _KINDS - 1) // _KINDS

    def run(self) -> NDArray[np.int64]:
        g = self.g
        self._admit_keys()
        self._observe()
        self._init_state()
        # views over the whole columns (placeholders included); none may outlive _pack, which resizes them
        self.st, self.pv, self.to = self.store.versions.open_window(self.n)
        self._scan()
        self._close_alternatives()
        fin = self._pack()
        self._write_log(fin)
        self._write_retracts()
        self._write_support(fin)
        self._write_links(fin)
        self._write_open_alternatives(fin)
        self._write_heads(fin)
        self.store.rewind(self.seq0 + self.rows)
        if self.is_obs.any():  # the observe-then-apply fast path cites the last one, as after observe
            g.remember_observed(self.store.evidence.count() - 1)
        return self.code

    # ------------------------------------------------------------------ before the scan

    def _admit_keys(self) -> None:
        """Create the batch's new keys in first-touch order (every operation creates its key)."""
        g, ops = self.g, self.ops
        names = ops.new_names
        if not names:
            return
        self.store.keys.extend(names)
        index_of(g).add(ops.new_keys, ops.new_hashes)  # the lookup caught the index up to k0

    def _observe(self) -> None:
        table = self.table
        rows = np.flatnonzero(self.is_obs)
        if not len(rows):
            return
        idx = pa.array(rows, type=pa.int64())
        named: Any = _col(table, "source").take(idx)
        # the loop passes `source or "user"`: null and "" both mean "user"
        if named.null_count or pc.any(pc.equal(named, pa.scalar(""))).as_py():
            empty: Any = pc.fill_null(pc.equal(named, pa.scalar("")), True)
            named = pc.if_else(empty, pa.scalar("user"), named)
        enc = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(named))
        codes = np.empty(len(enc.dictionary), _I64)
        for i, name in enumerate(cast("list[str]", enc.dictionary.to_pylist())):  # in first-appearance order
            codes[i] = self.store.evidence.admit_source(name)
        time = _col(table, "time").take(idx)
        times: dict[int, str] = {}
        if time.null_count < len(time):
            has = np.flatnonzero(_np(pc.is_valid(time)))
            texts = cast("list[str]", time.take(pa.array(has, type=pa.int64())).to_pylist())
            times = dict(zip(has.tolist(), texts, strict=True))
        self.store.evidence.extend(
            _col(table, "text").take(idx),  # kept as Arrow (pmem.graph._texts)
            codes[_np(enc.indices).astype(_I64)],
            rows + (self.seq0 + 1),
            times,
        )

    def _codes_of(self, versions: NDArray[np.int64]) -> NDArray[np.int64]:
        """The value code of each version (_UNKNOWN for NONE or a value none of the batch's).

        A version of this batch has its operation's; one an earlier batch made, the code of the batch
        string at its recorded value address (see KeyIndex.value_addr; none there: none of this batch's
        values, since equal interned strings are one object); any other is read from the value list.
        """
        out = np.full(len(versions), _UNKNOWN, _I64)
        new = versions >= self.v0
        out[new] = self.ops.vcode[versions[new] - self.v0]
        address = self.index.value_addresses(np.where(new, NONE, versions))
        known = np.flatnonzero(address != 0)
        if len(known) and len(self.addr_sorted):
            at = np.minimum(np.searchsorted(self.addr_sorted, address[known]), len(self.addr_sorted) - 1)
            hit = self.addr_sorted[at] == address[known]
            out[known[hit]] = self.addr_order[at[hit]]
        old = np.flatnonzero((versions >= 0) & ~new & (address == 0))
        if len(old):
            items = versions[old].tolist()
            objects = self.store.versions.values_of(items)
            # the values are interned (see __init__): a dict probe finds a batch's own string by identity
            out[old] = np.fromiter(map(self.vmap.get, objects, repeat(_UNKNOWN)), _I64, len(items))
        return out

    def _init_state(self) -> None:
        """Per key of the batch (by slot: its index among the batch's distinct keys): the scan's state."""
        g, ops = self.g, self.ops
        kid_u = self.kid_u
        self.head0, self.newest0 = self.store.keys.heads_of(kid_u)
        self.head = self.head0.copy()
        self.newest = self.newest0.copy()
        self.index = index_of(g)
        self.hcode = self._codes_of(self.head)
        # open alternatives: `has` mirrors "key in _open_alts", `epoch` counts the key's closings, and an
        # alternative is looked up by (key slot, value code) -> pair slot, open while its epoch is current
        self.epoch = np.zeros(len(kid_u), _I64)
        self.has = np.zeros(len(kid_u), np.bool_)
        prior_u: list[int] = []
        prior_v: list[int] = []
        store = self.store
        # A key has open alternatives exactly when its head is contested (contest makes both so, and
        # every operation that closes them changes the head's status), so only those are asked.
        with_head = np.flatnonzero(self.head >= 0)
        contested = with_head[store.versions.statuses_of(self.head[with_head]) == CONTESTED]
        for u, kid in zip(contested.tolist(), kid_u[contested].tolist(), strict=True):
            if store.keys.has_alternatives(kid):
                alts = store.keys.alternatives(kid)
                self.has[u] = True
                prior_u += [u] * len(alts)
                prior_v += alts
        self.had = self.has.copy()
        self.prior_u = np.array(prior_u, _I64)
        self.prior_v = np.array(prior_v, _I64)
        prior_code = self._codes_of(self.prior_v)
        asks = np.flatnonzero((ops.code == CONTEST) | (ops.code == RESOLVE))
        known = np.flatnonzero(prior_code >= 0)
        width = len(self.vpool)
        pairs = np.concatenate(
            [self.key[asks] * width + ops.vcode[asks], self.prior_u[known] * width + prior_code[known]]
        )
        uniq, inverse = np.unique(pairs, return_inverse=True)
        self.pair = np.full(self.n, -1, _I64)
        self.pair[asks] = inverse[: len(asks)]
        self.pair_alt = np.full(len(uniq), NONE, _I64)
        self.pair_epoch = np.full(len(uniq), -1, _I64)
        # a prior list holds distinct values; were one repeated, the loop would find the first
        p = inverse[len(asks) :]
        _, first = np.unique(p, return_index=True)
        self.pair_alt[p[first]] = self.prior_v[known][first]
        self.pair_epoch[p[first]] = 0

    def _plan(self) -> None:
        """Order the operations for the scan: by key, cut into units, grouped by unit position.

        A key's operations in batch order are cut into *units*: a maximal run of accepts and noops (a
        block: whether each creates a version or counts as support follows from the values before it
        and the head at the block's start, so a whole block is one step) or a single other operation.
        Step s processes the s-th unit of every key at once.
        """
        ops = self.ops
        n = self.n
        ks = _stable_order(ops.kid)
        ku = ops.kid[ks]
        kcode = ops.code[ks]
        first = np.ones(n, np.bool_)
        first[1:] = ku[1:] != ku[:-1]
        # key slots: the batch's distinct keys, in key id order
        self.kid_u = ku[first]
        self.key = np.empty(n, _I64)
        self.key[ks] = np.cumsum(first, dtype=_I64) - 1
        blockable = (kcode == ACCEPT) | (kcode == NOOP)
        start = first.copy()
        start[1:] |= ~(blockable[1:] & blockable[:-1])
        unit = np.cumsum(start, dtype=_I64) - 1
        upos = unit - np.maximum.accumulate(np.where(first, unit, 0))
        # the value of the accept before each operation in its block (_NO_ACCEPT: none)
        pos = np.arange(n, dtype=_I64)
        block_first = np.maximum.accumulate(np.where(start, pos, 0))
        prev_acc = _last_before(kcode == ACCEPT, block_first)
        pacc = np.where(prev_acc >= 0, ops.vcode[ks][prev_acc], _NO_ACCEPT)
        # step by step, and in a step by kind (blocks, then each other op), each by key id
        group = upos * _KINDS + np.where(blockable, 0, kcode)
        order = _stable_order(group)
        self.sj = ks[order]  # operation indices in that order
        self.s_start = start[order]
        self.s_pacc = pacc[order]
        self.groups = np.zeros(1, _I64)
        if n:
            self.groups = np.concatenate([self.groups, np.cumsum(np.bincount(group))])

    # ------------------------------------------------------------------ the scan

    def _scan(self) -> None:
        """Unit position by unit position (one unit per key at each: no two units of one step touch
        one key), and within one by kind."""
        singles = (self._contest, self._reject, self._revoke, self._resolve)  # by op code - 1
        bounds = self.groups.tolist()
        for g, (a, b) in enumerate(itertools.pairwise(bounds)):
            if a == b:
                continue
            kind = g % _KINDS
            if kind:
                singles[kind - 1](self.sj[a:b])
            else:
                self._blocks(self.sj[a:b], self.s_start[a:b], self.s_pacc[a:b])

    def _blocks(self, j: NDArray[np.int64], start: NDArray[np.bool_], pacc: NDArray[np.int64]) -> None:
        """Blocks of accepts and noops, one per key: accept's and noop's semantics, column-wise."""
        ops, v0 = self.ops, self.v0
        unit, firsts = _runs(start)
        u = self.key[j[firsts]]
        h0, hv0, nw0 = self.head[u], self.hcode[u], self.newest[u]
        value = ops.vcode[j]
        is_acc = ops.code[j] == ACCEPT
        # the head's value before each operation: the accept before it in the block, else the block's
        # start; an accept creates a version unless it repeats that value
        seen = pacc != _NO_ACCEPT
        hv = np.where(seen, pacc, hv0[unit])
        nohead = ~seen & (h0[unit] == NONE)
        creates = is_acc & (nohead | (value != hv))
        maker = _last_before(creates, firsts[unit])  # the version made last before each operation
        hb = np.where(maker >= 0, v0 + j[maker], h0[unit])  # the head before each operation
        c = np.flatnonzero(creates)
        jc = j[c]
        self.created[jc] = True
        self.target[jc] = v0 + jc
        self.code[jc] = ACCEPT_APPLIED
        self.pv[v0 + jc] = hb[c]
        s = np.flatnonzero(is_acc & ~creates)  # repeats the head's value: support
        self._supports(j[s], hb[s], _SUPPORT_CODE, _R_SUPPORT)
        self._noops(j[~is_acc], hb[~is_acc], hv[~is_acc], nohead[~is_acc])
        # per block: its first version closes the open alternatives of a head and keeps the arrival
        # chain where the newest version is not the head; its last one is the new head
        f = c[maker[c] < 0]
        fu = unit[f]
        link = nw0[fu] != h0[fu]
        self.older[j[f][link]] = nw0[fu][link]
        closing = self.has[u[fu]] & (h0[fu] != NONE)
        if closing.any():
            h, at = h0[fu][closing], self.seq[j[f][closing]]
            self.st[h] = SUPERSEDED
            self.to[h] = at
            self._close(u[fu][closing], at, np.full(len(h), NONE, _I64))
        last = np.maximum.reduceat(np.where(creates, np.arange(len(j)), -1), firsts) if len(j) else firsts
        made = last >= 0
        um, vm = u[made], v0 + j[last[made]]
        self.head[um] = vm
        self.newest[um] = vm
        self.hcode[um] = value[last[made]]

    def _noops(
        self, j: NDArray[np.int64], hb: NDArray[np.int64], hv: NDArray[np.int64], nohead: NDArray[np.bool_]
    ) -> None:
        value = self.ops.vcode[j]
        empty = np.flatnonzero(nohead)  # applied, supports nothing
        self.code[j[empty]] = _applied(NOOP)
        other = (value >= 0) & (value != hv) & ~nohead  # names another value than the head's
        f = np.flatnonzero(other)
        self._fail(j[f], NOOP, _F_NOOP)
        self.cur[j[f]] = hb[f]
        self.curcode[j[f]] = hv[f]
        s = np.flatnonzero(~nohead & ~other)
        self._supports(j[s], hb[s], _applied(NOOP), 0)

    def _contest(self, j: NDArray[np.int64]) -> None:
        ops, v0 = self.ops, self.v0
        j = self._headless(j, CONTEST)
        u = self.key[j]
        h = self.head[u]
        value = ops.vcode[j]
        same = value == self.hcode[u]
        self._supports(j[same], h[same], _support_code(CONTEST), _R_REPEATS_HEAD)
        j, u, h = j[~same], u[~same], h[~same]
        p = self.pair[j]
        alt = self.pair_alt[p]
        open_ = (alt != NONE) & (self.pair_epoch[p] == self.epoch[u])
        self._supports(j[open_], alt[open_], _support_code(CONTEST), _R_REPEATS_ALT)
        j, u, h, p = j[~open_], u[~open_], h[~open_], p[~open_]
        vid = v0 + j
        self.created[j] = True
        self.target[j] = vid
        self.code[j] = _applied(CONTEST)
        self.st[vid] = ALTERNATIVE
        self.older[j] = self.newest[u]  # an alternative supersedes nothing: the chain link is kept
        self.newest[u] = vid
        self.alt_of[j] = h
        self.alt_epoch[j] = self.epoch[u]
        self.st[h] = CONTESTED
        self.has[u] = True
        self.pair_alt[p] = vid
        self.pair_epoch[p] = self.epoch[u]

    def _reject(self, j: NDArray[np.int64]) -> None:
        ops, v0 = self.ops, self.v0
        j = self._headless(self._named(j, ops.tcode[j]), REJECT)
        j = self._retracting(j, ops.tcode, REJECT, _F_REJECT_TARGET)
        u = self.key[j]
        h = self.head[u]
        seq = self.seq[j]
        self.st[h] = CONTRADICTED
        self.to[h] = seq
        self._close(u, seq, np.full(len(j), NONE, _I64))
        self.code[j] = _applied(REJECT)
        value = ops.vcode[j]
        named = value >= 0  # the value replaces the head; without one the key rolls back
        jn, un, hn = j[named], u[named], h[named]
        vid = v0 + jn
        self.created[jn] = True
        self.target[jn] = vid
        self.pv[vid] = hn
        nw = self.newest[un]
        self.older[jn] = np.where(nw != hn, nw, NONE)
        self.head[un] = vid
        self.newest[un] = vid
        self.hcode[un] = value[named]
        self.target[j[~named]] = h[~named]
        self._rollback(u[~named], h[~named])

    def _revoke(self, j: NDArray[np.int64]) -> None:
        ops = self.ops
        named = self.revoke_names
        j = self._headless(self._named(j, named[j]), REVOKE)
        # named by its value, the reason says "names"; by the value replay passes, "retracts"
        j = self._retracting(j, named, REVOKE, np.where(ops.vcode[j] >= 0, _F_REVOKE, _F_REVOKE_TARGET))
        u = self.key[j]
        h = self.head[u]
        seq = self.seq[j]
        self.st[h] = REVOKED
        self.to[h] = seq
        self._close(u, seq, np.full(len(j), NONE, _I64))
        self.code[j] = _applied(REVOKE)
        self.target[j] = h
        self.tomb[j] = True
        self._rollback(u, h)

    def _resolve(self, j: NDArray[np.int64]) -> None:
        ops = self.ops
        j = self._headless(j, RESOLVE)
        u = self.key[j]
        h = self.head[u]
        calm = self.st[h] != CONTESTED
        self._fail(j[calm], RESOLVE, _R_NOT_CONTESTED)
        j, u, h = j[~calm], u[~calm], h[~calm]
        p = self.pair[j]
        alt = self.pair_alt[p]
        open_ = (alt != NONE) & (self.pair_epoch[p] == self.epoch[u])
        winner = np.where(ops.vcode[j] == self.hcode[u], h, np.where(open_, alt, NONE))
        lost = winner == NONE
        self._fail(j[lost], RESOLVE, _F_RESOLVE)
        j, u, h, winner = j[~lost], u[~lost], h[~lost], winner[~lost]
        seq = self.seq[j]
        promote = winner != h
        hp, wp = h[promote], winner[promote]
        self.st[hp] = CONTRADICTED
        self.to[hp] = seq[promote]
        self.pv[wp] = hp  # the promoted value supersedes the contradicted incumbent
        self.promoted.append(wp[wp < self.v0])
        self.head[u[promote]] = wp
        self.hcode[u[promote]] = ops.vcode[j[promote]]
        self.st[winner] = ACTIVE
        self._close(u, seq, winner)
        self._supports(j, winner, _applied(RESOLVE), 0)

    def _named(self, j: NDArray[np.int64], named: NDArray[np.int64]) -> NDArray[np.int64]:
        """Record the values the retractions ``j`` name (``named``: their codes, -1: none); ``j``."""
        given = named >= 0
        self.targeted[j[given]] = True
        self.tcode[j[given]] = named[given]
        return j

    def _retracting(
        self, j: NDArray[np.int64], named: NDArray[np.int64], op: int, reason: int | NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """Of retractions ``j`` (of ``op``) on keys with a head: record the head's value for those that
        name none (``named``, by operation: -1), fail those that name another value than the head's
        (with ``reason``, one or one per operation); the others, in their order."""
        u = self.key[j]
        h = self.head[u]
        mine = named[j]
        auto = mine < 0
        a = j[auto]
        self.targeted[a] = True
        self.tcode[a] = self.hcode[u[auto]]
        self.tver[a] = h[auto]
        other: NDArray[np.bool_] = ~auto & (mine != self.hcode[u])
        f = np.flatnonzero(other)
        self._fail(j[f], op, reason if isinstance(reason, int) else reason[f])
        self.cur[j[f]] = h[f]
        self.curcode[j[f]] = self.hcode[u[f]]
        kept: NDArray[np.int64] = j[~other]
        return kept

    def _headless(self, j: NDArray[np.int64], op: int) -> NDArray[np.int64]:
        """Fail the operations on keys without a head; the others."""
        none: NDArray[np.bool_] = self.head[self.key[j]] == NONE
        if none.any():
            self._fail(j[none], op, _R_NOHEAD[op])
            return j[~none]
        return j

    def _rollback(self, u: NDArray[np.int64], h: NDArray[np.int64]) -> None:
        """Reopen the most recent merely-superseded predecessor of each retracted head (as
        ``GraphStore.reopen_predecessor`` does for one)."""
        st, pv = self.st, self.pv
        p = pv[h]
        walking = np.flatnonzero(p != NONE)
        while len(walking):
            s = st[p[walking]]
            walking = walking[(s != SUPERSEDED) & (s != ACTIVE)]
            p[walking] = pv[p[walking]]
            walking = walking[p[walking] != NONE]
        live = p[p != NONE]
        st[live] = ACTIVE
        self.to[live] = NONE
        self.head[u] = p
        self.hcode[u] = self._codes_of(p)

    def _close(self, u: NDArray[np.int64], seq: NDArray[np.int64], winner: NDArray[np.int64]) -> None:
        """Close the open alternatives of keys ``u`` (those that have any) at ``seq``."""
        m = self.has[u]
        if not m.any():
            return
        u = u[m]
        self.closes.append((u, self.epoch[u], seq[m], winner[m]))
        self.epoch[u] += 1
        self.has[u] = False

    def _fail(self, j: NDArray[np.int64], op: int, reason: int | NDArray[np.int64]) -> None:
        self.code[j] = op | NOOP << 3
        self.reason[j] = reason

    def _supports(self, j: NDArray[np.int64], target: NDArray[np.int64], code: int, reason: int) -> None:
        self.code[j] = code
        self.target[j] = target
        self.support[j] = True
        self.reason[j] = reason

    # ------------------------------------------------------------------ after the scan

    def _close_alternatives(self) -> None:
        """Close every alternative at its key's first closing after its creation (write its valid_to,
        and contradict it when that was a resolve it lost); the others stay open."""
        closes = self.closes
        if not closes:
            return
        cu, cep, cseq, cwin = (np.concatenate(c) for c in zip(*closes, strict=True))
        width = self.n + 1  # more than any epoch
        ckey = cu * width + cep
        order = np.argsort(ckey)
        ckey = ckey[order]
        made = np.flatnonzero(self.alt_epoch >= 0)
        au = np.concatenate([self.prior_u, self.key[made]])
        aep = np.concatenate([np.zeros(len(self.prior_u), _I64), self.alt_epoch[made]])
        av = np.concatenate([self.prior_v, self.v0 + made])
        akey = au * width + aep
        at = np.minimum(np.searchsorted(ckey, akey), len(ckey) - 1)
        closed = ckey[at] == akey
        at = order[at[closed]]
        av = av[closed]
        lost = av != cwin[at]
        self.to[av[lost]] = cseq[at][lost]
        resolved = lost & (cwin[at] != NONE)
        self.st[av[resolved]] = CONTRADICTED

    def _pack(self) -> NDArray[np.int64]:
        """Pack the created versions in batch order; the final id of each provisional one (by operation)."""
        v0 = self.v0
        fin = v0 + np.cumsum(self.created, dtype=_I64) - 1
        self.fin = fin
        c = np.flatnonzero(self.created)
        keep = v0 + c
        end = v0 + len(c)
        self.st[v0:end] = self.st[keep]
        self.to[v0:end] = self.to[keep]
        self.pv[v0:end] = self._remap(self.pv[keep])
        if self.promoted:
            w = np.concatenate(self.promoted)
            self.pv[w] = self._remap(self.pv[w])
        del self.st, self.pv, self.to  # release the columns' buffers: they shrink now
        ops = self.ops
        self.store.versions.close_window(
            end, self.kid_u[self.key[c]], self.vpool[ops.vcode[c]].tolist(), self.seq[c], ops.ev[c]
        )
        self.index.record_values(v0, self.vaddr[ops.vcode[c]])
        return fin

    def _remap(self, x: NDArray[np.int64]) -> NDArray[np.int64]:
        """Provisional ids (>= v0) -> final ids; older ids and NONE unchanged."""
        out = x.copy()
        m = x >= self.v0
        out[m] = self.fin[x[m] - self.v0]
        return out

    def _write_log(self, fin: NDArray[np.int64]) -> None:
        ops = self.ops
        # an operation that created no version keeps (seq, key, evidence, value, reason) in _op_extra
        x = np.flatnonzero(~self.created)
        reasons = np.array([*_REASONS, *([None] * (_F_LAST + 1 - len(_REASONS)))], dtype=object)
        texts = reasons[self.reason[x]]
        fmt = np.flatnonzero(self.reason[x] >= _F_REVOKE)
        if len(fmt):
            texts[fmt] = self._formatted(x[fmt])
        extra = zip(
            (x + self.o0).tolist(),
            zip(
                self.seq[x].tolist(),
                self.kid_u[self.key[x]].tolist(),
                ops.ev[x].tolist(),
                self.vpool[ops.vcode[x]].tolist(),
                texts.tolist(),
                strict=True,
            ),
            strict=True,
        )
        self.store.log.extend(self.code, self._remap(self.target), extra)

    def _formatted(self, j: NDArray[np.int64]) -> list[str]:
        """The reasons that name values (one text per distinct (kind, value, current value))."""
        vpool, store = self.vpool, self.store
        memo: dict[tuple[int, int, int], str] = {}
        out = []
        kinds = self.reason[j]
        named = np.where(kinds >= _F_REVOKE_TARGET, self.tcode[j], self.ops.vcode[j])
        for kind, value, cc, cv in zip(
            kinds.tolist(),
            named.tolist(),
            self.curcode[j].tolist(),
            self.cur[j].tolist(),
            strict=True,
        ):
            key = (kind, value, cc if cc >= 0 else -3 - cv)
            text = memo.get(key)
            if text is None:
                current = "" if kind == _F_RESOLVE else (vpool[cc] if cc >= 0 else store.versions.value(cv))
                text = memo[key] = _reason_text(kind, vpool[value], current)
            out.append(text)
        return out

    def _write_retracts(self) -> None:
        """The values the retractions retract, in operation order (the loop's insertion order)."""
        t = np.flatnonzero(self.targeted)
        if not len(t):
            return
        vpool, store = self.vpool, self.store
        codes, versions = self.tcode[t].tolist(), self.tver[t].tolist()
        # a head of an earlier batch or call whose value is none of this batch's: read from the graph
        texts = [
            vpool[c] if c >= 0 else store.versions.value(v) for c, v in zip(codes, versions, strict=True)
        ]
        store.log.record_retracted(zip((t + self.o0).tolist(), texts, strict=True))

    def _write_support(self, fin: NDArray[np.int64]) -> None:
        """Support counts, supported-by edges (evidence-backed supports) and tombstones, in batch order."""
        ops = self.ops
        s = np.flatnonzero(self.support)
        target = self._remap(self.target[s])
        ev = ops.ev[s]
        e = ev >= 0
        # a version's count is inserted where the loop inserted it: at its first support
        uniq, first, count = np.unique(target, return_index=True, return_counts=True)
        order = np.argsort(first)
        self.store.edges.extend_support(target[e], ev[e], self.seq[s][e])
        self.store.versions.count_support(uniq[order].tolist(), count[order])
        t = np.flatnonzero(self.tomb)
        self.store.edges.extend_tombstones(self._remap(self.target[t]), self.seq[t], ops.ev[t])

    def _write_links(self, fin: NDArray[np.int64]) -> None:
        """Arrival-chain links and alternative-of edges of the created versions, in creation order."""
        o = np.flatnonzero(self.created & (self.older != NONE))
        a = np.flatnonzero(self.alt_of != NONE)
        self.store.versions.record_links(
            zip(fin[o].tolist(), self._remap(self.older[o]).tolist(), strict=True),
            zip(fin[a].tolist(), self._remap(self.alt_of[a]).tolist(), strict=True),
        )

    def _write_open_alternatives(self, fin: NDArray[np.int64]) -> None:
        """The keys' open alternatives: a key whose list was closed leaves the dict, and re-enters it
        (at the end) with the first alternative it opened since."""
        kid_u = self.kid_u
        made = np.flatnonzero(self.alt_epoch >= 0)
        u = self.key[made]
        still = self.alt_epoch[made] == self.epoch[u]
        made, u = made[still], u[still]
        lists: dict[int, list[int]] = {}
        for slot, vid in zip(u.tolist(), fin[made].tolist(), strict=True):  # made is in batch order
            lists.setdefault(slot, []).append(vid)
        closed, extended = [], []
        for slot in np.flatnonzero(self.had).tolist():
            if self.epoch[slot] > 0:
                closed.append(int(kid_u[slot]))
            elif slot in lists:
                extended.append((int(kid_u[slot]), lists.pop(slot)))
        # first-opened first: the loop's insertion order
        opened = [(int(kid_u[slot]), alts) for slot, alts in lists.items()]
        self.store.keys.update_alternatives(closed, extended, opened)

    def _write_heads(self, fin: NDArray[np.int64]) -> None:
        heads = np.flatnonzero(self.head != self.head0)
        newest = np.flatnonzero(self.newest != self.newest0)
        self.store.keys.set_heads(
            self.kid_u[heads],
            self._remap(self.head[heads]),
            self.kid_u[newest],
            self._remap(self.newest[newest]),
        )
