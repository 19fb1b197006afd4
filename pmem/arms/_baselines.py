"""The baseline memory designs: the corners of the design space P-Mem is compared against.

Every baseline ingests the same units, calls the same extraction prompt (where it stores facts), the
same embedder, the same cosine retriever and the same reader as P-Mem; only the memory design differs.
Each class docstring says what it borrows from the system it stands for and what it leaves out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pmem.arms._common import ArmBase
from pmem.bench import chunk_events
from pmem.memory.prompts import CRUD_EVENTS, build_messages, template
from pmem.memory.writepath import (
    Fact,
    VectorIndex,
    completion_json,
    count_tokens,
    event_line,
    extract_units,
    unit_text,
)
from pmem.models import chars_that_fit

if TYPE_CHECKING:
    from pmem.arms._base import ModelSet, ReadResult
    from pmem.bench import Event, Question


class NoMemoryArm(ArmBase):
    """No memory: the reader answers from the question alone (empty context)."""

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        return None

    async def read(self, question: Question) -> ReadResult:
        return self.make_read([])


class LongContextArm(ArmBase):
    """Long context: the most recent stream that fits the window, oldest first, no retrieval.

    The read is bounded by ``max_chars`` (default 56,000: ~13k tokens of a 16k window) and, when the
    agent model says how long its context is (``context_tokens``), by what fits that window beside the
    answer prompt and the reply (counted at :data:`~pmem.models._tokens.FIT_CHARS_PER_TOKEN`). The whole
    stream is kept, so growing histories show the window's most recent fraction only; how many events
    each question's read left out is in ``extra()["dropped_events"]``.

    The sweep's read budget (``read_tokens``) does not bound ``long-context``: it is the ceiling the
    memory arms are compared with. ``long-context-recent`` (option ``recent``) keeps only the most recent
    turns that fit the budget, as a memory arm's read would be held to it.
    """

    OPTIONS = (*ArmBase.OPTIONS, "max_chars", "recent")

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, models, options)
        self.max_chars = int(self.options.get("max_chars", 56_000))
        self._lines: list[str] = []
        self._dropped: dict[str, int] = {}

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        for unit in units:
            self._lines.extend(event_line(e) for e in unit)

    def budget_chars(self, question: Question) -> int:
        """The characters of stream this question's read may hold."""
        window = getattr(self.models.agent, "context_tokens", None)
        if not window:
            return self.max_chars
        answer = template("answer")
        frame = build_messages(
            "answer", CONTEXT="", QUESTION=question.text, DATE=question.question_date or ""
        )
        frame_chars = sum(len(m["content"]) for m in frame) + 16 * len(frame)  # chat-template framing
        return min(self.max_chars, max(0, chars_that_fit(int(window) - answer.max_tokens) - frame_chars))

    async def read(self, question: Question) -> ReadResult:
        budget = self.budget_chars(question)
        tokens = self.read_tokens if self.options.get("recent") else None
        picked: list[str] = []
        size = used = 0
        for line in reversed(self._lines):
            add = len(line) + (1 if picked else 0)
            if size + add > budget:
                break
            if tokens is not None:
                # each line counted alone (a newline joins them: at most one token more each)
                cost = count_tokens(line) + (1 if picked else 0)
                if used + cost > tokens:
                    break
                used += cost
            picked.append(line)
            size += add
        picked.reverse()
        self._dropped[question.id] = len(self._lines) - len(picked)
        return self.make_read(picked)

    def extra(self) -> dict[str, Any]:
        return {**super().extra(), "dropped_events": dict(self._dropped)}

    def retained(self) -> bytes:
        return "\n".join(self._lines).encode()


