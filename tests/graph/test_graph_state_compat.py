"""State files written by earlier schema versions still load, with the same views."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pmem.graph import ProvenanceGraph

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("schema", [1])
def test_a_state_file_of_an_earlier_schema_loads_with_the_same_views(schema: int) -> None:
    g = ProvenanceGraph.load(FIXTURES / f"state-schema-{schema}.arrow")
    want = json.loads((FIXTURES / f"state-schema-{schema}.json").read_text())
    assert {k: dataclasses.asdict(c) for k, c in g.frontier().items()} == want["frontier"]
    assert {k: [dataclasses.asdict(v) for v in g.versions(k)] for k in g} == want["versions"]
    assert [dataclasses.asdict(o) for o in g.operations()] == want["operations"]
    assert [dataclasses.asdict(g.evidence(f"e{i}")) for i in range(len(want["evidence"]))] == want["evidence"]
    assert [dataclasses.asdict(d) for d in g.registry.decisions] == want["decisions"]
    assert g.stats() == want["stats"]
    assert g.render() == want["render"]
