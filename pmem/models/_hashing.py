"""The `hashing` embedder: character n-gram hashing (:mod:`pmem.graph._identity._hashing`), no model, deterministic.

>>> import asyncio
>>> e = HashingEmbedder(dim=256)
>>> v = asyncio.run(e.embed(["apple_1.location: fridge 1", "apple_1.location: fridge 1", "mug"]))
>>> v.shape, v.dtype.name, round(float(v[0] @ v[1]), 6)
((3, 256), 'float32', 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pmem.graph import HASHING_DIM, HASHING_NGRAMS, embedding_text, hash_char_ngrams
from pmem.models._tokens import estimate_tokens
from pmem.models._types import CallContext, Embedder, Embedding

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec


class HashingEmbedder(Embedder):
    """Char n-grams (within word boundaries, underscores and dots treated as spaces) hashed to ``dim``."""

    def __init__(self, dim: int = HASHING_DIM, ngram_range: tuple[int, int] = HASHING_NGRAMS) -> None:
        self.dim = int(dim)
        self.ngram_range = (int(ngram_range[0]), int(ngram_range[1]))
        self.model_id = f"hashing-char{ngram_range[0]}{ngram_range[1]}-{self.dim}"

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> HashingEmbedder:
        ngram = spec.option("ngram_range", HASHING_NGRAMS)
        return cls(dim=int(spec.option("dim", HASHING_DIM)), ngram_range=(int(ngram[0]), int(ngram[1])))

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return hash_char_ngrams([embedding_text(t) for t in texts], self.dim, self.ngram_range, np.float32)

    async def embed(self, texts: Sequence[str], *, context: CallContext | None = None) -> np.ndarray:
        return self.embed_sync(texts)  # no token count: this is the arms' hot path

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        """Vectors, prompt tokens (estimated here) and whether the count is an estimate."""
        return Embedding(self.embed_sync(texts), sum(estimate_tokens(t) for t in texts), True)
