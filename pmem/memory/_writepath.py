"""P-Mem's write path and state read: commit the current value of each fact on arrival, retain what it
displaces.

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

With replayable provenance (``provenance=True``, the default) the extraction also asks for valid
times, premises, forget requests and names that differ: a forget request erases what its source said
about a key, a different-entity statement undoes a merge of soft identity, and a source's authority
ranks what it may displace.

State read: every cell is embedded as ``key: value``; :meth:`WritePath.search_keys` is the cosine top-k
over them, and :meth:`WritePath.render` renders current values first with the disclosure asked for.

Ablations: ``retention=False`` keeps one value per key and nothing else (a retraction deletes the
cell; the CRUD corner), ``identity=False`` routes by exact key only.

Who drives it: :class:`pmem.Memory` (one unit per ``add``), the ``pmem`` arms of the evaluation system
(a benchmark's stream) and ``pmem ingest`` (extraction in workers, identity on the driver, each key's
writes in the partition that owns it: the seams below).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pmem.graph import (
    ERASED_SOURCE,
    KeyRegistry,
    Lowering,
    OpResult,
    Patch,
    ProvenanceGraph,
    lower_patch,
    valid_instant,
)
from pmem.memory._cells import Cells, GraphCells, Head, OverwriteCells, Write
from pmem.memory._extract import Extraction, Fact, extract_units, normalize_key, template_extraction
from pmem.memory._lexical import LexicalIndex
from pmem.memory._recall import CANDIDATES, EvidenceIndex, Recalled, evidence_line, fact_line, fit, fuse
from pmem.memory._retrieval import VectorIndex, count_tokens
from pmem.memory._writer import completion_json, first_word, pause
from pmem.memory.prompts import ANNOTATION_OPS

if TYPE_CHECKING:
    import numpy as np

    from pmem.bench import Event
    from pmem.memory._writer import Writer

#: What a rendered cell shows besides its value unless asked otherwise: the claims it holds open.
DISCLOSURE_DEFAULT = ("alternatives",)
#: The write path's options (a ``pmem`` arm's, ``pmem.Memory``'s and ``pmem ingest``'s).
WRITE_OPTIONS = (
    "retention",
    "identity",
    "write",
    "annotate",
    "disclose",
    "identity_threshold",
    "provenance",
    "valid_time",
    "authority",
    "default_authority",
)


class WritePath:
    """P-Mem's write path and state read over one :class:`~pmem.graph.ProvenanceGraph`.

    Args:
        writer: where its model calls, embeddings and write records go.
        options: the write options (:data:`WRITE_OPTIONS`); others are the caller's business.
        name: who runs it, as error messages name it (``arm 'pmem'``, ``Memory``).

    >>> import asyncio
    >>> from pmem.bench import Event
    >>> from pmem.memory._writer import Writer
    >>> from pmem.models import make_chat_model, make_embedder
    >>> path = WritePath(Writer(make_chat_model("heuristic"), make_embedder("hashing")))
    >>> (ex,) = asyncio.run(path.write([[Event(0, "Earlier observation: mug 1 was in shelf 2.")]]))
    >>> [(f.key, f.value) for f in ex.facts]
    [('mug_1.location', 'shelf 2')]
    >>> path.graph.cell("mug_1.location").value
    'shelf 2'
    """

    def __init__(
        self, writer: Writer, options: Mapping[str, Any] | None = None, *, name: str = "write path"
    ) -> None:
        o = dict(options or {})
        self._w = writer  # calls, embeddings and the write log
        self.name = name
        self.retention = bool(o.get("retention", True))
        self.identity = bool(o.get("identity", True))
        self.write_mode = str(o.get("write", "model"))
        if self.write_mode not in ("model", "oracle"):
            msg = f"{name}: write must be model or oracle, got {self.write_mode!r}"
            raise ValueError(msg)
        self.annotate_mode = str(o.get("annotate", "auto"))
        if self.annotate_mode not in ("auto", "model", "controller"):
            msg = f"{name}: annotate must be auto, model or controller, got {self.annotate_mode!r}"
            raise ValueError(msg)
        disclose = o.get("disclose", DISCLOSURE_DEFAULT)
        self.disclose = (disclose,) if isinstance(disclose, str) else tuple(disclose)
        self.provenance = bool(o.get("provenance", True))
        # with provenance the extraction asks for valid times, premises, forget requests and names that differ
        self.extract_template = "extract_provenance" if self.provenance else "extract"
        self.authority = _authority_option(name, o.get("authority")) if self.provenance else None
        # an event's own valid time is admitted with it (default: with provenance); ``pmem ingest`` turns
        # it on without the rest of replayable provenance, which its partitions cannot carry
        self.valid_time = bool(o.get("valid_time", self.provenance))
        self.default_authority = default_authority = int(o.get("default_authority", 1))
        #: the stream kind being written (``facts``, ``dialogue``, ``events``): annotation's default
        self.stream = "events"
        registry = KeyRegistry(threshold=float(o.get("identity_threshold", 0.72)))
        self._graph = ProvenanceGraph(
            registry=registry, authority=self.authority, default_authority=default_authority
        )
        # the cells decided against and written: the graph itself, or with retention off a store of one
        # value per key (the graph then holds the evidence alone)
        self._cells: Cells = GraphCells(self._graph) if self.retention else OverwriteCells()
        self._registry = registry
        # the cells' vectors: key -> row of the index, and back; keys written since the last read
        self._slots: dict[str, int] = {}
        self._slot_keys: list[str] = []
        self._dirty: set[str] = set()
        self._index = VectorIndex()
        self._cell_words = LexicalIndex()  # the same slots, by BM25 (recall)
        # recall's turns: every evidence node's text, lexically and densely (indexed at the next recall)
        self._evidence = EvidenceIndex()
        # evidence id -> the benchmark's own id of its turn ("D1:3"), for the events that carry one
        self._turn_labels: dict[str, str] = {}
        # key -> the stream events behind its writes, read only by the write-path audit (active_items); a
        # writer that never audits and runs for a whole stream (an ingest worker, a memory) turns this off
        self.track_attribution = True
        self._key_events: dict[str, set[int]] = {}
        # replayable provenance: what erasure and unmerge need to find their targets
        self._aliases: dict[str, str] = {}  # key as extracted -> the key soft identity merged it into
        self._erased: set[str] = set()
        self._valid_times = False  # whether any evidence carries a valid time (reads of the past)

    # ------------------------------------------------------------------ state access

    @property
    def writer(self) -> Writer:
        """Where the calls, embeddings and write records go."""
        return self._w

    @property
    def graph(self) -> ProvenanceGraph:
        """The graph written into (with retention off, evidence only: the values live in the store)."""
        return self._graph

    def state(self) -> ProvenanceGraph:
        """What the memory holds as a graph: the graph, or with retention off the store's values."""
        return self._cells.as_graph()

    def cell_count(self) -> int:
        return self._cells.count()

    def active_items(self) -> list[tuple[str, str, frozenset[int]]]:
        """(key, current value, the stream events behind its writes) of every cell with a value."""
        if not self.track_attribution:
            msg = f"{self.name}: active_facts needs event attribution, which is off (track_attribution)"
            raise RuntimeError(msg)
        items = self._cells.items()
        return [(k, v, frozenset(self._key_events.get(k, ()))) for k, v in items]

    def config(self) -> dict[str, Any]:
        """The options in force, as a run's results record them."""
        out: dict[str, Any] = {
            "retention": self.retention,
            "identity": self.identity,
            "write": self.write_mode,
            "annotate": self.annotate_mode,
            "disclose": list(self.disclose),
            "provenance": self.provenance,
        }
        if self.authority is not None:
            out["authority"] = dict(sorted(self.authority.items()))
        return out

    def identity_counts(self) -> dict[str, int]:
        """How many new keys soft identity shortlisted against a registered one, and merged into it."""
        decisions = self._registry.decisions
        return {
            "shortlisted": sum(1 for d in decisions if d.shortlisted is not None),
            "merged": sum(1 for d in decisions if d.verdict == "same"),
        }

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
    ) -> Write | None:
        """Apply ``op`` for ``fact`` and record it; the write the cells took (None: they refused its
        arguments; a failed precondition is a write taken, logged as a noop)."""
        premises: tuple[str, ...] = ()
        alias = None
        named = False
        if self.provenance and self._cells.retains:
            op, value = self._repeat_as_accept(op, key, value, fact.value)
            op, value, named = self._retraction_named(op, value, fact)
            premises = self._premises(fact, key)
            if fact.key != key:
                alias = fact.key
                self._aliases[fact.key] = key
        # a revoke retracts the head unless it names what it retracts: a withdrawn fact's value does,
        # a value the model gave for another fact is not trusted to
        write = Write(op, key, None if op == "revoke" and not named else value, evidence, premises, alias)
        taken: Write | None = write
        try:
            r = self._cells.apply(write)
            self._dirty.add(key)
        except ValueError as exc:
            # An annotation the core refuses becomes a noop with its reason, as the design says, never a
            # failed history; the core checks every argument before it changes anything.
            r = OpResult(False, "noop", f"invalid annotation: {exc}")
            taken = None
        self._attribute(key, fact.event)
        self._w.record(
            r.op,
            key,
            value,
            r.applied,
            r.reason or reason,
            evidence=evidence,
            requested=requested if requested != r.op else None,
            source_key=fact.key if fact.key != key else None,
            event=first_event,
        )
        return taken

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

    @staticmethod
    def _retraction_named(op: str, value: str | None, fact: Fact) -> tuple[str, str | None, bool]:
        """(op, value, whether the value names what a revoke retracts) for a withdrawn fact ("the
        report that X was an error"): a retraction of X, whatever the head is now. The noop, revoke or
        reject without a value the model (or the controller) chose is requested as ``revoke X``, so
        the log says what the statement retracted, in a form every log carries (an ingest's write log
        too): where X is not the head the core records a noop with the reason, and a replay without
        some earlier statement (an undo, an erasure) retracts X exactly where feeding the texts again
        would (issue 41). A noop would count the statement as support of the head, and a retraction
        naming nothing would retract whatever the replay's head is."""
        if fact.status != "withdrawn" or not fact.value:
            return op, value, False
        if op in ("noop", "revoke") or (op == "reject" and value is None):
            return "revoke", fact.value, True
        return op, value, False

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

    def observe(self, e: Event, facts: Sequence[Fact] = ()) -> str:
        """Admit one event as evidence, with its valid time (:meth:`evidence_valid_time`); its id."""
        valid = self.evidence_valid_time(e, facts)
        if valid is not None:
            self._valid_times = True
        eid = self._graph.observe(e.text, source=e.speaker, time=e.time, valid_time=valid)
        if e.turn_id:
            self._turn_labels[eid] = e.turn_id
        return eid

    def _forget(self, key: str, source: str, first_event: int) -> None:
        """Erase every statement ``source`` made about ``key`` (the evidence its operations cite)."""
        canonical = (self._registry.canonical(key) if self.identity else key) or key
        if self._graph.cell(canonical) is None:
            self._w.record(
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
            self._w.record(
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
            self._w.redact(eid)  # the write log held the erased statement's values: they go with it
            self._w.record(
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
        if not self.provenance or not self._cells.retains:
            return
        source, first = ex.unit[0].speaker, ex.unit[0].index
        words = set(_WORDS.findall(ex.text.lower()))
        for key in ex.forget:
            subject = key.split(".", 1)[0]
            if not set(subject.split("_")) <= words:
                self._w.record(
                    "noop", key, None, False, "forget: the text does not mention this subject", event=first
                )
                continue
            self._forget(key, source, first)
        for a, b in ex.distinct:
            if not set(_WORDS.findall(f"{a} {b}".lower())) <= words:
                self._w.record(
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
            self._w.record(
                "unmerge",
                alias,
                None,
                True,
                f"split from {key}: {receipt.operations} operation(s)",
                event=first_event,
            )

    # ------------------------------------------------------------------ write path

    async def write(self, units: list[list[Event]]) -> list[Extraction]:
        """Commit write units in arrival order: extraction (or the template parsers), identity, one
        typed operation per fact, then the unit's forget and different-entity requests.

        Returns:
            each unit's extraction (its facts as extracted, before identity routed their keys)."""
        stats = self._w.stats
        oracle = self.write_mode == "oracle"
        if oracle:
            extractions = [template_extraction(unit) for unit in units]
        else:
            extractions = await extract_units(self._w, units, self.extract_template)
        for i, ex in enumerate(extractions):
            await pause(i)
            evidence = [self.observe(e, ex.facts) for e in ex.unit]
            by_event = {e.index: ev for e, ev in zip(ex.unit, evidence, strict=True)}
            # the templates' keys are the benchmark's own: soft identity routes only what a model named
            keys = [f.key for f in ex.facts] if oracle else await self.route_keys([f.key for f in ex.facts])
            for fact, key in zip(ex.facts, keys, strict=True):
                stats.facts += 1
                cited = by_event.get(fact.event, evidence[0])
                if oracle:
                    self._oracle_commit(fact, cited, ex.unit[0].index)
                else:
                    await self._write_fact(fact, key, ex.text, cited, ex.unit[0].index)
            self._requests(ex)
        # the cells are counted where the totals are read (the arm's write_stats): counting them here
        # scanned every key after every write, the largest cost of an add to a large memory
        return extractions

    # ------------------------------------------------------------------ seams for `pmem ingest`
    # A stream ingested across a cluster runs this write path in pieces: extraction anywhere, identity
    # in arrival order on the driver, and each key's writes in the partition that owns the key.

    async def extract(self, units: list[list[Event]]) -> list[Extraction]:
        """The extraction of each unit (the write path's prompt), in order."""
        return await extract_units(self._w, units, self.extract_template)

    def adopt_graph(self, graph: ProvenanceGraph) -> None:
        """Write into ``graph`` (and route keys with its registry) from now on."""
        self._graph = graph
        self._registry = graph.registry
        if self._cells.retains:
            self._cells = GraphCells(graph)

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

        blocks = [await self._w.embed(keys[i : i + 4096]) for i in range(0, len(keys), 4096)]
        self._registry.set_vectors(numpy.concatenate(blocks))

    def cells_changed(self, keys: Iterable[str]) -> None:
        """``keys`` changed outside the write path (an undo, an erasure): re-read at the next read."""
        self._dirty.update(keys)

    def key_vectors_needed(self) -> bool:
        """Whether routing embeds candidate keys at all (soft identity on)."""
        return self.identity

    async def route_keys(
        self, keys: Sequence[str], embedded: Mapping[str, np.ndarray] | None = None
    ) -> list[str]:
        """Soft identity for one write unit's keys, in order: the canonical key of each. ``embedded``
        may hold vectors of candidate keys embedded ahead (in one batch for many units); the unit's
        other new keys are embedded in one call."""
        if not self.identity:
            return list(keys)
        reg = self._registry
        new = list(dict.fromkeys(k for k in keys if reg.canonical(k) is None))
        vectors = {k: embedded[k] for k in new if k in embedded} if embedded else {}
        missing = [k for k in new if k not in vectors]
        if missing:
            vecs = await self._w.embed(missing)
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
            c = await self._w.call("identity", KEY_A=k, KEY_B=registered)
            same = first_word(c.text) == "same"
            out.append(reg.decide(k, registered, score, same, vec))
        return out

    async def write_fact(
        self, fact: Fact, key: str, text: str, evidence: str | None, first_event: int
    ) -> Write | None:
        """Choose and apply the operation for one routed fact of a unit whose text is ``text``, citing
        ``evidence``; the write the cells took, a noop of a failed precondition included (None: the
        annotation failed, or the cells refused the call's arguments), for a caller that replays it
        elsewhere (the ingest's merge)."""
        self._w.stats.facts += 1
        return await self._write_fact(fact, key, text, evidence, first_event)

    def _oracle_commit(self, fact: Fact, evidence: str, first_event: int) -> None:
        head = self._cells.head(fact.key)
        kind = fact.kind
        if kind == "retraction":
            patch = Patch(fact.key, None, old_value=fact.value)
        elif (
            kind == "conflict_report"
            and head is not None
            and head.status == "active"
            and head.value != fact.value
        ):
            patch = Patch(fact.key, fact.value, op="contest")
        elif kind == "confirmation" and head is not None and head.status == "contested":
            patch = Patch(fact.key, fact.value, op="resolve")
        else:
            patch = Patch(fact.key, fact.value)
        low = _lower(patch, head)
        self._commit(fact, fact.key, low.op, low.value, evidence, patch.op, low.reason, first_event)

    def _use_model_annotation(self) -> bool:
        if self.annotate_mode == "auto":
            return self.stream != "facts"
        return self.annotate_mode == "model"

    async def _write_fact(
        self, fact: Fact, key: str, text: str, evidence: str | None, first_event: int
    ) -> Write | None:
        head = self._cells.head(key)
        reason: str | None  # the controller always gives a reason; a valid model annotation gives none
        if not self._use_model_annotation():
            if fact.status == "withdrawn":
                patch = Patch(key, None, old_value=fact.value)
            else:
                patch = Patch(key, fact.value)
            low = _lower(patch, head)
            return self._commit(fact, key, low.op, low.value, evidence, None, low.reason, first_event)
        if head is None:
            head_text = "none"
        else:
            head_text = f"{head.value} ({head.status})"
            if head.alternatives:
                head_text += "\nalternatives: " + "; ".join(head.alternatives)
        fact_text = f"{key}: {fact.value}\nstatus: {fact.status}"
        c = await self._w.call("annotate", FACT=fact_text, HEAD=head_text, TEXT=text)
        op, value, reason = validate_annotation(completion_json(c), fact, head)
        if reason is not None:
            # a failing annotation changes nothing: logged as a noop with its reason, not applied
            self._attribute(key, fact.event)
            self._w.record(
                "noop",
                key,
                value,
                False,
                reason,
                source_key=fact.key if fact.key != key else None,
                event=first_event,
            )
            return None
        return self._commit(fact, key, op, value, evidence, op, None, first_event)

    # ------------------------------------------------------------------ state read

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
        current = self._cells.current
        for key in keys:
            value = current(key)
            slot = self._slot(key)
            if value is None:
                self._index.clear(slot)
                self._cell_words.clear(slot)
            else:
                live.append(slot)
                texts.append(f"{key}: {value}")
                self._cell_words.set(slot, texts[-1])
        if texts:
            self._index.set_many(live, await self._w.embed(texts))

    async def search_keys(self, query: str, k: int, *, exclude: Iterable[str] = ()) -> list[str]:
        """The ``k`` keys whose current values (``key: value``) are nearest ``query``, best first,
        leaving out ``exclude`` (keys already read)."""
        return [key for key, _ in await self.search_scored(query, k, exclude=exclude)]

    async def search_scored(
        self, query: str, k: int, *, exclude: Iterable[str] = ()
    ) -> list[tuple[str, float]]:
        """:meth:`search_keys` with each key's cosine similarity to ``query``."""
        await self._flush_cells()
        q = (await self._w.embed([query]))[0]
        seen = {self._slots[key] for key in exclude}
        return [(self._slot_keys[s], score) for s, score in self._index.search(q, k, exclude=seen)]

    def cite(self, evidence_id: str) -> str:
        """How a line names a turn: the benchmark's id of it where the event carried one, else its
        evidence id."""
        return self._turn_labels.get(evidence_id, evidence_id)

    async def recall(
        self, query: str, budget: int | None, *, graph: ProvenanceGraph | None = None
    ) -> list[Recalled]:
        """The facts and turns nearest ``query`` (:mod:`pmem.memory._recall`), best first, that fit
        ``budget`` tokens together (None: every candidate); ``graph``: a past state whose facts to
        read instead (the turns are the evidence observed so far)."""
        await self._flush_cells()
        await self._evidence.sync(self._graph, self._w.embed)
        vector = (await self._w.embed([query]))[0]
        cells = (self._slot_keys[s] for s, _ in self._index.search(vector, CANDIDATES))
        words = (self._slot_keys[s] for s, _ in self._cell_words.search(query, CANDIDATES))
        lexical, dense = self._evidence.rankings(query, vector, CANDIDATES)
        rankings: list[list[tuple[str, str | int]]] = [
            [("fact", k) for k in cells],
            [("fact", k) for k in words],
            [("evidence", n) for n in lexical],
            [("evidence", n) for n in dense],
        ]
        ranked = fuse(rankings)
        # a past state's facts when asked, else the cells' (built only then: without retention, a graph)
        facts_from = graph if graph is not None else self._cells.as_graph()
        candidates: list[Recalled] = []
        for (kind, ref), score in ranked:
            if kind == "fact":
                shown = fact_line(facts_from, str(ref), self.cite, self.disclose)
                if shown is None:
                    continue
                line, cited = shown
                cites = (cited,) if cited else ()
                candidates.append(Recalled("fact", str(ref), line, cites, score, count_tokens(line)))
                continue
            ev = self._graph.evidence(f"e{ref}")
            if ev.source == ERASED_SOURCE:  # erased since it was indexed
                self._evidence.drop(int(ref))
                continue
            line = evidence_line(ev, self.cite(ev.id))
            candidates.append(Recalled("evidence", ev.id, line, (ev.id,), score, count_tokens(line)))
        return fit(candidates, budget, lambda item: item.tokens)

    def render(self, keys: Sequence[str], graph: ProvenanceGraph | None = None) -> list[str]:
        """The cells of ``keys`` as lines, current value first, with the configured disclosure
        (from ``graph`` when given: a graph as of a date)."""
        return self._cells.render(keys, self.disclose, graph)

    def past(self, question: str) -> ProvenanceGraph | None:
        """The graph as of the date a question names, when it names one and facts carry valid times."""
        if not (self.provenance and self._valid_times and self._cells.retains):
            return None
        instant = question_instant(question)
        return None if instant is None else self._graph.as_of(time=instant)


def _lower(patch: Patch, head: Head | None) -> Lowering:
    """The typed operation ``patch`` becomes against the key's ``head`` as read: the patch controller's
    rules (:func:`pmem.graph.lower_patch`), for both kinds of cells (a cell without a value is empty)."""
    return lower_patch(patch, *(head or (None,)))


def validate_annotation(
    payload: dict[str, Any] | None, fact: Fact, head: Head | None
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
    if op == "contest" and (head is None or head.status != "active"):
        return "noop", value, "annotation: contest needs an active incumbent"
    if op == "resolve" and (head is None or head.status != "contested"):
        return "noop", value, "annotation: resolve needs a contested cell"
    if op in ("reject", "revoke") and head is None:
        return "noop", value, f"annotation: {op} needs a current value"
    return op, value, None


def _authority_option(who: str, raw: Any) -> dict[str, int] | None:
    """``authority = {source = level, ...}`` (a table, or pairs), checked."""
    if raw is None:
        return None
    items = raw.items() if isinstance(raw, Mapping) else raw
    try:
        table = {str(source): level for source, level in items}
    except (TypeError, ValueError):
        msg = f"{who}: authority must be a table of source = level, got {raw!r}"
        raise ValueError(msg) from None
    for source, level in table.items():
        if not isinstance(level, int) or isinstance(level, bool):
            msg = f"{who}: authority.{source} must be an integer level, got {level!r}"
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
