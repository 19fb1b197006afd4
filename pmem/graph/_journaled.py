"""A graph whose writes become durable one commit at a time, in its state file's journal.

:class:`JournaledGraph` is a :class:`~pmem.graph.ProvenanceGraph` bound to a state file. It records its
public writes as it makes them (the calls :data:`pmem.graph._journal.CALLS` names, with the soft-identity
registry's keys and decisions made in between), and :meth:`JournaledGraph.commit` appends them to the
journal as one record (:mod:`pmem.graph._journal`), fsynced, under the state's lock and only over the
version of the state it holds (:mod:`pmem.graph._guard`). A commit costs the record's bytes, not the
state's: a state that has grown past its journal's fold size is saved whole once in a while, and a commit
that erases evidence saves it at once (the erased text must leave every byte on disk).

>>> import tempfile
>>> state = tempfile.mkdtemp() + "/state.arrow"
>>> g = JournaledGraph.open(state)
>>> e = g.observe("the budget is $30k")
>>> _ = g.apply("accept", "budget", "$30k", evidence=e)
>>> g.commit()
>>> ProvenanceGraph.load(state).head_value("budget")
'$30k'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.graph._graph import ProvenanceGraph
from pmem.graph._guard import commit_journal
from pmem.graph._state import journal_path
from pmem.graph._validate import format_time

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    import pyarrow as pa

    from pmem.graph._bulk import BatchResult
    from pmem.graph._identity import KeyRegistry
    from pmem.graph._rederive import ErasureReceipt, MergeReceipt
    from pmem.graph._types import OpResult


class JournaledGraph(ProvenanceGraph):
    """A provenance graph bound to a state file, whose writes :meth:`commit` makes durable.

    Build it with :meth:`open`; a graph loaded or made otherwise records nothing (replaying a journal
    into it is no write of its own).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._path: Path | None = None  # the state file commits go to (None: not bound, records nothing)
        self._pending: list[list[Any]] = []  # the calls made since the last commit, as the journal holds them
        self._depth = 0  # > 0 inside a recorded call: the calls it makes itself are replayed by it
        self._registry_seen = (0, 0)  # the registry's (keys, decisions) already in _pending or on disk
        self._base = b""  # the state file to start from when the path holds none: this graph, empty

    @classmethod
    def open(
        cls,
        path: str | Path,
        registry: KeyRegistry | None = None,
        *,
        authority: Mapping[str, int] | None = None,
        default_authority: int = 1,
        new: bool = False,
    ) -> JournaledGraph:
        """The state at ``path`` with its journal replayed (a new, empty graph when nothing is there,
        made with ``authority`` and ``default_authority``), bound to ``path``: its commits go there.
        ``new``: start empty whatever is there, so that the first commit is refused if a state is
        (the caller found none when it started).

        Raises:
            StateFileError: the state or its journal is damaged, or a journal is there without its state.
        """
        path = Path(path)
        if not new and (path.exists() or journal_path(path).exists()):
            graph = cls.load(path, registry)
            assert isinstance(graph, JournaledGraph)  # load builds the class it is called on
        else:
            graph = cls(registry, authority=authority, default_authority=default_authority)
            graph._base = graph.to_bytes()
        graph._path = path
        graph._registry_seen = graph._registry_counts()
        return graph

    @property
    def path(self) -> Path | None:
        """The state file this graph commits to (None: not bound)."""
        return self._path

    @property
    def pending(self) -> int:
        """Calls made since the last commit."""
        return len(self._pending) + (self._registry_counts() != self._registry_seen)

    def commit(self) -> None:
        """Make every write since the last commit durable: one journal record, fsynced (or the state
        saved whole, folding the journal, when the writes erase evidence or the journal has grown past
        its fold size). Nothing to commit writes nothing.

        Raises:
            StateChangedError: another process wrote the state since this graph read it: nothing was
                written, and the writes stay pending (load the state again to go on from it).
            ValueError: the graph is not bound to a state file (made without :meth:`open`).
        """
        if self._path is None:
            msg = "commit: this graph is bound to no state file (JournaledGraph.open binds one)"
            raise ValueError(msg)
        self._note_registry()
        if not self._pending:
            return
        commit_journal(self, self._path, self._pending, self._base)
        self._pending = []

    # ------------------------------------------------------------------ recording

    def _registry_counts(self) -> tuple[int, int]:
        return (0, 0) if self._registry is None else self._registry.counts()

    def _note_registry(self) -> None:
        """Record what the registry gained since the last note (the write path routes keys itself)."""
        counts = self._registry_counts()
        if counts != self._registry_seen:
            assert self._registry is not None  # counts moved: there is a registry
            keys, decisions = self._registry.since(*self._registry_seen)
            self._pending.append(["registry", keys, decisions])
            self._registry_seen = counts

    def _recorded(self, write: Callable[[], Any], call: Callable[[], list[Any]]) -> Any:
        """Make ``write`` and record ``call()`` for it, when this is a bound graph's own outermost call
        (a refused call raises before it changes anything, and records nothing)."""
        if self._path is None or self._depth:
            return write()
        self._note_registry()
        self._depth += 1
        try:
            result = write()
        finally:
            self._depth -= 1
        self._pending.append(call())
        self._registry_seen = self._registry_counts()  # what the call did to the registry, its replay does
        return result

    def observe(
        self, text: str, source: str = "user", time: str | None = None, valid_time: str | None = None
    ) -> str:
        def write() -> str:
            return super(JournaledGraph, self).observe(text, source, time, valid_time)

        # the time as the graph stores it (a datetime becomes its ISO text)
        eid: str = self._recorded(write, lambda: ["observe", text, source, self._stamp(time), valid_time])
        return eid

    @staticmethod
    def _stamp(time: object) -> str | None:
        return time if time is None or type(time) is str else format_time(time)

    def apply(
        self,
        op: str,
        key: str,
        value: str | None = None,
        evidence: str | None = None,
        *,
        depends_on: Iterable[str] | None = None,
        alias: str | None = None,
        retracts: str | None = None,
    ) -> OpResult:
        # premises are read twice (the call, the record): an iterator is read once, into a list
        named: Any = depends_on if depends_on is None or isinstance(depends_on, str) else list(depends_on)

        def write() -> OpResult:
            return super(JournaledGraph, self).apply(
                op, key, value, evidence, depends_on=named, alias=alias, retracts=retracts
            )

        result: OpResult = self._recorded(
            write, lambda: ["apply", op, key, value, evidence, named, alias, retracts]
        )
        return result

    def apply_batch(self, batch: pa.Table | pa.RecordBatch) -> BatchResult:
        if self._path is None or self._depth:
            return super().apply_batch(batch)
        self._note_registry()
        result = super().apply_batch(batch)
        # a write batch is the loop over its rows (pmem.graph._bulk): the journal records that loop
        for row in batch.to_pylist():
            if row["op"] is None:
                self._pending.append(["observe", row["text"], row["source"] or "user", row["time"], None])
            else:
                evidence = None if row["evidence"] is None else f"e{row['evidence']}"
                self._pending.append(
                    ["apply", row["op"], row["key"], row["value"], evidence, None, None, None]
                )
        return result

    def undo(self, op_seq: int, evidence: str | None = None) -> OpResult:
        result: OpResult = self._recorded(
            lambda: super(JournaledGraph, self).undo(op_seq, evidence),
            lambda: ["undo", int(op_seq), evidence],
        )
        return result

    def erase(self, evidence_id: str) -> ErasureReceipt:
        receipt: ErasureReceipt = self._recorded(
            lambda: super(JournaledGraph, self).erase(evidence_id), lambda: ["erase", evidence_id]
        )
        return receipt

    def unmerge(self, alias: str) -> MergeReceipt:
        receipt: MergeReceipt = self._recorded(
            lambda: super(JournaledGraph, self).unmerge(alias), lambda: ["unmerge", alias]
        )
        return receipt

    def set_authority(self, source: str, level: int) -> None:
        self._recorded(
            lambda: super(JournaledGraph, self).set_authority(source, level),
            lambda: ["set_authority", source, int(level)],
        )
