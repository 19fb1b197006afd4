"""Rule-based fact extraction for the heuristic backend: templated sentences -> (key, value, status).

Two families of templates are recognised, and nothing else is guessed at:

- ALFWorld-Revision location events (stale record, update, two-step move, retraction, conflicting
  report, confirmation), keyed ``{object}.location`` with the object name snake-cased
  (``apple 1`` -> ``apple_1.location``);
- generic English relation sentences of the kind MemoryAgentBench FactConsolidation streams use
  (``The chairperson of Fatah is Mahmoud Abbas.``, ``Thomas Kyd was born in the city of London.``),
  keyed ``{subject}.{relation}`` in snake_case with the object copied verbatim;
- first-person statements (``my 5K PB is 25:50``) keyed ``user.{attribute}``;
- a relation sentence withdrawn as a report that was wrong (``The report that the budget of the project
  is $50k was an error.``: the fact with status ``withdrawn``);
- the provenance probes' sentences: a fact behind a source or date prefix (``Per the building notes,
  ...``, ``As of March 3, 2025, ...``: the date becomes the fact's ``valid_time``), a derived fact
  (``X sits in room 12 because room 12 is the home room of team Y``: ``depends_on`` the premise's key),
  a request to forget (``Forget what I told you about the gate code of Z``) and a statement that two
  names are different people (:func:`extract_requests`).

>>> [f.as_dict() for f in extract_facts("Update: apple 1 has been moved from fridge 1 to countertop 2.")]
[{'key': 'apple_1.location', 'value': 'countertop 2', 'status': 'asserted'}]
>>> extract_facts("1. The chairperson of Fatah is Mahmoud Abbas.")[0].key
'fatah.chairperson'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

_SNAKE = re.compile(r"[\W_]+", re.UNICODE)


def snake(text: str) -> str:
    """Lowercase snake_case identifier of a name (unicode letters kept)."""
    return _SNAKE.sub("_", text.strip().lower()).strip("_")


@dataclass(frozen=True)
class Fact:
    key: str
    value: str
    status: str = "asserted"  # asserted | hedged | reported | withdrawn
    confirmed: bool = False
    valid_time: str | None = None  # ISO date the fact holds from, when the text says
    depends_on: tuple[str, ...] = field(default=())  # keys of the facts it was derived from

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"key": self.key, "value": self.value, "status": self.status}
        if self.confirmed:
            out["confirmed"] = True
        if self.valid_time is not None:
            out["valid_time"] = self.valid_time
        if self.depends_on:
            out["depends_on"] = list(self.depends_on)
        return out


@dataclass(frozen=True)
class Requests:
    """What a text asks of the memory rather than states: keys to forget, names that differ."""

    forget: tuple[str, ...] = ()
    distinct: tuple[tuple[str, str], ...] = ()


# --- ALFWorld-Revision location events -------------------------------------------------------------
_THE = r"(?:the )?"
_N = r"(?P<{}>[A-Za-z][\w\- ]*?)"
_PREP = r"(?:in|on|at|inside|into)"


def _n(name: str) -> str:
    return _THE + _N.format(name)


_LOCATION_RULES: tuple[tuple[re.Pattern[str], str, str, bool], ...] = tuple(
    (re.compile(p, re.IGNORECASE), value_group, status, confirmed)
    for p, value_group, status, confirmed in (
        # retraction: names the wrong value, never the right one
        (
            rf"^(?:correction: )?(?:the )?(?:earlier )?report that {_n('obj')} (?:was|had been|has been) "
            rf"(?:moved|taken|put) (?:to|in|into|on) {_n('v')} was (?:an? )?(?:error|mistake|wrong|incorrect|false)",
            "v",
            "withdrawn",
            False,
        ),
        (
            rf"^(?:correction: )?{_n('obj')} was (?:never|not) (?:moved|taken|put) (?:to|in|into|on) {_n('v')}$",
            "v",
            "withdrawn",
            False,
        ),
        (rf"^earlier observation: {_n('obj')} was {_PREP} {_n('loc')}$", "loc", "asserted", False),
        (rf"^update: {_n('obj')} has been moved from {_n('a')} to {_n('b')}$", "b", "asserted", False),
        (rf"^update: {_n('obj')} has been moved to {_n('b')}$", "b", "asserted", False),
        (rf"^{_n('obj')} (?:has been|was) moved from {_n('a')} to {_n('b')}$", "b", "asserted", False),
        (
            rf"^{_n('obj')} was taken from {_n('a')} to {_n('c')}, then (?:put|placed) {_PREP} {_n('b')}$",
            "b",
            "asserted",
            False,
        ),
        (
            rf"^(?:confirmed|confirmation|verified|settled)(?::| that)? {_n('obj')} is {_PREP} {_n('loc')}$",
            "loc",
            "asserted",
            True,
        ),
        (
            rf"^(?:(?:another )?report(?: says)?(?::| that)?|(?:another|a second) report says(?: that)?) "
            rf"{_n('obj')} is {_PREP} {_n('loc')}$",
            "loc",
            "reported",
            False,
        ),
    )
)

# --- generic relation sentences (FactConsolidation / MQuAKE templates) ------------------------------
# (pattern, relation). Specific phrasings first; "The R of S is O" and "S was V by O" are generic.
_RELATION_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"^The (?:origianl|original) broadcaster of (?P<s>.+?) is (?P<o>.+)$", "original_broadcaster"),
        (
            r"^The name of the current head of the government of (?P<s>.+?) is (?P<o>.+)$",
            "head_of_government",
        ),
        (r"^The name of the current head of the (?P<s>.+?) government is (?P<o>.+)$", "head_of_government"),
        (r"^The name of the current head of state in (?P<s>.+?) is (?P<o>.+)$", "head_of_state"),
        (
            r"^The (?:univeristy|university) where (?P<s>.+?) was educated is (?P<o>.+)$",
            "educated_at_university",
        ),
        (r"^The company that produced (?P<s>.+?) is (?P<o>.+)$", "produced_by_company"),
        (r"^The type of music that (?P<s>.+?) plays is (?P<o>.+)$", "music_type_plays"),
        (r"^The headquarters of (?P<s>.+?) is located in the city of (?P<o>.+)$", "headquarters_city"),
        (r"^(?P<s>.+?)'s? child is (?P<o>.+)$", "child"),
        (r"^(?P<s>.+?) is a citizen of (?P<o>.+)$", "citizenship_country"),
        (r"^(?P<s>.+?) is affiliated with the religion of (?P<o>.+)$", "religion_affiliated"),
        (r"^(?P<s>.+?) is associated with the sport of (?P<o>.+)$", "sport_associated"),
        (r"^(?P<s>.+?) speaks the language of (?P<o>.+)$", "language_speaks"),
        (r"^(?P<s>.+?) was written in the language of (?P<o>.+)$", "language_written"),
        (r"^(?P<s>.+?) was born in the city of (?P<o>.+)$", "born_city"),
        (r"^(?P<s>.+?) died in the city of (?P<o>.+)$", "died_city"),
        (r"^(?P<s>.+?) worked in the city of (?P<o>.+)$", "worked_city"),
        (r"^(?P<s>.+?) was founded in the city of (?P<o>.+)$", "founded_city"),
        (r"^(?P<s>.+?) was created in the country of (?P<o>.+)$", "created_country"),
        (r"^(?P<s>.+?) is located in the continent of (?P<o>.+)$", "continent_located"),
        (r"^(?P<s>.+?) plays the position of (?P<o>.+)$", "position_plays"),
        (r"^(?P<s>.+?) works in the field of (?P<o>.+)$", "field_works"),
        (r"^(?P<s>.+?) is famous for (?P<o>.+)$", "famous_for"),
        (r"^(?P<s>.+?) is employed by (?P<o>.+)$", "employed_by"),
        (r"^(?P<s>.+?) is married to (?P<o>.+)$", "married_to"),
        (r"^The (?P<r>[A-Za-z][A-Za-z ]*?) of (?P<s>.+?) is (?P<o>.+)$", ""),
        (r"^(?P<s>.+?) (?:was|is) (?P<r>[a-z]+ed) by (?P<o>.+)$", "{}_by"),
        (r"^(?P<s>.+?) (?:is|was) (?P<r>[a-z][a-z ]*? (?:in|of|at|for|to|with)) (?P<o>[A-Z].*)$", ""),
        (r"^The (?P<s>[\w][\w\- ]*?) is (?P<o>[A-Z].*)$", "office_holder"),
    )
)

#: The relation names the templates produce (a reader's vocabulary of relation words).
RELATIONS: tuple[str, ...] = tuple(
    sorted(
        {r for _, r in _RELATION_RULES if r and "{" not in r}
        | {
            "location",
            "created_by",
            "developed_by",
            "founded_by",
            "performed_by",
            "written_by",
            "produced_by",
            "author",
            "capital",
            "official_language",
            "original_language",
            "chairperson",
            "chief_executive_officer",
            "head_coach",
            "director",
        }
    )
)

_USER = re.compile(
    r"\bmy (?P<r>[\w][\w\- ]{0,40}?) (?:is|was|are|has become|is now) (?:now )?(?P<o>[^.,;!?]+)",
    re.IGNORECASE,
)
_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\d])")


def _location_key(obj: str) -> str:
    return snake(obj) + ".location"


_DATED = re.compile(r"^As of (?P<date>[A-Z][a-z]+ \d{1,2}, \d{4}), (?P<rest>.+)$")
_PREFIX = re.compile(r"^(?:(?:update|note|fyi):\s*|(?:per|according to) (?:the )?[^,]{1,60},\s*)", re.I)
_DERIVED = re.compile(
    r"^(?P<s>.+?) sits in (?P<o>.+?) because (?P=o) is the (?P<r>[a-z][a-z ]*?) of (?P<ps>.+)$", re.I
)
_FORGET = re.compile(
    r"^(?:please )?forget (?:what i (?:told|said to) you|what i said|everything i said) about "
    r"(?:the )?(?P<r>[a-z][a-z ]*?) of (?P<s>.+)$",
    re.I,
)
#: a statement withdrawn as a whole: "The report that the budget of the project is $50k was an error."
_RETRACTED = re.compile(
    r"^(?:correction: )?(?:the )?(?:earlier )?report that (?P<fact>the .+?) was (?:an? )?"
    r"(?:error|mistake|wrong|incorrect|false)$",
    re.I,
)
_DISTINCT = re.compile(
    r"^(?P<a>.+?) and (?P<b>.+?) are (?:two )?(?:different|distinct|separate) "
    r"(?:people|persons|entities|companies|projects|things)$",
    re.I,
)


def _sentence_facts(sentence: str) -> list[Fact]:
    s = sentence.strip().rstrip(".!").strip()
    if not s:
        return []
    m = _DATED.match(s)
    if m:
        try:
            when = datetime.strptime(m.group("date"), "%B %d, %Y").date().isoformat()
        except ValueError:
            when = None
        rest = m.group("rest")
        return [
            Fact(f.key, f.value, f.status, f.confirmed, when or f.valid_time, f.depends_on)
            for f in _sentence_facts(rest[:1].upper() + rest[1:])
        ]
    m = _DERIVED.match(s)
    if m:
        premise = f"{snake(m.group('ps'))}.{snake(m.group('r'))}"
        return [Fact(f"{snake(m.group('s'))}.room", m.group("o").strip(), depends_on=(premise,))]
    for pattern, group, status, confirmed in _LOCATION_RULES:
        m = pattern.match(s)
        if m:
            return [Fact(_location_key(m.group("obj")), m.group(group).strip(), status, confirmed)]
    m = _RETRACTED.match(s)
    if m:  # after the location rules, which read ALFWorld's own retraction template
        fact = m.group("fact")
        return [
            Fact(f.key, f.value, "withdrawn", valid_time=f.valid_time)
            for f in _sentence_facts(fact[:1].upper() + fact[1:])
        ]
    for pattern, relation in _RELATION_RULES:
        m = pattern.match(s)
        if m:
            groups = m.groupdict()
            rel = relation.format(groups.get("r") or "") if relation else snake(groups.get("r") or "")
            subject = snake(groups["s"])
            if subject and rel and groups["o"].strip():
                return [Fact(f"{subject}.{snake(rel)}", groups["o"].strip())]
    m = _PREFIX.match(s)
    if m and m.end() < len(s):
        rest = s[m.end() :]
        facts = _sentence_facts(rest[:1].upper() + rest[1:])
        if facts:
            return facts
    return [Fact(f"user.{snake(m.group('r'))}", m.group("o").strip()) for m in _USER.finditer(s)]


def extract_facts(text: str) -> list[Fact]:
    """Every fact the templates recognise in ``text``, in order (lines, then sentences)."""
    out: list[Fact] = []
    for line in text.splitlines():
        line = _NUMBERED.sub("", line).strip()
        if not line:
            continue
        facts = _sentence_facts(line)
        if facts:  # whole-line match first: keeps "taken from a to c, then put in b" intact
            out.extend(facts)
            continue
        for sentence in _SENTENCE.split(line):
            out.extend(_sentence_facts(sentence))
    return out


def extract_requests(text: str) -> Requests:
    """The forget requests and different-entity statements in ``text``, in order.

    >>> extract_requests("Forget what I told you about the gate code of the Hill Street garage.").forget
    ('the_hill_street_garage.gate_code',)
    >>> extract_requests("Anna Mark and Anna Marks are two different people.").distinct
    (('Anna Mark', 'Anna Marks'),)
    """
    forget: list[str] = []
    distinct: list[tuple[str, str]] = []
    for line in text.splitlines():
        for sentence in _SENTENCE.split(_NUMBERED.sub("", line).strip()):
            s = sentence.strip().rstrip(".!").strip()
            m = _FORGET.match(s)
            if m:
                forget.append(f"{snake(m.group('s'))}.{snake(m.group('r'))}")
                continue
            m = _DISTINCT.match(s)
            if m:
                distinct.append((m.group("a").strip(), m.group("b").strip()))
    return Requests(tuple(forget), tuple(distinct))
