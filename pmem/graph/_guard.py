"""A save never silently replaces a state that changed since this graph loaded it: no lost write.

Two processes that each load one state, add to it and save it would each replace the file with their own
graph, and the first one's additions would be gone without a word (the last writer wins). So a graph
keeps the version of every state it loaded or saved (:func:`~pmem.graph._state.state_version`: the digest
a file is sealed with, a directory state's metadata digest, which names every table file's), and a save
onto a path it holds a version for:

1. takes the lock beside the state (``.<name>.lock``: ``filelock``'s, the operating system's lock, which
   goes with its process; the file stays, empty, so that every waiter locks the same one),
2. reads the version there now, and writes only when it is the one recorded (or nothing is there: a
   state removed meanwhile is written again); else raises :class:`StateChangedError`, naming both
   versions, and writes nothing,
3. records the version it wrote, and releases the lock.

A save onto a path the graph never loaded nor saved replaces what is there, as any file write does (it
takes the lock too when a lock file is there, so that it never lands between another save's check and
its rename); ``save(path, new=True)`` instead refuses any state found there (:class:`pmem.Memory` made
with a path that did not exist yet saves so).

>>> import tempfile
>>> from pmem.graph import ProvenanceGraph
>>> state = tempfile.mkdtemp() + "/state.arrow"
>>> ProvenanceGraph().save(state)
>>> mine, theirs = ProvenanceGraph.load(state), ProvenanceGraph.load(state)
>>> _ = theirs.apply("accept", "budget", "$30k")
>>> theirs.save(state)
>>> _ = mine.apply("accept", "budget", "$50k")
>>> try:
...     mine.save(state)
... except StateChangedError as exc:
...     "changed since this graph loaded or saved it" in str(exc)
True
>>> ProvenanceGraph.load(state).cell("budget").value
'$30k'
"""

from __future__ import annotations

import contextlib
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from pmem.graph._state import check_save_target, load_state, save_graph, state_version

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._identity import KeyRegistry
    from pmem.graph._state import Layout

#: How long a save waits for another process's save of the same state to end.
LOCK_TIMEOUT_S = 600.0


class StateChangedError(RuntimeError):
    """A save found another state at its path than the one this graph loaded or last saved there (or,
    with ``new=True``, found one at all): nothing was written. The message names both versions."""

    def __init__(self, message: str, path: Path, expected: str | None, found: str | None) -> None:
        super().__init__(message)
        self.path, self.expected, self.found = path, expected, found


# Each graph's record: absolute path -> the version it loaded or saved there. Kept beside the graph, not
# in it: the record is no part of the graph (not saved, not copied by as_of), and goes with it.
_recorded: weakref.WeakKeyDictionary[ProvenanceGraph, dict[str, str]] = weakref.WeakKeyDictionary()


def _where(path: Path) -> str:
    return os.path.abspath(path)


def lock_path(path: str | Path) -> Path:
    """The lock file of the state at ``path``: ``.<name>.lock`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


def load_recorded(
    cls: type[ProvenanceGraph], path: str | Path, registry: KeyRegistry | None
) -> ProvenanceGraph:
    """The graph of the state at ``path`` (either layout), its version recorded for later saves."""
    graph, version = load_state(cls, path, registry)
    _recorded.setdefault(graph, {})[_where(Path(path))] = version
    return graph


def save_checked(graph: ProvenanceGraph, path: str | Path, layout: Layout, *, new: bool = False) -> None:
    """Save ``graph`` to ``path`` as the module docstring says.

    Raises:
        StateChangedError: the state at ``path`` is not the version this graph recorded there (with
            ``new``: a state is there at all); nothing was written.
        TimeoutError: another save of the same state held its lock for :data:`LOCK_TIMEOUT_S`.
    """
    path = check_save_target(path, layout)  # a bad target is refused before any lock file is made
    where = _where(path)
    record = _recorded.get(graph, {})
    checked = new or where in record
    lock = lock_path(path)
    if not checked and not lock.exists():
        version = save_graph(graph, path, layout)  # no one checks this state: a plain replace
    else:
        with _locked(lock, path):
            if checked:
                found = state_version(path)
                expected = None if new else record.get(where)
                if found is not None and found != expected:
                    raise StateChangedError(_changed(path, expected, found), path, expected, found)
            # unchecked, the lock is still taken when others check here: never between their check
            # and their rename
            version = save_graph(graph, path, layout)
    _recorded.setdefault(graph, {})[where] = version


def _changed(path: Path, expected: str | None, found: str) -> str:
    if expected is None:
        return (
            f"save: {path} holds a state (version {found}) that was not there when this memory started "
            "(new=True: nothing expected there): another process or graph saved it; nothing was written "
            "(load it, redo the changes, save again)"
        )
    return (
        f"save: {path} changed since this graph loaded or saved it (version {expected}): it is now "
        f"version {found}, written since by another process or graph; nothing was written (load it "
        "again, redo the changes, save again)"
    )


@contextlib.contextmanager
def _locked(lock: Path, path: Path) -> Iterator[None]:
    """Hold the lock of ``path``'s saves (``lock``) for a ``with`` block."""
    from filelock import FileLock, Timeout  # a core dependency, imported by the saves that lock only

    held = FileLock(str(lock), timeout=LOCK_TIMEOUT_S, thread_local=False)
    try:
        held.acquire()
    except Timeout:
        msg = f"save: {path} has been locked by another save for {LOCK_TIMEOUT_S:.0f} s (lock {lock}); nothing was written"
        raise TimeoutError(msg) from None
    try:
        yield
    finally:
        held.release()
