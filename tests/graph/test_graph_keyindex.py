"""apply_batch's key index answers exactly what the graph's key dict answers, whatever the hashes do."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from pmem.graph import ProvenanceGraph
from pmem.graph._read import _keyindex
from pmem.graph._read._keyindex import key_ids
from tests.graph.test_graph_bulk import Row, batch, hidden, loop


def expected_ids(graph: ProvenanceGraph, names: list[str]) -> list[int]:
    return [graph.storage.keys.kid.get(n, -1) for n in names]


def stream(n: int, keys: int, seed: int) -> list[Row]:
    """Observations and operations of every type over ``keys`` keys, each citing the evidence before it."""
    rng = np.random.default_rng(seed)
    out: list[Row] = []
    ops = ("accept", "accept", "accept", "contest", "reject", "revoke", "resolve", "noop")
    for i in range(n):
        out.append(("obs", f"text {i}", None, None))
        op = ops[int(rng.integers(len(ops)))]
        value = f"v{rng.integers(3)}" if op in ("accept", "contest", "resolve") or i % 2 else None
        out.append((op, f"key {rng.integers(keys)}", value, i))
    return out


def test_the_index_follows_keys_admitted_by_apply_and_by_batches() -> None:
    graph = ProvenanceGraph()
    probe = pa.array([f"key {k}" for k in range(60)] + ["absent", ""])
    assert key_ids(graph, probe).tolist() == [-1] * 62  # an empty graph
    rows = stream(400, 50, seed=1)
    for a in range(0, len(rows), 100):
        if a % 200:
            loop(graph, rows[a : a + 100])  # keys the index has not seen: admitted by apply
        else:
            graph.apply_batch(batch(rows[a : a + 100]))
        assert key_ids(graph, probe).tolist() == expected_ids(graph, probe.to_pylist())
    index = graph.storage.keys.index()
    assert graph.storage.keys.count() == 50 and index.covered == 50
    # each hash sits with the id of its own name (a wrong id would only cost a dict probe, unseen above)
    assert index.names.to_pylist() == list(graph.storage.keys.names())
    assert (index.hashes[1:] >= index.hashes[:-1]).all()
    assert (_keyindex._hashes(index.names.take(pa.array(index.ids))) == index.hashes).all()


def test_a_loaded_graph_gets_an_index_of_its_own() -> None:
    graph = ProvenanceGraph()
    graph.apply_batch(batch(stream(100, 20, seed=2)))
    names = [f"key {k}" for k in range(20)]
    loaded = ProvenanceGraph.from_bytes(graph.to_bytes())
    loaded.storage.keys._index = graph.storage.keys.index()  # an index answering for another key list
    loaded.apply("accept", "only in the loaded graph", "v")
    probe = pa.array([*names, "only in the loaded graph"])
    assert key_ids(loaded, probe).tolist() == expected_ids(loaded, probe.to_pylist())
    assert key_ids(graph, probe).tolist() == [*expected_ids(graph, names), -1]


@pytest.mark.parametrize("buckets", [1, 3])
def test_names_sharing_a_hash_are_told_apart(monkeypatch: pytest.MonkeyPatch, buckets: int) -> None:
    """Every name in one of ``buckets`` hash values: the ids and the batches' bytes do not change."""
    real = _keyindex._hashes

    def colliding(names: pa.Array[Any]) -> np.ndarray:
        return real(names) % np.uint64(buckets)

    monkeypatch.setattr(_keyindex, "_hashes", colliding)
    rows = stream(1500, 120, seed=3)
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    loop(seq_graph, rows)
    for a in range(0, len(rows), 500):
        bulk_graph.apply_batch(batch(rows[a : a + 500]))
    assert bulk_graph.to_bytes() == seq_graph.to_bytes()
    assert hidden(bulk_graph) == hidden(seq_graph)
    probe = pa.array([f"key {k}" for k in range(130)])
    assert key_ids(bulk_graph, probe).tolist() == expected_ids(seq_graph, probe.to_pylist())
