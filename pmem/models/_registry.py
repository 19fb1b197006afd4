"""Backends by name, imported lazily: `heuristic` never pays for scikit-learn, `openai` never for Ray.

A backend is a subclass of :class:`~pmem.models.ChatModel` or :class:`~pmem.models.Embedder` with a
``from_spec(spec) -> instance`` classmethod. Third parties add their own with
:func:`register_chat_backend` / :func:`register_embedder_backend`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pmem.models._errors import MissingDependencyError
from pmem.models._spec import ModelSpec, as_spec
from pmem.models._types import ChatModel, Embedder, Model

if TYPE_CHECKING:
    from pmem.models._cache import ResponseCache
    from pmem.models._log import RequestLog


@dataclass(frozen=True)
class _Entry:
    target: str  # "module:attribute"
    extra: str | None  # the pip extra that provides its optional dependencies
    needs: tuple[str, ...] = ()  # top-level modules that must import


_CHAT: dict[str, _Entry] = {
    "heuristic": _Entry("pmem.models._heuristic:HeuristicChatModel", None),
    "openai": _Entry("pmem.models._openai:OpenAIChatModel", None),
    "vllm": _Entry("pmem.models._vllm:VLLMChatModel", None, ("ray",)),
    "llamacpp": _Entry("pmem.models._llamacpp:LlamaCppChatModel", "cpu-llm", ("ray", "llama_cpp")),
}
_EMBED: dict[str, _Entry] = {
    "hashing": _Entry("pmem.models._hashing:HashingEmbedder", None, ("mmh3",)),
    "openai": _Entry("pmem.models._openai:OpenAIEmbedder", None),
    "vllm": _Entry("pmem.models._vllm:VLLMEmbedder", None, ("ray",)),
    "llamacpp": _Entry("pmem.models._llamacpp:LlamaCppEmbedder", "cpu-llm", ("ray", "llama_cpp")),
    "sentence-transformers": _Entry(
        "pmem.models._st:SentenceTransformerEmbedder", "st", ("sentence_transformers",)
    ),
}


#: backends whose replicas a sweep's driver launches once (Ray actors) and shares with every runner
HOSTED_BACKENDS = ("vllm", "llamacpp")


def register_chat_backend(
    name: str, target: str, *, extra: str | None = None, needs: tuple[str, ...] = ()
) -> None:
    """Add a chat backend: ``target`` is ``"module:Class"``; ``needs`` names modules its extra provides."""
    _CHAT[name] = _Entry(target, extra, tuple(needs))


def register_embedder_backend(
    name: str, target: str, *, extra: str | None = None, needs: tuple[str, ...] = ()
) -> None:
    _EMBED[name] = _Entry(target, extra, tuple(needs))


def chat_backends() -> list[str]:
    return sorted(_CHAT)


def embedder_backends() -> list[str]:
    return sorted(_EMBED)


def _resolve(table: dict[str, _Entry], spec: ModelSpec, kind: str, base: type[Model]) -> Any:
    entry = table.get(spec.backend)
    if entry is None:
        msg = f"unknown {kind} backend {spec.backend!r}; known: {', '.join(sorted(table))}"
        raise ValueError(msg)
    for module in entry.needs:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            hint = f"pip install 'pmem[{entry.extra}]'" if entry.extra else "pip install -e ."
            msg = f"{kind} backend {spec.backend!r} needs the package {module!r}, which is missing: {hint}"
            raise MissingDependencyError(msg) from exc
    module_name, attr = entry.target.split(":")
    cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        msg = f"{kind} backend {spec.backend!r} ({entry.target}) is not a subclass of pmem.models.{base.__name__}"
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
    model = _resolve(_CHAT, spec, "chat", ChatModel).from_spec(spec)
    if cache is None and log is None:
        return model
    from pmem.models._instrument import InstrumentedChatModel

    return InstrumentedChatModel(model, cache=cache, log=log)


def make_embedder(
    spec: ModelSpec | Mapping[str, Any] | str,
    *,
    cache: ResponseCache | None = None,
    log: RequestLog | None = None,
) -> Embedder:
    """Build an embedder from ``[models.embedder]``-style config."""
    spec = as_spec(spec)
    model = _resolve(_EMBED, spec, "embedder", Embedder).from_spec(spec)
    if cache is None and log is None:
        return model
    from pmem.models._instrument import InstrumentedEmbedder

    return InstrumentedEmbedder(model, cache=cache, log=log)
