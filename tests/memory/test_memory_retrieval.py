"""The shared cosine retriever: exact against brute force, in dense and sparse mode, after rewrites."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pmem.memory.writepath import VectorIndex


def _brute(rows: dict[int, np.ndarray], q: np.ndarray, k: int) -> list[int]:
    qn = q / np.linalg.norm(q)
    scored = [(-float(v / np.linalg.norm(v) @ qn), s) for s, v in rows.items()]
    return [s for _, s in sorted(scored)[:k]]


def _sparse_rows(rng: np.random.Generator, n: int, dim: int = 256) -> np.ndarray:
    out = np.zeros((n, dim), dtype=np.float32)
    for i in range(n):
        out[i, rng.choice(dim, 12, replace=False)] = rng.random(12) + 0.1
    return out


def test_sparse_index_matches_brute_force_through_rewrites_and_clears():
    rng = np.random.default_rng(0)
    ix = VectorIndex()
    rows = {}
    vecs = _sparse_rows(rng, 900)
    ix.set_many(list(range(600)), vecs[:600])
    rows.update({i: vecs[i] for i in range(600)})
    q = vecs[5] + vecs[77]
    assert [s for s, _ in ix.search(q, 10)] == _brute(rows, q, 10)  # builds the CSR copy
    # rewrite some rows in place, clear others, append a tail: all scored without a full rebuild
    for i in range(0, 100, 7):
        ix.set(i, vecs[600 + i])
        rows[i] = vecs[600 + i]
    for i in (5, 6, 7):
        ix.clear(i)
        rows.pop(i)
    for i in range(600, 650):
        ix.set(i, vecs[i])
        rows[i] = vecs[i]
    for probe in (q, vecs[620], vecs[14]):
        assert [s for s, _ in ix.search(probe, 12)] == _brute(rows, probe, 12)
    assert ix._sparse is True
    assert len(ix) == len(rows)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 15), st.integers(0, 10_000))
def test_dense_index_matches_brute_force(n, k, seed):
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, 16)).astype(np.float32) + 0.01
    ix = VectorIndex()
    ix.set_many(list(range(n)), vecs)
    q = rng.standard_normal(16).astype(np.float32)
    got = ix.search(q, k)
    assert [s for s, _ in got] == _brute(dict(enumerate(vecs)), q, k)
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(got))


def test_exclude_and_empty():
    ix = VectorIndex()
    assert ix.search(np.ones(4, dtype=np.float32), 3) == []
    ix.set(0, np.array([1, 0, 0, 0], dtype=np.float32))
    ix.set(2, np.array([0, 1, 0, 0], dtype=np.float32))
    assert [s for s, _ in ix.search(np.array([1, 1, 0, 0], dtype=np.float32), 5)] == [0, 2]
    assert [s for s, _ in ix.search(np.array([1, 1, 0, 0], dtype=np.float32), 5, exclude=[0])] == [2]


def test_dense_vectors_stay_in_dense_mode():
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((300, 32)).astype(np.float32)
    ix = VectorIndex()
    ix.set_many(list(range(300)), vecs)
    q = vecs[3]
    assert [s for s, _ in ix.search(q, 7)] == _brute(dict(enumerate(vecs)), q, 7)
    assert ix._sparse is False and ix._csr is None


def test_sparse_vectors_without_scipy_are_scored_densely_to_the_same_ranking(monkeypatch):
    """The light install has no SciPy: hashing vectors (sparse) are searched with the dense product."""
    from pmem.memory import _retrieval

    rng = np.random.default_rng(2)
    vecs = _sparse_rows(rng, 300)
    with_scipy = VectorIndex()
    with_scipy.set_many(list(range(300)), vecs)
    probes = (vecs[3] + vecs[40], vecs[299])
    expected = [[s for s, _ in with_scipy.search(probe, 9)] for probe in probes]
    assert with_scipy._sparse is True
    monkeypatch.setattr(_retrieval, "_HAVE_SCIPY", False)
    monkeypatch.setitem(__import__("sys").modules, "scipy", None)  # an import of it now fails
    without = VectorIndex()
    without.set_many(list(range(300)), vecs)
    for probe, ranking in zip(probes, expected, strict=True):
        got = [s for s, _ in without.search(probe, 9)]
        assert got == _brute(dict(enumerate(vecs)), probe, 9) == ranking
    assert without._sparse is False and without._csr is None


def test_scipy_presence_is_read_without_importing_it(monkeypatch):
    from pmem.memory import _retrieval

    monkeypatch.setitem(__import__("sys").modules, "scipy", None)
    assert _retrieval._scipy_present() is False
