"""What every arm shares: model calls with purpose tags and write accounting, the write log, how a
stream is cut into write units, JSON post-processing, and the one reader call.

Stream kinds (detected from the first events, or set with the ``stream`` option):

- ``facts``: numbered fact lines (``Event.source == "fact"``, FactConsolidation): 1,000-character
  line-aligned chunks (:func:`pmem.bench._chunks.chunk_events`).
- ``dialogue``: events carrying a ``session_id`` (LongMemEval): one session at a time.
- ``events``: anything else (ALFWorld-Revision): one event at a time.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pmem.arms._base import Answer, ReadResult, WriteRecord, WriteStats
from pmem.arms._prompts import build_messages, template
from pmem.arms._retrieval import count_tokens

if TYPE_CHECKING:
    import numpy as np

    from pmem.arms._base import ModelSet
    from pmem.bench._types import Event, History, Question
    from pmem.graph import ProvenanceGraph
    from pmem.models._types import Completion

STREAM_KINDS = ("facts", "dialogue", "events")
#: Write units between yields to the event loop: long in-process write paths (the template path over
#: 18k facts) must not hold up the other histories a runner drives on the same loop.
YIELD_EVERY = 64
WRITE_PURPOSES = frozenset({"extract", "annotate", "identity", "crud", "dedupe"})
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def detect_stream(events: Sequence[Event]) -> str:
    for e in events[:8]:
        if e.session_id is not None:
            return "dialogue"
        if e.source == "fact":
            return "facts"
    return "events"


def event_line(e: Event) -> str:
    """An event as one line of text (dated and with its speaker in dialogue)."""
    text = " ".join(e.text.split()) if e.session_id is not None else e.text
    if e.session_id is not None or e.time is not None:
        who = f"{e.role}: " if e.role else ""
        when = f"[{e.time}] " if e.time else ""
        return f"{when}{who}{text}"
    return text


def split_units(events: Sequence[Event], kind: str, chunk_chars: int = 1000) -> list[list[Event]]:
    """Write units in arrival order: chunks of fact lines, sessions, or single events."""
    if not events:
        return []
    if kind == "facts":
        from pmem.bench._chunks import chunk_events

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


def parse_json_object(text: str) -> dict[str, Any] | None:
    """Lenient JSON-object parse: code fences stripped, else the outermost ``{...}`` span."""
    if not text:
        return None
    m = _FENCE.match(text)
    body = m.group(1) if m else text.strip()
    for candidate in (body, body[body.find("{") : body.rfind("}") + 1] if "{" in body else ""):
        if not candidate:
            continue
        try:
            out = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(out, dict):
            return out
    return None


def completion_json(c: Completion) -> dict[str, Any] | None:
    if isinstance(c.parsed, dict):
        return c.parsed
    return parse_json_object(c.text)


def first_word(text: str) -> str:
    m = re.search(r"[A-Za-z]+", text or "")
    return m.group(0).lower() if m else ""


def clean_prediction(text: str) -> str:
    """The reader's answer: stripped; a leading ``Answer:`` dropped."""
    out = (text or "").strip()
    if out.lower().startswith("answer:"):
        out = out[7:].strip()
    return out


