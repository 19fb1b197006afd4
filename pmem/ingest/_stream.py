r"""Read a user's stream (JSONL, Parquet or Arrow IPC) in batches of normalized rows.

A row is one of two kinds:

- a **text row** (no ``key``): ``text`` (required), ``source`` (default ``"user"``), ``time``
  (observation time), ``valid_time`` and ``id`` (optional). It goes through P-Mem's write path
  (extraction, soft identity, annotation).
- a **fact row** (``key`` set): an already-extracted fact, written without any model: ``key`` (a key
  the graph admits, taken as given: no soft identity), ``op`` (one of :data:`FACT_OPS`, default
  ``accept``), ``value`` (a string or a number; required by the ops of :data:`VALUE_OPS`), and the
  text row's optional fields. Its ``text``, when given, is the fact's evidence; without it the evidence
  is the fact rendered as ``key: value`` (an ``accept``) or ``op key: value`` (another op; ``op key``
  without a value): see :func:`fact_evidence_texts`. A row with ``op`` or ``value`` but no ``key`` is a
  bad row.

Other fields are ignored. Every batch comes out in :data:`EVENT_SCHEMA`, whatever the input format and
kind, with ``row`` the row's 1-based number in the input (its line number for JSONL), so a bad row can
always be named and a reader can resume at a :class:`Position`; ``text`` is always set (a fact row's
evidence) and ``key`` is set exactly on fact rows.

The input is never read whole: JSONL is read in blocks of whole lines, Parquet by row group, Arrow IPC by
record batch. A JSONL block is first parsed by Arrow's JSON reader and checked column-wise; a block that
fails (a bad row, a number where a string is expected, invalid UTF-8, ...) is parsed again line by line
with :func:`json.loads`, which finds the exact row and reason and accepts numbers for ``time``/``id``/
``value``. Fact rows cost no model call, so while a stream holds only fact rows its batches grow (see
``fact_batch_rows`` in :func:`read_stream`): they are applied column-wise, and bigger batches cost less
per row.

>>> import tempfile
>>> from pathlib import Path
>>> tmp = tempfile.TemporaryDirectory()
>>> path = Path(tmp.name) / "stream.jsonl"
>>> _ = path.write_text('{"text": "I moved to Lyon", "time": 1709251200}\n\n{"text": "hi", "source": "chat"}\n')
>>> for batch in read_stream(path):
...     print(batch.events.select(["row", "source", "time"]).to_pylist(), batch.end)
[{'row': 1, 'source': 'user', 'time': '1709251200'}, {'row': 3, 'source': 'chat', 'time': None}] Position(row=3, offset=...)
>>> _ = path.write_text('{"text": "ok"}\n{"text": ""}\n')
>>> list(read_stream(path))
Traceback (most recent call last):
...
pmem.ingest._stream.StreamError: .../stream.jsonl: line 2: field 'text' is empty (only whitespace)
>>> [batch.rejects.to_pylist() for batch in read_stream(path, skip_bad=True)]
[[{'row': 2, 'reason': "field 'text' is empty (only whitespace)", 'raw': '{"text": ""}'}]]
>>> _ = path.write_text('{"key": "mug_1.location", "value": "shelf 2"}\n{"key": "mug_1.location", "op": "revoke"}\n')
>>> [batch.events.select(["text", "key", "op", "value"]).to_pylist() for batch in read_stream(path)]
[[{'text': 'mug_1.location: shelf 2', 'key': 'mug_1.location', 'op': 'accept', 'value': 'shelf 2'}, {'text': 'revoke mug_1.location', 'key': 'mug_1.location', 'op': 'revoke', 'value': None}]]
>>> tmp.cleanup()
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from pmem.graph import check_text, key_problem
from pmem.ingest._columns import _normalize, _with_fact_texts, fact_evidence_texts
from pmem.ingest._fields import (
    _EVENT_FIELDS,
    _EXPECTED,
    _FIELDS,
    _KEY_MISSING,
    ARROW_SUFFIXES,
    DEFAULT_FACT_OP,
    EVENT_SCHEMA,
    FACT_OPS,
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    REJECT_SCHEMA,
    VALUE_OPS,
    _excerpt,
    _unknown_op,
    _valid_time_problem,
    _value_missing,
)
from pmem.ingest._seen import SeenIds

__all__ = [
    "EVENT_SCHEMA",
    "FACT_OPS",
    "REJECT_SCHEMA",
    "VALUE_OPS",
    "Position",
    "StreamBatch",
    "StreamError",
    "count_rows",
    "fact_evidence_texts",
    "is_fact_row",
    "read_stream",
]

_CHUNK = 1 << 20  # JSONL read size
_PARSE_BLOCK = 1 << 18  # Arrow parses a block of lines per thread
_JSON_WS = b" \t\r"  # JSON's insignificant whitespace (besides the newline that ends a line)
_BOM = b"\xef\xbb\xbf"
_JSONL_READ_SCHEMA = pa.schema([(f.name, f.type) for f in _EVENT_FIELDS[1:]])


class StreamError(ValueError):
    """A bad row: ``"{path}: row {n}: {what}"`` (``line {n}`` for JSONL), ``n`` 1-based."""

    def __init__(self, path: Path, row: int, what: str, *, unit: str = "row") -> None:
        super().__init__(f"{path}: {unit} {row}: {what}")
        self.path = path
        self.row = row
        self.what = what


@dataclass(frozen=True)
class Position:
    """Where a reader stands: ``row`` rows (JSONL: lines) consumed; ``offset`` the byte after them (JSONL only)."""

    row: int = 0
    offset: int = 0


@dataclass(frozen=True)
class StreamBatch:
    """One batch: the valid ``events`` (EVENT_SCHEMA), the ``rejects`` (REJECT_SCHEMA) and the position after it."""

    events: pa.RecordBatch
    rejects: pa.RecordBatch
    end: Position


def read_stream(
    path: str | os.PathLike[str],
    *,
    start: Position | None = None,
    batch_rows: int = 8192,
    skip_bad: bool = False,
    ids: dict[str, int] | SeenIds | None = None,
    fact_batch_rows: int | None = None,
) -> Iterator[StreamBatch]:
    """Yield the stream at ``path`` from ``start`` in batches covering ``batch_rows`` input rows each.

    A batch covers ``batch_rows`` rows of the input (JSONL: lines, blank ones included; the last batch
    fewer); its events are those of its rows that are valid, so a batch may hold fewer events, or none.
    With ``fact_batch_rows``, a batch after one that held fact rows only covers twice as many rows as
    that one, up to ``fact_batch_rows`` (a batch holding any text row, or no row, starts again at
    ``batch_rows``): a text row arriving after a run of fact rows is in a batch at most twice the run's.
    Without ``skip_bad`` the first bad row raises :class:`StreamError` (the batches before it were already
    yielded); with it, bad rows come back in ``rejects``.

    An ``id`` is an event's identity: a row repeating the id of an earlier row is a bad row (``duplicate
    id``), so a stream delivered at least once is ingested once with ``skip_bad``. Ids compare as text:
    the number ``2`` and the string ``"2"`` are one id (see :func:`_as_text`). ``ids`` maps the ids
    of the rows before ``start`` to their row numbers (a resumed reader's memory); it is updated with
    the ids read. A :class:`~pmem.ingest._seen.SeenIds` keeps them in bounded memory (``pmem ingest``'s).
    """
    if type(batch_rows) is not int or batch_rows < 1:
        msg = f"read_stream: batch_rows must be a positive integer, got {batch_rows!r}"
        raise ValueError(msg)
    if fact_batch_rows is not None and (type(fact_batch_rows) is not int or fact_batch_rows < 1):
        msg = f"read_stream: fact_batch_rows must be a positive integer, got {fact_batch_rows!r}"
        raise ValueError(msg)
    sizes = _BatchSizes(batch_rows, fact_batch_rows or batch_rows)
    batches = _read_stream(Path(path), start, sizes, skip_bad)
    seen = ids if isinstance(ids, SeenIds) else SeenIds(held={} if ids is None else ids)
    return _unique_ids(Path(path), batches, seen, skip_bad)


def _as_text(event_id: str) -> str:
    """Why a repeated id that a number may have given is a repeat ("" for other ids).

    An id is an event's identity across formats (a Parquet integer column, the same rows exported as
    JSONL strings): a row delivered again with its id typed the other way is the same event, and telling
    the two apart would ingest it twice without a word. So ids compare as text, and the refusal says so.

    >>> _as_text("2")
    '; ids compare as text: 2 and "2" are one id'
    """
    if not event_id.lstrip("-").isdigit():
        return ""
    return f'; ids compare as text: {event_id} and "{event_id}" are one id'


def _unique_ids(
    path: Path, batches: Iterator[StreamBatch], seen: SeenIds, skip_bad: bool
) -> Iterator[StreamBatch]:
    """The batches with every row repeating an earlier row's ``id`` refused (see :func:`read_stream`)."""
    unit = row_word(path)
    for batch in batches:
        events = batch.events
        column = events.column("id")
        if column.null_count == len(column):
            yield batch
            continue
        repeated: list[int] = []
        reasons: list[str] = []
        rows: list[int] = events.column("row").to_pylist()  # type: ignore[assignment]  # non-nullable
        ids: list[str | None] = column.to_pylist()
        given = [i for i, event_id in enumerate(ids) if event_id is not None]
        firsts = seen.first_rows([str(ids[i]) for i in given], [rows[i] for i in given])
        for i, first in zip(given, firsts, strict=True):
            row, event_id = rows[i], str(ids[i])
            if first != row:
                what = (
                    f"duplicate id {_excerpt(repr(event_id))} (first at {unit} {first}{_as_text(event_id)})"
                )
                if not skip_bad:
                    raise StreamError(path, row, what, unit=unit)
                repeated.append(i)
                reasons.append(what)
        if not repeated:
            yield batch
            continue
        keep = np.ones(events.num_rows, bool)
        keep[repeated] = False
        taken = events.take(pa.array(repeated, pa.int64()))
        raws = [
            _excerpt(
                json.dumps({k: v for k, v in r.items() if k != "row" and v is not None}, ensure_ascii=False)
            )
            for r in taken.to_pylist()
        ]
        duplicates = pa.RecordBatch.from_arrays(
            [taken.column("row"), pa.array(reasons, pa.string()), pa.array(raws, pa.large_string())],
            schema=REJECT_SCHEMA,
        )
        rejects = pa.Table.from_batches([batch.rejects, duplicates]).sort_by("row").combine_chunks()
        merged = rejects.to_batches()[0] if rejects.num_rows else batch.rejects
        yield StreamBatch(events.filter(pa.array(keep)), merged, batch.end)


class _BatchSizes:
    """How many input rows the next batch covers (see :func:`read_stream`): a reader asks :attr:`rows`
    before each batch and tells :meth:`after` what the batch held."""

    def __init__(self, batch_rows: int, fact_batch_rows: int) -> None:
        self.base = batch_rows
        self.most = max(batch_rows, fact_batch_rows)
        self.rows = batch_rows

    def after(self, events: pa.RecordBatch) -> None:
        only_facts = events.num_rows > 0 and events.column("key").null_count == 0
        self.rows = min(2 * self.rows, self.most) if only_facts else self.base


def is_fact_row(events: pa.RecordBatch | pa.Table) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Which rows of normalized ``events`` are fact rows (the others are text rows)."""
    mask: np.ndarray[Any, np.dtype[np.bool_]] = pc.is_valid(events.column("key")).to_numpy(
        zero_copy_only=False
    )
    return mask


def _read_stream(
    path: Path, start: Position | None, sizes: _BatchSizes, skip_bad: bool
) -> Iterator[StreamBatch]:
    start = start or Position()
    if start.row < 0 or start.offset < 0:
        msg = f"{path}: cannot resume at {start}: negative position"
        raise ValueError(msg)
    kind = _format(path)
    if kind == "jsonl":
        return _read_jsonl(path, start, sizes, skip_bad)
    if start.offset:
        msg = f"{path}: cannot resume at {start}: a byte offset applies to JSONL only"
        raise ValueError(msg)
    return _read_columnar(path, kind, start.row, sizes, skip_bad)


def count_rows(path: str | os.PathLike[str]) -> int | None:
    """The number of rows in the stream, for a progress bar (JSONL: lines, counted like ``Position.row``).

    Parquet reads the footer; Arrow IPC the record batch headers (memory-mapped, no data is copied); JSONL
    counts newlines in 1 MiB binary chunks (one pass at disk speed, never ``None`` today).
    """
    path = Path(path)
    kind = _format(path)
    if kind == "parquet":
        return int(_parquet(path).metadata.num_rows)
    if kind == "arrow":
        return sum(batch.num_rows for batch in _arrow_batches(path))
    lines = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")  # an unterminated last line is a row too


# --- formats -----------------------------------------------------------------------------------------


def row_word(path: Path) -> str:
    """What a row of the stream at ``path`` is called in a message: ``line`` in JSONL, else ``row``."""
    return "line" if _format(path) == "jsonl" else "row"


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in ARROW_SUFFIXES:
        return "arrow"
    accepted = ", ".join(JSONL_SUFFIXES + PARQUET_SUFFIXES + ARROW_SUFFIXES)
    msg = f"{path}: unknown stream format {suffix or '(no suffix)'!r}; accepted suffixes: {accepted}"
    raise ValueError(msg)


def check_format(path: str | os.PathLike[str]) -> None:
    """The stream's suffix is known and a columnar file opens as what its name says (Parquet's footer,
    Arrow's first message): a wrong file is refused in one line before any cluster starts. JSONL rows are
    checked as they are read.

    Raises:
        ValueError: an unknown suffix, or a file that is not a readable Parquet or Arrow file.
    """
    path = Path(path)
    kind = _format(path)
    if kind == "parquet":
        _parquet(path)
    elif kind == "arrow":
        next(_arrow_batches(path), None)


def _batch(columns: dict[str, Any], schema: pa.Schema) -> pa.RecordBatch:
    arrays = [pa.array(columns.get(field.name, []), field.type) for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --- JSONL ---------------------------------------------------------------------------------------------


class _Number(str):
    """A JSON number kept as written: ``time`` and ``id`` take its decimal text, ``text`` refuses it."""

    __slots__ = ()


def _no_constant(name: str) -> Any:
    msg = f"{name} is not valid JSON"
    raise ValueError(msg)


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "boolean"
    if type(value) is _Number:
        return "number"
    if type(value) is str:
        return "string"
    return "array" if type(value) is list else "object"


class _BadRow(Exception):
    pass


class _TooDeep(Exception):
    """A line nested deeper than Python's JSON parser recurses: Arrow's reader, which a clean block goes
    through, reads it instead, so that a row's fate never depends on the rows around it."""


def _string_field(obj: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    """The value of a text field (``text``, ``source``): a non-blank UTF-8-encodable string."""
    if name not in obj:
        if required:
            raise _BadRow(f"field {name!r} is missing")
        return None
    value = obj[name]
    if value is None:
        if required:
            raise _BadRow(f"field {name!r} is null")
        return None
    if type(value) is not str:
        raise _BadRow(f"field {name!r} must be a string, got {_json_kind(value)}")
    _check_encodable(value, name)
    if not value.strip():
        raise _BadRow(f"field {name!r} is empty (only whitespace)")
    return value


def _check_encodable(value: str, name: str) -> None:
    try:
        check_text(value, name, "")  # the graph's one definition of a text it can keep
    except ValueError:
        msg = (
            f"field {name!r} contains a lone surrogate (e.g. a \\udc80 escape) and cannot be stored as UTF-8"
        )
        raise _BadRow(msg) from None


def _scalar_field(obj: dict[str, Any], name: str, *, integers_only: bool) -> str | None:
    """The value of ``time``/``valid_time`` (string or number) or ``id`` (string or integer), as text."""
    value = obj.get(name)
    if value is None:
        return None
    if type(value) is str:
        _check_encodable(value, name)
        return value
    if type(value) is _Number and not (integers_only and any(c in value for c in ".eE")):
        return str.__str__(value)
    expected = "a string or an integer" if integers_only else "a string or a number"
    raise _BadRow(f"field {name!r} must be {expected}, got {_json_kind(value)}")


def _valid_time_field(obj: dict[str, Any]) -> str | None:
    """The value of ``valid_time``: an ISO 8601 date or datetime the core can order (a number is not:
    seconds or milliseconds since when is a guess), checked by the core's own reading."""
    value = obj.get("valid_time")
    if value is None:
        return None
    if type(value) is not str:
        raise _BadRow(f"field 'valid_time' must be {_EXPECTED['valid_time']}, got {_json_kind(value)}")
    _check_encodable(value, "valid_time")
    if (problem := _valid_time_problem(value)) is not None:
        raise _BadRow(problem)
    return value


def _parse_line(line: bytes, last: bool) -> tuple[str | None, ...]:
    try:
        decoded = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _BadRow(f"invalid UTF-8 at byte {e.start + 1} of the line") from None
    try:
        obj = json.loads(decoded, parse_int=_Number, parse_float=_Number, parse_constant=_no_constant)
    except RecursionError:
        raise _TooDeep from None
    except ValueError as e:  # JSONDecodeError is a ValueError
        if last:
            raise _BadRow("truncated last line (no newline and not valid JSON)") from None
        detail = (
            f"{e.msg.removesuffix(' at')} at column {e.colno}"
            if isinstance(e, json.JSONDecodeError)
            else str(e)
        )
        raise _BadRow(f"not valid JSON ({detail})") from None
    if type(obj) is not dict:
        hint = "; a .json stream must be JSON Lines: one object per line" if type(obj) is list else ""
        raise _BadRow(f"not a JSON object, got {_json_kind(obj)}{hint}")
    # the row's kind: a fact row names a key (a row with a fact's other fields but no key is refused there)
    fact_fields = obj.get("op") is not None or obj.get("value") is not None
    text = _string_field(obj, "text", required=obj.get("key") is None and not fact_fields)
    source = _string_field(obj, "source") or "user"
    time = _scalar_field(obj, "time", integers_only=False)
    valid_time = _valid_time_field(obj)
    event_id = _scalar_field(obj, "id", integers_only=True)
    key = _key_field(obj)
    if key is None and fact_fields:
        raise _BadRow(_KEY_MISSING)
    op = _op_field(obj)
    value = _scalar_field(obj, "value", integers_only=False)
    if key is not None:
        op = op or DEFAULT_FACT_OP
        if value is None and op in VALUE_OPS:
            raise _BadRow(_value_missing(op))
    return text, source, time, valid_time, event_id, key, op, value


def _key_field(obj: dict[str, Any]) -> str | None:
    """The value of ``key``: a string the graph admits as a key (:func:`pmem.graph.key_problem`)."""
    value = obj.get("key")
    if value is None:
        return None
    if type(value) is not str:
        raise _BadRow(f"field 'key' must be {_EXPECTED['key']}, got {_json_kind(value)}")
    _check_encodable(value, "key")
    if (problem := key_problem(value)) is not None:
        raise _BadRow(f"field 'key' {problem}")
    return value


def _op_field(obj: dict[str, Any]) -> str | None:
    """The value of ``op``: one of :data:`FACT_OPS` (None when absent: the default applies)."""
    value = obj.get("op")
    if value is None:
        return None
    if type(value) is not str:
        raise _BadRow(f"field 'op' must be {_EXPECTED['op']}, got {_json_kind(value)}")
    if value not in FACT_OPS:
        raise _BadRow(_unknown_op(value))
    return value


def _read_jsonl(path: Path, start: Position, sizes: _BatchSizes, skip_bad: bool) -> Iterator[StreamBatch]:
    size = path.stat().st_size
    offset, row = start.offset, start.row
    with open(path, "rb") as f:
        if offset > size:
            msg = f"{path}: cannot resume at {start}: the file has only {size} bytes"
            raise ValueError(msg)
        if offset:  # a resume point is always just after a newline: anything else is another file
            f.seek(offset - 1)
            if f.read(1) != b"\n":
                msg = f"{path}: cannot resume at {start}: byte offset {offset} is not at the start of a line"
                raise ValueError(msg)
        pending: list[bytes] = []
        pending_lines = 0
        eof = False
        while True:
            batch_rows = sizes.rows
            while pending_lines < batch_rows and not eof:
                chunk = f.read(_CHUNK)
                if not chunk:
                    eof = True
                    break
                pending.append(chunk)
                pending_lines += chunk.count(b"\n")
            buf = b"".join(pending)
            if not buf:
                return
            newlines = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10)
            if len(newlines) >= batch_rows:
                newlines = newlines[:batch_rows]
                cut = int(newlines[-1]) + 1
            else:  # end of file: the rest, possibly with an unterminated last line
                cut = len(buf)
            block = buf[:cut]
            pending = [buf[cut:]] if cut < len(buf) else []
            pending_lines -= len(newlines)
            events, rejects, lines = _jsonl_block(path, block, newlines, row, skip_bad)
            sizes.after(events)
            offset += len(block)
            row += lines
            yield StreamBatch(events, rejects, Position(row, offset))


def _jsonl_block(
    path: Path, block: bytes, newlines: np.ndarray[Any, Any], row: int, skip_bad: bool
) -> tuple[pa.RecordBatch, pa.RecordBatch, int]:
    """Parse one block of whole lines (the first is line ``row + 1``); returns events, rejects, line count."""
    unterminated = not block.endswith(b"\n")
    lines = len(newlines) + unterminated
    events = _fast_block(block, newlines, unterminated, row)
    if events is not None:
        return events, _batch({}, REJECT_SCHEMA), lines
    columns: dict[str, list[Any]] = {name: [] for name in ("row", *_FIELDS)}
    rejects: dict[str, list[Any]] = {"row": [], "reason": [], "raw": []}
    pieces = block.split(b"\n")
    if not unterminated:
        pieces.pop()  # the empty piece after the final newline
    for i, line in enumerate(pieces):
        number = row + i + 1
        if number == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        if not line.strip(_JSON_WS):
            continue  # blank lines are allowed (and still counted)
        try:
            try:
                values = _parse_line(line, last=unterminated and i == len(pieces) - 1)
            except _TooDeep:
                values = _parse_deep_line(line)
        except _BadRow as bad:
            if not skip_bad:
                raise StreamError(path, number, str(bad), unit="line") from None
            rejects["row"].append(number)
            rejects["reason"].append(str(bad))
            rejects["raw"].append(_excerpt(line))
            continue
        columns["row"].append(number)
        for name, value in zip(_FIELDS, values, strict=True):
            columns[name].append(value)
    return _with_fact_texts(_batch(columns, EVENT_SCHEMA)), _batch(rejects, REJECT_SCHEMA), lines


def _parse_deep_line(line: bytes) -> tuple[Any, ...]:
    """One line too deep for :func:`json.loads`, read as the block reader reads it (Arrow)."""
    table = _arrow_json(line + b"\n", len(line))
    if table is None or table.num_rows != 1:
        raise _BadRow("not valid JSON (nested too deeply to read)")
    columns: dict[str, pa.Array | None] = {name: table.column(name).combine_chunks() for name in _FIELDS}
    events, reasons = _normalize(columns, pa.array([1], pa.int64()), check_utf8=False)
    if reasons is not None:
        raise _BadRow(reasons[0].as_py())
    row = events.to_pylist()[0]
    return tuple(row[name] for name in _FIELDS)


def _fast_block(
    block: bytes, newlines: np.ndarray[Any, Any], unterminated: bool, row: int
) -> pa.RecordBatch | None:
    """The block's events parsed by Arrow, or None when any line needs the per-line parser."""
    if not block.isascii():
        try:
            block.decode("utf-8")  # Arrow's JSON reader would pass invalid UTF-8 through
        except UnicodeDecodeError:
            return None
    data = np.frombuffer(block, np.uint8)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(block)]))
    if not unterminated:
        starts, ends = starts[:-1], ends[:-1]
    numbers = np.arange(row + 1, row + 1 + len(starts), dtype=np.int64)
    if not (data[starts] == ord("{")).all():
        # some line does not open an object: number only the non-blank ones, as Arrow skips blank lines
        ink = ~np.isin(data, np.frombuffer(_JSON_WS + b"\n", np.uint8))
        counts = np.concatenate(([0], np.cumsum(ink, dtype=np.int64)))
        numbers = numbers[(counts[ends] - counts[starts]) > 0]
    if not len(numbers):
        return _batch({}, EVENT_SCHEMA)
    table = _arrow_json(block, int((ends - starts).max()))
    if table is None or table.num_rows != len(numbers):  # e.g. two objects on one line
        return None
    columns: dict[str, pa.Array | None] = {name: table.column(name).combine_chunks() for name in _FIELDS}
    events, reasons = _normalize(columns, pa.array(numbers, pa.int64()), check_utf8=False)
    return events if reasons is None else None


