"""provenance-probes: every question's gold recomputed from its case's events alone, and the scoring rules.

The reference below reads nothing but the events (their text through the templates' parser, their
``source`` and ``valid_time``) and the question's text, and derives each answer from the definitions in
the issue: the generator's own bookkeeping is never consulted.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from pmem.bench import iter_histories, score_question
from pmem.bench import probe_templates as T
from pmem.bench._probes import SUBSETS
from pmem.bench._types import History, Question

RANKS = {"user": 2, "environment": 2, "document": 2, "web": 0, "agent": 0}
_Q_VALUE = re.compile(r"^What is the (?P<attr>[a-z ]+?) of (?P<entity>.+)\?$")
_Q_CONFLICT = re.compile(
    r"^Is there any conflicting report about the (?P<attr>[a-z ]+?) of (?P<entity>.+)\?$"
)
_Q_AS_OF = re.compile(
    r"^What was the (?P<attr>[a-z ]+?) of (?P<entity>.+) on (?P<date>[A-Z][a-z]+ \d+, \d{4})\?$"
)
_Q_SEAT = re.compile(r"^Which room does (?P<person>.+) sit in\?$")
_Q_PERSON = re.compile(r"^Which (?P<attr>[a-z ]+?) does (?P<entity>.+) have\?$")


def _statements(h: History, upto: int) -> list[dict[str, str]]:
    """Every parsed event up to index ``upto``, with its key, source and valid time."""
    out = []
    for e in h.events[: upto + 1]:
        parsed = T.parse_event(e.text)
        assert parsed is not None, f"{h.id}: event {e.index} matches no template: {e.text!r}"
        name, f = parsed
        row = {"name": name, "source": e.source, "index": str(e.index), **f}
        if "attr" in f and "entity" in f:
            row["key"] = T.fact_key(f["entity"], f["attr"])
        if e.valid_time is not None:
            row["valid"] = e.valid_time
            assert T.iso_date(f["date"]) == e.valid_time, (
                f"{h.id}: event {e.index} text and metadata disagree"
            )
        out.append(row)
    return out


def _asked(q: Question) -> dict[str, str]:
    for pattern in (_Q_VALUE, _Q_CONFLICT, _Q_AS_OF, _Q_SEAT, _Q_PERSON):
        m = pattern.match(q.text)
        if m:
            return m.groupdict()
    raise AssertionError(f"question {q.id}: no known form: {q.text!r}")


def _values(rows: list[dict[str, str]], key: str) -> list[dict[str, str]]:
    return [r for r in rows if r.get("key") == key and "value" in r]


def _reference(h: History, q: Question) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(gold, stale) of ``q`` from the events up to ``q.after_event``."""
    rows = _statements(h, q.after_event)
    asked = _asked(q)
    if h.subset == "erasure":
        key = T.fact_key(asked["entity"], asked["attr"])
        said = _values(rows, key)
        forgotten = {r["source"] for r in rows if r["name"] == "forget" and r["key"] == key}
        kept = [r for r in said if r["source"] not in forgotten]
        if kept:
            return (kept[-1]["value"],), ()
        return (), tuple(dict.fromkeys(r["value"] for r in said))
    if h.subset == "authority":
        key = T.fact_key(asked["entity"], asked["attr"])
        said = _values(rows, key)
        top = max(RANKS[r["source"]] for r in said)
        trusted = [r["value"] for r in said if RANKS[r["source"]] == top][-1]
        claims = tuple(dict.fromkeys(r["value"] for r in said if r["value"] != trusted))
        if q.qtype == "disclosure":
            return (trusted, *claims), ()
        return (trusted,), claims
    if h.subset == "late-arrival":
        key = T.fact_key(asked["entity"], asked["attr"])
        said = sorted(_values(rows, key), key=lambda r: r["valid"])
        if "date" in asked:
            on = T.iso_date(asked["date"])
            gold = [r["value"] for r in said if r["valid"] <= on][-1]
        else:
            gold = said[-1]["value"]
        return (gold,), tuple(r["value"] for r in said if r["value"] != gold)
    if h.subset == "stale-premise":
        derived = [r for r in rows if r["name"] == "derived" and r["person"] == asked["person"]][-1]
        premise = T.fact_key(derived["entity"], derived["attr"])
        now = _values(rows, premise)[-1]["value"]
        if now == derived["room"]:
            return (derived["room"],), ()
        return (now,), (derived["room"],)
    if h.subset == "merge":
        key = T.fact_key(asked["entity"], asked["attr"])
        gold = _values(rows, key)[-1]["value"]
        distinct = [r for r in rows if r["name"] == "distinct" and asked["entity"] in (r["a"], r["b"])]
        if not distinct:
            return (gold,), ()
        other = distinct[-1]["b"] if distinct[-1]["a"] == asked["entity"] else distinct[-1]["a"]
        return (gold,), (_values(rows, T.fact_key(other, asked["attr"]))[-1]["value"],)
    raise AssertionError(h.subset)


@pytest.mark.parametrize("subset", SUBSETS)
def test_every_gold_is_recomputed_from_the_events_alone(subset: str) -> None:
    histories = list(iter_histories("provenance-probes", subset))
    assert len(histories) == 140
    checked = 0
    for h in histories:
        for q in h.questions:
            gold, stale = _reference(h, q)
            if q.match == "all":  # a disclosure: the values in any order
                assert set(q.gold) == set(gold), (h.id, q.id)
            else:
                assert q.gold == gold, (h.id, q.id, q.gold, gold)
                assert set(q.stale) == set(stale), (h.id, q.id, q.stale, stale)
            checked += 1
    assert checked == sum(len(h.questions) for h in histories) >= 280


