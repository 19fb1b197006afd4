"""Turning write units into facts: the extraction call (shared by every fact-level memory design) and
the template parsers of the oracle write path.

Extraction output is validated, never trusted: a reply that is not JSON, or facts with an empty key or
value, are dropped and the drop is written to the write log with its reason. Keys are
normalized to lower-case snake_case parts joined by dots; an unknown status reads as ``asserted``.

Each fact cites the event of its unit it came from (:func:`cited_event`): a dialogue's turns are shown
to a citing prompt numbered, and the reply names the turn of each fact; the text checks the name (a
turn that holds the value word for word wins over a named turn that does not), and where no turn was
named, or a named one is out of range, the turn holding the value, else the one sharing most words
with the fact.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pmem.bench import fact_key, parse_fact
from pmem.bench import probe_templates as P
from pmem.bench.alfworld_templates import location_key, parse_event
from pmem.graph import key_problem
from pmem.memory._writer import completion_json
from pmem.memory.prompts import ASSERTION_STATUSES, cites_turns

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pmem.bench import Event
    from pmem.memory._writer import Writer

_SNAKE = re.compile(r"[\W_]+", re.UNICODE)
_WORD = re.compile(r"\w{3,}", re.UNICODE)


@dataclass(frozen=True)
class Fact:
    """One extracted (or template-parsed) fact of a write unit."""

    key: str
    value: str | None
    status: str = "asserted"
    event: int = -1  # attributed event index (-1: none found)
    #: oracle path only: the template's meaning (``update``, ``retraction``, ``conflict_report`` ...)
    kind: str | None = None
    #: when the fact became true (ISO 8601), where the text says
    valid_time: str | None = None
    #: keys of the facts this one was derived from (as extracted: not yet routed)
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Extraction:
    unit: list[Event]
    text: str
    facts: list[Fact]
    error: str | None = None
    #: keys the user asked to forget what they said about (as extracted)
    forget: tuple[str, ...] = ()
    #: pairs of names the text says are different entities
    distinct: tuple[tuple[str, str], ...] = ()


def normalize_key(key: str) -> str:
    parts = [_SNAKE.sub("_", p.strip().lower()).strip("_") for p in str(key).split(".")]
    return ".".join(p for p in parts if p)


def event_line(e: Event) -> str:
    """An event as one line of text (dated and with its speaker in dialogue)."""
    text = " ".join(e.text.split()) if e.session_id is not None else e.text
    if e.session_id is not None or e.time is not None:
        who = f"{e.role}: " if e.role else ""
        when = f"[{e.time}] " if e.time else ""
        return f"{when}{who}{text}"
    return text


def unit_text(unit: list[Event]) -> str:
    return "\n".join(event_line(e) for e in unit)


def numbers_turns(unit: list[Event]) -> bool:
    """Whether a citing prompt is shown ``unit``'s turns numbered: a dialogue of more than one turn."""
    return len(unit) > 1 and any(e.session_id is not None for e in unit)


def extraction_sections(unit: list[Event], numbered: bool = False) -> dict[str, str]:
    """The extraction prompt's sections of ``unit``: an event's time is its own ``TIME`` section, not
    a ``[time]`` prefix of its text, so that it never reaches a key or a value (a dialogue keeps each
    turn's stamp: its turns are dated one by one). ``numbered``: a dialogue's turns are numbered from 1
    (``Turn 3: ...``, unlike any benchmark's own numbering), for a prompt whose facts name their turn
    (:func:`numbers_turns`).

    >>> from pmem.bench import Event
    >>> extraction_sections([Event(0, "Alice moved to Berlin.", time="2026-01-01T00:00:01")])
    {'TEXT': 'Alice moved to Berlin.', 'TIME': '2026-01-01T00:00:01'}
    >>> turns = [Event(i, t, session_id="s1", role=r) for i, (r, t) in enumerate([("Ann", "Hi."), ("Bo", "I moved.")])]
    >>> print(extraction_sections(turns, numbered=True)["TEXT"])
    Turn 1: Ann: Hi.
    Turn 2: Bo: I moved.
    """
    if numbered and numbers_turns(unit):
        return {"TEXT": "\n".join(f"Turn {i}: {event_line(e)}" for i, e in enumerate(unit, start=1))}
    if any(e.session_id is not None for e in unit) or all(e.time is None for e in unit):
        return {"TEXT": unit_text(unit)}
    times = dict.fromkeys(str(e.time) for e in unit if e.time is not None)
    return {
        "TEXT": "\n".join(e.text for e in unit),
        "TIME": " to ".join((next(iter(times)), list(times)[-1])) if len(times) > 1 else next(iter(times)),
    }