class ArmBase:
    """Shared plumbing. Subclasses implement ``_ingest_units`` and ``read``."""

    #: Names of the options this arm reads (documentation and validation).
    OPTIONS: tuple[str, ...] = ("stream", "chunk_chars", "top_k", "concurrency")
    DEFAULT_TOP_K = 12
    #: the prompt template of the extraction call (every arm that stores facts shares the paper's)
    extract_template = "extract"

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.models = models
        self.options = dict(options or {})
        unknown = sorted(set(self.options) - set(self.OPTIONS))
        if unknown:
            msg = f"arm {name!r}: unknown option(s) {unknown}; known: {sorted(self.OPTIONS)}"
            raise ValueError(msg)
        self.top_k = int(self.options.get("top_k", self.DEFAULT_TOP_K))
        self.chunk_chars = int(self.options.get("chunk_chars", 1000))
        self.concurrency = max(1, int(self.options.get("concurrency", 16)))
        self.stream: str | None = self.options.get("stream")
        if self.stream is not None and self.stream not in STREAM_KINDS:
            msg = f"arm {name!r}: stream must be one of {STREAM_KINDS}, got {self.stream!r}"
            raise ValueError(msg)
        self._stats = WriteStats()
        self._log: list[WriteRecord] = []
        self._calls_by_purpose: dict[str, int] = {}
        self._embed_calls = 0
        self._embed_texts = 0
        self._events: list[Event] = []
        self._question_audit: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ model calls

    async def call(self, name: str, **sections: str) -> Completion:
        t = template(name)
        c = await self.models.agent.complete(
            build_messages(name, **sections),
            purpose=t.purpose,
            max_tokens=t.reply_limit(sections),
            schema=t.schema,
        )
        self._calls_by_purpose[t.purpose] = self._calls_by_purpose.get(t.purpose, 0) + 1
        if t.purpose in WRITE_PURPOSES:
            self._stats.model_calls += 1
            self._stats.prompt_tokens += int(c.prompt_tokens)
            self._stats.completion_tokens += int(c.completion_tokens)
        return c

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self._embed_calls += 1
        self._embed_texts += len(texts)
        return await self.models.embedder.embed(list(texts))

    # ------------------------------------------------------------------ writes

    def record(
        self,
        op: str,
        key: str | None,
        value: str | None,
        applied: bool,
        reason: str | None = None,
        **extra: Any,
    ) -> None:
        self._log.append(WriteRecord(len(self._log), op, key, value, applied, reason, **extra))
        if applied:
            self._stats.ops[op] = self._stats.ops.get(op, 0) + 1

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

    @staticmethod
    async def pause(i: int) -> None:
        """Yield to the event loop every :data:`YIELD_EVERY` units of a write loop."""
        if i and i % YIELD_EVERY == 0:
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ reads

    async def read(self, question: Question) -> ReadResult:
        raise NotImplementedError

    def make_read(self, lines: Sequence[str], items: Sequence[str] = ()) -> ReadResult:
        text = "\n".join(lines)
        return ReadResult(text=text, tokens=count_tokens(text), chars=len(text), items=tuple(items))

    async def answer(self, question: Question) -> Answer:
        read = await self.read(question)
        return await reader_answer(self, read, question)

    # ------------------------------------------------------------------ reporting

    def write_stats(self) -> WriteStats:
        return replace(self._stats, ops=dict(self._stats.ops))

    def write_log(self) -> list[WriteRecord]:
        return list(self._log)

    def take_write_log(self) -> list[WriteRecord]:
        """The write log so far, which the arm then forgets: a writer that runs for a whole stream (an
        ingest worker) hands it over in pieces instead of holding one record per write."""
        log, self._log = self._log, []
        return log

    def graph(self) -> ProvenanceGraph | None:
        return None

    def retained(self) -> bytes:
        """What the memory holds, as bytes (its saved state where it has one); the harness's own copy
        of the stream (``_events``, for audits) is not the memory's."""
        graph = self.graph()
        return b"" if graph is None else graph.to_bytes()

    def extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "calls_by_purpose": dict(sorted(self._calls_by_purpose.items())),
            "embed_calls": self._embed_calls,
            "embedded_texts": self._embed_texts,
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
        from pmem.arms._audit import audit_store

        facts = self.active_facts()
        if facts is None:
            return {}
        events = list(history.events) if history is not None else self._events
        return audit_store(events, facts)

    def note_question_audit(self, question: Question) -> None:
        if self.stream != "facts":
            return
        from pmem.arms._audit import AuditIndex

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
    return Answer(prediction=clean_prediction(c.text), read=read, raw=c.text, error=c.error)
