"""FactConsolidation: the official subsets load and verify, the template parser, stale definitions."""

from __future__ import annotations

import pytest

from pmem.bench import fact_key, iter_histories, parse_fact
from pmem.bench._factconsolidation import (
    SUBSETS,
    analyze_lines,
    analyze_subset,
    build_history,
    stale_targets,
)
from pmem.bench._scoring import score_question


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("0. Thomas Kyd was born in the city of London.", ("Thomas Kyd", "birthplace", "London")),
        (
            "Pedro Pierluisi worked in the city of Washington, D.C..",
            ("Pedro Pierluisi", "work_location", "Washington, D.C."),
        ),
        (
            "The headquarters of University of California, Berkeley is located in the city of Berkeley.",
            ("University of California, Berkeley", "headquarters", "Berkeley"),
        ),
        (
            "The univeristy where Galileo Galilei was educated is University of Pisa.",
            ("Galileo Galilei", "educated_at", "University of Pisa"),
        ),
        ("The Governor of Texas is Greg Abbott.", ("Governor of Texas", "office_holder", "Greg Abbott")),
        ("The capital of Tang Empire is Chang'an.", ("Tang Empire", "capital", "Chang'an")),
        ("Ferdinand Marcos is married to Imelda Marcos.", ("Ferdinand Marcos", "spouse", "Imelda Marcos")),
        (
            "Robert A. Heinlein is a citizen of United States of America.",
            ("Robert A. Heinlein", "citizenship", "United States of America"),
        ),
    ],
)
def test_parse_fact(line: str, expected: tuple[str, str, str]) -> None:
    assert parse_fact(line) == expected


def test_parse_fact_rejects_non_facts() -> None:
    assert parse_fact("Here is a list of facts:") is None
    assert parse_fact("12. completely unrelated words") is None


def test_fact_key_snake_case() -> None:
    assert fact_key("Thomas Kyd", "birthplace") == "thomas_kyd.birthplace"
    assert fact_key("Washington, D.C.", "capital") == "washington_d_c.capital"
    assert fact_key("Rogério Ceni", "position") == "rogério_ceni.position"


@pytest.mark.parametrize("subset", SUBSETS)
def test_every_subset_loads_verifies_and_parses(subset: str) -> None:
    h = build_history(subset)
    stream = analyze_subset(subset)
    assert h.id == f"factconsolidation/{subset}"
    assert len(h.questions) == 100
    assert [e.index for e in h.events] == list(range(len(h.events)))
    assert all(e.text.startswith(f"{e.index}. ") for e in h.events)
    assert {q.after_event for q in h.questions} == {len(h.events) - 1}
    assert stream.total == len(h.events)
    assert stream.coverage >= 0.99, stream.misses[:5]
    assert 0 < stream.overwritten < stream.keys


def test_counts_per_length() -> None:
    expected_facts = {"6k": 455, "32k": 2310, "64k": 4580, "262k": 18332}
    for length, n in expected_facts.items():
        sh, mh = build_history(f"sh_{length}"), build_history(f"mh_{length}")
        assert len(sh.events) == len(mh.events) == n
        assert [e.text for e in sh.events] == [e.text for e in mh.events]


def test_value_sequences_and_current_state() -> None:
    lines = [
        (0, "Thomas Kyd was born in the city of London."),
        (1, "Ferdinand Marcos is married to Imelda Marcos."),
        (2, "Thomas Kyd was born in the city of Paris."),
        (3, "not a fact"),
        (4, "Thomas Kyd was born in the city of Rome."),
    ]
    s = analyze_lines(lines)
    assert s.value_sequences()["thomas_kyd.birthplace"] == ["London", "Paris", "Rome"]
    assert s.current_state() == {"ferdinand_marcos.spouse": "Imelda Marcos", "thomas_kyd.birthplace": "Rome"}
    assert s.overwritten == 1 and s.keys == 2
    assert s.misses == [(3, "not a fact")] and s.coverage == pytest.approx(0.8)
    targets = stale_targets(
        s,
        ("Where was Thomas Kyd born?", "Who is Ferdinand Marcos married to?", "Where was Thomas Kyd born?"),
        (("Rome",), ("Imelda Marcos",), ("Paris",)),
    )
    assert targets[0] is not None and targets[0].earlier == ("London", "Paris")
    assert targets[0].key == "thomas_kyd.birthplace"
    assert targets[1] is None  # single value: not overwritten
    assert targets[2] is None  # gold is not the final value


def test_stale_denominators_and_known_question() -> None:
    h = build_history("sh_6k")
    q = next(q for q in h.questions if q.text == "What is Nobuhiro Watsuki famous for?")
    assert q.gold == ("The Fairly OddParents",)
    assert q.stale == ("Rurouni Kenshin",) and q.stale_key == "nobuhiro_watsuki.notable_work"
    denominators = {s: sum(1 for q in build_history(s).questions if q.stale) for s in SUBSETS}
    assert all(30 <= denominators[s] <= 100 for s in SUBSETS if s.startswith("sh"))
    assert all(denominators[s] == 0 for s in SUBSETS if s.startswith("mh"))
    # a wrong answer naming the old value is stale; a right one never is
    assert score_question("factconsolidation", q, "Rurouni Kenshin").stale is True
    assert score_question("factconsolidation", q, "Answer: The Fairly OddParents").stale is False
    assert score_question("factconsolidation", q, "no idea").stale is False
    mh = build_history("mh_6k").questions[0]
    assert score_question("factconsolidation", mh, "x").stale is None


def test_registry_iterates_factconsolidation() -> None:
    hs = list(iter_histories("factconsolidation"))
    assert [h.subset for h in hs] == list(SUBSETS)
    with pytest.raises(TypeError, match="only 'events' and 'questions'"):
        list(iter_histories("factconsolidation", "sh_6k", L=3))
    with pytest.raises(ValueError, match="unknown factconsolidation subset"):
        list(iter_histories("factconsolidation", "sh_1k"))


def test_a_slice_keeps_the_first_facts_and_only_questions_they_answer() -> None:
    """``events``/``questions`` cut a history for tiers where every call costs real tokens: the first N
    facts, and questions whose gold value is in what is kept, asked after the last kept fact."""
    full = build_history("sh_6k")
    (cut,) = iter_histories("factconsolidation", "sh_6k", events=40, questions=5)
    assert cut.events == full.events[:40] and len(cut.questions) == 5
    kept = "\n".join(e.text for e in cut.events).lower()
    assert all(any(g.lower() in kept for g in q.gold) for q in cut.questions)
    assert {q.after_event for q in cut.questions} == {39}
    assert cut.id == "factconsolidation/sh_6k/events=40/questions=5"
    assert cut.params["events"] == 40 and cut.questions[0].params["questions"] == 5
    with pytest.raises(ValueError, match="events must be >= 0"):
        list(iter_histories("factconsolidation", "sh_6k", events=-1))
