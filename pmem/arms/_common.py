"""What every arm shares: a :class:`~pmem.memory.writepath.Writer` (model calls with purpose tags and
write accounting, the write log), its options, how a stream is cut into write units, and the one reader
call.

Stream kinds (detected from the first events, or set with the ``stream`` option):

- ``facts``: numbered fact lines (``Event.source == "fact"``, FactConsolidation): 1,000-character
  line-aligned chunks (:func:`pmem.bench._chunks.chunk_events`).
- ``dialogue``: events carrying a ``session_id`` (LongMemEval): one session at a time.
- ``events``: anything else (ALFWorld-Revision): one event at a time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pmem.arms._audit import AuditIndex, audit_store
from pmem.arms._base import Answer, ReadResult
from pmem.bench import chunk_events
from pmem.memory.writepath import Writer, count_tokens, fact_line_value, fit, pause

if TYPE_CHECKING:
    from pmem.arms._base import ModelSet
    from pmem.bench import Event, History, Question
    from pmem.graph import ProvenanceGraph

STREAM_KINDS = ("facts", "dialogue", "events")
T = TypeVar("T")


def detect_stream(events: Sequence[Event]) -> str:
    for e in events[:8]:
        if e.session_id is not None:
            return "dialogue"
        if e.source == "fact":
            return "facts"
    return "events"


def split_units(events: Sequence[Event], kind: str, chunk_chars: int = 1000) -> list[list[Event]]:
    """Write units in arrival order: chunks of fact lines, sessions, or single events."""
    if not events:
        return []
    if kind == "facts":
        return chunk_events(events, chunk_chars)
    if kind == "dialogue":
        units: list[list[Event]] = []
        for e in events:
            if units and units[-1][-1].session_id == e.session_id:
                units[-1].append(e)
            else:
                units.append([e])
        return units
    return [[e] for e in events]


#: a memory key as a reader may copy it (``melanie.hobby``); and words joined by underscores
_IDENTIFIER = re.compile(r"[a-z0-9]+(?:[._][a-z0-9]+)+")
_TAG = re.compile(r"\[t=(\d+)\]\s*(.*)", re.S)
_KEY_COLON_VALUE = re.compile(r"[a-z0-9]+(?:[._][a-z0-9]+)+:\s+(.+)", re.S)
_SNAKE_WORDS = re.compile(r"(?=[a-z0-9_]*[a-z])[a-z0-9]+(?:_[a-z0-9]+)+")


def clean_prediction(text: str, context: str = "") -> str:
    r"""The reader's answer: stripped; a leading ``Answer:`` dropped. The answer prompt asks for words,
    never a key, an id or a tag, and a small model still copies what it read: an item's ``[t=N]`` tag
    is dropped (a bare tag is read as the item it names in ``context``), an item as a store lists it
    (``key: value``) is read as its value, a memory key as the key's value where ``context`` shows
    ``key = value``, and words joined by underscores as words.

    >>> clean_prediction("Answer: melanie.hobby", "melanie.hobby = pottery (current; from D1:4, 8 May 2023)")
    'pottery'
    >>> clean_prediction("[t=44]", "[t=12] ann.pet: a cat\n[t=44] ann.city: Rome"), clean_prediction("[t=3] ann.pet: a dog")
    ('Rome', 'a dog')
    >>> clean_prediction("improving_education_and_infrastructure")
    'improving education and infrastructure'
    >>> clean_prediction("fridge 1"), clean_prediction("3.5"), clean_prediction("example.com")
    ('fridge 1', '3.5', 'example.com')
    """
    out = (text or "").strip()
    if out.lower().startswith("answer:"):
        out = out[7:].strip()
    tagged = _TAG.fullmatch(out)
    if tagged is not None:  # "[t=17] ...": the item's tag copied; a bare tag names the item itself
        out = tagged.group(2) or next(
            (ln.split("] ", 1)[1] for ln in context.splitlines() if ln.startswith(f"[t={tagged.group(1)}] ")),
            "",
        )
    stated = _KEY_COLON_VALUE.fullmatch(out)
    if stated is not None:  # "joanna.recommendation: the movie": an item as the store lists it
        out = stated.group(1)
    if _IDENTIFIER.fullmatch(out):
        for line in context.splitlines():
            if line.startswith(f"{out} = "):
                return fact_line_value(line)
    if _SNAKE_WORDS.fullmatch(out):
        return out.replace("_", " ")
    return out


class ArmBase(Writer):
    """Shared plumbing: the :class:`~pmem.memory.writepath.Writer` (model calls, write log) of one
    memory design, its options, stream splitting, the reader call and the audits. Subclasses implement
    ``_ingest_units`` and ``read``."""

    #: Names of the options this arm reads (documentation and validation).
    OPTIONS: tuple[str, ...] = ("stream", "chunk_chars", "top_k", "concurrency", "read_tokens")
    DEFAULT_TOP_K = 12
    #: with a read budget and no ``top_k`` of its own, how many items a read ranks to fill the budget
    BUDGET_CANDIDATES = 40

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.models = models
        self.options = dict(options or {})
        unknown = sorted(set(self.options) - set(self.OPTIONS))
        if unknown:
            msg = f"arm {name!r}: unknown option(s) {unknown}; known: {sorted(self.OPTIONS)}"
            raise ValueError(msg)
        super().__init__(models.agent, models.embedder, concurrency=int(self.options.get("concurrency", 16)))
        self.top_k = int(self.options.get("top_k", self.DEFAULT_TOP_K))
        self.chunk_chars = int(self.options.get("chunk_chars", 1000))
        self.stream: str | None = self.options.get("stream")
        #: the read budget (tokens of what the reader is shown; ``read_tokens``, one value for every arm
        #: of a sweep, ``[run] read_tokens``): a read keeps its best items that fit; None: no budget
        budget = self.options.get("read_tokens")
        self.read_tokens: int | None = None if budget is None else int(budget)
        if self.read_tokens is not None and self.read_tokens <= 0:
            msg = f"arm {name!r}: read_tokens must be a positive number of tokens, got {budget!r}"
            raise ValueError(msg)
        if self.stream is not None and self.stream not in STREAM_KINDS:
            msg = f"arm {name!r}: stream must be one of {STREAM_KINDS}, got {self.stream!r}"
            raise ValueError(msg)
        self._events: list[Event] = []
        self._question_audit: dict[str, dict[str, Any]] = {}

    async def ingest(self, events: Sequence[Event]) -> None:
        events = list(events)
        if not events:
            return
        if self.stream is None:
            self.stream = detect_stream(events)
        self._events.extend(events)
        await self._ingest_units(split_units(events, self.stream, self.chunk_chars))

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        raise NotImplementedError

    pause = staticmethod(pause)

    # ------------------------------------------------------------------ reads

    async def read(self, question: Question) -> ReadResult:
        raise NotImplementedError

    def read_k(self, k: int) -> int:
        """How many items a read ranks: ``k``, or with a read budget and no ``top_k`` option enough to
        fill the budget (:data:`BUDGET_CANDIDATES`)."""
        if self.read_tokens is None or "top_k" in self.options:
            return k
        return max(k, self.BUDGET_CANDIDATES)

    def within_budget(self, ranked: Sequence[T], line: Callable[[T], str]) -> list[T]:
        """The items of ``ranked`` (best first) whose lines fit the read budget together, in rank
        order; one that does not fit is passed over for smaller ones after it. All without a budget."""
        return fit(ranked, self.read_tokens, lambda item: count_tokens(line(item)))

    def make_read(
        self, lines: Sequence[str], items: Sequence[str] = (), cites: Sequence[str] = ()
    ) -> ReadResult:
        text = "\n".join(lines)
        return ReadResult(
            text=text, tokens=count_tokens(text), chars=len(text), items=tuple(items), cites=tuple(cites)
        )

    async def answer(self, question: Question) -> Answer:
        read = await self.read(question)
        return await reader_answer(self, read, question)

    # ------------------------------------------------------------------ reporting

    def graph(self) -> ProvenanceGraph | None:
        return None

    def retained(self) -> bytes:
        """What the memory holds, as bytes (its saved state where it has one); the harness's own copy
        of the stream (``_events``, for audits) is not the memory's."""
        graph = self.graph()
        return b"" if graph is None else graph.to_bytes()

    def extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "calls_by_purpose": dict(sorted(self.calls_by_purpose.items())),
            "embed_calls": self.embed_calls,
            "embedded_texts": self.embedded_texts,
            "stream": self.stream,
        }
        if self._question_audit:
            out["question_audit"] = dict(self._question_audit)
        return out

    # ------------------------------------------------------------------ audit

    def active_facts(self) -> list[tuple[str, str, frozenset[int]]] | None:
        """(key, value, attributed event indices) of every item the arm treats as current, or None when
        the arm keeps no fact-level store (the FactConsolidation write-path audit is then undefined)."""
        return None

    def audit(self, history: History | None = None) -> dict[str, Any]:
        """FactConsolidation write-path audit over the ingested stream (empty when undefined)."""

        facts = self.active_facts()
        if facts is None:
            return {}
        events = list(history.events) if history is not None else self._events
        return audit_store(events, facts)

    def note_question_audit(self, question: Question) -> None:
        if self.stream != "facts":
            return

        version = (len(self._log), len(self._events), self._stats.facts)
        cached = getattr(self, "_audit_cache", None)
        if cached is None or cached[0] != version:
            facts = self.active_facts()
            if facts is None:
                return
            cached = self._audit_cache = (version, AuditIndex(self._events, facts))
        row = cached[1].question(question)
        if row:
            self._question_audit[question.id] = row


async def reader_answer(arm: ArmBase, read: ReadResult, question: Question) -> Answer:
    """The one reader call every arm makes: the answer prompt over what the arm read."""
    arm.note_question_audit(question)
    sections = {"CONTEXT": read.text, "QUESTION": question.text}
    if question.question_date:
        sections["DATE"] = f"The question is asked on {question.question_date}."
    c = await arm.call("answer", **sections)
    return Answer(prediction=clean_prediction(c.text, read.text), read=read, raw=c.text, error=c.error)
