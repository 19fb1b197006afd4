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

from pmem.models._cache import ResponseCache
from pmem.models._errors import MissingDependencyError, ModelCallError, one_line
from pmem.models._log import EMBED_PURPOSE, REQUEST_COLUMNS, RequestLog, records_to_table, requests_schema
from pmem.models._registry import (
    chat_backends,
    embedder_backends,
    make_chat_model,
    make_embedder,
    register_chat_backend,
    register_embedder_backend,
)
from pmem.models._spec import ModelSpec
from pmem.models._tokens import estimate_prompt_tokens, estimate_tokens
from pmem.models._types import (
    PURPOSES,
    CallContext,
    CallOptions,
    ChatModel,
    Completion,
    Embedder,
    Embedding,
    EmbedRequest,
    RequestRecord,
)
from pmem.models.sections import format_sections, parse_sections

#: How reports label the heuristic backend.
HEURISTIC_LABEL = "heuristic (no LLM)"

__all__ = [
    "EMBED_PURPOSE",
    "HEURISTIC_LABEL",
    "PURPOSES",
    "REQUEST_COLUMNS",
    "CallContext",
    "CallOptions",
    "ChatModel",
    "Completion",
    "EmbedRequest",
    "Embedder",
    "Embedding",
    "MissingDependencyError",
    "ModelCallError",
    "ModelSpec",
    "RequestLog",
    "RequestRecord",
    "ResponseCache",
    "chat_backends",
    "embedder_backends",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "format_sections",
    "make_chat_model",
    "make_embedder",
    "one_line",
    "parse_sections",
    "records_to_table",
    "register_chat_backend",
    "register_embedder_backend",
    "requests_schema",
]
