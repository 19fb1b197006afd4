"""The commit record (``_commits/<batch>.json``): written, read and verified by pmem.rundir.CommitRecord,
byte for byte the JSON every runner version wrote, so old run directories still verify."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from pmem.rundir import COMMITS, CommitRecord, CommitRecordError, record_digests, verify_commits
from pmem.runner._store import RunStore

#: copied verbatim from runs/quickstart-f34884bd0388/_commits/5d1abd57dc29-000003.json (written by the
#: runner before CommitRecord existed)
LEGACY = (
    '{"batch": "5d1abd57dc29-000003", "staging": "_staging/5d1abd57dc2944b29098bbad3be3ca91/5d1abd57dc29-000003", '
    '"units": ["7c19667005bebff66c69", "120d837db4eee30c8318"], "moves": [["results/part-5d1abd57dc29-000003.parquet", '
    '"results/part-5d1abd57dc29-000003.parquet"], ["requests/part-5d1abd57dc29-000003.parquet", '
    '"requests/part-5d1abd57dc29-000003.parquet"], ["histories/part-5d1abd57dc29-000003.parquet", '
    '"histories/part-5d1abd57dc29-000003.parquet"]], "drop": ["histories/failed-7c19667005bebff66c69.parquet", '
    '"histories/failed-120d837db4eee30c8318.parquet"], "sha256": {"results/part-5d1abd57dc29-000003.parquet": '
    '"6d633b3991c0279ed9a88f491073244aa1ad80e691ce646685694c3f466fdae2", "requests/part-5d1abd57dc29-000003.parquet": '
    '"106aa51f4aaf55270549a4327025128f7e4ffccb6b11927d96fe9e261349526d", "histories/part-5d1abd57dc29-000003.parquet": '
    '"bbdb53f01c2dc9fec04a6d09f267df9166ae9dffe31b9cf5102a9148a92a3396"}, "time": 1796320090.4758353}'
)

#: a record of a runner before checksums: no sha256 (and no drop)
PRE_CHECKSUM = '{"batch": "b0", "staging": "_staging/r0/b0", "units": ["u0"], "moves": [["results/p0.parquet", "results/p0.parquet"]], "time": 5}'


def _old_store_record(
    batch: str,
    staging: str,
    units: list[str],
    moves: list[tuple[str, str]],
    drop: list[str],
    sums: dict[str, str],
    t: float,
) -> bytes:
    """What pmem.runner._store.RunStore.commit wrote before CommitRecord (its code, verbatim)."""
    record = {
        "batch": batch,
        "staging": staging,
        "units": units,
        "moves": moves,
        "drop": drop,
        "sha256": sums,
        "time": t,
    }
    return json.dumps(record).encode()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _legacy_run(root: Path) -> CommitRecord:
    """A run directory holding the legacy record's files; the record is LEGACY with only the digests
    replaced by those of these files (every other byte as the old runner wrote it)."""
    old = CommitRecord.from_json(json.loads(LEGACY))
    text = LEGACY
    for i, (_, dest) in enumerate(old.moves):
        path = root / dest
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"file {i} of the batch".encode() * 100)
        assert old.sha256 is not None
        text = text.replace(old.sha256[dest], _sha(path))
    (root / COMMITS).mkdir(parents=True)
    record_path = root / COMMITS / f"{old.batch}.json"
    record_path.write_text(text)
    return CommitRecord.read(record_path)


def test_the_legacy_record_reads_and_writes_back_byte_for_byte(tmp_path: Path) -> None:
    rec = CommitRecord.from_json(json.loads(LEGACY), "legacy")
    assert rec.batch == "5d1abd57dc29-000003"
    assert rec.staging == "_staging/5d1abd57dc2944b29098bbad3be3ca91/5d1abd57dc29-000003"
    assert rec.units == ("7c19667005bebff66c69", "120d837db4eee30c8318")
    assert rec.moves[0] == ("results/part-5d1abd57dc29-000003.parquet",) * 2
    assert rec.drop == (
        "histories/failed-7c19667005bebff66c69.parquet",
        "histories/failed-120d837db4eee30c8318.parquet",
    )
    assert rec.sha256 is not None and len(rec.sha256) == 3
    assert rec.time == 1796320090.4758353
    (tmp_path / COMMITS).mkdir()
    assert rec.write(tmp_path).read_bytes() == LEGACY.encode()


def test_the_writer_is_byte_compatible_with_the_old_one(tmp_path: Path) -> None:
    moves = [("results/part-b1.parquet", "results/part-b1.parquet"), ("states/a/h.0123456789.arrow",) * 2]
    sums = {d: hashlib.sha256(d.encode()).hexdigest() for _, d in moves}
    t = time.time()
    rec = CommitRecord(
        "b1", "_staging/tok/b1", ("u1", "u2"), tuple(moves), ("histories/failed-u1.parquet",), sums, t
    )
    (tmp_path / COMMITS).mkdir()
    written = rec.write(tmp_path)
    assert written == tmp_path / "_commits" / "b1.json"
    old = _old_store_record(
        "b1", "_staging/tok/b1", ["u1", "u2"], moves, ["histories/failed-u1.parquet"], sums, t
    )
    assert written.read_bytes() == old
    assert CommitRecord.read(written) == rec


def test_a_legacy_record_verifies_and_names_a_damaged_file(tmp_path: Path) -> None:
    rec = _legacy_run(tmp_path)
    assert rec.verify(tmp_path) == []
    assert verify_commits(tmp_path) == []
    assert RunStore(tmp_path).completed() == {"7c19667005bebff66c69", "120d837db4eee30c8318"}

    victim = tmp_path / rec.moves[1][1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    rel = rec.moves[1][1]
    for found in (rec.verify(tmp_path), verify_commits(tmp_path)):
        assert [d.path for d in found] == [rel]
        assert found[0].reason.startswith("checksum mismatch (recorded sha256 ")
    assert rec.verify(tmp_path, checksums=False) == []  # only missing files without checksums

    (tmp_path / rec.moves[0][1]).unlink()
    assert [str(d) for d in rec.verify(tmp_path, checksums=False)] == [
        f"{rec.moves[0][1]}: missing (committed, but no longer in the run directory)"
    ]
    assert [d.path for d in verify_commits(tmp_path)] == sorted([rec.moves[0][1], rel])


def test_the_store_drops_a_batch_whose_legacy_record_names_a_damaged_file(tmp_path: Path) -> None:
    rec = _legacy_run(tmp_path)
    victim = tmp_path / rec.moves[2][1]
    victim.write_bytes(b"not what was committed")
    store = RunStore(tmp_path)
    assert store.recover(verify=True) == set()
    assert len(store.damaged) == 1 and store.damaged[0].startswith(f"{victim}: checksum mismatch")
    assert store.damaged[0].endswith(f"(batch {rec.batch})")
    assert not rec.path(tmp_path).exists() and not victim.exists()


def test_a_record_without_checksums_verifies_only_presence(tmp_path: Path) -> None:
    rec = CommitRecord.from_json(json.loads(PRE_CHECKSUM))
    assert (rec.sha256, rec.drop, rec.time) == (None, (), 5)
    (tmp_path / COMMITS).mkdir()
    (tmp_path / COMMITS / "b0.json").write_text(PRE_CHECKSUM)
    assert [d.path for d in rec.verify(tmp_path)] == ["results/p0.parquet"]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "p0.parquet").write_bytes(b"anything")
    assert rec.verify(tmp_path) == [] and verify_commits(tmp_path) == []


def test_a_file_rewritten_in_place_verifies_once_its_digest_is_recorded(tmp_path: Path) -> None:
    """What the judge pass (and erasure) do after rewriting a committed part: only the records that
    name the file change, and only its digest."""
    (tmp_path / "results").mkdir()
    for name in ("p0", "p1"):
        (tmp_path / "results" / f"{name}.parquet").write_bytes(name.encode())
    sums = {f"results/{n}.parquet": hashlib.sha256(n.encode()).hexdigest() for n in ("p0", "p1")}
    (tmp_path / COMMITS).mkdir()
    for batch, name in (("b0", "p0"), ("b1", "p1")):
        rel = f"results/{name}.parquet"
        CommitRecord(batch, f"_staging/r/{batch}", ("u",), ((rel, rel),), sha256={rel: sums[rel]}).write(
            tmp_path
        )
    untouched = (tmp_path / COMMITS / "b1.json").read_bytes()
    (tmp_path / "results" / "p0.parquet").write_bytes(b"judged")
    assert [d.path for d in verify_commits(tmp_path)] == ["results/p0.parquet"]
    record_digests(tmp_path, {"results/p0.parquet": hashlib.sha256(b"judged").hexdigest()})
    assert verify_commits(tmp_path) == []
    assert (tmp_path / COMMITS / "b1.json").read_bytes() == untouched


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"batch": "b1", "moves": [', "unreadable commit record"),
        ("[1, 2]", r"malformed commit record \(a JSON list, not an object\)"),
        ('{"batch": "b1", "staging": "s", "units": ["u"]}', r'malformed commit record \(no "moves"\)'),
        (
            '{"batch": "b1", "staging": "s", "units": ["u"], "moves": [["a"]]}',
            r'malformed commit record \("moves" is not a list of \[staged, destination\] path pairs\)',
        ),
        (
            '{"batch": "b1", "staging": "s", "units": ["u"], "moves": [], "sha256": ["x"]}',
            r'malformed commit record \("sha256" is not an object',
        ),
    ],
)
def test_a_malformed_record_is_an_error_naming_the_file(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / COMMITS).mkdir()
    path = tmp_path / COMMITS / "b1.json"
    path.write_text(text)
    with pytest.raises(CommitRecordError, match=rf"^{path}: {why}"):
        CommitRecord.read(path)
    with pytest.raises(RuntimeError, match=rf"^{path}: {why}.*modified by hand"):
        RunStore(tmp_path).completed()
    damaged = verify_commits(tmp_path)
    assert [d.path for d in damaged] == ["_commits/b1.json"]
    assert "cannot be verified" in damaged[0].reason
