"""A sharded state: one graph's write log split by key owner, each part a state of its own keys.

A graph's **write log** is every write in arrival order, one row per arrival seq: an observation (``op``
null) or an operation, as a write batch holds them (:data:`WRITE_LOG_SCHEMA`: the write batch's columns,
the evidence's ``valid_time``, and the row's ``seq``). Replaying it into an empty graph
(:func:`apply_log`) gives that graph. An operation's outcome depends only on its key's history and the
evidence it cites, so the log can be split by key: each operation goes to the part owning its key
(:func:`partitions_of`, a stable hash), each observation to every part with an operation citing it (to
the part ``evidence % partitions`` when none does).

A sharded state is a directory::

    STATE/shards.arrow         the index (sealed, see below): partitions, rows, and every file's digest
    STATE/registry/            the soft key-identity registry: a state (directory layout) with no evidence
    STATE/part-0/              part 0 as a state (directory layout): its keys, the evidence they cite
    STATE/part-0/log/*.arrow   part 0's rows of the write log, in segments (sealed Arrow files)
    STATE/part-0/union-versions.arrow   the union's id of each of part 0's versions (version 2)
    STATE/part-1/ ...

It is exactly one graph: **the union** is the parts' log rows merged by ``seq`` (a row found in several
parts is one row), which must be every seq from 1 to the index's ``rows``, replayed into an empty graph
that holds the registry. ``ProvenanceGraph.load(STATE)`` builds it (:func:`load_sharded`); it is
byte-identical to the graph the log was written from.

Each part's tables are readable on their own, with any Arrow engine: ``part-*/versions.arrow`` hold every
version of every key once (the parts' keys are disjoint), with its ``key``, ``value`` and ``status`` as
in the union, so the frontier is one scan of all parts (``polars.scan_ipc("STATE/part-*/versions.arrow")``).
A part's ids, seqs and evidence numbers are its own (the part is a graph of its keys alone); the union's
are those :func:`load_sharded` gives. The union numbers versions in the order they were created, across
parts; since version 2 each part's ``union-versions.arrow`` holds the union's id of each of its versions
(written with the index: :func:`write_index`), so that a reader of one key
(:class:`pmem.graph.StateReader`) does not search every other part for it.

Every file is sealed (a digest over its whole bytes, as :mod:`pmem.graph._persist._state` writes them) and the
index lists each part's and segment's digest, so a missing, altered or foreign file is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._ops._codes import STATUSES
from pmem.graph._persist._mapped import Ints, Maps, mapped_segment, mapped_tables
from pmem.graph._persist._sealing import _refuse
from pmem.graph._persist._state import (
    METADATA,
    _entries,
    _mapped,
    _open_sealed,
    _write_sealed,
    check_agreement,
    load_state,
    read_state,
)
from pmem.graph._read._write_log import (
    REPLAY_ROWS,
    UNION_VERSIONS_FORMAT,
    UNION_VERSIONS_SCHEMA,
    WRITE_LOG_SCHEMA,
    LogSegment,
    apply_log,
    partition_of,
    partitions_of,
    read_segment,
    read_union_versions,
    sealed_file_digest,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._identity._registry import KeyRegistry

#: The format named in a sharded state's index, and the version of its layout.
SHARDED_FORMAT = "pmem-sharded-state"
SHARDED_VERSION = 2
#: The versions of the layout this code reads (1: no union numbering; a reader searches the parts).
SHARDED_VERSIONS = ("1", "2")
#: The index file of a sharded state (its presence makes a directory one).
INDEX = "shards.arrow"
#: The registry's state inside a sharded state.
REGISTRY = "registry"
#: A part's log folder, inside the part.
LOG = "log"
_INDEX_SCHEMA = pa.schema([("name", pa.string()), ("value", pa.string())])
#: A part's union numbering (see the module doc): one int64 ``union_id`` per version of the part.
UNION_VERSIONS = "union-versions"


def part_name(index: int) -> str:
    """The folder of part ``index``: ``part-0``, ``part-1``, ..."""
    return f"part-{index}"


# --- the index ---------------------------------------------------------------------------------------


def write_index(
    root: Path,
    partitions: int,
    rows: int,
    stats: dict[str, int],
    digests: dict[str, str],
    *,
    numbering: bool = True,
) -> str:
    """Write ``root/shards.arrow``: the index of the sharded state in ``root`` (``registry/`` and every
    part written), listing ``digests`` (each part's log segment, as its writer sealed it, by path
    relative to ``root``), the digest of each state's metadata file (read here: a few KiB each), the
    log's ``rows`` and the union's ``stats``; the index's digest. With ``numbering`` (the default), each
    part's union numbering is written first (``part-N/union-versions.arrow``, see the module doc) and
    listed; without, the index is of version 1, which readers number by searching the parts.

    Raises:
        ValueError: a segment in a part's log folder without a digest in ``digests``, or one the other way.
    """
    entries = {
        "format": SHARDED_FORMAT,
        "version": str(SHARDED_VERSION if numbering else 1),
        "partitions": str(partitions),
        "rows": str(rows),
    }
    entries |= {f"stat.{name}": str(value) for name, value in stats.items()}
    metadata = [Path(REGISTRY) / f"{METADATA}.arrow"]
    segments = set()
    for p in range(partitions):
        part = Path(part_name(p))
        metadata.append(part / f"{METADATA}.arrow")
        segments |= {s.relative_to(root).as_posix() for s in (root / part / LOG).glob("*.arrow")}
    if segments != set(digests):
        odd = sorted(segments ^ set(digests))[0]
        msg = f"write_index: {odd} is in the parts' log folders or in the digests given, not in both"
        raise ValueError(msg)
    entries |= {f"file:{f.as_posix()}": sealed_file_digest(root / f) for f in metadata}
    entries |= {f"file:{name}": digests[name] for name in sorted(digests)}
    if numbering:
        entries |= {f"file:{n}": d for n, d in write_union_numbering(root, partitions, digests).items()}
    table = pa.table([pa.array(list(entries)), pa.array(list(entries.values()))], schema=_INDEX_SCHEMA)
    return _write_sealed(root / INDEX, table, {"format": SHARDED_FORMAT})


#: Union seqs numbered per pass of :func:`write_union_numbering`: bounds its memory (a pass holds the
#: versions created in it, 8 bytes each a few times over).
NUMBERING_SEQS = 1 << 20


def write_union_numbering(root: Path, partitions: int, segments: dict[str, str]) -> dict[str, str]:
    """Write each part's union numbering (``part-N/union-versions.arrow``: the union's id of each of its
    versions, see :mod:`pmem.graph.shards`) into the sharded state being built at ``root``, whose parts'
    tables and log ``segments`` (by path from ``root``) are written; their digests, by path.

    The union numbers versions in the order they were created: a pass over :data:`NUMBERING_SEQS`
    union seqs at a time takes each part's versions created in that range (two binary searches, then
    their creating seqs from the part's log), and numbers them all in seq order after the versions of
    the passes before. Memory: one pass's versions, and the mapped pages of one pass (released).
    """
    # the files as their writers just sealed them: hashing them again would double the build's reads
    maps = Maps(trusted=True)
    logs, created, writers = [], [], []
    try:
        for p in range(partitions):
            (versions,) = mapped_tables(root / part_name(p), ("versions",), maps)
            created.append(Ints(versions.column("valid_from")))
            logs.append(Ints(mapped_part_log(root, segments, p, maps).column("seq")))
            name = union_versions_name(p)
            writers.append(LogSegment(root / name, UNION_VERSIONS_SCHEMA, UNION_VERSIONS_FORMAT))
            maps.release()  # the pages read to open them (each batch's header maps a run of pages)
        last = max((log[len(log) - 1] for log in logs if len(log)), default=0)
        numbered = 0
        for lo in range(1, last + 1, NUMBERING_SEQS):
            bounds = np.array([lo, lo + NUMBERING_SEQS], np.int64)
            pieces = []  # each part's versions created in [lo, lo + NUMBERING_SEQS): their union seqs
            for log, made in zip(logs, created, strict=True):
                first, end = made.count_at_most(log.count_below(bounds)).tolist()
                arrivals = made.take(np.arange(first, end, dtype=np.int64))  # in the part's own seqs
                pieces.append(log.take(arrivals - 1))
            seqs = np.concatenate(pieces)
            ids = np.empty(len(seqs), np.int64)
            ids[np.argsort(seqs, kind="stable")] = numbered + np.arange(len(seqs), dtype=np.int64)
            at = 0
            for writer, piece in zip(writers, pieces, strict=True):
                if len(piece):
                    writer.write(pa.table({"union_id": ids[at : at + len(piece)]}))
                at += len(piece)
            numbered += len(seqs)
            maps.release()
        return {union_versions_name(p): writer.close() for p, writer in enumerate(writers)}
    except BaseException:
        for writer in writers:
            writer.abandon()
        raise
    finally:
        maps.release()


def is_sharded(path: str | Path) -> bool:
    """Whether ``path`` is a sharded state (a directory holding ``shards.arrow``)."""
    return (Path(path) / INDEX).is_file()


def read_index(path: str | Path) -> dict[str, str]:
    """A sharded state's index entries, verified: sealed, of this format and version, and each entry
    one :func:`write_index` writes (``partitions`` a positive integer, ``rows`` and every ``stat.``
    a non-negative one, and exactly one digest per file: the registry's and each part's metadata, and
    log segments of those parts only).

    Raises:
        StateFileError: the index is missing, damaged, of another format or version, or holds an entry
            no index holds.
    """
    file = Path(path) / INDEX
    entries = _entries(_open_sealed(_mapped(file), file), file)
    if entries.get("format") != SHARDED_FORMAT:
        raise _refuse(file, f"format is {entries.get('format')!r}, expected {SHARDED_FORMAT!r}")
    if entries.get("version") not in SHARDED_VERSIONS:
        raise _refuse(
            file,
            f"sharded state version {entries.get('version')} (this code reads {', '.join(SHARDED_VERSIONS)})",
        )
    partitions = _count(entries, "partitions", file, least=1)
    _count(entries, "rows", file)
    files = listed_files(entries)
    metadata = {
        f"{REGISTRY}/{METADATA}.arrow",
        *(f"{part_name(p)}/{METADATA}.arrow" for p in range(partitions)),
    }
    if numbered(entries):
        metadata |= {union_versions_name(p) for p in range(partitions)}
    missing = sorted(metadata - files.keys())
    if missing:
        raise _refuse(file, f"it lists no digest of {missing[0]}")
    for name, digest in files.items():
        part = _PART.match(name)
        if part and int(part.group(1)) >= partitions:
            raise _refuse(file, f"it lists {name}, of a part beyond its {partitions} parts")
        if name not in metadata and not _SEGMENT.fullmatch(name):
            raise _refuse(file, f"it lists {name!r}, which is no file of a sharded state")
        if not _DIGEST.fullmatch(digest):
            raise _refuse(file, f"its digest of {name} is {digest[:40]!r}, not a file digest")
    for name in entries:
        if name.startswith(_STAT):
            _count(entries, name, file)
        elif name not in _INDEX_NAMES and not name.startswith(_FILE):
            raise _refuse(file, f"it holds the entry {name!r}, which no index of a sharded state holds")
    return entries


_FILE, _STAT = "file:", "stat."
_INDEX_NAMES = {"format", "version", "partitions", "rows"}
_PART = re.compile(r"part-(0|[1-9][0-9]*)/")
_SEGMENT = re.compile(rf"part-(0|[1-9][0-9]*)/{LOG}/[^/]+\.arrow")
_DIGEST = re.compile("[0-9a-f]{32}")
_COUNT = re.compile("0|[1-9][0-9]{0,17}")


def _count(entries: dict[str, str], name: str, file: Path, least: int = 0) -> int:
    """The index entry ``name``: an integer of at least ``least``, written as :func:`write_index` does."""
    text = entries.get(name)
    if text is None or not _COUNT.fullmatch(text) or int(text) < least:
        raise _refuse(file, f"its {name} is {text!r}, not an integer of at least {least}")
    return int(text)


def listed_files(entries: dict[str, str]) -> dict[str, str]:
    """The files an index (:func:`read_index`'s entries) lists, by path relative to the state, with
    their digests."""
    return {name[len(_FILE) :]: digest for name, digest in entries.items() if name.startswith(_FILE)}


def numbered(entries: dict[str, str]) -> bool:
    """Whether a sharded state's index (:func:`read_index`'s entries) lists each part's union numbering
    (layout version 2 and later)."""
    return entries["version"] != "1"


def mapped_part_log(root: Path, listed: dict[str, str], part: int, maps: Maps) -> pa.Table:
    """Part ``part``'s write log: its segments among ``listed`` (:func:`listed_files`), memory-mapped
    through ``maps`` (unless it trusts them, each checked whole and against its listed digest), in
    arrival order (an empty log when it has none)."""
    mapped = [mapped_segment(root / name, maps, listed[name]) for name in part_segments(listed, part)]
    return pa.concat_tables(mapped) if mapped else WRITE_LOG_SCHEMA.empty_table()


def union_versions_name(part: int) -> str:
    """Part ``part``'s union numbering, by path from the state (listed in an index of version 2)."""
    return f"{part_name(part)}/{UNION_VERSIONS}.arrow"


