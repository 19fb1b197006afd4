"""A save never silently replaces a state that changed since this graph loaded it: no lost write.

Two processes that each load one state, add to it and save it would each replace the file with their own
graph, and the first one's additions would be gone without a word (the last writer wins). So a graph
keeps the version of every state it loaded or saved (:func:`~pmem.graph._persist._state.state_version`: the digest
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
import errno
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from pmem.graph._persist import _journal
from pmem.graph._persist._sealing import StateFileError
from pmem.graph._persist._state import (
    check_save_target,
    journal_path,
    load_state,
    save_graph,
    save_state_bytes,
    state_version,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._identity._registry import KeyRegistry
    from pmem.graph._persist._state import Layout

#: How long a save waits for another process's save of the same state to end.
LOCK_TIMEOUT_S = 600.0
#: A journal is folded into its state once it outweighs the state file and this many bytes: a fold
#: rewrites the state, so folding in proportion to the state's size keeps a write's cost, averaged over
#: the writes between two folds, independent of the state's size.
FOLD_MIN_BYTES = 8 << 20


class StateChangedError(RuntimeError):
    """A save found another state at its path than the one this graph loaded or last saved there (or,
    with ``new=True``, found one at all): nothing was written. The message names both versions."""

    def __init__(self, message: str, path: Path, expected: str | None, found: str | None) -> None:
        super().__init__(message)
        self.path, self.expected, self.found = path, expected, found


# Each graph's record: absolute path -> the version it loaded or saved there. Kept beside the graph, not
# in it: the record is no part of the graph (not saved, not copied by as_of), and goes with it.
_recorded: weakref.WeakKeyDictionary[ProvenanceGraph, dict[str, str]] = weakref.WeakKeyDictionary()
# And for a state with a journal: the number of the journal's last record this graph holds.
_records: weakref.WeakKeyDictionary[ProvenanceGraph, dict[str, int]] = weakref.WeakKeyDictionary()


def _where(path: Path) -> str:
    return os.path.abspath(path)


def lock_path(path: str | Path) -> Path:
    """The lock file of the state at ``path``: ``.<name>.lock`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


def current_version(path: str | Path) -> str | None:
    """The version of the state at ``path`` now (:func:`~pmem.graph._persist._state.state_version`), and of its
    journal when one is beside it (its inode, size and modification time: an append or a fold changes
    it); None when nothing is there."""
    version = state_version(path)
    try:
        st = os.stat(journal_path(path))
    except FileNotFoundError:
        return version
    return f"{version}+journal:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def load_recorded(
    cls: type[ProvenanceGraph], path: str | Path, registry: KeyRegistry | None
) -> ProvenanceGraph:
    """The graph of the state at ``path`` (either layout) with its journal's records replayed, its
    version recorded for later saves."""
    path = Path(path)
    if not journal_path(path).exists():
        graph, version = load_state(cls, path, registry)
    else:
        with _locked(lock_path(path), path, "load"):  # no write lands between the state and its journal
            graph, version = _load_journaled(cls, path, registry)
    _recorded.setdefault(graph, {})[_where(path)] = version
    return graph


def _load_journaled(
    cls: type[ProvenanceGraph], path: Path, registry: KeyRegistry | None
) -> tuple[ProvenanceGraph, str]:
    """The state at ``path`` and its journal (the lock held), and the version read."""
    if not path.exists():
        msg = f"{path}: the state file is missing, but its journal {journal_path(path).name} is there"
        raise StateFileError(msg)
    graph, digest = load_state(cls, path, registry)
    journal = _journal.read_journal(path, digest)
    if journal is not None:
        with contextlib.suppress(OSError):  # a reader on a read-only copy leaves the file as it is
            if _journal.spent(journal, digest):
                _journal.remove_journal(path)
            else:
                _journal.cut_torn_tail(journal)
        if not _journal.spent(journal, digest):
            _journal.replay(graph, journal.records)
            _records.setdefault(graph, {})[_where(path)] = journal.last
    version = current_version(path)
    assert version is not None  # the state file is there
    return graph, version


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
                _check_version(path, None if new else record.get(where))
            # unchecked, the lock is still taken when others check here: never between their check
            # and their rename
            version = _fold(graph, path, layout)
    _recorded.setdefault(graph, {})[where] = version
    _records.get(graph, {}).pop(where, None)


def _check_version(path: Path, expected: str | None) -> None:
    """Raise :class:`StateChangedError` unless the state at ``path`` is version ``expected`` (None:
    nothing is there, or a state this graph did not load, which it then replaces)."""
    found = current_version(path)
    if found is not None and found != expected:
        raise StateChangedError(_changed(path, expected, found), path, expected, found)


def _fold(graph: ProvenanceGraph, path: Path, layout: Layout) -> str:
    """Save ``graph`` to ``path`` (the lock held); a journal there is folded into the new state: the
    fold is noted in it first, so that a kill before its removal leaves it spent, never replayed twice."""
    if layout == "directory" or not journal_path(path).exists():
        return save_graph(graph, path, layout)
    journal = _journal.read_journal(path, state_version(path))
    if journal is not None:
        _journal.cut_torn_tail(journal)  # a note after a torn line would make that line a damaged one
    noted = journal_path(path).stat().st_size
    try:
        version = save_graph(graph, path, layout, before_replace=lambda d: _journal.mark_compacting(path, d))
    except BaseException:
        # the state was not replaced: its journal goes on as it was (a note left behind is passed over)
        with contextlib.suppress(OSError):
            os.truncate(journal_path(path), noted)
        raise
    _journal.remove_journal(path)
    return version


def commit_journal(graph: ProvenanceGraph, path: str | Path, calls: list[list[Any]], base: bytes) -> None:
    """Append ``calls`` (what ``graph`` did since it loaded ``path`` or last committed there) to the
    state's journal as one record, durably; or, when the calls erase evidence (whose text must leave
    every byte on disk) or the journal has outgrown the state, save ``graph`` there instead, folding the
    journal. ``base``: the state file to start from when ``path`` holds none (``graph`` before the calls).

    Raises:
        StateChangedError: the state at ``path`` is not the version ``graph`` holds (another process
            wrote it since): nothing was written.
        OSError: the state or its journal could not be written (a full disk, a read-only folder):
            nothing of ``calls`` is on disk, and a later commit goes on from what is (the failed write
            changed nothing another process could have made: the lock is held throughout).
    """
    path = Path(path)
    where = _where(path)
    expected = _recorded.get(graph, {}).get(where)
    with _locked(lock_path(path), path, "commit"):
        _check_version(path, expected)  # expected None: nothing may be there (no state arrived since)
        try:
            if any(call[0] == "erase" for call in calls) or _outgrown(path):
                version = _fold(graph, path, "file")
                _records.get(graph, {}).pop(where, None)
            else:
                _append_record(graph, path, calls, base)
                version = str(current_version(path))
        except OSError:
            # what the failed write left (a state file made for the journal, a file's new times, a
            # torn line or a spent journal it could not cut or remove) is this graph's own doing under
            # the lock: the next commit checks against it, not against what the failure replaced (it is
            # no other writer's change), and reads the journal whole before it appends
            _records.get(graph, {}).pop(where, None)
            now = current_version(path)
            if now is None:
                _recorded.get(graph, {}).pop(where, None)
            else:
                _recorded.setdefault(graph, {})[where] = now
            raise
    _recorded.setdefault(graph, {})[where] = version


def _append_record(graph: ProvenanceGraph, path: Path, calls: list[list[Any]], base: bytes) -> None:
    """Append ``calls`` to the journal of ``path`` as the record after its last one (the lock held),
    starting the journal (and the state file: ``base``) when there is none."""
    where = _where(path)
    journal = journal_path(path)
    if journal.exists() and where not in _records.get(graph, {}):
        _resume_journal(graph, path)
    if not path.exists():
        _journal.start_journal(path, save_state_bytes(path, base))
    elif not journal.exists():
        _journal.start_journal(path, state_version(path))
    n = _records.get(graph, {}).get(where, 0) + 1
    _journal.append_record(path, n, calls)
    _records.setdefault(graph, {})[where] = n


def _resume_journal(graph: ProvenanceGraph, path: Path) -> None:
    """Read the journal of ``path`` whole, for a graph that holds no count of its records (a commit of it
    failed, or it loaded a spent journal a read-only folder kept): its torn last line is cut and its
    record count noted, or it is removed when a fold already holds its records, or when it holds no
    whole header. The version check passed: what is there is this graph's."""
    digest = state_version(path)
    journal = _journal.read_journal(path, digest)
    if journal is None:
        return
    if _journal.spent(journal, digest) or journal.end == 0:
        _journal.remove_journal(path)
        return
    _journal.cut_torn_tail(journal)
    _records.setdefault(graph, {})[_where(path)] = journal.last


def _outgrown(path: Path) -> bool:
    """Whether the journal of ``path`` outweighs its state file and :data:`FOLD_MIN_BYTES`."""
    try:
        journal = os.stat(journal_path(path)).st_size
        state = os.stat(path).st_size
    except FileNotFoundError:
        return False
    return journal > max(FOLD_MIN_BYTES, state)


def _changed(path: Path, expected: str | None, found: str) -> str:
    if expected is None:
        return (
            f"{path} holds a state (version {found}) that was not there when this memory started "
            "(new=True: nothing expected there): another process or graph saved it; nothing was written "
            "(load it, redo the changes, save again)"
        )
    return (
        f"{path} changed since this graph loaded or saved it (version {expected}): it is now "
        f"version {found}, written since by another process or graph; nothing was written (load it "
        "again, redo the changes, save again)"
    )


@contextlib.contextmanager
def _locked(lock: Path, path: Path, what: str = "save") -> Iterator[None]:
    """Hold the lock of ``path``'s saves (``lock``) for a ``with`` block. A load whose lock file cannot
    be opened for writing (a read-only folder) reads without it: a save cannot take it either, and a
    state and journal read across another writer's fold do not agree, which the load refuses."""
    held = FileLock(str(lock), timeout=LOCK_TIMEOUT_S, thread_local=False)
    try:
        held.acquire()
    except Timeout:
        msg = f"{what}: {path} has been locked by another save for {LOCK_TIMEOUT_S:.0f} s (lock {lock}); nothing was written"
        raise TimeoutError(msg) from None
    except OSError as exc:
        if what != "load" or exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        yield
        return
    try:
        yield
    finally:
        held.release()
