"""The agent-facing memory: P-Mem's write and read path behind one object, sync and async.

:class:`AsyncMemory` runs :class:`~pmem.memory.writepath.WritePath` (extraction, soft key identity,
annotation or patch lowering, forget, authority, valid time, premises) and its state read, one write unit
per :meth:`~AsyncMemory.add`, through its own :class:`~pmem.memory.writepath.Writer`; the graph is the
core's :class:`~pmem.graph.ProvenanceGraph`. The ``pmem`` arms and ``pmem ingest`` run the same path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from pmem.bench import Event
from pmem.graph import (
    Cell,
    ErasureReceipt,
    JournaledGraph,
    OpResult,
    ProvenanceGraph,
    ScoredCell,
    Version,
    Why,
    check_text,
    is_sharded,
    key_problem,
    valid_instant,
    why,
)
from pmem.memory._extract import no_fact_reason
from pmem.memory._recall import Recalled, context_lines
from pmem.memory._writepath import WRITE_OPTIONS, WritePath
from pmem.memory._writer import Writer
from pmem.models import (
    ChatModel,
    Embedder,
    HeuristicChatModel,
    InstrumentedChatModel,
    InstrumentedEmbedder,
    ModelCallError,
    RequestLog,
    RequestRecord,
    make_chat_model,
    make_embedder,
)

#: what ``add`` takes: a text, or chat messages (``[{"role": ..., "content": ...}]``) as one unit
Text = str | Sequence[Mapping[str, str]]

#: The cosine below which :meth:`AsyncMemory.search` leaves a cell out: it is no answer to the query.
#: Measured with the default ``hashing`` embedder (character n-grams): cells a question is about score
#: 0.2 to 0.7 ("Where is the pan 1 now?" and ``pan_1.location: fridge 1``: 0.27), cells of questions
#: about something else 0.0 to 0.19. Another embedder has its own scale: give ``min_score``.
SEARCH_MIN_SCORE = 0.2
#: :meth:`AsyncMemory.recall`'s budget unless asked otherwise: tokens of the context it hands the model
RECALL_TOKENS = 1000
#: How a memory brings a real model, for the reason an ``add`` that found no fact gives.
MODEL_REMEDY = (
    'for ordinary text give the memory a model: pmem.Memory({"backend": "openai", "url": ..., "model": ...}) '
    "or a local one (docs/models.md)"
)


@dataclass(frozen=True)
class AppliedOp:
    """One operation the write path applied for an ``add``: its effective type, key, value, whether it
    applied, and why not (or why it was lowered)."""

    op: str
    key: str | None
    value: str | None
    applied: bool
    reason: str | None = None
    requested: str | None = None  # the operation asked for, when it differs from ``op``
    source_key: str | None = None  # the key as extracted, when soft identity mapped it onto ``key``


@dataclass(frozen=True)
class AddResult:
    """What :meth:`AsyncMemory.add` did: the evidence id of the text, the facts extracted from it
    (``(key, value)`` as extracted), and every operation applied for them. A text that yielded no
    operation at all has one ``noop`` saying why (no fact found, and what the agent can read)."""

    evidence: str
    facts: list[tuple[str, str | None]]
    operations: list[AppliedOp]


@dataclass(frozen=True)
class Recall:
    """What :meth:`AsyncMemory.recall` found for a query within its budget: the facts (current value,
    status, the turn it cites and that turn's date) and the turns themselves (dated, with their
    speaker), best first. ``context`` is what to put in the model's prompt.

    >>> m = Memory()
    >>> _ = m.add("The city of Alice is Paris.", source="Alice", time="2024-03-01T09:00:00")
    >>> print(m.recall("Where does Alice live?").context)
    alice.city = Paris (current; from e0, 1 March 2024)
    [1 March 2024] Alice: The city of Alice is Paris.
    """

    items: list[Recalled]
    #: the budget it was found within (tokens, the read-size count of :func:`pmem.models.estimate_tokens`)
    budget: int

    @property
    def context(self) -> str:
        """The lines for a prompt: the facts in rank order, then the turns in the order observed."""
        return "\n".join(context_lines(self.items))

    @property
    def tokens(self) -> int:
        """The tokens the items take together (at most the budget)."""
        return sum(item.tokens for item in self.items)


def _unit_text(text: Text) -> str:
    if isinstance(text, str):
        return text
    lines = []
    for i, message in enumerate(text):
        if not isinstance(message, Mapping) or "content" not in message:
            msg = f"add: message {i} must be a mapping with 'role' and 'content', got {message!r:.80}"
            raise ValueError(msg)
        lines.append(f"{message.get('role', 'user')}: {message['content']}")
    return "\n".join(lines)


def _chat(model: Any, log: RequestLog) -> ChatModel:
    """The chat model, every call recorded in ``log`` (the model layer's request rows)."""
    if isinstance(model, ChatModel):
        return InstrumentedChatModel(model, log=log)
    return make_chat_model({"backend": "heuristic"} if model is None else model, log=log)


def _backend(model: Any) -> str:
    """The agent's backend name (``heuristic`` for the default), for why an ``add`` found nothing."""
    if model is None:
        return "heuristic"
    if isinstance(model, Mapping):
        return str(model.get("backend", ""))
    return "heuristic" if isinstance(model, HeuristicChatModel) else type(model).__name__


def _embedder(embedder: Any, log: RequestLog) -> Embedder:
    """The embedder, every call recorded in ``log``."""
    if isinstance(embedder, Embedder):
        return InstrumentedEmbedder(embedder, log=log)
    return make_embedder({"backend": "hashing"} if embedder is None else embedder, log=log)


def _check_statement(where: str, key: object, value: object, text: tuple[str, object]) -> None:
    """Refuse, before anything is written, a key that is no valid key, and a value or statement text
    (``text``: its argument's name and value) that is not text; ``put``'s value may be None."""
    problem = key_problem(key)
    if problem is not None:
        msg = f"{where}: key {problem}"
        raise ValueError(msg)
    check_text(value, "value", where, optional=where == "put")
    check_text(text[1], text[0], where, optional=True)


def _check_times(where: str, time: object, valid_time: object) -> None:
    """Refuse, before anything is written, an observation time that is neither text nor a datetime and
    a valid time that is no ISO 8601 date or datetime (the graph orders facts by it)."""
    if time is not None:
        iso = getattr(time, "isoformat", None)
        text = time if type(time) is str else iso() if callable(iso) else None
        if type(text) is not str:
            msg = f"{where}: time must be text (ISO 8601 or free) or a datetime, got {type(time).__name__} {time!r:.60}"
            raise ValueError(msg)
        check_text(text, "time", where)
    if valid_time is not None:
        valid_instant(valid_time, where)


def _existing(path: str | Path) -> Path:
    """``path``, a state file (or a sharded state: ``pmem ingest --shards``) that exists (a memory loaded
    from nothing is a mistake, not a new memory)."""
    if not Path(path).is_file() and not _is_sharded(Path(path)):
        msg = f"{path}: no such state file"
        raise FileNotFoundError(msg)
    return Path(path)


def _is_sharded(path: Path) -> bool:
    return is_sharded(path)


_Call = TypeVar("_Call", bound="Callable[..., Awaitable[Any]]")


def _in_turn(call: _Call) -> _Call:
    """A memory's call that takes its turn: calls on one memory run one at a time, as a store's calls on
    one namespace do. Concurrent ``add`` calls otherwise interleave inside the write path (each numbered
    its evidence before the others wrote theirs: every one answered ``e0``), and a write discarded after
    a failed commit would take another call's write with it."""

    @functools.wraps(call)
    async def in_turn(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        async with self._turn:
            return await call(self, *args, **kwargs)

    return cast("_Call", in_turn)


class AsyncMemory:
    """P-Mem for an agent, with coroutines (:class:`Memory` is the same with plain calls).

    Args:
        model: the chat model that extracts facts and chooses operations: a ``[models.agent]`` table as
            a dict (``{"backend": "openai", "url": "http://127.0.0.1:8000/v1", "model": "..."}``), or a
            model object of :mod:`pmem.models`; None: the deterministic ``heuristic`` agent.
        embedder: the embedder of soft key identity and search (a ``[models.embedder]`` table or an
            object); None: the ``hashing`` embedder.
        path: a state file: loaded when it exists, and where :meth:`save` writes by default. Every
            write (``add``, ``undo``, ``erase``) is on disk when it returns: appended to the journal
            beside the state file (``<path>.journal``), which :meth:`save` folds into it (and which
            grows no larger than the state before it is folded). A directory or sharded state is read,
            not journaled.
        authority: source ranks (``{"user": 2, "web": 0}``): a lower-ranked source contests what a
            higher-ranked one stated instead of displacing it.
        options: the write path's options (:data:`~pmem.memory.writepath.WRITE_OPTIONS`: ``identity``,
            ``annotate``, ``identity_threshold``, ...) and ``concurrency``; another name is a TypeError.
    """

    def __init__(
        self,
        model: Any = None,
        embedder: Any = None,
        *,
        path: str | Path | None = None,
        authority: Mapping[str, int] | None = None,
        **options: Any,
    ) -> None:
        unknown = sorted(set(options) - {*WRITE_OPTIONS, "concurrency"})
        if unknown:
            msg = f"Memory: unknown option(s) {unknown}; known: {sorted({*WRITE_OPTIONS, 'concurrency'})}"
            raise TypeError(msg)
        opts = dict(options)
        if authority is not None:
            opts["authority"] = dict(authority)
        self._log = RequestLog()  # one row per model request: purpose, tokens, latency, error
        # a model that cannot be reached is an error to the builder, not an empty write
        self._writer = Writer(
            _chat(model, self._log),
            _embedder(embedder, self._log),
            concurrency=opts.pop("concurrency", 16),
            raise_failed_calls=True,
        )
        self._options = opts  # the write path's options, for a write path made anew (_discard)
        self._writepath = self._new_writepath()
        self._agent_backend = _backend(model)
        self._file = None if path is None else Path(path)
        self._events = 0  # texts added so far: the next one's event index
        self._opened = self._file is None  # whether the state at path was read (the first use reads it)
        # a memory made on a path that holds no state yet: its first save there must find none still
        # (another process may have saved one meanwhile, which a plain save would replace)
        self._new_file = self._no_state_yet()
        # the graph whose writes are committed to path's journal (None: no path, or a state read only)
        self._journaled: JournaledGraph | None = None
        self._turn = asyncio.Lock()  # the memory's calls take turns (_in_turn)

    def _no_state_yet(self) -> bool:
        """Whether the memory has a path and no state is there (yet)."""
        return self._file is not None and not (self._file.exists() or _is_sharded(self._file))

    def _new_writepath(self) -> WritePath:
        writepath = WritePath(self._writer, self._options, name="Memory")
        writepath.track_attribution = False  # nothing audits a builder's memory: no per-event record
        return writepath

    def _discard(self) -> None:
        """Forget every change that is not on disk: a write whose commit failed (a full disk, a read-only
        folder, another writer) is no part of the memory, in memory as on disk. The next call reads the
        state again (cutting what a failed append left), so the memory goes on by itself once the cause
        is gone."""
        self._writepath = self._new_writepath()
        self._writer.take_write_log()
        self._journaled = None
        self._events = 0
        self._opened = False
        # a state another writer made meanwhile is read, not refused: the memory starts from it
        self._new_file = self._no_state_yet()

    async def _ready(self) -> None:
        if self._opened:
            return
        try:
            await self._open()
        except BaseException:
            self._discard()  # half-read: the next call reads it again
            raise
        self._opened = True

    async def _open(self) -> None:
        """Read the state at the memory's path into its write path (a journaled graph, unless the state
        is read only)."""
        assert self._file is not None
        wp = self._writepath
        registry = wp.graph.registry
        if not wp.retention or self._file.is_dir() or _is_sharded(self._file):
            # a directory or sharded state is read, not journaled; so is a memory that keeps no history
            # (its graph holds the evidence only: its values live in the write path's store)
            if not self._new_file:
                graph = ProvenanceGraph.load(self._file, registry=registry)
                await wp.resume(graph)
                self._events = graph.stats()["evidence"]
            return
        journaled = JournaledGraph.open(
            self._file,
            registry,
            authority=wp.authority,
            default_authority=wp.default_authority,
            new=self._new_file,  # a state that appeared since this memory was made is not replaced
        )
        self._journaled = journaled
        if self._new_file:
            wp.adopt_graph(journaled)
        else:
            await wp.resume(journaled)
            self._events = journaled.stats()["evidence"]

    def _commit(self) -> None:
        """Make the writes made since the last commit durable (a memory with a file state); when that
        fails, they are discarded (:meth:`_discard`) and the failure raised."""
        journaled = self._journaled
        if journaled is None:
            return
        try:
            journaled.commit()
        except BaseException:
            self._discard()
            raise
        if journaled.path is not None and journaled.path.exists():
            self._new_file = False  # the state is there now: later saves check its version

    @contextlib.contextmanager
    def _writing(self, *, keep: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
        """One write: committed when the block ends; when it raises, discarded (a file state's memory
        reads the state again), except for a failure of a ``keep`` type, after which what was applied
        is committed."""
        try:
            yield
        except keep:
            self._commit()
            raise
        except BaseException:
            if self._journaled is not None:
                self._discard()
            raise
        self._commit()

    def _observed(self, evidence_id: str) -> bool:
        try:
            self._writepath.graph.evidence(evidence_id)
        except KeyError:
            return False
        return True

    def requests(self, *, drain: bool = False) -> list[RequestRecord]:
        """Every model request made so far, in order: purpose (``extract``, ``annotate``, ``identity``,
        ``embed``), prompt and completion tokens as the server counted them, latency, error.

        Args:
            drain: hand the rows over and forget them (a memory that lives for the agent's lifetime
                keeps nothing else per call: drain the log where you store or meter it).
        """
        return self._log.drain() if drain else self._log.records()

    @property
    def graph(self) -> ProvenanceGraph:
        """The provenance graph underneath (every version, evidence and operation)."""
        return self._writepath.state()

    @_in_turn
    async def add(
        self,
        text: Text,
        *,
        source: str = "user",
        time: str | None = None,
        valid_time: str | None = None,
    ) -> AddResult:
        """Commit what ``text`` states: one write unit, one evidence.

        Args:
            text: what was said or observed, or chat messages (one unit).
            source: who said it (source authority ranks it).
            time: when it was observed (ISO 8601, free text or a datetime).
            valid_time: when what it states became true (an ISO 8601 date or datetime; anything else is
                refused with ValueError before anything is written): late news enters the history.

        Returns:
            the evidence id, the facts extracted and the operations applied. A model reply that does
            not parse is a noop with its reason, never an exception; so is a text in which the agent
            found no fact.

        Raises:
            ModelCallError: a model call got no reply (the server unreachable, an error status after
                the retries). A failed extraction has written nothing; a failed later call stops the
                unit there, with the operations before it applied.
        """
        _check_times("add", time, valid_time)
        await self._ready()
        event = Event(self._events, _unit_text(text), time=time, source=source, valid_time=valid_time)
        evidence = f"e{self._events}"  # one unit, one evidence: the texts added so far number them
        # what was applied is on disk before the call returns; a model call that failed after the text
        # was admitted keeps the operations before it
        with self._writing(keep=(ModelCallError,)):
            try:
                (extraction,) = await self._writepath.write([[event]])
            finally:
                if self._observed(evidence):
                    self._events += 1
        records = self._writer.take_write_log()  # this unit's records (the memory keeps no log of its own)
        ops = [
            AppliedOp(r.op, r.key, r.value, r.applied, r.reason, r.requested, r.source_key) for r in records
        ]
        if not ops:  # the text is kept as evidence, but nothing came of it: the result says so
            ops.append(AppliedOp("noop", None, None, False, self._nothing_found()))
        return AddResult(evidence, [(f.key, f.value) for f in extraction.facts], ops)

    def _nothing_found(self) -> str:
        return "extract: no fact found in the text: " + no_fact_reason(
            self._agent_backend, "m.requests()", MODEL_REMEDY
        )

    @_in_turn
    async def search(
        self,
        query: str,
        k: int = 12,
        *,
        disclose: Sequence[str] = (),
        min_score: float | None = SEARCH_MIN_SCORE,
    ) -> list[Cell]:
        """The cells whose current values are nearest ``query``, best first: at most ``k``, each a
        :class:`ScoredCell` with its ``score`` (cosine similarity), none scoring below ``min_score``
        (None: no floor), so a query that nothing matches gets ``[]``. ``disclose`` adds what the cell
        has beyond its value: ``"alternatives"`` (open claims), ``"history"`` (earlier values)."""
        await self._ready()
        hits = await self._writepath.search_scored(query, k)
        out: list[Cell] = []
        for key, score in hits:
            if min_score is not None and score < min_score:
                break  # best first: the rest score lower still
            c = self.graph.cell(key)
            if c is None or c.value is None:
                continue
            shown = dataclasses.replace(
                c,
                alternatives=c.alternatives if "alternatives" in disclose else [],
                history=c.history if "history" in disclose else [],
            )
            out.append(ScoredCell.of(shown, score))
        return out

    @_in_turn
    async def recall(self, query: str, budget: int = RECALL_TOKENS) -> Recall:
        """The facts and the turns a model needs to answer ``query``, within ``budget`` tokens: each
        fact with its status, the turn it cites and that turn's date, each turn dated with its speaker
        (the ``source`` it was added with). Facts and turns are ranked by BM25 and by the embedder,
        fused by reciprocal rank (:mod:`pmem.memory._recall`). Put :attr:`Recall.context` in the prompt.
        """
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            msg = f"recall: budget must be a positive number of tokens, got {budget!r}"
            raise ValueError(msg)
        check_text(query, "query", "recall")
        await self._ready()
        return Recall(await self._writepath.recall(query, budget), budget)

    @_in_turn
    async def get(self, key: str) -> Cell | None:
        """The cell of ``key`` (None when the memory never held it)."""
        await self._ready()
        return self.graph.cell(key)

    @_in_turn
    async def history(self, key: str) -> list[Version]:
        """Every version of ``key``, in arrival order."""
        await self._ready()
        return self.graph.versions(key)

    @_in_turn
    async def why(self, key: str) -> Why | None:
        """Why ``key`` holds what it holds (None when the memory never held it): the evidence behind
        its current value (texts, sources, times) and the operations on the key.

        >>> m = Memory()
        >>> _ = m.add("The city of Alice is Paris.")
        >>> w = m.why("alice.city")
        >>> w.value, [e.text for e in w.evidence], [op.op for op in w.operations]
        ('Paris', ['The city of Alice is Paris.'], ['accept'])
        """
        await self._ready()
        return why(self.graph, key)

    @_in_turn
    async def conflicts(self) -> list[Cell]:
        """The open contests: every cell whose head is contested, with its alternatives, by key."""
        await self._ready()
        return [c for c in self.graph.frontier().values() if c.status == "contested"]

    @_in_turn
    async def resolve(
        self, key: str, value: str, *, source: str = "user", note: str | None = None
    ) -> OpResult:
        """Settle ``key``'s contest on ``value`` (the head's or an alternative's): that version becomes
        the head and every other competitor is contradicted. The resolution is evidence of its own
        (``note``, else a sentence saying it), by ``source``; the result says whether it applied, and
        why not (no contest, a value that is not a competitor, a source ranked too low)."""
        _check_statement("resolve", key, value, ("note", note))  # before anything is written
        await self._ready()
        text = note if note is not None else f"{key} resolved to {value}"
        graph = self.graph
        with self._writing():
            evidence = graph.observe(text, source=source)
            self._events += 1
            result = graph.apply("resolve", key, value, evidence=evidence)
            self._writepath.cells_changed([key])
        return result

    @_in_turn
    async def render(
        self, query: str | None = None, *, k: int = 12, disclose: Sequence[str] = ("support", "alternatives")
    ) -> str:
        """The context block an agent's prompt takes: the cells nearest ``query`` (all when None)."""
        await self._ready()
        keys = None if query is None else await self._writepath.search_keys(query, k)
        return self.graph.render(keys=keys, disclose=tuple(disclose))

    @_in_turn
    async def put(
        self,
        key: str,
        value: str | None,
        *,
        source: str = "user",
        time: str | None = None,
        text: str | None = None,
    ) -> AddResult:
        """Commit a fact already extracted, without the model: ``value`` becomes ``key``'s current value
        (a changed value supersedes the old one, which the history keeps; the same value counts as
        support), or with ``value`` None the key is withdrawn: each of its values in turn is revoked,
        until none is current. The statement is one evidence (``text``, else ``key = value``).

        >>> m = Memory()
        >>> _ = m.put("budget", "$30k"); _ = m.put("budget", "$50k")
        >>> m.get("budget").value, [v.value for v in m.history("budget")]
        ('$50k', ['$30k', '$50k'])
        >>> [op.op for op in m.put("budget", None).operations], m.get("budget").value
        (['revoke', 'revoke'], None)
        """
        _check_statement("put", key, value, ("text", text))  # before anything is written
        _check_times("put", time, None)
        await self._ready()
        graph = self.graph
        stated = (
            text if text is not None else (f"{key} = {value}" if value is not None else f"{key} withdrawn")
        )
        ops: list[AppliedOp] = []
        with self._writing():
            evidence = graph.observe(stated, source=source, time=time)
            self._events += 1
            if value is not None:
                r = graph.apply("accept", key, value, evidence=evidence)
                ops.append(AppliedOp(r.op, key, value, r.applied, r.reason))
            else:
                # a revoke reinstates the value before the one it retracts: withdrawing the key revokes
                # until none is current (at most once per version it ever had)
                for _ in range(len(graph.versions(key))):
                    current = graph.head_value(key)
                    if current is None:
                        break
                    r = graph.apply("revoke", key, current, evidence=evidence)
                    ops.append(AppliedOp(r.op, key, current, r.applied, r.reason))
                    if not r.applied:
                        break
            self._writepath.cells_changed([key])
        if not ops:
            ops.append(AppliedOp("noop", key, None, False, "put: the key holds no value to withdraw"))
        return AddResult(evidence, [(key, value)], ops)

    @_in_turn
    async def undo(self, op_seq: int) -> OpResult:
        """Undo one operation (by its seq): its key becomes what the log without it gives. The result
        says whether it applied, and why not."""
        await self._ready()
        with self._writing():
            result = self.graph.undo(op_seq)
            self._writepath.cells_changed(self.graph)  # which key is the log's: every cell is re-read
        return result

    @_in_turn
    async def erase(self, evidence_id: str) -> ErasureReceipt:
        """Erase an evidence: its text leaves the graph and every byte saved afterwards."""
        await self._ready()
        with self._writing():  # an erasure rewrites the state file: its text leaves the disk too
            receipt = self.graph.erase(evidence_id)
            self._writepath.cells_changed(receipt.changed)
        return receipt

    @_in_turn
    async def as_of(self, seq: int | None = None, *, time: str | None = None) -> ProvenanceGraph:
        """The graph as it was after arrival ``seq`` or observation ``time`` (read-only)."""
        await self._ready()
        return self.graph.as_of(seq, time=time)

    @_in_turn
    async def save(self, path: str | Path | None = None) -> Path:
        """Write the state file (``path``, else the one given at construction); its path.

        Raises:
            StateChangedError: another process saved the state since this memory loaded it (or, for a
                memory made on a path that held none, saved one there): nothing was written; load it
                again and redo the changes.
        """
        await self._ready()
        target = Path(path) if path is not None else self._file
        if target is None:
            msg = "save: give a path (this memory was made without one)"
            raise ValueError(msg)
        if _is_sharded(target):
            msg = f"save: {target} is a sharded state (pmem ingest --shards), which this memory reads but does not rewrite: give save() a file path"
            raise ValueError(msg)
        if target == self._file:
            self._commit()
        self.graph.save(target, new=self._new_file and target == self._file)  # folds a journal there
        if target == self._file:
            self._new_file = False
        return target

    async def aclose(self) -> None:
        """Close the models' connections (an OpenAI-compatible client holds an HTTP session)."""
        for model in (self._writer.agent, self._writer.embedder):
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @classmethod
    def load(cls, path: str | Path, model: Any = None, embedder: Any = None, **options: Any) -> AsyncMemory:
        """A memory that goes on from the state file at ``path`` (which must exist)."""
        return cls(model, embedder, path=_existing(path), **options)


class Memory:
    """P-Mem for an agent, with plain calls: the methods of :class:`AsyncMemory` run to completion on
    a private event loop. In async code use :class:`AsyncMemory`.

    >>> m = Memory()
    >>> _ = m.add("The city of Alice is Paris.")
    >>> [c.value for c in m.search("Where does Alice live?", k=1)]
    ['Paris']
    """

    def __init__(self, model: Any = None, embedder: Any = None, **kwargs: Any) -> None:
        self._async = AsyncMemory(model, embedder, **kwargs)
        self._loop = asyncio.new_event_loop()
        # A script that never calls close() still ends cleanly: when the memory is collected, or at
        # exit, the models' HTTP sessions are closed on the loop they belong to, and the loop with them
        # (left open, aiohttp says "Unclosed client session" and asyncio "Task was destroyed").
        self._finalizer = weakref.finalize(self, _shut_down, self._loop, self._async)

    def _run(self, coroutine: Any) -> Any:
        return self._loop.run_until_complete(coroutine)

    @property
    def graph(self) -> ProvenanceGraph:
        self._run(self._async._ready())
        return self._async.graph

    def requests(self, *, drain: bool = False) -> list[RequestRecord]:
        return self._async.requests(drain=drain)

    def add(self, text: Text, **kwargs: Any) -> AddResult:
        return self._run(self._async.add(text, **kwargs))  # type: ignore[no-any-return]

    def search(
        self,
        query: str,
        k: int = 12,
        *,
        disclose: Sequence[str] = (),
        min_score: float | None = SEARCH_MIN_SCORE,
    ) -> list[Cell]:
        found = self._async.search(query, k, disclose=disclose, min_score=min_score)
        return self._run(found)  # type: ignore[no-any-return]

    def recall(self, query: str, budget: int = RECALL_TOKENS) -> Recall:
        return self._run(self._async.recall(query, budget))  # type: ignore[no-any-return]

    def get(self, key: str) -> Cell | None:
        return self._run(self._async.get(key))  # type: ignore[no-any-return]

    def history(self, key: str) -> list[Version]:
        return self._run(self._async.history(key))  # type: ignore[no-any-return]

    def why(self, key: str) -> Why | None:
        return self._run(self._async.why(key))  # type: ignore[no-any-return]

    def conflicts(self) -> list[Cell]:
        return self._run(self._async.conflicts())  # type: ignore[no-any-return]

    def resolve(self, key: str, value: str, **kwargs: Any) -> OpResult:
        return self._run(self._async.resolve(key, value, **kwargs))  # type: ignore[no-any-return]

    def put(self, key: str, value: str | None, **kwargs: Any) -> AddResult:
        return self._run(self._async.put(key, value, **kwargs))  # type: ignore[no-any-return]

    def render(self, query: str | None = None, **kwargs: Any) -> str:
        return self._run(self._async.render(query, **kwargs))  # type: ignore[no-any-return]

    def undo(self, op_seq: int) -> OpResult:
        return self._run(self._async.undo(op_seq))  # type: ignore[no-any-return]

    def erase(self, evidence_id: str) -> ErasureReceipt:
        return self._run(self._async.erase(evidence_id))  # type: ignore[no-any-return]

    def as_of(self, seq: int | None = None, *, time: str | None = None) -> ProvenanceGraph:
        return self._run(self._async.as_of(seq, time=time))  # type: ignore[no-any-return]

    def save(self, path: str | Path | None = None) -> Path:
        return self._run(self._async.save(path))  # type: ignore[no-any-return]

    @classmethod
    def load(cls, path: str | Path, model: Any = None, embedder: Any = None, **options: Any) -> Memory:
        return cls(model, embedder, path=_existing(path), **options)

    def close(self) -> None:
        """Close the models' connections, then the memory's event loop (also done when the memory is
        collected, or at exit)."""
        self._finalizer()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shut_down(loop: asyncio.AbstractEventLoop, memory: AsyncMemory) -> None:
    """Close ``memory``'s models on ``loop``, end what is left on it, and close it."""
    if loop.is_closed():
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:  # collected inside another running loop, which this thread cannot leave to run ours
        return
    try:
        loop.run_until_complete(memory.aclose())
        # what is left (a model client's session closer) ends with the loop, as asyncio.run ends it
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        loop.run_until_complete(_ended(left))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


async def _ended(tasks: set[asyncio.Task[Any]]) -> None:
    """Wait for cancelled ``tasks`` (gathered on the running loop: they belong to it)."""
    await asyncio.gather(*tasks, return_exceptions=True)
