r"""What the core admits: the one definition of a valid key and of a valid text.

The graph keeps everything it admits forever and must be able to write it to disk and render it, so it
refuses at the door what it could not keep:

- *text* (evidence text, source, time, values, ...) must be a ``str`` that UTF-8 can encode, i.e. without
  lone surrogates such as ``"\udc80"`` (Python strings can hold them, Arrow files cannot);
- a *key* must be a non-empty text without control characters (Unicode category ``Cc``: ``\n``, ``\r``,
  ``\t``, ``\x00``, ``\x85``, ...) and without the line and paragraph separators U+2028/U+2029, because
  a key is printed verbatim at the start of a rendered line and must never be able to start another one;
  nor may it be blank (only spaces): a key nobody can see names nothing a reader can ask for.

Values may hold any text: rendering escapes them (see ``pmem.graph._ops._render.escape``).

Every check raises ``ValueError`` naming the argument and the call it was passed to.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Line-breaking characters outside category Cc (which covers \n \r \t \x00 \x1c-\x1f \x7f \x85 ...).
_SEPARATORS = frozenset("\u2028\u2029")


def is_control(ch: str) -> bool:
    """A character no key may hold and rendering escapes: category Cc or a line/paragraph separator.

    Together these are every character ``str.splitlines`` breaks at, and every terminal control code.
    """
    return ch in _SEPARATORS or unicodedata.category(ch) == "Cc"


def preview(value: object, limit: int = 60) -> str:
    """A short, single-line, encodable rendering of a refused argument for an error message."""
    text = repr(value)  # repr escapes control characters and lone surrogates
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _encodable(text: str) -> bool:
    if text.isascii():  # O(1) in CPython: the common case costs nothing
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(
    value: object, name: str, where: str, *, optional: bool = False, non_empty: bool = False
) -> None:
    """Raise ValueError unless ``value`` is a str UTF-8 can encode (or None when ``optional``)."""
    if value is None and optional:
        return
    if type(value) is not str:
        kind = "a string or None" if optional else "a string"
        msg = f"{where}: {name} must be {kind}, got {type(value).__name__} {preview(value)}"
        raise ValueError(msg)
    if non_empty and not value:
        msg = f"{where}: {name} must be a non-empty string"
        raise ValueError(msg)
    if not _encodable(value):
        msg = f"{where}: {name} contains a lone surrogate and cannot be stored as UTF-8: {preview(value)}"
        raise ValueError(msg)


_BLANK = "must not be blank (only whitespace)"


def key_problem(key: object) -> str | None:
    """Why ``key`` is not a valid key, or None when it is. The single definition of a valid key."""
    if type(key) is not str:
        return f"must be a non-empty string, got {type(key).__name__}"
    if not key:
        return "must be a non-empty string"
    if key.isprintable():  # printable excludes Cc, Zl, Zp and surrogates: nothing more to check
        return _BLANK if key.isspace() else None
    for ch in key:
        if is_control(ch):
            return f"must not contain control characters or line separators (found {ch!r})"
    if not _encodable(key):
        return "contains a lone surrogate and cannot be stored as UTF-8"
    # other non-printables (no-break spaces, zero-width joiners, ...) are harmless beside other text
    return _BLANK if key.isspace() else None


#: ASCII names ``key_problem`` may refuse: a control character, or blank (spaces only)
_SUSPECT_ASCII = r"[\x00-\x1f\x7f]|^ +$"


def key_problems(names: Any) -> dict[int, str]:
    """:func:`key_problem` of a column of names (an Arrow string array), column-wise: why each refused name is no valid key, by
    position (nulls are left to the caller). A non-empty ASCII name without a control character that is
    not blank is a valid key, so only the other names are asked one by one, whatever the column's size.

    >>> sorted(key_problems(pa.array(["budget", "", "a\\nb", None, "caf\u00e9", "  "])).items())[0]
    (1, 'must be a non-empty string')
    >>> sorted(key_problems(pa.array(["budget", "", "a\\nb", None, "caf\u00e9", "  "])))
    [1, 2, 5]
    """
    if not len(names):
        return {}
    simple = pc.and_(pc.string_is_ascii(names), pc.greater(pc.binary_length(names), pa.scalar(0)))
    admitted = pc.and_not(simple, pc.match_substring_regex(names, _SUSPECT_ASCII))
    suspect: Any = pc.fill_null(pc.and_(pc.invert(admitted), pc.is_valid(names)), False)
    at = np.flatnonzero(suspect.to_numpy(zero_copy_only=False))
    out = {}
    for i, name in zip(at.tolist(), names.take(pa.array(at, pa.int64())).to_pylist(), strict=True):
        why = key_problem(name)
        if why is not None:
            out[i] = why
    return out


def check_key(key: object, where: str, name: str = "key") -> None:
    """Raise ValueError unless ``key`` is a valid key (see the module docstring)."""
    problem = key_problem(key)
    if problem is not None:
        msg = f"{where}: {name} {problem}; got {preview(key)}"
        raise ValueError(msg)


def check_flag(value: object, name: str, where: str) -> None:
    if type(value) is not bool:
        msg = f"{where}: {name} must be True or False, got {preview(value)}"
        raise ValueError(msg)


def valid_instant(value: object, where: str = "observe") -> tuple[str, datetime]:
    """A valid time as stored (its ISO 8601 text) and as compared (naive UTC): the one reading of a
    ``valid_time`` (``observe``, the state loader, replay, and the ingest's stream reader).

    >>> valid_instant("2024-03-01T12:00:00+01:00")
    ('2024-03-01T12:00:00+01:00', datetime.datetime(2024, 3, 1, 11, 0))
    >>> valid_instant("2023", "row")
    Traceback (most recent call last):
    ...
    ValueError: row: valid_time must be an ISO 8601 date or datetime, got '2023'
    """
    iso = value if type(value) is str else getattr(value, "isoformat", lambda: None)()
    text = iso if isinstance(iso, str) else ""
    try:
        at = datetime.fromisoformat(text) if text else None
    except ValueError:
        at = None
    if at is None:
        msg = f"{where}: valid_time must be an ISO 8601 date or datetime, got {preview(value)}"
        raise ValueError(msg)
    if at.tzinfo is not None:
        at = at.astimezone(UTC).replace(tzinfo=None)
    return text, at


def format_time(time: object) -> str:
    """An observation time as stored: a string as given, a datetime (anything with ``isoformat``) as
    ISO 8601; anything else is refused, naming ``observe``."""
    iso = getattr(time, "isoformat", None)
    text = iso() if callable(iso) else None
    if type(text) is not str:
        msg = f"observe: time must be a string or a datetime, got {type(time).__name__} {preview(time)}"
        raise ValueError(msg)
    return text
