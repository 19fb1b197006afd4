"""State files written by earlier schema versions still load, with the same views."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pmem.graph import ProvenanceGraph

FIXTURES = Path(__file__).parent / "fixtures"
#: view fields added after a schema version: its fixture's views do not have them
ADDED_SINCE: dict[int, set[str]] = {
    1: {"stale", "valid_time", "op_undo", "held", "retracts"},
    2: {"retracts"},
    3: {"retracts"},
    4: {"retracts"},
    5: {"retracts"},  # what a retraction retracts (schema 6, issue 41): read from what it acted on
}


def _view(obj: object, schema: int) -> dict:
    """A dataclass as its fixture stores it: as JSON (tuples read back as lists)."""
    return json.loads(
        json.dumps({k: v for k, v in dataclasses.asdict(obj).items() if k not in ADDED_SINCE[schema]})
    )


@pytest.mark.parametrize(
    ("schema", "name"),
    [
        (1, "arrow"),
        (2, "arrow"),
        (3, "arrow"),
        (4, "arrow"),
        (4, "directory"),
        (5, "arrow"),
        (5, "directory"),
    ],
)
def test_a_state_file_of_an_earlier_schema_loads_with_the_same_views(schema: int, name: str) -> None:
    g = ProvenanceGraph.load(FIXTURES / f"state-schema-{schema}.{name}")
    want = json.loads((FIXTURES / f"state-schema-{schema}.json").read_text())
    assert {k: _view(c, schema) for k, c in g.frontier().items()} == want["frontier"]
    assert {k: [dataclasses.asdict(v) for v in g.versions(k)] for k in g} == want["versions"]
    assert [_view(o, schema) for o in g.operations()] == want["operations"]
    assert [_view(g.evidence(f"e{i}"), schema) for i in range(len(want["evidence"]))] == want["evidence"]
    assert [dataclasses.asdict(d) for d in g.registry.decisions] == want["decisions"]
    assert {k: v for k, v in g.stats().items() if k not in ADDED_SINCE[schema]} == want["stats"]
    disclose = ("support", "alternatives", "history") if schema >= 2 else ()
    assert g.render(disclose=disclose) == want["render"]


def test_an_earlier_schema_is_saved_again_in_the_current_one(tmp_path: Path) -> None:
    from pmem.graph._persist._state import SCHEMA_VERSION, read_tables

    g = ProvenanceGraph.load(FIXTURES / "state-schema-1.arrow")
    g.save(tmp_path / "again.arrow")
    assert read_tables(tmp_path / "again.arrow")[1]["schema_version"] == str(SCHEMA_VERSION)
    assert ProvenanceGraph.load(tmp_path / "again.arrow").to_bytes() == g.to_bytes()
    e = g.observe("the budget now follows the mug")
    g.apply("accept", "project.budget", "$40k", e, depends_on=["mug.location"])  # writes go on
    assert g.cell("project.budget").stale == ()


@pytest.mark.parametrize("name", ["arrow", "directory"])
def test_a_schema_4_state_is_sealed_with_sha256_and_read_as_it_is(name: str) -> None:
    """Schema 4 (the same flat tables, sealed with SHA-256) is read as written: its digest checked, its
    tables as this code's, one key without loading it; saved again it is schema 5."""
    from pmem.graph import read_key_versions
    from pmem.graph._persist._sealing import SHA256
    from pmem.graph._persist._state import SCHEMA_VERSION, read_tables

    path = FIXTURES / f"state-schema-4.{name}"
    file = path / "metadata.arrow" if name == "directory" else path
    assert SHA256.mark in file.read_bytes()
    tables, meta = read_tables(path)
    assert meta["schema_version"] == "4"
    g = ProvenanceGraph.load(path)
    assert all(read_key_versions(path, key) == g.versions(key) for key in g)
    again, again_meta = read_tables_of(g)
    assert again_meta["schema_version"] == str(SCHEMA_VERSION)
    assert set(again) == set(tables) and all(again[t].equals(tables[t]) for t in tables if t != "operations")
    added = ["retracts", "retracts_erased"]  # schema 6's: the rest of the log is as written
    assert again["operations"].drop_columns(added).equals(tables["operations"])


def read_tables_of(g: ProvenanceGraph) -> tuple[dict, dict[str, str]]:
    from pmem.graph._persist._state import decode_tables

    return decode_tables(g.to_bytes())


@pytest.mark.parametrize("name", ["arrow", "directory"])
def test_a_schema_5_retraction_retracts_what_it_acted_on(name: str, tmp_path: Path) -> None:
    """Schema 5 logged a retraction without the value it retracts: each applied one is read as
    retracting the value of the version it acted on, so erasing or undoing the statement it retracted
    leaves it a noop there too (issue 41: the README's $30k, $50k, "$50k was an error")."""
    from pmem.graph._persist._state import SCHEMA_VERSION, read_tables

    g = ProvenanceGraph.load(FIXTURES / f"state-schema-5.{name}")
    assert [
        (o.requested, o.key, o.retracts) for o in g.operations() if o.requested in ("reject", "revoke")
    ] == [
        ("revoke", "the_project.budget", "$50k"),
        ("reject", "alice.city", "Paris"),
        ("reject", "door.colour", "red"),  # a replacement retracts what it replaced
        ("revoke", "room", "B"),  # named
        ("revoke", "nothing.here", None),  # no head: retracts nothing recorded
    ]
    fifty = next(o.evidence for o in g.operations("the_project.budget") if o.value == "$50k")
    paris = next(o.seq for o in g.operations("alice.city") if o.value == "Paris")
    erased = ProvenanceGraph.load(FIXTURES / f"state-schema-5.{name}")
    assert erased.erase(fifty).changed == {} and erased.head_value("the_project.budget") == "$30k"
    assert g.undo(paris).applied and g.head_value("alice.city") == "Lisbon"
    g.save(tmp_path / "again.arrow")  # saved again in the current schema, the values recorded
    assert read_tables(tmp_path / "again.arrow")[1]["schema_version"] == str(SCHEMA_VERSION)
    again = ProvenanceGraph.load(tmp_path / "again.arrow")
    assert again.to_bytes() == g.to_bytes()
    assert [o.retracts for o in again.operations()] == [o.retracts for o in g.operations()]
