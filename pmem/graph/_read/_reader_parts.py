"""The parts of a state as :class:`~pmem.graph.StateReader` opens them: a part's mapped tables (keys,
versions, evidence, operations) with their indexes, and how a part's local numbers (seqs, version ids,
evidence) become the state's, for a plain state (one part, numbered as it is) or a sharded one (each
part's write log numbered into the union)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._persist._mapped import Ints, Maps, locate, mapped_segment, mapped_table, mapped_tables
from pmem.graph._persist._sealing import _algorithm_of, _refuse
from pmem.graph._persist._state import FLAT_SINCE, METADATA, _check_algorithm, _check_format, _entries
from pmem.graph._read._write_log import UNION_VERSIONS_SCHEMA
from pmem.graph.shards import LOG, listed_files, mapped_part_log, numbered, part_name, union_versions_name

if TYPE_CHECKING:
    from collections.abc import Iterable


#: The tables a reader maps (the others are never needed for the reads it offers).
_TABLES = ("keys", "versions", "evidence", "operations")
#: Version statuses a cell's history leaves out.
_HIDDEN = ("undone", "erased")
#: The frontier's columns.
_STRING: pa.DataType = pa.string()
FRONTIER_SCHEMA = pa.schema(
    [("key", _STRING), ("value", pa.large_string()), ("status", _STRING), ("support", pa.int64())]
)


class _Tables:
    """One saved state's tables (file or directory layout), memory-mapped; reads in the state's own ids.

    A state file is mapped (and checked) whole when opened. A directory's metadata is read when opened
    (``listed``: the digest a sharded state's index lists for it), and each table file's digest, as its
    frames carry it, is matched with the one the metadata lists (a few pages a file: a file of another
    state is refused before any answer); each table file is checked against that digest, every byte,
    when a read first needs it (:meth:`Maps.buffer`).
    """

    def __init__(self, path: Path, maps: Maps, listed: str | None = None) -> None:
        self.path = path
        self._maps = maps  # the state's files, each mapped (and checked) when a read first needs it
        self._tables: dict[str, pa.Table] = {}  # each table read so far, by name
        self._listed: dict[str, str | None] = {}  # a directory's: each table file's digest, as listed
        if path.is_dir():
            file = path / f"{METADATA}.arrow"
            self.meta = _entries(mapped_table(file, maps, listed, "the sharded state's index"), file)
            version = _check_format(self.meta, file)
            if version < FLAT_SINCE:
                raise _refuse(path, f"a directory state of schema {version}")
            algorithm = maps.algorithm(file)
            if algorithm is not None:
                _check_algorithm(algorithm, version, file)
            key = _algorithm_of(version).key
            self._listed = {name: self.meta.get(f"{key}.{name}") for name in _TABLES}
            for name, digest in self._listed.items() if not maps.trusted else ():
                table = path / f"{name}.arrow"
                if digest is None:
                    raise _refuse(table, "the state's metadata lists no digest of it")
                if maps.sealed(table) != digest:
                    raise _refuse(
                        table,
                        "its digest is not the one the state's metadata lists (a file of another state?)",
                    )
        else:
            *tables, meta = mapped_tables(path, (*_TABLES, METADATA), maps)
            self._tables = dict(zip(_TABLES, tables, strict=True))
            self.meta = _entries(meta, path)
        authority = json.loads(self.meta.get("authority", "null") or "null")
        # the level each source ranks at now (the last setting wins), when authority is configured
        self._authority: dict[str, int] | None = None
        self._default_level = 0
        if authority and authority.get("configured"):
            self._default_level = int(authority["default"])
            self._authority = {str(source): int(level) for _, source, level in authority["settings"]}

    def _table(self, name: str) -> pa.Table:
        """Table ``name`` of a directory, mapped (and checked) when first asked for."""
        if name not in self._tables:
            self._tables[name] = mapped_table(self.path / f"{name}.arrow", self._maps, self._listed[name])
        return self._tables[name]

    @property
    def keys(self) -> pa.Table:
        return self._table("keys")

    @property
    def versions(self) -> pa.Table:
        return self._table("versions")

    @property
    def evidence(self) -> pa.Table:
        return self._table("evidence")

    @property
    def operations(self) -> pa.Table:
        return self._table("operations")

    @functools.cached_property
    def _key_names(self) -> pa.ChunkedArray[Any]:
        return self.keys.column("key")

    @functools.cached_property
    def _version_rows(self) -> pa.Table:
        # a version's row without its key's name: that column is a dictionary of every key, which a row
        # of it would validate and decode whole (milliseconds a row at a million keys); the reader knows
        # the key it reads
        return self.versions.drop_columns(["key"])

    @functools.cached_property
    def _operation_rows(self) -> pa.Table:
        return self.operations.drop_columns(["key", "alias", "premise_keys"])

    @property
    def seq(self) -> int:
        return int(self.meta["seq"])

    @property
    def identity(self) -> str:
        """Which state this is, as a search index built from it records it: the digests its keys' and
        versions' files carry (the state file's, for the file layout); a directory's as its metadata
        lists them (what a read of those files checks them against), so that naming the state hashes
        neither file."""
        if not self.path.is_dir():
            return self._maps.sealed(self.path)
        return "+".join(
            self._listed[name] or self._maps.sealed(self.path / f"{name}.arrow")
            for name in ("keys", "versions")
        )

    def key_row(self, key: str) -> int | None:
        """The row of ``key`` in ``keys`` (its id), None when the state never wrote it."""
        at = pc.index(self._key_names, pa.scalar(key, type=self._key_names.type)).as_py()
        return None if at < 0 else int(at)

    def key_fields(self, row: int) -> dict[str, Any]:
        return _row(self.keys, row, self.path, self._maps.trusted)

    def version(self, vid: int) -> dict[str, Any]:
        return _row(self._version_rows, vid, self.path, self._maps.trusted)

    def chain(self, newest: int | None) -> list[dict[str, Any]]:
        """A key's versions newest first, along ``previous`` (its arrival order)."""
        out: list[dict[str, Any]] = []
        seen: set[int] = set()
        while newest is not None:
            if newest in seen:
                raise _refuse(self.path, f"the versions of a key loop at v{newest}")
            seen.add(newest)
            row = self.version(newest)
            out.append(row)
            newest = row["previous"]
        return out

    def operations_of(self, kid: int) -> list[dict[str, Any]]:
        """Key ``kid``'s operation rows, in log order (one pass over the ``key_id`` column)."""
        rows: list[dict[str, Any]] = []
        at = 0
        for chunk in self.operations.column("key_id").chunks:
            found = np.flatnonzero(chunk.to_numpy(zero_copy_only=True) == kid)
            rows += (_row(self._operation_rows, at + int(i), self.path, self._maps.trusted) for i in found)
            at += len(chunk)
        return rows

    def evidence_row(self, eid: int) -> dict[str, Any]:
        return _row(self.evidence, eid, self.path, self._maps.trusted)

    def rank(self, evidence: int | None) -> int:
        """The authority level of ``evidence``'s source (the default without evidence or authority)."""
        if self._authority is None or evidence is None:
            return self._default_level
        source = self.evidence.column("source")[evidence].as_py()
        return self._authority.get(source, self._default_level)

    @property
    def has_authority(self) -> bool:
        return self._authority is not None


