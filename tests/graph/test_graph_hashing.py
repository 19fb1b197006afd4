"""The core's character n-gram hashing gives scikit-learn's HashingVectorizer vectors, bit for bit, so
that soft identity decisions and the `hashing` embedder's retrieval are what they were with it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pmem.graph import HashingKeyEmbedding
from pmem.graph._identity._hashing import char_wb_ngrams, hash_char_ngrams
from pmem.models._hashing import HashingEmbedder

sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")  # the eval extra's, in the dev install

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789_.:,-' éüßİ✓中\t"


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = lambda: "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 14)))  # noqa: E731
    texts = [" ".join(words() for _ in range(rng.randint(1, 7))) for _ in range(n)]
    return [*texts, "", " ", "a", "ab", "  double  spaces ", "apple_1.location: fridge 1", "İstanbul"]


@pytest.mark.parametrize(("dim", "ngram_range"), [(1024, (2, 4)), (256, (1, 3)), (64, (3, 5))])
def test_the_embedder_vectors_are_scikit_learns_bit_for_bit(dim: int, ngram_range: tuple[int, int]) -> None:
    texts = _texts(1500, seed=dim)
    reference = sklearn_text.HashingVectorizer(
        analyzer="char_wb",
        ngram_range=ngram_range,
        n_features=dim,
        alternate_sign=False,
        norm="l2",
        lowercase=True,
        preprocessor=lambda s: s.lower().replace("_", " ").replace(".", " "),
        dtype=np.float32,
    )
    expected = reference.transform(texts).toarray().astype(np.float32)
    got = HashingEmbedder(dim=dim, ngram_range=ngram_range).embed_sync(texts)
    assert got.dtype == np.float32 and np.array_equal(got, expected)


def test_the_identity_vectors_are_scikit_learns_bit_for_bit() -> None:
    keys = [t.replace(" ", "_") for t in _texts(1500, seed=7)]
    from pmem.graph._identity._registry import normalize_key_text

    reference = sklearn_text.HashingVectorizer(
        analyzer="char_wb", ngram_range=(2, 4), n_features=1024, alternate_sign=False, norm="l2"
    )
    expected = reference.transform([normalize_key_text(k) for k in keys]).toarray().astype(np.float32)
    assert np.array_equal(HashingKeyEmbedding()(keys), expected)


def test_char_wb_ngrams_pad_words_and_count_a_short_word_once() -> None:
    assert char_wb_ngrams("ab  c", 2, 3) == [" a", "ab", "b ", " ab", "ab ", " c", "c ", " c "]
    assert char_wb_ngrams("", 2, 4) == [] and hash_char_ngrams([""], 8).tolist() == [[0.0] * 8]
