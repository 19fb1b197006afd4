"""The write log and the sharded state (``pmem.graph.shards``): split by key owner, the union is the graph."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shardlogs import loop_graph, random_log, sharded_state
from statefuzz import digest_of, entries, reseal

from pmem.graph import ProvenanceGraph, StateFileError, apply_log, partitions_of
from pmem.graph._persist._state import _write_sealed
from pmem.graph.seams import LogSegment, conform, localize, read_segment, split_log
from pmem.graph.shards import INDEX, LOG, part_name, union_log


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), partitions=st.integers(1, 4))
def test_a_log_split_by_owner_holds_every_row_and_gives_each_part_its_keys(
    seed: int, partitions: int
) -> None:
    log = random_log(seed, 120)
    assert apply_log(ProvenanceGraph(), log).dtype == np.bool_
    whole = ProvenanceGraph()
    apply_log(whole, log)
    assert whole.to_bytes() == loop_graph(log).to_bytes()
    pieces = split_log(log, partitions)
    # every row is in some part; the same seq is the same row wherever it is
    merged = pa.concat_tables(pieces)
    seqs = merged.column("seq").to_numpy()
    assert sorted(set(seqs.tolist())) == list(range(1, log.num_rows + 1))
    for p, piece in enumerate(pieces):
        ops = piece.filter(pa.compute.is_valid(piece.column("op")))
        assert (partitions_of(ops.column("key"), partitions) == p).all()
        # each part alone is a graph of its keys: the same cells as the whole graph's
        part = ProvenanceGraph()
        apply_log(part, localize(piece, 0))
        keys = set(ops.column("key").to_pylist())
        assert _same_values(part, whole, keys)


def _same_values(part: ProvenanceGraph, whole: ProvenanceGraph, keys: set[str]) -> bool:
    """Versions name their evidence and predecessors by id, which a part numbers its own way: compare
    what they hold, key by key."""
    return all(
        [(v.value, v.status, v.support) for v in part.versions(key)]
        == [(v.value, v.status, v.support) for v in whole.versions(key)]
        for key in keys
    ) and part.keys() == sorted(keys)


def test_an_observation_goes_to_each_part_citing_it_or_by_its_number() -> None:
    log = conform(
        pa.table(
            {
                "op": [None, "accept", "accept", None, None, "accept"],
                "text": ["one", None, None, "two", "three", None],
                "key": [None, "a", "d", None, None, "a"],
                "value": [None, "1", "2", None, None, "3"],
                "evidence": [0, 0, 0, 1, 2, None],
                "seq": [1, 2, 3, 4, 5, 6],
            }
        )
    )
    owner_a, owner_b = partitions_of(pa.array(["a", "d"]), 2).tolist()
    assert owner_a != owner_b  # (the test needs the two keys apart)
    pieces = split_log(log, 2)
    # evidence 0, cited by a and d, is in both parts; 1 and 2, cited by nobody, in parts 1 % 2 and 2 % 2
    expected = {owner_a: {1, 2, 6}, owner_b: {1, 3}}
    expected[1] |= {4}
    expected[0] |= {5}
    assert [set(piece.column("seq").to_pylist()) for piece in pieces] == [expected[0], expected[1]]
    assert all(piece.column("seq").to_pylist() == sorted(piece.column("seq").to_pylist()) for piece in pieces)
    with pytest.raises(ValueError, match="cites evidence 7"):
        split_log(log.set_column(6, "evidence", pa.array([0, 7, 0, 1, 2, None], pa.int64())), 2)


def test_the_union_of_a_sharded_state_is_the_graph_and_damage_is_refused(tmp_path: Path) -> None:
    log = random_log(7, 400)
    root = sharded_state(tmp_path, log, 3)
    assert union_log(root).equals(log)
    assert ProvenanceGraph.load(root).to_bytes() == loop_graph(log).to_bytes()
    # a segment's rows altered and resealed: the index's digest no longer names it
    segment = sorted((root / part_name(0) / LOG).glob("*.arrow"))[0]
    rows = read_segment(segment)
    shutil.copyfile(segment, tmp_path / "kept.arrow")
    segment.unlink()
    redone = LogSegment(segment)
    redone.write(rows.set_column(2, "source", pa.array(["someone"] * rows.num_rows)))
    redone.close()
    with pytest.raises(StateFileError, match="digest is not the one"):
        ProvenanceGraph.load(root)
    shutil.copyfile(tmp_path / "kept.arrow", segment)
    # a bit flipped in the index
    index = root / INDEX
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 1
    kept = index.read_bytes()
    index.write_bytes(bytes(data))
    with pytest.raises(StateFileError):
        ProvenanceGraph.load(root)
    index.write_bytes(kept)
    assert ProvenanceGraph.load(root).to_bytes() == loop_graph(log).to_bytes()


def test_a_union_with_a_hole_is_refused(tmp_path: Path) -> None:
    log = random_log(3, 200)
    hole = log.filter(pa.array(np.arange(log.num_rows) != 50))
    root = sharded_state(tmp_path, hole, 2, rows=log.num_rows)  # the index claims the whole log's rows
    with pytest.raises(StateFileError, match="do not hold every seq"):
        ProvenanceGraph.load(root)


def test_a_segment_is_sealed_and_renamed_only_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "log-000000000001.arrow"
    segment = LogSegment(path)
    segment.write(random_log(1, 30))
    assert not path.exists()  # written under a temporary name until closed
    segment.close()
    assert read_segment(path).equals(random_log(1, 30))
    abandoned = LogSegment(tmp_path / "log-000000000031.arrow")
    abandoned.abandon()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_sharded_state_loads_only_whole(tmp_path: Path) -> None:
    """Issue 41, item 4: each part's tables are the ones the index names (through the part's metadata)
    and hold the union's versions of its keys; the index holds only what an index holds. Every case
    here loaded before, or raised a bare ValueError."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "theirs").mkdir()
    root = sharded_state(tmp_path / "mine", random_log(7, 300), 2)
    other = sharded_state(tmp_path / "theirs", random_log(8, 300), 2)
    reference = ProvenanceGraph.load(root).to_bytes()
    index, _ = entries(root / INDEX)

    def refused(match: str) -> None:
        with pytest.raises(StateFileError, match=match):
            ProvenanceGraph.load(root)

    def restore() -> None:
        shutil.rmtree(root)
        shutil.copytree(tmp_path / "kept", root)
        assert ProvenanceGraph.load(root).to_bytes() == reference

    shutil.copytree(root, tmp_path / "kept")
    for table in (other / "part-0").glob("*.arrow"):  # part-0's tables from another state
        if table.name != "union-versions.arrow":
            shutil.copyfile(table, root / "part-0" / table.name)
    refused(r"part-0/metadata\.arrow: .*its digest is not the one the sharded state.s index lists")
    reseal(root / INDEX, {"file:part-0/metadata.arrow": digest_of(root / "part-0" / "metadata.arrow")})
    refused(r"part-0/versions\.arrow: .*(versions, the union|is not the union's)")  # the index resealed too
    restore()
    # part-1's union numbering from another state: the index names it, resealed; the union's ids differ
    shutil.copyfile(other / "part-1" / "union-versions.arrow", root / "part-1" / "union-versions.arrow")
    refused(r"part-1/union-versions\.arrow: .*its digest is not the one the sharded state.s index lists")
    reseal(
        root / INDEX,
        {"file:part-1/union-versions.arrow": digest_of(root / "part-1" / "union-versions.arrow")},
    )
    refused(r"part-1/union-versions\.arrow: .*its union ids are not the union's ids")
    restore()
    # one value of part-1's versions edited, and every digest above it written anew: only the union
    # (replayed from the logs) can tell
    versions = pa.ipc.open_file(pa.memory_map(str(root / "part-1" / "versions.arrow"))).read_all()
    values = versions.column("value").to_pylist()
    values[-1] = "forged"
    forged = versions.set_column(
        versions.schema.get_field_index("value"), "value", pa.array(values, pa.large_string())
    )
    (root / "part-1" / "versions.arrow").unlink()
    digest = _write_sealed(
        root / "part-1" / "versions.arrow", forged.replace_schema_metadata(None), {"table": "versions"}
    )
    reseal(root / "part-1" / "metadata.arrow", {"file_xxh3_128.versions": digest})
    reseal(root / INDEX, {"file:part-1/metadata.arrow": digest_of(root / "part-1" / "metadata.arrow")})
    refused(r"part-1/versions\.arrow: .*a value of its versions is not the union's")
    restore()
    (root / "part-1" / "versions.arrow").write_bytes((root / "part-1" / "versions.arrow").read_bytes()[:-100])
    refused(r"part-1/versions\.arrow")
    restore()
    (root / "part-1" / "edges.arrow").unlink()
    refused(r"part-1/edges\.arrow: .*file not found")
    restore()
    for changed, said in (
        ({"partitions": "3"}, "part-2"),
        ({"partitions": "1"}, "beyond"),
        ({"partitions": "two"}, "its partitions is 'two', not an integer of at least 1"),
        ({"file:part-1/metadata.arrow": index["file:part-0/metadata.arrow"]}, "its digest is not the one"),
        ({"stat.versions": str(int(index["stat.versions"]) + 1)}, "its count versions is"),
        ({"owner": "me"}, "holds the entry 'owner'"),
    ):
        reseal(root / INDEX, changed)
        refused(said)
        restore()
