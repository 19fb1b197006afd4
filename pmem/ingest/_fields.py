"""The fields of a stream's rows: the normalized schema every batch comes out in, the operations a fact
row may name, what each field must hold, and the one-line reasons a field is refused (shared by the
line-by-line JSONL reader and the column-wise checks)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from pmem.graph import OPS, valid_instant

#: A normalized batch of events: the one definition the rest of the ingest code imports.
_EVENT_FIELDS: list[pa.Field[Any]] = [
    pa.field("row", pa.int64(), nullable=False),  # 1-based row in the input (line number for JSONL)
    pa.field("text", pa.large_string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),  # missing/null -> "user"
    pa.field("time", pa.string()),
    pa.field("valid_time", pa.string()),
    pa.field("id", pa.string()),
    # a fact row's fields (null on a text row): the key as given, its operation, its value (maybe null)
    pa.field("key", pa.string()),
    pa.field("op", pa.string()),
    pa.field("value", pa.large_string()),
]
EVENT_SCHEMA = pa.schema(_EVENT_FIELDS)
#: The operations a fact row may name (``op``), and the one it names by default.
FACT_OPS: tuple[str, ...] = tuple(OPS)
DEFAULT_FACT_OP = "accept"
#: The operations that need a ``value`` (the others take one when given: a ``reject`` of a named value).
VALUE_OPS = ("accept", "contest", "resolve")
#: Rows refused under ``skip_bad``: the caller writes them to a rejects file.
_REJECT_FIELDS: list[pa.Field[Any]] = [
    pa.field("row", pa.int64(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("raw", pa.large_string(), nullable=False),  # excerpt of the row, valid UTF-8
]
REJECT_SCHEMA = pa.schema(_REJECT_FIELDS)

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
_FIELDS = ("text", "source", "time", "valid_time", "id", "key", "op", "value")
_TEMPORAL = ("time", "valid_time")
_EXPECTED = {
    "text": "a string",
    "source": "a string",
    "time": "a string or a number",
    "valid_time": "an ISO 8601 date or datetime (a string, or an Arrow timestamp or date)",
    "id": "a string or an integer",
    "key": "a string",
    "op": "a string",
    "value": "a string or a number",
}
_KEY_MISSING = "field 'key' is missing: 'op' and 'value' are the fields of a fact row, which names its key"
#: Every character ``str.isspace`` accepts (so ``str.strip`` and the Arrow trim agree on "empty"), pinned
#: by a test against the full Unicode range; Arrow's own whitespace class lacks ``\x1c``-``\x1f``.
_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_RAW_CHARS = 500  # reject excerpts


def _excerpt(raw: bytes | str) -> str:
    text = raw if isinstance(raw, str) else raw[: 4 * _RAW_CHARS].decode("utf-8", "backslashreplace")
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates, if any
    return text if len(text) <= _RAW_CHARS else text[: _RAW_CHARS - 3] + "..."


#: why a row's valid time is refused (the JSONL reader adds the value it got)
_UNREADABLE_VALID_TIME = "field 'valid_time' must be an ISO 8601 date or datetime"


def _valid_time_problem(value: str) -> str | None:
    """Why the core cannot read ``value`` as a valid time (None when it can)."""
    try:
        valid_instant(value)
    except ValueError:
        return f"{_UNREADABLE_VALID_TIME}, got {_excerpt(repr(value))}"
    return None


def _unknown_op(value: str) -> str:
    return f"field 'op' must be one of {', '.join(FACT_OPS)}, got {_excerpt(repr(value))}"


def _value_missing(op: str) -> str:
    return f"field 'value' is missing: op {op!r} needs a value"
