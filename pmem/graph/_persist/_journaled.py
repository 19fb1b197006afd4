"""A graph whose writes become durable one commit at a time, in its state file's journal.

:class:`JournaledGraph` is a :class:`~pmem.graph.ProvenanceGraph` bound to a state file. Its journal
listens to its writes (the graph's write-listener hook, :mod:`pmem.graph._ops._listen`) and records them as it
makes them (the calls :data:`pmem.graph._persist._journal.CALLS` names, with the soft-identity registry's keys and
decisions made in between), and :meth:`JournaledGraph.commit` appends them to the
journal as one record (:mod:`pmem.graph._persist._journal`), fsynced, under the state's lock and only over the
version of the state it holds (:mod:`pmem.graph._persist._guard`). A commit costs the record's bytes, not the
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
from pmem.graph._ops._listen import WriteCall
from pmem.graph._ops._validate import format_time
from pmem.graph._persist._guard import commit_journal
from pmem.graph._persist._state import journal_path

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pmem.graph._identity._registry import KeyRegistry


class JournaledGraph(ProvenanceGraph):
    """A provenance graph bound to a state file, whose writes :meth:`commit` makes durable.

    Build it with :meth:`open`; a graph loaded or made otherwise records nothing (replaying a journal
    into it is no write of its own).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._path: Path | None = None  # the state file commits go to (None: not bound, records nothing)
        self._journal = _PendingCalls(self)  # the calls made since the last commit (listening once bound)
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
        graph._journal.start()
        graph.listen(graph._journal)
        return graph

    @property
    def path(self) -> Path | None:
        """The state file this graph commits to (None: not bound)."""
        return self._path

    @property
    def pending(self) -> int:
        """Calls made since the last commit."""
        return self._journal.count()

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
        self._journal.writing()
        calls = self._journal.calls()
        if not calls:
            return
        commit_journal(self, self._path, calls, self._base)
        self._journal.committed()


class _PendingCalls:
    """A bound graph's writes since its last commit, as its journal records them: the graph's write
    listener (:mod:`pmem.graph._ops._listen`), which also notes what the soft-identity registry gained in
    between (the write path routes keys through it itself, outside the graph's writes)."""

    def __init__(self, graph: ProvenanceGraph) -> None:
        self._graph = graph  # whose registry to watch (it may be made on first use: asked each time)
        self._calls: list[list[Any]] = []  # the calls made since the last commit, as the journal holds them
        self._registry_seen = (0, 0)  # the registry's (keys, decisions) already in _calls or on disk

    def start(self) -> None:
        """From now on: what the registry holds now is on disk."""
        self._registry_seen = self._registry_counts()

    def count(self) -> int:
        return len(self._calls) + (self._registry_counts() != self._registry_seen)

    def calls(self) -> list[list[Any]]:
        return self._calls

    def committed(self) -> None:
        """The calls are on disk."""
        self._calls = []

    def writing(self) -> None:
        """Record what the registry gained since the last note."""
        counts = self._registry_counts()
        if counts != self._registry_seen:
            registry = self._graph.registry_in_use
            assert registry is not None  # counts moved: there is a registry
            keys, decisions = registry.since(*self._registry_seen)
            self._calls.append(["registry", keys, decisions])
            self._registry_seen = counts

    def written(self, call: WriteCall) -> None:
        name, args = call
        if name == "apply_batch":
            # a write batch is the loop over its rows (pmem.graph._ops._bulk): the journal records that loop
            for row in args[0].to_pylist():
                if row["op"] is None:
                    self._calls.append(["observe", row["text"], row["source"] or "user", row["time"], None])
                else:
                    evidence = None if row["evidence"] is None else f"e{row['evidence']}"
                    self._calls.append(
                        ["apply", row["op"], row["key"], row["value"], evidence, None, None, None]
                    )
        elif name == "observe":
            text, source, time, valid_time = args
            # the time as the graph stores it (a datetime becomes its ISO text)
            stamp = time if time is None or type(time) is str else format_time(time)
            self._calls.append(["observe", text, source, stamp, valid_time])
        elif name == "undo":
            self._calls.append(["undo", int(args[0]), args[1]])
        elif name == "set_authority":
            self._calls.append(["set_authority", args[0], int(args[1])])
        else:  # apply, erase, unmerge: their arguments as called
            self._calls.append([name, *args])
        self._registry_seen = self._registry_counts()  # what the call did to the registry, its replay does

    def _registry_counts(self) -> tuple[int, int]:
        registry = self._graph.registry_in_use
        return (0, 0) if registry is None else registry.counts()
