"""The state as flat tables (schema 4): read by Polars alone, lossless for every feature, both layouts."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmem.graph import ProvenanceGraph, StateFileError
from pmem.graph._persist._tables import SCHEMAS

REPO = Path(__file__).resolve().parents[2]

#: What a user writes to get each key's current value from a saved state, with Polars and nothing else.
POLARS_ONLY = """
import json, sys
import polars as pl

state, layout = sys.argv[1], sys.argv[2]
if layout == "directory":
    versions = pl.scan_ipc(f"{state}/versions.arrow")
else:  # one file: a (table, payload) row per table, each payload an Arrow IPC stream
    outer = pl.read_ipc(state)
    versions = pl.read_ipc_stream(outer.filter(pl.col("table") == "versions")["payload"][0]).lazy()
heads = versions.filter(pl.col("status").is_in(["active", "contested"]) & pl.col("valid_to").is_null())
active = dict(heads.select("key", "value").collect().iter_rows())
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("pmem", "pyarrow"))
print(json.dumps({"active": active, "loaded": loaded}))
"""


def busy_graph(seed: int, events: int = 600) -> ProvenanceGraph:
    """Every operation, rollbacks to empty, contests left open, undo and erasure, over a few dozen keys."""
    rng = random.Random(seed)
    g = ProvenanceGraph()
    for i in range(events):
        key = f"k{rng.randrange(40)}"
        op = rng.choices(["accept", "contest", "reject", "revoke", "resolve", "noop"], [60, 10, 8, 8, 8, 6])[
            0
        ]
        value = rng.choice(["red", "green", "blue", f"v{i}"])
        if op in ("reject", "revoke", "noop") and rng.random() < 0.6:
            value = None
        if op == "resolve" and (cell := g.cell(key)) is not None and cell.alternatives:
            value = rng.choice([cell.value, *cell.alternatives])
        g.apply(op, key, value, evidence=g.observe(f"event {i}: {key} {op} {value}"))
        if i % 97 == 50:
            g.undo(next(o.seq for o in g.operations() if o.applied and o.op != "noop"))
        if i % 151 == 75:
            g.erase(f"e{rng.randrange(i)}")
    g.apply("accept", "gone", "soon", evidence=g.observe("gone is soon"))
    g.apply("revoke", "gone", evidence=g.observe("forget it"))  # an empty cell: no active value
    return g


@pytest.mark.parametrize("layout", ["directory", "file"])
def test_polars_alone_computes_each_keys_active_value_as_the_frontier(tmp_path: Path, layout: str) -> None:
    g = busy_graph(seed=4)
    path = tmp_path / "state"
    g.save(path, layout=layout)
    done = subprocess.run(
        [sys.executable, "-c", POLARS_ONLY, str(path), layout],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    out = json.loads(done.stdout)
    assert out["loaded"] == []  # Polars alone: neither pmem nor pyarrow was imported
    frontier = ProvenanceGraph.load(path).frontier()
    assert {key: cell.value for key, cell in frontier.items()} == out["active"]
    assert any(c.status == "contested" for c in frontier.values()) and len(frontier) < len(
        g
    )  # open and empty cells


def _views(g: ProvenanceGraph) -> tuple[object, ...]:
    disclose = ("support", "alternatives", "history")
    return (
        g.render(disclose=disclose),
        {k: g.versions(k) for k in g},
        list(g.operations()),
        sorted(g.edges()),
        g.stats(),
        g.seq,
        [g.evidence(f"e{i}") for i in range(g.stats()["evidence"])],
    )


_action = st.one_of(
    st.tuples(
        st.sampled_from(["accept", "accept", "contest", "reject", "revoke", "resolve", "noop"]),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from([None, "x", "y", "z"]),
        st.sampled_from(["user", "doc", "boss"]),
        st.sampled_from([None, "2026-01-01", "2025-06-01"]),
        st.sampled_from([None, ("a",), ("b",)]),
        st.sampled_from([None, "alias.a"]),
    ),
    st.tuples(st.sampled_from(["undo", "erase", "unmerge", "authority"]), st.integers(0, 30)),
)


def _act(g: ProvenanceGraph, step: int, action: tuple) -> None:
    """One action; a refused one (a ValueError for its arguments) changes nothing, as the API says."""
    try:
        if len(action) == 2:
            kind, n = action
            if kind == "undo":
                g.undo(n % (g.seq + 1))
            elif kind == "erase" and g.stats()["evidence"]:
                g.erase(f"e{n % g.stats()['evidence']}")
            elif kind == "unmerge":
                g.unmerge("alias.a")
            elif kind == "authority":
                g.set_authority("boss", n % 3)
            return
        op, key, value, source, valid, deps, alias = action
        if op in ("accept", "contest", "resolve") and value is None:
            value = "w"
        ev = g.observe(f"step {step}", source=source, valid_time=valid)
        g.apply(op, key, value, evidence=ev, depends_on=deps, alias=alias if key == "a" else None)
    except ValueError:
        pass


@settings(max_examples=80, deadline=None)
@given(st.lists(_action, max_size=30), st.lists(_action, max_size=8), st.booleans())
def test_every_feature_round_trips_and_a_loaded_graph_continues_the_same(
    tmp_path_factory: pytest.TempPathFactory, actions: list[tuple], more: list[tuple], authority: bool
) -> None:
    g = ProvenanceGraph(authority={"boss": 2} if authority else None)
    for i, action in enumerate(actions):
        _act(g, i, action)
    directory = tmp_path_factory.mktemp("state") / "s"
    g.save(directory, layout="directory")
    loaded = [ProvenanceGraph.from_bytes(g.to_bytes()), ProvenanceGraph.load(directory)]
    for h in loaded:
        assert _views(h) == _views(g)
        assert h.to_bytes() == g.to_bytes()
    for i, action in enumerate(more, start=len(actions)):
        for graph in (g, *loaded):
            _act(graph, i, action)
    assert all(_views(h) == _views(g) and h.to_bytes() == g.to_bytes() for h in loaded)


def test_both_layouts_hold_the_same_tables(tmp_path: Path) -> None:
    from pmem.graph._persist._sealing import FILE_DIGEST_KEY
    from pmem.graph._persist._state import read_tables

    g = busy_graph(seed=9, events=200)
    g.save(tmp_path / "f")
    g.save(tmp_path / "d", layout="directory")
    (file_tables, file_meta), (dir_tables, dir_meta) = (
        read_tables(tmp_path / "f"),
        read_tables(tmp_path / "d"),
    )
    assert set(file_tables) == set(dir_tables) == set(SCHEMAS)
    for name, table in file_tables.items():
        assert table.equals(dir_tables[name]), name
        assert table.schema.equals(SCHEMAS[name]), name
    same = {k: v for k, v in file_meta.items() if k in dir_meta and not k.startswith(FILE_DIGEST_KEY)}
    assert same and all(dir_meta[k] == v for k, v in same.items())


def test_a_directory_state_replaces_a_directory_state_and_nothing_else(tmp_path: Path) -> None:
    g = busy_graph(seed=1, events=50)
    target = tmp_path / "s"
    g.save(target, layout="directory")
    g.apply("accept", "k1", "changed")
    g.save(target, layout="directory")  # over the old state: the new one, no leftovers beside it
    assert ProvenanceGraph.load(target).head_value("k1") == "changed"
    # no leftovers beside it but the lock its second save took (a save over a state the graph saved
    # before checks, under that lock, that no one replaced it meanwhile: pmem.graph._persist._guard)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.lock", "s"]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="holds no state"):
        g.save(tmp_path / "notes", layout="directory")
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"
    (tmp_path / "plain").write_text("a file")
    with pytest.raises(FileExistsError, match="is a file"):
        g.save(tmp_path / "plain", layout="directory")
    with pytest.raises(IsADirectoryError, match="layout='directory'"):
        g.save(target)  # the file layout never replaces a directory
    with pytest.raises(ValueError, match="layout must be one of file, directory"):
        g.save(tmp_path / "x", layout="parquet")  # type: ignore[arg-type]
    with pytest.raises(StateFileError, match=r"without metadata\.arrow"):
        ProvenanceGraph.load(tmp_path / "notes")


def test_every_column_is_documented_in_docs_core() -> None:
    """docs/core.md has a table per state table listing each column: a column added here and not there
    fails (and the reverse)."""
    text = (REPO / "docs" / "core.md").read_text()
    for name, schema in SCHEMAS.items():
        section = re.search(rf"^#### `{name}`\n(.*?)(?=^#### |^## |\Z)", text, re.S | re.M)
        assert section is not None, f"docs/core.md has no '#### `{name}`' section"
        documented = re.findall(r"^\| `(\w+)` \|", section.group(1), re.M)
        assert documented == schema.names, name


def test_a_state_written_by_another_tool_with_its_own_code_order_loads(tmp_path: Path) -> None:
    """Status names are what a state means: a writer that orders the dictionary otherwise is read right."""
    from pmem.graph._persist._state import read_tables
    from pmem.graph._persist._tables import build_graph

    g = busy_graph(seed=2, events=120)
    tables, meta = read_tables(_saved(g, tmp_path))
    status = tables["versions"].column("status").combine_chunks()
    reordered = status.cast(pa.string()).dictionary_encode()  # first-appearance order
    assert reordered.dictionary.to_pylist() != status.dictionary.to_pylist()
    i = tables["versions"].schema.get_field_index("status")
    tables["versions"] = tables["versions"].set_column(
        i, tables["versions"].schema.field(i), reordered.cast(status.type)
    )
    assert _views(build_graph(ProvenanceGraph, tables, meta, None)) == _views(g)


def _saved(g: ProvenanceGraph, tmp_path: Path) -> Path:
    path = tmp_path / "state"
    g.save(path)
    return path


@pytest.mark.parametrize("layout", ["directory", "file"])
def test_one_key_is_read_without_loading_the_graph_with_the_graphs_versions(
    tmp_path: Path, layout: str
) -> None:
    from pmem.graph import read_key_versions

    g = busy_graph(seed=6, events=300)
    path = tmp_path / "state"
    g.save(path, layout=layout)
    for key in g:
        assert read_key_versions(path, key) == g.versions(key), key
    assert read_key_versions(path, "no.such.key") == []
    with pytest.raises(StateFileError, match="file not found"):
        read_key_versions(tmp_path / "missing", "k1")