def part_segments(listed: dict[str, str], part: int) -> list[str]:
    """Part ``part``'s log segments among ``listed`` (:func:`listed_files`), in arrival order (their
    names are their first seq, zero-padded)."""
    return sorted(name for name in listed if name.startswith(f"{part_name(part)}/{LOG}/"))


def owning_part(path: str | Path, key: str) -> Path:
    """The folder of the part of the sharded state at ``path`` that holds ``key`` (see
    :func:`partitions_of`)."""
    return Path(path) / part_name(partition_of(key, int(read_index(path)["partitions"])))


def index_digest(path: str | Path) -> str:
    """The digest of a sharded state's index (which names every other file's): the state's identity."""
    return sealed_file_digest(Path(path) / INDEX)


def union_log(path: str | Path) -> pa.Table:
    """The union of a sharded state's parts' logs: every row once, by ``seq`` (see the module doc).

    Raises:
        StateFileError: a file is missing, damaged or foreign, or the parts' rows are not exactly seqs
            1 to the index's ``rows``, each the same row wherever it is found.
    """
    rows, order = _union(Path(path))
    return rows.take(pa.array(order, pa.int64()))


def union_difference(a: str | Path, b: str | Path) -> str | None:
    """Where the unions of two sharded states differ, found without building either: None when they are
    one graph. Two states hold the same union when they have the same parts, each part's log holds the
    same rows in the same order (however its segments are cut: an ingest resumed after a kill cuts them
    elsewhere) and their registries are the same; their parts' tables, built from those logs, are then
    the same bytes, which is checked too. Memory: one part's log of each state mapped at a time.

    Raises:
        StateFileError: either state is damaged or foreign (its index, a segment, a part's metadata).

    >>> import tempfile
    >>> from pmem.graph import ProvenanceGraph
    >>> union_difference(tempfile.mkdtemp(), tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    pmem.graph._persist._sealing.StateFileError: ...shards.arrow: ...
    """
    roots = (Path(a), Path(b))
    entries = [read_index(root) for root in roots]
    for name in ("partitions", "rows"):
        if entries[0][name] != entries[1][name]:
            return f"their {name}: {entries[0][name]} and {entries[1][name]}"
    stats = [{n: v for n, v in e.items() if n.startswith(_STAT)} for e in entries]
    if stats[0] != stats[1]:
        name = sorted(n for n in stats[0].keys() | stats[1].keys() if stats[0].get(n) != stats[1].get(n))[0]
        return f"their count {name[len(_STAT) :]}: {stats[0].get(name)} and {stats[1].get(name)}"
    listed = [listed_files(e) for e in entries]
    registry = f"{REGISTRY}/{METADATA}.arrow"
    if listed[0][registry] != listed[1][registry]:
        return "their registries"
    for p in range(int(entries[0]["partitions"])):
        logs = [
            pa.concat_tables(
                [read_segment(root / name, files[name]) for name in part_segments(files, p)],
                promote_options="none",
            )
            if part_segments(files, p)
            else None
            for root, files in zip(roots, listed, strict=True)
        ]
        if logs[0] is None or logs[1] is None:
            if logs[0] is not logs[1]:
                return f"part {p}'s log: one of them has none"
            continue
        if logs[0].num_rows != logs[1].num_rows:
            return f"part {p}'s log: {logs[0].num_rows} rows and {logs[1].num_rows}"
        if not logs[0].equals(logs[1]):
            return f"part {p}'s log: the same number of rows, not the same rows"
        metadata = f"{part_name(p)}/{METADATA}.arrow"
        if listed[0][metadata] != listed[1][metadata]:
            return f"part {p}'s tables (the same log built other tables: one of them was altered)"
    return None


