"""ProvenanceGraph.apply_batch leaves the graph exactly as the row-by-row observe/apply loop does."""

from __future__ import annotations

import itertools
from array import array
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import strategies as st
from lengths import short_and_long

from pmem.graph import OPS, WRITE_BATCH_SCHEMA, WRITE_LOG_SCHEMA, OpResult, ProvenanceGraph, apply_log
from pmem.graph._ops import _bulk
from pmem.graph._ops._store import GROUP_COLUMNS
from pmem.graph._ops._texts import TextColumn

KEYS = ["a", "b", "c", "d", "e.f"]
VALUES = ["x", "y", "z"]

#: A row: ("obs", text, source, time) or (op, key, value, evidence index or None)
Row = tuple[Any, ...]


def loop(graph: ProvenanceGraph, rows: list[Row]) -> list[OpResult]:
    """The reference: the row-by-row loop apply_batch must equal."""
    out = []
    for row in rows:
        if row[0] == "obs":
            _, text, source, time = row
            graph.observe(text, source or "user", time)
        else:
            op, key, value, ev = row
            out.append(graph.apply(op, key, value, evidence=None if ev is None else f"e{ev}"))
    return out


def batch(rows: list[Row]) -> pa.Table:
    cols: dict[str, list[Any]] = {name: [] for name in WRITE_BATCH_SCHEMA.names}
    for row in rows:
        fields = (
            (None, *row[1:], None, None, None) if row[0] == "obs" else (row[0], None, None, None, *row[1:])
        )
        for name, value in zip(WRITE_BATCH_SCHEMA.names, fields, strict=True):
            cols[name].append(value)
    return pa.table(cols, schema=WRITE_BATCH_SCHEMA)


def hidden(graph: ProvenanceGraph) -> tuple[Any, ...]:
    """Write state that to_bytes() does not show but later calls depend on.

    Raw columns (a lazily superseded head is stored active), and every dict as its items in insertion
    order (dict equality ignores order, which later writes and saves do not).
    """
    groups = {group: vars(getattr(graph.storage, group)) for group in GROUP_COLUMNS}
    state = {**vars(graph), **{f"{g}.{k}": v for g, columns in groups.items() for k, v in columns.items()}}
    columns = {
        name: list(value)
        for name, value in sorted(state.items())
        if isinstance(value, array | list | TextColumn)
    }
    dicts = {
        name: [(k, list(v) if isinstance(v, list) else v) for k, v in value.items()]
        for name, value in sorted(state.items())
        if isinstance(value, dict) and name not in ("_handlers", "evidence.valid_at")
    }
    return (
        graph._last_eid,
        graph._last_ev,
        graph.seq,
        list(graph.storage.keys.key_names),
        list(graph.storage.evidence.sources),
        columns,
        dicts,
    )


@st.composite
def rows(draw: st.DrawFn, evidence_before: int = 0, max_size: int = 40) -> list[Row]:
    out: list[Row] = []
    seen = evidence_before
    for _ in range(draw(st.integers(0, max_size))):
        if draw(st.integers(0, 3)) == 0:
            source = draw(st.sampled_from([None, "", "user", "doc", "tool"]))
            time = draw(st.sampled_from([None, "t1", "2024-01-01"]))
            out.append(("obs", f"text {len(out)}", source, time))
            seen += 1
            continue
        op = draw(st.sampled_from(OPS))
        key = draw(st.sampled_from(KEYS))
        needs = op in ("accept", "contest", "resolve")
        value = draw(st.sampled_from(VALUES) if needs else st.one_of(st.none(), st.sampled_from(VALUES)))
        ev = draw(st.one_of(st.none(), st.integers(0, seen - 1))) if seen else None
        out.append((op, key, value, ev))
    return out