def _arrow_json(block: bytes, longest: int) -> pa.Table | None:
    """Arrow's JSON reader over whole lines (the longest ``longest`` bytes); None when it refuses them."""
    try:
        return pj.read_json(
            pa.BufferReader(block),  # type: ignore[arg-type]  # the stubs miss Arrow's own streams
            read_options=pj.ReadOptions(block_size=max(_PARSE_BLOCK, 2 * longest + 2)),
            parse_options=pj.ParseOptions(
                explicit_schema=_JSONL_READ_SCHEMA, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


# --- Arrow: Parquet and IPC ----------------------------------------------------------------------------


def _arrow_batches(path: Path) -> Iterator[pa.RecordBatch]:
    source = pa.memory_map(str(path))
    try:
        if source.read(6) == b"ARROW1":  # the IPC file format's magic; otherwise the stream format
            source.seek(0)
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
        else:
            source.seek(0)
            yield from pa.ipc.open_stream(source)
    except pa.ArrowInvalid as e:
        msg = f"{path}: not a readable Arrow IPC file or stream ({e})"
        raise ValueError(msg) from None
    finally:
        source.close()


def _parquet(path: Path) -> pq.ParquetFile:
    try:
        # no pre-buffering: it caches every row group read so far until the file is closed, so a
        # stream's reader grew with the stream (374 MiB of a 368 MiB file at 30M rows; 6 MiB without)
        return pq.ParquetFile(path, pre_buffer=False)
    except FileNotFoundError:  # it names the path already
        raise
    except (pa.ArrowInvalid, OSError) as e:  # a damaged footer is an OSError ("Couldn't deserialize thrift")
        msg = f"{path}: not a readable Parquet file ({e})"
        raise ValueError(msg) from None


def _source_batches(
    path: Path, kind: str, skip: int, batch_rows: int
) -> tuple[Iterator[pa.RecordBatch], int]:
    """The file's batches (Parquet: of ``batch_rows`` rows) with whole row groups before row ``skip``
    left unread; the rows still to drop."""
    if kind == "arrow":  # unknown columns are dropped before any copy (Parquet does not read them)
        known = (
            batch.select([name for name in _FIELDS if name in batch.schema.names] or batch.schema.names)
            for batch in _arrow_batches(path)
        )
        return known, skip
    parquet = _parquet(path)
    metadata = parquet.metadata
    group = 0
    while group < metadata.num_row_groups and skip >= metadata.row_group(group).num_rows:
        skip -= metadata.row_group(group).num_rows
        group += 1
    names = set(parquet.schema_arrow.names)
    columns = [name for name in _FIELDS if name in names] or None
    batches = parquet.iter_batches(
        batch_size=batch_rows, row_groups=list(range(group, metadata.num_row_groups)), columns=columns
    )
    return batches, skip


def _rebatch(batches: Iterable[pa.RecordBatch], skip: int, sizes: _BatchSizes) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` after the first ``skip``, in batches of ``sizes.rows`` rows (read again
    before each batch; the last batch fewer). A batch inside one input batch is a slice of it (no copy)."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if skip >= batch.num_rows:  # a record batch wholly before the resume point: never decoded
            skip -= batch.num_rows
            continue
        if skip:
            batch, skip = batch.slice(skip), 0
        held.append(batch)
        count += batch.num_rows
        while count >= sizes.rows:
            size = sizes.rows
            out, held = _split_rows(held, size)
            count -= size
            yield out
    if count:
        yield _split_rows(held, count)[0]


def _split_rows(held: list[pa.RecordBatch], size: int) -> tuple[pa.RecordBatch, list[pa.RecordBatch]]:
    """The first ``size`` rows of ``held`` as one batch, and the rest."""
    if held[0].num_rows >= size:
        after = held[0].slice(size)
        return held[0].slice(0, size), ([after] if after.num_rows else []) + held[1:]
    whole = pa.Table.from_batches(held).combine_chunks()
    rest = [b for b in whole.slice(size).to_batches() if b.num_rows]
    return whole.slice(0, size).to_batches()[0], rest


def _read_columnar(
    path: Path, kind: str, start_row: int, sizes: _BatchSizes, skip_bad: bool
) -> Iterator[StreamBatch]:
    if start_row and start_row > (total := count_rows(path) or 0):
        msg = f"{path}: cannot resume at row {start_row}: the file has only {total} rows"
        raise ValueError(msg)
    batches, skip = _source_batches(path, kind, start_row, sizes.most)
    row = start_row
    for batch in _rebatch(batches, skip, sizes):
        if "text" not in batch.schema.names and "key" not in batch.schema.names:
            names = ", ".join(batch.schema.names)
            what = (
                "field 'text' is missing: the file has no 'text' column, nor the 'key' column of fact rows "
                f"(its columns: {names})"
            )
            raise StreamError(path, row + 1, what)
        numbers = pa.array(np.arange(row + 1, row + 1 + batch.num_rows, dtype=np.int64))
        columns = {name: batch.column(name) if name in batch.schema.names else None for name in _FIELDS}
        events, reasons = _normalize(columns, numbers, check_utf8=True)
        rejects = _batch({}, REJECT_SCHEMA)
        if reasons is not None:
            bad = pc.is_valid(reasons)
            first = pc.index(bad, True).as_py()
            if not skip_bad:
                raise StreamError(path, row + 1 + first, reasons[first].as_py())
            indices = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
            raws = [_row_excerpt(batch, int(i)) for i in indices]
            rejects = pa.RecordBatch.from_arrays(
                [numbers.take(indices), reasons.take(indices), pa.array(raws, pa.large_string())],
                schema=REJECT_SCHEMA,
            )
        row += batch.num_rows
        sizes.after(events)
        yield StreamBatch(events, rejects, Position(row, 0))


def _row_excerpt(batch: pa.RecordBatch, i: int) -> str:
    values: dict[str, Any] = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        try:
            values[name] = column[i].as_py()
        except (UnicodeDecodeError, ValueError, pa.ArrowException):  # invalid UTF-8, out-of-range dates
            values[name] = column.cast(pa.large_binary())[i].as_py().decode("utf-8", "backslashreplace")
    return _excerpt(json.dumps(values, ensure_ascii=False, default=str))