@dataclass
class _Item:
    text: str
    t: int  # arrival index (event index of its source)
    events: frozenset[int] = frozenset()
    key: str | None = None
    value: str | None = None
    valid_at: int | None = None
    invalid_at: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class _ItemStore(ArmBase):
    """A flat store of text items in one cosine index (slot = position in ``_items``)."""

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, models, options)
        self._items: list[_Item] = []
        self._index = VectorIndex()
        self._pending: list[int] = []

    def _add(self, item: _Item, vector: Any = None) -> int:
        slot = len(self._items)
        self._items.append(item)
        if vector is None:
            self._pending.append(slot)
        else:
            self._index.set(slot, vector)
        return slot

    async def _flush(self) -> None:
        if not self._pending:
            return
        slots, self._pending = self._pending, []
        live = [s for s in slots if self._items[s].text]
        if live:
            self._index.set_many(live, await self.embed([self._items[s].text for s in live]))

    async def _top(self, query: str, k: int) -> list[int]:
        await self._flush()
        q = (await self.embed([query]))[0]
        return [s for s, _ in self._index.search(q, k)]

    def _k(self) -> int:
        if "top_k" in self.options:
            return self.top_k
        return 10 if self.stream == "events" else self.DEFAULT_TOP_K

    def retained(self) -> bytes:
        # deleted items (CRUD) are blanked; invalidated edges (bitemporal) are kept, so they count
        return "\n".join(it.text for it in self._items if it.text).encode()

    def is_current(self, slot: int) -> bool:
        """Not deleted (CRUD) and not invalidated (bitemporal); pending items count as stored."""
        it = self._items[slot]
        return bool(it.text) and it.invalid_at is None

    def active_facts(self) -> list[tuple[str, str, frozenset[int]]] | None:
        return [
            (it.key, it.value, it.events)
            for s, it in enumerate(self._items)
            if it.key is not None and it.value is not None and self.is_current(s)
        ]


class RawArm(_ItemStore):
    """Raw facts: every extracted version kept in a flat store; cosine top-12 in similarity order.

    ``ordered=True`` is the order-tagged variant: the retrieved items sorted by arrival and each
    prefixed ``[t=i]`` (i = the stream index of its source event), so the reader can sort by recency.
    On event streams (ALFWorld-Revision) the items are the events themselves (the paper's raw pool,
    top-10); elsewhere they are the extracted ``key: value`` facts. ``items`` overrides
    (``facts``|``events``).
    """

    OPTIONS = (*ArmBase.OPTIONS, "items", "ordered")

    def __init__(
        self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None, ordered: bool = False
    ) -> None:
        super().__init__(name, models, options)
        self.ordered = bool(self.options.get("ordered", ordered))
        self.items_mode = str(self.options.get("items", "auto"))

    def _items_are_events(self) -> bool:
        if self.items_mode == "auto":
            return self.stream == "events"
        return self.items_mode == "events"

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        if self._items_are_events():
            for unit in units:
                for e in unit:
                    self._add(_Item(event_line(e), e.index, frozenset({e.index})))
            return
        for i, ex in enumerate(await extract_units(self, units)):
            await self.pause(i)
            for f in ex.facts:
                self._stats.facts += 1
                t = f.event if f.event >= 0 else ex.unit[0].index
                ev = frozenset({f.event}) if f.event >= 0 else frozenset()
                self._add(_Item(f"{f.key}: {f.value}", t, ev, f.key, f.value))
                self.record("add", f.key, f.value, True, event=ex.unit[0].index)
        self._stats.cells = len(self._items)

    async def read(self, question: Question) -> ReadResult:
        slots = await self._top(question.text, self.read_k(self._k()))
        slots = self.within_budget(slots, self._line)
        if self.ordered:
            slots = sorted(slots, key=lambda s: (self._items[s].t, s))
        return self.make_read([self._line(s) for s in slots], [str(s) for s in slots])

    def _line(self, slot: int) -> str:
        it = self._items[slot]
        return f"[t={it.t}] {it.text}" if self.ordered else it.text


class ChunksArm(_ItemStore):
    """Chunk retrieval in the style of MemoryOS: the stream stored as 1,000-character line-aligned
    chunks (one session per chunk in dialogue), each keyed by its own text; the top-5 chunks by cosine.

    Borrows MemoryOS's chunk/page store with content keys (its indexing choice that works; the default
    generic "Conversation session on {date}" key is not reproduced). Leaves out its short/mid/long-term
    tiers, heat-based promotion and persona summaries.
    """

    DEFAULT_TOP_K = 5

    async def _ingest_units(self, units: list[list[Event]]) -> None:

        if self.stream == "dialogue":
            groups = units
        else:
            flat = [e for u in units for e in u]
            groups = chunk_events(flat, self.chunk_chars)
        for g in groups:
            self._add(_Item(unit_text(g), g[0].index, frozenset(e.index for e in g)))

    async def read(self, question: Question) -> ReadResult:
        slots = await self._top(question.text, self.read_k(self.top_k))
        slots = self.within_budget(slots, lambda s: self._items[s].text)
        return self.make_read([self._items[s].text for s in slots], [str(s) for s in slots])

    def active_facts(self) -> list[tuple[str, str, frozenset[int]]] | None:
        return None


