"""Column-wise validation of a stream's batches (the Arrow formats, and the JSONL fast path): each field
normalized to the event schema, every bad row found with its reason in one pass over the columns."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph import key_problems
from pmem.ingest._fields import (
    _EXPECTED,
    _FIELDS,
    _KEY_MISSING,
    _TEMPORAL,
    _UNREADABLE_VALID_TIME,
    _WHITESPACE,
    DEFAULT_FACT_OP,
    EVENT_SCHEMA,
    FACT_OPS,
    VALUE_OPS,
    _unknown_op,
    _valid_time_problem,
    _value_missing,
)


def _is_string(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or getattr(pa.types, "is_string_view", bool)(kind)
    )


def _invalid_utf8(column: pa.Array) -> pa.Array | None:
    """A mask of the values that are not valid UTF-8 (None when all are): Parquet does not check."""
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        raw = column.cast(pa.large_binary()).to_pylist()
        return pa.array([_is_invalid(value) for value in raw], pa.bool_())
    return None


def _is_invalid(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _iso(column: pa.Array) -> pa.Array:
    """Timestamps and dates as ISO-8601 text: ``2024-01-02T03:04:05.123+01:00``, ``2024-01-02``."""
    text = pc.cast(column, pa.string())  # "2024-01-02 03:04:05.123+0100" (or ...Z for UTC)
    if pa.types.is_timestamp(column.type):
        text = pc.replace_substring(text, " ", "T", max_replacements=1)
        text = pc.replace_substring_regex(text, r"([+-]\d\d)(\d\d)$", r"\1:\2")
    return text


def _unreadable_valid_times(column: pa.Array) -> tuple[pa.Array, str] | None:
    """A mask of the valid times the core cannot read, with the reason (None when all read).

    Only the rows that carry one are read, one by one, by the core's own reading of a valid time."""
    if not pc.any(pc.is_valid(column)).as_py():
        return None
    unreadable = [v is not None and _valid_time_problem(v) is not None for v in column.to_pylist()]
    if not any(unreadable):
        return None
    return pa.array(unreadable, pa.bool_()), _UNREADABLE_VALID_TIME


def _normalize(
    columns: dict[str, pa.Array | None], numbers: pa.Array, *, check_utf8: bool
) -> tuple[pa.RecordBatch, pa.Array | None]:
    """The valid rows as EVENT_SCHEMA and each row's reason to refuse it (None when every row is valid).

    A row's reason is its first problem in field order; ``columns`` maps each known field to its column
    (None when absent). Arrow type names appear in reasons (``got list<item: int64>``).
    """
    n = len(numbers)
    # the row's kind, from what it holds whatever the types: a fact row names a key; a row with a fact's
    # other fields but no key is refused for the missing key, not for a missing text
    has_key = _present(columns.get("key"), n)
    fact_fields = pc.or_(_present(columns.get("op"), n), _present(columns.get("value"), n))
    text_row = pc.invert(pc.or_(has_key, fact_fields))
    problems: list[tuple[Any, Any]] = []  # (mask, reason: one for all rows or one per row) in field order
    out: dict[str, Any] = {}
    for name in _FIELDS:
        column: Any = columns.get(name)
        target = EVENT_SCHEMA.field(name).type
        if column is None or pa.types.is_null(column.type):
            if name == "text":
                problems.append((text_row, "field 'text' is missing"))
            out[name] = pa.nulls(n, target)
            _field_problems(name, out, has_key, fact_fields, problems)
            continue
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        kind = column.type
        if _is_string(kind):
            if check_utf8 and (invalid := _invalid_utf8(column)) is not None:
                problems.append((invalid, f"field {name!r} is not valid UTF-8"))
                column = pc.if_else(invalid, pa.scalar(None, kind), column)
            value = pc.cast(column, target)
        elif name in _TEMPORAL and (pa.types.is_timestamp(kind) or pa.types.is_date(kind)):
            value = _iso(column)
        elif name == "valid_time" and not (pa.types.is_timestamp(kind) or pa.types.is_date(kind)):
            problems.append((pc.is_valid(column), f"field {name!r} must be {_EXPECTED[name]}, got {kind}"))
            out[name] = pa.nulls(n, target)
            continue
        elif name in _NUMBERS and pa.types.is_floating(kind):
            infinite = pc.invert(pc.fill_null(pc.is_finite(column), True))
            problems.append((infinite, f"field {name!r} is not a finite number"))
            value = pc.cast(column, target)
        elif (pa.types.is_integer(kind) and name in (*_NUMBERS, "id")) or (
            pa.types.is_decimal(kind) and name in _NUMBERS
        ):
            value = pc.cast(column, target)
        else:
            problems.append((pc.is_valid(column), f"field {name!r} must be {_EXPECTED[name]}, got {kind}"))
            out[name] = pa.nulls(n, target)
            _field_problems(name, out, has_key, fact_fields, problems)
            continue
        if name == "valid_time" and (unreadable := _unreadable_valid_times(value)) is not None:
            problems.append(unreadable)
            value = pc.if_else(unreadable[0], pa.scalar(None, target), value)
        if name == "text":
            problems.append((pc.and_(text_row, pc.is_null(value)), "field 'text' is null"))
        if name in ("text", "source"):
            blank = pc.equal(pc.utf8_length(pc.utf8_trim(value, characters=_WHITESPACE)), pa.scalar(0))
            problems.append((pc.fill_null(blank, False), f"field {name!r} is empty (only whitespace)"))
        out[name] = value
        _field_problems(name, out, has_key, fact_fields, problems)
    out["source"] = pc.fill_null(out["source"], "user")
    reasons: Any = pa.nulls(n, pa.string())
    any_bad = False
    for mask, reason in reversed(problems):  # the first problem in field order wins
        if pc.any(mask).as_py():
            any_bad = True
            reasons = pc.if_else(mask, reason, reasons)
    events = pa.RecordBatch.from_arrays([numbers, *(out[name] for name in _FIELDS)], schema=EVENT_SCHEMA)
    if any_bad:
        events = events.filter(pc.is_null(reasons))
    return _with_fact_texts(events), reasons if any_bad else None


