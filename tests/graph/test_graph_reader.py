"""Reading a saved state without loading it (``pmem.graph.StateReader``): every answer is the loaded
graph's, ids included, for one file, a directory and a sharded state."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from shardlogs import random_log, sharded_state

from pmem.graph import ProvenanceGraph, StateFileError, StateReader, why
from pmem.graph.shards import read_index


def _same_answers(reader: StateReader, graph: ProvenanceGraph) -> None:
    """Every key's cell and history, every evidence node, the frontier and the seq: the graph's."""
    assert reader.seq == graph.seq
    for key in [*graph.keys(), "never.written"]:
        assert reader.cell(key) == graph.cell(key), key
        assert reader.versions(key) == graph.versions(key), key
        assert reader.operations(key) == list(graph.operations(key)), key
        assert reader.why(key) == why(graph, key), key
    evidence = graph.stats()["evidence"]
    for n in range(evidence):
        assert reader.evidence(f"e{n}") == graph.evidence(f"e{n}")
    for missing in (f"e{evidence}", "v1", "e-1", "x"):
        with pytest.raises(KeyError):
            reader.evidence(missing)
    rows = pa.Table.from_batches(list(reader.frontier_batches(batch_rows=5))).to_pylist()
    cells = graph.frontier()
    assert sorted((r["key"], r["value"]) for r in rows) == graph.frontier_items()
    assert all((r["status"], r["support"]) == (cells[r["key"]].status, cells[r["key"]].support) for r in rows)


# each way of numbering over 3 parts and both seeds; one pass over 1 and 2 parts
_NUMBERINGS = [
    *(
        (seed, 3, numbering)
        for seed in (3, 11)
        for numbering in ("one pass", "passes of 7 seqs", "searched (version 1)")
    ),
    *((seed, partitions, "one pass") for seed in (3, 11) for partitions in (1, 2)),
]


@pytest.mark.parametrize(("seed", "partitions", "numbering"), _NUMBERINGS)
def test_a_sharded_state_answers_as_its_union_with_the_unions_ids(
    tmp_path: Path, seed: int, partitions: int, numbering: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every operation, open conflicts and valid times, over parts whose ids, evidence and seqs are their
    own: the reader numbers them as the union does, from the parts' union numbering (written in one pass
    or many) or, in a state of version 1, by searching the other parts."""
    import pmem.graph.shards

    if numbering == "passes of 7 seqs":
        monkeypatch.setattr(pmem.graph.shards, "NUMBERING_SEQS", 7)
    log = random_log(seed, 600, keys=12, dated=0.1)
    root = sharded_state(tmp_path, log, partitions, numbering=numbering != "searched (version 1)")
    assert read_index(root)["version"] == ("1" if numbering == "searched (version 1)" else "2")
    union = ProvenanceGraph.load(root)
    stats = union.stats()
    assert stats["op_contest"] and stats["op_revoke"] and stats["op_resolve"]  # the log exercises them
    assert any(cell.status == "contested" for cell in union.frontier().values())
    _same_answers(StateReader(root), union)
    _same_answers(StateReader(root, trusted=True), union)
    reader = StateReader(root)
    for at in (0, 1, 97, union.seq // 2, union.seq - 5, union.seq):
        then, view = union.as_of(at), reader.as_of(at)
        for key in [*union.keys(), "never.written"]:
            assert reader.cell_as_of(key, at) == then.cell(key), (key, at)
            # the whole key view as of the seq: its versions, operations and their evidence
            assert view.versions(key) == then.versions(key), (key, at)
            assert list(view.operations(key)) == list(then.operations(key)), (key, at)
            for v in view.versions(key):
                if v.evidence is not None:
                    assert view.evidence(v.evidence) == then.evidence(v.evidence)


def _story(seed: int) -> ProvenanceGraph:
    """A graph of every kind of write a state records: all six operations, source authority, premises,
    valid time, undo and erasure."""
    rng = random.Random(seed)
    graph = ProvenanceGraph(authority={"cam": 2, "user": 1})
    keys = [f"k{i}" for i in range(8)]
    ops: list[int] = []
    evidence: list[str] = []
    for i in range(160):
        source = rng.choice(["user", "cam", "doc"])
        valid = f"2025-0{rng.randint(1, 9)}-01" if rng.random() < 0.1 else None
        ev = graph.observe(f"row {i}", source, f"2026-01-{1 + i % 28:02d}", valid)
        evidence.append(ev)
        op = rng.choice(["accept", "accept", "accept", "contest", "reject", "revoke", "resolve", "noop"])
        key = rng.choice(keys)
        value = None if op == "revoke" else rng.choice(["a", "b", "c", "d"])
        premises = None
        if op == "accept" and rng.random() < 0.15:
            held = [k for k in keys if k != key and graph.head_value(k) is not None]
            premises = held[:1] or None
        graph.apply(op, key, value, evidence=ev, depends_on=premises)
        ops.append(graph.seq)
        if i == 80:
            graph.set_authority("doc", 3)
        if rng.random() < 0.05:
            graph.undo(rng.choice(ops))
        if rng.random() < 0.03:
            graph.erase(rng.choice(evidence))
    return graph


@pytest.mark.parametrize("layout", ["file", "directory"])
@pytest.mark.parametrize("seed", [1, 2, 5])
def test_a_single_state_answers_as_the_graph_it_holds(tmp_path: Path, seed: int, layout: str) -> None:
    graph = _story(seed)
    assert graph.stats()["op_undo"] and graph.stats()["op_contest"]  # the story exercises them
    path = tmp_path / "state"
    graph.save(path, layout=layout)  # type: ignore[arg-type]
    _same_answers(StateReader(path), ProvenanceGraph.load(path))
    _same_answers(StateReader(path, trusted=True), graph)


def test_a_state_with_a_journal_beside_it_is_refused(tmp_path: Path) -> None:
    from pmem.graph._persist._state import journal_path

    state = tmp_path / "s.arrow"
    ProvenanceGraph().save(state)
    journal_path(state).write_bytes(b"")
    with pytest.raises(StateFileError, match="journal"):
        StateReader(state)


def test_a_missing_or_foreign_file_is_refused_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(StateFileError, match="not found"):
        StateReader(tmp_path / "nothing.arrow")
    other = tmp_path / "other.arrow"
    pa.ipc.new_file(str(other), pa.schema([("x", pa.int64())])).close()
    with pytest.raises(StateFileError, match="schema"):
        StateReader(other)


def _flip(path: Path, at: float) -> None:
    """Flip one bit of ``path``, ``at`` of the way in: a damaged disk, a bad copy."""
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x04
    path.write_bytes(bytes(data))


def _read_all(reader: StateReader, keys: list[str]) -> None:
    """Every read the reader offers, of every key: what reaches every file it reads."""
    for key in keys:
        reader.cell(key), reader.versions(key), reader.operations(key)
    list(reader.frontier_batches())


@pytest.mark.parametrize(
    ("layout", "damaged"),
    [
        ("file", "."),
        ("directory", "versions.arrow"),
        ("directory", "metadata.arrow"),
        ("sharded", "part-1/versions.arrow"),
        ("sharded", "part-0/log"),
        ("sharded", "part-1/union-versions.arrow"),
    ],
)
def test_a_damaged_file_is_refused_by_the_read_that_needs_it(
    tmp_path: Path, layout: str, damaged: str
) -> None:
    """A flipped bit anywhere in a file the reader reads is refused, naming the file: a state file when
    it is opened, a directory's or sharded state's file by the first read that needs it. Trusted, the
    reader hands the bytes to Arrow (which checks each row's structure, not its values)."""
    if layout == "sharded":
        state = sharded_state(tmp_path, random_log(5, 300), 2)
        keys = sorted(ProvenanceGraph.load(state).keys())
    else:
        state = tmp_path / "state"
        _story(3).save(state, layout=layout)  # type: ignore[arg-type]
        keys = sorted(ProvenanceGraph.load(state).keys())
    target = state / damaged if damaged != "." else state
    if target.is_dir():
        target = sorted(target.glob("*.arrow"))[0]
    _flip(target, 0.6)
    with pytest.raises(StateFileError) as refused:
        _read_all(StateReader(state), keys)
    assert str(target) in str(refused.value) and "\n" not in str(refused.value)
    StateReader(state, trusted=True)  # trusted, it opens on the damaged bytes


def test_a_file_of_another_state_is_refused(tmp_path: Path) -> None:
    """A table file copied in from another state is whole and sealed: only the listing catches it."""
    for n, seed in enumerate((3, 4)):
        _story(seed).save(tmp_path / f"s{n}", layout="directory")
    (tmp_path / "s0" / "versions.arrow").write_bytes((tmp_path / "s1" / "versions.arrow").read_bytes())
    StateReader(tmp_path / "s0", trusted=True).cell("k1")  # trusted: read from the other state's versions
    with pytest.raises(StateFileError, match=r"versions\.arrow: .*not the one the state's metadata lists"):
        StateReader(tmp_path / "s0").versions("k1")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    one, other = (sharded_state(tmp_path / n, random_log(seed, 300), 2) for n, seed in (("a", 5), ("b", 6)))
    segment = sorted((one / "part-0" / "log").glob("*.arrow"))[0]
    segment.write_bytes(sorted((other / "part-0" / "log").glob("*.arrow"))[0].read_bytes())
    with pytest.raises(StateFileError, match=r"log-.*not the one the sharded state's index lists"):
        _read_all(StateReader(one), sorted(ProvenanceGraph.load(other).keys()))


def test_verify_is_the_old_name_of_the_default(tmp_path: Path) -> None:
    """``verify=True`` (what callers passed before checking became the default) is the default;
    ``verify=False`` is ``trusted=True``."""
    state = tmp_path / "s"
    _story(1).save(state, layout="directory")
    assert not StateReader(state, verify=True).trusted and StateReader(state, verify=False).trusted
    assert not StateReader(state).trusted and StateReader(state, trusted=True).trusted
    with pytest.raises(ValueError, match="give one of them"):
        StateReader(state, trusted=True, verify=True)


def _hashing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the readers check from now on, as their paths' last two parts, in order."""
    import pmem.graph._persist._mapped

    checked: list[str] = []
    check = pmem.graph._persist._mapped._check_file_digest

    def recording(data: object, path: Path, hashed: object = None) -> object:
        checked.append(f"{path.parent.name}/{path.name}")
        return check(data, path, hashed)  # type: ignore[arg-type]

    monkeypatch.setattr(pmem.graph._persist._mapped, "_check_file_digest", recording)
    return checked


@pytest.mark.parametrize("numbering", [True, False])
def test_a_read_checks_the_files_it_needs_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, numbering: bool
) -> None:
    """Each file is hashed once, when a read first needs it: one key of a sharded state checks its part's
    metadata, tables, log and union numbering, not the other parts' (in a state of version 1, without
    the numbering, the other parts' logs and versions number its versions); the frontier checks every
    part's keys and versions only. A damaged file of another part does not stop a key's read."""
    from pmem.graph.seams import partition_of

    root = sharded_state(tmp_path, random_log(4, 400, keys=12), 3, numbering=numbering)
    union = ProvenanceGraph.load(root)
    key = union.keys()[0]
    mine = f"part-{partition_of(key, 3)}"
    checked = _hashing(monkeypatch)
    reader = StateReader(root)
    assert checked == []  # opening a sharded state reads its index (checked whole by read_index) only
    assert reader.cell(key) == union.cell(key) and reader.versions(key) == union.versions(key)
    folders = {name.split("/")[0] for name in checked}
    names = {name.split("/")[1] for name in checked if not name.startswith("log/")}
    if numbering:
        assert folders == {mine, "log"} and len(checked) == len(set(checked))
        assert names == {
            "metadata.arrow",
            "keys.arrow",
            "versions.arrow",
            "evidence.arrow",
            "union-versions.arrow",
        }
    else:  # every part's log segments and versions
        assert folders == {"part-0", "part-1", "part-2", "log"} and "operations.arrow" not in names
    before = len(checked)
    reader.cell(key), reader.versions(key)
    assert len(checked) == before  # each file is checked once
    reader.operations(key)
    assert checked[before:] == [f"{mine}/operations.arrow"]
    checked.clear()
    list(StateReader(root).frontier_batches())
    assert sorted(checked) == sorted(
        f"part-{p}/{name}.arrow" for p in range(3) for name in ("metadata", "keys", "versions")
    )
    # a damaged table of another part: the key is read from its own, the other part's keys refused
    other = next(p for p in range(3) if f"part-{p}" != mine)
    _flip(root / f"part-{other}" / "versions.arrow", 0.5)
    reader = StateReader(root)
    if numbering:
        assert reader.cell(key) == union.cell(key)
    foreign = next(k for k in union if partition_of(k, 3) == other)
    with pytest.raises(StateFileError, match=f"part-{other}/versions.arrow"):
        reader.cell(foreign)


