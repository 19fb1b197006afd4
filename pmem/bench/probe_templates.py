"""Event and question sentences of the provenance probes (contract for the heuristic backend's rules).

Every fact is an attribute of a named entity (``The gate code of the Hill Street garage is 4821.``); its
fact key is ``fact_key(entity, attribute)``, as in FactConsolidation (``the_hill_street_garage.gate_code``).
Dates are written ``March 3, 2025`` in text (:data:`DATE_FORMAT` for ``strptime``) and ISO (``2025-03-03``) in event
metadata (``Event.valid_time``).

Which sentence means what (for a rule-based writer):

- ``FACT``: the entity's attribute has this value (who says so is the event's ``source``).
- ``SOURCED_FACT``: the same, read from a named document: a second, independent statement.
- ``UPDATE_FACT``: the value changed to this one.
- ``DATED_FACT``: the value held from ``{date}`` on (its valid time); such facts may arrive out of
  valid-time order.
- ``FORGET``: the user asks the agent to forget what *the user* said about the attribute (erasure of the
  user's statements; statements by other sources stand).
- ``DERIVED``: a fact derived from a premise: ``{person}`` sits in ``{room}`` because ``{room}`` is the
  ``{attr}`` of ``{entity}`` (the premise). If the premise changes, the derived fact may be stale.
- ``DISTINCT``: two near-identically named people are different people (a merge of them was wrong).
- ``Q_VALUE``: the current value; ``Q_CONFLICT``: whether any report conflicts with it; ``Q_AS_OF``: the
  value on a past date; ``Q_SEAT``: the room a person sits in (the derived fact); ``Q_PERSON``: a
  person's value (the name is not the question's last word, so no punctuation sticks to it).

>>> parse_event("As of March 3, 2025, the price of the Pine Street bakery is 12 dollars.")
('dated_fact', {'date': 'March 3, 2025', 'attr': 'price', 'entity': 'the Pine Street bakery', 'value': '12 dollars'})
>>> fact_key("the Pine Street bakery", "price")
'the_pine_street_bakery.price'
>>> iso_date("March 3, 2025"), text_date("2025-03-03")
('2025-03-03', 'March 3, 2025')
"""

from __future__ import annotations

import re
from datetime import date, datetime

from pmem.bench._facts import fact_key

__all__ = [
    "DATED_FACT",
    "DATE_FORMAT",
    "DERIVED",
    "DISTINCT",
    "EVENT_PATTERNS",
    "EVENT_TEMPLATES",
    "FACT",
    "FORGET",
    "Q_AS_OF",
    "Q_CONFLICT",
    "Q_PERSON",
    "Q_SEAT",
    "Q_VALUE",
    "SOURCED_FACT",
    "UPDATE_FACT",
    "fact_key",
    "iso_date",
    "parse_event",
    "text_date",
]

FACT = "The {attr} of {entity} is {value}."
SOURCED_FACT = "Per the {document}, the {attr} of {entity} is {value}."
UPDATE_FACT = "Update: the {attr} of {entity} is {value}."
DATED_FACT = "As of {date}, the {attr} of {entity} is {value}."
FORGET = "Forget what I told you about the {attr} of {entity}."
DERIVED = "{person} sits in {room} because {room} is the {attr} of {entity}."
DISTINCT = "{a} and {b} are two different people."

Q_VALUE = "What is the {attr} of {entity}?"
Q_CONFLICT = "Is there any conflicting report about the {attr} of {entity}?"
Q_AS_OF = "What was the {attr} of {entity} on {date}?"
Q_SEAT = "Which room does {person} sit in?"
Q_PERSON = "Which {attr} does {person} have?"

#: ``strptime`` format of a date in text (``March 3, 2025``)
DATE_FORMAT = "%B %d, %Y"

#: Every event template by name (questions are not events).
EVENT_TEMPLATES: dict[str, str] = {
    "fact": FACT,
    "sourced_fact": SOURCED_FACT,
    "update_fact": UPDATE_FACT,
    "dated_fact": DATED_FACT,
    "forget": FORGET,
    "derived": DERIVED,
    "distinct": DISTINCT,
}

_FIELD = {
    "attr": r"[a-z][a-z ]*?",
    "entity": r"[A-Za-z][\w ]*?",
    "value": r".+?",
    "document": r"[a-z][a-z ]*?",
    "date": r"[A-Z][a-z]+ \d{1,2}, \d{4}",
    "person": r"[A-Z][a-z]+ [A-Z][a-z]+",
    "room": r"room \d+",
    "a": r"[A-Z][a-z]+ [A-Z][a-z]+",
    "b": r"[A-Z][a-z]+ [A-Z][a-z]+",
}


def _regex(template: str) -> re.Pattern[str]:
    pattern = re.escape(template)
    seen: set[str] = set()
    for name, body in _FIELD.items():
        token = re.escape("{" + name + "}")
        while token in pattern:
            group = f"(?P={name})" if name in seen else f"(?P<{name}>{body})"
            pattern = pattern.replace(token, group, 1)
            seen.add(name)
    return re.compile(f"^{pattern}$")


EVENT_PATTERNS: dict[str, re.Pattern[str]] = {name: _regex(t) for name, t in EVENT_TEMPLATES.items()}


def parse_event(text: str) -> tuple[str, dict[str, str]] | None:
    """Which template produced ``text`` and its fields, or None."""
    for name, pattern in EVENT_PATTERNS.items():
        m = pattern.match(text.strip())
        if m:
            return name, m.groupdict()
    return None


def iso_date(text: str) -> str:
    """``March 3, 2025`` -> ``2025-03-03`` (ValueError for anything else)."""
    return datetime.strptime(text, DATE_FORMAT).date().isoformat()


def text_date(iso: str) -> str:
    """``2025-03-03`` -> ``March 3, 2025``."""
    d = date.fromisoformat(iso)
    return f"{d:%B} {d.day}, {d.year}"