def test_cases_are_counterbalanced_and_deterministic() -> None:
    def factor(subset: str, name: str) -> Counter[object]:
        return Counter(h.params[name] for h in iter_histories("provenance-probes", subset))

    assert factor("erasure", "statements") == Counter({1: 70, 2: 70})
    assert factor("authority", "k") == Counter({1: 70, 4: 70})
    assert factor("authority", "trusted") == Counter({"user": 70, "environment": 70})
    assert set(factor("authority", "untrusted")) == {"web", "agent"}
    assert factor("late-arrival", "order") == Counter({"021": 35, "201": 35, "120": 35, "210": 35})
    assert factor("late-arrival", "gap") == Counter({0: 72, 1: 68})
    assert factor("stale-premise", "spaced") == Counter({False: 70, True: 70})
    assert factor("merge", "updated") == Counter({False: 70, True: 70})
    a = list(iter_histories("provenance-probes", "merge", cases=5))
    b = list(iter_histories("provenance-probes", "merge", cases=5))
    assert a == b
    assert a != list(iter_histories("provenance-probes", "merge", cases=5, seed=7))


def test_each_case_asks_before_and_after_its_critical_event() -> None:
    for subset in SUBSETS:
        for h in iter_histories("provenance-probes", subset, cases=12):
            kinds = [q.qtype.startswith("before") for q in h.questions]
            assert kinds[0] and not all(kinds), h.id
            before = h.questions[0].after_event
            assert all(q.after_event > before for q in h.questions[1:]), h.id
            assert all(q.after_event <= len(h.events) - 1 for q in h.questions), h.id


def test_late_arrivals_arrive_out_of_valid_time_order() -> None:
    for h in iter_histories("provenance-probes", "late-arrival"):
        key = h.questions[-1].stale_key
        dated = [
            e for e in h.events if e.valid_time and T.parse_event(e.text)[1]["entity"] in h.questions[0].text
        ]
        assert len(dated) == 3 and key
        assert dated[-1].valid_time != max(e.valid_time for e in dated if e.valid_time), h.id


def _q(match: str, gold: tuple[str, ...], stale: tuple[str, ...] = ()) -> Question:
    return Question("q", "?", gold, "x", 0, stale=stale, match=match)


@pytest.mark.parametrize(
    ("match", "gold", "stale", "prediction", "correct", "is_stale"),
    [
        ("absent", (), ("4821",), "I do not know.", True, False),
        ("absent", (), ("4821",), "It is 4821.", False, True),
        ("absent", (), ("4821",), "It is 48210.", True, False),  # token-bounded
        ("only", ("room 31",), ("room 20",), "room 31", True, False),
        ("only", ("room 31",), ("room 20",), "room 31 or room 20", False, True),
        ("only", ("room 31",), ("room 20",), "room 20", False, True),
        ("all", ("room 31", "room 20"), (), "room 31 or room 20", True, None),
        ("all", ("room 31", "room 20"), (), "room 20", False, None),
        ("flagged", ("room 298",), ("room 286",), "room 286 (possibly out of date)", True, False),
        ("flagged", ("room 298",), ("room 286",), "room 286", False, True),
        ("flagged", ("room 298",), ("room 286",), "room 298", True, False),
        ("flagged", ("room 298",), ("room 286",), "room 298 or room 286", False, True),
    ],
)
def test_match_rules(
    match: str,
    gold: tuple[str, ...],
    stale: tuple[str, ...],
    prediction: str,
    correct: bool,
    is_stale: bool | None,
) -> None:
    s = score_question("provenance-probes", _q(match, gold, stale), prediction)
    assert s.correct is correct
    assert s.stale is (is_stale if stale else None)


def test_an_unknown_match_rule_is_an_error_naming_the_question() -> None:
    with pytest.raises(ValueError, match=r"'q'.*'most'"):
        score_question("provenance-probes", _q("most", ("a",)), "a")


def test_bad_parameters_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown provenance-probes subset 'nope'"):
        next(iter_histories("provenance-probes", "nope"))
    with pytest.raises(ValueError, match="cases=0"):
        next(iter_histories("provenance-probes", "merge", cases=0))


def test_histories_round_trip_through_arrow_with_valid_times() -> None:
    from pmem.bench import histories_from_arrow, histories_to_arrow

    hs = list(iter_histories("provenance-probes", "late-arrival", cases=3))
    back = histories_from_arrow(histories_to_arrow(hs))
    assert back == hs
    assert back[0].events[0].valid_time is not None


def test_an_erased_value_is_found_in_no_other_event() -> None:
    """A byte search for the erased value must not hit another value (a 3-digit code inside a 6-digit one)."""
    histories = [h for seed in range(12) for h in iter_histories("provenance-probes", "erasure", seed=seed)]
    for h in histories:
        q = h.questions[-1]
        value = q.params.get("erased_value") or q.gold[0]
        key = q.stale_key
        for e in h.events:
            parsed = T.parse_event(e.text)
            assert parsed is not None
            name, f = parsed
            if name == "forget" or (key and T.fact_key(f["entity"], f["attr"]) == key):
                continue
            assert value not in e.text, (h.id, e.text)