def test_a_cell_as_of_needs_a_write_log_and_a_seq(tmp_path: Path) -> None:
    state = tmp_path / "s.arrow"
    _story(2).save(state)
    with pytest.raises(ValueError, match="keeps none"):
        StateReader(state).cell_as_of("k1", 3)
    root = sharded_state(tmp_path, random_log(1, 100), 2)
    for bad in (-1, "3", 2.0):
        with pytest.raises(ValueError, match="non-negative integer"):
            StateReader(root).cell_as_of("key1", bad)  # type: ignore[arg-type]


def test_parts_with_no_rows_are_numbered_and_read(tmp_path: Path) -> None:
    """One observation and the operations citing it, over 4 parts: three parts hold no row, and their
    empty logs are numbered and searched as empty (the first numbering failed on them)."""
    from pmem.graph.seams import conform

    log = conform(
        pa.table(
            {
                "op": [None, "accept", "accept"],
                "text": ["the budget is $30k, then $50k", None, None],
                "source": ["user", None, None],
                "key": [None, "budget", "budget"],
                "value": [None, "$30k", "$50k"],
                "evidence": [0, 0, 0],
                "seq": [1, 2, 3],
            }
        )
    )
    root = sharded_state(tmp_path, log, 4)
    union = ProvenanceGraph.load(root)
    assert [v.id for v in union.versions("budget")] == ["v0", "v1"]
    _same_answers(StateReader(root), union)
