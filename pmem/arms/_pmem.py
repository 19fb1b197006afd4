"""P-Mem: commit the current value of each fact on arrival, retain what it displaces.

Write path (``write="model"``): each unit (a 1,000-character chunk of fact lines, one event, or one
session) goes through the extraction prompt; each fact's key is routed through soft identity (the
graph's :class:`~pmem.graph.KeyRegistry`: embedding cosine >= 0.72 shortlists the nearest registered
key, a key-only same/different call decides); then one typed operation is chosen and applied in
arrival order. The operation comes from the annotation prompt (``annotate="model"``; the default for
event and dialogue streams) or from the deterministic patch controller (``annotate="controller"``; the
default for fact streams, where stream order alone decides supersession). An annotation is validated
before it touches the graph: an unparseable reply, an unknown op, a contest without an active
incumbent or a resolve on a cell that is not contested becomes a noop whose reason is written to the
write log. ``write="oracle"`` replaces extraction with the benchmarks' template parsers (no model
calls) and lowers every fact through the patch controller.

Read paths: ``state`` (embed every cell as ``key: value``, cosine top-k, render current value first
with the disclosure defaults), ``iterative`` (up to three lookups of six more cells each, then the
answer), ``turns`` (top-k raw turns; retrieved pairs with cosine >= 0.55 and different dates are put
to the binary "different values of the queried attribute?" check and on yes the earlier-dated turn is
dropped; an optional question-only gate decides whether to prune at all: a one-token ``gate`` call,
``gate = "model"``, or a scikit-learn classifier, ``gate = "classifier"``, see :mod:`pmem.arms._gate`).

Ablations: ``retention=False`` keeps one value per key and nothing else (a retraction deletes the
cell; the CRUD corner), ``identity=False`` routes by exact key only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pmem.arms._common import ArmBase, completion_json, event_line, first_word
from pmem.arms._prompts import ANNOTATION_OPS
from pmem.arms._retrieval import VectorIndex
from pmem.arms._writepath import Extraction, Fact, extract_units, normalize_key, template_extraction
from pmem.graph import KeyRegistry, Patch, PatchController, ProvenanceGraph, valid_instant

if TYPE_CHECKING:
    import numpy as np

    from pmem.arms._base import ModelSet, ReadResult, WriteRecord
    from pmem.bench._types import Event, Question

DISCLOSURE_DEFAULT = ("alternatives",)


class _Result:
    __slots__ = ("applied", "op", "reason")

    def __init__(self, applied: bool, op: str, reason: str | None) -> None:
        self.applied, self.op, self.reason = applied, op, reason


class OverwriteStore:
    """Retention off: one value per key, nothing else. Accept/reject/contest/resolve overwrite; a
    retraction (revoke, reject without a value) deletes the cell, so there is nothing to roll back to."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def head(self, key: str) -> tuple[str, str, list[str]] | None:
        v = self.values.get(key)
        return None if v is None else (v, "active", [])

    def apply(self, op: str, key: str, value: str | None) -> _Result:
        cur = self.values.get(key)
        if op == "noop":
            return _Result(True, "noop", None)
        if op in ("accept",) or (
            op in ("contest", "resolve", "reject") and value is not None and cur is not None
        ):
            if value is None:
                return _Result(False, "noop", f"{op} needs a value")
            if cur == value:
                return _Result(True, "noop", "value equals the current value: support")
            self.values[key] = value
            return _Result(True, op, None)
        if cur is None:
            return _Result(False, "noop", f"{op}: the key has no value")
        # revoke, or reject without a value: no retained predecessor, the cell is deleted
        del self.values[key]
        return _Result(True, op, "retention off: the cell is deleted")

    def to_graph(self) -> ProvenanceGraph:
        g = ProvenanceGraph()
        for key, value in sorted(self.values.items()):
            g.apply("accept", key, value)
        return g


