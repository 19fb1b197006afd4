"""Scorers: official normalization, SubEM/EM/F1, the parse-then-max rule, ALFWorld matching."""

from __future__ import annotations

import pytest

from pmem.bench import Question
from pmem.bench._scoring import (
    exact_match,
    normalize_answer,
    parse_output,
    score_question,
    score_strings,
    substring_exact_match,
    token_f1,
)


def _q(gold, *, stale=(), match="any", qtype="current") -> Question:
    return Question("q", "?", tuple(gold), qtype, 0, stale=tuple(stale), match=match)


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  A  cat,  an apple; THE end!! ", "cat apple end"),
        ("Washington, D.C.", "washington dc"),
        ("theory of the atom", "theory of atom"),  # only whole words a/an/the
        ("Anthem", "anthem"),
        ("rock-and-roll", "rockandroll"),  # punctuation is dropped, not spaced
        ("Kūkai", "kūkai"),  # non-ASCII letters stay
        ("tab\tand\nnewline", "tab and newline"),
    ],
)
def test_normalize_answer(raw: str, normalized: str) -> None:
    assert normalize_answer(raw) == normalized


def test_metrics() -> None:
    assert exact_match("the Beatles", "Beatles") == 1.0
    assert exact_match("The Beatles band", "Beatles") == 0.0
    assert substring_exact_match("It was the Beatles band", "Beatles") == 1.0
    assert substring_exact_match("Beat", "Beatles") == 0.0
    assert token_f1("new york city", "new york") == pytest.approx(0.8)
    assert token_f1("paris", "london") == 0.0


@pytest.mark.parametrize(
    ("output", "parsed"),
    [
        ("Reasoning first.\nAnswer: Paris\nMore text", "Paris"),
        ("answer: paris", "paris"),  # case-insensitive prefix
        ("Paris is the city\nsecond line", "Paris is the city"),  # no prefix: first line
        ("Answer:Answer: Rome", "Rome"),
    ],
)
def test_parse_output(output: str, parsed: str) -> None:
    assert parse_output(output) == parsed


def test_parse_then_max_rule() -> None:
    # EM only succeeds on the parsed answer; the raw output scores 0 on EM.
    out = "I think about it.\nAnswer: Paris"
    assert exact_match(out, "Paris") == 0.0
    s = score_strings(out, ["Paris"])
    assert s.em == 1.0 and s.subem == 1.0 and s.f1 == 1.0
    # SubEM succeeds on the raw output even when the parsed line misses the gold.
    out2 = "Answer: unsure\nThe reason: it is in Berlin"
    assert substring_exact_match(parse_output(out2), "Berlin") == 0.0
    assert score_strings(out2, ["Berlin"]).subem == 1.0
    # best over the gold list
    assert score_strings("Answer: Lyon", ["Paris", "Lyon"]).em == 1.0


def test_factconsolidation_score() -> None:
    q = _q(["Rome"], stale=["Milan"])
    s = score_question("factconsolidation", q, "Answer: the city of Rome")
    assert s.correct is True and s.stale is False and s.subem == 1.0
    s = score_question("factconsolidation", q, "Answer: Milan")
    assert s.correct is False and s.stale is True
    assert score_question("factconsolidation", _q(["Rome"]), "Milan").stale is None


def test_alfworld_score_is_token_bounded() -> None:
    q = _q(["fridge 1"], stale=["cabinet 2"])
    assert score_question("alfworld-revision", q, "It is in the fridge 1.").correct is True
    wrong = score_question("alfworld-revision", q, "It is in fridge 10.")
    assert wrong.correct is False and wrong.stale is False
    stale = score_question("alfworld-revision", q, "cabinet 2")
    assert stale.correct is False and stale.stale is True


def test_alfworld_conflict_needs_both() -> None:
    q = _q(["fridge 1", "drawer 3"], match="all", qtype="before_settle")
    assert score_question("alfworld-revision", q, "fridge 1").correct is False
    assert score_question("alfworld-revision", q, "Either fridge 1 or drawer 3.").correct is True
    assert score_question("alfworld-revision", q, "fridge 1").stale is None


def test_longmemeval_needs_judge_and_unknown_benchmark() -> None:
    s = score_question("longmemeval", _q(["25:50"]), "25:50")
    assert s.correct is None and s.subem == 1.0
    with pytest.raises(ValueError, match="unknown benchmark"):
        score_question("nope", _q(["x"]), "x")
