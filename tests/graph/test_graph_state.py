"""State files: lossless, deterministic, atomic, and refused when damaged."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from pmem.graph import KeyRegistry, ProvenanceGraph, StateFileError


def sample() -> ProvenanceGraph:
    g = ProvenanceGraph()
    g.apply("accept", "budget", "$30k", evidence=g.observe("Budget is $30k", time="2024-01-01"))
    g.apply("accept", "budget", "$50k", evidence=g.observe("Raised to $50k", source="email"))
    g.apply("reject", "budget", evidence=g.observe("$50k was an error"))
    g.apply("accept", "room", "A")
    g.apply("contest", "room", "B")
    g.apply("resolve", "room", "zzz")  # recorded failure
    g.registry.resolve("user.personal_best_5k")
    g.registry.resolve("user.personal_best_5k_time")
    return g


def test_round_trip_and_identity_decisions(tmp_path):
    g = sample()
    g.save(tmp_path / "s")
    h = ProvenanceGraph.load(tmp_path / "s")
    assert h.render(disclose=("support", "alternatives", "history")) == g.render(
        disclose=("support", "alternatives", "history")
    )
    assert h.registry.decisions == g.registry.decisions
    assert h.registry.keys == g.registry.keys
    assert h.registry.resolve("user.personal_best_5k_time") == "user.personal_best_5k"
    assert h.evidence("e0").time == "2024-01-01" and h.evidence("e1").source == "email"


def test_file_is_plain_arrow(tmp_path):
    sample().save(tmp_path / "s.arrow")
    outer = pa.ipc.open_file(tmp_path / "s.arrow").read_all()
    assert outer.schema.metadata[b"format"] == b"pmem-state"
    tables = dict(zip(outer["table"].to_pylist(), outer["payload"].to_pylist(), strict=True))
    versions = pa.ipc.open_stream(tables["versions"]).read_all()
    assert versions.num_rows == 4
    assert versions["value"].to_pylist()[:2] == ["$30k", "$50k"]


def test_same_ops_same_bytes(tmp_path):
    sample().save(tmp_path / "a")
    sample().save(tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_damaged_file_is_refused_with_its_name(tmp_path, damage):
    path = tmp_path / "state.arrow"
    sample().save(path)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        # alter one byte inside a payload (past the schema), leaving the Arrow framing intact
        i = data.find(b"$30k")
        data[i + 1] ^= 0xFF
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not an arrow file at all" * 10)
    path.write_bytes(bytes(data))
    with pytest.raises(StateFileError, match=r"state\.arrow"):
        ProvenanceGraph.load(path)


def test_missing_file_and_other_arrow_file(tmp_path):
    with pytest.raises(StateFileError, match="not found"):
        ProvenanceGraph.load(tmp_path / "nope")
    other = tmp_path / "other.arrow"
    with pa.ipc.new_file(other, pa.schema([("x", pa.int64())])) as w:
        w.write_table(pa.table({"x": [1]}))
    with pytest.raises(StateFileError, match="format"):
        ProvenanceGraph.load(other)


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "state"
    sample().save(path)
    good = path.read_bytes()
    g = sample()
    g.apply("accept", "budget", "$70k")

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        g.save(path)
    assert path.read_bytes() == good  # the old state is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["state"]  # no temp file left behind


def test_custom_registry_survives_load(tmp_path):
    reg = KeyRegistry(threshold=0.9)
    g = ProvenanceGraph(registry=reg)
    g.registry.resolve("a.b")
    g.save(tmp_path / "s")
    h = ProvenanceGraph.load(tmp_path / "s")
    assert h.registry.threshold == 0.9 and h.registry.keys == ["a.b"]
