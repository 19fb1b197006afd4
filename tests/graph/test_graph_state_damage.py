"""A damaged state file is refused with StateFileError: never a crash, another exception, or another
graph (issue 29). Every load of a damaged copy runs in a child process (``bitflips``), so a crash in
native code is counted, not fatal. The default suite samples bits; ``make test-slow`` flips every bit."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import xxhash
from bitflips import flipped, summary, trials

from pmem.graph import ProvenanceGraph, StateFileError

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def _current(tmp_path: Path, layout: str = "file") -> Path:
    """The schema-2 fixture's graph saved by this code (the current schema)."""
    path = tmp_path / ("state-current.arrow" if layout == "file" else "state-current")
    ProvenanceGraph.load(FIXTURES / "state-schema-2.arrow").save(path, layout=layout)
    return path


def _states(tmp_path: Path) -> dict[str, Path]:
    return {
        "schema 1": FIXTURES / "state-schema-1.arrow",
        "schema 2": FIXTURES / "state-schema-2.arrow",
        "schema 3": FIXTURES / "state-schema-3.arrow",
        "schema 4": FIXTURES / "state-schema-4.arrow",
        "schema 5": FIXTURES / "state-schema-5.arrow",
        "schema 6": _current(tmp_path),
    }


def _sample(size: int, every: int) -> list[int]:
    """Every ``every``-th bit, every bit of the first 64 bytes and every 7th bit of the last 2,048: the
    Arrow framing (magic, schema message, footer, metadata) lives there."""
    bits = set(range(0, 8 * size, every))
    bits |= set(range(0, 8 * 64)) | set(range(8 * max(0, size - 2048), 8 * size, 7))
    return sorted(bits)


def _assert_only_refused_or_same(name: str, results: dict[int, str]) -> None:
    bad = {bit: outcome for bit, outcome in results.items() if outcome not in ("refused", "same")}
    assert not bad, (name, summary(results), dict(list(bad.items())[:10]))


def test_a_sample_of_bit_flips_of_each_schema(tmp_path: Path) -> None:
    for name, path in _states(tmp_path).items():
        results = trials(path, _sample(path.stat().st_size, 97))
        _assert_only_refused_or_same(name, results)
        if name in ("schema 3", "schema 4", "schema 5", "schema 6"):  # every byte is under the file digest
            assert set(results.values()) == {"refused"}, summary(results)


@pytest.mark.slow  # about 85 s: 563,600 loads
def test_every_bit_flip_of_each_schema(tmp_path: Path) -> None:
    for name, path in _states(tmp_path).items():
        results = trials(path, range(8 * path.stat().st_size))
        _assert_only_refused_or_same(name, results)
        print(name, path.stat().st_size, "bytes:", dict(summary(results)))


def _large_state(path: Path, target_bytes: int = 1 << 20) -> Path:
    g = ProvenanceGraph(authority={"manager": 2}, default_authority=1)
    i = 0
    while True:
        for _ in range(500):
            e = g.observe(f"Object {i} is now in drawer {i % 97}.", source="manager" if i % 5 else "user")
            g.apply("accept" if i % 11 else "contest", f"object_{i % 1500}.location", f"drawer {i % 97}", e)
            i += 1
        g.save(path)
        if path.stat().st_size >= target_bytes:
            return path


@pytest.mark.parametrize(
    "flips", [pytest.param(250, id="sample"), pytest.param(20_000, marks=pytest.mark.slow, id="many")]
)
def test_bit_flips_of_a_1_mb_state(tmp_path: Path, flips: int) -> None:
    path = _large_state(tmp_path / "large.arrow")
    size = path.stat().st_size
    bits = random.Random(29).sample(range(8 * size), flips)
    bits += list(range(8 * (size - 2048), 8 * size, 7))  # the footer and its metadata
    results = trials(path, bits)
    assert set(results.values()) == {"refused"}, summary(results)


@pytest.mark.parametrize("schema", [4, 5])
def test_bit_flips_in_every_file_of_a_directory_state_are_refused(tmp_path: Path, schema: int) -> None:
    """Each table file is sealed like a state file and listed in the metadata: a flip anywhere, in any
    file, is refused before Arrow parses the file (so these loads can run in this process)."""
    if schema == 5:
        path = _current(tmp_path, "directory")
    else:
        path = tmp_path / "state-schema-4"
        shutil.copytree(FIXTURES / "state-schema-4.directory", path)
    reference = ProvenanceGraph.load(path).to_bytes()
    rng = random.Random(33)
    files = sorted(path.iterdir())
    assert [f.name for f in files][:3] == ["edges.arrow", "evidence.arrow", "identity.arrow"]
    for file in files:
        data = file.read_bytes()
        for bit in [*rng.sample(range(8 * len(data)), 25), 8 * 3, 8 * (len(data) - 3)]:
            file.write_bytes(flipped(data, bit))
            with pytest.raises(StateFileError, match=file.name):
                ProvenanceGraph.load(path)
        file.write_bytes(data)
    assert ProvenanceGraph.load(path).to_bytes() == reference