def _union(root: Path) -> tuple[pa.Table, NDArray[np.int64]]:
    """Every part's log rows (memory-mapped, in part order) and, in seq order, the row taken for each
    seq of the union: the union is their ``take``, made a chunk at a time by :func:`load_sharded`."""
    entries = read_index(root)
    listed = listed_files(entries)
    partitions = int(entries["partitions"])
    segments = []
    for p in range(partitions):
        log_dir = root / part_name(p) / LOG
        on_disk = {s.relative_to(root).as_posix() for s in log_dir.glob("*.arrow")}
        wanted = part_segments(listed, p)
        if on_disk != set(wanted):
            extra = sorted(on_disk ^ set(wanted))
            raise _refuse(root, f"part {p}'s log segments are not the ones its index lists ({extra[0]})")
        segments += [read_segment(root / name, listed[name]) for name in wanted]
    rows = int(entries["rows"])
    merged = (
        pa.concat_tables(segments)
        if segments
        else pa.table([pa.array([], f.type) for f in WRITE_LOG_SCHEMA], schema=WRITE_LOG_SCHEMA)
    )
    seq = merged.column("seq").to_numpy()
    order = np.argsort(seq, kind="stable")
    by_seq = seq[order]
    first = np.ones(len(by_seq), np.bool_)
    first[1:] = by_seq[1:] != by_seq[:-1]
    if int(first.sum()) != rows or not np.array_equal(by_seq[first], np.arange(1, rows + 1)):
        raise _refuse(
            root, f"its parts' logs do not hold every seq from 1 to {rows} (a part is missing or damaged)"
        )
    again = np.flatnonzero(~first)
    if len(again):
        # a row in several parts (an observation cited from each) must be the same row in each
        copies = merged.take(pa.array(order[again], pa.int64()))
        originals = merged.take(pa.array(order[np.searchsorted(by_seq, by_seq[again])], pa.int64()))
        if not copies.equals(originals):
            raise _refuse(root, "a row found in several parts differs between them (a part is damaged)")
    return merged, order[first]