#: The fields a number is accepted in, as its decimal text (a valid time is a date, never a number).
_NUMBERS = ("time", "value")


def _present(column: pa.Array | None, n: int) -> pa.Array:
    """Which rows hold a value (of any type) in ``column``."""
    if column is None:
        return pa.array(np.zeros(n, bool))
    return pc.is_valid(column)


def _field_problems(
    name: str, out: dict[str, Any], has_key: pa.Array, fact_fields: pa.Array, problems: list[tuple[Any, Any]]
) -> None:
    """A fact field's problems beyond its type, once its column is in ``out`` (``op`` before ``value``)."""
    if name == "key":
        problems.append((pc.and_(pc.invert(has_key), fact_fields), _KEY_MISSING))
        refused = _refused_keys(out["key"])
        if refused is not None:
            problems.append(refused)
    elif name == "op":
        op = out["op"]
        unknown = pc.and_(pc.is_valid(op), pc.invert(pc.is_in(op, value_set=pa.array(FACT_OPS))))
        if pc.any(unknown).as_py():
            problems.append((unknown, _per_row(unknown, op, _unknown_op)))
    elif name == "value":
        op = pc.fill_null(out["op"], DEFAULT_FACT_OP)
        needs = pc.and_(pc.is_in(op, value_set=pa.array(VALUE_OPS)), pc.is_null(out["value"]))
        missing = pc.and_(has_key, needs)
        if pc.any(missing).as_py():
            problems.append((missing, _per_row(missing, op, _value_missing)))


def _per_row(mask: pa.Array, column: pa.Array, reason: Any) -> pa.Array:
    """``reason(value)`` on the rows of ``mask`` (a few: bad rows), null elsewhere."""
    at = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    out: list[str | None] = [None] * len(mask)
    for i, value in zip(at.tolist(), column.take(pa.array(at, pa.int64())).to_pylist(), strict=True):
        out[i] = reason(value)
    return pa.array(out, pa.string())


def _refused_keys(keys: Any) -> tuple[pa.Array, pa.Array] | None:
    """The keys the graph refuses (:func:`pmem.graph.key_problems`, column-wise) with their reasons;
    None when none is."""
    problems = key_problems(keys)
    if not problems:
        return None
    reasons: list[str | None] = [None] * len(keys)
    for i, problem in problems.items():
        reasons[i] = f"field 'key' {problem}"
    refused = pa.array(reasons, pa.string())
    return pc.is_valid(refused), refused


def _with_fact_texts(events: pa.RecordBatch) -> pa.RecordBatch:
    """``events`` with each fact row's operation (its default) and evidence text (when it gave none)."""
    key = events.column("key")
    if key.null_count == len(key):
        return events
    is_fact = pc.is_valid(key)
    given: Any = events.column("op")
    op = pc.if_else(is_fact, pc.fill_null(given, DEFAULT_FACT_OP), pa.scalar(None, pa.string()))
    text = pc.coalesce(events.column("text"), fact_evidence_texts(key, op, events.column("value")))
    columns = {**dict(zip(events.schema.names, events.columns, strict=True)), "op": op, "text": text}
    return pa.RecordBatch.from_arrays([columns[name] for name in EVENT_SCHEMA.names], schema=EVENT_SCHEMA)


def fact_evidence_texts(key: Any, op: Any, value: Any) -> pa.Array:
    """The evidence text of fact rows that give no ``text``: ``key: value`` for an ``accept``, ``op key:
    value`` for another op, ``op key`` for one without a value (null where ``key`` is null).

    >>> fact_evidence_texts(pa.array(["a.b", "a.b", "c"]), pa.array(["accept", "reject", "contest"]),
    ...                     pa.array(["1", None, "x"])).to_pylist()
    ['a.b: 1', 'reject a.b', 'contest c: x']
    """
    text = pa.large_string()

    def word(value: str) -> Any:
        return pa.scalar(value, text)

    nothing = word("")
    verb: Any = pc.if_else(
        pc.equal(op, word(DEFAULT_FACT_OP).cast(pa.string())),
        nothing,
        pc.binary_join_element_wise(op.cast(text), nothing, word(" ")),
    )
    stated: Any = pc.fill_null(pc.binary_join_element_wise(word(": "), value.cast(text), nothing), nothing)
    joined: pa.Array = pc.binary_join_element_wise(verb, key.cast(text), stated, nothing)
    return joined
