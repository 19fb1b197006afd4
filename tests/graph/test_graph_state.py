"""State files: lossless, deterministic, atomic, and refused when damaged."""

from __future__ import annotations

import itertools
import os
import re
import stat

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


# ---------------------------------------------------------------- issue 11: files like any other file


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_saved_file_gets_the_default_permissions(tmp_path, umask):
    old = os.umask(umask)
    try:
        sample().save(tmp_path / "s")
        sample().save(tmp_path / "s")  # replacing an existing state too
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o666 & ~umask


def test_save_refuses_a_missing_parent_directory(tmp_path):
    target = tmp_path / "missing" / "deeper" / "s.arrow"
    with pytest.raises(FileNotFoundError, match=re.escape(str(target.parent))):
        sample().save(target)
    assert not (tmp_path / "missing").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="file"):
        sample().save(tmp_path / "file" / "s.arrow")


def test_save_fsyncs_the_directory_after_the_rename(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.path.basename(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    sample().save(tmp_path / "s")
    assert events == [("fsync", "file"), ("replace", "s"), ("fsync", "dir")]


def _file_versions(path) -> list[tuple[str, int | None]]:
    """(status, valid_to) of every version as a plain Arrow reader sees the file (the documented layout)."""
    outer = pa.ipc.open_file(path).read_all()
    tables = dict(zip(outer["table"].to_pylist(), outer["payload"].to_pylist(), strict=True))
    versions = pa.ipc.open_stream(tables["versions"]).read_all().to_pydict()
    return list(zip(versions["status"], versions["valid_to"], strict=True))


def test_superseded_status_is_materialized_in_the_file(tmp_path):
    g = ProvenanceGraph()
    for v in ("a", "b", "c"):  # seqs 1, 2, 3: a and b are closed lazily by the next accept
        g.apply("accept", "plain", v)
    g.apply("accept", "back", "x")  # 4
    g.apply("accept", "back", "y")  # 5
    g.apply("reject", "back")  # 6: y contradicted, x reopened
    g.apply("accept", "back", "z")  # 7: x closed lazily again
    g.apply("accept", "room", "A")  # 8
    g.apply("contest", "room", "B")  # 9
    g.apply("accept", "room", "C")  # 10: a contested head is closed eagerly
    expected = {
        "plain": [("superseded", 2), ("superseded", 3), ("active", None)],
        "back": [("superseded", 7), ("contradicted", 6), ("active", None)],
        "room": [("superseded", 10), ("alternative", 10), ("active", None)],
    }
    memory = {k: [(v.status, v.valid_to) for v in g.versions(k)] for k in expected}
    assert memory == expected  # the in-memory view is the naive expectation
    path = tmp_path / "s.arrow"
    g.save(path)
    ids = {k: [int(v.id[1:]) for v in g.versions(k)] for k in expected}
    on_disk = _file_versions(path)
    assert {k: [on_disk[i] for i in vids] for k, vids in ids.items()} == expected
    h = ProvenanceGraph.load(path)
    assert {k: [(v.status, v.valid_to) for v in h.versions(k)] for k in expected} == expected
    # no version is stored as active unless it is its key's head
    assert [s for s, _ in on_disk].count("active") == len(h.frontier())


def test_a_table_row_without_a_name_is_refused():
    """A row whose table name is not a string makes the file another format, not a table to skip."""
    from pmem.graph._persist._sealing import _FILE_MARK, _PLACEHOLDER, FILE_DIGEST_KEY, _digest, sealed

    outer = pa.ipc.open_file(pa.py_buffer(sample().to_bytes())).read_all()
    names = [*outer["table"].to_pylist(), None]
    payloads = [*outer["payload"].to_pylist(), outer["payload"][0].as_py()]
    meta = dict(outer.schema.metadata)
    meta[b"sha256"] = _digest(payloads).encode()  # consistent checksums: only the name is wrong
    meta[FILE_DIGEST_KEY.encode()] = _FILE_MARK + _PLACEHOLDER
    schema = pa.schema([("table", pa.string()), ("payload", pa.large_binary())], metadata=meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(pa.table([pa.array(names), pa.array(payloads, pa.large_binary())], schema=schema))
    with pytest.raises(StateFileError, match="table name None is not a string"):
        ProvenanceGraph.from_bytes(sealed(sink.getvalue().to_pybytes()))


def test_the_file_layout_streams_each_table_where_arrow_writes_its_payload(tmp_path):
    """A save never holds a table's stream whole: each is streamed where Arrow writes its row's stand-in
    payload. The bytes are those of the container whose payloads hold the streams themselves."""
    from pmem.graph._persist._sealing import sealed
    from pmem.graph._persist._state import _CONTAINER, _all_tables, _payload

    g = sample()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, _CONTAINER) as writer:
        for name, table in _all_tables(g):
            writer.write_batch(_payload(name, table))
    reference = sealed(sink.getvalue().to_pybytes())
    g.save(tmp_path / "s")
    assert g.to_bytes() == reference == (tmp_path / "s").read_bytes()


@pytest.mark.parametrize("layout", ["file", "directory"])
def test_writeback_hints_cover_each_file_in_order_and_change_no_byte(tmp_path, monkeypatch, layout):
    from pmem.graph._persist import _sealing

    hints: list[tuple[int, int]] = []
    monkeypatch.setattr(_sealing, "_WRITEBACK_STEP", 1000)
    monkeypatch.setattr(_sealing, "_start_writeback", lambda _fd, at, n: hints.append((at, n)))
    g = sample()
    g.save(tmp_path / "s", layout=layout)
    files = [i for i, (at, _) in enumerate(hints) if at == 0]  # each file's first hint is at its start
    assert files[:1] == [0] and (len(files) == 1 if layout == "file" else len(files) > 1)
    for start, end in itertools.pairwise([*files, len(hints)]):  # each range after the one before
        ranges = hints[start:end]
        assert [at for at, _ in ranges] == [0, *itertools.accumulate(n for _, n in ranges[:-1])]
        assert all(n >= 1000 for _, n in ranges)
    assert ProvenanceGraph.load(tmp_path / "s").to_bytes() == g.to_bytes()
