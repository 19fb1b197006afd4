"""Scorers: the MemoryAgentBench string metrics and per-benchmark correctness and stale rules.

The string metrics follow the official MemoryAgentBench harness: :func:`normalize_answer` lowercases,
drops ASCII punctuation, replaces the words a/an/the with a space and collapses whitespace; SubEM is
"the normalized gold is a substring of the normalized prediction", best over the gold list; every
metric is computed on the raw output and on the text after ``Answer:`` (to the line end; the first
line when there is no ``Answer:``), keeping the higher.

>>> score_strings("Answer: the Eiffel Tower.\\nBecause...", ["Eiffel Tower"]).subem
1.0
>>> normalize_answer("The  Eiffel-Tower!")
'eiffeltower'
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pmem.bench._locomo import LOCOMO_CATEGORIES
from pmem.bench._locomo_eval import abstained, bleu1, locomo_score

if TYPE_CHECKING:
    from pmem.bench._types import Question

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ANSWER = re.compile(r"(?:Answer:)(.*)(?:\n|$)", re.IGNORECASE)
_FIRST_LINE = re.compile(r"(?:^)(.*)(?:\n|$)")


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def parse_output(output: str, prefix: str = "Answer:") -> str:
    """The text after ``prefix`` up to the line end, else the first line (the official rule)."""
    m = (
        _ANSWER.search(output)
        if prefix == "Answer:"
        else re.search(f"(?:{re.escape(prefix)})(.*)(?:\\n|$)", output, re.IGNORECASE)
    )
    if m is None:
        m = _FIRST_LINE.search(output)
    text = (m.group(1) if m else output).strip()
    if text.lower().startswith(prefix.lower()):
        text = text[len(prefix) :]
    return text.strip()


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def substring_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(gold) in normalize_answer(prediction))


def token_f1(prediction: str, gold: str) -> float:
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(gold).split()
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class StringScores:
    em: float
    subem: float
    f1: float


def _best(prediction: str, golds: Sequence[str]) -> StringScores:
    return StringScores(
        em=max((exact_match(prediction, g) for g in golds), default=0.0),
        subem=max((substring_exact_match(prediction, g) for g in golds), default=0.0),
        f1=max((token_f1(prediction, g) for g in golds), default=0.0),
    )


def score_strings(output: str, golds: Sequence[str]) -> StringScores:
    """EM, SubEM and token F1 of an output, each the max over raw output and parsed answer."""
    raw, parsed = _best(output, golds), _best(parse_output(output), golds)
    return StringScores(
        em=max(raw.em, parsed.em), subem=max(raw.subem, parsed.subem), f1=max(raw.f1, parsed.f1)
    )


def _contains_name(prediction: str, name: str) -> bool:
    # Token-bounded so "fridge 1" is not found inside "fridge 10".
    return f" {normalize_answer(name)} " in f" {normalize_answer(prediction)} "


@dataclass(frozen=True)
class Score:
    """The verdict for one answered question.

    ``correct`` is None when a judge must decide (LongMemEval); ``stale`` is None where the stale
    rate is undefined for the question (it is not in the denominator). ``f1`` is the benchmark's own
    token F1 (LoCoMo: its official score, :func:`score_locomo`); ``bleu1`` is LoCoMo's BLEU-1."""

    correct: bool | None
    stale: bool | None
    em: float | None = None
    subem: float | None = None
    f1: float | None = None
    bleu1: float | None = None


def score_factconsolidation(question: Question, prediction: str) -> Score:
    s = score_strings(prediction, question.gold)
    correct = s.subem >= 1.0
    stale: bool | None = None
    if question.stale:
        stale = not correct and any(
            max(substring_exact_match(p, v) for p in (prediction, parse_output(prediction))) >= 1.0
            for v in question.stale
        )
    return Score(correct=correct, stale=stale, em=s.em, subem=s.subem, f1=s.f1)


def score_alfworld(question: Question, prediction: str) -> Score:
    return score_named_values(question, prediction)


#: Words by which an answer says its value may be out of date (``match="flagged"``).
STALE_FLAG = re.compile(
    r"\b(stale|out of date|outdated|possibly|may have changed|might have changed|may no longer|"
    r"might no longer|no longer certain|uncertain|unverified)\b",
    re.IGNORECASE,
)


