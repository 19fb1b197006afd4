"""The model layer: one async interface for chat, structured output and embeddings.

Backends by name (imported lazily): chat ``heuristic`` (deterministic, no LLM), ``openai`` (any
OpenAI-compatible endpoint), ``vllm`` (replicas hosted by Ray actors), ``llamacpp`` (the same hosting
with llama.cpp's server on CPU); embedders ``hashing``, ``openai``, ``vllm``, ``llamacpp``,
``sentence-transformers``. See docs/models.md.

>>> import asyncio
>>> agent = make_chat_model({"backend": "heuristic"})
>>> prompt = format_sections({"KEY_A": "apple_1.location", "KEY_B": "apple_2.location"})
>>> asyncio.run(agent.complete([{"role": "user", "content": prompt}], purpose="identity")).text
'different'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pmem._lazy import lazy_exports
from pmem.models._cache import ResponseCache
from pmem.models._errors import MissingDependencyError, ModelCallError, one_line
from pmem.models._instrument import InstrumentedChatModel, InstrumentedEmbedder
from pmem.models._log import EMBED_PURPOSE, REQUEST_COLUMNS, RequestLog, records_to_table, requests_schema
from pmem.models._registry import (
    HOSTED_BACKENDS,
    chat_backends,
    embedder_backends,
    hosted_model_label,
    make_chat_model,
    make_embedder,
    model_id_of,
    register_chat_backend,
    register_embedder_backend,
    validate_spec,
)
from pmem.models._routing import RoutedChatModel, RoutedEmbedder
from pmem.models._spec import SECRET_OPTIONS, ModelKind, ModelSpec, ModelSpecError, redacted, thaw
from pmem.models._tokens import chars_that_fit, estimate_prompt_tokens, estimate_tokens
from pmem.models._types import (
    ANY_JSON_OBJECT,
    PURPOSES,
    CallContext,
    CallOptions,
    ChatModel,
    Completion,
    Embedder,
    Embedding,
    EmbedRequest,
    InnerLimits,
    RequestRecord,
)
from pmem.models.sections import format_sections, parse_sections

if TYPE_CHECKING:
    from pmem.models._heuristic import HeuristicChatModel
    from pmem.models._hosted import PooledModel
    from pmem.models._openai import openai_replicas

# name -> module: imported on first use, so that `import pmem.models` stays cheap (no aiohttp, no regexes
# of the heuristic agent until needed)
_LAZY: dict[str, str] = {
    "HeuristicChatModel": "_heuristic",
    "PooledModel": "_hosted",
    "openai_replicas": "_openai",
}

#: How reports label the heuristic backend.
HEURISTIC_LABEL = "heuristic (no LLM)"

__all__ = [
    "ANY_JSON_OBJECT",
    "EMBED_PURPOSE",
    "HEURISTIC_LABEL",
    "HOSTED_BACKENDS",
    "PURPOSES",
    "REQUEST_COLUMNS",
    "SECRET_OPTIONS",
    "CallContext",
    "CallOptions",
    "ChatModel",
    "Completion",
    "EmbedRequest",
    "Embedder",
    "Embedding",
    "HeuristicChatModel",
    "InnerLimits",
    "InstrumentedChatModel",
    "InstrumentedEmbedder",
    "MissingDependencyError",
    "ModelCallError",
    "ModelKind",
    "ModelSpec",
    "ModelSpecError",
    "PooledModel",
    "RequestLog",
    "RequestRecord",
    "ResponseCache",
    "RoutedChatModel",
    "RoutedEmbedder",
    "chars_that_fit",
    "chat_backends",
    "embedder_backends",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "format_sections",
    "hosted_model_label",
    "make_chat_model",
    "make_embedder",
    "model_id_of",
    "one_line",
    "openai_replicas",
    "parse_sections",
    "records_to_table",
    "redacted",
    "register_chat_backend",
    "register_embedder_backend",
    "requests_schema",
    "thaw",
    "validate_spec",
]


__getattr__ = lazy_exports("pmem.models", _LAZY)
