"""The column-wise semantics of a write batch (:mod:`pmem.graph._ops._bulk`): :class:`_Writer` applies a
validated batch's operations to the store, once for all keys, through numpy segment operations over the
operations sorted by key, and writes the columns the loop would have written. The loop (the graph's
``apply`` and handlers) stays the definition it must match (``tests/graph/test_graph_bulk.py``)."""

from __future__ import annotations

import itertools
from itertools import repeat
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._ops._codes import (
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
from pmem.graph._ops._types import CONTEST_REPEATS_ALT, CONTEST_REPEATS_HEAD, SUPPORT_RESULT
from pmem.graph._read._keyindex import index_of

if TYPE_CHECKING:
    from collections.abc import Iterable

    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._ops._bulk import _Ops


_SUPPORT_CODE = ACCEPT | NOOP << 3 | 1 << 6  # an accept that repeated the head's value
_SUPPORT_REASON = SUPPORT_RESULT.reason
_I64 = np.int64


def _np(array: pa.Array[Any] | pa.ChunkedArray[Any]) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def _col(table: pa.Table, name: str) -> pa.Array[Any]:
    chunked = table.column(name)
    # one chunk as it is: combining would copy it (a table sliced from a larger one has sliced chunks)
    column = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    return cast("pa.Array[Any]", column)


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
            _col(table, "text").take(idx),  # kept as Arrow (pmem.graph._ops._texts)
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
