"""A state file's journal: the writes made since the state was last saved, appended one sealed line each.

Saving a whole state after every write costs what the state weighs. A journaled state instead appends
each committed write, as the graph calls it was made of, to ``<state>.journal`` beside the state file,
and folds the journal into the state (a save) once it has grown; loading the state replays its journal.
An append costs the same whatever the state holds.

The journal is text, one line per entry, each line ``<digest> <json>`` where the digest is the XXH3-128
of the JSON's bytes (the JSON is ASCII: no newline inside)::

    {"format": "pmem-journal", "version": 1, "base": "<digest of the state file, or null: no file>"}
    {"n": 1, "calls": [["observe", "the budget is $30k", "user", null, null], ["apply", "accept", ...]]}
    {"n": 2, "calls": [...]}
    {"compacting": "<digest of the state file about to replace the base>"}

- The first line names the state file the records apply to (its sealed digest, see
  :mod:`pmem.graph._persist._state`), so a journal is never replayed onto another state.
- A record is one commit: the graph calls one write made (:data:`CALLS`), in order, replayed by
  :func:`replay` through the graph's public methods, which are deterministic. Records are numbered
  1, 2, ... without gaps.
- A save folds the journal: it appends ``compacting`` naming the digest of the state it is writing,
  replaces the state file (written aside, renamed), then removes the journal. Killed between the two, the
  state file carries the digest ``compacting`` names: the records are in it, and the journal is spent.
- A write is durable once its line is fsynced. An append lands whole or not at all: the line is written
  until every byte is in the file and fsynced, and a write that fails part-way (a full disk, an I/O
  error) cuts the file back to where it started before it raises. A line cut short all the same (the
  process killed mid-write, or the cut itself failing) can only be the last one: readers leave it out,
  and the next open or append cuts it off, so that later records land after the last whole one. Any
  other line that does not verify is damage: the state is refused with
  :class:`~pmem.graph.StateFileError`, never replayed in part.
- A ``compacting`` note followed by records, or naming another state than the file beside it, is a fold
  that never replaced the state (it failed, or was killed, before its rename): readers pass over it.

>>> import tempfile
>>> from pmem.graph import ProvenanceGraph
>>> state = Path(tempfile.mkdtemp()) / "state.arrow"
>>> start_journal(state, None)
>>> append_record(state, 1, [["observe", "the budget is $30k", "user", None, None],
...                          ["apply", "accept", "budget", "$30k", "e0", None, None, None]])
>>> journal = read_journal(state, None)
>>> g = ProvenanceGraph()
>>> replay(g, journal.records)
>>> g.head_value("budget"), journal.records[-1].n
('$30k', 1)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

from pmem.graph._persist._sealing import StateFileError, _fsync_directory
from pmem.graph._persist._state import journal_path

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pmem.graph._graph import ProvenanceGraph

#: The journal's format name and version (its first line).
JOURNAL_FORMAT = "pmem-journal"
JOURNAL_VERSION = 1
#: The graph calls a record may hold, with the arguments each carries after its name (in order). A
#: ``registry`` call adds soft-identity keys and decisions made outside the graph's own calls (the write
#: path routes keys through the registry itself).
CALLS: dict[str, tuple[str, ...]] = {
    "observe": ("text", "source", "time", "valid_time"),
    "apply": ("op", "key", "value", "evidence", "depends_on", "alias", "retracts"),
    "undo": ("op_seq", "evidence"),
    "erase": ("evidence_id",),
    "unmerge": ("alias",),
    "set_authority": ("source", "level"),
    "registry": ("keys", "decisions"),
}
_DIGEST_CHARS = 32


@dataclass(frozen=True)
class Record:
    """One commit of the journal: its number and its graph calls (``[name, *arguments]`` each)."""

    n: int
    calls: list[list[Any]]


@dataclass(frozen=True)
class Journal:
    """A journal as read: the state it applies to, its records, and where its last whole line ends."""

    path: Path
    base: str | None  # the digest of the state file the records apply to (None: no state file)
    records: list[Record]
    compacting: str | None  # the digest a save that folded the records was writing, if one began
    end: int  # bytes of whole, verified lines: a torn last line starts here

    @property
    def last(self) -> int:
        """The number of the last record (0: none)."""
        return self.records[-1].n if self.records else 0


def _line(entry: dict[str, Any]) -> bytes:
    body = json.dumps(entry, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()
    return xxhash.xxh3_128(body).hexdigest().encode() + b" " + body + b"\n"


def _parse(line: bytes) -> dict[str, Any] | None:
    """The entry of one line without its newline, or None when the line does not verify."""
    digest, _, body = line.partition(b" ")
    if len(digest) != _DIGEST_CHARS or xxhash.xxh3_128(body).hexdigest().encode() != digest:
        return None
    try:
        entry = json.loads(body)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def _refuse(path: Path, why: str) -> StateFileError:
    return StateFileError(f"{path}: not a readable P-Mem journal: {why}")


def read_journal(state: str | Path, state_digest: str | None) -> Journal | None:
    """The journal beside the state file at ``state`` (None when there is none), checked against the
    state file's digest ``state_digest`` (None: there is no state file).

    Raises:
        StateFileError: a line other than the last does not verify, the records are not numbered 1, 2,
            ..., or the journal names another state than the one at ``state`` (nor the one a save that
            folded it was writing).
    """
    path = journal_path(state)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    lines = data.split(b"\n")
    cut_short = lines.pop() != b""  # bytes after the last newline: a line a crash cut short
    entries: list[dict[str, Any]] = []
    end = 0
    for i, line in enumerate(lines):
        entry = _parse(line)
        if entry is None:
            if i == len(lines) - 1 and not cut_short:  # the last line: a write that never returned
                break
            raise _refuse(path, f"line {i + 1} does not verify (damaged)")
        entries.append(entry)
        end += len(line) + 1
    if not entries:  # empty, or a header cut short: the journal was being started, it holds no record
        return Journal(path, state_digest, [], None, 0)
    header = entries[0]
    if header.get("format") != JOURNAL_FORMAT or header.get("version") != JOURNAL_VERSION:
        raise _refuse(path, f"line 1 is not a {JOURNAL_FORMAT} version {JOURNAL_VERSION} header")
    base = header.get("base")
    records: list[Record] = []
    compacting = None
    for i, entry in enumerate(entries[1:], start=2):
        if "compacting" in entry:
            compacting = str(entry["compacting"])
            continue
        n, calls = entry.get("n"), entry.get("calls")
        if n != len(records) + 1 or not isinstance(calls, list):
            raise _refuse(path, f"line {i} is out of order (record {n!r} after {len(records)})")
        records.append(Record(n, calls))
        compacting = None  # a note with records after it: a fold that never replaced the state
    if base != state_digest and compacting != state_digest:
        raise _refuse(
            path,
            f"it applies to state {base}, but the state file beside it is {state_digest} "
            "(the state was replaced by something else than a save of this journal)",
        )
    return Journal(path, base, records, compacting, end)


def spent(journal: Journal, state_digest: str | None) -> bool:
    """Whether the state file already holds ``journal``'s records: a save that folded them replaced
    the state, and was killed before it removed the journal."""
    return journal.compacting is not None and journal.compacting == state_digest != journal.base


def _append(path: Path, data: bytes, *, create: bool = False) -> None:
    """Append ``data`` to the file at ``path`` whole, fsynced, or not at all: a write that fails part-way
    cuts the file back to its size before, then raises (the journal's lock is held: no one else
    appends meanwhile)."""
    flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags | (os.O_CREAT | os.O_EXCL if create else 0), 0o666)
    try:
        start = os.fstat(fd).st_size
        try:
            # os.write may write part of the bytes and return their count (a disk that fills mid-line):
            # the rest is written until done, or until a write raises
            view, written = memoryview(data), 0
            while written < len(data):
                written += os.write(fd, view[written:])
            os.fsync(fd)
        except BaseException as exc:
            _cut_back(fd, start, path, exc)
            raise
    except BaseException:
        os.close(fd)
        if create:
            path.unlink(missing_ok=True)  # a journal that never got its header is no journal
        raise
    os.close(fd)
    if create:
        _fsync_directory(path.parent)


def _cut_back(fd: int, size: int, path: Path, failure: BaseException) -> None:
    """Cut the file open at ``fd`` back to ``size`` bytes after a failed append. When the cut fails too,
    ``failure`` says so: the torn line stays, and the next open or append cuts it."""
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError as exc:
        failure.add_note(f"{path}: the torn line could not be cut ({exc}); the next open or append cuts it")


def start_journal(state: str | Path, state_digest: str | None) -> None:
    """Create the journal of ``state`` (there must be none), applying to the state file whose digest
    is ``state_digest`` (None: no state file yet)."""
    header = {"format": JOURNAL_FORMAT, "version": JOURNAL_VERSION, "base": state_digest}
    _append(journal_path(state), _line(header), create=True)


def cut_torn_tail(journal: Journal) -> None:
    """Cut a torn last line off ``journal``'s file (a write killed before it returned)."""
    if journal.path.stat().st_size > journal.end:
        os.truncate(journal.path, journal.end)


