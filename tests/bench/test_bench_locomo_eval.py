"""LoCoMo's scorer against the official ``task_eval/evaluation.py`` (snap-research/LoCoMo@3eb6f2c5).

Every expected score below is what the official ``eval_question_answering`` returns for the same
(category, answer, prediction), run on its own code; a few are also worked by hand in the comments.
BLEU-1 values are nltk's ``sentence_bleu`` with weights (1, 0, 0, 0) and smoothing method 1, as the
published LoCoMo evaluations (Mem0, A-Mem) compute it.
"""

from __future__ import annotations

import pytest

from pmem.bench import Question, judge_kind, judge_prompt, score_question
from pmem.bench._locomo import NOT_MENTIONED
from pmem.bench._locomo_eval import abstained, bleu1, chosen_option, locomo_normalize, locomo_score

#: (category, gold, prediction, official score, BLEU-1)
OFFICIAL = [
    # single-hop: 3 of 8 stemmed tokens are the gold's 3: P 3/8, R 1, F1 6/11
    (
        4,
        "Her mental health",
        "It has been great for her mental health.",
        0.5454545454545454,
        0.3333333333333333,
    ),
    (4, '"Becoming Nicole"', "Becoming Nicole by Amy Ellis Nutt", 0.5, 0.3333333333333333),
    # "and" is dropped with the articles, commas too: {overwatch, fortnite} of three gold tokens
    (
        4,
        "Fortnite, Overwatch, Apex Legends",
        "Overwatch and Fortnite",
        0.6666666666666666,
        0.24525296078096154,
    ),
    # Porter stems: running / runs -> run
    (4, "running", "runs", 1.0, 0.0),
    (2, "7 May 2023", "On May 7, 2023", 0.8571428571428571, 0.6),
    (2, "The friday before 15 July 2023", "the Friday before July 15, 2023", 1.0, 0.8571428571428571),
    (2, "2022", "in 2022", 0.6666666666666666, 0.5),
    # open-domain: the gold is cut at ';' for F1 (BLEU-1 takes the whole gold answer)
    (3, "Yes; he want's to grow his fanbase", "Yes", 1.0, 0.00033546262790251185),
    (3, "Psychology, counseling certification", "psychology and counseling", 0.8, 0.47768754038252614),
    # multi-hop: each comma-separated gold part takes its best part of the answer; mean over the 4 parts
    (1, "Weight training, Circuit training, Kickboxing, yoga", "yoga, kickboxing", 0.5, 0.1353352832366127),
    # one answer part "hiking and mountaineering" against each gold part: 2/3 and 2/3
    (1, "Hiking, mountaineering", "hiking and mountaineering", 0.6666666666666666, 0.6666666666666666),
    (1, "Transgender woman", "a transgender woman", 1.0, 0.6666666666666666),
]


@pytest.mark.parametrize(("category", "gold", "prediction", "official", "b1"), OFFICIAL)
def test_scores_equal_the_official_functions(
    category: int, gold: str, prediction: str, official: float, b1: float
) -> None:
    assert locomo_score(category, prediction, gold) == pytest.approx(official, abs=1e-12)
    assert bleu1(prediction, gold) == pytest.approx(b1, abs=1e-12)


@pytest.mark.parametrize(
    ("prediction", "official"),
    [
        ("Not mentioned in the conversation", 1.0),
        ("No information available.", 1.0),
        ("This is NOT MENTIONED anywhere", 1.0),
        ("Shadow", 0.0),
        ("I don't know", 0.0),  # not one of the official phrases
    ],
)
def test_adversarial_is_scored_by_the_official_abstention_phrases(prediction: str, official: float) -> None:
    assert locomo_score(5, prediction, "") == official


def test_a_one_letter_reply_is_its_options_text_as_the_official_code_maps_it() -> None:
    options = {"a": "Shadow", "b": NOT_MENTIONED}
    assert chosen_option("b", options) == NOT_MENTIONED and abstained("b", options)
    assert chosen_option("(b)", options) == NOT_MENTIONED and abstained(" (B) ", options)
    assert chosen_option("a", options) == "Shadow" and not abstained("a", options)
    # any other one-letter reply is option b (the official test is "'a' in reply")
    assert chosen_option("c", options) == NOT_MENTIONED
    assert chosen_option("Option b", options) == "option b"  # longer replies stand as they are


def test_normalization_is_the_official_one() -> None:
    assert locomo_normalize("The cat, and a Dog!") == "cat dog"
    assert locomo_normalize("Ann's  café—open") == "anns café—open"  # ASCII punctuation only
    assert locomo_normalize("Band and Andy") == "band andy"  # whole words only


def _q(qtype: str, gold: str, **params: object) -> Question:
    return Question("conv-26/q0", "?", (gold,), qtype, 0, params=dict(params))


def test_score_question_fills_f1_bleu1_and_an_f1_verdict() -> None:
    s = score_question(
        "locomo", _q("single-hop", "Her mental health"), "It has been great for her mental health."
    )
    assert s.f1 == pytest.approx(6 / 11) and s.bleu1 == pytest.approx(1 / 3)
    assert s.correct is True and s.stale is None  # F1 >= 0.5
    low = score_question("locomo", _q("multi-hop", "Hiking, mountaineering, yoga"), "hiking")
    assert low.f1 == pytest.approx(1 / 3) and low.correct is False
    adv = score_question(
        "locomo", _q("adversarial", NOT_MENTIONED, options={"a": "x", "b": NOT_MENTIONED}), "b"
    )
    assert (adv.correct, adv.f1, adv.bleu1) == (True, None, None)  # no gold answer: no F1
    with pytest.raises(ValueError, match="unknown LoCoMo category 'current'"):
        score_question("locomo", _q("current", "x"), "x")


def test_the_locomo_judge_asks_for_the_golds_content_not_its_topic() -> None:
    assert judge_kind("temporal", "conv-26/q2", benchmark="locomo") == "locomo"
    text = judge_prompt("temporal", "conv-26/q2", "When?", "7 May 2023", "May 7th", benchmark="locomo")
    assert (
        "### QUESTION\nWhen?" in text
        and "### REFERENCE\n7 May 2023" in text
        and "### RESPONSE\nMay 7th" in text
    )
    # stricter than Mem0's "generous ... same topic": the answer itself, a date in any form
    assert "would learn the gold answer" in text and "repeats the question's topic" in text
    assert "the same day, week, month or year" in text and "generous" not in text
    # LongMemEval keeps its own rules
    assert judge_kind("temporal-reasoning", "q1") == "temporal"