class PMemArm(ArmBase):
    OPTIONS = (
        *ArmBase.OPTIONS,
        "read",
        "retention",
        "identity",
        "write",
        "annotate",
        "disclose",
        "lookup_k",
        "max_lookups",
        "prune_threshold",
        "gate",
        "gate_examples",
        "identity_threshold",
        "provenance",
        "valid_time",
        "authority",
        "default_authority",
    )

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, models, options)
        o = self.options
        self.read_mode = str(o.get("read", "state"))
        if self.read_mode not in ("state", "iterative", "turns"):
            msg = f"arm {name!r}: read must be state, iterative or turns, got {self.read_mode!r}"
            raise ValueError(msg)
        self.retention = bool(o.get("retention", True))
        self.identity = bool(o.get("identity", True))
        self.write_mode = str(o.get("write", "model"))
        if self.write_mode not in ("model", "oracle"):
            msg = f"arm {name!r}: write must be model or oracle, got {self.write_mode!r}"
            raise ValueError(msg)
        self.annotate_mode = str(o.get("annotate", "auto"))
        if self.annotate_mode not in ("auto", "model", "controller"):
            msg = f"arm {name!r}: annotate must be auto, model or controller, got {self.annotate_mode!r}"
            raise ValueError(msg)
        disclose = o.get("disclose", DISCLOSURE_DEFAULT)
        self.disclose = (disclose,) if isinstance(disclose, str) else tuple(disclose)
        self.lookup_k = int(o.get("lookup_k", 6))
        self.max_lookups = int(o.get("max_lookups", 3))
        self.prune_threshold = float(o.get("prune_threshold", 0.55))
        self.gate = str(o.get("gate", "none"))
        if self.gate not in ("none", "model", "classifier"):
            msg = f"arm {name!r}: gate must be none, model or classifier, got {self.gate!r}"
            raise ValueError(msg)
        self._classifier = None
        if self.gate == "classifier":
            from pmem.arms._gate import QuestionGate

            path = o.get("gate_examples")
            self._classifier = QuestionGate.from_file(path) if path else QuestionGate.default()
        self._explicit_top_k = "top_k" in o
        self.provenance = bool(o.get("provenance", True))
        if self.provenance:  # asks for valid times, premises, forget requests and names that differ
            self.extract_template = "extract_provenance"
        self.authority = _authority_option(name, o.get("authority")) if self.provenance else None
        # an event's own valid time is admitted with it (default: with provenance); ``pmem ingest`` turns
        # it on without the rest of replayable provenance, which its partitions cannot carry
        self.valid_time = bool(o.get("valid_time", self.provenance))
        default_authority = int(o.get("default_authority", 1))
        registry = KeyRegistry(threshold=float(o.get("identity_threshold", 0.72)))
        self._graph = ProvenanceGraph(
            registry=registry, authority=self.authority, default_authority=default_authority
        )
        self._store = None if self.retention else OverwriteStore()
        self._registry = registry
        self._controller = PatchController()
        self._slots: dict[str, int] = {}
        self._slot_keys: list[str] = []
        self._dirty: set[str] = set()
        self._index = VectorIndex()
        # key -> the stream events behind its writes, read only by the write-path audit (active_facts); a
        # writer that never audits and runs for a whole stream (an ingest worker) turns this off
        self.track_attribution = True
        self._key_events: dict[str, set[int]] = {}
        # turn read
        self._turns: list[Event] = []
        self._turn_index = VectorIndex()
        self._turns_pending = 0
        self._prune_log: list[dict[str, Any]] = []
        # replayable provenance (``provenance=True``): what erasure and unmerge need to find their targets
        self._aliases: dict[str, str] = {}  # key as extracted -> the key soft identity merged it into
        self._records_of: dict[str, list[int]] = {}  # evidence id -> write-log entries citing it
        self._erased: set[str] = set()
        self._valid_times = False  # whether any evidence carries a valid time (reads of the past)

    # ------------------------------------------------------------------ state access

    def _head(self, key: str) -> tuple[str, str, list[str]] | None:
        if self._store is not None:
            return self._store.head(key)
        cell = self._graph.cell(key)
        if cell is None or cell.value is None:
            return None
        return cell.value, cell.status, list(cell.alternatives)

    def _apply(
        self,
        op: str,
        key: str,
        value: str | None,
        evidence: str | None,
        depends_on: tuple[str, ...] = (),
        alias: str | None = None,
    ) -> _Result:
        if self._store is not None:
            r = self._store.apply(op, key, value)
        else:
            try:
                if depends_on or alias is not None:
                    res = self._graph.apply(
                        op, key, value, evidence=evidence, depends_on=depends_on or None, alias=alias
                    )
                else:
                    res = self._graph.apply(op, key, value, evidence=evidence)
            except ValueError as exc:
                # An annotation the core refuses becomes a noop with its reason, as the design says, never
                # a failed history; the core checks every argument before it changes anything.
                return _Result(False, "noop", f"invalid annotation: {exc}")
            r = _Result(res.applied, res.op, res.reason)
        self._dirty.add(key)
        return r

    def _attribute(self, key: str, event: int) -> None:
        if event >= 0 and self.track_attribution:
            self._key_events.setdefault(key, set()).add(event)

    def _commit(
        self,
        fact: Fact,
        key: str,
        op: str,
        value: str | None,
        evidence: str | None,
        requested: str | None,
        reason: str | None,
        first_event: int,
    ) -> None:
        premises: tuple[str, ...] = ()
        alias = None
        if self.provenance and self._store is None:
            op, value = self._repeat_as_accept(op, key, value, fact.value)
            premises = self._premises(fact, key)
            if fact.key != key:
                alias = fact.key
                self._aliases[fact.key] = key
        r = self._apply(op, key, None if op == "revoke" else value, evidence, premises, alias)
        self._attribute(key, fact.event)
        if evidence is not None:
            self._records_of.setdefault(evidence, []).append(len(self._log))
        self.record(
            r.op,
            key,
            value,
            r.applied,
            r.reason or reason,
            requested=requested if requested != r.op else None,
            source_key=fact.key if fact.key != key else None,
            event=first_event,
        )

    # ------------------------------------------------------------------ replayable provenance

    def _repeat_as_accept(
        self, op: str, key: str, value: str | None, stated: str | None
    ) -> tuple[str, str | None]:
        """A noop for a fact that repeats the head is requested as an accept (the core records it as
        support): the operation log then says the statement asserted the value, so erasing an earlier
        statement of it leaves this one standing, as replaying the log without the erased evidence
        requires."""
        if op != "noop" or stated is None or value not in (None, stated):
            return op, value
        if self._graph.head_value(key) == stated:
            return "accept", stated
        return op, value

    def _premises(self, fact: Fact, key: str) -> tuple[str, ...]:
        """The fact's premises as canonical keys that hold a value now (others cannot be depended on)."""
        out = []
        for premise in fact.depends_on:
            canonical = self._registry.canonical(premise) if self.identity else premise
            canonical = canonical or premise
            if canonical != key and self._graph.head_value(canonical) is not None:
                out.append(canonical)
        return tuple(dict.fromkeys(out))

    def evidence_valid_time(self, e: Event, facts: Sequence[Fact]) -> str | None:
        """The valid time event ``e`` is admitted with: its own (event metadata), else the first one
        extracted for it (with provenance); None when the core cannot read it (a valid time the core
        cannot order is dropped, never the event). ``pmem ingest`` asks its workers for this."""
        valid = e.valid_time if self.valid_time else None
        if valid is None and self.provenance:
            valid = next((f.valid_time for f in facts if f.valid_time and f.event in (e.index, -1)), None)
        if valid is None:
            return None
        try:
            return valid_instant(valid)[0]
        except ValueError:
            return None

    def _observe(self, e: Event, facts: Sequence[Fact]) -> str:
        """Admit one event as evidence, with its valid time (:meth:`evidence_valid_time`)."""
        valid = self.evidence_valid_time(e, facts)
        if valid is not None:
            self._valid_times = True
        return self._graph.observe(e.text, source=e.source or "user", time=e.time, valid_time=valid)

    def _forget(self, key: str, source: str, first_event: int) -> None:
        """Erase every statement ``source`` made about ``key`` (the evidence its operations cite)."""
        canonical = (self._registry.canonical(key) if self.identity else key) or key
        if self._graph.cell(canonical) is None:
            self.record(
                "noop", canonical, None, False, "forget: nothing is stored under this key", event=first_event
            )
            return
        cited = dict.fromkeys(
            op.evidence
            for op in self._graph.operations(canonical)
            if op.evidence is not None and op.evidence not in self._erased
        )
        mine = [eid for eid in cited if self._graph.evidence(eid).source == source]
        if not mine:
            self.record(
                "noop",
                canonical,
                None,
                False,
                f"forget: no statement by {source!r} about this key",
                event=first_event,
            )
            return
        for eid in mine:
            receipt = self._graph.erase(eid)
            self._erased.add(eid)
            self._dirty.update(receipt.changed)
            self._dirty.add(canonical)
            # the arm's own log held the erased statement's values: they go with it
            for i in self._records_of.pop(eid, []):
                self._log[i] = replace(self._log[i], value=None, reason="erased")
            self.record(
                "erase",
                canonical,
                None,
                True,
                f"erased {eid}: {receipt.operations} operation(s), {len(receipt.erased_versions)} version(s)",
                event=first_event,
            )

    def _requests(self, ex: Extraction) -> None:
        """A unit's forget requests and different-entity statements (with provenance on).

        Both undo writes, so a model's output is checked against the text first: a request whose
        subject (or a pair whose names) the unit's text does not mention is dropped, with its reason."""
        if not self.provenance or self._store is not None:
            return
        source, first = ex.unit[0].source or "user", ex.unit[0].index
        words = set(_WORDS.findall(ex.text.lower()))
        for key in ex.forget:
            subject = key.split(".", 1)[0]
            if not set(subject.split("_")) <= words:
                self.record(
                    "noop", key, None, False, "forget: the text does not mention this subject", event=first
                )
                continue
            self._forget(key, source, first)
        for a, b in ex.distinct:
            if not set(_WORDS.findall(f"{a} {b}".lower())) <= words:
                self.record(
                    "noop",
                    None,
                    None,
                    False,
                    f"distinct: the text does not name {a!r} and {b!r}",
                    event=first,
                )
                continue
            self._split(a, b, first)

    def _split(self, a: str, b: str, first_event: int) -> None:
        """Undo every merge of a key of ``a`` into one of ``b`` (or the reverse): they name different things."""
        names = {normalize_key(a), normalize_key(b)}
        for alias, key in list(self._aliases.items()):
            if {alias.split(".", 1)[0], key.split(".", 1)[0]} != names:
                continue
            receipt = self._graph.unmerge(alias)
            del self._aliases[alias]
            self._dirty.update((alias, key, *receipt.changed))
            self.record(
                "unmerge",
                alias,
                None,
                True,
                f"split from {key}: {receipt.operations} operation(s)",
                event=first_event,
            )

    # ------------------------------------------------------------------ write path

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        if self.read_mode == "turns":
            await self._ingest_turns(units)
            return
        if self.write_mode == "oracle":
            for i, unit in enumerate(units):
                await self.pause(i)
                ex = template_extraction(unit)
                evidence = [self._observe(e, ex.facts) for e in unit]
                by_event = {e.index: ev for e, ev in zip(unit, evidence, strict=True)}
                for fact in ex.facts:
                    self._stats.facts += 1
                    self._oracle_commit(fact, by_event.get(fact.event, evidence[0]), unit[0].index)
                self._requests(ex)
            self._stats.cells = self._cell_count()
            return
        extractions = await extract_units(self, units)
        for i, ex in enumerate(extractions):
            await self.pause(i)
            evidence = [self._observe(e, ex.facts) for e in ex.unit]
            by_event = {e.index: ev for e, ev in zip(ex.unit, evidence, strict=True)}
            keys = await self._route_all([f.key for f in ex.facts])
            for fact, key in zip(ex.facts, keys, strict=True):
                self._stats.facts += 1
                await self._write_fact(
                    fact, key, ex.text, by_event.get(fact.event, evidence[0]), ex.unit[0].index
                )
            self._requests(ex)
        self._stats.cells = self._cell_count()

    # ------------------------------------------------------------------ seams for `pmem ingest`
    # A stream ingested across a cluster runs this write path in pieces: extraction anywhere, identity
    # in arrival order on the driver, and each key's writes in the partition that owns the key.

    def adopt_graph(self, graph: ProvenanceGraph) -> None:
        """Write into ``graph`` (and route keys with its registry) from now on."""
        self._graph = graph
        self._registry = graph.registry

    async def resume(self, graph: ProvenanceGraph) -> None:
        """Go on from a saved ``graph``: write into it, route with its registry (the registered keys'
        vectors embedded again: a cache answers them), and read its cells (indexed at the next read)."""
        self.adopt_graph(graph)
        self._dirty.update(graph)
        await self.restore_key_vectors()

    async def restore_key_vectors(self) -> None:
        """Vectors of the registered keys, from the write path's embedder (soft identity needs them)."""
        keys = self._registry.keys
        if not self.identity or not keys:
            return
        import numpy

        blocks = [await self.embed(keys[i : i + 4096]) for i in range(0, len(keys), 4096)]
        self._registry.set_vectors(numpy.concatenate(blocks))

    def cells_changed(self, keys: Iterable[str]) -> None:
        """``keys`` changed outside the write path (an undo, an erasure): re-read at the next read."""
        self._dirty.update(keys)

    async def search_keys(self, query: str, k: int | None = None) -> list[str]:
        """The keys whose current values are nearest ``query`` (the state read's retrieval), best first;
        ``k`` defaults to the arm's read budget."""
        await self._flush_cells()
        q = (await self.embed([query]))[0]
        return [self._slot_keys[s] for s, _ in self._index.search(q, self._k() if k is None else k)]

    async def route_keys(
        self, keys: Sequence[str], embedded: Mapping[str, np.ndarray] | None = None
    ) -> list[str]:
        """Soft identity for one write unit's keys, in order: the canonical key of each. ``embedded``
        may hold vectors of candidate keys embedded ahead (in one batch for many units)."""
        return await self._route_all(keys, embedded)

    def key_vectors_needed(self) -> bool:
        """Whether routing embeds candidate keys at all (soft identity on)."""
        return self.identity

    async def write_fact(self, fact: Fact, key: str, text: str, evidence: str, first_event: int) -> None:
        """Choose and apply the operation for one routed fact of a unit whose text is ``text``."""
        self._stats.facts += 1
        await self._write_fact(fact, key, text, evidence, first_event)

    def _oracle_commit(self, fact: Fact, evidence: str, first_event: int) -> None:
        head = self._head(fact.key)
        kind = fact.kind
        if kind == "retraction":
            patch = Patch(fact.key, None, old_value=fact.value)
        elif kind == "conflict_report" and head is not None and head[1] == "active" and head[0] != fact.value:
            patch = Patch(fact.key, fact.value, op="contest")
        elif kind == "confirmation" and head is not None and head[1] == "contested":
            patch = Patch(fact.key, fact.value, op="resolve")
        else:
            patch = Patch(fact.key, fact.value)
        low = self._controller.lower(self._graph, patch) if self._store is None else None
        if low is not None:
            op, value, reason = low.op, low.value, low.reason
        else:
            op, value, reason = _lower_plain(patch, head)
        self._commit(fact, fact.key, op, value, evidence, patch.op, reason, first_event)

    async def _route_all(
        self, keys: Sequence[str], embedded: Mapping[str, np.ndarray] | None = None
    ) -> list[str]:
        """Soft identity for a unit's keys, in order (one embedding call for the unit's new keys that
        ``embedded`` does not already hold)."""
        if not self.identity:
            return list(keys)
        reg = self._registry
        new = list(dict.fromkeys(k for k in keys if reg.canonical(k) is None))
        vectors = {k: embedded[k] for k in new if k in embedded} if embedded else {}
        missing = [k for k in new if k not in vectors]
        if missing:
            vecs = await self.embed(missing)
            vectors.update(zip(missing, vecs, strict=True))
        out = []
        for k in keys:
            known = reg.canonical(k)
            if known is not None:
                out.append(known)
                continue
            vec = vectors[k]
            hit = reg.shortlist(k, vec)
            if hit is None:
                out.append(reg.decide(k, None, 0.0, False, vec))
                continue
            registered, score = hit
            c = await self.call("identity", KEY_A=k, KEY_B=registered)
            same = first_word(c.text) == "same"
            out.append(reg.decide(k, registered, score, same, vec))
        return out

    def _use_model_annotation(self) -> bool:
        if self.annotate_mode == "auto":
            return self.stream != "facts"
        return self.annotate_mode == "model"

    async def _write_fact(self, fact: Fact, key: str, text: str, evidence: str, first_event: int) -> None:
        head = self._head(key)
        reason: str | None  # the controller always gives a reason; a valid model annotation gives none
        if not self._use_model_annotation():
            if fact.status == "withdrawn":
                patch = Patch(key, None, old_value=fact.value)
            else:
                patch = Patch(key, fact.value)
            if self._store is None:
                low = self._controller.lower(self._graph, patch)
                op, value, reason = low.op, low.value, low.reason
            else:
                op, value, reason = _lower_plain(patch, head)
            self._commit(fact, key, op, value, evidence, None, reason, first_event)
            return
        if head is None:
            head_text = "none"
        else:
            head_text = f"{head[0]} ({head[1]})"
            if head[2]:
                head_text += "\nalternatives: " + "; ".join(head[2])
        fact_text = f"{key}: {fact.value}\nstatus: {fact.status}"
        c = await self.call("annotate", FACT=fact_text, HEAD=head_text, TEXT=text)
        op, value, reason = _validate_annotation(completion_json(c), fact, head)
        if reason is not None:
            # a failing annotation changes nothing: logged as a noop with its reason, not applied
            self._attribute(key, fact.event)
            self.record(
                "noop",
                key,
                value,
                False,
                reason,
                source_key=fact.key if fact.key != key else None,
                event=first_event,
            )
            return
        self._commit(fact, key, op, value, evidence, op, None, first_event)

    # ------------------------------------------------------------------ turns (dialogue read path)

    async def _ingest_turns(self, units: list[list[Event]]) -> None:
        for i, unit in enumerate(units):
            await self.pause(i)
            for e in unit:
                self._graph.observe(e.text, source=e.source or "user", time=e.time)
                self._turns.append(e)
        self._stats.facts = 0
        self._stats.cells = 0

    async def _flush_turns(self) -> None:
        start = self._turns_pending
        if start >= len(self._turns):
            return
        texts = [e.text for e in self._turns[start:]]
        vecs = await self.embed(texts)
        self._turn_index.set_many(list(range(start, len(self._turns))), vecs)
        self._turns_pending = len(self._turns)

    # ------------------------------------------------------------------ reads

    def _cell_count(self) -> int:
        if self._store is not None:
            return len(self._store.values)
        return self._graph.stats()["cells"]

    def _slot(self, key: str) -> int:
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = len(self._slot_keys)
            self._slot_keys.append(key)
        return slot

    async def _flush_cells(self) -> None:
        if not self._dirty:
            return
        keys = sorted(self._dirty)
        self._dirty.clear()
        live, texts = [], []
        current = self._store.values.get if self._store is not None else self._graph.head_value
        for key in keys:
            value = current(key)
            slot = self._slot(key)
            if value is None:
                self._index.clear(slot)
            else:
                live.append(slot)
                texts.append(f"{key}: {value}")
        if texts:
            self._index.set_many(live, await self.embed(texts))

    def _k(self) -> int:
        if self._explicit_top_k:
            return self.top_k
        return 1 if self.stream == "events" else self.DEFAULT_TOP_K

    def _render(self, keys: Sequence[str], graph: ProvenanceGraph | None = None) -> list[str]:
        if self._store is not None:
            return [f"{k} = {self._store.values[k]}" for k in keys if k in self._store.values]
        text = (graph or self._graph).render(keys=list(keys), disclose=self.disclose)
        return text.split("\n") if text else []

    def _past(self, question: Question) -> ProvenanceGraph | None:
        """The graph as of the date a question names, when it names one and facts carry valid times."""
        if not (self.provenance and self._valid_times and self._store is None):
            return None
        instant = question_instant(question.text)
        return None if instant is None else self._graph.as_of(time=instant)

    async def read(self, question: Question) -> ReadResult:
        if self.read_mode == "turns":
            return await self._read_turns(question)
        keys = await self.search_keys(question.text)
        if self.read_mode == "iterative":
            keys = await self._lookups(question, keys)
        return self.make_read(self._render(keys, self._past(question)), keys)

    async def _lookups(self, question: Question, keys: list[str]) -> list[str]:
        keys = list(keys)
        for _ in range(self.max_lookups):
            c = await self.call("lookup", CONTEXT="\n".join(self._render(keys)), QUESTION=question.text)
            text = (c.text or "").strip()
            if not text or first_word(text) == "answer":
                break
            query = (
                text.split(":", 1)[1].strip() if text.lower().startswith("lookup") and ":" in text else text
            )
            if not query:
                break
            q = (await self.embed([query]))[0]
            seen = {self._slots[k] for k in keys}
            more = [self._slot_keys[s] for s, _ in self._index.search(q, self.lookup_k, exclude=seen)]
            if not more:
                break
            keys.extend(more)
        return keys

    async def _read_turns(self, question: Question) -> ReadResult:
        await self._flush_turns()
        q = (await self.embed([question.text]))[0]
        hits = self._turn_index.search(q, self.top_k)
        slots = [s for s, _ in hits]
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

    def graph(self) -> ProvenanceGraph | None:
        if self.read_mode == "turns":
            return None  # the turn read keeps raw turns, no cells: there is no state to audit or save
        if self._store is not None:
            return self._store.to_graph()
        return self._graph

    def retained(self) -> bytes:
        if self.read_mode == "turns":
            return "\n".join(e.text for e in self._turns).encode() + self._graph.to_bytes()
        graph = self.graph()
        return b"" if graph is None else graph.to_bytes()

    def take_write_log(self) -> list[WriteRecord]:
        self._records_of.clear()  # it indexes the records handed over: none of them is held any more
        return super().take_write_log()

    def active_facts(self) -> list[tuple[str, str, frozenset[int]]] | None:
        if self.read_mode == "turns":
            return None
        if not self.track_attribution:
            msg = f"arm {self.name!r}: active_facts needs event attribution, which is off (track_attribution)"
            raise RuntimeError(msg)
        items = self._store.values.items() if self._store is not None else self._graph.frontier_items()
        return [(k, v, frozenset(self._key_events.get(k, ()))) for k, v in items]

    def extra(self) -> dict[str, Any]:
        out = super().extra()
        out["arm_config"] = {
            "read": self.read_mode,
            "retention": self.retention,
            "identity": self.identity,
            "write": self.write_mode,
            "annotate": self.annotate_mode,
            "disclose": list(self.disclose),
            "provenance": self.provenance,
        }
        if self.authority is not None:
            out["arm_config"]["authority"] = dict(sorted(self.authority.items()))
        if self.identity and self.read_mode != "turns":
            decisions = self._registry.decisions
            out["identity"] = {
                "shortlisted": sum(1 for d in decisions if d.shortlisted is not None),
                "merged": sum(1 for d in decisions if d.verdict == "same"),
            }
        if self._prune_log:
            out["prune"] = {
                "questions": len(self._prune_log),
                "dropped": sum(p["dropped"] for p in self._prune_log),
                "gated_keep": sum(p["gated"] for p in self._prune_log),
            }
        return out


