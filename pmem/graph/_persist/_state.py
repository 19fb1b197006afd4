"""Graph state on disk: the flat tables of :mod:`pmem.graph._persist._tables`, lossless, deterministic, checksummed,
written atomically, in one of two layouts holding the same tables.

- **file** (``save(path)``, the default; ``to_bytes``): one Arrow IPC file with schema ``(table: string,
  payload: large_binary)``, one row per table, each payload that table as an Arrow IPC stream (8-byte
  aligned: a memory-mapped file is read without copying). Polars reads a table of it with nothing else::

      outer = polars.read_ipc(path)
      versions = polars.read_ipc_stream(outer.filter(polars.col("table") == "versions")["payload"][0])

- **directory** (``save(path, layout="directory")``): ``path/<table>.arrow``, one Arrow IPC file per table,
  which ``polars.scan_ipc`` scans lazily (``scan_ipc("runs/*/versions.arrow")`` scans many states at once).

Both hold the ``metadata`` table (``name``, ``value``): format, schema version, the arrival seq, the code
tables and the registry and authority settings. Every file carries an XXH3-128 digest of its *whole*
bytes in its schema metadata (``file_xxh3_128``), computed with its own two copies (an Arrow file holds
its schema at its start and in its footer) set to zeros: ``load`` finds both copies by reading the file's
two length fields, checks the digest over every byte, and only then lets Arrow parse anything. In the
directory layout the metadata table also lists every table file's digest, so the files of two states
cannot be mixed. Whatever the bytes, a state loads as saved or is refused with :class:`StateFileError`.

The digest guards against damage (a flipped bit, a truncated or mixed file), not against a deliberate
edit: it sits in the file beside the data, so whoever can edit the file can write a matching one, whatever
the hash. XXH3-128 (``xxhash``) checks a state at memory speed (about 16 GB/s here, SHA-256 1.2-1.6 GB/s).

Files of schema 4 (the same flat tables, sealed with SHA-256: ``file_sha256``) still load, and so do files
of schemas 1 to 3 (nested tables of the graph's storage columns; 3 sealed with SHA-256,
:mod:`pmem.graph._persist._state_legacy`).
"""

from __future__ import annotations

import gc
import io
import itertools
import os
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pyarrow as pa
import xxhash

