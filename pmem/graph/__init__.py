"""P-Mem core: the typed provenance graph, its operations, materialization and Arrow state.

This package imports nothing else from ``pmem`` and no Ray or HTTP library: it is the part of P-Mem
meant to be embedded in any agent.
"""

from __future__ import annotations

from pmem.graph._graph import ProvenanceGraph
from pmem.graph._identity._hashing import (
    HASHING_DIM,
    HASHING_NGRAMS,
    embedding_text,
    hash_char_ngrams,
    sparse_char_ngrams,
)
from pmem.graph._identity._registry import (
    GENERIC_KEY_WORDS,
    HashingKeyEmbedding,
    IdentityDecision,
    KeyRegistry,
    rule_confirm,
)
from pmem.graph._ops._bulk import WRITE_BATCH_SCHEMA, BatchResult
from pmem.graph._ops._codes import DISCLOSURES, EDGE_KINDS, OPS, STATUSES
from pmem.graph._ops._patch import Lowering, Patch, PatchController, lower_patch
from pmem.graph._ops._rederive import ErasureReceipt, MergeReceipt
from pmem.graph._ops._render import escape as escape_value
from pmem.graph._ops._store import ERASED_SOURCE
from pmem.graph._ops._types import Cell, Evidence, Operation, OpResult, ScoredCell, Version
from pmem.graph._ops._validate import check_text, key_problem, key_problems, valid_instant
from pmem.graph._ops._why import KeyView, Why, why
from pmem.graph._persist._guard import StateChangedError
from pmem.graph._persist._journaled import JournaledGraph
from pmem.graph._persist._sealing import StateFileError
from pmem.graph._persist._state import journal_path
from pmem.graph._read._reader import StateReader, read_key_versions
from pmem.graph._read._search import SearchIndexError, build_search_index, search_index_dir
from pmem.graph._read._write_log import WRITE_LOG_SCHEMA, apply_log, partition_of, partitions_of
from pmem.graph.shards import is_sharded

__all__ = [
    "DISCLOSURES",
    "EDGE_KINDS",
    "ERASED_SOURCE",
    "GENERIC_KEY_WORDS",
    "HASHING_DIM",
    "HASHING_NGRAMS",
    "OPS",
    "STATUSES",
    "WRITE_BATCH_SCHEMA",
    "WRITE_LOG_SCHEMA",
    "BatchResult",
    "Cell",
    "ErasureReceipt",
    "Evidence",
    "HashingKeyEmbedding",
    "IdentityDecision",
    "JournaledGraph",
    "KeyRegistry",
    "KeyView",
    "Lowering",
    "MergeReceipt",
    "OpResult",
    "Operation",
    "Patch",
    "PatchController",
    "ProvenanceGraph",
    "ScoredCell",
    "SearchIndexError",
    "StateChangedError",
    "StateFileError",
    "StateReader",
    "Version",
    "Why",
    "apply_log",
    "build_search_index",
    "check_text",
    "embedding_text",
    "escape_value",
    "hash_char_ngrams",
    "is_sharded",
    "journal_path",
    "key_problem",
    "key_problems",
    "lower_patch",
    "partition_of",
    "partitions_of",
    "read_key_versions",
    "rule_confirm",
    "search_index_dir",
    "sparse_char_ngrams",
    "valid_instant",
    "why",
]