def _lower_plain(patch: Patch, head: tuple[str, str, list[str]] | None) -> tuple[str, str | None, str]:
    """Patch lowering against a retention-off store (same rules as the controller's default lowering)."""
    cur = head[0] if head else None
    if patch.op is not None:
        return patch.op, patch.new_value, "explicit op"
    if patch.old_value is not None and cur is not None and patch.old_value != cur:
        return "noop", patch.new_value, f"stale patch: old value {patch.old_value!r} is not the head {cur!r}"
    if cur is None:
        if patch.new_value is None:
            return "noop", None, "nothing to retract: the key has no head"
        return "accept", patch.new_value, "create"
    if patch.new_value is not None and patch.new_value == cur:
        return "noop", patch.new_value, "same value as the head: support"
    if patch.new_value is None:
        return "revoke", None, "retraction"
    return "accept", patch.new_value, "supersession"


def _validate_annotation(
    payload: dict[str, Any] | None, fact: Fact, head: tuple[str, str, list[str]] | None
) -> tuple[str, str | None, str | None]:
    """(op, value, reason): reason is None for a valid annotation, else why it became a noop."""
    if payload is None:
        return "noop", fact.value, "annotation: reply is not a JSON object"
    op = str(payload.get("op") or "").strip().lower()
    if op not in ANNOTATION_OPS:
        return "noop", fact.value, f"annotation: unknown op {op!r}"
    value = payload.get("value")
    value = (
        None if value is None or str(value).strip().lower() in ("", "null", "none") else str(value).strip()
    )
    if op in ("accept", "contest", "resolve") and value is None:
        value = fact.value
    if op == "contest" and (head is None or head[1] != "active"):
        return "noop", value, "annotation: contest needs an active incumbent"
    if op == "resolve" and (head is None or head[1] != "contested"):
        return "noop", value, "annotation: resolve needs a contested cell"
    if op in ("reject", "revoke") and head is None:
        return "noop", value, f"annotation: {op} needs a current value"
    return op, value, None


