"""Search through a state's per-part index (``StateReader.search``, ``pmem index``, ``pmem inspect
--search``): a sharded state's hits are its union's, whatever its parts and batches; scores are the
``hashing`` embedder's cosine similarities; an index of another state, or of this one before it changed,
is refused."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from shardlogs import random_log, sharded_state

from pmem.cli import main
from pmem.graph import Cell, ProvenanceGraph, StateReader, embedding_text, hash_char_ngrams
from pmem.graph._read._search import SearchIndexError, build_search_index, part_index_path, search_index_dir

_QUERIES = ("key3 a", "what is key1", "b", "c key10 key11", "zzz qqq", "KEY7: C")


def _values_graph(rows: int, seed: int) -> ProvenanceGraph:
    """Cells of varied keys and values, a few overwritten, revoked, undone or erased, and two keys whose
    texts hash alike (``p_1.city`` and ``p.1_city`` both read as ``p 1 city``): an exact tie."""
    rng = np.random.default_rng(seed)
    graph = ProvenanceGraph()
    people = ["alice", "bob", "carol", "dan", "erin", "frank"]
    fields = ["city", "job", "manager", "budget", "email"]
    values = ["paris", "rome", "nurse", "teacher", "carol", "$30k", "$50k", "oslo", "lima"]
    seqs = []
    for i in range(rows):
        key = f"{rng.choice(people)}_{rng.integers(0, 9)}.{rng.choice(fields)}"
        op = "revoke" if rng.random() < 0.05 else "accept"
        value = None if op == "revoke" else str(rng.choice(values))
        graph.apply(op, key, value, evidence=graph.observe(f"row {i}"))
        seqs.append(graph.seq)
        if rng.random() < 0.03:
            graph.undo(seqs[int(rng.integers(0, len(seqs)))])
    graph.erase("e3")
    for key in ("p_1.city", "p.1_city"):
        graph.apply("accept", key, "paris", evidence=graph.observe(f"{key} is paris"))
    return graph


def _brute(graph: ProvenanceGraph, query: str) -> dict[str, float]:
    """Every current value's cosine similarity to ``query`` under the hashing embedder, by key."""
    items = graph.frontier_items()
    texts = [embedding_text(f"{key}: {value}") for key, value in items]
    vectors = hash_char_ngrams([*texts, embedding_text(query)], 1024)
    scores = vectors[:-1].astype(np.float64) @ vectors[-1].astype(np.float64)
    return {key: float(s) for (key, _), s in zip(items, scores, strict=True)}


def _hits(reader: StateReader, query: str, k: int) -> list[tuple[str, float]]:
    return [(c.key, c.score) for c in reader.search(query, k)]


@pytest.mark.parametrize("layout", ["file", "directory"])
def test_search_scores_are_the_hashing_embedders_cosine_and_ties_go_to_the_smaller_key(
    tmp_path: Path, layout: str
) -> None:
    graph = _values_graph(400, seed=layout == "file")
    path = tmp_path / "state"
    graph.save(path, layout=layout)  # type: ignore[arg-type]
    stats = build_search_index(StateReader(path), batch_rows=7)
    assert stats.cells == len(graph.frontier_items()) and stats.parts == 1
    reader = StateReader(path)
    for query in (
        "alice 3 city",
        "who manages bob",
        "p 1 city paris",
        "$50k budget",
        "nothing like it",
        "qqq zzz",
    ):
        brute = _brute(graph, query)
        for k in (1, 2, 5, 40, 1000):
            hits = reader.search(query, k)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            assert len(hits) == min(k, sum(s > 0 for s in brute.values()))
            for hit in hits:
                assert hit.score == pytest.approx(brute[hit.key], abs=1e-6)
                cell = graph.cell(hit.key)  # the hit is the key's cell, as the graph holds it
                assert cell is not None and dataclasses.replace(cell) == Cell(
                    **{f.name: getattr(hit, f.name) for f in dataclasses.fields(Cell)}
                )
            if hits:  # nothing left out scores above the last hit
                found = {h.key for h in hits}
                assert all(s <= hits[-1].score + 1e-6 for key, s in brute.items() if key not in found)
    # the tie: both keys hash alike; k = 1 takes the smaller
    (first,) = reader.search("p 1 city: paris", 1)
    assert first.key == "p.1_city" and _brute(graph, "p 1 city: paris")["p_1.city"] == pytest.approx(
        first.score
    )
    assert min(_brute(graph, "qqq zzz").values()) == 0.0  # a cell it shares no n-gram with: never found
    assert reader.search("alice", 3, min_score=0.99) == [] and reader.search("alice", 0) == []


