"""Weights for the `vllm` backend: packaged names, folder checks, and how a conversion is trusted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pmem.models._weights import (
    CONVERTER_VERSION,
    MANIFEST,
    WeightsError,
    _manifest,
    check_folder,
    check_window,
    model_window,
    packaged_label,
    verify_conversion,
)
from pmem.models._weights_dir import weights_cache


def _folder(tmp_path: Path, window: int = 2048) -> Path:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": window}))
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def _sign(folder: Path, source: str = "abc") -> None:
    doc = {"converter": CONVERTER_VERSION, "source_sha256": source, "files": _manifest(folder)}
    (folder / MANIFEST).write_text(json.dumps(doc))


def test_a_folder_without_weights_or_config_is_named(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    assert check_folder(folder) == folder
    (folder / "model.safetensors").unlink()
    with pytest.raises(WeightsError, match=r"has no weights \(no \*\.safetensors, \*\.bin or \*\.pt file\)"):
        check_folder(folder)
    (folder / "config.json").unlink()
    with pytest.raises(WeightsError, match=r"has no config\.json"):
        check_folder(folder)
    with pytest.raises(
        WeightsError,
        match=r"neither a model folder nor one of all-minilm-l6-v2, qwen2\.5-coder-0\.5b-instruct, smollm2",
    ):
        check_folder(tmp_path / "nowhere")


def test_a_window_larger_than_the_models_is_refused_before_start(tmp_path: Path) -> None:
    folder = _folder(tmp_path, window=2048)
    assert model_window(folder) == 2048
    check_window(folder, 2048)
    check_window(folder, None)
    with pytest.raises(WeightsError, match="max_model_len 4096 exceeds the model's context window 2048"):
        check_window(folder, 4096)


def test_a_conversion_is_trusted_only_whole_and_unchanged(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    assert "missing or unreadable" in str(verify_conversion(folder))  # never finished: no manifest
    _sign(folder)
    assert verify_conversion(folder, "abc") is None
    assert "another source" in str(verify_conversion(folder, "other"))
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\1" + weights.read_bytes()[1:])  # same size, other bytes
    assert "changed since it was written" in str(verify_conversion(folder, "abc"))
    _sign(folder)
    (folder / "extra.bin").write_bytes(b"x")
    assert "differ from its manifest" in str(verify_conversion(folder, "abc"))
    (folder / "extra.bin").unlink()
    (folder / MANIFEST).write_text("{")  # a manifest cut short
    assert "missing or unreadable" in str(verify_conversion(folder, "abc"))


def test_the_cache_is_where_the_environment_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMEM_WEIGHTS_CACHE", str(tmp_path / "w"))
    assert weights_cache() == tmp_path / "w"
    monkeypatch.delenv("PMEM_WEIGHTS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert weights_cache() == tmp_path / "x" / "pmem" / "weights"


def test_packaged_models_are_named_for_reports() -> None:
    assert packaged_label("smollm2-135m-instruct") == "SmolLM2-135M-Instruct"
    assert packaged_label("all-minilm-l6-v2") == "all-MiniLM-L6-v2"
    assert packaged_label("/models/x") is None
