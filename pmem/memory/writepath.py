"""The parts of the write and read path that the evaluation system drives: the ``pmem`` arms, the
baseline designs that share its extraction and retrieval, and ``pmem ingest``. An agent builder needs
none of them: :class:`pmem.Memory` holds them together.

- :class:`Writer`: model calls with purpose tags and write accounting, and the write log.
- :class:`WritePath`: P-Mem's write path and state read over one provenance graph.
- extraction: :func:`extract_units`, :func:`template_extraction` (the oracle's template parsers),
  :class:`Fact`, :class:`Extraction`; replies: :func:`completion_json`, :func:`first_word`.
- retrieval: :class:`VectorIndex`, the read-size count :func:`count_tokens`; recall:
  :class:`Recalled`, :func:`context_lines`, :func:`fit` (a read budget).
"""

from __future__ import annotations

from pmem.memory._cells import Head
from pmem.memory._extract import (
    Extraction,
    Fact,
    event_line,
    extract_units,
    no_fact_reason,
    normalize_key,
    parse_extraction,
    template_extraction,
    template_facts,
    unit_text,
)
from pmem.memory._recall import Recalled, context_lines, fact_line_value, fit
from pmem.memory._retrieval import VectorIndex, count_tokens
from pmem.memory._writepath import (
    DISCLOSURE_DEFAULT,
    WRITE_OPTIONS,
    WritePath,
    question_instant,
    validate_annotation,
)
from pmem.memory._writer import (
    PEER_READ,
    PEER_WRITE,
    WRITE_PURPOSES,
    Writer,
    WriteRecord,
    WriteStats,
    completion_json,
    first_word,
    parse_json_object,
    pause,
)

__all__ = [
    "DISCLOSURE_DEFAULT",
    "PEER_READ",
    "PEER_WRITE",
    "WRITE_OPTIONS",
    "WRITE_PURPOSES",
    "Extraction",
    "Fact",
    "Head",
    "Recalled",
    "VectorIndex",
    "WritePath",
    "WriteRecord",
    "WriteStats",
    "Writer",
    "completion_json",
    "context_lines",
    "count_tokens",
    "event_line",
    "extract_units",
    "fact_line_value",
    "first_word",
    "fit",
    "no_fact_reason",
    "normalize_key",
    "parse_extraction",
    "parse_json_object",
    "pause",
    "question_instant",
    "template_extraction",
    "template_facts",
    "unit_text",
    "validate_annotation",
]
