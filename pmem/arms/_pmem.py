"""The ``pmem`` arms: P-Mem's write path and state read (:class:`pmem.memory.writepath.WritePath`, the
code :class:`pmem.Memory` runs) over a benchmark's stream, and the read paths the paper compares.

Read paths: ``recall`` (facts and the turns they came from, ranked by BM25 and the embedder fused by
reciprocal rank, as dated lines within the read budget, ``read_tokens``; see
:mod:`pmem.memory._recall`), ``state`` (the paper's read: the write path's cosine top-k over
``key: value`` cells, rendered current value first with the disclosure defaults; one cell for an event
stream), ``auto`` (the default: ``recall`` for a dialogue, where what was said and when is the answer's
evidence; ``state`` for fact and event streams, whose one fact per event the cells hold word for word), ``iterative`` (up to three lookups of six more cells each, then the
answer), ``turns`` (top-k raw turns, no write path; retrieved pairs with cosine >= 0.55 and different dates
are put to the binary "different values of the queried attribute?" check and on yes the earlier-dated
turn is dropped; an optional question-only gate decides whether to prune at all: a one-token ``gate``
call, ``gate = "model"``, or a scikit-learn classifier, ``gate = "classifier"``, see
:mod:`pmem.arms._gate`).

The variants (``pmem-no-retention``, ``pmem-no-identity``, ``pmem-oracle``, ``pmem-paper``) are write
options (:data:`pmem.memory.writepath.WRITE_OPTIONS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pmem.arms._common import ArmBase
from pmem.arms._gate import QuestionGate
from pmem.memory.writepath import (
    WRITE_OPTIONS,
    VectorIndex,
    WritePath,
    context_lines,
    event_line,
    first_word,
)

if TYPE_CHECKING:
    from pmem.arms._base import ModelSet, ReadResult
    from pmem.bench import Event, Question
    from pmem.graph import ProvenanceGraph
    from pmem.memory.writepath import WriteStats


#: the recall read's budget (tokens) when the sweep sets none: a third of the LoCoMo slice's mean
#: long-context read (1,620 tokens in reports/cpu-qwen)
RECALL_TOKENS = 500
READ_MODES = ("auto", "recall", "state", "iterative", "turns")


class PMemArm(ArmBase):
    OPTIONS = (
        *ArmBase.OPTIONS,
        "read",
        "lookup_k",
        "max_lookups",
        "prune_threshold",
        "gate",
        "gate_examples",
        *WRITE_OPTIONS,
    )

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, models, options)
        o = self.options
        self.read_mode = str(o.get("read", "auto"))
        if self.read_mode not in READ_MODES:
            msg = f"arm {name!r}: read must be one of {', '.join(READ_MODES)}, got {self.read_mode!r}"
            raise ValueError(msg)
        self.lookup_k = int(o.get("lookup_k", 6))
        self.max_lookups = int(o.get("max_lookups", 3))
        self.prune_threshold = float(o.get("prune_threshold", 0.55))
        self.gate = str(o.get("gate", "none"))
        if self.gate not in ("none", "model", "classifier"):
            msg = f"arm {name!r}: gate must be none, model or classifier, got {self.gate!r}"
            raise ValueError(msg)
        self._classifier = None
        if self.gate == "classifier":
            path = o.get("gate_examples")
            self._classifier = QuestionGate.from_file(path) if path else QuestionGate.default()
        self._explicit_top_k = "top_k" in o
        #: the write path and state read, this arm being its writer (calls, write log)
        self.path = WritePath(self, {k: v for k, v in o.items() if k in WRITE_OPTIONS}, name=f"arm {name!r}")
        # turn read
        self._turns: list[Event] = []
        self._turn_index = VectorIndex()
        self._turns_pending = 0
        self._prune_log: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ write path

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        if self.read_mode == "turns":
            await self._ingest_turns(units)
            return
        self.path.stream = self.stream or "events"
        await self.path.write(units)

    async def _ingest_turns(self, units: list[list[Event]]) -> None:
        for i, unit in enumerate(units):
            await self.pause(i)
            for e in unit:
                self.path.graph.observe(e.text, source=e.source or "user", time=e.time)
                self._turns.append(e)
        self.stats.facts = 0
        self.stats.cells = 0

    async def _flush_turns(self) -> None:
        start = self._turns_pending
        if start >= len(self._turns):
            return
        texts = [e.text for e in self._turns[start:]]
        vecs = await self.embed(texts)
        self._turn_index.set_many(list(range(start, len(self._turns))), vecs)
        self._turns_pending = len(self._turns)

    # ------------------------------------------------------------------ reads

    def _k(self) -> int:
        if self._explicit_top_k:
            return self.top_k
        return 1 if self.stream == "events" else self.DEFAULT_TOP_K

    async def read(self, question: Question) -> ReadResult:
        if self.read_mode == "turns":
            return await self._read_turns(question)
        if self.read_mode == "recall" or (self.read_mode == "auto" and self.stream == "dialogue"):
            budget = RECALL_TOKENS if self.read_tokens is None else self.read_tokens
            items = await self.path.recall(question.text, budget, graph=self.path.past(question.text))
            cites = dict.fromkeys(self.path.cite(e) for item in items for e in item.cites)
            return self.make_read(context_lines(items), [i.id for i in items], list(cites))
        keys = await self.path.search_keys(question.text, self.read_k(self._k()))
        if self.read_mode == "iterative":
            keys = await self._lookups(question, keys)
        lines = self.path.render(keys, self.path.past(question.text))  # one line per key, in rank order
        kept = self.within_budget(list(zip(keys, lines, strict=False)), lambda pair: pair[1])
        return self.make_read([line for _, line in kept], [key for key, _ in kept])

    async def _lookups(self, question: Question, keys: list[str]) -> list[str]:
        keys = list(keys)
        for _ in range(self.max_lookups):
            c = await self.call("lookup", CONTEXT="\n".join(self.path.render(keys)), QUESTION=question.text)
            text = (c.text or "").strip()
            if not text or first_word(text) == "answer":
                break
            query = (
                text.split(":", 1)[1].strip() if text.lower().startswith("lookup") and ":" in text else text
            )
            if not query:
                break
            more = await self.path.search_keys(query, self.lookup_k, exclude=keys)
            if not more:
                break
            keys.extend(more)
        return keys

    async def _read_turns(self, question: Question) -> ReadResult:
        await self._flush_turns()
        q = (await self.embed([question.text]))[0]
        hits = self._turn_index.search(q, self.read_k(self.top_k))
        slots = self.within_budget([s for s, _ in hits], lambda s: event_line(self._turns[s]))
        prune = True
        if self.gate == "model":
            c = await self.call("gate", QUESTION=question.text)
            prune = first_word(c.text) == "prune"
        elif self._classifier is not None:
            prune = self._classifier.decide(question.text) == "prune"
        dropped: set[int] = set()
        if prune:
            for i, a in enumerate(slots):
                for b in slots[i + 1 :]:
                    if a in dropped or b in dropped:
                        continue
                    ea, eb = self._turns[a], self._turns[b]
                    if not _different_dates(ea, eb):
                        continue
                    if self._turn_index.similarity(a, b) < self.prune_threshold:
                        continue
                    # the earlier-dated turn is TURN_A: the date fixes direction, the model only says
                    # whether the two turns disagree about the queried attribute
                    first, second = (a, b) if _date_rank(ea) < _date_rank(eb) else (b, a)
                    c = await self.call(
                        "prune",
                        ATTRIBUTE=question.text,
                        TURN_A=event_line(self._turns[first]),
                        TURN_B=event_line(self._turns[second]),
                    )
                    if first_word(c.text) == "yes":
                        dropped.add(first)
        kept = [s for s in slots if s not in dropped]
        self._prune_log.append(
            {"question": question.id, "retrieved": len(slots), "dropped": len(dropped), "gated": not prune}
        )
        return self.make_read(
            [event_line(self._turns[s]) for s in kept], [f"e{self._turns[s].index}" for s in kept]
        )

    # ------------------------------------------------------------------ reporting

    def write_stats(self) -> WriteStats:
        """The totals, with the cells the memory holds now (turn reads keep none)."""
        stats = super().write_stats()
        stats.cells = 0 if self.read_mode == "turns" else self.path.cell_count()
        return stats

    def graph(self) -> ProvenanceGraph | None:
        if self.read_mode == "turns":
            return None  # the turn read keeps raw turns, no cells: there is no state to audit or save
        return self.path.state()

    def retained(self) -> bytes:
        if self.read_mode == "turns":
            return "\n".join(e.text for e in self._turns).encode() + self.path.graph.to_bytes()
        return self.path.state().to_bytes()

    def active_facts(self) -> list[tuple[str, str, frozenset[int]]] | None:
        if self.read_mode == "turns":
            return None
        return self.path.active_items()

    def extra(self) -> dict[str, Any]:
        out = super().extra()
        out["arm_config"] = {"read": self.read_mode, **self.path.config()}
        if self.path.identity and self.read_mode != "turns":
            out["identity"] = self.path.identity_counts()
        if self._prune_log:
            out["prune"] = {
                "questions": len(self._prune_log),
                "dropped": sum(p["dropped"] for p in self._prune_log),
                "gated_keep": sum(p["gated"] for p in self._prune_log),
            }
        return out


def _date_rank(e: Event) -> tuple[int, Any]:
    if e.time:
        for fmt in ("%Y/%m/%d (%a) %H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
            try:
                return 0, datetime.strptime(e.time, fmt)
            except ValueError:
                continue
        return 1, e.time
    return 2, e.index


def _different_dates(a: Event, b: Event) -> bool:
    if a.time or b.time:
        return a.time != b.time
    return a.index != b.index
