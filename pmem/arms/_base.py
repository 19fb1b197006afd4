"""The interface every memory design implements.

The runner drives an arm per history: ``ingest`` the events in arrival order (in slices, so questions
can be asked between events), then ``answer`` questions. An arm may also offer ``retained() -> bytes``,
everything its memory holds now (the built-in arms do): the provenance probes' erasure check searches
it, and leaves ``artifact_bytes`` null for an arm without one. An arm that holds a server or files (the
peer arms of :mod:`pmem.peers`) offers ``aclose()``: the runner awaits it when the history ends. Model
calls go through the model layer with purpose tags and a :class:`~pmem.models.CallContext` naming the
history and arm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pmem.memory.writepath import WriteRecord, WriteStats

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pmem.bench import Event, Question
    from pmem.graph import ProvenanceGraph
    from pmem.models import ChatModel, Embedder


@dataclass(frozen=True)
class ModelSet:
    agent: ChatModel
    embedder: Embedder
    judge: ChatModel | None = None


@dataclass(frozen=True)
class ReadResult:
    """What the reader is shown for one question."""

    text: str
    tokens: int
    chars: int
    items: tuple[str, ...] = ()
    #: the turns what was read cites, as the benchmark names them where it does ("D1:3"), else as
    #: evidence ids: a fact's cited turn and every turn shown (empty for a read that cites none)
    cites: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answer:
    prediction: str
    read: ReadResult
    raw: str = ""
    #: why the question got no answer from the model (its prompt did not fit the model's context)
    error: str | None = None


@runtime_checkable
class Arm(Protocol):
    name: str

    async def ingest(self, events: Sequence[Event]) -> None: ...

    async def read(self, question: Question) -> ReadResult: ...

    async def answer(self, question: Question) -> Answer: ...

    def write_stats(self) -> WriteStats: ...

    def write_log(self) -> list[WriteRecord]: ...

    def graph(self) -> ProvenanceGraph | None: ...

    def extra(self) -> dict[str, Any]: ...