def append_record(state: str | Path, n: int, calls: Sequence[Sequence[Any]]) -> None:
    """Append record ``n`` (its graph calls) to the journal of ``state``, durably (fsynced)."""
    _append(journal_path(state), _line({"n": n, "calls": [list(c) for c in calls]}))


def mark_compacting(state: str | Path, digest: str) -> None:
    """Note, durably, that a save is about to replace the state with the one of ``digest``."""
    _append(journal_path(state), _line({"compacting": digest}))


def remove_journal(state: str | Path) -> None:
    """Remove the journal of ``state`` (its records are in the state file now)."""
    path = journal_path(state)
    path.unlink(missing_ok=True)
    _fsync_directory(path.parent)


def replay(graph: ProvenanceGraph, records: Sequence[Record]) -> None:
    """Make ``records``' graph calls on ``graph``, in order."""
    for record in records:
        for call in record.calls:
            replay_call(graph, call)


def replay_call(graph: ProvenanceGraph, call: Sequence[Any]) -> None:
    """Make one recorded graph call on ``graph``."""
    name, *args = call
    if name not in CALLS or len(args) != len(CALLS[name]):
        msg = f"journal: unknown call {name!r} with {len(args)} argument(s)"
        raise StateFileError(msg)
    if name == "observe":
        text, source, time, valid_time = args
        graph.observe(text, source, time, valid_time)
    elif name == "apply":
        op, key, value, evidence, depends_on, alias, retracts = args
        graph.apply(op, key, value, evidence, depends_on=depends_on, alias=alias, retracts=retracts)
    elif name == "undo":
        graph.undo(args[0], args[1])
    elif name == "erase":
        graph.erase(args[0])
    elif name == "unmerge":
        graph.unmerge(args[0])
    elif name == "set_authority":
        graph.set_authority(args[0], args[1])
    else:
        graph.registry.extend(args[0], args[1])
