"""The graph's integer columns are typed storage (int64 ``array``), whatever path wrote or rebuilt them.

Typed columns are what makes a large graph small (no Python int per entry) and what apply_batch reads and
extends as numpy blocks; a path that left a plain list behind would still be correct, only large and slow,
which no equality test notices.
"""

from __future__ import annotations

from array import array

import pyarrow as pa
import pytest

from pmem.graph import ProvenanceGraph, StateFileError
from pmem.graph._persist._state import build_graph, decode_tables

#: every integer column of the graph: the typed ones a new graph starts with must stay typed
INTEGER_COLUMNS = [attr for attr, column in vars(ProvenanceGraph()).items() if isinstance(column, array)]


def untyped(graph: ProvenanceGraph) -> list[str]:
    return [
        attr
        for attr in INTEGER_COLUMNS
        if not (isinstance(getattr(graph, attr), array) and getattr(graph, attr).typecode == "q")
    ]


def writes(graph: ProvenanceGraph, n: int) -> None:
    """Every op type, so that every column gets an entry (tombstones, support edges, alternatives)."""
    for i in range(n):
        key = f"k{i % 3}"
        ev = graph.observe(f"text {i}", "doc" if i % 2 else "user")
        graph.apply("accept", key, f"v{i}", evidence=ev)
        graph.apply("accept", key, f"v{i}", evidence=graph.observe(f"again {i}"))
        graph.apply("contest", key, f"w{i}", evidence=graph.observe(f"maybe w{i}"))
        graph.apply("resolve", key, f"v{i}", evidence=graph.observe(f"it is v{i}"))
        graph.apply("revoke", key, evidence=graph.observe("withdrawn"))
        graph.apply("reject", key, evidence=graph.observe("wrong"))
        graph.apply("noop", key, evidence=graph.observe("nothing new"))


def test_integer_columns_are_typed_after_every_write_path_and_still_grow() -> None:
    graph = ProvenanceGraph()
    assert untyped(graph) == []
    writes(graph, 4)
    assert untyped(graph) == []
    assert (
        len(graph.storage.edges.tb_version) > 0 and len(graph.storage.edges.sb_version) > 0
    )  # the stream reached every column

    loaded = ProvenanceGraph.from_bytes(graph.to_bytes())
    assert untyped(loaded) == []
    writes(loaded, 2)  # a loaded graph grows (no column is pinned by a view left from loading)

    graph.undo(next(graph.operations("k0")).seq)  # re-derives k0: its edges are rebuilt
    graph.erase("e1")
    assert untyped(graph) == []
    writes(graph, 1)

    g = ProvenanceGraph()
    g.apply("accept", "anna.city", "Oslo", evidence=g.observe("Anna lives in Oslo"))
    g.apply("accept", "anna.city", "Rome", evidence=g.observe("Ana moved to Rome"), alias="ana.city")
    g.unmerge("ana.city")
    assert untyped(g) == [] and g.head_value("ana.city") == "Rome"


def test_apply_batch_extends_typed_columns_and_leaves_them_growable() -> None:
    from tests.graph.test_graph_bulk import batch

    graph = ProvenanceGraph()
    rows = [("obs", "t0", None, None), ("accept", "a", "x", 0), ("obs", "t1", "doc", None)]
    rows += [("accept", "a", "y", 1), ("contest", "a", "z", 1), ("accept", "b", "x", None)]
    graph.apply_batch(batch(rows))
    assert untyped(graph) == []
    graph.apply("accept", "b", "y", evidence=graph.observe("b is y"))  # appends after the batch's views
    graph.to_bytes()
    graph.apply_batch(batch([("obs", "t2", None, None), ("reject", "b", None, 3)]))
    assert untyped(graph) == [] and graph.head_value("b") == "x"


def test_a_state_with_nulls_in_an_integer_column_is_refused_naming_it() -> None:
    graph = ProvenanceGraph()
    writes(graph, 1)
    tables, meta = decode_tables(graph.to_bytes())
    versions = tables["versions"]
    i = versions.schema.get_field_index("valid_from")
    tables["versions"] = versions.set_column(  # the field as declared (not null), holding nulls
        i, versions.schema.field(i), pa.array([None] * versions.num_rows, type=pa.int64())
    )
    with pytest.raises(StateFileError, match="'valid_from' of table 'versions' must hold no nulls, found"):
        build_graph(ProvenanceGraph, tables, meta, None)
