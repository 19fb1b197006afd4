"""Graph state on disk: one Arrow IPC file, lossless, deterministic, checksummed, written atomically.

Layout. The file is an Arrow IPC *file* with schema ``(table: string, payload: large_binary)``: one row
per logical table (evidence, keys, versions, ...), each payload an Arrow IPC *stream* holding that table.
Schema metadata carries the format name, the schema version, the arrival seq and a SHA-256 over all
payloads. Since schema 3 it also carries a SHA-256 of the *whole file* (``file_sha256``), computed with
its own two copies (the schema is written at the start of an Arrow file and again in its footer) set to
zeros: ``load`` finds both copies by reading the file's two length fields, checks the digest over every
byte, and only then lets Arrow parse anything. So no damaged byte ever reaches a parser: whatever the
bytes, a file loads as saved or is refused with :class:`StateFileError`. Any Arrow reader can open it::

    outer = pyarrow.ipc.open_file(path).read_all()
    versions = pyarrow.ipc.open_stream(outer["payload"][2].as_py()).read_all()

Integer columns use -1 for "none" (open interval, no evidence, no predecessor); status and op columns
hold codes whose names are listed in the metadata.
"""

from __future__ import annotations

import gc
import hashlib
import json
import mmap
import os
import secrets
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pmem.graph._codes import ACTIVE, OPS, STATUSES, SUPERSEDED
from pmem.graph._validate import valid_instant

if TYPE_CHECKING:
    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._identity import KeyRegistry

FORMAT = "pmem-state"
#: Written by this code. Version 2 added the premise tables (``apply(..., depends_on=...)``); version 3
#: the whole-file checksum (metadata and Arrow framing included).
SCHEMA_VERSION = 3
#: Read by this code: a table a file's version predates loads empty.
READABLE_VERSIONS = (1, 2, 3)
#: The metadata key of the whole-file digest; its value is the mark, then 64 hex digits.
FILE_DIGEST_KEY = "file_sha256"
_FILE_MARK = b"pmem-file-sha256:"
_DIGEST_HEX = 64
_PLACEHOLDER = b"0" * _DIGEST_HEX
_ARROW_MAGIC = b"ARROW1"
#: The most bytes the schema message or the footer may take (ours take about 2 KiB): a larger length
#: field is damage, refused before anything is allocated for it.
_MAX_FRAME = 1 << 20
_ADDED_IN = {
    "premises": 2,
    "operation_premises": 2,
    "authority": 2,
    "evidence_valid_time": 2,
    "undo": 2,
    "erased": 2,
    "operation_alias": 2,
}

# Typed as the base class: the schema lists below mix these, and pa.schema takes (name, DataType) pairs.
I64: pa.DataType = pa.int64()
I32: pa.DataType = pa.int32()
I8: pa.DataType = pa.int8()
STR: pa.DataType = pa.string()
LSTR: pa.DataType = pa.large_string()
F64: pa.DataType = pa.float64()
LBIN: pa.DataType = pa.large_binary()