def _row(table: pa.Table, row: int, path: Path, trusted: bool) -> dict[str, Any]:
    """One row of a mapped table; of a ``trusted`` file, validated first (its bytes were not checked
    against its digest: a checked file's are the bytes Arrow wrote, and validating them again is a
    tenth of a millisecond a row)."""
    if not 0 <= row < table.num_rows:
        raise _refuse(path, f"it refers to row {row} of a table of {table.num_rows} rows (a damaged state?)")
    one = table.slice(row, 1)
    try:
        if trusted:
            one.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise _refuse(path, f"row {row} of a table is damaged ({exc})") from exc
    found: dict[str, Any] = one.to_pylist()[0]
    return found


class _Numbers:
    """A single state's numbers: its seqs and version ids are the graph's."""

    def seq(self, local: int) -> int:
        return local

    def versions(self, local: Iterable[int | None]) -> dict[int, int]:
        """The graph's id of each local version id (None skipped)."""
        return {v: v for v in local if v is not None}


class _UnionNumbers(_Numbers):
    """The union's numbers of a sharded state's part's seqs and versions (see :mod:`pmem.graph.shards`).

    A part's arrival ``n`` is row ``n - 1`` of its write log, whose ``seq`` is the union's. The union
    numbers versions in the order they were created, across parts: version ``v`` of part ``p``, created
    at union seq ``s``, is preceded by the ``v`` versions of ``p`` before it and by every other part's
    versions created before ``s``. A state of layout version 2 lists each part's union numbering; in one
    of version 1, a part creates its versions in its arrival order, so each count is two binary searches:
    in the other part's log seqs, then in its versions' ``valid_from`` (the creating arrival, in the
    part's seqs), which opens every part.
    """

    def __init__(self, part: _ShardPart, parts: list[_ShardPart]) -> None:
        self._part = part
        self._parts = parts  # every part of the state (searched without a union numbering)

    def seq(self, local: int) -> int:
        return self._part.log_seqs[local - 1]

    def versions(self, local: Iterable[int | None]) -> dict[int, int]:
        # all of a read's versions at once: per other part, one search of its log and one of its
        # versions for them all (ascending: a key's versions are created in arrival order)
        wanted = sorted({v for v in local if v is not None})
        if not wanted:
            return {}
        numbering = self._part.numbering
        if numbering is not None:
            return dict(zip(wanted, numbering.take(np.array(wanted, np.int64)).tolist(), strict=True))
        created = self._part.created
        union_seqs = np.array([self.seq(created[v]) for v in wanted], np.int64)
        before = np.array(wanted, np.int64)
        for other in self._parts:
            if other is not self._part:
                before += other.created.count_at_most(other.log_seqs.count_below(union_seqs))
        return dict(zip(wanted, before.tolist(), strict=True))