@pytest.mark.parametrize(("seed", "partitions"), [(3, 3), (11, 2), (5, 1)])
def test_a_sharded_states_search_is_its_unions_whatever_its_parts_and_batches(
    tmp_path: Path, seed: int, partitions: int
) -> None:
    """The union saved whole as one file and indexed as one part finds what the parts find, key, score,
    cell and order alike, however the parts' rows are batched."""
    root = sharded_state(tmp_path, random_log(seed, 700, keys=40), partitions)
    union = ProvenanceGraph.load(root)
    whole = tmp_path / "union.arrow"
    union.save(whole)
    build_search_index(StateReader(root), batch_rows=3)
    build_search_index(StateReader(whole))
    sharded, single = StateReader(root), StateReader(whole)
    assert sharded.parts == partitions
    for query in _QUERIES:
        for k in (1, 3, 10, 100):
            assert sharded.search(query, k) == single.search(query, k), (query, k)
    # the index lives inside the state's folder: the state still loads, and is still the same union
    assert search_index_dir(root).is_dir()
    assert ProvenanceGraph.load(root).frontier_items() == union.frontier_items()


@pytest.mark.parametrize("layout", ["file", "directory"])
def test_an_index_of_another_state_or_of_this_one_before_it_changed_is_refused(
    tmp_path: Path, layout: str
) -> None:
    graph = _values_graph(60, seed=4)
    path = tmp_path / "state"
    graph.save(path, layout=layout)  # type: ignore[arg-type]
    with pytest.raises(SearchIndexError, match=r"no search index: build it again with `pmem index STATE`"):
        StateReader(path).search("alice", 3)
    build_search_index(StateReader(path))
    assert StateReader(path).search("alice", 3)
    graph.apply("accept", "alice_1.city", "cairo", evidence=graph.observe("she moved"))
    changed = tmp_path / "changed"
    graph.save(changed, layout=layout)  # type: ignore[arg-type]
    shutil.copytree(search_index_dir(path), search_index_dir(changed))  # the index of the state before
    if layout == "file":  # and a file saved again where it was: its index, beside it, is of the old file
        graph.save(path)
    for state in [changed] + [path] * (layout == "file"):
        with pytest.raises(
            SearchIndexError, match=r"the index of another state, or of this one before it changed"
        ):
            StateReader(state).search("alice", 3)
    build_search_index(StateReader(changed))
    (hit,) = StateReader(changed).search("alice_1.city: cairo", 1)
    assert (hit.key, hit.value) == ("alice_1.city", "cairo")


def test_a_missing_or_damaged_part_index_is_refused_naming_it(tmp_path: Path) -> None:
    root = sharded_state(tmp_path, random_log(2, 300, keys=20), 3)
    build_search_index(StateReader(root))
    index = part_index_path(root, 2)
    saved = index.read_bytes()
    index.unlink()
    with pytest.raises(SearchIndexError, match=r"no index of part 2 \(an unfinished build\?\)"):
        StateReader(root).search("key1", 3)
    index.write_bytes(saved[: len(saved) // 2])
    with pytest.raises(SearchIndexError, match=r"part-2\.arrow.*truncated or damaged"):
        StateReader(root).search("key1", 3)
    index.write_bytes(saved[:-9] + bytes([saved[-9] ^ 1]) + saved[-8:])
    with pytest.raises(SearchIndexError, match=r"part-2\.arrow"):
        StateReader(root).search("key1", 3)
    # an index file of another part is the index of another state
    index.write_bytes(part_index_path(root, 1).read_bytes())
    with pytest.raises(SearchIndexError, match=r"the index of another state"):
        StateReader(root).search("key1", 3)


def _pmem(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_pmem_index_then_inspect_search_prints_the_readers_hits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = sharded_state(tmp_path, random_log(7, 400, keys=30), 2)
    code, out, err = _pmem(capsys, "inspect", root, "--search", "key3")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.strip().endswith("no search index: build it again with `pmem index STATE`")
    code, out, err = _pmem(capsys, "index", root)
    assert code == 0, err
    cells = len(ProvenanceGraph.load(root).frontier_items())
    assert f"indexed {cells:,} cells in 2 part(s)" in out
    code, out, err = _pmem(capsys, "inspect", root, "--search", "key3 b", "--k", "4")
    assert code == 0, err
    hits = StateReader(root).search("key3 b", 4)
    expected = [f"{c.score:.3f}  {c.key} = {c.value}  [{c.status}]" for c in hits]
    assert out.splitlines() == expected and len(expected) == 4
    code, out, err = _pmem(capsys, "inspect", root, "--search", "key3 b", "--k", "2", "--json")
    assert code == 0 and [h["key"] for h in json.loads(out)["hits"]] == [c.key for c in hits[:2]]
    code, out, err = _pmem(capsys, "inspect", root, "--search", "key3", "--key", "key3")
    assert code == 2 and "--search shows the cells nearest a query now" in err
    code, out, err = _pmem(capsys, "index", root, "--dim", "70000")
    assert code == 2 and "--dim 70000" in err


def test_the_light_install_scores_with_numpy_as_scipy_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without SciPy (the light install) the rows are scored by NumPy: the same hits, the same scores to
    float32 rounding."""
    root = sharded_state(tmp_path, random_log(9, 500, keys=40), 2)
    build_search_index(StateReader(root), batch_rows=5)
    with_scipy = {q: StateReader(root).search(q, 8) for q in _QUERIES}
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.sparse", None)
    for query, hits in with_scipy.items():
        light = StateReader(root).search(query, 8)
        assert [h.key for h in light] == [h.key for h in hits], query
        assert [h.score for h in light] == pytest.approx([h.score for h in hits], abs=2e-6)
