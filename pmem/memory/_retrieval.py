"""The one cosine top-k retriever of the memory and every arm, and the one read-size count.

Rows are slots that can be set, overwritten (a cell whose value changed is re-embedded in place) and
cleared. Search is a matrix-vector product over the live rows. Vectors from the ``hashing`` embedder
are ~7% non-zero, so the index keeps a SciPy CSR copy (rebuilt after writes, on the next search) and
multiplies that instead (11k cells x 1,024 dims: ~0.5 ms against ~5 ms dense; the light install, without
SciPy, scores densely, to the same ranking); dense embedders use a
single-threaded dense product (``einsum``: a multi-threaded BLAS matvec stalls for milliseconds when the
machine is busy, which is the normal state of a sweep).

>>> import numpy as np
>>> ix = VectorIndex()
>>> ix.set(0, np.array([1.0, 0.0], dtype=np.float32)); ix.set(1, np.array([0.6, 0.8], dtype=np.float32))
>>> [(row, round(s, 2)) for row, s in ix.search(np.array([0.0, 1.0], dtype=np.float32), 2)]
[(1, 0.8), (0, 0.0)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from pmem.models import estimate_tokens

#: Below this many rows the dense product is as fast as building a CSR copy.
_SPARSE_MIN_ROWS = 64
_SPARSE_MAX_DENSITY = 0.25
#: Rows written since the last CSR build are scored densely until there are this many (or n/8).
_REBUILD_MIN = 256


def _scipy_present() -> bool:
    """Whether SciPy is installed: the evaluation extra brings it; the light core scores densely."""
    import importlib.util

    try:
        return importlib.util.find_spec("scipy") is not None
    except ValueError:  # ``sys.modules["scipy"]`` is None: imports of it are blocked
        return False


_HAVE_SCIPY = _scipy_present()


def count_tokens(text: str) -> int:
    """Read-size tokens: the model layer's approximation, identical for every arm."""
    return estimate_tokens(text)


def _unit(vec: np.ndarray) -> np.ndarray:
    vec = np.asarray(vec, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0 else vec


def _matvec(matrix: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """``matrix @ vec`` as a single-threaded einsum (see the module docstring)."""
    out: np.ndarray = np.einsum("ij,j->i", matrix, vec)  # numpy types einsum's result as Any
    return out


class VectorIndex:
    """Slots of unit vectors searched by cosine similarity (deterministic tie-break: lower slot first)."""

    def __init__(self) -> None:
        self._dense: np.ndarray | None = None
        self._live: np.ndarray = np.zeros(0, dtype=bool)
        self._n = 0  # slots in use (highest set slot + 1)
        # sparse mode: a CSR copy of rows [0, _csr_n) plus the rows rewritten since (_stale), scored densely
        self._sparse: bool | None = None
        self._csr = None
        self._csr_n = 0
        self._stale: set[int] = set()

    def __len__(self) -> int:
        return int(self._live[: self._n].sum())

    def _grow(self, slot: int, dim: int) -> None:
        if self._dense is None:
            cap = max(64, slot + 1)
            self._dense = np.zeros((cap, dim), dtype=np.float32)
            self._live = np.zeros(cap, dtype=bool)
        elif self._dense.shape[1] != dim:
            msg = f"VectorIndex: vector has {dim} dims, the index holds {self._dense.shape[1]}"
            raise ValueError(msg)
        elif slot >= self._dense.shape[0]:
            cap = max(self._dense.shape[0] * 2, slot + 1)
            dense = np.zeros((cap, dim), dtype=np.float32)
            dense[: self._dense.shape[0]] = self._dense
            live = np.zeros(cap, dtype=bool)
            live[: self._live.shape[0]] = self._live
            self._dense, self._live = dense, live

    def set(self, slot: int, vector: np.ndarray) -> None:
        vec = _unit(vector)
        self._grow(slot, vec.shape[0])
        assert self._dense is not None
        self._dense[slot] = vec
        self._live[slot] = True
        self._n = max(self._n, slot + 1)
        if slot < self._csr_n:
            self._stale.add(slot)

    def set_many(self, slots: Sequence[int], vectors: np.ndarray) -> None:
        if len(slots) != len(vectors):
            msg = f"VectorIndex.set_many: {len(slots)} slots but {len(vectors)} vectors"
            raise ValueError(msg)
        if not len(slots):
            return
        vecs = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0)
        self._grow(max(slots), vecs.shape[1])
        assert self._dense is not None
        idx = np.asarray(slots, dtype=np.int64)
        self._dense[idx] = vecs
        self._live[idx] = True
        self._n = max(self._n, int(idx.max()) + 1)
        self._stale.update(s for s in slots if s < self._csr_n)

    def clear(self, slot: int) -> None:
        if slot < self._live.shape[0]:
            self._live[slot] = False

    def is_live(self, slot: int) -> bool:
        return slot < self._n and bool(self._live[slot])

    def vector(self, slot: int) -> np.ndarray:
        assert self._dense is not None
        row: np.ndarray = self._dense[slot]
        return row

    def _scores(self, query: np.ndarray) -> np.ndarray:
        assert self._dense is not None
        n = self._n
        dense = self._dense[:n]
        if n < _SPARSE_MIN_ROWS or self._sparse is False:
            return _matvec(dense, query)
        pending = (n - self._csr_n) + len(self._stale)
        if self._csr is None or pending > max(_REBUILD_MIN, n // 8):
            if self._sparse is None:
                self._sparse = _HAVE_SCIPY and bool(
                    np.count_nonzero(dense) / dense.size <= _SPARSE_MAX_DENSITY
                )
                if not self._sparse:
                    return _matvec(dense, query)
            import scipy.sparse as sp

            self._csr = sp.csr_matrix(dense)
            self._csr_n = n
            self._stale.clear()
        out = np.empty(n, dtype=np.float32)
        out[: self._csr_n] = self._csr @ query
        if self._stale:
            idx = np.fromiter(self._stale, dtype=np.int64)
            out[idx] = _matvec(self._dense[idx], query)
        if n > self._csr_n:
            out[self._csr_n :] = _matvec(dense[self._csr_n :], query)
        return out

    def search(self, query: np.ndarray, k: int, exclude: Iterable[int] = ()) -> list[tuple[int, float]]:
        """The ``k`` live slots most similar to ``query``, best first, as (slot, cosine)."""
        if self._dense is None or k <= 0 or self._n == 0:
            return []
        q = _unit(query)
        scores = self._scores(q).astype(np.float64, copy=True)
        scores[~self._live[: self._n]] = -np.inf
        for slot in exclude:
            if 0 <= slot < self._n:
                scores[slot] = -np.inf
        live = int(np.isfinite(scores).sum())
        k = min(k, live)
        if k == 0:
            return []
        cand = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        # stable order: score descending, then slot ascending
        order = sorted(cand.tolist(), key=lambda s: (-scores[s], s))
        return [(int(s), float(scores[s])) for s in order[:k]]

    def similarity(self, a: int, b: int) -> float:
        assert self._dense is not None
        return float(np.dot(self._dense[a], self._dense[b]))
