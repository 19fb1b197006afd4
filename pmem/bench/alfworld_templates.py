"""Event and query sentences of ALFWorld-Revision (contract for the heuristic backend's rules).

Objects and receptacles are written the ALFWorld way: lowercase type name plus an instance number
(``apple 1``, ``countertop 2``). ``{obj}`` is always such an object name and ``{loc}``, ``{a}``, ``{b}``,
``{c}``, ``{v2}`` receptacle names. The fact key of an object's location is ``location_key(obj)``
(``apple 1`` -> ``apple_1.location``).

Which sentence means what (for a rule-based writer):

- ``STALE_RECORD``: an initial/earlier location: accept ``{loc}``.
- ``UPDATE``: the object moved; the new value is ``{b}`` (``{a}`` is where it was).
- ``UPDATE_NO_ORIGIN``: the object moved to ``{loc}``; used by the retraction probe for the erroneous
  move so that the original location ``v1`` is stated exactly once in the whole history.
- ``TWO_STEP``: the object was carried via ``{c}`` and ends in ``{b}``; the value is ``{b}``.
- ``RETRACTION``: the earlier report that the object moved to ``{v2}`` was wrong; it names ``v2`` and
  never restates the earlier value, so the right value must come from memory (reject without a value /
  rollback).
- ``CONFLICT_REPORT``: an assertion of a location carrying no recency or authority cue; two of them for
  the same object with different locations are a conflict (contest).
- ``CONFIRMATION``: settles a conflict in favour of ``{loc}`` (resolve).
- ``QUERY``: the question, asked for the current location.
"""

from __future__ import annotations

import re

STALE_RECORD = "Earlier observation: {obj} was in {loc}."
UPDATE = "Update: {obj} has been moved from {a} to {b}."
UPDATE_NO_ORIGIN = "Update: {obj} has been moved to {loc}."
TWO_STEP = "{obj} was taken from {a} to {c}, then put in {b}."
RETRACTION = "Correction: the report that {obj} was moved to {v2} was an error."
CONFLICT_REPORT = "Report: {obj} is in {loc}."
CONFIRMATION = "Confirmed: {obj} is in {loc}."
QUERY = "Where is the {obj} now?"

#: Every event template by name (the query is not an event).
EVENT_TEMPLATES: dict[str, str] = {
    "stale_record": STALE_RECORD,
    "update": UPDATE,
    "update_no_origin": UPDATE_NO_ORIGIN,
    "two_step": TWO_STEP,
    "retraction": RETRACTION,
    "conflict_report": CONFLICT_REPORT,
    "confirmation": CONFIRMATION,
}

# Names are lowercase words plus an instance number ("apple 1", "countertop 12").
_NAME = r"[a-z]+ \d+"


def _regex(template: str) -> re.Pattern[str]:
    pattern = re.escape(template)
    for field in ("obj", "loc", "a", "b", "c", "v2"):
        pattern = pattern.replace(re.escape("{" + field + "}"), f"(?P<{field}>{_NAME})")
    return re.compile(f"^{pattern}$")


EVENT_PATTERNS: dict[str, re.Pattern[str]] = {name: _regex(t) for name, t in EVENT_TEMPLATES.items()}
QUERY_PATTERN: re.Pattern[str] = _regex(QUERY)


def location_key(obj: str) -> str:
    """The fact key of an object's location.

    >>> location_key("apple 1")
    'apple_1.location'
    """
    return obj.strip().replace(" ", "_") + ".location"


def parse_event(text: str) -> tuple[str, dict[str, str]] | None:
    """Which template produced ``text`` and its fields, or None.

    >>> parse_event("Update: apple 1 has been moved from fridge 1 to countertop 2.")
    ('update', {'obj': 'apple 1', 'a': 'fridge 1', 'b': 'countertop 2'})
    """
    for name, pattern in EVENT_PATTERNS.items():
        m = pattern.match(text.strip())
        if m:
            return name, m.groupdict()
    return None