def score_named_values(question: Question, prediction: str) -> Score:
    """Correctness by the values an answer names (token-bounded: ``room 1`` is not in ``room 12``).

    ``question.match`` says how: ``any`` / ``all`` gold values; ``only`` a gold value and no stale one;
    ``absent`` no stale value; ``flagged`` as ``only``, or a :data:`STALE_FLAG` word in the answer. The
    answer is stale when it is wrong and names a stale value.

    >>> from pmem.bench._types import Question
    >>> q = Question("q", "?", (), "forget_once", 0, stale=("4821",), match="absent")
    >>> score_named_values(q, "I do not know").correct, score_named_values(q, "It is 4821.").stale
    (True, True)
    """
    texts = (prediction, parse_output(prediction))
    hits = [any(_contains_name(t, g) for t in texts) for g in question.gold]
    named_stale = any(_contains_name(t, v) for t in texts for v in question.stale)
    match = question.match
    if match == "all":
        correct = all(hits)
    elif match == "any":
        correct = any(hits)
    elif match == "only":
        correct = any(hits) and not named_stale
    elif match == "absent":
        correct = not named_stale
    elif match == "flagged":
        correct = (any(hits) and not named_stale) or bool(STALE_FLAG.search(prediction))
    else:
        msg = f"question {question.id!r}: unknown match rule {match!r} (any, all, only, absent, flagged)"
        raise ValueError(msg)
    stale: bool | None = None
    if question.stale:
        stale = not correct and named_stale
    s = score_strings(prediction, question.gold) if question.gold else StringScores(0.0, 0.0, 0.0)
    return Score(correct=correct, stale=stale, em=s.em, subem=s.subem, f1=s.f1)


class UnknownBenchmarkError(ValueError):
    """:func:`score_question` has no rules for this benchmark (a plugin's: the runner scores it generically)."""


#: LoCoMo's ``correct`` where no judge has decided: the official F1 reaches this (categories 1-4)
LOCOMO_F1_CORRECT = 0.5


def score_locomo(question: Question, prediction: str) -> Score:
    """LoCoMo, scored by its own evaluation code (:mod:`pmem.bench._locomo_eval`).

    ``f1`` is the official F1 of categories 1-4 (null for adversarial questions, which have no gold
    answer) and ``bleu1`` BLEU-1 against the whole gold answer. ``correct``: categories 1-4, F1 >=
    :data:`LOCOMO_F1_CORRECT` (the judge's verdict replaces it where a judge is configured:
    ``needs_judge``); adversarial (5), the official abstention rule.

    >>> from pmem.bench._types import Question
    >>> q = Question("conv-26/q0", "?", ("Yoga, hiking",), "multi-hop", 0)
    >>> s = score_locomo(q, "hiking")
    >>> s.correct, s.f1
    (True, 0.5)
    """

    category = {name: n for n, name in LOCOMO_CATEGORIES.items()}.get(question.qtype)
    if category is None:
        msg = f"question {question.id!r}: unknown LoCoMo category {question.qtype!r} (known: {', '.join(LOCOMO_CATEGORIES.values())})"
        raise ValueError(msg)
    if category == 5:
        return Score(correct=abstained(prediction, question.params.get("options")), stale=None)
    gold = question.gold[0] if question.gold else ""
    f1 = locomo_score(category, prediction, gold)
    return Score(correct=f1 >= LOCOMO_F1_CORRECT, stale=None, f1=f1, bleu1=bleu1(prediction, gold))


def score_question(benchmark: str, question: Question, prediction: str) -> Score:
    """Correctness and staleness of ``prediction`` under the benchmark's rules.

    LongMemEval needs a judge: this returns ``correct=None`` with the string metrics; use
    :func:`pmem.bench.judge_prompt` and :func:`pmem.bench.judge_verdict`. LoCoMo's ``correct`` is
    F1-based until a judge, where one is configured, replaces it (:func:`score_locomo`)."""
    if benchmark == "factconsolidation":
        return score_factconsolidation(question, prediction)
    if benchmark in ("alfworld-revision", "provenance-probes"):
        return score_named_values(question, prediction)
    if benchmark == "longmemeval":
        s = score_strings(prediction, question.gold)
        return Score(correct=None, stale=None, em=s.em, subem=s.subem, f1=s.f1)
    if benchmark == "locomo":
        return score_locomo(question, prediction)
    msg = (
        f"unknown benchmark {benchmark!r} "
        "(known: alfworld-revision, factconsolidation, locomo, longmemeval, provenance-probes)"
    )
    raise UnknownBenchmarkError(msg)
