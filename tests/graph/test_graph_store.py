"""The graph's columns have one owner, GraphStore: nothing reaches them as ProvenanceGraph privates."""

from __future__ import annotations

import re
from pathlib import Path

from pmem.graph import ProvenanceGraph
from pmem.graph._store import GraphStore

PACKAGE = Path(__file__).resolve().parents[2] / "pmem" / "graph"


def test_no_module_reads_a_column_as_a_private_attribute_of_a_graph() -> None:
    columns = [name for name in vars(GraphStore()) if not name.startswith("_")]
    assert {"v_key", "ev_text", "op_code", "k_head", "authority_log", "seq"} <= set(columns)
    private = re.compile(rf"\.\_({'|'.join(columns)})\b")
    found = {
        path.name: sorted(set(private.findall(path.read_text())))
        for path in sorted(PACKAGE.glob("*.py"))
        if private.search(path.read_text())
    }
    assert found == {}


def test_a_graph_keeps_no_column_of_its_own() -> None:
    graph = ProvenanceGraph(authority={"boss": 2})
    graph.apply("accept", "budget", "$30k", evidence=graph.observe("budget is $30k", source="boss"))
    own = set(vars(graph))
    assert own.isdisjoint(f"_{name}" for name in vars(graph.storage))
    assert graph.storage.key_names == ["budget"] and graph.storage.authority == {"boss": 2}