# Dense tables: table name -> [(column, graph attribute holding the column, arrow type)]; integer
# columns are typed storage (array("q")) in the graph, the others lists
_TABLES: dict[str, list[tuple[str, str, pa.DataType]]] = {
    "evidence": [("text", "_ev_text", LSTR), ("source", "_ev_source", I32), ("seq", "_ev_seq", I64)],
    "sources": [("source", "_sources", STR)],
    "keys": [("key", "_key_names", STR)],
    "versions": [
        ("key", "_v_key", I32),
        ("value", "_v_value", LSTR),
        ("status", "_v_status", I8),
        ("valid_from", "_v_from", I64),
        ("valid_to", "_v_to", I64),
        ("evidence", "_v_ev", I64),
        ("supersedes", "_v_prev", I64),
    ],
    "supported_by": [("version", "_sb_version", I64), ("evidence", "_sb_ev", I64), ("seq", "_sb_seq", I64)],
    "tombstones": [("version", "_tb_version", I64), ("seq", "_tb_seq", I64), ("evidence", "_tb_ev", I64)],
    "operations": [("code", "_op_code", pa.int16()), ("version", "_op_target", I64)],
}
# Sparse tables: table name -> (graph attribute holding a dict, index column, value columns)
_SPARSE: dict[str, tuple[str, tuple[str, pa.DataType], list[tuple[str, pa.DataType]]]] = {
    "evidence_time": ("_ev_time", ("evidence", I64), [("time", STR)]),
    "evidence_valid_time": ("_ev_valid", ("evidence", I64), [("valid_time", STR)]),
    "undo": ("_undo_of", ("operation", I64), [("undoes", I64)]),
    "operation_alias": ("_op_alias", ("operation", I64), [("alias", STR)]),
    "alternative_of": ("_v_alt", ("version", I64), [("target", I64)]),
    "older": ("_v_older", ("version", I64), [("older", I64)]),
    "extra_support": ("_v_extra_support", ("version", I64), [("count", I64)]),
    "operation_extra": (
        "_op_extra",
        ("operation", I64),
        [("seq", I64), ("key", I64), ("evidence", I64), ("value", LSTR), ("reason", STR)],
    ),
}
_PREMISES = pa.schema([("version", I64), ("key", I64), ("premise_version", I64)])
_OPERATION_PREMISES = pa.schema([("operation", I64), ("key", I64)])
#: source authority: every setting in order; ``after`` is the seq it was made after (-1: the constructor's)
_AUTHORITY = pa.schema([("after", I64), ("source", STR), ("level", I64)])
_IDENTITY = pa.schema(
    [
        ("candidate", STR),
        ("shortlisted", STR),
        ("score", F64),
        ("verdict", STR),
        ("canonical", STR),
    ]
)


class StateFileError(ValueError):
    """A state file that cannot be read back whole: missing, truncated, altered or of another format."""


