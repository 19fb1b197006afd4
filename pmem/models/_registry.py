"""Backends by name, imported lazily: `heuristic` never pays for scikit-learn, `openai` never for Ray.

A backend is a subclass of :class:`~pmem.models.ChatModel` or :class:`~pmem.models.Embedder` with a
``from_spec(spec) -> instance`` classmethod. The backends are two registries of the shared plugin
mechanism (:class:`pmem._plugins.Registry`, as arms and benchmarks are), whose entries are
:class:`~pmem._plugins.Lazy` targets: imported on first use, after the modules they need (a missing one
is a :class:`~pmem.models.MissingDependencyError` naming the extra). Third parties add their own with
:func:`register_chat_backend` / :func:`register_embedder_backend`, or name one ``module:Class`` in a
config (which other processes, Ray runners, then import too).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pmem._plugins import Lazy, Registry
from pmem.models._gguf import model_label
from pmem.models._instrument import InstrumentedChatModel, InstrumentedEmbedder
from pmem.models._spec import ModelKind, ModelSpec, ModelSpecError, as_spec
from pmem.models._types import ChatModel, Embedder, Model
from pmem.models._weights import packaged_label

if TYPE_CHECKING:
    from pmem.models._cache import ResponseCache
    from pmem.models._log import RequestLog


_CHAT_BUILTIN: dict[str, Lazy] = {
    "heuristic": Lazy("pmem.models._heuristic:HeuristicChatModel"),
    "openai": Lazy("pmem.models._openai:OpenAIChatModel"),
    "vllm": Lazy("pmem.models._vllm:VLLMChatModel", None, ("ray",)),
    "llamacpp": Lazy("pmem.models._llamacpp:LlamaCppChatModel", "cpu-llm", ("ray", "llama_cpp")),
}
_EMBED_BUILTIN: dict[str, Lazy] = {
    "hashing": Lazy("pmem.models._hashing:HashingEmbedder", None, ("mmh3",)),
    "openai": Lazy("pmem.models._openai:OpenAIEmbedder"),
    "vllm": Lazy("pmem.models._vllm:VLLMEmbedder", None, ("ray",)),
    "llamacpp": Lazy("pmem.models._llamacpp:LlamaCppEmbedder", "cpu-llm", ("ray", "llama_cpp")),
    "sentence-transformers": Lazy(
        "pmem.models._st:SentenceTransformerEmbedder", "st", ("sentence_transformers",)
    ),
}

_CHAT: Registry[Lazy] = Registry(
    "chat backend", Lazy, lambda: _CHAT_BUILTIN, lambda ref, _cls: Lazy(ref), "a ChatModel subclass"
)
_EMBED: Registry[Lazy] = Registry(
    "embedder backend", Lazy, lambda: _EMBED_BUILTIN, lambda ref, _cls: Lazy(ref), "an Embedder subclass"
)


#: backends whose replicas a sweep's driver launches once (Ray actors) and shares with every runner
HOSTED_BACKENDS = ("vllm", "llamacpp")


def register_chat_backend(
    name: str, target: str, *, extra: str | None = None, needs: tuple[str, ...] = ()
) -> None:
    """Add a chat backend: ``target`` is ``"module:Class"``; ``needs`` names modules its extra provides."""
    _CHAT.add(name, Lazy(target, extra, tuple(needs)))


def register_embedder_backend(
    name: str, target: str, *, extra: str | None = None, needs: tuple[str, ...] = ()
) -> None:
    _EMBED.add(name, Lazy(target, extra, tuple(needs)))


def chat_backends() -> list[str]:
    return sorted(_CHAT.names())


def embedder_backends() -> list[str]:
    return sorted(_EMBED.names())


def check_backend(backend: str, kind: ModelKind) -> None:
    """Raise ``ValueError`` (naming the known backends) unless ``backend`` is a registered backend of
    ``kind`` or a ``module:Class`` name that imports; imports no registered backend."""
    (_EMBED if kind == "embedder" else _CHAT).get(backend)


def validate_spec(spec: ModelSpec, kind: ModelKind = "chat") -> ModelSpec:
    """``spec``, if its backend is registered for ``kind`` and its options satisfy the backend; else
    :class:`ModelSpecError` naming the key. Starts nothing and reaches no server.

    >>> validate_spec(ModelSpec("nope"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pmem.models._spec.ModelSpecError: unknown chat backend 'nope' (known: heuristic, openai, vllm, llamacpp...)
    """
    try:
        check_backend(spec.backend, kind)
    except ValueError as exc:
        raise ModelSpecError("backend", str(exc)) from None
    return spec.check(kind)


@functools.lru_cache(maxsize=256)
def model_id_of(spec: ModelSpec, kind: ModelKind = "chat") -> str:
    """The id the backend reports for ``spec`` (results, request logs and run ids carry it).

    Asked of the backend (building a client starts nothing); where it cannot be built here, for any
    reason (its extra is not installed, its model file is elsewhere, a plugin needs a credential this
    process lacks), the model the spec names (:meth:`ModelSpec.named_model`): naming a run must not fail
    where only running it would, and running it builds the client again and fails with the cause."""
    try:
        model = (make_embedder if kind == "embedder" else make_chat_model)(spec)
    except Exception:  # a name, not a run: see above
        return spec.named_model()
    return str(model.model_id)


def hosted_model_label(backend: str, model: str) -> str | None:
    """How reports name ``model`` of a hosted backend, from the model layer's tables of the models it
    knows (llama.cpp's GGUF files, the folders it prepares for vLLM); None where it knows no name."""
    if backend == "llamacpp":
        return model_label(model)
    if backend == "vllm":
        return packaged_label(model)
    return None


def _resolve(registry: Registry[Lazy], spec: ModelSpec, base: type[Model]) -> Any:
    cls = registry.load(spec.backend)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        target = registry.get(spec.backend).target
        msg = f"{registry.what} {spec.backend!r} ({target}) is not a subclass of pmem.models.{base.__name__}"
        raise TypeError(msg)
    return cls


def make_chat_model(
    spec: ModelSpec | Mapping[str, Any] | str,
    *,
    cache: ResponseCache | None = None,
    log: RequestLog | None = None,
) -> ChatModel:
    """Build a chat model from ``[models.agent]``-style config; wrap it with a cache and/or log.

    >>> import asyncio
    >>> m = make_chat_model({"backend": "heuristic"})
    >>> asyncio.run(m.complete([{"role": "user", "content": "### QUESTION\\nWhat is my PB now?"}],
    ...                        purpose="gate")).text
    'prune'
    """
    spec = as_spec(spec)
    model = _resolve(_CHAT, spec, ChatModel).from_spec(spec)
    if cache is None and log is None:
        return model
    return InstrumentedChatModel(model, cache=cache, log=log)


def make_embedder(
    spec: ModelSpec | Mapping[str, Any] | str,
    *,
    cache: ResponseCache | None = None,
    log: RequestLog | None = None,
) -> Embedder:
    """Build an embedder from ``[models.embedder]``-style config."""
    spec = as_spec(spec)
    model = _resolve(_EMBED, spec, Embedder).from_spec(spec)
    if cache is None and log is None:
        return model
    return InstrumentedEmbedder(model, cache=cache, log=log)
