"""A state's metadata must agree with its tables (issue 41, item 5): an entry edited and the state sealed
again (a digest sits beside the data: anyone can reseal) is refused with a StateFileError naming the file
and the entry, in both layouts, never loaded as another graph.

Before, a state resealed with ``seq`` 5999 loaded: new writes reused seq 6000 and ``as_of(6000)`` missed
the newest value; a garbage ``registry`` loaded too."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from statefuzz import edited_entries, reseal

from pmem.graph import ProvenanceGraph, StateFileError
from pmem.graph._persist._sealing import _file_digest, _find_digest


def _graph() -> ProvenanceGraph:
    g = ProvenanceGraph(authority={"manager": 2})
    g.apply("accept", "budget", "$30k", evidence=g.observe("The budget is $30k.", source="manager"))
    g.apply("accept", "budget", "$50k", evidence=g.observe("Budget raised to $50k."))
    g.set_authority("rumour", 0)
    g.apply("reject", "budget", evidence=g.observe("The $50k figure was an error.", source="manager"))
    g.registry.resolve("project.budget")
    return g


def _resealed_file(data: bytes, changed: dict[str, str | None]) -> bytes:
    """A file-layout state with its metadata table's entries ``changed`` (None: dropped), sealed with a
    digest that checks out."""
    outer = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    names = outer.column("table").to_pylist()
    payloads = outer.column("payload").to_pylist()
    at = names.index("metadata")
    meta = pa.ipc.open_stream(payloads[at]).read_all()
    found = dict(zip(meta.column("name").to_pylist(), meta.column("value").to_pylist(), strict=True))
    table = edited_entries(found, changed)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    payloads[at] = sink.getvalue().to_pybytes()
    rebuilt = pa.table([pa.array(names), pa.array(payloads, pa.large_binary())], schema=outer.schema)
    out_sink = pa.BufferOutputStream()
    with pa.ipc.new_file(out_sink, outer.schema) as writer:  # its digest's two slots still as they were
        writer.write_table(rebuilt)
    out = bytearray(out_sink.getvalue().to_pybytes())
    found_digest = _find_digest(out)
    assert found_digest is not None
    algorithm, slots = found_digest
    for slot in slots:
        out[slot : slot + algorithm.hex_digits] = algorithm.placeholder
    digest = _file_digest(out, slots, algorithm).encode()
    for slot in slots:
        out[slot : slot + algorithm.hex_digits] = digest
    return bytes(out)


def _edited(tmp_path: Path, layout: str, changed: dict[str, str | None]) -> Path:
    """The sample graph saved in ``layout``, its metadata ``changed`` and resealed."""
    if layout == "file":
        path = tmp_path / "state.arrow"
        _graph().save(path)
        path.write_bytes(_resealed_file(path.read_bytes(), changed))
    else:
        path = tmp_path / "state"
        _graph().save(path, layout="directory")
        reseal(path / "metadata.arrow", changed)
    return path


def test_the_resealing_helpers_keep_a_state_that_loads(tmp_path: Path) -> None:
    """With no change, a resealed state loads as saved (so a refusal below is the edit's)."""
    assert _graph().seq == 6  # 3 observations, 3 operations (an authority setting is no arrival)
    for layout in ("file", "directory"):
        (tmp_path / layout).mkdir()
        path = _edited(tmp_path / layout, layout, {})
        assert ProvenanceGraph.load(path).to_bytes() == _graph().to_bytes()


@pytest.mark.parametrize("layout", ["file", "directory"])
@pytest.mark.parametrize(
    ("changed", "said"),
    [
        pytest.param({"seq": "5"}, "seq is 5, but its tables hold 6 arrivals", id="seq-one-short"),
        pytest.param({"seq": "5999"}, "seq is 5999, but its tables hold 6 arrivals", id="seq-5999"),
        pytest.param({"seq": "-1"}, "seq is '-1', not a non-negative integer", id="seq-negative"),
        pytest.param({"seq": " 6"}, "seq is ' 6'", id="seq-padded"),
        pytest.param({"seq": None}, "seq is None", id="seq-missing"),
        pytest.param({"registry": "{}"}, "registry is {}, not null or the settings", id="registry-empty"),
        pytest.param({"registry": '"garbage"'}, 'registry is "garbage"', id="registry-string"),
        pytest.param({"registry": "garbage"}, "registry is not JSON", id="registry-not-json"),
        pytest.param(
            {"registry": '{"threshold": "high", "embedding": "e", "confirm": "c"}'},
            'registry threshold is "high", of the wrong type',
            id="registry-threshold-text",
        ),
        pytest.param({"registry": "null"}, "registry is null, but its identity tables", id="registry-null"),
        pytest.param({"registry": None}, "no 'registry' entry", id="registry-missing"),
        pytest.param({"authority": "[]"}, "authority is [], not the settings", id="authority-list"),
        pytest.param(
            {
                "authority": '{"configured": true, "default": 1, "from_start": true, "settings": [[99, "x", 1]]}'
            },
            "authority settings",
            id="authority-after-the-last-seq",
        ),
        pytest.param(
            {"authority": '{"configured": true, "default": "1", "from_start": true, "settings": []}'},
            "has a setting of the wrong type",
            id="authority-default-text",
        ),
        pytest.param({"statuses": json.dumps(["active"])}, "statuses are", id="statuses-cut"),
        pytest.param({"edge_kinds": "[]"}, "edge_kinds are", id="edge-kinds-empty"),
    ],
)
def test_metadata_its_tables_contradict_is_refused(
    tmp_path: Path, layout: str, changed: dict[str, str | None], said: str
) -> None:
    path = _edited(tmp_path, layout, changed)
    named = "metadata.arrow" if layout == "directory" else "state.arrow"
    with pytest.raises(StateFileError, match=named) as caught:
        ProvenanceGraph.load(path)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_the_file_and_its_metadata_table_must_name_one_schema(tmp_path: Path) -> None:
    """The file layout names its schema twice (the file's metadata, read to choose the reader, and the
    metadata table): a file whose two disagree is refused."""
    path = _edited(tmp_path, "file", {"schema_version": "4"})
    with pytest.raises(StateFileError, match="disagree on schema_version"):
        ProvenanceGraph.load(path)
