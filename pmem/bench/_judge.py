"""Judge prompts: LongMemEval's, in our own words from the official judging rules, and LoCoMo's, in our
own words, stricter than the rubric of Mem0's LLM-as-a-Judge ("J", the judge published LoCoMo figures
use: mem0ai/mem0 ``evaluation/metrics/llm_judge.py``), after a hand grading showed a small model read
that rubric's "be generous" as yes to any answer on the topic. :data:`JUDGE_VERSION` names the prompts
and the guards of :mod:`pmem.bench._judge_guard`; a verdict is reused only under the same version.

Every prompt is one user message in the section convention (:mod:`pmem.models.sections`): a preamble
with the rule, then ``### QUESTION``, ``### REFERENCE`` (gold answer, rubric or abstention explanation)
and ``### RESPONSE``. Calls use purpose ``"judge"``, temperature 0 and at most 10 tokens; the verdict is
correct when the reply contains "yes".

>>> judge_kind("temporal-reasoning", "q17")
'temporal'
>>> judge_kind("knowledge-update", "q18_abs")
'abstention'
>>> judge_kind("temporal", "conv-26/q2", benchmark="locomo")
'locomo'
>>> judge_verdict("Yes.")
True
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from pmem.bench import _judge_guard
from pmem.bench._scoring import normalize_answer, substring_exact_match
from pmem.models.sections import format_sections

JUDGE_PURPOSE = "judge"
JUDGE_TEMPERATURE = 0.0
JUDGE_MAX_TOKENS = 10

_ASK = "Reply with yes or no only."

_GENERAL = (
    "You are grading a chat assistant's answer against a reference answer. Say yes if the response "
    "contains the reference answer or something equivalent to it, or if it works through every "
    "intermediate step needed to reach it. A response that gives only part of the required "
    "information is wrong: say no."
)

JUDGE_PREAMBLES: dict[str, str] = {
    "general": f"{_GENERAL} {_ASK}",
    "temporal": (
        f"{_GENERAL} When the answer is a count of days, weeks or months, do not penalize an "
        f"off-by-one difference (for example 18 days where the reference says 19 is still correct). {_ASK}"
    ),
    "knowledge-update": (
        f"{_GENERAL} The user's information changed over time and the reference is the updated value. "
        "A response that also mentions the earlier information is still correct as long as the answer "
        f"it gives is the updated one. {_ASK}"
    ),
    "preference": (
        "You are grading a chat assistant's personalized reply. The reference is a rubric describing "
        "what a good reply does. Say yes if the response recalls the user's personal information and "
        "uses it correctly, as the rubric describes; it need not cover every point of the rubric. Say "
        f"no if it ignores or misremembers the user's information. {_ASK}"
    ),
    "abstention": (
        "You are grading a chat assistant on a question that cannot be answered from the conversation "
        "history; the reference explains why. Say yes if the response recognizes that the question "
        "cannot be answered (it says the information is missing, unknown or never mentioned). Say no "
        f"if it answers as though the information were available. {_ASK}"
    ),
    # Stricter than Mem0's J rubric ("generous ... touches on the same topic"), which a 1.5B judge
    # read as "yes to anything on the topic": issue 56's hand grading found 114 of 460 acceptances
    # wrong. What needs no model (tags, keys, yes for no, another year or date, the other speaker) is
    # decided before this prompt by pmem.bench._judge_guard.
    "locomo": (
        "You are checking an answer to a question about two people's past conversations against the "
        "gold answer. Say yes only if someone who read just the response would learn the gold answer: "
        "the response states it, in the same or other words (a synonym, a number in words, a "
        "description that can only mean it, or part of a list the gold answer gives). Say no if the "
        "response leaves the answer out: it repeats the question's topic, says someone did something, "
        "some things or several times without saying what, or says it does not know. Say no if it gives "
        "a different answer. A date may be in another format or relative to another date (the day "
        "before 8 May 2023 is 7 May 2023); say yes when it is the same day, week, month or year. "
        f"{_ASK}"
    ),
}

#: Official question types and the rule each is judged by (``_abs`` ids override to abstention).
QUESTION_TYPE_KINDS: dict[str, str] = {
    "single-session-user": "general",
    "single-session-assistant": "general",
    "multi-session": "general",
    "temporal-reasoning": "temporal",
    "knowledge-update": "knowledge-update",
    "single-session-preference": "preference",
}


def is_abstention(question_id: str) -> bool:
    return question_id.endswith("_abs")


def judge_kind(question_type: str, question_id: str, *, benchmark: str = "longmemeval") -> str:
    """Which judging rule applies: LoCoMo's one rubric; for LongMemEval abstention for ``_abs`` ids, else
    by question type."""
    if benchmark == "locomo":
        return "locomo"
    if is_abstention(question_id):
        return "abstention"
    try:
        return QUESTION_TYPE_KINDS[question_type]
    except KeyError:
        msg = (
            f"question {question_id!r}: unknown LongMemEval question_type {question_type!r} "
            f"(known: {', '.join(QUESTION_TYPE_KINDS)})"
        )
        raise ValueError(msg) from None


def judge_prompt(
    question_type: str,
    question_id: str,
    question: str,
    reference: str,
    response: str,
    *,
    benchmark: str = "longmemeval",
) -> str:
    """The judge's user message for one answered question."""
    kind = judge_kind(question_type, question_id, benchmark=benchmark)
    return format_sections(
        {"QUESTION": question, "REFERENCE": reference, "RESPONSE": response}, JUDGE_PREAMBLES[kind]
    )


