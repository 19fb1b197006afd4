"""State files written by earlier schema versions still load, with the same views."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pmem.graph import ProvenanceGraph

FIXTURES = Path(__file__).parent / "fixtures"
#: view fields added after a schema version: its fixture's views do not have them
ADDED_SINCE: dict[int, set[str]] = {1: {"stale", "valid_time", "op_undo", "held"}, 2: set(), 3: set()}


def _view(obj: object, schema: int) -> dict:
    """A dataclass as its fixture stores it: as JSON (tuples read back as lists)."""
    return json.loads(
        json.dumps({k: v for k, v in dataclasses.asdict(obj).items() if k not in ADDED_SINCE[schema]})
    )


@pytest.mark.parametrize("schema", [1, 2, 3])
def test_a_state_file_of_an_earlier_schema_loads_with_the_same_views(schema: int) -> None:
    g = ProvenanceGraph.load(FIXTURES / f"state-schema-{schema}.arrow")
    want = json.loads((FIXTURES / f"state-schema-{schema}.json").read_text())
    assert {k: _view(c, schema) for k, c in g.frontier().items()} == want["frontier"]
    assert {k: [dataclasses.asdict(v) for v in g.versions(k)] for k in g} == want["versions"]
    assert [dataclasses.asdict(o) for o in g.operations()] == want["operations"]
    assert [_view(g.evidence(f"e{i}"), schema) for i in range(len(want["evidence"]))] == want["evidence"]
    assert [dataclasses.asdict(d) for d in g.registry.decisions] == want["decisions"]
    assert {k: v for k, v in g.stats().items() if k not in ADDED_SINCE[schema]} == want["stats"]
    disclose = ("support", "alternatives", "history") if schema >= 2 else ()
    assert g.render(disclose=disclose) == want["render"]


def test_an_earlier_schema_is_saved_again_in_the_current_one(tmp_path: Path) -> None:
    from pmem.graph._state import SCHEMA_VERSION, read_tables

    g = ProvenanceGraph.load(FIXTURES / "state-schema-1.arrow")
    g.save(tmp_path / "again.arrow")
    assert read_tables(tmp_path / "again.arrow")[1]["schema_version"] == str(SCHEMA_VERSION)
    assert ProvenanceGraph.load(tmp_path / "again.arrow").to_bytes() == g.to_bytes()
    e = g.observe("the budget now follows the mug")
    g.apply("accept", "project.budget", "$40k", e, depends_on=["mug.location"])  # writes go on
    assert g.cell("project.budget").stale == ()