class _FactMemory(_ItemStore):
    """Shared by the fact-level baselines: ingest = extract per unit, then one decision per fact."""

    OPTIONS = (*ArmBase.OPTIONS, "compare_k")

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, models, options)
        self.compare_k = int(self.options.get("compare_k", 10))

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        for i, ex in enumerate(await extract_units(self, units)):
            await self.pause(i)
            if not ex.facts:
                continue
            texts = [f"{f.key}: {f.value}" for f in ex.facts]
            vecs = await self.embed(texts)
            for f, text, vec in zip(ex.facts, texts, vecs, strict=True):
                self._stats.facts += 1
                t = f.event if f.event >= 0 else ex.unit[0].index
                await self._write(f, text, vec, t, ex.unit[0].index)
        self._stats.cells = len(self._index)

    async def _write(self, fact: Fact, text: str, vec: Any, t: int, first_event: int) -> None:
        raise NotImplementedError

    def _memories(self, vec: Any) -> list[int]:
        return [s for s, _ in self._index.search(vec, self.compare_k)]

    def _memory_lines(self, slots: list[int]) -> str:
        return "\n".join(f"[m{s}] {self._items[s].key}: {self._items[s].value}" for s in slots)

    @staticmethod
    def _slot_of(ref: Any, shown: list[int]) -> int | None:
        text = str(ref or "").strip().strip("[]").lower()
        if text.startswith("m"):
            text = text[1:]
        if not text.isdigit():
            return None
        slot = int(text)
        return slot if slot in shown else None

    async def read(self, question: Question) -> ReadResult:
        slots = await self._top(question.text, self.read_k(self._k()))
        slots = self.within_budget(slots, self._fact_line)
        return self.make_read([self._fact_line(s) for s in slots], [str(s) for s in slots])

    def _fact_line(self, slot: int) -> str:
        return f"{self._items[slot].key}: {self._items[slot].value}"


class CrudArm(_FactMemory):
    """CRUD memory in the style of the Mem0 paper: for each extracted fact the model sees the most
    similar stored memories and chooses ADD / UPDATE / DELETE / NONE; UPDATE overwrites the memory in
    place, DELETE removes it. Nothing displaced is kept (commitment without retention).

    Borrows Mem0's extract-then-update pipeline and its four operations over the top-s similar memories
    (s = ``compare_k``, 10). Leaves out Mem0's conversation-summary context, its graph variant and
    memory metadata (actor, timestamps); an invalid decision counts as NONE.
    """

    async def _write(self, fact: Fact, text: str, vec: Any, t: int, first_event: int) -> None:
        shown = self._memories(vec)
        c = await self.call("crud", FACT=f"{text}\nstatus: {fact.status}", MEMORIES=self._memory_lines(shown))
        payload = completion_json(c)
        event = str((payload or {}).get("event") or "").upper()
        ev = frozenset({fact.event}) if fact.event >= 0 else frozenset()
        if payload is None or event not in CRUD_EVENTS:
            self.record(
                "none",
                fact.key,
                fact.value,
                False,
                f"crud: invalid decision {c.text[:80]!r}",
                event=first_event,
            )
            return
        if event == "ADD":
            self._add(_Item(text, t, ev, fact.key, fact.value), vec)
            self.record("add", fact.key, fact.value, True, event=first_event)
            return
        if event == "NONE":
            self.record("none", fact.key, fact.value, True, event=first_event)
            return
        slot = self._slot_of(payload.get("id"), shown)
        if slot is None:
            self.record(
                event.lower(),
                fact.key,
                fact.value,
                False,
                f"crud: {event} names no shown memory ({payload.get('id')!r})",
                event=first_event,
            )
            return
        old = self._items[slot]
        if event == "UPDATE":
            new_value = payload.get("value") or fact.value
            self._items[slot] = _Item(
                f"{fact.key}: {new_value}", t, old.events | ev, fact.key, str(new_value)
            )
            self._index.set(slot, vec)
            self.record(
                "update",
                fact.key,
                str(new_value),
                True,
                f"overwrote {old.key}: {old.value}",
                event=first_event,
            )
        else:
            self._items[slot] = _Item("", old.t, old.events, None, None)
            self._index.clear(slot)
            self.record("delete", old.key, old.value, True, event=first_event)


