"""FactConsolidation fact templates: ``parse_fact(line) -> (subject, relation, object)``.

The MemoryAgentBench FactConsolidation stream is generated from MQuAKE relation templates, one
sentence per fact. The templates below were derived from the official data (all 18,336 distinct
sentences of the four lengths parse; ``pmem bench coverage`` prints per-subset coverage and misses).
They are tried in order: the last one (``The {office} is {holder}.``) is a catch-all for office
holders, so every more specific ``The ... of {s} is {o}.`` template must come before it.

Subjects are matched lazily (the relation phrase's first occurrence ends the subject), objects
greedily; one trailing period ends the sentence, so ``Washington, D.C..`` yields ``Washington, D.C.``.

>>> parse_fact("12. Thomas Kyd was born in the city of London.")
('Thomas Kyd', 'birthplace', 'London')
>>> fact_key("Thomas Kyd", "birthplace")
'thomas_kyd.birthplace'
"""

from __future__ import annotations

import re
import unicodedata

#: (template, relation) in priority order. ``{s}`` subject, ``{o}`` object.
RELATION_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("{s} is a citizen of {o}.", "citizenship"),
    ("{s} is affiliated with the religion of {o}.", "religion"),
    ("{s} is associated with the sport of {o}.", "sport"),
    ("The author of {s} is {o}.", "author"),
    ("{s} speaks the language of {o}.", "language"),
    ("{s} plays the position of {o}.", "position"),
    ("{s} was created by {o}.", "creator"),
    ("{s} was developed by {o}.", "developer"),
    ("{s} was born in the city of {o}.", "birthplace"),
    ("{s} is married to {o}.", "spouse"),
    ("{s} was founded by {o}.", "founder"),
    ("The company that produced {s} is {o}.", "manufacturer"),
    ("{s} died in the city of {o}.", "death_place"),
    ("The headquarters of {s} is located in the city of {o}.", "headquarters"),
    # "origianl" is the data's own spelling.
    ("The origianl broadcaster of {s} is {o}.", "original_broadcaster"),
    ("{s} was performed by {o}.", "performer"),
    ("{s} was created in the country of {o}.", "country_of_origin"),
    ("{s} worked in the city of {o}.", "work_location"),
    ("The type of music that {s} plays is {o}.", "genre"),
    ("{s} is located in the continent of {o}.", "continent"),
    # "univeristy" is the data's own spelling.
    ("The univeristy where {s} was educated is {o}.", "educated_at"),
    ("{s} is employed by {o}.", "employer"),
    ("The official language of {s} is {o}.", "official_language"),
    ("The capital of {s} is {o}.", "capital"),
    ("{s} is famous for {o}.", "notable_work"),
    ("{s} works in the field of {o}.", "field_of_work"),
    ("The name of the current head of the {s} government is {o}.", "head_of_government"),
    ("{s} was written in the language of {o}.", "work_language"),
    ("{s} was founded in the city of {o}.", "founding_location"),
    ("The chairperson of {s} is {o}.", "chairperson"),
    ("The chief executive officer of {s} is {o}.", "ceo"),
    ("The head coach of {s} is {o}.", "head_coach"),
    ("The name of the current head of state in {s} is {o}.", "head_of_state"),
    ("{s}'s child is {o}.", "child"),
    ("The director of {s} is {o}.", "director"),
    ("The original language of {s} is {o}.", "original_language"),
    ("The {s} is {o}.", "office_holder"),
)

_NUMBER = re.compile(r"^\s*(\d+)\.\s+")


def _compile(template: str) -> re.Pattern[str]:
    body = re.escape(template)
    body = body.replace(re.escape("{s}"), "(?P<s>.+?)").replace(re.escape("{o}"), "(?P<o>.+)")
    # The final "." of the template is the sentence end; an object ending in "." keeps its own.
    return re.compile(f"^{body}$", re.DOTALL)


_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple((_compile(t), r) for t, r in RELATION_TEMPLATES)


def split_number(line: str) -> tuple[int | None, str]:
    """``"12. X is Y."`` -> ``(12, "X is Y.")``; lines without a number give ``(None, line)``."""
    m = _NUMBER.match(line)
    if m:
        return int(m.group(1)), line[m.end() :].strip()
    return None, line.strip()


def parse_fact(line: str) -> tuple[str, str, str] | None:
    """Parse one fact sentence (with or without its ``N.`` prefix) into (subject, relation, object)."""
    _, text = split_number(line)
    for pattern, relation in _PATTERNS:
        m = pattern.match(text)
        if m:
            subject, obj = m.group("s").strip(), m.group("o").strip()
            if subject and obj:
                return subject, relation, obj
    return None


_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)


def _snake(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return _NON_WORD.sub("_", text).strip("_")


def fact_key(subject: str, relation: str) -> str:
    """The snake_case key ``subject.relation`` the oracle write path and the audit use."""
    return f"{_snake(subject)}.{_snake(relation)}"