def _authority_option(arm: str, raw: Any) -> dict[str, int] | None:
    """``authority = {source = level, ...}`` (a table, or pairs), checked."""
    if raw is None:
        return None
    items = raw.items() if isinstance(raw, Mapping) else raw
    try:
        table = {str(source): level for source, level in items}
    except (TypeError, ValueError):
        msg = f"arm {arm!r}: authority must be a table of source = level, got {raw!r}"
        raise ValueError(msg) from None
    for source, level in table.items():
        if not isinstance(level, int) or isinstance(level, bool):
            msg = f"arm {arm!r}: authority.{source} must be an integer level, got {level!r}"
            raise ValueError(msg)
    return table


_WORDS = re.compile(r"\w+", re.UNICODE)
_DATE_IN_QUESTION = re.compile(
    r"\b(?:on|as of|at|by)\s+(?P<date>[A-Z][a-z]+ \d{1,2}, \d{4}|\d{4}-\d{2}-\d{2}|\d{1,2} [A-Z][a-z]+ \d{4})"
)


def question_instant(text: str) -> str | None:
    """The date a question asks about (``on March 5, 2025``) as an ISO date, else None.

    >>> question_instant("What was the rent of the Pine Street bakery on March 5, 2025?")
    '2025-03-05'
    >>> question_instant("What is the rent now?") is None
    True
    """
    m = _DATE_IN_QUESTION.search(text)
    if m is None:
        return None
    for fmt in ("%B %d, %Y", "%Y-%m-%d", "%d %B %Y"):
        try:
            return datetime.strptime(m.group("date"), fmt).date().isoformat()
        except ValueError:
            continue
    return None


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
