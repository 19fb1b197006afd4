"""The graph's one write-listener hook: who must know of each public write as it is made.

A :class:`WriteListener` attached to a :class:`~pmem.graph.ProvenanceGraph` (``graph.listen(...)``) is
told of each outermost public write: :meth:`WriteListener.writing` before it (nothing is written yet: a
listener may note what happened outside the graph meanwhile), :meth:`WriteListener.written` after it
succeeds, with the call as a :class:`WriteCall` (the write's name and its arguments in the order
:data:`WRITES` names them). A write's own inner calls (an undo's replay, a batch's rows) are not told:
the outer call stands for them. A call the graph refuses raises before it changes anything and is not
told as written. The journal (:class:`~pmem.graph.JournaledGraph`) is the listener this package
attaches; a copy, a load or a replay of a graph attaches none.

>>> from pmem.graph import ProvenanceGraph
>>> class Printer:
...     def writing(self) -> None: ...
...     def written(self, call: WriteCall) -> None:
...         print(call.name, call.args[:3])
>>> g = ProvenanceGraph()
>>> g.listen(Printer())
>>> e = g.observe("the budget is $30k")
observe ('the budget is $30k', 'user', None)
>>> _ = g.apply("accept", "budget", "$30k", evidence=e)
apply ('accept', 'budget', '$30k')
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

#: The public writes a listener is told of, with their arguments in the order a :class:`WriteCall`
#: holds them (``apply_batch``: the batch, a ``pyarrow`` table or record batch).
WRITES: dict[str, tuple[str, ...]] = {
    "observe": ("text", "source", "time", "valid_time"),
    "apply": ("op", "key", "value", "evidence", "depends_on", "alias", "retracts"),
    "apply_batch": ("batch",),
    "undo": ("op_seq", "evidence"),
    "erase": ("evidence_id",),
    "unmerge": ("alias",),
    "set_authority": ("source", "level"),
}


class WriteCall(NamedTuple):
    """One public write as it was called: its name (a key of :data:`WRITES`) and its arguments, in
    that order (``depends_on`` read into a list when it was an iterator: a listener reads it again)."""

    name: str
    args: tuple[Any, ...]


class WriteListener(Protocol):
    """Told of each outermost public write of the graph it listens to (see the module)."""

    def writing(self) -> None:
        """A public write is about to be made (nothing written yet)."""

    def written(self, call: WriteCall) -> None:
        """``call`` was made and succeeded."""