def load_sharded(
    cls: type[ProvenanceGraph], path: str | Path, registry: KeyRegistry | None = None
) -> ProvenanceGraph:
    """The union of a sharded state (see the module doc): its log replayed into a graph holding its
    registry, once the whole state is verified: every file its index lists is the one listed (the
    registry's and each part's tables through their metadata, the log segments), no part is missing or
    beyond the index's count, each part's metadata agrees with its tables, the union has the counts
    the index gives, and each part's versions are the union's versions of its keys (``key``, ``value``,
    ``status``, open or closed, ``support``, in order): what a scan of ``part-*/versions.arrow`` reads
    is what the union holds.

    Raises:
        StateFileError: a file is missing, damaged or foreign, the union is not whole, or a part or the
            index contradicts the union.
    """
    root = Path(path)
    entries = read_index(root)
    partitions = int(entries["partitions"])
    _check_members(root, partitions)
    holder, version = load_state(cls, root / REGISTRY, registry)
    _check_listed(root, f"{REGISTRY}/{METADATA}.arrow", version, entries)
    if holder.seq:
        raise _refuse(
            root / REGISTRY, f"it holds {holder.seq} arrivals; a sharded state's registry holds none"
        )
    versions = []
    listed = listed_files(entries)
    numberings: list[NDArray[np.int64]] | None = [] if numbered(entries) else None
    for p in range(partitions):
        folder = root / part_name(p)
        tables, meta, version = read_state(folder)  # each table checked against the part's metadata
        _check_listed(root, f"{part_name(p)}/{METADATA}.arrow", version, entries)
        check_agreement(tables, meta, folder)
        versions.append(tables["versions"])
        if numberings is not None:
            name = union_versions_name(p)
            numberings.append(read_union_versions(root / name, listed[name]))
    rows, order = _union(root)
    # one copy of the mapped segments, contiguous: a take from a table of many chunks costs about
    # the whole table each time (10M facts: 21 s of takes against 3 s to combine and 1 s of takes)
    rows = rows.combine_chunks()
    # the holder's registry as loaded: None when the state had none (reading .registry would make one)
    graph = cls(registry=holder.registry_in_use)
    try:
        for start in range(0, len(order), REPLAY_ROWS):  # the union made a chunk at a time
            apply_log(graph, rows.take(pa.array(order[start : start + REPLAY_ROWS], pa.int64())))
    except ValueError as exc:
        raise _refuse(root, f"its union does not replay ({exc})") from exc
    _check_stats(root, graph, entries)
    _check_parts(root, graph, versions, numberings)
    return graph


