"""Arrow round trip of histories; manifest verification of the vendored data."""

from __future__ import annotations

import hashlib
import json
import shutil
from itertools import islice
from pathlib import Path

import pyarrow as pa
import pytest

from pmem.bench import History, histories_from_arrow, histories_to_arrow, iter_histories
from pmem.bench._arrow import read_histories, write_histories
from pmem.bench._data import DataError, datasets_root, load_manifest, verified_path, verify_all

FIXTURE = Path(__file__).parent / "fixtures" / "longmemeval_synthetic.json"


def _sample() -> list[History]:
    hs: list[History] = []
    for subset in ("chains", "retraction", "conflict", "two-step"):
        hs += list(islice(iter_histories("alfworld-revision", subset), 3))
    hs.append(next(iter_histories("factconsolidation", "sh_6k")))
    hs += list(iter_histories("longmemeval", "oracle", path=FIXTURE, verify=False))
    return hs


def test_arrow_round_trip(tmp_path: Path) -> None:
    hs = _sample()
    table = histories_to_arrow(hs)
    assert table.num_rows == len(hs)
    assert table.schema.metadata[b"pmem.bench.format"] == b"1"
    assert histories_from_arrow(table) == hs
    assert histories_from_arrow(histories_to_arrow(hs[:1])) == hs[:1]
    path = tmp_path / "h.arrow"
    write_histories(str(path), hs)
    assert read_histories(str(path)) == hs
    # nested values survive: tuples, dict params, None fields
    back = histories_from_arrow(table)
    conflict = next(h for h in back if h.subset == "conflict")
    assert conflict.questions[0].match == "all" and isinstance(conflict.questions[0].gold, tuple)
    assert back[-1].events[0].session_id is not None and back[0].events[0].session_id is None


def test_from_arrow_refuses_foreign_tables() -> None:
    with pytest.raises(ValueError, match="columns"):
        histories_from_arrow(pa.table({"id": ["x"]}))


def test_manifest_lists_every_vendored_file_with_hash_source_licence() -> None:
    root = datasets_root()
    manifest = load_manifest(root)
    on_disk = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "MANIFEST.json"}
    assert set(manifest["files"]) == on_disk
    for rel, entry in manifest["files"].items():
        assert entry["sha256"] == hashlib.sha256((root / rel).read_bytes()).hexdigest(), rel
        assert entry["source"] and entry["licence"], rel
    assert manifest["total_bytes"] == sum(e["bytes"] for e in manifest["files"].values())
    fc = [r for r in on_disk if r.startswith("factconsolidation/factconsolidation_")]
    assert len(fc) == 8
    assert all(ok for _, ok, _ in verify_all(root))


@pytest.fixture
def data_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    dst = tmp_path / "datasets"
    shutil.copytree(datasets_root(), dst)
    monkeypatch.setenv("PMEM_DATASETS", str(dst))
    return dst


def test_altered_file_is_refused_by_name(data_copy: Path) -> None:
    rel = "factconsolidation/factconsolidation_sh_6k.json"
    p = data_copy / rel
    row = json.loads(p.read_text())
    row["answers"][0] = ["tampered"]
    p.write_text(json.dumps(row))
    with pytest.raises(DataError) as err:
        list(iter_histories("factconsolidation", "sh_6k"))
    assert str(p) in str(err.value) and "sha256" in str(err.value)
    assert "copy it unchanged" in str(err.value)  # says how to obtain it
    bad = [r for r, ok, _ in verify_all(data_copy) if not ok]
    assert bad == [rel]


def test_missing_file_and_manifest_are_refused(data_copy: Path) -> None:
    (data_copy / "alfworld" / "alfworld_vocab.json").unlink()
    with pytest.raises(DataError, match=r"alfworld_vocab\.json is missing"):
        next(iter_histories("alfworld-revision", "chains"))
    with pytest.raises(DataError, match="not listed"):
        verified_path("alfworld/other.json")
    (data_copy / "MANIFEST.json").unlink()
    with pytest.raises(DataError, match=r"MANIFEST\.json is missing"):
        verified_path("factconsolidation/factconsolidation_sh_6k.json")
