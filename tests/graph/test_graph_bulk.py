"""ProvenanceGraph.apply_batch leaves the graph exactly as the row-by-row observe/apply loop does."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmem.graph import OPS, WRITE_BATCH_SCHEMA, OpResult, ProvenanceGraph

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
    """Write state that to_bytes() does not show but later calls depend on."""
    heads, newest = graph.storage.k_head.tolist(), graph.storage.k_newest.tolist()
    cells = list(graph.storage.kid.items())
    return (
        graph._last_eid,
        graph._last_ev,
        graph.seq,
        heads,
        newest,
        cells,
        graph.storage.source_code,
        graph.storage.open_alts,
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


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_batches_equal_the_loop(data: st.DataObject) -> None:
    prefix = data.draw(rows(max_size=30), label="prefix")
    # with source authority an accept may be lowered to a contest: the batch must lower it too
    authority = data.draw(st.sampled_from([None, {"user": 2, "doc": 0, "tool": 1}]), label="authority")
    seq_graph, bulk_graph = ProvenanceGraph(authority=authority), ProvenanceGraph(authority=authority)
    loop(seq_graph, prefix)
    loop(bulk_graph, prefix)
    n_ev = len(seq_graph.storage.ev_seq)
    stream = data.draw(rows(evidence_before=n_ev, max_size=60), label="stream")
    for part in split(data, stream):
        expected = loop(seq_graph, part)
        first = len(bulk_graph.storage.ev_seq)
        result = bulk_graph.apply_batch(as_input(data, part))
        assert [OPS[c] for c in result.op.tolist()] == [r.op for r in expected]
        assert result.applied.tolist() == [r.applied for r in expected]
        assert result.first_evidence == first
        assert result.op.dtype == np.int8 and result.applied.dtype == np.bool_
        assert bulk_graph.to_bytes() == seq_graph.to_bytes()
        assert hidden(bulk_graph) == hidden(seq_graph)
    # later calls behave the same: the fast path, lazy closes, records, sources, dict orders
    suffix = data.draw(rows(evidence_before=len(seq_graph.storage.ev_seq), max_size=20), label="suffix")
    assert loop(bulk_graph, suffix) == loop(seq_graph, suffix)
    assert bulk_graph.to_bytes() == seq_graph.to_bytes()
    assert hidden(bulk_graph) == hidden(seq_graph)
    last = seq_graph._last_eid
    if last is not None:  # the id observe returned last takes the same fast path afterwards
        assert bulk_graph.apply("noop", "a", evidence=last) == seq_graph.apply("noop", "a", evidence=last)
        assert bulk_graph.to_bytes() == seq_graph.to_bytes()


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (("frobnicate", "a", "x", None), "op"),
        (("accept", "", "x", None), "key"),
        (("accept", "a\nb", "x", None), "key"),
        (("noop", "a\u2028b", None, None), "key"),
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