from pmem.graph._persist import _state_legacy, _tables
from pmem.graph._persist._consistency import (
    Disagreement,
    check_arrivals,
    check_metadata,
    graph_arrivals,
    parse_seq,
    table_arrivals,
)
from pmem.graph._persist._sealing import (
    _FILE_MARK,
    _PLACEHOLDER,
    FILE_DIGEST_KEY,
    TABLE_DIGEST_PREFIX,
    StateFileError,
    _Algorithm,
    _algorithm_of,
    _Bytes,
    _check_file_digest,
    _create_aside,
    _digest,
    _fsync_directory,
    _refuse,
    _sealed_digest,
    _Sealing,
    _write_digest,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._identity._registry import KeyRegistry

FORMAT = "pmem-state"
#: Written by this code. Version 2 added the premise tables (``apply(..., depends_on=...)``); version 3
#: the whole-file checksum (metadata and Arrow framing included); version 4 the flat tables; version 5
#: the XXH3-128 file digest in place of SHA-256 (the same tables); version 6 what each retraction
#: retracts (the operations' ``retracts`` and ``retracts_erased``: a replay without the retracted
#: statement leaves the retraction a noop, issue 41).
SCHEMA_VERSION = 6
#: Read by this code: versions 1 to 3 through :mod:`pmem.graph._persist._state_legacy`.
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
#: The first schema of the flat tables (:mod:`pmem.graph._persist._tables`): 4 and 5 hold the same tables, 6
#: two more columns of ``operations``.
FLAT_SINCE = 4
#: The two layouts of a state: one file, or a directory of one Arrow file per table.
Layout = Literal["file", "directory"]
LAYOUTS: tuple[Layout, ...] = ("file", "directory")
#: The table of metadata entries (``name``, ``value``), in both layouts.
METADATA = "metadata"
_META_SCHEMA = pa.schema([("name", pa.string()), ("value", pa.string())])
STR: pa.DataType = pa.string()
LBIN: pa.DataType = pa.large_binary()


# --- writing -------------------------------------------------------------------------------------------


def _sealed_schema(schema: pa.Schema, meta: dict[str, str]) -> pa.Schema:
    """``schema`` with ``meta`` and the zeroed file digest (written in once the file is, see _Sealing)."""
    return schema.with_metadata({**meta, FILE_DIGEST_KEY: (_FILE_MARK + _PLACEHOLDER).decode()})


def _metadata_table(graph: ProvenanceGraph, more: dict[str, str] | None = None) -> pa.Table:
    """The ``metadata`` table: format, schema version, the graph's entries, then ``more``."""
    entries = {"format": FORMAT, "schema_version": str(SCHEMA_VERSION), **_tables.graph_metadata(graph)}
    entries.update(more or {})
    return pa.table([pa.array(list(entries)), pa.array(list(entries.values()))], schema=_META_SCHEMA)


def _write_stream(table: pa.Table, sink: pa.NativeFile) -> None:
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def _all_tables(graph: ProvenanceGraph) -> Iterator[tuple[str, pa.Table]]:
    """Every table of the graph's state, ``metadata`` first, each made when asked for."""
    yield METADATA, _metadata_table(graph)
    yield from _tables.iter_graph_tables(graph)


_CONTAINER = _sealed_schema(
    pa.schema([("table", STR), ("payload", LBIN)]), {"format": FORMAT, "schema_version": str(SCHEMA_VERSION)}
)


def _row(name: str, data: pa.Buffer) -> pa.RecordBatch:
    """One row of the file layout: ``name`` and ``data`` as its binary value, as it is."""
    offsets = np.array([0, data.size], dtype=np.int64)
    # offsets.data: the array's memoryview (the same memory; numpy declares ndarray.__buffer__ for 3.12+ only)
    payload = pa.Array.from_buffers(LBIN, 1, [None, pa.py_buffer(offsets.data), data])
    return pa.RecordBatch.from_arrays([pa.array([name], type=STR), payload], schema=_CONTAINER)


def _stream_size(table: pa.Table) -> int:
    """The bytes of ``table`` as an Arrow IPC stream (a dry run: nothing is copied)."""
    dry = pa.MockOutputStream()
    _write_stream(table, dry)
    return dry.size()


def _payload(name: str, table: pa.Table) -> pa.RecordBatch:
    """One row of the file layout: ``table`` as an Arrow IPC stream, written once into a buffer of its
    exact size, which becomes the binary value as it is (what :func:`_write_container` writes without
    holding the stream)."""
    data = pa.allocate_buffer(_stream_size(table))
    _write_stream(table, pa.FixedSizeBufferWriter(data))
    return _row(name, data)


class _Writes(io.RawIOBase):
    """A raw stream whose writes go to ``write`` (counted)."""

    def __init__(self, write: Callable[[Any], object]) -> None:
        super().__init__()
        self._write, self.count = write, 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._write(data)
        size = memoryview(data).nbytes
        self.count += size
        return size


class _Splice(_Writes):
    """What Arrow writes the file layout through (to ``write``): a row's payload is a stand-in buffer of
    the table's stream size whose bytes are never read; when Arrow writes it (as the one buffer it is),
    the table is streamed to ``write`` in its place. The file's bytes are those of the row holding the
    stream itself (:func:`_payload`), and no table's stream is ever held whole in memory: a save of a
    272 MiB state copies 272 MiB less."""

    def __init__(self, write: Callable[[Any], object]) -> None:
        super().__init__(write)
        self._pending: tuple[pa.Buffer, pa.Table] | None = None
        self.spliced = 0

    def row(self, name: str, table: pa.Table) -> pa.RecordBatch:
        """The row to write for ``table``: its stand-in, streamed in place when Arrow writes it."""
        if self._pending is not None:
            msg = "the previous table's payload was never written"
            raise RuntimeError(msg)
        stand_in = pa.allocate_buffer(_stream_size(table))  # never written to nor read: no page touched
        self._pending = stand_in, table
        return _row(name, stand_in)

    def write(self, data: Any) -> int:
        pending = self._pending
        if pending is None or not isinstance(data, pa.Buffer) or data.address != pending[0].address:
            return super().write(data)
        if data.size != pending[0].size:
            msg = f"Arrow wrote {data.size} bytes of a {pending[0].size}-byte payload"
            raise RuntimeError(msg)
        self._pending = None
        stream = _Writes(self._write)
        _write_stream(pending[1], pa.PythonFile(stream, mode="w"))
        if stream.count != data.size:
            msg = f"a table streamed to {stream.count} bytes, sized at {data.size}"
            raise RuntimeError(msg)
        self.count += data.size
        self.spliced += 1
        return data.size


def _write_container(graph: ProvenanceGraph, write: Callable[[Any], object]) -> None:
    """The file layout, to ``write``: one record batch per table, each made, streamed and written in
    turn, so a save holds one table at a time besides the graph (and never its stream: see _Splice)."""
    splice = _Splice(write)
    tables = 0
    with pa.ipc.new_file(pa.PythonFile(splice, mode="w"), _CONTAINER) as writer:
        for name, table in _all_tables(graph):
            writer.write_batch(splice.row(name, table))
            tables += 1
    if splice.spliced != tables:  # Arrow wrote a payload otherwise than as its buffer: refuse the file
        msg = f"{tables - splice.spliced} of {tables} tables were not written into the state"
        raise RuntimeError(msg)


def _write(outer: pa.Table, sink: pa.NativeFile) -> None:
    with pa.ipc.new_file(sink, outer.schema) as writer:
        writer.write_table(outer)


def graph_to_bytes(graph: ProvenanceGraph) -> bytes:
    """The file layout's bytes, deterministic: the same operations always give the same bytes."""
    out = bytearray()
    _write_container(graph, out.extend)
    _write_digest(out)
    return bytes(out)


def _checked_parent(path: Path) -> None:
    # A missing directory is the caller's mistake (a typo in a run directory, say): creating it silently
    # would scatter state files where nobody looks for them.
    parent = path.parent
    if not parent.exists():
        msg = f"save: the directory {parent} of {path.name!r} does not exist (create it first)"
        raise FileNotFoundError(msg)
    if not parent.is_dir():
        msg = f"save: {parent} is not a directory"
        raise NotADirectoryError(msg)


def check_save_target(path: str | Path, layout: Layout = "file") -> Path:
    """``path`` as a place :func:`save_graph` may write ``layout`` to (its parent a directory; a file
    state not over a directory); raises what :func:`save_graph` would, before anything is written."""
    if layout not in LAYOUTS:
        msg = f"save: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}"
        raise ValueError(msg)
    path = Path(path)
    _checked_parent(path)
    if layout == "file" and path.is_dir():
        msg = f"save: {path} is a directory (save(path, layout='directory') writes a state there)"
        raise IsADirectoryError(msg)
    return path


def save_graph(
    graph: ProvenanceGraph,
    path: str | Path,
    layout: Layout = "file",
    *,
    before_replace: Callable[[str], None] | None = None,
) -> str:
    """Write ``graph``'s state to ``path`` in ``layout``, atomically (written aside, then renamed); the
    version written (:func:`state_version` of ``path`` now). ``before_replace`` (file layout) is called
    with that version once the file is written aside and synced, before it replaces what is at ``path``."""
    path = check_save_target(path, layout)
    if layout == "directory":
        return _save_directory(graph, path)
    return _save_file(path, lambda sealing: _write_container(graph, sealing.write), before_replace)


def save_state_bytes(path: Path, data: bytes) -> str:
    """Write a state file's bytes (:func:`graph_to_bytes`: sealed already) to ``path``, atomically; its
    version."""
    fd, tmp = _create_aside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return version_of(data)


def _save_file(
    path: Path, write: Callable[[_Sealing], object], before_replace: Callable[[str], None] | None
) -> str:
    """Write a sealed state file aside with ``write``, then rename it onto ``path``; its digest."""
    fd, tmp = _create_aside(path)
    try:
        with os.fdopen(fd, "w+b") as f:
            sealing = _Sealing(f)
            write(sealing)  # straight to the file, a table at a time
            digest = sealing.seal()  # the digest of every byte, written into its two slots; fsync
        if before_replace is not None:
            before_replace(digest)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return digest


def _save_directory(graph: ProvenanceGraph, path: Path) -> str:
    """One sealed Arrow file per table in a fresh directory beside ``path``, then renamed onto it; the
    digest of its metadata file (which lists every table file's: the state's version).

    A directory already at ``path`` must be a state (it holds ``metadata.arrow``): it is moved aside and
    removed once the new one is in place, so a reader sees the old state or the new one, never a mix.
    """
    if path.exists() and not (path.is_dir() and (path / f"{METADATA}.arrow").is_file()):
        what = "a file" if path.is_file() else "a directory that holds no state"
        msg = f"save: {path} is {what}; a directory state replaces only a directory state"
        raise FileExistsError(msg)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    tmp.mkdir()
    try:
        digests: dict[str, str] = {}
        for name, table in _tables.iter_graph_tables(graph):
            digests[TABLE_DIGEST_PREFIX + name] = _write_sealed(tmp / f"{name}.arrow", table, {"table": name})
        version = _write_sealed(
            tmp / f"{METADATA}.arrow", _metadata_table(graph, digests), {"table": METADATA}
        )
        _fsync_directory(tmp)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.{secrets.token_hex(8)}.old")
            path.rename(old)
        tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_directory(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return version


def _write_sealed(path: Path, table: pa.Table, meta: dict[str, str]) -> str:
    """Write ``table`` to ``path`` as a sealed Arrow file (fsynced); its digest."""
    with open(path, "w+b") as f:
        sealing = _Sealing(f)
        _write(table.replace_schema_metadata(_sealed_schema(table.schema, meta).metadata), sealing.sink())
        return sealing.seal()


# --- reading -------------------------------------------------------------------------------------------


def _mapped(path: Path) -> pa.Buffer | bytes:
    """The bytes of the file at ``path``, memory-mapped (raises StateFileError when unreadable)."""
    try:
        return pa.memory_map(str(path)).read_buffer() if path.stat().st_size else b""
    except FileNotFoundError:
        raise _refuse(path, "file not found") from None
    except OSError as exc:
        raise _refuse(path, str(exc)) from exc


def read_tables(path: str | Path) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """Read and verify a state's tables and metadata, either layout, any readable schema.

    Raises:
        StateFileError: the state is missing, damaged, altered or of another format.
    """
    tables, meta, _ = read_state(path)
    return tables, meta


def read_state(path: str | Path) -> tuple[dict[str, pa.Table], dict[str, str], str]:
    """:func:`read_tables`, and the version of the state read (see :func:`state_version`)."""
    path = Path(path)
    if path.is_dir():
        return _read_directory(path)
    data = _mapped(path)
    return (*decode_tables(data, path), version_of(data))


def version_of(data: _Bytes | pa.Buffer) -> str:
    """What identifies a state file's bytes: the digest it is sealed with (read from its frames, not
    computed: it covers every byte), or for a file that carries none, the XXH3-128 of its bytes."""
    try:
        return _sealed_digest(data)
    except ValueError:
        return str(xxhash.xxh3_128(memoryview(data)).hexdigest())


def state_version(path: str | Path) -> str | None:
    """The version of the state at ``path`` now (None when nothing is there): a file's digest
    (:func:`version_of`), a directory state's metadata file's (which lists every table file's digest).
    An identity, not a check: nothing is verified, and a file that is no state has a version too."""
    path = Path(path)
    if path.is_dir():
        path = path / f"{METADATA}.arrow"
    try:
        return version_of(_mapped(path))
    except StateFileError:  # nothing there (or unreadable: then what is there is no state we wrote)
        return None if not path.exists() else "unreadable"


def _open_sealed(data: pa.Buffer | bytes, path: Path) -> pa.Table:
    """The table of a sealed Arrow file, verified over every byte before parsing."""
    return _open_sealed_with(data, path)[0]


def _open_sealed_with(data: pa.Buffer | bytes, path: Path) -> tuple[pa.Table, _Algorithm]:
    """:func:`_open_sealed`, and the algorithm the file is sealed with."""
    algorithm = _check_file_digest(memoryview(data), path)
    if algorithm is None:
        raise _refuse(path, "it carries no file digest (the file was altered or damaged)")
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    try:
        return pa.ipc.open_file(buffer).read_all(), algorithm
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise _refuse(path, f"truncated or damaged Arrow file ({type(exc).__name__}: {exc})") from exc


def _check_algorithm(algorithm: _Algorithm, version: int, path: Path) -> None:
    """Refuse a file sealed with another digest than its schema's."""
    if algorithm is not _algorithm_of(version):
        raise _refuse(
            path,
            f"schema version {version} sealed with {algorithm.key}, not {_algorithm_of(version).key} "
            "(the file was altered or damaged)",
        )


def _entries(table: pa.Table, path: Path) -> dict[str, str]:
    if not table.schema.equals(_META_SCHEMA, check_metadata=False):
        raise _refuse(path, f"its metadata table has columns {table.schema.names}, not (name, value)")
    names, values = table.column("name").to_pylist(), table.column("value").to_pylist()
    if None in names or None in values or len(set(names)) != len(names):
        raise _refuse(path, "its metadata table has a missing or repeated entry")
    return {str(name): str(value) for name, value in zip(names, values, strict=True)}


def _check_format(meta: dict[str, str], path: Path) -> int:
    """The schema version ``meta`` declares, checked readable."""
    if meta.get("format") != FORMAT:
        raise _refuse(path, f"format is {meta.get('format')!r}, expected {FORMAT!r}")
    version = meta.get("schema_version")
    if version not in {str(v) for v in READABLE_VERSIONS}:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise _refuse(path, f"schema version {version} is not supported (this code reads {readable})")
    return int(version)


def _read_directory(path: Path) -> tuple[dict[str, pa.Table], dict[str, str], str]:
    meta_path = path / f"{METADATA}.arrow"
    if not meta_path.is_file():
        raise _refuse(path, f"a directory without {METADATA}.arrow")
    meta_data = _mapped(meta_path)
    table, algorithm = _open_sealed_with(meta_data, meta_path)
    meta = _entries(table, meta_path)
    version = _check_format(meta, meta_path)
    if version < FLAT_SINCE:
        raise _refuse(path, f"a directory state of schema {version}")
    _check_algorithm(algorithm, version, meta_path)
    tables: dict[str, pa.Table] = {}
    for name in _tables.TABLES:
        file = path / f"{name}.arrow"
        data = _mapped(file)
        table = _open_sealed(data, file)
        if meta.get(f"{algorithm.key}.{name}") != _sealed_digest(data):
            raise _refuse(
                file, "its digest is not the one the state's metadata lists (a file of another state?)"
            )
        tables[name] = table.replace_schema_metadata(None)
    return tables, meta, _sealed_digest(meta_data)


def decode_tables(
    data: bytes | pa.Buffer, path: Path | str = "<bytes>"
) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """The tables and metadata of a state in the file layout (``to_bytes``), any readable schema."""
    path = Path(path)
    sealed = _check_file_digest(memoryview(data), path)  # every byte, before any parser sees one
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    try:
        reader = pa.ipc.open_file(buffer)
        outer = reader.read_all()
        if not sealed:
            # a file of schema 1 or 2: its framing and metadata are not checksummed. Its arrays are
            # checked whole before use, and its metadata against the schema's second copy (an Arrow
            # file holds the schema twice: at its start, read here, and in its footer, read above)
            outer.validate(full=True)
            if pa.ipc.open_stream(buffer.slice(8)).schema.metadata != outer.schema.metadata:
                raise _refuse(path, "its two copies of the metadata differ (the file was altered or damaged)")
        raw_meta = outer.schema.metadata or {}
        meta = {k.decode(): v.decode() for k, v in raw_meta.items()}
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError, UnicodeDecodeError) as exc:
        raise _refuse(path, f"truncated or damaged Arrow file ({type(exc).__name__}: {exc})") from exc
    version = _check_format(meta, path)
    if outer.schema.names != ["table", "payload"] or outer.schema.types != [STR, LBIN]:
        raise _refuse(path, f"its columns are {outer.schema}, not (table: string, payload: large_binary)")
    if version >= 3 and not sealed:
        raise _refuse(
            path, f"schema version {version} without its file digest (the file was altered or damaged)"
        )
    if sealed is not None:
        _check_algorithm(sealed, version, path)
    names = outer.column("table").to_pylist()
    try:
        payloads = _payloads(outer)
    except ValueError as exc:  # offsets that do not fit their buffer: a damaged file of schema 1 or 2
        raise _refuse(path, f"its payload offsets are damaged ({exc})") from exc
    if not sealed and _digest(payloads) != meta.get("sha256"):  # the file digest covers the payloads
        raise _refuse(path, "checksum mismatch (the file was altered or damaged)")
    tables: dict[str, pa.Table] = {}
    for name, payload in zip(names, payloads, strict=True):
        if not isinstance(name, str):
            raise _refuse(path, f"table name {name!r} is not a string")
        try:
            tables[name] = pa.ipc.open_stream(payload).read_all()
        except pa.ArrowInvalid as exc:
            raise _refuse(path, f"table {name!r} is damaged ({exc})") from exc
    if version < FLAT_SINCE:
        missing = _state_legacy.missing_tables(tables, version)
    else:
        missing = {METADATA, *_tables.TABLES} - tables.keys()
    if missing:
        raise _refuse(path, f"missing tables {sorted(missing)}")
    if version >= FLAT_SINCE:
        inner = _entries(tables.pop(METADATA), path)
        # the file's own metadata (read to choose the digest and the reader) and the metadata table
        # name the format twice: a file whose two disagree was not written by P-Mem
        clash = sorted(name for name in inner.keys() & meta.keys() if inner[name] != meta[name])
        if clash:
            raise _refuse(path, f"its metadata table and its file's metadata disagree on {', '.join(clash)}")
        meta = {**meta, **inner}
    return tables, meta


def _payloads(outer: pa.Table) -> list[pa.Buffer]:
    """The payloads of a file-layout table, as slices of its buffer (a memory-mapped file is not copied)."""
    out: list[pa.Buffer] = []
    for chunk in outer.column("payload").chunks:
        # slices of the data buffer at the offsets: a scalar's as_buffer() would copy each payload
        _, offsets, data = cast("list[pa.Buffer]", chunk.buffers())
        # only the offsets the chunk uses: a buffer may be padded to any length
        at = np.frombuffer(memoryview(offsets), dtype=np.int64, count=chunk.offset + len(chunk) + 1)
        at = at[chunk.offset :]
        out.extend(data.slice(int(a), int(b - a)) for a, b in itertools.pairwise(at.tolist()))
    return out


def load_state(
    cls: type[ProvenanceGraph], path: str | Path, registry: KeyRegistry | None
) -> tuple[ProvenanceGraph, str]:
    """The graph of the state at ``path`` (either layout), and the version read (:func:`state_version`)."""
    tables, meta, version = read_state(path)
    # Rebuilding creates a dict entry per key and a string per text and value; pausing the cyclic GC
    # keeps it from re-traversing them on every young-generation collection.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return build_graph(cls, tables, meta, registry, path), version
    finally:
        if enabled:
            gc.enable()


def build_graph(
    cls: type[ProvenanceGraph],
    tables: dict[str, pa.Table],
    meta: dict[str, str],
    registry: KeyRegistry | None,
    path: Path | str = "<bytes>",
) -> ProvenanceGraph:
    """The graph of decoded ``tables`` and ``meta``; a table or metadata value the graph cannot hold
    (a wrong type, an unreadable JSON, a bad number), or metadata its tables contradict
    (:mod:`pmem.graph._persist._consistency`), is a :class:`StateFileError` naming the file."""
    try:
        if int(meta["schema_version"]) >= FLAT_SINCE:
            check_agreement(tables, meta, path)
            return _tables.build_graph(cls, tables, meta, registry)
        check_metadata(meta, int(meta["schema_version"]), _registry_empty(tables))
        graph = _state_legacy.build_legacy_graph(cls, tables, meta, registry)
        check_arrivals(parse_seq(meta), *graph_arrivals(graph))
        return graph
    except StateFileError:
        raise
    except Disagreement as exc:
        raise _refuse(_metadata_file(path), f"{exc} (the state was altered)") from None
    except (ValueError, KeyError, IndexError, TypeError, OverflowError, pa.ArrowException) as exc:
        what = f"{type(exc).__name__}: {exc}"
        raise _refuse(Path(path), f"its tables or metadata do not make a graph ({what})") from None


def check_agreement(tables: dict[str, pa.Table], meta: dict[str, str], path: Path | str = "<bytes>") -> None:
    """Refuse a state of the flat tables whose metadata its tables contradict, or which holds what no
    graph saves (:mod:`pmem.graph._persist._consistency`), before a graph is built from it.

    Raises:
        StateFileError: naming ``path`` and the entry.
    """
    try:
        check_metadata(meta, int(meta["schema_version"]), _registry_empty(tables))
        check_arrivals(parse_seq(meta), *table_arrivals(tables))
    except Disagreement as exc:
        raise _refuse(_metadata_file(path), f"{exc} (the state was altered)") from None
    except (ValueError, KeyError) as exc:
        raise _refuse(
            Path(path), f"its tables or metadata do not make a graph ({type(exc).__name__}: {exc})"
        ) from None


def _metadata_file(path: Path | str) -> Path:
    """The file holding a state's metadata: the state file, or a directory state's ``metadata.arrow``."""
    path = Path(path)
    return path / f"{METADATA}.arrow" if path.is_dir() else path


def _registry_empty(tables: dict[str, pa.Table]) -> bool:
    return not (tables["identity"].num_rows or tables["registry_keys"].num_rows)


# --- one key, without loading the graph ------------------------------------------------------------------


def journal_path(state: str | Path) -> Path:
    """The journal of the state file at ``state`` (``pmem.graph._persist._journal``): ``<state>.journal`` beside it."""
    state = Path(state)
    return state.with_name(state.name + ".journal")
