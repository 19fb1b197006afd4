"""The graph's seams for the rest of P-Mem (the ingest, the harness, the servers), apart from the user's
surface in :mod:`pmem.graph`: how keys are partitioned across workers, the write log a partition ships to
the driver (split by owner, localized to a part, kept in sealed segments) and the hashing embedding of
key text.

An agent builder needs none of these; they are public so that the packages built on the graph do not
reach into its private modules.
"""

from __future__ import annotations

from pmem.graph._identity._hashing import (
    HASHING_DIM,
    HASHING_NGRAMS,
    embedding_text,
    hash_char_ngrams,
    sparse_char_ngrams,
)
from pmem.graph._read._write_log import (
    WRITE_LOG_SCHEMA,
    LogSegment,
    apply_log,
    conform,
    localize,
    partition_of,
    partitions_of,
    read_segment,
    split_log,
)

__all__ = [
    "HASHING_DIM",
    "HASHING_NGRAMS",
    "WRITE_LOG_SCHEMA",
    "LogSegment",
    "apply_log",
    "conform",
    "embedding_text",
    "hash_char_ngrams",
    "localize",
    "partition_of",
    "partitions_of",
    "read_segment",
    "sparse_char_ngrams",
    "split_log",
]