def judge_messages(
    question_type: str,
    question_id: str,
    question: str,
    reference: str,
    response: str,
    *,
    benchmark: str = "longmemeval",
) -> list[dict[str, str]]:
    prompt = judge_prompt(question_type, question_id, question, reference, response, benchmark=benchmark)
    return [{"role": "user", "content": prompt}]


_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_judge_reply(reply: str) -> bool | None:
    """The judge's verdict: its first "yes" or "no" word; None when it gives neither (unparsed).

    >>> parse_judge_reply("Yes."), parse_judge_reply("**No** - the date differs"), parse_judge_reply("eyes")
    (True, False, None)
    """
    m = _YES_NO.search(reply)
    return None if m is None else m.group(1).lower() == "yes"


def judge_verdict(reply: str) -> bool:
    """Correct when the judge's reply says yes (:func:`parse_judge_reply`); an unparsed reply is not."""
    return parse_judge_reply(reply) is True


#: the judge's prompts and rules: a verdict recorded under another version is judged again
JUDGE_VERSION = hashlib.sha256(
    json.dumps(JUDGE_PREAMBLES, sort_keys=True).encode() + Path(_judge_guard.__file__).read_bytes()
).hexdigest()[:12]


# ---------------------------------------------------------------- stale-value extraction

STALE_PREAMBLE = (
    "The dated conversation excerpts below contain the evidence for the question, and the reference "
    "is the correct current answer. If the user's information changed over time, find the value that "
    "was true before the change (the superseded value) and the value that holds now (the current value). "
    "Reply with exactly two lines:\nSUPERSEDED: <the earlier value, or none>\nCURRENT: <the current value>"
)


def _evidence_prompt(preamble: str, question: str, reference: str, evidence: str) -> str:
    return format_sections({"QUESTION": question, "REFERENCE": reference, "CONTEXT": evidence}, preamble)


def stale_extraction_prompt(question: str, reference: str, evidence: str) -> str:
    """Ask the judge for the superseded and current values (sections QUESTION, REFERENCE, CONTEXT)."""
    return _evidence_prompt(STALE_PREAMBLE, question, reference, evidence)


@dataclass(frozen=True)
class StaleValues:
    superseded: str | None
    current: str | None

    @property
    def scoreable(self) -> bool:
        """Stale-scoreable: both values known and different (questions where they coincide are excluded)."""

        return bool(self.superseded and self.current) and normalize_answer(
            self.superseded or ""
        ) != normalize_answer(self.current or "")


_LINE = re.compile(r"^\s*(SUPERSEDED|CURRENT)\s*:\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_stale_values(reply: str) -> StaleValues:
    found = {k.upper(): v for k, v in _LINE.findall(reply)}
    sup = found.get("SUPERSEDED")
    cur = found.get("CURRENT")
    none = {"", "none", "n/a", "null"}
    return StaleValues(
        superseded=None if sup is None or sup.lower() in none else sup,
        current=None if cur is None or cur.lower() in none else cur,
    )


def is_stale_prediction(prediction: str, correct: bool, values: StaleValues) -> bool | None:
    """Stale when incorrect and matching the superseded value; None when not stale-scoreable."""

    if not values.scoreable:
        return None
    return (not correct) and substring_exact_match(prediction, values.superseded or "") >= 1.0


# ---------------------------------------------------------------- answer classes

ANSWER_CLASSES: tuple[str, ...] = ("superseded", "aggregation", "single")

CLASS_PREAMBLE = (
    "Classify the question by how its answer relates to the dated evidence. superseded: an earlier "
    "value was later replaced and the answer is the newer one. aggregation: the answer combines several "
    "values, none replacing another (counting, summing, listing). single: anything else. Reply with one "
    "word: superseded, aggregation or single."
)


def answer_class_prompt(question: str, reference: str, evidence: str) -> str:
    return _evidence_prompt(CLASS_PREAMBLE, question, reference, evidence)


def parse_answer_class(reply: str) -> str | None:
    low = reply.lower()
    hits = [c for c in ANSWER_CLASSES if c in low]
    return hits[0] if len(hits) == 1 else None
