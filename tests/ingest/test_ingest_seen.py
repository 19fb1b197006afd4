"""The ids a stream delivered, kept in bounded memory (``pmem.ingest._seen``): the same answers as a dict
of every id, whatever spilled to disk, and a hash collision never taken for a repeat."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest

import pmem.ingest._seen as seen_module
from pmem.ingest._seen import SeenIds


def _stream(n: int, seed: int) -> tuple[list[str], list[int]]:
    """``n`` ids, a tenth of them repeats of an earlier one (some long before), with their rows."""
    rng = random.Random(seed)
    ids: list[str] = []
    for i in range(n):
        ids.append(rng.choice(ids) if ids and rng.random() < 0.1 else f"event-{i}-{rng.random():.6f}")
    return ids, list(range(1, n + 1))


def _reference(ids: list[str], rows: list[int]) -> list[int]:
    first: dict[str, int] = {}
    return [first.setdefault(i, r) for i, r in zip(ids, rows, strict=True)]


@pytest.mark.parametrize("in_memory", [1, 7, 1000])
def test_the_first_row_of_each_id_is_the_dicts_whatever_spilled(tmp_path: Path, in_memory: int) -> None:
    ids, rows = _stream(3000, seed=in_memory)
    seen = SeenIds(tmp_path / "seen", in_memory=in_memory)
    found = []
    for start in range(0, len(ids), 64):  # batches, as a stream reader asks
        found += seen.first_rows(ids[start : start + 64], rows[start : start + 64])
    assert found == _reference(ids, rows)
    assert len(seen) == len(set(ids))
    if in_memory < 1000:
        assert len(list((tmp_path / "seen").glob("run-*.arrow"))) >= 3  # the runs were used


def test_a_hash_collision_is_not_a_repeat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every id hashed alike: only the text decides."""
    monkeypatch.setattr(
        seen_module, "_hashes", lambda ids: seen_module.np.zeros(len(ids), seen_module.np.uint64)
    )
    ids, rows = _stream(400, seed=3)
    seen = SeenIds(tmp_path / "seen", in_memory=16)
    found = []
    for start in range(0, len(ids), 10):
        found += seen.first_rows(ids[start : start + 10], rows[start : start + 10])
    assert found == _reference(ids, rows)


def test_memory_stays_within_the_budget_while_a_dict_grows(tmp_path: Path) -> None:
    ids = [f"event-{i:09d}" for i in range(100_000)]
    rows = list(range(100_000))

    def peak(make: object) -> int:
        tracemalloc.start()
        store = make()  # type: ignore[operator]
        for start in range(0, len(ids), 2048):
            store.first_rows(ids[start : start + 2048], rows[start : start + 2048])
        _, high = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return high

    bounded = peak(lambda: SeenIds(tmp_path / "seen", in_memory=5_000))
    whole = peak(lambda: SeenIds(held={}))
    assert bounded < whole / 3, (bounded, whole)


def test_a_callers_dict_is_updated_in_place_and_kept_whole(tmp_path: Path) -> None:
    held = {"a": 1}
    seen = SeenIds(held=held)
    assert seen.first_rows(["a", "b"], [5, 6]) == [1, 6] and held == {"a": 1, "b": 6}
    with pytest.raises(ValueError, match="no folder"):
        SeenIds(tmp_path / "seen", held=held)