def test_a_table_file_of_another_state_is_refused(tmp_path: Path) -> None:
    """Two states' files are each sealed: the metadata's list of digests binds one state's files."""
    mine, other = _current(tmp_path, "directory"), tmp_path / "other"
    g = ProvenanceGraph()
    g.apply("accept", "budget", "$30k", evidence=g.observe("The budget is $30k"))
    g.save(other, layout="directory")
    (mine / "versions.arrow").write_bytes((other / "versions.arrow").read_bytes())
    with pytest.raises(StateFileError, match=r"versions\.arrow: .*a file of another state"):
        ProvenanceGraph.load(mine)


def test_pmem_inspect_on_damaged_files_is_exit_2_and_one_line(tmp_path: Path) -> None:
    path = _current(tmp_path)
    data = path.read_bytes()
    rng = random.Random(7)
    bits = [*rng.sample(range(8 * len(data)), 8), 8 * 3, 8 * (len(data) - 3), 8 * 13 + 1]  # magic, length
    for bit in bits:
        damaged = tmp_path / f"d{bit}.arrow"
        damaged.write_bytes(flipped(data, bit))
        done = subprocess.run(
            [sys.executable, "-m", "pmem.cli", "inspect", str(damaged)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert done.returncode == 2, (bit, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "not a readable P-Mem state file" in done.stderr


def test_metadata_is_under_the_checksum(tmp_path: Path) -> None:
    """An edit of the metadata that keeps the tables' checksum (the identity threshold, the next seq,
    the default authority) is refused: the file digest covers it."""
    path = _current(tmp_path)
    data = path.read_bytes()
    for old, new in ((b'"threshold": 0.72', b'"threshold": 0.32'), (b'"default": 1', b'"default": 9')):
        assert data.count(old) == 1, old  # in the metadata table
        edited = tmp_path / "edited.arrow"
        edited.write_bytes(data.replace(old, new))
        with pytest.raises(StateFileError, match="altered or damaged"):
            ProvenanceGraph.load(edited)
    assert ProvenanceGraph.load(path).to_bytes() == data


def test_damaged_payload_offsets_of_an_unsealed_file_are_refused() -> None:
    """Flips in the outer payload offsets of a schema-1 file (found by the every-bit run): numpy's own
    ValueError once escaped the loader instead of a StateFileError."""
    path = FIXTURES / "state-schema-1.arrow"
    results = trials(path, [7232, 7233, 7234])
    _assert_only_refused_or_same("schema 1", results)


def _resealed(data: bytes, algorithm: Any, version: int) -> bytes:
    """A file-layout state ``data`` with its outer schema version set to ``version`` and sealed, rightly,
    with ``algorithm``: a file whose every byte checks out, but under another digest than its schema's."""
    from pmem.graph._persist._sealing import _file_digest, _find_digest

    outer = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    meta = {k: v for k, v in (outer.schema.metadata or {}).items() if not k.startswith(b"file_")}
    meta[b"schema_version"] = str(version).encode()
    meta[algorithm.key.encode()] = algorithm.mark + algorithm.placeholder
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, outer.schema.with_metadata(meta)) as writer:
        writer.write_table(outer)
    out = bytearray(sink.getvalue().to_pybytes())
    found = _find_digest(out)
    assert found is not None and found[0] is algorithm
    digest = _file_digest(out, found[1], algorithm).encode()
    for at in found[1]:
        out[at : at + algorithm.hex_digits] = digest
    return bytes(out)


def test_a_state_sealed_with_another_schemas_digest_is_refused(tmp_path: Path) -> None:
    """Schemas 5 on are sealed with XXH3-128 and schemas 3 and 4 with SHA-256: a file whose digest
    checks out but is not its schema's was not written by P-Mem and is refused."""
    from pmem.graph._persist._sealing import SHA256, XXH3_128
    from pmem.graph._persist._state import SCHEMA_VERSION

    current = _current(tmp_path).read_bytes()
    now = SCHEMA_VERSION
    assert ProvenanceGraph.from_bytes(_resealed(current, XXH3_128, now)).to_bytes() == current  # the helper
    old = (FIXTURES / "state-schema-4.arrow").read_bytes()
    for data, algorithm, version in ((current, SHA256, now), (old, XXH3_128, 4), (old, XXH3_128, 3)):
        with pytest.raises(StateFileError, match=f"schema version {version} sealed with {algorithm.key}"):
            ProvenanceGraph.from_bytes(_resealed(data, algorithm, version))


def test_the_file_digest_is_xxh3_128_of_the_bytes_with_its_slots_zeroed(tmp_path: Path) -> None:
    """What the metadata key says, checked with xxhash alone: any tool can verify a state file."""
    data = _current(tmp_path).read_bytes()
    mark = b"pmem-file-xxh3-128:"
    first, second = data.index(mark) + len(mark), data.rindex(mark) + len(mark)
    assert first < second and data.count(mark) == 2
    digest = data[first : first + 32]
    assert data[second : second + 32] == digest
    zeroed = bytearray(data)
    zeroed[first : first + 32] = zeroed[second : second + 32] = b"0" * 32
    assert xxhash.xxh3_128(bytes(zeroed)).hexdigest().encode() == digest