def _check_members(root: Path, partitions: int) -> None:
    """Refuse a part folder beyond the index's count (its parts are checked one by one after)."""
    for entry in root.iterdir():
        part = re.fullmatch(r"part-(.*)", entry.name)
        if part and not (part.group(1).isdigit() and entry.name == part_name(int(part.group(1)))):
            raise _refuse(entry, "a part folder of no part's name (part-0, part-1, ...)")
        if part and int(part.group(1)) >= partitions:
            raise _refuse(entry, f"a part beyond the {partitions} parts its index lists")


def _check_listed(root: Path, name: str, version: str, entries: dict[str, str]) -> None:
    if entries[f"{_FILE}{name}"] != version:
        raise _refuse(
            root / name,
            "its digest is not the one the sharded state's index lists (a file of another state?)",
        )


def _check_stats(root: Path, graph: ProvenanceGraph, entries: dict[str, str]) -> None:
    """Refuse an index whose counts (``stat.*``) are not the union's."""
    listed = {name[len(_STAT) :]: int(value) for name, value in entries.items() if name.startswith(_STAT)}
    counts = graph.stats()
    if listed != counts:
        name = sorted(set(listed) ^ set(counts) or {n for n in counts if listed[n] != counts[n]})[0]
        raise _refuse(
            root / INDEX,
            f"its count {name} is {listed.get(name)}, but the union's is {counts.get(name)} (the index was altered)",
        )