def attribute(unit: list[Event], value: str, used: set[int]) -> int:
    """The event of ``unit`` whose text contains ``value`` (first unused one first), else -1."""
    v = value.strip().lower()
    if not v:
        return -1
    hits = [e.index for e in unit if v in e.text.lower()]
    for idx in hits:
        if idx not in used:
            used.add(idx)
            return idx
    return hits[-1] if hits else -1


def _overlap_turn(unit: list[Event], words: str) -> int:
    """The event of ``unit`` that shares the most words with ``words`` (the first of a tie), else -1."""
    wanted = set(_WORD.findall(words.lower()))
    best, best_shared = -1, 0
    for e in unit:
        shared = len(wanted & set(_WORD.findall(e.text.lower())))
        if shared > best_shared:
            best, best_shared = e.index, shared
    return best


def cited_event(unit: list[Event], key: str, value: str, named: Any, used: set[int]) -> int:
    """The event of ``unit`` a fact cites: the turn the reply named (``named``, 1-based, when the turns
    were numbered; anything else is no name) unless the value stands word for word in other turns only,
    whose first unused one is cited then (:func:`attribute`); with no usable name, that turn, else the
    turn sharing most words with the key and value, else -1.

    >>> from pmem.bench import Event
    >>> unit = [Event(5, "I went to a support group yesterday."), Event(6, "It was about LGBTQ people.")]
    >>> cited_event(unit, "caroline.support_group", "LGBTQ support group", 2, set())
    6
    >>> cited_event(unit, "caroline.event", "support group", 2, set())  # the text overrules the name
    5
    >>> cited_event(unit, "caroline.event", "went to a support group", None, set())
    5
    >>> cited_event(unit, "caroline.mood", "about people", "two", set())  # no number: the closest turn
    6
    """
    if not isinstance(named, int) or isinstance(named, bool) or not 1 <= named <= len(unit):
        named = None
    v = value.strip().lower()
    holding = [e.index for e in unit if v and v in e.text.lower()]
    if named is not None and (not holding or unit[named - 1].index in holding):
        return unit[named - 1].index
    if holding:
        return attribute(unit, value, used)
    return _overlap_turn(unit, f"{key.replace('.', ' ').replace('_', ' ')} {value}")


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _valid_time(raw: Any) -> str | None:
    """An ISO date or date-time, else None (a malformed optional field is ignored, not fatal)."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        datetime.fromisoformat(raw.strip())
    except ValueError:
        return None
    return raw.strip()


def _keys(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    keys = (normalize_key(str(k)) for k in raw if isinstance(k, str))
    return tuple(dict.fromkeys(k for k in keys if k and not key_problem(k)))


def _pairs(raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for pair in raw:
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, str) and n.strip() for n in pair):
            out.append((pair[0].strip(), pair[1].strip()))
    return tuple(out)


def parse_extraction(
    unit: list[Event], payload: dict[str, Any] | None, numbered: bool = False
) -> tuple[list[Fact], str | None]:
    """The facts of a reply (``numbered``: the unit's turns were shown numbered, so a fact's ``turn``
    names the one it cites), and why some were dropped, if any were."""
    if payload is None:
        return [], "extract: reply is not a JSON object"
    raw = payload.get("facts")
    if not isinstance(raw, list):
        return [], "extract: reply has no 'facts' list"
    out: list[Fact] = []
    dropped = 0
    used: set[int] = set()
    for item in raw:
        if not isinstance(item, dict):
            dropped += 1
            continue
        key = normalize_key(str(item.get("key") or ""))
        value = item.get("value")
        value = "" if value is None else str(value).strip()
        if not key or not value or key_problem(key) or not _storable(value):
            dropped += 1  # a JSON "\udc80" escape decodes to a lone surrogate, which no file can hold
            continue
        status = str(item.get("status") or "asserted").strip().lower()
        if status not in ASSERTION_STATUSES:
            status = "asserted"
        premises = tuple(k for k in _keys(item.get("depends_on")) if k != key)
        valid = _valid_time(item.get("valid_time"))
        event = cited_event(unit, key, value, item.get("turn") if numbered else None, used)
        out.append(Fact(key, value, status, event, None, valid, premises))
    return out, (f"extract: dropped {dropped} malformed fact(s)" if dropped else None)


def parse_requests(payload: dict[str, Any] | None) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The reply's ``forget`` keys and ``distinct`` name pairs (malformed entries are left out)."""
    if payload is None:
        return (), ()
    return _keys(payload.get("forget")), _pairs(payload.get("distinct"))