@st.composite
def scripts(draw: st.DrawFn, evidence_before: int = 0, max_size: int = 60) -> list[Row]:
    """Rows that reach every column-wise case: besides single operations of every type, rollback chains
    (reject and revoke until the cell is empty, then accept again), contests opening several
    alternatives followed by a resolve, a few keys (long per-key runs) and small value sets (repeats:
    support; a prior head whose value none of a batch's rows names)."""
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
    values = draw(st.sampled_from([VALUES, [*VALUES, "it's"], ["x"], ["x", "y"]]))
    out: list[Row] = []
    seen = evidence_before

    def ev() -> int | None:
        return draw(st.one_of(st.none(), st.integers(0, seen - 1))) if seen else None

    size = draw(st.integers(0, max_size))
    while len(out) < size:
        kind = draw(st.integers(0, 9))
        key = draw(st.sampled_from(keys))
        if kind == 0:
            out.append(("obs", f"text {len(out)}", draw(st.sampled_from([None, "doc"])), None))
            seen += 1
        elif kind == 1:  # a rollback chain, often down to the empty cell, then maybe a new value
            for _ in range(draw(st.integers(1, 5))):
                op = draw(st.sampled_from(["reject", "revoke"]))
                out.append((op, key, draw(st.one_of(st.none(), st.sampled_from(values))), ev()))
            if draw(st.booleans()):
                out.append(("accept", key, draw(st.sampled_from(values)), ev()))
        elif kind == 2:  # several alternatives, then maybe a resolve (to one, to the head, or failing)
            for alternative in draw(st.lists(st.sampled_from([*values, "w"]), min_size=1, max_size=4)):
                out.append(("contest", key, alternative, ev()))
            if draw(st.booleans()):
                out.append(("resolve", key, draw(st.sampled_from([*values, "w", "q"])), ev()))
        else:
            op = draw(st.sampled_from(["accept", "accept", "accept", *OPS]))
            needs = op in ("accept", "contest", "resolve")
            value = draw(st.sampled_from(values) if needs else st.one_of(st.none(), st.sampled_from(values)))
            out.append((op, key, value, ev()))
    return out


def assert_same(bulk_graph: ProvenanceGraph, seq_graph: ProvenanceGraph) -> None:
    assert bulk_graph.to_bytes() == seq_graph.to_bytes()
    assert hidden(bulk_graph) == hidden(seq_graph)


def check(prefix: list[Row], *parts: list[Row], prefix_by_batch: bool = False) -> None:
    """``prefix`` on both graphs, then each part by the loop and by apply_batch, then every op on every
    key by the loop on both (later calls must behave the same)."""
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    loop(seq_graph, prefix)
    if prefix_by_batch:
        bulk_graph.apply_batch(batch(prefix))
    else:
        loop(bulk_graph, prefix)
    assert_same(bulk_graph, seq_graph)
    for part in parts:
        expected = loop(seq_graph, part)
        result = bulk_graph.apply_batch(batch(part))
        assert [OPS[c] for c in result.op.tolist()] == [r.op for r in expected]
        assert result.applied.tolist() == [r.applied for r in expected]
        assert_same(bulk_graph, seq_graph)
    names = sorted({row[1] for row in [*prefix, *itertools.chain(*parts)] if row[0] != "obs"})
    suffix: list[Row] = [(op, key, v, None) for key in names for op in OPS for v in ("x", "it's")]
    suffix += [(op, key, None, None) for key in names for op in ("reject", "revoke", "noop")]
    assert loop(bulk_graph, suffix) == loop(seq_graph, suffix)
    assert_same(bulk_graph, seq_graph)


