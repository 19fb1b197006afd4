"""Provenance probes: generated cases for the failures that matter in production memories.

Five subsets, each ``n`` cases (default 140), deterministic from the seed (default 42): case ``i`` of a
subset draws from ``Random("{seed}/{subset}/case{i:03d}")``, and the factors a subset varies are set by
the case index so that every factor is counterbalanced. Each case asks a question before its critical
event and after it. Sentences are in :mod:`pmem.bench.probe_templates`.

- ``erasure``: a fact is stated once by the user (even cases) or twice, by the user and by a document
  (odd cases; who speaks first alternates). The user then asks to forget what they said about it.
  ``before_forget``: the value. ``forget_once``: the answer must not contain the value (gold empty,
  ``match="absent"``, the value in ``stale``). ``forget_twice``: the document's statement stands, so the
  value must still be given. The erased statement's text is in the question's ``params["erased_text"]``,
  and for ``forget_once`` its value in ``params["erased_value"]`` (the runner measures how many of
  their bytes the arm still holds). No other value of a case contains the value or is contained in it.
- ``authority``: a trusted source (``user`` or ``environment``) sets a value; an untrusted one (``web``
  or ``agent``) claims another value ``k`` times (``k`` = 1 or 4; question type ``after_claims_k{k}``,
  ``match="only"``: the trusted value, and not the claim). ``disclosure`` asks whether any report
  conflicts: the trusted value and the claim must both be named (the claim as an alternative).
- ``late-arrival``: three dated values arrive out of valid-time order (the last arrival is never the
  latest in valid time). ``current``: the latest in valid time; ``as_of``: the value on a date between
  two valid times (from history).
- ``stale-premise``: a person sits in a room because it is their team's home room; the team's room then
  changes. ``after_change`` is correct when the answer flags the old room as possibly out of date, or
  gives the new room (re-derived); never the old room unflagged (``match="flagged"``).
- ``merge``: two people whose names differ by one letter (``Anna Mark``, ``Anna Marks``) each get a
  value; a correction says they are different people (half the cases then update one of them).
  ``after_correction`` asks for each person's own value (``match="only"``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from datetime import date, timedelta

from pmem.bench import probe_templates as T
from pmem.bench._types import Event, History, Question

NAME = "provenance-probes"
SUBSETS: tuple[str, ...] = ("erasure", "authority", "late-arrival", "stale-premise", "merge")
SEED = 42
N_CASES = 140
CLAIM_COUNTS: tuple[int, ...] = (1, 4)
SOURCE = "GENERATED (pmem.bench._probes, seed 42): templated entity facts with source and valid-time metadata"

TRUSTED_SOURCES = ("user", "environment")
UNTRUSTED_SOURCES = ("web", "agent")
DOCUMENT_SOURCE = "document"
#: Source ranks a memory with source authority should use here (``jobs/provenance_probes.toml``): the
#: trusted sources and documents outrank the untrusted ones.
SOURCE_AUTHORITY: dict[str, int] = {
    **dict.fromkeys(TRUSTED_SOURCES, 2),
    DOCUMENT_SOURCE: 2,
    **dict.fromkeys(UNTRUSTED_SOURCES, 0),
}

PLACES = (
    "the Hill Street garage",
    "the Elm Road depot",
    "the Bay Avenue office",
    "the Cedar Lane flat",
    "the Oak Court storage unit",
    "the harbour boathouse",
    "the north warehouse",
    "the Mill Lane studio",
    "the Grove Park clubhouse",
    "the Kings Road gym",
    "the Station Square kiosk",
    "the Fern Hill cottage",
)
#: attribute -> digits of its value
SECRETS: dict[str, int] = {"gate code": 4, "alarm code": 6, "locker number": 3, "door code": 5}
DOCUMENTS = ("building notes", "facilities sheet", "handover memo", "property file")

PROJECTS = (
    "project Orion",
    "project Vega",
    "project Lyra",
    "project Draco",
    "project Hydra",
    "project Cetus",
    "project Pavo",
    "project Musca",
    "project Norma",
    "project Volans",
)
#: attribute -> (value pattern, lowest n, highest n + 1)
PROJECT_FACTS: dict[str, tuple[str, int, int]] = {
    "meeting room": ("room {n}", 2, 100),
    "budget": ("{n} thousand euros", 10, 900),
    "launch week": ("week {n}", 1, 53),
    "server rack": ("rack {n}", 1, 41),
}

SHOPS = (
    "the Pine Street bakery",
    "the Quay Road cafe",
    "the Market Lane florist",
    "the Abbey Road bookshop",
    "the Bridge Street deli",
    "the Castle Hill pharmacy",
    "the Dock Road bike shop",
    "the Rose Lane tailor",
)
SHOP_FACTS: dict[str, tuple[str, int, int]] = {
    "rent": ("{n} euros", 400, 3000),
    "delivery fee": ("{n} dollars", 2, 40),
    "head count": ("{n} people", 3, 60),
    "parking fee": ("{n} euros", 2, 30),
}
#: (first arrival, second, third) as indexes of the values in valid-time order; the last is never 2
ARRIVAL_ORDERS: tuple[tuple[int, int, int], ...] = ((0, 2, 1), (2, 0, 1), (1, 2, 0), (2, 1, 0))
START = date(2025, 3, 1)

TEAMS = ("Falcon", "Heron", "Osprey", "Kestrel", "Plover", "Curlew", "Merlin", "Avocet")
PERSONS = (
    "Dana Reyes",
    "Omar Haddad",
    "Lena Fischer",
    "Ravi Menon",
    "Chloe Dubois",
    "Kenji Sato",
    "Nadia Petrova",
    "Tomas Lind",
    "Grace Okafor",
    "Ivan Horvat",
)
HOME_ROOM = "home room"
ROOMS = ("room {n}", 100, 1000)
FLOORS = ("floor {n}", 1, 10)

#: surnames that are another surname plus "s": the pair is a near-identical name
MERGE_SURNAMES = (
    "Mark",
    "Adam",
    "Edward",
    "Robert",
    "Richard",
    "Peter",
    "Phillip",
    "Stephen",
    "Matthew",
    "Daniel",
    "Roger",
    "Simon",
    "Evan",
    "Owen",
    "Andrew",
    "Collin",
)
FIRST_NAMES = (
    "Anna",
    "Ben",
    "Clara",
    "David",
    "Elena",
    "Farid",
    "Greta",
    "Hugo",
    "Iris",
    "Jonas",
    "Kira",
    "Leo",
)
PERSON_FACTS: dict[str, int] = {"phone extension": 4, "badge number": 5, "desk number": 3}


def _digits(rng: random.Random, n: int, used: set[str]) -> str:
    """A fresh number of ``n`` digits that neither contains nor is contained in one used before (so a
    byte search for one value never finds another)."""
    while True:
        v = str(rng.randrange(10 ** (n - 1), 10**n))
        if not any(v in u or u in v for u in used):
            used.add(v)
            return v


def _number(rng: random.Random, spec: tuple[str, int, int], used: set[str]) -> str:
    pattern, lo, hi = spec
    while True:
        v = pattern.format(n=rng.randrange(lo, hi))
        if v not in used:
            used.add(v)
            return v


def _events(items: Sequence[tuple[str, str] | tuple[str, str, str]]) -> tuple[Event, ...]:
    """(text, source[, valid_time]) -> events in order."""
    out = []
    for i, item in enumerate(items):
        text, source = item[0], item[1]
        valid = item[2] if len(item) == 3 else None
        out.append(Event(index=i, text=text, source=source, valid_time=valid))
    return tuple(out)


def _history(
    subset: str, i: int, seed: int, events: tuple[Event, ...], qs: list[Question], **params: object
) -> History:
    return History(
        id=f"{NAME}/{subset}/case{i:03d}",
        benchmark=NAME,
        subset=subset,
        events=events,
        questions=tuple(qs),
        params={**params, "case": i, "seed": seed},
    )


# ------------------------------------------------------------------------------------------ erasure


def _erasure(i: int, seed: int) -> History:
    rng = random.Random(f"{seed}/erasure/case{i:03d}")
    statements = 1 if i % 2 == 0 else 2
    user_first = (i // 2) % 2 == 0
    place, *others = rng.sample(PLACES, 4)
    attr = rng.choice(list(SECRETS))
    used: set[str] = set()
    value = _digits(rng, SECRETS[attr], used)
    distractors = [
        (T.FACT.format(attr=a, entity=p, value=_digits(rng, SECRETS[a], used)), "user")
        for p, a in ((p, rng.choice(list(SECRETS))) for p in others)
    ]
    stated = T.FACT.format(attr=attr, entity=place, value=value)
    said: list[tuple[str, str]] = [(stated, "user")]
    if statements == 2:
        doc = T.SOURCED_FACT.format(document=rng.choice(DOCUMENTS), attr=attr, entity=place, value=value)
        said = (
            [(stated, "user"), (doc, DOCUMENT_SOURCE)]
            if user_first
            else [(doc, DOCUMENT_SOURCE), (stated, "user")]
        )
    items = [distractors[0], *said, distractors[1]]
    before = len(items) - 1
    items += [(T.FORGET.format(attr=attr, entity=place), "user"), distractors[2]]
    events = _events(items)
    key = T.fact_key(place, attr)
    question = T.Q_VALUE.format(attr=attr, entity=place)
    qs = [Question(f"case{i:03d}-before", question, (value,), "before_forget", before, stale_key=key)]
    if statements == 1:
        # the value was stated only in the erased statement: it must be gone too
        erased = {"erased_text": stated, "erased_value": value}
        qs.append(
            Question(
                f"case{i:03d}-after",
                question,
                (),
                "forget_once",
                len(events) - 1,
                stale=(value,),
                params=erased,
                match="absent",
                stale_key=key,
            )
        )
    else:
        erased = {"erased_text": stated}
        qs.append(
            Question(
                f"case{i:03d}-after",
                question,
                (value,),
                "forget_twice",
                len(events) - 1,
                params=erased,
                stale_key=key,
            )
        )
    return _history("erasure", i, seed, events, qs, statements=statements, user_first=user_first)


# ---------------------------------------------------------------------------------------- authority


def _authority(i: int, seed: int) -> History:
    rng = random.Random(f"{seed}/authority/case{i:03d}")
    k = CLAIM_COUNTS[i % len(CLAIM_COUNTS)]
    trusted = TRUSTED_SOURCES[(i // 2) % 2]
    untrusted = UNTRUSTED_SOURCES[(i // 4) % 2]
    phrased_as_update = (i // 8) % 2 == 1
    project, *others = rng.sample(PROJECTS, 4)
    attr = rng.choice(list(PROJECT_FACTS))
    used: set[str] = set()
    value = _number(rng, PROJECT_FACTS[attr], used)
    claim = _number(rng, PROJECT_FACTS[attr], used)
    claim_text = (T.UPDATE_FACT if phrased_as_update else T.FACT).format(
        attr=attr, entity=project, value=claim
    )
    distractors = [
        (T.FACT.format(attr=a, entity=p, value=_number(rng, PROJECT_FACTS[a], used)), trusted)
        for p, a in ((p, rng.choice(list(PROJECT_FACTS))) for p in others)
    ]
    items: list[tuple[str, str]] = [
        distractors[0],
        (T.FACT.format(attr=attr, entity=project, value=value), trusted),
    ]
    items.append(distractors[1])
    before = len(items) - 1
    for j in range(k):
        items.append((claim_text, untrusted))
        if j == 0:
            items.append(distractors[2])
    events = _events(items)
    key = T.fact_key(project, attr)
    last = len(events) - 1
    qs = [
        Question(
            f"case{i:03d}-before",
            T.Q_VALUE.format(attr=attr, entity=project),
            (value,),
            "before_claims",
            before,
            stale_key=key,
        ),
        Question(
            f"case{i:03d}-after",
            T.Q_VALUE.format(attr=attr, entity=project),
            (value,),
            f"after_claims_k{k}",
            last,
            stale=(claim,),
            match="only",
            stale_key=key,
        ),
        Question(
            f"case{i:03d}-disclosure",
            T.Q_CONFLICT.format(attr=attr, entity=project),
            (value, claim),
            "disclosure",
            last,
            match="all",
            stale_key=key,
        ),
    ]
    return _history(
        "authority", i, seed, events, qs, k=k, trusted=trusted, untrusted=untrusted, update=phrased_as_update
    )


# ------------------------------------------------------------------------------------- late arrival


def _late_arrival(i: int, seed: int) -> History:
    rng = random.Random(f"{seed}/late-arrival/case{i:03d}")
    order = ARRIVAL_ORDERS[i % len(ARRIVAL_ORDERS)]
    gap = (i // len(ARRIVAL_ORDERS)) % 2  # the as-of date falls between valid times gap and gap + 1
    shop, *others = rng.sample(SHOPS, 3)
    attr = rng.choice(list(SHOP_FACTS))
    used: set[str] = set()
    day = START + timedelta(days=rng.randrange(0, 60))
    valid: list[date] = []
    for _ in range(3):
        day += timedelta(days=rng.randrange(6, 30))
        valid.append(day)
    values = [_number(rng, SHOP_FACTS[attr], used) for _ in range(3)]
    asked = valid[gap] + timedelta(days=rng.randrange(1, (valid[gap + 1] - valid[gap]).days))

    def dated(entity: str, a: str, v: str, when: date) -> tuple[str, str, str]:
        return (
            T.DATED_FACT.format(date=T.text_date(when.isoformat()), attr=a, entity=entity, value=v),
            "user",
            when.isoformat(),
        )

    distractors = []
    for p in others:
        a = rng.choice(list(SHOP_FACTS))
        distractors.append(
            dated(p, a, _number(rng, SHOP_FACTS[a], used), START + timedelta(days=rng.randrange(0, 150)))
        )
    arrivals = [dated(shop, attr, values[j], valid[j]) for j in order]
    items = [distractors[0], arrivals[0], arrivals[1], distractors[1]]
    before = len(items) - 1
    items += [arrivals[2]]
    events = _events(items)
    key = T.fact_key(shop, attr)
    seen = max(order[:2])  # the latest in valid time among the first two arrivals
    question = T.Q_VALUE.format(attr=attr, entity=shop)
    last = len(events) - 1
    qs = [
        Question(
            f"case{i:03d}-before",
            question,
            (values[seen],),
            "before_late",
            before,
            stale=tuple(values[j] for j in order[:2] if j != seen),
            stale_key=key,
        ),
        Question(
            f"case{i:03d}-current",
            question,
            (values[2],),
            "current",
            last,
            stale=(values[0], values[1]),
            stale_key=key,
        ),
        Question(
            f"case{i:03d}-as-of",
            T.Q_AS_OF.format(attr=attr, entity=shop, date=T.text_date(asked.isoformat())),
            (values[gap],),
            "as_of",
            last,
            stale=tuple(v for j, v in enumerate(values) if j != gap),
            params={"as_of": asked.isoformat()},
            stale_key=key,
        ),
    ]
    return _history("late-arrival", i, seed, events, qs, order="".join(map(str, order)), gap=gap)


# ------------------------------------------------------------------------------------ stale premise


def _stale_premise(i: int, seed: int) -> History:
    rng = random.Random(f"{seed}/stale-premise/case{i:03d}")
    spaced = i % 2 == 1  # distractors between the derived fact and the premise's change
    team, other_team = rng.sample(TEAMS, 2)
    person, other_person = rng.sample(PERSONS, 2)
    used: set[str] = set()
    old, new, other_room = (_number(rng, ROOMS, used) for _ in range(3))
    entity, other_entity = f"team {team}", f"team {other_team}"
    premise = T.FACT.format(attr=HOME_ROOM, entity=entity, value=old)
    items: list[tuple[str, str]] = [
        (T.FACT.format(attr=HOME_ROOM, entity=other_entity, value=other_room), "user"),
        (premise, "user"),
        (T.DERIVED.format(person=other_person, room=other_room, attr=HOME_ROOM, entity=other_entity), "user"),
        (T.DERIVED.format(person=person, room=old, attr=HOME_ROOM, entity=entity), "user"),
    ]
    before = len(items) - 1
    change = (T.UPDATE_FACT.format(attr=HOME_ROOM, entity=entity, value=new), "user")
    if spaced:
        items += [
            (
                T.FACT.format(attr="floor", entity=other_entity, value=_number(rng, FLOORS, used)),
                "user",
            )
        ]
    items.append(change)
    events = _events(items)
    key = f"{T.fact_key(person, 'room')}"
    question = T.Q_SEAT.format(person=person)
    qs = [
        Question(f"case{i:03d}-before", question, (old,), "before_change", before, stale_key=key),
        Question(
            f"case{i:03d}-after",
            question,
            (new,),
            "after_change",
            len(events) - 1,
            stale=(old,),
            match="flagged",
            params={"premise": T.fact_key(entity, HOME_ROOM)},
            stale_key=key,
        ),
    ]
    return _history("stale-premise", i, seed, events, qs, spaced=spaced)


# -------------------------------------------------------------------------------------------- merge


def _merge(i: int, seed: int) -> History:
    rng = random.Random(f"{seed}/merge/case{i:03d}")
    first_plain = i % 2 == 0  # which of the two names is stated first
    updated = (i // 2) % 2 == 1  # one of them gets a new value after the correction
    surname = MERGE_SURNAMES[(i // 4) % len(MERGE_SURNAMES)]
    first = rng.choice(FIRST_NAMES)
    a, b = f"{first} {surname}", f"{first} {surname}s"
    if not first_plain:
        a, b = b, a
    attr = rng.choice(list(PERSON_FACTS))
    used: set[str] = set()
    value = {a: _digits(rng, PERSON_FACTS[attr], used), b: _digits(rng, PERSON_FACTS[attr], used)}
    others = rng.sample(PERSONS, 3)
    distractors = [
        (T.FACT.format(attr=attr, entity=p, value=_digits(rng, PERSON_FACTS[attr], used)), "user")
        for p in others
    ]
    items: list[tuple[str, str]] = [
        (T.FACT.format(attr=attr, entity=a, value=value[a]), "user"),
        distractors[0],
        (T.FACT.format(attr=attr, entity=b, value=value[b]), "user"),
        distractors[1],
    ]
    before = len(items) - 1
    stated = dict(value)
    pair = (a, b) if rng.random() < 0.5 else (b, a)
    items.append((T.DISTINCT.format(a=pair[0], b=pair[1]), "user"))
    if updated:
        who = rng.choice((a, b))
        value[who] = _digits(rng, PERSON_FACTS[attr], used)
        items.append((T.UPDATE_FACT.format(attr=attr, entity=who, value=value[who]), "user"))
    items.append(distractors[2])
    events = _events(items)
    last = len(events) - 1
    qs = [
        Question(
            f"case{i:03d}-before",
            T.Q_PERSON.format(attr=attr, person=a),
            (stated[a],),
            "before_correction",
            before,
            stale_key=T.fact_key(a, attr),
        )
    ]
    for tag, name, other in (("a", a, b), ("b", b, a)):
        qs.append(
            Question(
                f"case{i:03d}-after-{tag}",
                T.Q_PERSON.format(attr=attr, person=name),
                (value[name],),
                "after_correction",
                last,
                stale=(value[other],),
                match="only",
                stale_key=T.fact_key(name, attr),
            )
        )
    return _history("merge", i, seed, events, qs, first_plain=first_plain, updated=updated, surname=surname)


#: question parameters naming erased content: the statement's text and, where no other statement made
#: it, its value
ERASED_PARAMS = ("erased_text", "erased_value")


def artifact_bytes(held: bytes, question: Question) -> int | None:
    """Bytes of the question's erased content found in ``held`` (what an arm retains); None when the
    question names none. The statement's text counts wherever it occurs; its value only where it stands
    as a token (a 3-digit value inside a hash or a longer number is not that value).

    >>> q = Question("q", "?", (), "forget_once", 0, params={"erased_text": "Code is 413.", "erased_value": "413"})
    >>> artifact_bytes(b"x 413 y c9413f Code is 413.Next", q)
    18
    """
    if not question.params:
        return None
    text, value = (question.params.get(k) for k in ERASED_PARAMS)
    if not (isinstance(text, str) and text) and not (isinstance(value, str) and value):
        return None
    total = 0
    if isinstance(text, str) and text:
        total += held.count(text.encode()) * len(text.encode())
    if isinstance(value, str) and value:
        needle = value.encode()
        token = re.compile(rb"(?<![0-9A-Za-z])" + re.escape(needle) + rb"(?![0-9A-Za-z])")
        total += len(token.findall(held)) * len(needle)
    return total


_BUILDERS = {
    "erasure": _erasure,
    "authority": _authority,
    "late-arrival": _late_arrival,
    "stale-premise": _stale_premise,
    "merge": _merge,
}


def iter_probes(subset: str, *, seed: int = SEED, cases: int = N_CASES) -> Iterator[History]:
    """The histories of one subset, case by case."""
    if subset not in SUBSETS:
        msg = f"unknown provenance-probes subset {subset!r} (known: {', '.join(SUBSETS)})"
        raise ValueError(msg)
    if cases < 1:
        msg = f"provenance-probes: cases={cases} must be >= 1"
        raise ValueError(msg)
    build = _BUILDERS[subset]
    for i in range(cases):
        yield build(i, seed)