async def extract_units(
    writer: Writer, units: list[list[Event]], prompt: str = "extract"
) -> list[Extraction]:
    """One extraction call per unit (prompt template ``prompt``), run concurrently (bounded by the
    writer's concurrency); results in arrival order. A unit whose reply held no usable fact is logged as
    a noop with its reason.

    A reply cut at the reply limit (``finish_reason == "length"``) lost the facts after the cut, and one
    that is no JSON object lost them all (asked again as it was, a model at temperature 0 gives it
    again), so neither is used as it is: a unit of several events is split in two halves, each asked
    again (and split again while its reply fails so), their facts making the unit's; each split is
    logged as a noop saying why. A single event's failed reply cannot be split: its unit is a noop with
    that reason."""
    sem = asyncio.Semaphore(writer.concurrency)
    citing = cites_turns(prompt)

    async def ask(unit: list[Event]) -> Extraction:
        text = unit_text(unit)
        numbered = citing and numbers_turns(unit)
        async with sem:
            c = await writer.call(prompt, **extraction_sections(unit, numbered))
        if c.error is not None:  # the model layer let it through: the prompt does not fit the context
            return Extraction(unit, text, [], f"extract: {c.error}")
        payload = None if c.truncated else completion_json(c)
        if payload is None:
            # a reply cut at its limit lost the facts after the cut; one that is no JSON object lost all
            why = (
                f"the reply was cut at the reply limit ({c.completion_tokens} tokens)"
                if c.truncated
                else "the reply is not a JSON object"
            )
            if len(unit) == 1:
                return Extraction(unit, text, [], f"extract: {why} on one event: nothing to split")
            half = len(unit) // 2
            writer.record(
                "noop",
                None,
                None,
                False,
                f"extract: {why}: the unit's {len(unit)} events asked again as {half} and {len(unit) - half}",
                event=unit[0].index,
            )
            parts = await asyncio.gather(ask(unit[:half]), ask(unit[half:]))
            return _joined(unit, text, parts)
        facts, error = parse_extraction(unit, payload, numbered)
        forget, distinct = parse_requests(payload)
        return Extraction(unit, text, facts, error, forget, distinct)

    out = await asyncio.gather(*(ask(u) for u in units))
    for ex in out:
        if ex.error:
            writer.record("noop", None, None, False, ex.error, event=ex.unit[0].index)
    return list(out)