def split(data: st.DataObject, stream: list[Row]) -> list[list[Row]]:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def as_input(data: st.DataObject, part: list[Row]) -> pa.Table | pa.RecordBatch:
    table = batch(part)
    kind = data.draw(st.sampled_from(["table", "record_batch", "chunked"]))
    if kind == "record_batch":
        return (
            table.combine_chunks().to_batches()[0]
            if part
            else pa.RecordBatch.from_pylist([], schema=WRITE_BATCH_SCHEMA)
        )
    if kind == "chunked" and len(part) > 1:
        return pa.concat_tables([table.slice(0, len(part) // 2), table.slice(len(part) // 2)])
    return table


def test_a_long_mixed_stream_over_many_keys_equals_the_loop() -> None:
    """Thousands of rows: the numpy grouping, merging and renumbering at a size hypothesis does not reach."""
    rng = np.random.default_rng(3)
    stream: list[Row] = []
    seen = 0
    for i in range(6000):
        if rng.random() < 0.5:
            stream.append(("obs", f"obs {i}", None if i % 5 else "doc", None if i % 7 else f"t{i}"))
            seen += 1
            continue
        op = OPS[0] if rng.random() < 0.8 else OPS[int(rng.integers(1, len(OPS)))]
        value = (
            f"v{rng.integers(3)}" if op in ("accept", "contest", "resolve") or rng.random() < 0.5 else None
        )
        ev = int(rng.integers(seen)) if seen and rng.random() < 0.8 else None
        stream.append((op, f"k{rng.integers(300)}", value, ev))
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    expected = loop(seq_graph, stream)
    results = [bulk_graph.apply_batch(batch(stream[a : a + 2000])) for a in range(0, len(stream), 2000)]
    assert np.concatenate([r.op for r in results]).tolist() == [OPS.index(r.op) for r in expected]
    assert bulk_graph.to_bytes() == seq_graph.to_bytes()
    assert hidden(bulk_graph) == hidden(seq_graph)


def check_batches_equal_the_loop(data: st.DataObject) -> None:
    prefix = data.draw(rows(max_size=30), label="prefix")
    # with source authority an accept may be lowered to a contest: the batch must lower it too
    authority = data.draw(st.sampled_from([None, {"user": 2, "doc": 0, "tool": 1}]), label="authority")
    seq_graph, bulk_graph = ProvenanceGraph(authority=authority), ProvenanceGraph(authority=authority)
    loop(seq_graph, prefix)
    loop(bulk_graph, prefix)
    n_ev = len(seq_graph.storage.evidence.ev_seq)
    stream = data.draw(rows(evidence_before=n_ev, max_size=60), label="stream")
    for part in split(data, stream):
        expected = loop(seq_graph, part)
        first = len(bulk_graph.storage.evidence.ev_seq)
        result = bulk_graph.apply_batch(as_input(data, part))
        assert [OPS[c] for c in result.op.tolist()] == [r.op for r in expected]
        assert result.applied.tolist() == [r.applied for r in expected]
        assert result.first_evidence == first
        assert result.op.dtype == np.int8 and result.applied.dtype == np.bool_
        assert bulk_graph.to_bytes() == seq_graph.to_bytes()
        assert hidden(bulk_graph) == hidden(seq_graph)
    # later calls behave the same: the fast path, lazy closes, records, sources, dict orders
    suffix = data.draw(
        rows(evidence_before=len(seq_graph.storage.evidence.ev_seq), max_size=20), label="suffix"
    )
    assert loop(bulk_graph, suffix) == loop(seq_graph, suffix)
    assert bulk_graph.to_bytes() == seq_graph.to_bytes()
    assert hidden(bulk_graph) == hidden(seq_graph)
    last = seq_graph._last_eid
    if last is not None:  # the id observe returned last takes the same fast path afterwards
        assert bulk_graph.apply("noop", "a", evidence=last) == seq_graph.apply("noop", "a", evidence=last)
        assert bulk_graph.to_bytes() == seq_graph.to_bytes()


test_batches_equal_the_loop, test_batches_equal_the_loop_at_length = short_and_long(
    check_batches_equal_the_loop, st.data(), short=75, full=300
)


def check_every_operation_column_wise_equals_the_loop(data: st.DataObject) -> None:
    """Rollback chains, several alternatives, resolves, noops, supports, on keys new to a batch and keys
    with prior state (open alternatives, rollbacks; built by the loop or by a batch), batch after batch."""
    prefix = data.draw(scripts(max_size=40), label="prefix")
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    loop(seq_graph, prefix)
    if data.draw(st.booleans(), label="prefix by batch"):
        bulk_graph.apply_batch(batch(prefix))
    else:
        loop(bulk_graph, prefix)
    assert_same(bulk_graph, seq_graph)
    stream = data.draw(
        scripts(evidence_before=len(seq_graph.storage.evidence.ev_seq), max_size=80), label="stream"
    )
    for part in split(data, stream):
        expected = loop(seq_graph, part)
        result = bulk_graph.apply_batch(as_input(data, part))
        assert [OPS[c] for c in result.op.tolist()] == [r.op for r in expected]
        assert result.applied.tolist() == [r.applied for r in expected]
        assert_same(bulk_graph, seq_graph)
    suffix = data.draw(
        scripts(evidence_before=len(seq_graph.storage.evidence.ev_seq), max_size=20), label="suffix"
    )
    assert loop(bulk_graph, suffix) == loop(seq_graph, suffix)
    assert_same(bulk_graph, seq_graph)


(
    test_every_operation_column_wise_equals_the_loop,
    test_every_operation_column_wise_equals_the_loop_at_length,
) = short_and_long(check_every_operation_column_wise_equals_the_loop, st.data(), short=100, full=400)


def test_rollback_chains_walk_down_to_the_empty_cell_and_start_again() -> None:
    prior: list[Row] = [("obs", "o", None, None)]
    prior += [("accept", "a", v, 0) for v in ("x", "y", "z", "w")]
    prior += [("reject", "a", None, 0), ("accept", "b", "x", None), ("reject", "b", None, None)]
    part: list[Row] = [
        ("accept", "a", "q", None),  # supersedes y: z and w are dead below
        ("revoke", "a", "y", 0),  # names another value than the head's: fails
        ("revoke", "a", "q", 0),  # back to y, past nothing
        ("reject", "a", None, None),  # back to x, past z and w (rejected and revoked before the batch)
        ("noop", "a", "x", 0),
        ("reject", "a", None, 0),  # empty
        ("reject", "a", None, 0),  # no head: fails
        ("revoke", "a", None, None),
        ("noop", "a", None, 0),  # on the empty cell: applied, supports nothing
        ("accept", "a", "x", 0),  # a new version, though a dead one holds the value
        ("accept", "a", "y", None),
        ("reject", "a", "z", 0),  # replaces the head
        ("reject", "a", None, None),  # back to x, past the rejected y
        ("accept", "b", "y", 0),  # after a prior rollback to the empty cell
        ("revoke", "b", None, 0),
        ("accept", "b", "y", 0),
    ]
    check(prior, part)
    check(prior, part[:5], part[5:11], part[11:])
    check(prior, part, prefix_by_batch=True)


def test_contests_open_alternatives_that_resolves_close() -> None:
    part: list[Row] = [
        ("obs", "o", None, None),
        ("contest", "a", "x", 0),  # no head: fails (and admits the key)
        ("resolve", "a", "x", 0),  # no head: fails
        ("accept", "a", "x", 0),
        ("resolve", "a", "x", 0),  # not contested: fails
        ("contest", "a", "y", 0),
        ("contest", "a", "z", None),
        ("contest", "a", "y", 0),  # repeats an alternative: its support
        ("contest", "a", "x", 0),  # repeats the head: its support
        ("noop", "a", "y", 0),  # an alternative's value is not the head's: fails
        ("resolve", "a", "w", 0),  # neither the head nor an alternative: fails
        ("resolve", "a", "z", 0),  # the alternative wins: supersedes the contradicted head
        ("contest", "a", "y", 0),  # y was closed: a new alternative
        ("resolve", "a", "z", None),  # the head wins
        ("reject", "a", None, 0),  # back past the contradicted x: empty
        ("accept", "b", "x", None),
        ("contest", "b", "y", None),
        ("accept", "b", "y", None),  # supersedes the contested head, closes its alternative
        ("contest", "b", "x", 0),
        ("reject", "b", None, 0),  # closes the alternative x; back to x (the first version)
        ("contest", "c", "x", 0),
        ("accept", "c", "x", None),
        ("contest", "c", "y", 0),
        ("revoke", "c", "x", 0),  # revokes the contested head: empty
        ("accept", "c", "z", 0),
    ]
    check([], part)
    check(part[:8], part[8:])
    check(part[:6], part[6:13], part[13:], prefix_by_batch=True)


def test_prior_open_alternatives_close_grow_win_and_keep_their_place() -> None:
    prior: list[Row] = [("obs", "o", None, None)]
    for key in ("a", "b", "c", "d", "e"):
        prior += [("accept", key, "x", 0), ("contest", key, "y", 0), ("contest", key, "it's", None)]
    part: list[Row] = [
        ("contest", "e", "z", 0),  # the last key's list grows in place
        ("accept", "a", "w", 0),  # closes a's alternatives (a leaves the dict)
        ("contest", "b", "z", 0),  # b's list grows in place
        ("contest", "b", "y", 0),  # repeats a prior alternative
        ("resolve", "c", "it's", 0),  # a prior alternative (its value new to the batch) wins
        ("contest", "c", "q", 0),  # c re-enters the dict, after e
        ("reject", "d", None, 0),  # closes d's alternatives, rolls back to nothing
        ("contest", "a", "v", 0),  # a re-enters, after c
        ("noop", "e", "y", None),
    ]
    check(prior, part)
    check(prior, part[:4], part[4:])
    check(prior, part, prefix_by_batch=True)


def test_noops_and_supports_count_where_the_loop_counts() -> None:
    prior: list[Row] = [("obs", "o", None, None), ("accept", "a", "x", 0), ("accept", "b", "x", 0)]
    prior += [("noop", "b", None, 0), ("accept", "c", "it's", None)]
    part: list[Row] = [
        ("noop", "n", None, 0),  # a new key: created empty, the noop applied
        ("noop", "m", "x", None),
        ("accept", "c", "x", 0),
        ("noop", "a", "x", 0),  # a prior head's first support
        ("accept", "b", "x", None),  # a prior head with a count already
        ("noop", "a", None, None),
        ("noop", "b", "y", 0),  # another value: fails, names the head
        ("accept", "n", "y", 0),
        ("accept", "n", "y", 0),  # a version of this batch: support
        ("noop", "n", "y", None),
        ("contest", "n", "y", 0),
        ("revoke", "c", "it's", 0),  # names a value the head no longer has
        ("revoke", "c", "x", 0),  # back to it's: a head value none of the batch's rows names
        ("noop", "c", "x", 0),  # fails, naming it's
        ("revoke", "c", "x", 0),  # fails, naming it's
    ]
    check(prior, part)
    check(prior, part[:5], part[5:])
    check(prior, part, prefix_by_batch=True)


@pytest.mark.parametrize("step_cost", [0, None])
def test_a_hot_key_with_thousands_of_mixed_operations_in_one_batch(
    monkeypatch: pytest.MonkeyPatch, step_cost: int | None
) -> None:
    """One key's long run beside many short ones, at a size hypothesis does not reach: scanned step by
    step (``step_cost`` 0), and as apply_batch takes it (through the loop: too many steps to pay)."""
    if step_cost is not None:
        monkeypatch.setattr(_bulk, "_STEP_COST", step_cost)
    rng = np.random.default_rng(7)
    stream: list[Row] = [("obs", "o", None, None)]
    for _ in range(4000):
        op = OPS[0] if rng.random() < 0.6 else OPS[int(rng.integers(1, len(OPS)))]
        value = (
            f"v{rng.integers(3)}" if op in ("accept", "contest", "resolve") or rng.random() < 0.5 else None
        )
        key = "hot" if rng.random() < 0.5 else f"k{rng.integers(100)}"
        stream.append((op, key, value, 0 if rng.random() < 0.5 else None))
    check(stream[:1000], stream[1000:])


def check_batches_after_calls_undo_and_erase_equal_the_loop(data: st.DataObject) -> None:
    """Batches around per-call operations, undos and erasures (which move heads and blank values
    behind the batches' backs): what a batch keeps between batches must never go stale."""
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    for _ in range(3):
        part = data.draw(
            scripts(evidence_before=len(seq_graph.storage.evidence.ev_seq), max_size=30), label="batch"
        )
        part = uncited(part, seq_graph.storage.evidence.erased)
        loop(seq_graph, part)
        bulk_graph.apply_batch(batch(part))
        assert_same(bulk_graph, seq_graph)
        calls = data.draw(
            scripts(evidence_before=len(seq_graph.storage.evidence.ev_seq), max_size=8), label="calls"
        )
        calls = uncited(calls, seq_graph.storage.evidence.erased)
        assert loop(bulk_graph, calls) == loop(seq_graph, calls)
        seqs = [op.seq for op in seq_graph.operations()]
        undo: bool = data.draw(st.booleans(), label="undo")
        if seqs and undo:
            at = data.draw(st.sampled_from(seqs), label="undone")
            assert bulk_graph.undo(at) == seq_graph.undo(at)
        if len(seq_graph.storage.evidence.ev_seq) and data.draw(st.booleans(), label="erase"):
            evidence = (
                f"e{data.draw(st.integers(0, len(seq_graph.storage.evidence.ev_seq) - 1), label='erased')}"
            )
            if evidence_ok(seq_graph, evidence):
                assert bulk_graph.erase(evidence) == seq_graph.erase(evidence)
        assert_same(bulk_graph, seq_graph)


(
    test_batches_after_calls_undo_and_erase_equal_the_loop,
    test_batches_after_calls_undo_and_erase_equal_the_loop_at_length,
) = short_and_long(check_batches_after_calls_undo_and_erase_equal_the_loop, st.data(), short=30, full=100)


def evidence_ok(graph: ProvenanceGraph, evidence: str) -> bool:
    return int(evidence[1:]) not in graph.storage.evidence.erased


def uncited(rows_: list[Row], erased: set[int]) -> list[Row]:
    """``rows_`` without citations of erased evidence (which the loop and a batch both refuse)."""
    return [(*row[:3], None) if row[0] != "obs" and row[3] in erased else row for row in rows_]


def test_a_batch_citing_erased_evidence_is_refused_whole() -> None:
    g = ProvenanceGraph()
    loop(g, [("obs", "o", None, None), ("accept", "a", "x", 0), ("obs", "p", None, None)])
    g.erase("e0")
    before, state = g.to_bytes(), hidden(g)
    with pytest.raises(ValueError, match=r"row 1 \(evidence\): accept b: evidence e0 was erased"):
        g.apply_batch(batch([("accept", "b", "y", 1), ("accept", "b", "z", 0)]))
    assert g.to_bytes() == before
    assert hidden(g) == state
    reference = ProvenanceGraph.from_bytes(before)
    with pytest.raises(ValueError, match="evidence e0 was erased"):
        loop(reference, [("accept", "b", "y", 1), ("accept", "b", "z", 0)])


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (("frobnicate", "a", "x", None), "op"),
        (("accept", "", "x", None), "key"),
        (("accept", "a\nb", "x", None), "key"),
        (("noop", "a\u2028b", None, None), "key"),
        (("accept", "   ", "x", None), "key"),  # blank: ASCII without a control character, still refused
        (("accept", "caf\u00e9\t", "x", None), "key"),
        (("accept", None, "x", None), "key"),
        (("accept", "a", None, None), "value"),
        (("resolve", "a", None, None), "value"),
        (("accept", "a", "x", 99), "evidence"),
        (("accept", "a", "x", -1), "evidence"),
        (("accept", "a", "x", 2), "evidence"),  # evidence observed only after this row
        (("obs", None, None, None), "text"),
    ],
)
def test_an_invalid_row_is_named_and_nothing_is_written(bad: Row, field: str) -> None:
    def setup() -> ProvenanceGraph:
        g = ProvenanceGraph()
        loop(g, [("obs", "first", None, None), ("accept", "a", "x", 0), ("contest", "a", "y", 0)])
        return g

    g = setup()
    before, state = g.to_bytes(), hidden(g)
    rows_: list[Row] = [
        ("obs", "second", "doc", None),
        ("accept", "new.key", "v", 1),
        ("accept", "a", "z", None),
    ]
    rows_ += [bad, ("obs", "third", None, None), ("frobnicate", "a", "x", None)]
    with pytest.raises(ValueError, match=rf"row 3 \({field}\)"):
        g.apply_batch(batch(rows_))
    assert g.to_bytes() == before
    assert hidden(g) == state
    # the loop refuses the same row (and, unlike apply_batch, keeps the rows before it)
    reference = setup()
    with pytest.raises(ValueError):
        loop(reference, rows_)
    assert reference.seq == g.seq + 3


def test_a_row_is_named_for_its_first_refused_field() -> None:
    g = ProvenanceGraph()
    with pytest.raises(ValueError, match=r"row 1 \(op\)"):
        g.apply_batch(batch([("obs", "t", None, None), ("bogus", "", None, 5)]))
    with pytest.raises(ValueError, match=r"row 0 \(key\).*control characters"):
        g.apply_batch(batch([("accept", "a\tb", None, 5)]))
    assert g.to_bytes() == ProvenanceGraph().to_bytes()


def test_a_schema_mismatch_names_the_field() -> None:
    g = ProvenanceGraph()
    table = batch([("accept", "a", "x", None)])
    with pytest.raises(ValueError, match="'text' must be large_string"):
        g.apply_batch(table.cast(table.schema.set(1, pa.field("text", pa.string()))))
    with pytest.raises(ValueError, match="field 4 must be 'key'"):
        g.apply_batch(table.rename_columns(["op", "text", "source", "time", "name", "value", "evidence"]))
    with pytest.raises(ValueError, match="unexpected field 'extra'"):
        g.apply_batch(table.append_column("extra", pa.array([1])))
    with pytest.raises(ValueError, match="Table or RecordBatch"):
        g.apply_batch([("accept", "a", "x", None)])  # type: ignore[arg-type]
    assert g.to_bytes() == ProvenanceGraph().to_bytes()


def test_an_empty_batch_changes_nothing() -> None:
    g = ProvenanceGraph()
    loop(g, [("obs", "o", None, None), ("accept", "a", "x", 0)])
    before = g.to_bytes()
    result = g.apply_batch(batch([]))
    assert len(result.op) == 0 and result.first_evidence == 1
    assert g.to_bytes() == before


def test_a_bulk_built_graph_saves_and_loads_as_the_sequential_one(tmp_path: Any) -> None:
    stream: list[Row] = [("obs", "o0", "doc", "t0")]
    stream += [("accept", f"k{i % 7}", f"v{i % 3}", 0 if i % 2 else None) for i in range(40)]
    stream += [("contest", "k1", "w", 0), ("obs", "o1", None, None), ("resolve", "k1", "w", 1)]
    stream += [("revoke", "k2", None, None), ("reject", "k3", "r", 0), ("reject", "k4", None, None)]
    stream += [("accept", f"k{i % 5}", f"v{i % 2}", None) for i in range(20)]
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    loop(seq_graph, stream)
    bulk_graph.apply_batch(batch(stream))
    seq_graph.save(tmp_path / "seq.arrow")
    bulk_graph.save(tmp_path / "bulk.arrow")
    assert (tmp_path / "seq.arrow").read_bytes() == (tmp_path / "bulk.arrow").read_bytes()
    loaded = ProvenanceGraph.load(tmp_path / "bulk.arrow")
    assert loaded.to_bytes() == seq_graph.to_bytes()
    assert [(k, loaded.cell(k)) for k in loaded] == [(k, seq_graph.cell(k)) for k in seq_graph]


def test_the_benchmark_stream_gives_identical_state_bytes() -> None:
    """The benchmark's numpy-built stream and batches (every op, many rows per key) through both paths."""
    from benchmarks.bulk import measure

    result = measure(events=3000, keys=200, batch_rows=1500)
    assert result["identical"] == 1.0
    assert result["rows"] == 6000
    assert result["state_bytes"] > 0


def _dated(data: st.DataObject, script: list[Row], evidence_before: int, in_order: bool) -> list[Row]:
    """``script`` with a valid time on some observations (``("obs", text, source, time, valid)``):
    nondecreasing over the script when ``in_order``, else drawn at random."""
    out: list[Row] = []
    month = 1
    for row in script:
        if row[0] != "obs":
            out.append(row)
            continue
        valid = None
        if data.draw(st.integers(0, 2), label="dated") == 0:
            step = data.draw(st.integers(0, 2), label="months on")
            month = min(month + step, 12) if in_order else data.draw(st.integers(1, 12), label="month")
            valid = f"2025-{month:02d}-01"
        out.append((*row, valid))
    return out


def _as_log(rows_: list[Row], evidence_before: int) -> pa.Table:
    """Rows as a write log (``apply_log``'s input): each observation numbered after ``evidence_before``."""
    columns: dict[str, list[Any]] = {name: [] for name in WRITE_LOG_SCHEMA.names}
    seen = evidence_before
    for row in rows_:
        if row[0] == "obs":
            _, text, source, time, valid = row
            fields = {
                "text": text,
                "source": source or "user",
                "time": time,
                "evidence": seen,
                "valid_time": valid,
            }
            seen += 1
        else:
            op, key, value, ev = row
            fields = {"op": op, "key": key, "value": value, "evidence": ev}
        for name in WRITE_LOG_SCHEMA.names:
            columns[name].append(fields.get(name))
    columns["seq"] = list(range(1, len(rows_) + 1))
    return pa.table(columns, schema=WRITE_LOG_SCHEMA)


def _loop_dated(graph: ProvenanceGraph, rows_: list[Row]) -> None:
    for row in rows_:
        if row[0] == "obs":
            _, text, source, time, valid = row
            graph.observe(text, source or "user", time, valid)
        else:
            op, key, value, ev = row
            graph.apply(op, key, value, evidence=None if ev is None else f"e{ev}")


def check_dated_batches_equal_the_loop(data: st.DataObject) -> None:
    """Observations with valid times, in order or not, batch after batch through ``apply_log``: a batch
    in which accepts may enter history goes column-wise around them (each alone through the loop), or
    through the loop whole when they are many, the others column-wise; each leaves the graph the loop
    leaves."""
    in_order = data.draw(st.booleans(), label="in order")
    script = _dated(data, data.draw(scripts(max_size=80), label="script"), 0, in_order)
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    for part in split(data, script):
        before = len(bulk_graph.storage.evidence.ev_seq)
        _loop_dated(seq_graph, part)
        apply_log(bulk_graph, _as_log(part, before))
        assert_same(bulk_graph, seq_graph)


test_dated_batches_equal_the_loop, test_dated_batches_equal_the_loop_at_length = short_and_long(
    check_dated_batches_equal_the_loop, st.data(), short=100, full=400
)


@pytest.fixture
def loop_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each batch (or part of one) ``apply_batch`` sends through the per-call loop."""
    calls: list[int] = []
    real_loop = _bulk._loop

    def counted(graph: ProvenanceGraph, table: pa.Table, *args: Any) -> Any:
        calls.append(table.num_rows)
        return real_loop(graph, table, *args)

    monkeypatch.setattr(_bulk, "_loop", counted)
    return calls


def test_a_batch_with_a_few_late_accepts_is_split_around_them_and_equals_the_loop(
    loop_calls: list[int],
) -> None:
    """A batch whose accepts may enter history, a few of them, goes column-wise around them: each late
    accept alone through the loop. Its outcomes, op by op, and the graph are the loop's; a retraction
    after a late accept is given its own retracted value (replay's side column, sliced with the rows)."""
    valid = ["2025-06-01", "2025-09-01", "2025-01-01", "2025-03-01", "2025-12-01", "2024-01-01"]
    rows = [  # (op, key, value, evidence, the value a retraction retracts)
        ("accept", "k", "june", 0, None),
        ("accept", "p", "a", 0, None),
        ("reject", "p", None, 0, "gone"),  # retracts a value p does not hold: a noop, as in an undo's replay
        ("accept", "k", "sept", 1, None),
        ("accept", "k", "jan", 2, None),  # late: valid before the head it meets
        ("accept", "m", "march", 3, None),
        ("reject", "k", None, 4, "sept"),
        ("accept", "m", "old", 5, None),  # late again, on another key
        ("accept", "n", "dec", 4, None),
    ]
    graphs = []
    for _ in range(2):
        g = ProvenanceGraph()
        for i, at in enumerate(valid):
            g.observe(f"fact {i}", "user", None, at)
        graphs.append(g)
    seq_graph, bulk_graph = graphs
    looped = [
        seq_graph.apply(op, key, value, evidence=f"e{ev}", retracts=target)
        for op, key, value, ev, target in rows
    ]
    table = pa.table(
        {
            "op": [r[0] for r in rows],
            "text": [None] * len(rows),
            "source": [None] * len(rows),
            "time": [None] * len(rows),
            "key": [r[1] for r in rows],
            "value": [r[2] for r in rows],
            "evidence": [r[3] for r in rows],
        },
        schema=WRITE_BATCH_SCHEMA,
    )
    result = _bulk.apply_batch(bulk_graph, table, pa.array([r[4] for r in rows], pa.large_string()))
    assert loop_calls == [1, 1]  # the two late accepts, each alone
    assert [OPS[c] for c in result.op.tolist()] == [r.op for r in looped]
    assert result.applied.tolist() == [r.applied for r in looped]
    assert_same(bulk_graph, seq_graph)
    assert "jan" in [v.value for v in bulk_graph.versions("k")] and bulk_graph.head_value("m") == "march"
    assert bulk_graph.head_value("p") == "a"


def test_facts_dated_in_order_go_column_wise_and_a_late_one_through_the_loop(
    loop_calls: list[int],
) -> None:
    """Before, one dated fact sent every later batch of the graph through the loop. Now a batch goes
    column-wise unless one of its accepts may enter history (evidence valid before a version its key
    may hold), and both ways equal the loop."""
    rng = np.random.default_rng(5)
    script: list[Row] = []
    for i in range(3000):
        valid = f"2025-01-01T00:00:{i // 60 % 60:02d}" if i % 10 == 0 else None  # a tenth dated, in order
        script.append(("obs", f"fact {i}", None, None, valid))
        script.append(("accept", f"k{rng.integers(200)}", f"v{rng.integers(4)}", i))
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    _loop_dated(seq_graph, script)
    for start in range(0, len(script), 1000):
        apply_log(bulk_graph, _as_log(script[start : start + 1000], start // 2))
    assert_same(bulk_graph, seq_graph)
    assert loop_calls == [] and bulk_graph.storage.evidence.has_valid_times()
    # late facts go through the loop: valid before a version made earlier in the batch ...
    late = [
        ("obs", "the newest fact", None, None, "2025-12-31"),
        ("accept", "fresh.key", "new", 3000),
        ("obs", "an old fact", None, None, "2024-06-01"),
        ("accept", "fresh.key", "old", 3001),
    ]
    # ... or before a version made by an earlier batch (its own batch went column-wise)
    newer = [("obs", "a newer fact", None, None, "2026-01-01"), ("accept", "other.key", "new", 3002)]
    older = [("obs", "an older fact", None, None, "2024-01-01"), ("accept", "other.key", "old", 3003)]
    for part, evidence_before in ((late, 3000), (newer, 3002), (older, 3003)):
        _loop_dated(seq_graph, part)
        apply_log(bulk_graph, _as_log(part, evidence_before))
        assert_same(bulk_graph, seq_graph)
    assert loop_calls == [1, 1]  # only the late accept takes the loop; its batch's other rows go column-wise
    for key in ("fresh.key", "other.key"):  # the old value entered history; the head stayed
        assert "old" in [v.value for v in bulk_graph.versions(key)] and bulk_graph.head_value(key) == "new"