def _stream(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _digest(payloads: list[pa.Buffer]) -> str:
    digest = hashlib.sha256()
    for p in payloads:
        view = memoryview(p)
        digest.update(view.nbytes.to_bytes(8, "little"))
        digest.update(view)
    return digest.hexdigest()


def _materialized_versions(graph: ProvenanceGraph) -> dict[str, np.ndarray]:
    """Status and valid_to with the lazily closed heads written out (see ProvenanceGraph._closing)."""
    status = np.array(graph._v_status, dtype=np.int8)
    valid_to = np.array(graph._v_to, dtype=np.int64)
    key = np.array(graph._v_key, dtype=np.int32)
    prev = np.array(graph._v_prev, dtype=np.int64)
    start = np.array(graph._v_from, dtype=np.int64)
    n = len(status)
    if n:
        ids = np.arange(n, dtype=np.int64)
        heads = np.array(graph._k_head, dtype=np.int64)
        lazy = (status == ACTIVE) & (heads[key] != ids)
        if lazy.any():
            newest = np.full(n, -1, dtype=np.int64)
            linked = prev >= 0
            np.maximum.at(newest, prev[linked], ids[linked])
            valid_to[lazy] = start[newest[lazy]]
            status[lazy] = SUPERSEDED
    # the converted columns are handed to Arrow as they are (no second conversion)
    return {"_v_status": status, "_v_to": valid_to, "_v_key": key, "_v_prev": prev, "_v_from": start}


def _exported(graph: ProvenanceGraph, attr: str, overrides: dict[str, np.ndarray]) -> Any:
    """A column as handed to Arrow: typed columns are copied (a view would pin their buffer)."""
    if attr in overrides:
        return overrides[attr]
    column = getattr(graph, attr)
    return np.array(column, dtype=np.int64) if isinstance(column, array) else column


def _graph_tables(graph: ProvenanceGraph) -> dict[str, pa.Table]:
    tables: dict[str, pa.Table] = {}
    overrides = _materialized_versions(graph)
    for name, columns in _TABLES.items():
        arrays = [pa.array(_exported(graph, attr, overrides), type=typ) for _, attr, typ in columns]
        tables[name] = pa.table(arrays, names=[c for c, _, _ in columns])
    tables["keys"] = (
        tables["keys"]
        # copies: an Arrow array over the typed column itself would pin its buffer (no append while alive)
        .append_column("head", pa.array(np.array(graph._k_head, dtype=np.int64), type=I64))
        .append_column("newest", pa.array(np.array(graph._k_newest, dtype=np.int64), type=I64))
    )
    for name, (attr, (index, index_type), value_columns) in _SPARSE.items():
        mapping = getattr(graph, attr)
        arrays = [pa.array(list(mapping), type=index_type)]
        if len(value_columns) == 1:
            arrays.append(pa.array(list(mapping.values()), type=value_columns[0][1]))
        else:
            rows = list(mapping.values())
            arrays.extend(pa.array([r[i] for r in rows], type=t) for i, (_, t) in enumerate(value_columns))
        tables[name] = pa.table(arrays, names=[index, *(c for c, _ in value_columns)])
    alt_key, alt_version = [], []
    for kid, alts in graph._open_alts.items():
        alt_key.extend([kid] * len(alts))
        alt_version.extend(alts)
    tables["open_alternatives"] = pa.table(
        [pa.array(alt_key, type=I64), pa.array(alt_version, type=I64)], names=["key", "version"]
    )
    dep_rows = [(v, k, pv) for v, premises in graph._dep.items() for k, pv in premises]
    tables["premises"] = pa.table(
        [pa.array([r[i] for r in dep_rows], type=I64) for i in range(3)], schema=_PREMISES
    )
    op_rows = [(n, k) for n, keys in graph._op_deps.items() for k in keys]
    tables["operation_premises"] = pa.table(
        [pa.array([r[i] for r in op_rows], type=I64) for i in range(2)], schema=_OPERATION_PREMISES
    )
    tables["erased"] = pa.table([pa.array(sorted(graph._erased), type=I64)], names=["evidence"])
    settings = graph._authority_log
    tables["authority"] = pa.table(
        [pa.array([r[i] for r in settings], type=t) for i, t in enumerate(_AUTHORITY.types)],
        schema=_AUTHORITY,
    )
    reg = graph._registry
    decisions = reg.decisions if reg is not None else []
    tables["identity"] = pa.table(
        [
            pa.array([d.candidate for d in decisions], type=STR),
            pa.array([d.shortlisted for d in decisions], type=STR),
            pa.array([d.score for d in decisions], type=F64),
            pa.array([d.verdict for d in decisions], type=STR),
            pa.array([d.canonical for d in decisions], type=STR),
        ],
        schema=_IDENTITY,
    )
    tables["registry_keys"] = pa.table(
        [pa.array(reg.keys if reg is not None else [], type=STR)], names=["key"]
    )
    return tables


def _outer_table(graph: ProvenanceGraph) -> pa.Table:
    """The file's one table: a row per logical table, its payload an Arrow IPC stream."""
    names, payloads = [], []
    tables = _graph_tables(graph)
    for name in list(tables):
        names.append(name)
        payloads.append(_stream(tables.pop(name)))  # each table goes once streamed: peak memory, not bytes
    reg = graph._registry
    meta: dict[bytes | str, bytes | str] = {
        "format": FORMAT,
        "schema_version": str(SCHEMA_VERSION),
        "seq": str(graph._seq),
        "sha256": _digest(payloads),
        "statuses": json.dumps(STATUSES),
        "ops": json.dumps(OPS),
        "registry": json.dumps(reg.config() if reg is not None else None, sort_keys=True),
        "authority": json.dumps(
            {
                "configured": graph._authority is not None,
                "from_start": graph._authority_from_start,
                "default": graph._default_authority,
            },
            sort_keys=True,
        ),
        # zeros here, the digest once the file is written (see _seal)
        FILE_DIGEST_KEY: (_FILE_MARK + _PLACEHOLDER).decode(),
    }
    # Build the binary column straight from the payload buffers: one copy, not one per step.
    offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
    np.cumsum([p.size for p in payloads], out=offsets[1:])
    data = pa.py_buffer(b"".join(memoryview(p) for p in payloads))
    # offsets.data: the array's memoryview (the same memory; numpy declares ndarray.__buffer__ for 3.12+ only)
    column = pa.Array.from_buffers(LBIN, len(payloads), [None, pa.py_buffer(offsets.data), data])
    schema = pa.schema([("table", STR), ("payload", LBIN)], metadata=meta)
    return pa.table([pa.array(names, type=STR), column], schema=schema)


def _write(outer: pa.Table, sink: pa.NativeFile) -> None:
    with pa.ipc.new_file(sink, outer.schema) as writer:
        writer.write_table(outer)


def graph_to_bytes(graph: ProvenanceGraph) -> bytes:
    """Serialize deterministically: the same operations always give the same bytes."""
    sink = pa.BufferOutputStream()
    _write(_outer_table(graph), sink)
    return sealed(sink.getvalue().to_pybytes())


def sealed(data: bytes) -> bytes:
    """``data``, an Arrow file whose metadata holds the zeroed file digest, with the digest written in."""
    out = bytearray(data)
    _write_digest(out)
    return bytes(out)


def _write_digest(buffer: bytearray | mmap.mmap) -> None:
    """Write the digest of an Arrow file (its two slots still zeros) into both slots, in place."""
    slots = _digest_slots(buffer)
    if slots is None:
        msg = f"no {FILE_DIGEST_KEY} placeholder in the file's metadata"
        raise ValueError(msg)
    digest = _file_digest(buffer, slots).encode()
    for at in slots:
        buffer[at : at + _DIGEST_HEX] = digest


# --- the whole-file digest ---------------------------------------------------------------------------

#: What the digest reads: a file's bytes in memory, a view of a mapped buffer, or the mapped file.
_Bytes = bytes | bytearray | memoryview | mmap.mmap


def _frames(data: _Bytes) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The byte ranges of an Arrow file's schema message and footer, read from their length fields
    (None when the bytes are not framed as an Arrow file: too short, a wrong magic, a length out of
    range). Plain integer reads: nothing is parsed."""
    size = len(data)
    head = 8 + 8  # "ARROW1" + 2 padding bytes, then the continuation marker and the message length
    if size < head + 10 or bytes(data[:6]) != _ARROW_MAGIC or bytes(data[size - 6 :]) != _ARROW_MAGIC:
        return None
    message = int.from_bytes(data[12:16], "little", signed=True)
    footer = int.from_bytes(data[size - 10 : size - 6], "little", signed=True)
    if not (0 < message <= _MAX_FRAME and head + message <= size - 10):
        return None
    if not (0 < footer <= _MAX_FRAME and size - 10 - footer >= head + message):
        return None
    return (head, head + message), (size - 10 - footer, size - 10)


def _digest_slots(data: _Bytes) -> tuple[int, int] | None:
    """Where the two copies of the digest's 64 hex digits are: one in the schema message, one in the
    footer, each after the mark and found exactly once there; None when neither frame holds the mark
    (a file written before schema 3).

    Raises:
        ValueError: a frame without the mark, or with it twice (damage).
    """
    frames = _frames(data)
    if frames is None:
        return None
    found = []
    for start, end in frames:
        region = bytes(data[start:end])
        at = region.find(_FILE_MARK)
        if at >= 0 and region.find(_FILE_MARK, at + 1) >= 0:
            msg = "the file digest appears twice in one frame"
            raise ValueError(msg)
        found.append(-1 if at < 0 else start + at + len(_FILE_MARK))
    if found == [-1, -1]:
        return None
    if -1 in found or any(at + _DIGEST_HEX > end for at, (_, end) in zip(found, frames, strict=True)):
        msg = "the file digest is missing from one of its two places"
        raise ValueError(msg)
    return found[0], found[1]


def _file_digest(data: _Bytes, slots: tuple[int, int]) -> str:
    """SHA-256 of ``data`` with both digest slots read as zeros (no copy of the data)."""
    view = memoryview(data)
    digest = hashlib.sha256()
    at = 0
    for slot in sorted(slots):
        digest.update(view[at:slot])
        digest.update(_PLACEHOLDER)
        at = slot + _DIGEST_HEX
    digest.update(view[at:])
    return digest.hexdigest()


def _check_file_digest(data: _Bytes, path: Path) -> bool:
    """Verify a schema-3 file's digest over every byte; False for a file written before schema 3.

    Raises:
        StateFileError: the digest is damaged, missing from one place, or does not match the bytes.
    """
    try:
        slots = _digest_slots(data)
    except ValueError as exc:
        raise _refuse(path, f"{exc} (the file was altered or damaged)") from None
    if slots is None:
        return False
    first, second = (bytes(data[at : at + _DIGEST_HEX]) for at in slots)
    if first != second or not all(c in b"0123456789abcdef" for c in first):
        raise _refuse(path, "its two copies of the file digest differ (the file was altered or damaged)")
    if _file_digest(data, slots) != first.decode():
        raise _refuse(path, "checksum mismatch over the whole file (the file was altered or damaged)")
    return True


def _seal(path: Path) -> None:
    """Write the digest of the file just written at ``path`` into its two slots (zeros until now)."""
    with open(path, "r+b") as f:
        data = mmap.mmap(f.fileno(), 0)
        try:
            _write_digest(data)
            data.flush()
        finally:
            data.close()
        os.fsync(f.fileno())


def _create_aside(path: Path) -> tuple[int, Path]:
    """Create a fresh temporary file next to ``path``, with the permissions any new file gets.

    ``tempfile.mkstemp`` would force mode 0600; a state file is an ordinary file, so it is created with
    0666 and the process umask decides, as for ``open(path, "w")``.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: the new directory entry survives a crash)."""
    if not hasattr(os, "O_DIRECTORY"):  # pragma: no cover - Windows cannot open directories
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_graph(graph: ProvenanceGraph, path: str | Path) -> None:
    path = Path(path)
    parent = path.parent
    # A missing directory is the caller's mistake (a typo in a run directory, say): creating it silently
    # would scatter state files where nobody looks for them.
    if not parent.exists():
        msg = f"save: the directory {parent} of {path.name!r} does not exist (create it first)"
        raise FileNotFoundError(msg)
    if not parent.is_dir():
        msg = f"save: {parent} is not a directory"
        raise NotADirectoryError(msg)
    outer = _outer_table(graph)
    fd, tmp = _create_aside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            _write(outer, pa.PythonFile(f, mode="w"))  # straight to the file: no second copy in memory
            f.flush()
        _seal(tmp)  # the digest over every byte, then fsync
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(parent)


def _refuse(path: Path, why: str) -> StateFileError:
    return StateFileError(f"{path}: not a readable P-Mem state file: {why}")


def read_tables(path: str | Path) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """Read and verify a state file's tables and metadata (raises StateFileError)."""
    path = Path(path)
    try:
        data = pa.memory_map(str(path)).read_buffer() if path.stat().st_size else b""
    except FileNotFoundError:
        raise _refuse(path, "file not found") from None
    except OSError as exc:
        raise _refuse(path, str(exc)) from exc
    return decode_tables(data, path)


