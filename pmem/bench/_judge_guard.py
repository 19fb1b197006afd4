"""Deterministic guards before the judge model: the verdicts that need no model.

A 1.5B judge accepted bare arrival tags (``[t=18]``), memory keys (``maria_1.car``), a session's date
given for an event's date and "Yes" for a gold "No" (issue 56's hand grading of the first accuracy
run). Those are decided here, by rule, before any model is asked; everything else goes to the model.
Each rule rejects only what it can tell for certain, and says which rule decided
(:attr:`GuardVerdict.rule`), so that a report counts the verdicts by rule and the calibration set
(:mod:`pmem.bench._judge_calibration`) measures each.

A rule that needs the conversation (who is speaking, when the evidence was said) reads it from a
:class:`JudgeContext`; :func:`locomo_judge_context` builds LoCoMo's from the vendored file.

>>> guard_verdict("When did Maria donate her car?", "21 December 2022", "[t=16]")
GuardVerdict(correct=False, rule='bare-tag')
>>> guard_verdict("Did Andrew have a pet dog during March 2023?", "No", "Yes, he did.")
GuardVerdict(correct=False, rule='polarity')
>>> guard_verdict("When did Melanie paint a sunrise?", "2022", "In 2023.")
GuardVerdict(correct=False, rule='year')
>>> guard_verdict("What did Maria donate?", "old car", "maria_1.car")
GuardVerdict(correct=False, rule='memory-key')
>>> guard_verdict("What did Maria donate?", "old car", "Her old car.") is None
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache

from dateutil import parser as date_parser
from dateutil.relativedelta import FR, MO, SA, SU, TH, TU, WE, relativedelta

from pmem.bench._locomo import evidence_sessions, load_locomo
from pmem.bench._scoring import normalize_answer, token_f1

#: a memory key as the arms write them: dotted lowercase words (``caroline.job``, ``maria_1.car``), or
#: one identifier of words joined by underscores (``local_politics``)
_KEY = re.compile(r"\b[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+\b|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
#: an arrival tag or a turn citation: ``[t=18]``, ``(t=4)``, ``[D3:5]``, ``D3:5``, ``[e12]``
_TAG = re.compile(
    r"[\[(]\s*(?:t\s*=\s*\d+|D?\d+:\d+|e\d+)(?:\s*[,;]\s*(?:t\s*=\s*\d+|D?\d+:\d+|e\d+))*\s*[\])]|\bD\d+:\d+\b"
)
_WORD = re.compile(r"[A-Za-z0-9]")
#: an answer's polarity: its first word, after an optional hedge ("Likely no; ...")
_POLARITY = re.compile(r"^\W*(?:(?:likely|probably|most likely|possibly)\W+)?(yes|no)\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
#: a day-precise date as answers write it: "7 May 2023", "May 7, 2023", "7 May, 2023", "2023-05-07"
_DAY_DATE = re.compile(
    rf"\b(?:\d{{1,2}}(?:st|nd|rd|th)?\s*(?:of\s+)?(?:{_MONTHS})\.?,?\s+\d{{4}}"
    rf"|(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"
    r"|\d{4}-\d{2}-\d{2})\b",
    re.IGNORECASE,
)
#: words that make a date relative to another ("the week before 9 June 2023", "a day ago")
_RELATIVE = re.compile(
    r"\b(?:before|after|ago|last|next|previous|prior|yesterday|tomorrow|earlier|later|since|until|"
    r"week|weekend|weeks|days|months|around|about|approximately|between)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class JudgeContext:
    """What the rules may know of the conversation a question is asked about."""

    #: the conversation's speakers, as the question names them
    people: tuple[str, ...] = ()
    #: the dates of the sessions that hold the question's evidence turns
    evidence_dates: tuple[date, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class GuardVerdict:
    correct: bool
    #: which rule decided: "bare-tag", "memory-key", "empty", "polarity", "year", "session-date",
    #: "other-date", "wrong-person", "exact", "same-date", "topical"
    rule: str


def day_dates(text: str) -> set[date]:
    """The day-precise dates ``text`` names (parsed by dateutil; a span it cannot parse is skipped).

    >>> sorted(day_dates("on May 7th, 2023 or 8 May, 2023; not in May 2023"))
    [datetime.date(2023, 5, 7), datetime.date(2023, 5, 8)]
    """
    found: set[date] = set()
    for m in _DAY_DATE.finditer(text):
        try:
            found.add(date_parser.parse(m.group(0), default=datetime(2000, 1, 1)).date())
        except (ValueError, OverflowError):
            continue
    return found


_NUMBERS = {
    "one": 1,
    "a": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "a couple of": 2,
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_OF = (MO, TU, WE, TH, FR, SA, SU)
#: a time given relative to a day date: "the day before X", "3 days before X", "the week before X",
#: "the weekend before X", "the Sunday before X", "the seven days leading up to X"
_RELATIVE_TO_DAY = re.compile(
    rf"\b(?:(?P<n>\d+|{'|'.join(_NUMBERS)})\s+(?P<units>days|weeks)|(?:the\s+|a\s+)?(?P<unit>day|week|weekend|{'|'.join(_WEEKDAYS)}))"
    rf"\s+(?:just\s+)?(?:before|prior\s+to|leading\s+up\s+to)\s+(?:the\s+)?(?P<anchor>{_DAY_DATE.pattern})",
    re.IGNORECASE,
)


def day_spans(text: str) -> list[tuple[date, date]]:
    """The days ``text`` names, each as a (first, last) span: a day date is one day; a time relative to
    one is resolved ("the week before 9 June 2023": 2-8 June; "the Sunday before 25 May 2023": 21 May).
    Dates are parsed by dateutil; weekday arithmetic by its relativedelta.

    >>> day_spans("the day before 8 May 2023")
    [(datetime.date(2023, 5, 7), datetime.date(2023, 5, 7))]
    >>> [(str(a), str(b)) for a, b in day_spans("The sunday before 25 May 2023; the week before 9 June 2023")]
    [('2023-05-21', '2023-05-21'), ('2023-06-02', '2023-06-08')]
    """
    spans: list[tuple[date, date]] = []
    taken: list[tuple[int, int]] = []
    for m in _RELATIVE_TO_DAY.finditer(text):
        anchors = day_dates(m.group("anchor"))
        if len(anchors) != 1:
            continue
        (anchor,) = anchors
        unit = (m.group("unit") or "").lower()
        if m.group("n"):
            count = int(m.group("n")) if m.group("n").isdigit() else _NUMBERS[m.group("n").lower()]
            days = count * (7 if m.group("units").lower() == "weeks" else 1)
            before = anchor - timedelta(days=days)
            # "3 days before X" is a day; "the 7 days leading up to X" is the span up to X
            spans.append(
                (before, anchor - timedelta(days=1)) if "leading" in m.group(0).lower() else (before, before)
            )
        elif unit == "day":
            spans.append((anchor - timedelta(days=1),) * 2)
        elif unit == "week":
            spans.append((anchor - timedelta(days=7), anchor - timedelta(days=1)))
        elif unit == "weekend":
            saturday = anchor + relativedelta(days=-1, weekday=SA(-1))
            spans.append((saturday, saturday + timedelta(days=1)))
        else:
            weekday = _WEEKDAYS.index(unit)
            spans.append((anchor + relativedelta(days=-1, weekday=_WEEKDAY_OF[weekday](-1)),) * 2)
        taken.append(m.span())
    for m in _DAY_DATE.finditer(text):
        if any(a <= m.start() < b for a, b in taken):
            continue
        spans.extend((d, d) for d in day_dates(m.group(0)))
    return spans


def _names(text: str, people: tuple[str, ...]) -> set[str]:
    return {p for p in people if re.search(rf"\b{re.escape(p)}\b", text, re.IGNORECASE)}


def _rest_after_tags_and_keys(response: str) -> tuple[str, bool, bool]:
    had_tag = bool(_TAG.search(response))
    text = _TAG.sub(" ", response)
    had_key = bool(_KEY.search(text))
    text = _KEY.sub(" ", text)
    # a leading "Answer:" says nothing
    text = re.sub(r"(?i)\banswer\s*:", " ", text)
    return text, had_tag, had_key


def guard_verdict(
    question: str, gold: str, response: str, context: JudgeContext | None = None
) -> GuardVerdict | None:
    """The verdict a rule can give without a model, else None (the model decides).

    Rejects: an empty answer; an answer that is nothing but tags or memory keys; yes for a gold no (and
    no for yes); only years the gold does not name; only day dates the gold does not name (a session's
    date given for an event's date named apart); an answer about the other speaker. Accepts: the gold
    itself, word for word after normalisation. The date and year rules stand aside where either side is
    relative ("the week before ...").
    """
    text, had_tag, had_key = _rest_after_tags_and_keys(response)
    if not _WORD.search(text):
        if had_key:
            return GuardVerdict(False, "memory-key")
        if had_tag:
            return GuardVerdict(False, "bare-tag")
        return GuardVerdict(False, "empty")
    if normalize_answer(response) == normalize_answer(gold) and normalize_answer(gold):
        return GuardVerdict(True, "exact")
    gold_pol, resp_pol = _POLARITY.match(gold), _POLARITY.match(response)
    if gold_pol and resp_pol and gold_pol.group(1).lower() != resp_pol.group(1).lower():
        return GuardVerdict(False, "polarity")
    relative = bool(_RELATIVE.search(gold) or _RELATIVE.search(response))
    if not relative:
        gold_years, resp_years = set(_YEAR.findall(gold)), set(_YEAR.findall(response))
        if gold_years and resp_years and not gold_years & resp_years:
            return GuardVerdict(False, "year")
    if context and context.people:
        asked = _names(question, context.people)
        if len(asked) == 1:
            named = _names(response, context.people)
            if named and not named & asked:
                return GuardVerdict(False, "wrong-person")
    return _date_verdict(gold, response, context)


#: what a gold that is only a time may say besides it
_TIME_FILLER = re.compile(
    r"\b(?:on|in|at|the|around|about|approximately|of|date|was|it)\b|[\s,.;:()]+", re.IGNORECASE
)


def _without(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub(" ", _RELATIVE_TO_DAY.sub(" ", text))


def _date_verdict(gold: str, response: str, context: JudgeContext | None) -> GuardVerdict | None:
    """Both sides name days (a date, or a time relative to one, resolved): the same days are right, days
    that do not meet are wrong. Only for a gold that is nothing but a time, and a response with no
    relative word left unresolved ("last week")."""
    gold_spans, resp_spans = day_spans(gold), day_spans(response)
    told = set(context.evidence_dates) if context else set()
    if _RELATIVE.search(_without(response, _DAY_DATE)):
        return None
    if not gold_spans and resp_spans and _RELATIVE.search(gold):
        # a relative gold this module cannot resolve ("the week before 21Janury, 2022", as the file spells
        # it): the day the evidence was said is still not the day of an event before it
        if told and all(r0 == r1 and r0 in told for r0, r1 in resp_spans):
            return GuardVerdict(False, "session-date")
        return None
    if not gold_spans or not resp_spans or _TIME_FILLER.sub("", _without(gold, _DAY_DATE)):
        return None
    inside = all(any(g0 <= r0 and r1 <= g1 for g0, g1 in gold_spans) for r0, r1 in resp_spans)
    if inside:
        return GuardVerdict(True, "same-date")
    meets = any(r0 <= g1 and g0 <= r1 for r0, r1 in resp_spans for g0, g1 in gold_spans)
    if meets:
        return None
    if told and all(r0 == r1 and r0 in told for r0, r1 in resp_spans):
        return GuardVerdict(False, "session-date")
    return GuardVerdict(False, "other-date")


# ---------------------------------------------------------------- an answer about the topic only

#: the embedder the topical rule was measured with (its margin means nothing under another one)
TOPICAL_EMBEDDER = "all-minilm-l6-v2"
#: how much closer to the question than to the gold an answer may be before it is only topical
TOPICAL_MARGIN = -0.3
#: ... unless it shares this much of the gold's words (token F1): a long answer that restates the
#: question and gives the gold is right
TOPICAL_MAX_F1 = 0.3


def topical_verdict(gold: str, response: str, to_gold: float, to_question: float) -> GuardVerdict | None:
    """An answer that is about the question's topic and not about its gold: its embedding is closer to
    the question's than to the gold's by more than :data:`TOPICAL_MARGIN` (cosines from
    :data:`TOPICAL_EMBEDDER`) and it shares little of the gold's words. A 1.5B judge accepted 63% of such
    answers whatever it was told (five prompts measured on the calibration set), so this rule decides
    them before it.

    >>> topical_verdict("by dancing", "They each have a way of relaxing.", 0.21, 0.85).rule
    'topical'
    >>> topical_verdict("by dancing", "They both unwind by dancing.", 0.70, 0.60) is None
    True
    """
    if to_gold - to_question < TOPICAL_MARGIN and token_f1(response, gold) < TOPICAL_MAX_F1:
        return GuardVerdict(False, "topical")
    return None


# ---------------------------------------------------------------- LoCoMo's context

_QID = re.compile(r"^(?P<sample>[^/]+)/q(?P<index>\d+)$")


@lru_cache(maxsize=1)
def _locomo_index() -> dict[str, tuple[tuple[str, ...], dict[int, date], list[dict[str, object]]]]:
    out: dict[str, tuple[tuple[str, ...], dict[int, date], list[dict[str, object]]]] = {}
    for conv in load_locomo():
        people = tuple(conv.speakers)
        dates = {s.number: datetime.fromisoformat(s.time).date() for s in conv.sessions if s.time}
        out[conv.sample_id] = (people, dates, list(conv.qa))
    return out


def locomo_judge_context(question_id: str) -> JudgeContext | None:
    """The speakers of a LoCoMo question's conversation and the dates its evidence turns were said
    (from the vendored file); None for an id that is not LoCoMo's ``<sample_id>/q<i>``.

    >>> ctx = locomo_judge_context("conv-26/q0")
    >>> ctx.people, ctx.evidence_dates
    (('Caroline', 'Melanie'), (datetime.date(2023, 5, 8),))
    """
    m = _QID.match(question_id)
    if m is None:
        return None
    entry = _locomo_index().get(m.group("sample"))
    if entry is None:
        return None
    people, dates, qa = entry
    index = int(m.group("index"))
    if index >= len(qa):
        return None
    evidence = qa[index].get("evidence") or []
    sessions = evidence_sessions([str(e) for e in evidence]) if isinstance(evidence, list) else set()
    return JudgeContext(
        people=people, evidence_dates=tuple(sorted({dates[s] for s in sessions if s in dates}))
    )
