"""The ``mem0`` arm: Mem0 itself (``mem0ai``, the ``mem0`` extra), not our re-implementation of its design.

Each history gets its own Mem0 ``Memory``: an ``openai`` LLM and an ``openai`` embedder, both pointed at
the arm's :class:`~pmem.peers.MeteringProxy`; a ``faiss`` vector store and the SQLite history in a
folder of its own. Events enter through Mem0's own ``add`` (one write unit per call, ``infer=True``: its
extraction and its add-only decisions); a question reads Mem0's own ``search`` (``top_k`` hits, the
arm's retrieval budget) and goes to the reader call every arm makes.

Since 2.0 Mem0 is add-only: memories accumulate and nothing is overwritten or deleted, so the row to
compare it with is our ``add-only`` arm (the paper's CRUD description is Mem0 1.x).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pmem.memory.writepath import event_line
from pmem.peers._base import PeerArm
from pmem.peers._proxy import PEER_READ, PEER_WRITE

if TYPE_CHECKING:
    from pmem.arms import ReadResult
    from pmem.bench import Event, Question


class Mem0Arm(PeerArm):
    """Mem0 behind the harness's models. Options: ``top_k`` (search hits, 12), ``stream`` and
    ``chunk_chars`` (write units, as every arm), ``reply_tokens`` (its replies' ceiling)."""

    LIBRARY = "mem0"
    LABEL = "Mem0"
    EXTRA = "mem0"
    LOGGERS = ("mem0",)
    TELEMETRY_OFF = (("MEM0_TELEMETRY", "False"),)
    _scope = "history"  # Mem0's user_id: one Memory per history, so one scope

    async def open(self, url: str, dims: int) -> Any:
        try:
            from mem0 import Memory
        except ImportError as exc:
            raise self.missing(exc) from exc
        local = {"openai_base_url": url, "api_key": "local"}
        config = {
            "llm": {
                "provider": "openai",
                "config": {"model": "agent", "temperature": 0.0, "max_tokens": self.reply_tokens, **local},
            },
            "embedder": {
                "provider": "openai",
                "config": {"model": "embedder", "embedding_dims": dims, **local},
            },
            "vector_store": {
                "provider": "faiss",
                "config": {
                    "path": str(self.folder / "faiss"),
                    "embedding_model_dims": dims,
                    "collection_name": "h",
                },
            },
            "history_db_path": str(self.folder / "history.db"),
        }
        memory = await self.call_library(Memory.from_config, config)
        # Mem0's config cannot set its clients' timeout or retries: its clients are replaced by ours
        memory.llm.client = self.openai_client(url)
        memory.embedding_model.client = self.openai_client(url)
        return memory

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        memory = await self.client()
        self.proxy.purpose = PEER_WRITE
        for unit in units:
            text = "\n".join(event_line(e) for e in unit)
            result = await self.call_library(memory.add, text, user_id=self._scope)
            self.units += 1
            items = (result or {}).get("results", [])
            for item in items:
                op = str(item.get("event", "ADD")).lower()
                self.record(op, item.get("id"), item.get("memory"), True, event=unit[0].index)
            self.stats.facts += len(items)

    async def read(self, question: Question) -> ReadResult:
        memory = await self.client()
        self.proxy.purpose = PEER_READ
        found = await self.call_library(
            memory.search, question.text, top_k=self.top_k, filters={"user_id": self._scope}
        )
        hits = (found or {}).get("results", [])
        return self.make_read([str(h.get("memory", "")) for h in hits], [str(h.get("id", "")) for h in hits])