def decode_tables(
    data: bytes | pa.Buffer, path: Path | str = "<bytes>"
) -> tuple[dict[str, pa.Table], dict[str, str]]:
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
    if meta.get("format") != FORMAT:
        raise _refuse(path, f"format is {meta.get('format')!r}, expected {FORMAT!r}")
    if outer.schema.names != ["table", "payload"] or outer.schema.types != [STR, LBIN]:
        raise _refuse(path, f"its columns are {outer.schema}, not (table: string, payload: large_binary)")
    version = meta.get("schema_version")
    if version not in {str(v) for v in READABLE_VERSIONS}:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise _refuse(path, f"schema version {version} is not supported (this code reads {readable})")
    if int(version) >= 3 and not sealed:
        raise _refuse(
            path, f"schema version {version} without its file digest (the file was altered or damaged)"
        )
    names = outer.column("table").to_pylist()
    payloads = [scalar.as_buffer() for scalar in outer.column("payload").combine_chunks()]
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
    expected = {*_TABLES, *_SPARSE, "open_alternatives", "identity", "registry_keys", *_ADDED_IN}
    expected -= {name for name, since in _ADDED_IN.items() if int(version) < since}
    missing = expected - tables.keys()
    if missing:
        raise _refuse(path, f"missing tables {sorted(missing)}")
    return tables, meta


