"""The judge's deterministic rules: each decides what it is for, and none rejects a right answer of the
calibration set."""

from __future__ import annotations

from datetime import date

import pytest

from pmem.bench import JudgeContext, calibration_cases, guard_verdict, locomo_judge_context
from pmem.bench._judge_guard import day_spans

CAROLINE = JudgeContext(people=("Caroline", "Melanie"), evidence_dates=(date(2023, 5, 8),))


@pytest.mark.parametrize(
    ("question", "gold", "response", "rule", "correct"),
    [
        ("When did Maria donate her car?", "21 December 2022", "[t=16]", "bare-tag", False),
        ("When did Maria donate her car?", "21 December 2022", "(t=3) [D1:4]", "bare-tag", False),
        ("What did Maria donate?", "old car", "maria_1.car", "memory-key", False),
        ("What did Maria donate?", "old car", "Answer: [t=2] maria.donation", "memory-key", False),
        (
            "What is John's focus?",
            "Improving education",
            "improving_education_and_infrastructure",
            "memory-key",
            False,
        ),
        ("What did Maria donate?", "old car", "   ", "empty", False),
        ("What did Maria donate?", "old car", "Old car.", "exact", True),
        ("Did Andrew have a dog?", "No", "Yes, he did.", "polarity", False),
        ("Would she move back?", "Likely no; she is adopting", "Likely yes.", "polarity", False),
        ("When did Melanie paint a sunrise?", "2022", "In 2019.", "year", False),
        ("When did Caroline go to the group?", "7 May 2023", "8 May 2023", "session-date", False),
        ("When did Caroline go to the group?", "7 May 2023", "On May 3rd, 2023", "other-date", False),
        ("When did Caroline go to the group?", "7 May 2023", "the day before 8 May 2023", "same-date", True),
        ("When did Caroline go to the group?", "7 May 2023", "May 7th, 2023.", "same-date", True),
        ("When did Melanie run?", "The sunday before 25 May 2023", "Sunday, 21 May 2023", "same-date", True),
        ("When did Melanie run?", "The sunday before 25 May 2023", "25 May 2023", "other-date", False),
        ("When did Melanie run?", "The week before 9 June 2023", "June 5, 2023", "same-date", True),
        (
            "What did Caroline research?",
            "Adoption agencies",
            "Melanie researched adoption agencies.",
            "wrong-person",
            False,
        ),
    ],
)
def test_each_rule_decides_what_it_is_for(question, gold, response, rule, correct) -> None:
    context = CAROLINE if "Caroline" in question or "Melanie" in question else None
    verdict = guard_verdict(question, gold, response, context)
    assert verdict is not None and (verdict.rule, verdict.correct) == (rule, correct)


@pytest.mark.parametrize(
    ("question", "gold", "response"),
    [
        # a paraphrase, a hedge, a relative time it cannot resolve, both speakers named: the model decides
        (
            "What did Caroline research?",
            "Adoption agencies",
            "She looked into agencies that handle adoptions.",
        ),
        ("When did Caroline go?", "7 May 2023", "last week, as of 8 May 2023"),
        ("What did Caroline and Melanie do?", "painting", "Melanie and Caroline painted together."),
        ("When did Melanie paint a sunrise?", "2022", "last year (said in May 2023)"),
        ("When did Caroline go?", "7 May 2023", "In May 2023."),
        # days that meet the gold's but reach past them; a gold that is more than a time
        ("When did Caroline go?", "7 May 2023", "the week before 9 May 2023"),
        ("What did Caroline do?", "went to the group on 7 May 2023", "7 May 2023"),
    ],
)
def test_what_needs_reading_goes_to_the_model(question, gold, response) -> None:
    assert guard_verdict(question, gold, response, CAROLINE) is None


def test_relative_times_resolve_to_their_days() -> None:
    assert day_spans("3 days before 29 April 2022") == [(date(2022, 4, 26), date(2022, 4, 26))]
    assert day_spans("the weekend before May 24, 2023") == [(date(2023, 5, 20), date(2023, 5, 21))]
    assert day_spans("in the seven days leading up to 27 March 2023") == [
        (date(2023, 3, 20), date(2023, 3, 26))
    ]
    # LoCoMo writes "23January, 2022"
    assert day_spans("The Friday before 23January, 2022") == [(date(2022, 1, 21), date(2022, 1, 21))]


def test_on_the_calibration_set_no_rule_rejects_a_right_answer_or_accepts_a_wrong_one() -> None:
    decided = {}
    for case in calibration_cases():
        verdict = guard_verdict(
            case.question, case.gold, case.response, locomo_judge_context(case.question_id)
        )
        if verdict is not None:
            assert verdict.correct == case.expected, (case.id, case.response, verdict)
            decided[case.kind] = decided.get(case.kind, 0) + 1
    # the kinds the rules are for are decided whole, without the model
    for kind in ("bare-tag", "memory-key", "session-date", "wrong-polarity", "wrong-person"):
        assert decided.get(kind) == 30, kind


def test_the_context_is_read_from_locomo() -> None:
    ctx = locomo_judge_context("conv-26/q5")
    assert (
        ctx is not None
        and ctx.people == ("Caroline", "Melanie")
        and ctx.evidence_dates == (date(2023, 5, 25),)
    )
    assert locomo_judge_context("not-locomo") is None
    assert locomo_judge_context("conv-26/q9999") is None


def test_an_answer_closer_to_the_question_than_to_the_gold_is_only_topical() -> None:
    from pmem.bench import topical_verdict

    # "a way of relaxing" restates the question; "by dancing" is the answer
    assert topical_verdict("by dancing", "They each have a way of relaxing.", 0.21, 0.85).rule == "topical"
    # a long answer that restates the question and gives the gold is right, however close to the question
    assert (
        topical_verdict("help find the perfect pet", "James offered to help find the perfect pet.", 0.4, 0.8)
        is None
    )
    # within the margin: the model decides
    assert topical_verdict("Rome", "The capital of Italy.", 0.35, 0.55) is None


def test_the_topical_rule_applies_only_under_the_embedder_it_was_measured_with() -> None:
    from pmem.bench import JUDGE_VERSION
    from pmem.runner._judge import judge_version, measures_topics

    assert measures_topics("st:all-minilm-l6-v2") and not measures_topics("hashing")
    assert judge_version("st:all-minilm-l6-v2") == f"{JUDGE_VERSION}+topical"
    assert judge_version("hashing") == judge_version(None) == JUDGE_VERSION
