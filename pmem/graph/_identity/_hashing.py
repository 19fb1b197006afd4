"""Character n-gram hashing: texts as fixed-size vectors, no model, deterministic (the core's one way).

The hashing trick over the n-grams of each word padded with spaces (scikit-learn's ``char_wb``
analyzer), with MurmurHash3 (``mmh3``) of each n-gram's UTF-8 bytes choosing its column, counts
L2-normalized per row: the vectors of scikit-learn's ``HashingVectorizer(analyzer="char_wb",
alternate_sign=False, norm="l2")``, bit for bit (a test compares them), without scikit-learn and its
SciPy in the core's install. Soft key identity (:class:`pmem.graph.HashingKeyEmbedding`) and the
``hashing`` embedder of :mod:`pmem.models` both use it.

>>> v = hash_char_ngrams(["apple_1.location", "apple_1.location", "mug"], dim=64)
>>> v.shape, v.dtype.name, round(float(v[0] @ v[1]), 6), round(float(v[0] @ v[2]), 6)
((3, 64), 'float32', 1.0, 0.171904)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import mmh3
import numpy as np
from numpy.typing import NDArray

#: The ``hashing`` embedder's columns and n-gram lengths, unless configured otherwise (a state's search
#: index hashes with them too).
HASHING_DIM = 1024
HASHING_NGRAMS = (2, 4)
_WHITESPACE_RUNS = re.compile(r"\s\s+")
#: a hash of -2**31 has no absolute value in 32 bits: the column scikit-learn gives it
_INT32_MIN = -(2**31)


def char_wb_ngrams(text: str, low: int, high: int) -> list[str]:
    """The n-grams (``low`` <= n <= ``high``) of each word of ``text`` padded with one space each side;
    a word shorter than n gives itself once (scikit-learn's ``char_wb`` analyzer, after its
    preprocessing)."""
    grams: list[str] = []
    for word in _WHITESPACE_RUNS.sub(" ", text).split():
        padded = f" {word} "
        size = len(padded)
        for n in range(low, high + 1):
            offset = 0
            grams.append(padded[:n])
            while offset + n < size:
                offset += 1
                grams.append(padded[offset : offset + n])
            if offset == 0:  # the padded word is no longer than n: counted once, whatever n follows
                break
    return grams


def hash_char_ngrams(
    texts: Sequence[str], dim: int, ngram_range: tuple[int, int] = (2, 4), dtype: type = np.float32
) -> np.ndarray:
    """One L2-normalized row of n-gram counts per text, ``dim`` columns, of ``dtype`` (see the module
    docstring). The texts are taken as they are: lowercase them first where that is wanted."""
    offsets, columns, weights = sparse_char_ngrams(texts, dim, ngram_range, dtype)
    out: np.ndarray = np.zeros((len(texts), dim), dtype=dtype)
    rows = np.repeat(np.arange(len(texts), dtype=np.int64), np.diff(offsets))
    out.reshape(-1)[rows * dim + columns] = weights
    return out


def sparse_char_ngrams(
    texts: Sequence[str], dim: int, ngram_range: tuple[int, int] = (2, 4), dtype: type = np.float32
) -> tuple[NDArray[np.int64], NDArray[np.int64], np.ndarray]:
    """The rows of :func:`hash_char_ngrams` as a CSR matrix's arrays: ``offsets`` (row ``i``'s cells
    are ``offsets[i]:offsets[i + 1]``), their ``columns`` (ascending within a row) and ``weights``.

    >>> offsets, columns, weights = sparse_char_ngrams(["mug", ""], dim=64)
    >>> offsets.tolist(), columns.tolist() == sorted(set(columns.tolist()))
    ([0, 9, 9], True)
    """
    low, high = ngram_range
    lengths: list[int] = []
    hashes: list[int] = []
    hash32 = mmh3.hash  # a str is hashed as its UTF-8 bytes
    for text in texts:
        grams = char_wb_ngrams(text, low, high)
        lengths.append(len(grams))
        hashes.extend([hash32(gram, 0, True) for gram in grams])
    n = len(texts)
    h = np.array(hashes, dtype=np.int64)
    columns = np.where(h == _INT32_MIN, 2147483647 - (dim - 1), np.abs(h) % dim)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    # the nonzero cells only (a text touches a few dozen of ``dim`` columns), as a sparse matrix would
    cells, counts = np.unique(rows * dim + columns, return_counts=True)
    cell_rows = cells // dim
    # as scikit-learn normalizes: squares summed in double, each count divided in double, then cast
    weights = counts.astype(np.float64)
    norms = np.sqrt(np.bincount(cell_rows, weights=weights * weights, minlength=n))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(cell_rows, minlength=n), out=offsets[1:])
    return offsets, cells % dim, (weights / norms[cell_rows]).astype(dtype)


def embedding_text(text: str) -> str:
    """A text as the ``hashing`` embedder hashes it: lowercased, with underscores and dots as spaces, so
    that ``alice_1.location`` shares the n-grams of the words ``alice`` and ``location``."""
    return text.lower().replace("_", " ").replace(".", " ")