def _column_list(table: pa.Table, column: str) -> list[Any]:
    col = table.column(column)
    if pa.types.is_integer(col.type) and col.null_count == 0:
        values: list[Any] = col.to_numpy().tolist()  # a list for a 1-d array (numpy types it Any)
        return values
    return col.to_pylist()


def _typed_column(table: pa.Table, column: str) -> array[int]:
    """An integer column as the graph's typed storage (``array("q")``), copied in one block."""
    col = table.column(column)
    if not pa.types.is_integer(col.type) or col.null_count:
        what = f"{col.null_count} nulls" if pa.types.is_integer(col.type) else f"type {col.type}"
        msg = f"not a readable P-Mem state: column {column!r} must hold integers, found {what}"
        raise StateFileError(msg)
    out = array("q")
    out.frombytes(np.ascontiguousarray(col.to_numpy(), dtype=np.int64).tobytes())
    return out


def load_graph(cls: type[ProvenanceGraph], path: str | Path, registry: KeyRegistry | None) -> ProvenanceGraph:
    tables, meta = read_tables(path)
    # Rebuilding creates a dict entry per key and a string per text and value; pausing the cyclic GC
    # keeps it from re-traversing them on every young-generation collection.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return build_graph(cls, tables, meta, registry, path)
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
    (a wrong type, an unreadable JSON, a bad number) is a :class:`StateFileError` naming the file."""
    try:
        return _build_graph(cls, tables, meta, registry)
    except StateFileError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, OverflowError, pa.ArrowException) as exc:
        what = f"{type(exc).__name__}: {exc}"
        raise _refuse(Path(path), f"its tables or metadata do not make a graph ({what})") from None


def _build_graph(
    cls: type[ProvenanceGraph],
    tables: dict[str, pa.Table],
    meta: dict[str, str],
    registry: KeyRegistry | None,
) -> ProvenanceGraph:
    graph = cls(registry=registry)
    for name, columns in _TABLES.items():
        table = tables[name]
        for column, attr, typ in columns:
            typed = pa.types.is_integer(typ)  # integer columns are typed storage, the others lists
            setattr(graph, attr, _typed_column(table, column) if typed else _column_list(table, column))
    for name, (attr, (index, _), value_columns) in _SPARSE.items():
        if name not in tables:  # a table added after the file's schema version (checked on decoding)
            continue
        table = tables[name]
        keys = _column_list(table, index)
        values = [_column_list(table, c) for c, _ in value_columns]
        rows = values[0] if len(values) == 1 else list(zip(*values, strict=True))
        setattr(graph, attr, dict(zip(keys, rows, strict=True)))
    graph._seq = int(meta["seq"])
    graph._valid_at = {n: valid_instant(text, "load")[1] for n, text in graph._ev_valid.items()}
    graph._source_code = {s: i for i, s in enumerate(graph._sources)}
    graph._k_head = _typed_column(tables["keys"], "head")
    graph._k_newest = _typed_column(tables["keys"], "newest")
    graph._kid = {name: kid for kid, name in enumerate(graph._key_names)}
    alts = tables["open_alternatives"]
    open_alts: dict[int, list[int]] = {}
    for kid, vid in zip(_column_list(alts, "key"), _column_list(alts, "version"), strict=True):
        open_alts.setdefault(kid, []).append(vid)
    graph._open_alts = open_alts
    if "erased" in tables:
        graph._erased = set(_column_list(tables["erased"], "evidence"))
    authority = json.loads(meta.get("authority", "null")) or {
        "configured": False,
        "from_start": False,
        "default": 1,
    }
    graph._default_authority = int(authority["default"])
    graph._authority_from_start = bool(authority["from_start"])
    if authority["configured"]:
        graph._authority = {}
        for after, source, level in zip(
            *(_column_list(tables["authority"], c) for c in _AUTHORITY.names), strict=True
        ):
            graph._authority[source] = level
            graph._authority_log.append((after, source, level))
    if "premises" in tables:
        premises = tables["premises"]
        deps: dict[int, list[tuple[int, int]]] = {}
        for v, k, pv in zip(*(_column_list(premises, c) for c in _PREMISES.names), strict=True):
            deps.setdefault(v, []).append((k, pv))
        graph._dep = {v: tuple(p) for v, p in deps.items()}
        op_premises = tables["operation_premises"]
        op_deps: dict[int, list[int]] = {}
        for n, k in zip(*(_column_list(op_premises, c) for c in _OPERATION_PREMISES.names), strict=True):
            op_deps.setdefault(n, []).append(k)
        graph._op_deps = {n: tuple(k) for n, k in op_deps.items()}
    identity = tables["identity"].to_pylist()
    reg_keys: list[str] = _column_list(tables["registry_keys"], "key")  # a string column: to_pylist()
    reg_config = json.loads(meta.get("registry", "null"))
    if identity or reg_keys or reg_config is not None or registry is not None:
        graph.registry.restore(reg_keys, identity, reg_config)
    return graph