class AddOnlyArm(_FactMemory):
    """Add-only memory in the style of current Mem0: every extracted fact is added, deduplicated only
    by the hash of its normalized text; contradicting facts coexist, and the reader sees them in
    similarity order.

    Borrows current Mem0's add-only write (no model-driven UPDATE/DELETE) and hash deduplication.
    Leaves out its entity linking, metadata filters and reranking.
    """

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, models, options)
        self._hashes: set[str] = set()

    async def _write(self, fact: Fact, text: str, vec: Any, t: int, first_event: int) -> None:
        digest = hashlib.sha256(" ".join(text.lower().split()).encode()).hexdigest()
        if digest in self._hashes:
            self.record("none", fact.key, fact.value, True, "duplicate hash", event=first_event)
            return
        self._hashes.add(digest)
        ev = frozenset({fact.event}) if fact.event >= 0 else frozenset()
        self._add(_Item(text, t, ev, fact.key, fact.value), vec)
        self.record("add", fact.key, fact.value, True, event=first_event)


class BitemporalArm(_FactMemory):
    """A bitemporal knowledge graph in the style of Graphiti/Zep: facts are edges with ``valid_at``
    (arrival) and ``invalid_at``; for each new fact one model call marks the stored edges it duplicates
    (the new edge is then not added) and those it contradicts, which are invalidated at once. An
    invalidated edge is kept but never reopened. Reads take the top-k currently valid edges by cosine
    and list them most recent first.

    Borrows Graphiti's edge invalidation on contradiction, its duplicate check and its temporal fields.
    Leaves out entity-node extraction and resolution, episode nodes, community summaries and hybrid
    BM25/graph-distance reranking (one cosine retriever is shared by every arm).
    """

    async def _write(self, fact: Fact, text: str, vec: Any, t: int, first_event: int) -> None:
        shown = self._memories(vec)
        c = await self.call(
            "dedupe", FACT=f"{text}\nstatus: {fact.status}", MEMORIES=self._memory_lines(shown)
        )
        payload = completion_json(c)
        ev = frozenset({fact.event}) if fact.event >= 0 else frozenset()
        if payload is None:
            self.record(
                "noop",
                fact.key,
                fact.value,
                False,
                f"dedupe: reply is not JSON {c.text[:80]!r}",
                event=first_event,
            )
            return
        dups = [
            s for s in (self._slot_of(x, shown) for x in payload.get("duplicates") or []) if s is not None
        ]
        cons = [
            s
            for s in (self._slot_of(x, shown) for x in payload.get("contradictions") or [])
            if s is not None and s not in dups
        ]
        for s in cons:
            it = self._items[s]
            if it.invalid_at is None:
                it.invalid_at = t
                self._index.clear(s)
                self.record(
                    "invalidate", it.key, it.value, True, f"contradicted by {text}", event=first_event
                )
        if dups:
            for s in dups:
                self._items[s].events = self._items[s].events | ev
            self.record(
                "duplicate", fact.key, fact.value, True, f"duplicate of m{dups[0]}", event=first_event
            )
            return
        self._add(_Item(text, t, ev, fact.key, fact.value, valid_at=t), vec)
        self.record("add", fact.key, fact.value, True, event=first_event)

    async def read(self, question: Question) -> ReadResult:
        slots = await self._top(question.text, self.read_k(self._k()))
        slots = self.within_budget(slots, self._fact_line)
        slots = sorted(slots, key=lambda s: (-(self._items[s].valid_at or 0), s))  # recency first
        return self.make_read([self._fact_line(s) for s in slots], [str(s) for s in slots])

    def stored_values(self, key: str) -> list[str]:
        """Every value ever stored for ``key``, invalidated edges included."""
        return [it.value for it in self._items if it.key == key and it.value is not None]