def _check_parts(
    root: Path, graph: ProvenanceGraph, versions: list[pa.Table], numberings: list[NDArray[np.int64]] | None
) -> None:
    """Refuse parts whose versions are not the union's versions of the keys they own: each part's rows,
    in id order, are the union's versions of its keys in id order (both create a key's versions in
    arrival order, and a part's keys arrive in the union's order), with the same key, value, status,
    openness and support; and each part's union numbering (``numberings``, None for a state of version
    1) is those versions' union ids. Linear: no sort, one pass per part."""
    store = graph.storage
    status, valid_to = store.materialized_status()  # as the union's state holds them (lazy heads closed)
    kid = store.versions.keys()
    support = store.versions.supports()
    values = store.versions.value_array()
    names = store.keys.name_array()
    owner = partitions_of(names, len(versions))[kid]
    for p, table in enumerate(versions):
        where = root / part_name(p) / "versions.arrow"
        rows = np.flatnonzero(owner == p)
        if numberings is not None and not np.array_equal(numberings[p], rows):
            raise _refuse(
                root / union_versions_name(p),
                "its union ids are not the union's ids of the part's versions (a part was altered)",
            )
        theirs = _union_key_ids(table.column("key"), names, where)
        if len(theirs) != len(rows):
            raise _refuse(
                where, f"it holds {len(theirs)} versions, the union {len(rows)} of the keys it owns"
            )
        mine = {
            "key": (theirs, kid[rows]),
            "status": (_status_codes(table.column("status"), where), status[rows]),
            "openness": (
                table.column("valid_to").is_null().to_numpy(zero_copy_only=False),
                valid_to[rows] < 0,
            ),
            "support": (table.column("support").to_numpy(), support[rows]),
        }
        for name, (found, expected) in mine.items():
            apart = np.flatnonzero(found != expected)
            if len(apart):
                key = store.keys.name(int(kid[rows[apart[0]]]))
                raise _refuse(
                    where,
                    f"the {name} of its version {int(apart[0])} (key {key!r}) is not the union's (a part was altered)",
                )
        if not table.column("value").combine_chunks().cast(pa.large_string()).equals(values.take(rows)):
            raise _refuse(where, "a value of its versions is not the union's (a part was altered)")


def _union_key_ids(column: Any, names: pa.Array[Any], where: Path) -> NDArray[np.int64]:
    """The union's key id of each row's key (a dictionary column), refusing a key the union lacks."""
    out = []
    for chunk in column.chunks:
        found: Any = pc.index_in(chunk.dictionary.cast(pa.string()), value_set=names)
        if found.null_count:
            stray = chunk.dictionary[int(np.flatnonzero(found.is_null().to_numpy(zero_copy_only=False))[0])]
            raise _refuse(where, f"it holds key {stray.as_py()!r}, which the union does not")
        ids = found.to_numpy(zero_copy_only=False).astype(np.int64)
        out.append(ids[chunk.indices.to_numpy(zero_copy_only=False).astype(np.int64)])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _status_codes(column: Any, where: Path) -> NDArray[np.int64]:
    """A dictionary column of version statuses as the graph's codes (:data:`STATUSES`)."""
    out = []
    for chunk in column.chunks:
        listed = chunk.dictionary.to_pylist()
        if any(name not in STATUSES for name in listed):
            raise _refuse(where, f"a version status of no known name in {listed}")
        codes = np.array([STATUSES.index(name) for name in listed], np.int64)
        indices = chunk.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        out.append(codes[indices] if len(indices) else np.zeros(0, np.int64))
    return np.concatenate(out) if out else np.zeros(0, np.int64)
