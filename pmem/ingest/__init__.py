"""Cluster-scale ingestion of a user's stream into one P-Mem state (``pmem ingest``).

>>> from pmem.ingest import IngestSpec
>>> IngestSpec.default().agent.backend
'heuristic'
"""

from __future__ import annotations

from pmem.ingest._checkpoint import ResumeError
from pmem.ingest._driver import ingest
from pmem.ingest._erase import erase_in_workdir, sharded_copies
from pmem.ingest._reference import ingest_sequential
from pmem.ingest._report import IngestReport
from pmem.ingest._spec import IngestSpec, load_ingest_config, parse_ingest_config
from pmem.ingest._stream import EVENT_SCHEMA, StreamError, read_stream

__all__ = [
    "EVENT_SCHEMA",
    "IngestReport",
    "IngestSpec",
    "ResumeError",
    "StreamError",
    "erase_in_workdir",
    "ingest",
    "ingest_sequential",
    "load_ingest_config",
    "parse_ingest_config",
    "read_stream",
    "sharded_copies",
]