def _joined(unit: list[Event], text: str, parts: Sequence[Extraction]) -> Extraction:
    """One extraction of ``unit`` from the extractions of its parts, in order."""
    errors = list(dict.fromkeys(p.error for p in parts if p.error))  # each reason once
    return Extraction(
        unit,
        text,
        [f for p in parts for f in p.facts],
        "; ".join(errors) if errors else None,
        tuple(k for p in parts for k in p.forget),
        tuple(d for p in parts for d in p.distinct),
    )


# ---------------------------------------------------------------------------- oracle (templates)


def template_facts(unit: list[Event]) -> list[Fact]:
    """The oracle write path: facts from the benchmarks' own template parsers, no model.

    The provenance probes' parser comes before FactConsolidation's, whose catch-all template would take
    the probes' sentences (and is not tried on fact streams, ``source == "fact"``, which it cannot
    match: their lines are numbered)."""
    return template_extraction(unit).facts


def template_extraction(unit: list[Event]) -> Extraction:
    """:func:`template_facts`, and the provenance probes' forget and different-entity requests."""

    out: list[Fact] = []
    forget: list[str] = []
    distinct: list[tuple[str, str]] = []
    for e in unit:
        if e.source != "fact":
            probe = P.parse_event(e.text)
            if probe is not None:
                name, f = probe
                if name == "forget":
                    forget.append(P.fact_key(f["entity"], f["attr"]))
                elif name == "distinct":
                    distinct.append((f["a"], f["b"]))
                elif name == "derived":
                    premise = P.fact_key(f["entity"], f["attr"])
                    key = P.fact_key(f["person"], "room")
                    out.append(Fact(key, f["room"], "asserted", e.index, "derived", depends_on=(premise,)))
                else:
                    valid = P.iso_date(f["date"]) if name == "dated_fact" else None
                    key = P.fact_key(f["entity"], f["attr"])
                    out.append(Fact(key, f["value"], "asserted", e.index, name, valid_time=valid))
                continue
        ev = parse_event(e.text)
        if ev is not None:
            name, f = ev
            key = location_key(f["obj"])
            value = {
                "stale_record": f.get("loc"),
                "update": f.get("b"),
                "update_no_origin": f.get("loc"),
                "two_step": f.get("b"),
                "retraction": f.get("v2"),
                "conflict_report": f.get("loc"),
                "confirmation": f.get("loc"),
            }[name]
            status = {"retraction": "withdrawn", "conflict_report": "reported"}.get(name, "asserted")
            out.append(Fact(key, value, status, e.index, kind=name))
            continue
        parsed = parse_fact(e.text)
        if parsed is not None:
            out.append(Fact(fact_key(parsed[0], parsed[1]), parsed[2], "asserted", e.index, kind="fact"))
    return Extraction(unit, unit_text(unit), out, None, tuple(forget), tuple(distinct))


#: How a config brings a real model (``pmem ingest --config``, a sweep): :func:`no_fact_reason`'s default
CONFIG_REMEDY = (
    "for ordinary text give a config whose [models.agent] is a real model (pmem ingest --config, "
    "a sweep's config; docs/models.md; jobs/cpu_llm.toml runs one on this CPU)"
)


def no_fact_reason(agent_backend: str, request_log: str, remedy: str = CONFIG_REMEDY) -> str:
    """Why a write path that read text extracted no fact: for the default agent, what it can read (the
    benchmarks' sentence templates) and ``remedy``, how to bring a real model; else where its replies
    are logged.

    >>> no_fact_reason("heuristic", "requests/")[:60]
    'the default agent (heuristic, no LLM) understands only the b'
    """
    if agent_backend == "heuristic":
        return (
            "the default agent (heuristic, no LLM) understands only the benchmarks' sentence templates "
            '("Update: apple 1 has been moved from table 1 to fridge 1.", "The city of Alice is Paris."); '
            + remedy
        )
    return f"the agent's replies held no fact (see the request log in {request_log})"
