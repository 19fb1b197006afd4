"""Read a saved state without loading it: one key's cell and versions, one evidence node, the frontier as
a stream of Arrow batches, from memory-mapped tables.

:class:`StateReader` opens any state (one file, a directory, a sharded state) in milliseconds and reads
only the rows it is asked for: a key's row of ``keys``, the chain of its versions, the evidence they
cite. Its answers are :class:`~pmem.graph.ProvenanceGraph`'s for the same state loaded whole, ids
included. A sharded state's parts number their versions, evidence and seqs their own way; the reader
gives the union's numbers (:class:`_UnionNumbers`): a version's from its part's union numbering (or, in a
state of layout version 1, by binary searches in the other parts' columns), its seqs and evidence from
its part's log, so that nothing of the size of the state is built.

Every file is checked before Arrow parses a byte of it, when a read first needs it (:class:`Maps`): its
bytes against the digest it is sealed with, and that digest against the one its state lists (a
directory's metadata lists its tables', a sharded state's index its parts' metadata, log segments and
union numberings). A damaged, truncated or foreign file is refused with one ``StateFileError`` naming
it, never parsed, and a file no read needs is never hashed: one key of a sharded state reads and checks
its part's files only. The price: the first read of a part hashes the files it needs (every byte, some
3 GiB/s from the page cache, its pages released as it goes). ``StateReader(path, trusted=True)`` skips
the checks, for a caller that checked the bytes itself: Arrow then validates each row's structure, not
its values, and a damaged file can crash the process or answer wrong.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._graph import ProvenanceGraph
from pmem.graph._ops._types import Cell, Evidence, Operation, ScoredCell, Version
from pmem.graph._ops._why import KeyView, Why, why
from pmem.graph._persist._mapped import Maps
from pmem.graph._persist._sealing import StateFileError, _refuse
from pmem.graph._persist._state import METADATA, journal_path
from pmem.graph._read._reader_parts import _HIDDEN, FRONTIER_SCHEMA, _Part, _ShardPart
from pmem.graph._read._search import PartIndexes, SearchIndexError
from pmem.graph._read._write_log import apply_log, localize, partition_of
from pmem.graph.shards import is_sharded, listed_files, part_name, read_index

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


__all__ = ["StateReader", "read_key_versions"]

_Read = TypeVar("_Read", bound="Callable[..., Any]")


def _releasing(read: _Read) -> _Read:
    """A read that releases the mapped pages it touched when it returns: the kernel maps a file's pages
    in large runs (2 MiB folios here), so a few rows would otherwise keep tens of MiB resident a key."""

    @functools.wraps(read)
    def released(self: StateReader, *args: Any) -> Any:
        try:
            return read(self, *args)
        finally:
            self._maps.release()

    return cast("_Read", released)


class StateReader:
    """A saved state (file, directory or sharded), read a key at a time without loading it.

    Every file is checked before it is read, when a read first needs it: its bytes against the digest it
    is sealed with (every byte hashed once, its pages released as it goes) and that digest against the
    one the state lists for it (a directory's metadata, a sharded state's index). A damaged, truncated
    or foreign file is refused with a ``StateFileError`` naming it, and no answer is given from it. A
    state file is checked whole when opened; a directory's and a sharded state's files one at a time as
    reads need them, so that one key of a sharded state checks its part's files only (and, in a state of
    layout version 1, which has no union numbering, every part's log and versions). What ``load`` checks
    of the state's consistency beyond its files (the parts' tables against the union of their logs) is
    not repeated: an index edited and resealed to name another state's part is ``load``'s to refuse.

    Args:
        path: the state: a file, a directory state, or a sharded state's directory.
        trusted: hand the files' bytes to Arrow unchecked, for a caller that checked them itself (each row
            read is still validated for its structure, not its values: a damaged file can then crash the
            process or answer with another state's values).
        verify: the keyword of the reader before checking became the default: ``verify=False`` is
            ``trusted=True``.

    Raises:
        StateFileError: not a readable state of schema 4 or later, or a state with a journal of later
            writes beside it (the saved file alone is not the state: ``ProvenanceGraph.load`` it); or,
            from the read that first needs it, a damaged, truncated, missing or foreign file.

    Example:
        >>> import tempfile
        >>> from pmem.graph import ProvenanceGraph
        >>> g = ProvenanceGraph()
        >>> _ = g.apply("accept", "budget", "$30k", evidence=g.observe("The budget is $30k."))
        >>> _ = g.apply("accept", "budget", "$50k", evidence=g.observe("Make that $50k."))
        >>> state = tempfile.mkdtemp() + "/state.arrow"
        >>> g.save(state)
        >>> reader = StateReader(state)
        >>> reader.cell("budget").value, [v.value for v in reader.versions("budget")]
        ('$50k', ['$30k', '$50k'])
        >>> reader.evidence("e1").text
        'Make that $50k.'
    """

    def __init__(self, path: str | Path, *, trusted: bool = False, verify: bool | None = None) -> None:
        if verify is not None:
            if trusted and verify:
                msg = "StateReader: trusted=True skips the checks verify=True asks for: give one of them"
                raise ValueError(msg)
            trusted = not verify
        self.path = Path(path)
        if journal_path(self.path).exists():
            msg = (
                f"{self.path}: writes made since it was saved are in {journal_path(self.path).name}, which a "
                "read of the saved file alone would miss; ProvenanceGraph.load replays them (a save folds them in)"
            )
            raise StateFileError(msg)
        self.trusted = trusted
        self._maps = Maps(trusted=trusted)  # every file read, mapped (and checked when first read)
        self._parts: list[_Part] = []
        self._rows: int | None = None  # a sharded state's arrivals (its index's rows)
        self._search: PartIndexes | None = None  # the search index, opened by the first search
        if is_sharded(self.path):
            index = read_index(self.path)  # checked whole (a few KiB): it lists every other file's digest
            listed = listed_files(index)
            shards: list[_ShardPart] = []
            for p in range(int(index["partitions"])):
                shards.append(_ShardPart(self.path, p, index, self._maps, shards))
                metadata = self.path / part_name(p) / f"{METADATA}.arrow"
                # the index is of these parts (each metadata's digest as its frames carry it, a few pages
                # each): an index of another state answers nothing, not even its seq
                if not trusted and self._maps.sealed(metadata) != listed[f"{part_name(p)}/{METADATA}.arrow"]:
                    raise _refuse(
                        metadata,
                        "its digest is not the one the sharded state's index lists (a file of another state?)",
                    )
            self._parts = list(shards)
            self._rows = int(index["rows"])
        else:
            single = _Part(self.path, self._maps)
            _ = single.tables  # a single state is opened now: a path that is no state is refused here
            self._parts.append(single)
        # what opening read (footers, metadata) need not stay resident
        self._maps.release()

    # ------------------------------------------------------------------ reads

    @property
    def seq(self) -> int:
        """The arrival seq of the state's last write."""
        return self._parts[0].tables.seq if self._rows is None else self._rows

    @property
    def parts(self) -> int:
        """The state's parts: a sharded state's partitions, else 1."""
        return len(self._parts)

    def identity(self, part: int) -> str:
        """Which state part ``part`` is: the digests of the files of its keys and versions."""
        return self._parts[part].tables.identity

    def _part_of(self, key: str) -> _Part:
        return self._parts[partition_of(key, len(self._parts))] if len(self._parts) > 1 else self._parts[0]

    @_releasing
    def versions(self, key: str) -> list[Version]:
        """Every version of ``key`` in arrival order (``ProvenanceGraph.versions``); empty when unknown."""
        part = self._part_of(key)
        row = part.tables.key_row(key)
        if row is None:
            return []
        chain = part.tables.chain(part.tables.key_fields(row)["newest"])
        ids = _version_ids(part, chain)
        return [self._version(part, key, v, ids) for v in reversed(chain)]

    @_releasing
    def cell(self, key: str) -> Cell | None:
        """The cell of ``key`` (``ProvenanceGraph.cell``); None when the state never wrote it."""
        part = self._part_of(key)
        tables = part.tables
        row = tables.key_row(key)
        if row is None:
            return None
        fields = tables.key_fields(row)
        head, alternatives = fields["head"], list(fields["alternatives"] or ())
        shown = {head, *alternatives}
        chain = {v["id"]: v for v in tables.chain(fields["newest"])}  # newest first
        listed = [v for v in chain.values() if v["id"] not in shown and v["status"] not in _HIDDEN]
        ids = _version_ids(part, listed)
        history = [self._version(part, key, v, ids) for v in listed]
        if head is None:
            return Cell(key, None, "empty", [], history, 0)
        top = chain.get(head) or tables.version(head)
        status = "contested" if top["status"] == "contested" else "active"
        alts = [chain.get(a) or tables.version(a) for a in alternatives]
        held = (
            status == "contested"
            and tables.has_authority
            and all(tables.rank(a["evidence"]) < tables.rank(top["evidence"]) for a in alts)
        )
        return Cell(
            key=key,
            value=top["value"],
            status=status,
            alternatives=[a["value"] for a in alts],
            history=history,
            support=top["support"],
            stale=self._stale(part, top),
            held=held,
        )

    def _stale(self, part: _Part, head: dict[str, Any], visiting: set[int] | None = None) -> tuple[str, ...]:
        """Premise keys of ``head`` whose head changed since it was asserted, or are stale themselves
        (``ProvenanceGraph``'s rule; premises are within one state)."""
        keys, versions = head["premise_keys"], head["premise_versions"]
        if not keys:
            return ()
        tables = part.tables
        visiting = visiting or set()
        visiting.add(head["key_id"])
        out = []
        for pk, pv in zip(keys, versions, strict=True):
            premise = tables.key_fields(pk)
            now = premise["head"]
            if now != pv or (
                pk not in visiting and now is not None and self._stale(part, tables.version(now), visiting)
            ):
                out.append(premise["key"])
        visiting.discard(head["key_id"])
        return tuple(out)

    def _version(self, part: _Part, key: str, row: dict[str, Any], ids: dict[int, int]) -> Version:
        """A version row as the graph's :class:`Version`; ``ids``: the graph's id of each local version
        id the row names (:func:`_version_ids`)."""
        numbers = part.numbers

        def version_id(local: int | None) -> str | None:
            return None if local is None else f"v{ids[local]}"

        return Version(
            id=f"v{ids[row['id']]}",
            key=key,
            value=row["value"],
            status=row["status"],
            valid_from=numbers.seq(row["valid_from"]),
            valid_to=None if row["valid_to"] is None else numbers.seq(row["valid_to"]),
            evidence=None if row["evidence"] is None else f"e{part.union_evidence(row['evidence'])}",
            support=row["support"],
            supersedes=version_id(row["supersedes"]),
            alternative_of=version_id(row["alternative_of"]),
        )

    @_releasing
    def operations(self, key: str) -> list[Operation]:
        """The operations on ``key`` in log order, failed preconditions included
        (``ProvenanceGraph.operations(key)``); empty when the state never wrote it."""
        part = self._part_of(key)
        row = part.tables.key_row(key)
        if row is None:
            return []
        numbers = part.numbers
        ops = part.tables.operations_of(row)
        ids = numbers.versions(op["version"] for op in ops)
        return [
            Operation(
                seq=numbers.seq(op["seq"]),
                requested=op["requested"],
                op=op["op"],
                key=key,
                value=op["value"],
                evidence=None if op["evidence"] is None else f"e{part.union_evidence(op['evidence'])}",
                applied=op["applied"],
                reason=op["reason"],
                version=None if op["version"] is None else f"v{ids[op['version']]}",
                retracts=op["retracts"],
            )
            for op in ops
        ]

    def cell_as_of(self, key: str, seq: int) -> Cell | None:
        """The cell of ``key`` as it was at arrival ``seq`` (``ProvenanceGraph.as_of(seq).cell(key)``), for
        a sharded state: the key's rows of its part's write log up to ``seq`` (its operations and the
        observations they cite) replayed alone, since an operation's outcome depends only on its key's
        history and the evidence it cites, and numbered as the union's. None when the key had no write by
        then.

        Raises:
            ValueError: ``seq`` is not a non-negative integer, or the state is not sharded (a single state
                keeps no write log: ``ProvenanceGraph.load(path).as_of(seq)`` replays it).
        """
        return self.as_of(seq).cell(key)

    def as_of(self, seq: int) -> KeyView:
        """The state's keys as they were at arrival ``seq``, for a sharded state: what
        ``ProvenanceGraph.as_of(seq)`` gives for a key's ``cell``, ``versions``, ``operations`` and their
        ``evidence``, each key replayed alone from its rows of its part's log (see :meth:`cell_as_of`).

        Raises:
            ValueError: ``seq`` is not a non-negative integer, or the state is not sharded.
        """
        if type(seq) is not int or seq < 0:
            msg = f"as_of: seq must be a non-negative integer, got {seq!r}"
            raise ValueError(msg)
        if self._rows is None:
            msg = (
                f"{self.path}: a view as of a seq reads a sharded state's write log; a single state keeps none "
                f"(ProvenanceGraph.load({str(self.path)!r}).as_of({seq}) replays it)"
            )
            raise ValueError(msg)
        return _AsOf(self, seq)

    @_releasing
    def _key_as_of(self, key: str, seq: int) -> tuple[ProvenanceGraph, _Renumbering] | None:
        """``key``'s rows of its part's log up to ``seq`` replayed into a graph of their own, and how that
        graph's numbers become the union's; None when the key had no write by then."""
        part = self._part_of(key)
        assert part.log is not None  # as_of refused a single state
        row = part.tables.key_row(key)
        if row is None:
            return None
        numbers, tables = part.numbers, part.tables
        ops = [op for op in tables.operations_of(row) if numbers.seq(op["seq"]) <= seq]
        if not ops:
            return None
        # log rows are arrivals in the part's own seqs, less one: the operations, and what they cite
        wanted = {op["seq"] - 1 for op in ops}
        wanted |= {part.evidence_seqs[op["evidence"]] - 1 for op in ops if op["evidence"] is not None}
        # one row at a time: a take over the log's many mapped chunks would read it all
        rows = pa.concat_tables([part.log.slice(i, 1) for i in sorted(wanted)]).combine_chunks()
        scratch = ProvenanceGraph()
        apply_log(scratch, localize(rows, 0))
        chain = tables.chain(tables.key_fields(row)["newest"])
        created = sorted(
            numbers.versions(v["id"] for v in chain if numbers.seq(v["valid_from"]) <= seq).values()
        )
        seqs: list[int] = rows.column("seq").to_numpy().tolist()
        observed = pc.is_null(rows.column("op")).to_numpy(zero_copy_only=False)
        evidence = [int(e) for e in np.asarray(rows.column("evidence").to_pylist(), object)[observed]]
        return scratch, _Renumbering(seqs, evidence, created)

    def why(self, key: str) -> Why | None:
        """Why ``key`` holds what it holds (:func:`pmem.graph.why`): the evidence behind its current
        value and the operations on it; None when the state never wrote it."""
        return why(self, key)

    @_releasing
    def evidence(self, evidence_id: str) -> Evidence:
        """The evidence node ``evidence_id`` (``ProvenanceGraph.evidence``).

        Raises:
            KeyError: no such evidence.
        """
        number = _number(evidence_id, "e")
        if number is None:
            msg = f"unknown evidence id {evidence_id!r}"
            raise KeyError(msg)
        found = self._find_evidence(number)
        if found is None:
            msg = f"unknown evidence id {evidence_id!r}"
            raise KeyError(msg)
        part, local = found
        row = part.tables.evidence_row(local)
        return Evidence(
            evidence_id,
            row["text"],
            row["source"],
            row["time"],
            part.numbers.seq(row["seq"]),
            row["valid_time"],
        )

    def _find_evidence(self, number: int) -> tuple[_Part, int] | None:
        """The part holding the graph's evidence ``number`` and its number there (a part's evidence is
        a subsequence of the union's, in order: one binary search each, the likeliest part first)."""
        parts = len(self._parts)
        for p in [number % parts, *(q for q in range(parts) if q != number % parts)]:
            part = self._parts[p]
            lo, hi = 0, len(part.evidence_seqs)
            while lo < hi:
                mid = (lo + hi) // 2
                if part.union_evidence(mid) < number:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < len(part.evidence_seqs) and part.union_evidence(lo) == number:
                return part, lo
        return None

    def frontier_batches(
        self, batch_rows: int = 65_536, *, part: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Every non-empty cell's key, value, status and support (:data:`FRONTIER_SCHEMA`), in batches of
        at most ``batch_rows`` keys: a sharded state's part by part (each in the order its keys arrived),
        so that memory holds one batch whatever the state's size; with ``part``, that part's only.
        ``ProvenanceGraph.frontier_items`` is the same set of (key, value), sorted."""
        for one in self._parts if part is None else [self._parts[part]]:
            tables = one.tables
            for start in range(0, tables.keys.num_rows, batch_rows):
                keys = tables.keys.slice(start, batch_rows)
                heads = keys.column("head")
                held = pc.is_valid(heads)
                keys, heads = keys.filter(held), heads.filter(held)
                if not keys.num_rows:
                    continue
                tops = tables.versions.select(["value", "status", "support"]).take(heads)
                statuses = tops.column("status").combine_chunks().cast(pa.string())
                contested = pc.equal(statuses, pa.scalar("contested"))
                yield pa.RecordBatch.from_arrays(
                    [
                        keys.column("key").combine_chunks(),
                        tops.column("value").combine_chunks(),
                        pc.if_else(contested, "contested", "active"),
                        tops.column("support").combine_chunks(),
                    ],
                    schema=FRONTIER_SCHEMA,
                )
                self._maps.release()  # the batch is copied out: its pages need not stay resident

    def search(self, query: str, k: int = 12, *, min_score: float | None = None) -> list[ScoredCell]:
        """The cells whose current values are nearest ``query``, best first: at most ``k``, each with its
        score, the cosine similarity of the ``hashing`` embedder's vectors of the query and of the cell's
        ``key: value``, rounded to 6 decimals (ties: the smaller key first). A cell sharing no n-gram with the query, or scoring
        below ``min_score``, is not found. Reads the state's search index (:mod:`pmem.graph._read._search`,
        built by ``pmem index STATE``) a batch of a part at a time.

        Raises:
            SearchIndexError: the state has no index, or one of another state or of this one before it
                changed.
        """
        if k <= 0:
            return []
        if self._search is None:
            self._search = PartIndexes(self.path, [self.identity(p) for p in range(self.parts)], self._maps)
        hits = self._search.search(query, k, min_score, self._maps.release)
        out = []
        for key, score in hits:
            cell = self.cell(key)
            if cell is None or cell.value is None:  # the index is checked to be of this state: never
                msg = f"{self.path}: the search index names {key!r}, which holds no value here: rebuild it"
                raise SearchIndexError(msg)
            out.append(ScoredCell.of(cell, score))
        return out


def read_key_versions(path: str | Path, key: str) -> list[Version]:
    """The versions of ``key`` in a saved state (any layout), read from its memory-mapped tables:
    ``StateReader(path).versions(key)``, each file it reads checked first. Only the key names and the
    key's rows are read (and the files that hold them hashed: of a sharded state, the key's part's), so
    this takes milliseconds on a state of millions of operations where ``load`` takes seconds. An
    unknown key gives an empty list.

    Raises:
        StateFileError: not a readable state, or a file the read needs is damaged, truncated, missing
            or of another state.

    >>> import tempfile
    >>> from pmem.graph import ProvenanceGraph
    >>> g = ProvenanceGraph()
    >>> _ = g.apply("accept", "budget", "$30k"), g.apply("accept", "budget", "$50k")
    >>> state = tempfile.mkdtemp() + "/state.arrow"
    >>> g.save(state)
    >>> [(v.value, v.status) for v in read_key_versions(state, "budget")]
    [('$30k', 'superseded'), ('$50k', 'active')]
    """
    return StateReader(path).versions(key)


@dataclass(frozen=True)
class _Renumbering:
    """A graph replayed from some rows of a write log, numbered as the log's whole graph numbers it: its
    arrival ``n`` is ``seqs[n - 1]``, its evidence ``i`` is ``evidence[i]``, its version ``j`` is
    ``versions[j]``."""

    seqs: list[int]
    evidence: list[int]
    versions: list[int]

    def version_id(self, vid: str | None) -> str | None:
        return None if vid is None else f"v{self.versions[int(vid[1:])]}"

    def evidence_id(self, eid: str | None) -> str | None:
        return None if eid is None else f"e{self.evidence[int(eid[1:])]}"

    def version(self, v: Version) -> Version:
        return dataclasses.replace(
            v,
            id=f"v{self.versions[int(v.id[1:])]}",
            valid_from=self.seqs[v.valid_from - 1],
            valid_to=None if v.valid_to is None else self.seqs[v.valid_to - 1],
            evidence=self.evidence_id(v.evidence),
            supersedes=self.version_id(v.supersedes),
            alternative_of=self.version_id(v.alternative_of),
        )

    def cell(self, cell: Cell) -> Cell:
        return dataclasses.replace(cell, history=[self.version(v) for v in cell.history])

    def operation(self, op: Operation) -> Operation:
        return dataclasses.replace(
            op,
            seq=self.seqs[op.seq - 1],
            evidence=self.evidence_id(op.evidence),
            version=self.version_id(op.version),
        )


class _AsOf:
    """A sharded state's keys as at an arrival (:meth:`StateReader.as_of`), each replayed when first
    read and kept."""

    def __init__(self, reader: StateReader, seq: int) -> None:
        self._reader = reader
        self._seq = seq
        # each key read: its replayed graph and numbering (None: no write by then)
        self._keys: dict[str, tuple[ProvenanceGraph, _Renumbering] | None] = {}

    def _replayed(self, key: str) -> tuple[ProvenanceGraph, _Renumbering] | None:
        if key not in self._keys:
            self._keys[key] = self._reader._key_as_of(key, self._seq)
        return self._keys[key]

    def cell(self, key: str) -> Cell | None:
        found = self._replayed(key)
        if found is None:
            return None
        cell = found[0].cell(key)
        return None if cell is None else found[1].cell(cell)

    def versions(self, key: str) -> list[Version]:
        found = self._replayed(key)
        return [] if found is None else [found[1].version(v) for v in found[0].versions(key)]

    def operations(self, key: str) -> list[Operation]:
        found = self._replayed(key)
        return [] if found is None else [found[1].operation(op) for op in found[0].operations(key)]

    def evidence(self, evidence_id: str) -> Evidence:
        return self._reader.evidence(evidence_id)


def _version_ids(part: _Part, rows: list[dict[str, Any]]) -> dict[int, int]:
    """The graph's id of every local version id ``rows`` (version rows) name, found at once."""
    return part.numbers.versions(
        v for row in rows for v in (row["id"], row["supersedes"], row["alternative_of"])
    )


def _number(text: str, prefix: str) -> int | None:
    if not isinstance(text, str) or not text.startswith(prefix) or not text[1:].isdigit():
        return None
    return int(text[1:])