class _Part:
    """A state the reader reads keys from, opened when a read first needs it (and each of its tables
    then), and how its numbers become the graph's: a single state's are the graph's."""

    def __init__(self, path: Path, maps: Maps, listed: str | None = None) -> None:
        self.path = path
        self._maps = maps
        self._listed = listed  # the digest of its metadata file the state lists (a sharded state's part)

    @functools.cached_property
    def tables(self) -> _Tables:
        return _Tables(self.path, self._maps, self._listed)

    @functools.cached_property
    def numbers(self) -> _Numbers:
        return _Numbers()

    @functools.cached_property
    def evidence_seqs(self) -> Ints:
        """Each evidence node's arrival, in the state's own seqs."""
        return Ints(self.tables.evidence.column("seq"))

    @property
    def log(self) -> pa.Table | None:
        """A sharded part's write log, mapped (a single state keeps none)."""
        return None

    def union_evidence(self, local: int) -> int:
        return local


class _ShardPart(_Part):
    """Part ``index`` of the sharded state at ``root`` (``index``: its entries, :func:`read_index`): its
    tables, its write log and (layout version 2) its union numbering, each file checked against the
    digest the index lists for it when a read first needs it. With the numbering, a part is read alone;
    without, numbering a version searches every part of ``parts``."""

    def __init__(
        self, root: Path, index: int, entries: dict[str, str], maps: Maps, parts: list[_ShardPart]
    ) -> None:
        self._root = root
        self.index = index
        self._files = listed_files(entries)
        self._numbered = numbered(entries)
        self._parts = parts
        super().__init__(
            root / part_name(index), maps, self._files.get(f"{part_name(index)}/{METADATA}.arrow")
        )

    @functools.cached_property
    def log(self) -> pa.Table:
        """The part's write log, its segments mapped in arrival order."""
        log = mapped_part_log(self._root, self._files, self.index, self._maps)
        if log.num_rows != self.tables.seq:  # a part's arrival n is its log's row n - 1
            raise _refuse(
                self.path / LOG,
                f"its segments hold {log.num_rows} rows, not the {self.tables.seq} arrivals of the part's "
                "metadata (a part of another state?)",
            )
        return log

    @functools.cached_property
    def log_seqs(self) -> Ints:
        """The union's seq of each of the part's arrivals, in its arrival order."""
        return Ints(self.log.column("seq"))

    @functools.cached_property
    def log_evidence(self) -> _NullableInts:
        """The union's number of each arrival's evidence (an observation's: the node it is observed as)."""
        return _NullableInts(self.log.column("evidence"))

    @functools.cached_property
    def created(self) -> Ints:
        """Each of the part's versions' creating arrival (its own seq), by version id."""
        return Ints(self.tables.versions.column("valid_from"))

    @functools.cached_property
    def numbering(self) -> Ints | None:
        """The union's id of each of the part's versions (layout version 2), else None."""
        if not self._numbered:
            return None
        name = union_versions_name(self.index)
        file = self._root / name
        table = mapped_segment(file, self._maps, self._files[name])
        same = table.schema.equals(UNION_VERSIONS_SCHEMA, check_metadata=False)
        if not same or table.num_rows != self.tables.versions.num_rows:
            raise _refuse(
                file, f"not a union numbering of the part's {self.tables.versions.num_rows} versions"
            )
        return Ints(table.column("union_id"))

    @functools.cached_property
    def numbers(self) -> _Numbers:
        return _UnionNumbers(self, self._parts)

    def union_evidence(self, local: int) -> int:
        return self.log_evidence[self.evidence_seqs[local] - 1]


class _NullableInts:
    """An int64 column with nulls (a write log's ``evidence``), read one element at a time."""

    def __init__(self, column: pa.ChunkedArray[Any]) -> None:
        self._column = column
        lengths = [len(c) for c in column.chunks]
        self._starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)

    def __getitem__(self, row: int) -> int:
        chunk, at = locate(self._starts, row)
        value = self._column.chunk(chunk)[at].as_py()
        if value is None:
            msg = f"row {row} of a write log's evidence column is null"
            raise IndexError(msg)
        return int(value)
