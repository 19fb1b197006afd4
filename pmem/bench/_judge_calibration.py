"""The judge's calibration set: LoCoMo questions with answers known to be right or wrong, by kind.

A judge's figures are believed only after it is measured on answers whose verdict is known
(issue 56). The set holds, for questions of LoCoMo's categories 1-4:

- **right** answers in other words: ``paraphrase`` (written by hand for 30 questions,
  ``datasets/locomo-judge/handwritten.json``), ``relative-time`` (a time given relative to the session
  it was said in, or a relative gold resolved to its day), ``partial-list`` (part of a gold list: Mem0's
  J and ours accept it) and ``in-a-sentence`` (the gold inside a longer reply);
- **wrong** answers of the kinds a small judge accepted in the first accuracy run: ``bare-tag``
  (``[t=18]``), ``memory-key`` (``caroline.research``), ``session-date`` (the date of the session the
  evidence was said in, for an event before it), ``vague-topical`` (written by hand: the question's
  topic without its answer), ``wrong-polarity`` (yes for no, no for yes), ``wrong-year`` (every year of
  the gold one earlier), ``wrong-person`` (the gold said of the other speaker) and ``other-answer``
  (the gold of another question of the same conversation and category, sharing no word with this one).

Everything but the hand-written answers is derived from ``locomo10.json`` by the rules here, at most
:data:`PER_KIND` cases a kind, taken round-robin over the conversations so that each contributes.
``build_calibration`` rebuilds the committed ``datasets/locomo-judge/calibration.jsonl`` exactly (a
test holds it to that); :func:`calibration_cases` reads the committed file.

>>> cases = calibration_cases()
>>> sorted({c.kind for c in cases if c.expected}) == sorted(RIGHT_KINDS)
True
>>> next(c for c in cases if c.kind == "wrong-polarity").response
'Likely yes.'
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

from dateutil import parser as date_parser

from pmem.bench._data import DataError, verified_path
from pmem.bench._judge_guard import day_dates
from pmem.bench._locomo import evidence_sessions, load_locomo
from pmem.bench._scoring import token_f1

#: the most cases of one kind
PER_KIND = 30
RIGHT_KINDS: tuple[str, ...] = ("paraphrase", "relative-time", "partial-list", "in-a-sentence")
WRONG_KINDS: tuple[str, ...] = (
    "bare-tag",
    "memory-key",
    "session-date",
    "vague-topical",
    "wrong-polarity",
    "wrong-year",
    "wrong-person",
    "other-answer",
)
CALIBRATION_FILE = "locomo-judge/calibration.jsonl"
HANDWRITTEN_FILE = "locomo-judge/handwritten.json"

_YES_NO = re.compile(r"^\W*(?:likely\s+|probably\s+)?(yes|no)\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")
_RELATIVE_GOLD = re.compile(
    r"^(?:the\s+)?(week|weekend|day|sunday|saturday|friday)\s+before\s+(.+)$", re.IGNORECASE
)
_LIST_SPLIT = re.compile(r"\s*,\s*(?:and\s+)?")
_STOP = {
    "what",
    "when",
    "where",
    "which",
    "who",
    "whom",
    "how",
    "why",
    "did",
    "does",
    "do",
    "is",
    "was",
    "has",
    "have",
    "had",
    "are",
    "were",
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "on",
    "for",
    "her",
    "his",
    "their",
    "s",
    "many",
    "much",
    "kind",
    "type",
    "kinds",
    "types",
    "with",
    "and",
    "at",
    "by",
    "from",
    "about",
}


@dataclass(frozen=True)
class CalibrationCase:
    id: str
    kind: str
    #: whether the answer is right
    expected: bool
    question_id: str
    question: str
    gold: str
    response: str


@dataclass(frozen=True)
class _Q:
    sample_id: str
    index: int
    question: str
    gold: str
    category: int
    people: tuple[str, str]
    evidence_dates: tuple[date, ...]

    @property
    def qid(self) -> str:
        return f"{self.sample_id}/q{self.index}"

    def asked(self) -> list[str]:
        return [p for p in self.people if re.search(rf"\b{re.escape(p)}\b", self.question)]


def _day(d: date) -> str:
    return f"{d.day} {d:%B %Y}"


def _questions() -> list[list[_Q]]:
    out: list[list[_Q]] = []
    for conv in load_locomo():
        dates = {s.number: datetime.fromisoformat(s.time).date() for s in conv.sessions}
        qs = []
        for i, q in enumerate(conv.qa):
            if int(q["category"]) == 5 or "answer" not in q:
                continue
            sessions = evidence_sessions([str(e) for e in q.get("evidence") or []])
            qs.append(
                _Q(
                    conv.sample_id,
                    i,
                    str(q["question"]),
                    str(q["answer"]),
                    int(q["category"]),
                    conv.speakers,
                    tuple(sorted({dates[s] for s in sessions if s in dates})),
                )
            )
        out.append(qs)
    return out


def _round_robin(
    convs: list[list[_Q]], kind: str, make: Callable[[_Q], str | None], expected: bool
) -> list[CalibrationCase]:
    made: list[list[CalibrationCase]] = []
    for qs in convs:
        cases = []
        for q in qs:
            response = make(q)
            if response:
                cases.append(CalibrationCase("", kind, expected, q.qid, q.question, q.gold, response))
        made.append(cases)
    picked: list[CalibrationCase] = []
    depth = 0
    while len(picked) < PER_KIND and any(depth < len(c) for c in made):
        picked.extend(c[depth] for c in made if depth < len(c))
        depth += 1
    return picked[:PER_KIND]


# ---------------------------------------------------------------- the rules, one per kind


def _bare_tag(q: _Q) -> str:
    return ("[t={}]", "(t={})", "[D1:{}]")[q.index % 3].format(1 + len(q.question) % 37)


def _memory_key(q: _Q) -> str | None:
    asked = q.asked()
    if len(asked) != 1:
        return None
    words = [w for w in re.findall(r"[a-z]+", q.question.lower()) if w not in _STOP and w != asked[0].lower()]
    if not words:
        return None
    prefix = asked[0].lower() if q.index % 2 == 0 else f"{asked[0].lower()}_1"
    return f"{prefix}.{words[-1]}"


def _session_date(q: _Q) -> str | None:
    if q.category != 2 or len(q.evidence_dates) != 1:
        return None
    said = q.evidence_dates[0]
    gold_days = day_dates(q.gold)
    if not (_RELATIVE_GOLD.match(q.gold.strip()) or (gold_days and said not in gold_days)):
        return None
    return (_day(said), f"On {said:%B} {said.day}, {said.year}.", said.isoformat())[q.index % 3]


def _wrong_polarity(q: _Q) -> str | None:
    m = _YES_NO.match(q.gold)
    if m is None:
        return None
    if m.group(1).lower() == "no":
        return ("Yes.", "Yes, they did.", "Likely yes.")[q.index % 3]
    return ("No.", "No, not at all.", "Likely no.")[q.index % 3]


def _wrong_year(q: _Q) -> str | None:
    if not _YEAR.search(q.gold):
        return None
    return _YEAR.sub(lambda m: str(int(m.group(1)) - 1), q.gold)


def _wrong_person(q: _Q) -> str | None:
    asked = q.asked()
    if len(asked) != 1 or len(q.gold) > 60 or _YES_NO.match(q.gold):
        return None
    other = next(p for p in q.people if p != asked[0])
    return f"{q.gold} (that was {other})"


def _other_answers(convs: list[list[_Q]]) -> Callable[[_Q], str | None]:
    by_conv = {qs[0].sample_id: qs for qs in convs if qs}

    def make(q: _Q) -> str | None:
        if _YES_NO.match(q.gold):
            return None
        for other in by_conv[q.sample_id]:
            if (
                other.index > q.index
                and other.category == q.category
                and not _YES_NO.match(other.gold)
                and token_f1(other.gold, q.gold) == 0.0
            ):
                return other.gold
        return None

    return make


def _relative_time(q: _Q) -> str | None:
    if q.category != 2 or len(q.evidence_dates) != 1:
        return None
    said = q.evidence_dates[0]
    gold = q.gold.strip()
    rel = _RELATIVE_GOLD.match(gold)
    if rel is not None:
        unit, anchor_text = rel.group(1).lower(), rel.group(2)
        try:
            anchor = date_parser.parse(anchor_text, default=datetime(2000, 1, 1)).date()
        except (ValueError, OverflowError):
            return None
        if unit == "week":
            return f"in the seven days leading up to {_day(anchor)}"
        if unit == "weekend":
            return f"the Saturday and Sunday just before {_day(anchor)}"
        if unit == "day":
            return _day(anchor - timedelta(days=1))
        # "the sunday before 25 May 2023": that day, named
        weekday = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday").index(unit)
        back = (anchor.weekday() - weekday) % 7 or 7
        return f"{unit.capitalize()}, {_day(anchor - timedelta(days=back))}"
    days = day_dates(gold)
    if len(days) == 1:
        (when,) = days
        gap = (said - when).days
        if gap == 1:
            return f"the day before {_day(said)}"
        if 1 < gap <= 6:
            return f"{gap} days before {_day(said)}"
        return None
    if re.fullmatch(r"(19|20)\d\d", gold) and said.year == int(gold) + 1:
        return f"last year (said in {said:%B} {said.year})"
    return None


def _partial_list(q: _Q) -> str | None:
    if q.category != 1 or _YES_NO.match(q.gold):
        return None
    items = [i.strip(" .") for i in _LIST_SPLIT.split(q.gold) if i.strip(" .")]
    if len(items) < 2 or any(len(i) > 40 for i in items):
        return None
    return items[0] if len(items) == 2 else f"{items[0]} and {items[1]}"


def _in_a_sentence(q: _Q) -> str | None:
    if _YES_NO.match(q.gold) or len(q.gold) > 80:
        return None
    return f"From what they said in their conversations, the answer is {q.gold.rstrip('.')}."


def _handwritten(field: str, path: Path | None) -> Callable[[_Q], str | None]:
    p = path if path is not None else verified_path(HANDWRITTEN_FILE)
    try:
        rows = json.loads(p.read_text())
        answers = {str(r["question_id"]): str(r[field]) for r in rows}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = f"{p}: not a list of {{question_id, paraphrase, vague}} records ({exc})"
        raise DataError(msg) from exc
    return lambda q: answers.get(q.qid)


def handwritten_cases(path: Path) -> list[CalibrationCase]:
    """The ``paraphrase`` (right) and ``vague-topical`` (wrong) cases of a hand-written file in the
    format of ``handwritten.json``, for LoCoMo questions of categories 1-4 (ids ``<kind>/<question id>``):
    a fresh file is an out-of-sample check of a judge tuned on the committed set
    (``pmem perf judge --handwritten FILE``)."""
    convs = _questions()
    out: list[CalibrationCase] = []
    for kind, field, expected in (("paraphrase", "paraphrase", True), ("vague-topical", "vague", False)):
        make = _handwritten(field, path)
        for qs in convs:
            for q in qs:
                response = make(q)
                if response:
                    out.append(
                        CalibrationCase(
                            f"{kind}/{q.qid}", kind, expected, q.qid, q.question, q.gold, response
                        )
                    )
    return out


def build_calibration(handwritten: Path | None = None) -> list[CalibrationCase]:
    """The calibration set, rebuilt from LoCoMo and the hand-written answers (ids ``<kind>/<n>``)."""
    convs = _questions()
    rules: list[tuple[str, Callable[[_Q], str | None], bool]] = [
        ("paraphrase", _handwritten("paraphrase", handwritten), True),
        ("relative-time", _relative_time, True),
        ("partial-list", _partial_list, True),
        ("in-a-sentence", _in_a_sentence, True),
        ("bare-tag", _bare_tag, False),
        ("memory-key", _memory_key, False),
        ("session-date", _session_date, False),
        ("vague-topical", _handwritten("vague", handwritten), False),
        ("wrong-polarity", _wrong_polarity, False),
        ("wrong-year", _wrong_year, False),
        ("wrong-person", _wrong_person, False),
        ("other-answer", _other_answers(convs), False),
    ]
    out: list[CalibrationCase] = []
    for kind, make, expected in rules:
        for n, c in enumerate(_round_robin(convs, kind, make, expected)):
            out.append(CalibrationCase(**{**asdict(c), "id": f"{kind}/{n}"}))
    return out


def write_calibration(path: Path, cases: list[CalibrationCase]) -> None:
    path.write_text("".join(json.dumps(asdict(c), ensure_ascii=False) + "\n" for c in cases))


def _iter_file(path: Path) -> Iterator[CalibrationCase]:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            yield CalibrationCase(**json.loads(line))
        except (ValueError, TypeError) as exc:
            msg = f"{path}:{n}: not a calibration case ({exc})"
            raise DataError(msg) from exc


def calibration_cases(path: Path | None = None) -> list[CalibrationCase]:
    """The committed calibration set (sha256-checked), or the file at ``path``."""
    return list(_iter_file(path if path is not None else verified_path(CALIBRATION_FILE)))
