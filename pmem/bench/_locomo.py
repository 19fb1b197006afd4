"""LoCoMo (Maharana et al., ACL 2024): the official ``locomo10.json``, vendored.

One history per conversation (``locomo/<sample_id>``): its turns in session order are the events, each
dated with its session's ``date_time`` (ISO 8601 in ``Event.time``), its session in ``session_id`` and
its speaker's name in ``role`` (every arm renders a dialogue event as ``[time] speaker: text``, see
:func:`pmem.memory.writepath.event_line`). A turn that shares a photo keeps the photo's BLIP caption, as
the official code shows it: ``... [shares a photo of a dog]``. The questions are asked after the last turn.

Question ids are ``<sample_id>/q<i>``, ``i`` the 0-based position in the conversation's official ``qa``
list. The numeric categories are named as LoCoMo's paper and evaluation code use them
(:data:`LOCOMO_CATEGORIES`; verified against the data in ``datasets/locomo/CARD.md``). Adversarial questions
(category 5) are posed as the official code poses them, a choice between the trap answer and "Not
mentioned in the conversation", and scored as abstention (:func:`pmem.bench._locomo_eval.locomo_score`).

Slices: ``sessions=N`` keeps the first N sessions of each conversation and the questions all of whose
evidence turns lie in them (a question that names no evidence turn is kept only when every session is);
``questions=N`` keeps the first N of those, in official order; ``conversations="conv-26,conv-30"``
selects conversations by sample id.

Gold: ``gold="original"`` (the default) scores against the file's answers; ``gold="audited"`` against
the corrections of an independent audit (dial481/locomo-audit ``errors.json``, vendored as
``locomo_audit_errors.json``: 99 of the 1,540 category 1-4 answers changed). Either way a question
whose two golds differ carries the other in ``params["alt_gold"]`` (``{"kind", "answer"}``) and the
audit's ``error_type`` in ``params["audit_error"]``, so that one run is scored on both.

>>> h = next(iter_locomo(sessions=1, conversations="conv-26"))
>>> h.id, len(h.events), len(h.questions), h.events[0].time, h.events[0].role
('locomo/conv-26/sessions=1', 18, 4, '2023-05-08T13:56:00', 'Caroline')
>>> h.questions[0].id, h.questions[0].qtype, h.questions[0].gold
('conv-26/q0', 'temporal', ('7 May 2023',))
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from pmem.bench._data import DataError, verified_path
from pmem.bench._types import Event, History, Question

NAME = "locomo"
#: one subset: the released file (10 conversations, 1,986 questions)
SUBSETS: tuple[str, ...] = ("locomo10",)
DATA_FILE = "locomo/locomo10.json"
AUDIT_FILE = "locomo/locomo_audit_errors.json"
GOLDS: tuple[str, ...] = ("original", "audited")
#: the audit's question ids: ``locomo_<conversation position>_qa<question index>``
_AUDIT_ID = re.compile(r"^locomo_(\d+)_qa(\d+)$")
_REMARK = re.compile(r"\s*\([^()]*\)\s*$")
SOURCE = (
    "official LoCoMo locomo10.json (snap-research/LoCoMo@3eb6f2c5), vendored in datasets/locomo/ "
    "(CC BY-NC 4.0: non-commercial)"
)
#: official category number -> name. The file's numbers do not follow the order the paper lists the
#: types in; this is the mapping its evaluation code and question counts fix (datasets/locomo/CARD.md).
LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
ADVERSARIAL = LOCOMO_CATEGORIES[5]
#: the option the official code offers beside the trap answer of an adversarial question
NOT_MENTIONED = "Not mentioned in the conversation"
#: ``date_time`` of a session, e.g. "1:56 pm on 8 May, 2023"
DATE_FORMAT = "%I:%M %p on %d %B, %Y"
_SESSION = re.compile(r"session_(\d+)")
#: an evidence turn "D<session>:<turn>"; the file also has "D:11:26", "D8:6; D9:17" and a bare "D"
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    speaker: str
    dia_id: str
    text: str
    caption: str | None


@dataclass(frozen=True)
class Session:
    number: int
    date_time: str
    time: str  # ISO 8601
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    qa: tuple[dict[str, Any], ...]


def _fail(where: str, field: str, problem: str) -> DataError:
    return DataError(f"{where}: field {field!r} {problem} (not the official LoCoMo schema)")


def _text(obj: dict[str, Any], field: str, where: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str):
        raise _fail(where, field, "is missing" if value is None else f"has type {type(value).__name__}")
    return value


def _conversation(record: Any, where: str) -> Conversation:
    if not isinstance(record, dict):
        msg = f"{where} is a {type(record).__name__}, not an object"
        raise DataError(msg)
    sample_id = _text(record, "sample_id", where)
    where = f"{where} ({sample_id})"
    conv = record.get("conversation")
    if not isinstance(conv, dict):
        raise _fail(where, "conversation", "is missing or not an object")
    speakers = (
        _text(conv, "speaker_a", f"{where} conversation"),
        _text(conv, "speaker_b", f"{where} conversation"),
    )
    sessions: list[Session] = []
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION.fullmatch(k)))
    for n in numbers:
        at = f"{where} conversation.session_{n}"
        turns = conv[f"session_{n}"]
        if not isinstance(turns, list):
            raise _fail(at, f"session_{n}", "is not a list of turns")
        stamp = _text(conv, f"session_{n}_date_time", f"{where} conversation")
        try:
            iso = datetime.strptime(stamp, DATE_FORMAT).isoformat()
        except ValueError:
            raise _fail(
                f"{where} conversation", f"session_{n}_date_time", f"{stamp!r} is not a date"
            ) from None
        parsed: list[Turn] = []
        for t, turn in enumerate(turns):
            tw = f"{at}[{t}]"
            if not isinstance(turn, dict):
                msg = f"{tw} is a {type(turn).__name__}, not a turn object"
                raise DataError(msg)
            caption = turn.get("blip_caption")
            if caption is not None and not isinstance(caption, str):
                raise _fail(tw, "blip_caption", f"has type {type(caption).__name__}")
            parsed.append(
                Turn(_text(turn, "speaker", tw), _text(turn, "dia_id", tw), _text(turn, "text", tw), caption)
            )
        sessions.append(Session(n, stamp, iso, tuple(parsed)))
    if not sessions:
        raise _fail(where, "conversation", "holds no session_<n> list")
    qa = record.get("qa")
    if not isinstance(qa, list):
        raise _fail(where, "qa", "is missing or not a list")
    for i, q in enumerate(qa):
        qw = f"{where} qa[{i}]"
        if not isinstance(q, dict):
            msg = f"{qw} is a {type(q).__name__}, not a question object"
            raise DataError(msg)
        _text(q, "question", qw)
        cat = q.get("category")
        if cat not in LOCOMO_CATEGORIES or isinstance(cat, bool):
            raise _fail(qw, "category", f"is {cat!r}, not one of {sorted(LOCOMO_CATEGORIES)}")
        if not isinstance(q.get("evidence"), list) or not all(isinstance(e, str) for e in q["evidence"]):
            raise _fail(qw, "evidence", "is not a list of dialogue ids")
        # adversarial questions carry the trap answer instead of an answer
        key = "adversarial_answer" if cat == 5 else "answer"
        ans = q.get(key)
        if not isinstance(ans, str | int | float) or isinstance(ans, bool):
            raise _fail(qw, key, "is missing" if ans is None else f"has type {type(ans).__name__}")
    return Conversation(sample_id, speakers, tuple(sessions), tuple(qa))


def parse_locomo(data: Any, where: str) -> tuple[Conversation, ...]:
    """Check records against the official schema; :class:`DataError` names the record and the field."""
    if not isinstance(data, list):
        msg = f"{where}: expected a JSON list of conversations, got {type(data).__name__}"
        raise DataError(msg)
    return tuple(_conversation(r, f"{where}: record {i}") for i, r in enumerate(data))


@lru_cache(maxsize=4)
def _load_cached(path: str, mtime_ns: int) -> tuple[Conversation, ...]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        msg = f"{path}: not valid JSON ({exc})"
        raise DataError(msg) from exc
    return parse_locomo(data, path)


def load_locomo(path: str | Path | None = None) -> tuple[Conversation, ...]:
    """The conversations of the vendored file (sha256-checked), or of ``path`` (schema-checked only)."""
    p = Path(path) if path is not None else verified_path(DATA_FILE)
    if not p.is_file():
        msg = f"LoCoMo file {p} does not exist"
        raise DataError(msg)
    return _load_cached(str(p), p.stat().st_mtime_ns)


def evidence_sessions(evidence: list[str]) -> set[int]:
    """The session numbers an evidence list names (empty when it names no turn).

    >>> sorted(evidence_sessions(["D8:6; D9:17", "D:11:26", "D"]))
    [8, 9, 11]
    """
    return {int(m.group(1)) for e in evidence for m in _EVIDENCE.finditer(e)}


def evidence_turns(question: Question) -> tuple[str, ...] | None:
    """The turns a question's ``evidence`` names, as the turns' own ids (``D8:6``), in order; None for
    a question that carries no evidence list (another benchmark's).

    >>> evidence_turns(Question("q", "?", (), "temporal", 0, params={"evidence": ["D8:6; D9:17", "D:11:26", "D"]}))
    ('D8:6', 'D9:17', 'D11:26')
    """
    evidence = question.params.get("evidence")
    if not isinstance(evidence, list):
        return None
    found = (f"D{m.group(1)}:{m.group(2)}" for e in evidence for m in _EVIDENCE.finditer(str(e)))
    return tuple(dict.fromkeys(found))


def turn_text(turn: Turn) -> str:
    """A turn's text, with the caption of a photo it shares (the official code's ``[shares ...]``)."""
    return f"{turn.text} [shares {turn.caption}]" if turn.caption else turn.text


def _options(question_id: str, trap: str) -> dict[str, str]:
    # The official code puts "Not mentioned" first or second at random; a hash of the id fixes the
    # draw, so that the same question is always posed the same way.
    first = hashlib.sha256(question_id.encode()).digest()[0] % 2 == 0
    return {"a": NOT_MENTIONED, "b": trap} if first else {"a": trap, "b": NOT_MENTIONED}


@lru_cache(maxsize=1)
def audit_corrections() -> dict[str, tuple[str, str]]:
    """``<sample_id>/q<i>`` -> (corrected answer, error type) for every audited answer that changes
    (the audit's ``WRONG_CITATION`` entries keep the answer and fix only the evidence: left out)."""
    convs = load_locomo()
    path = verified_path(AUDIT_FILE)
    try:
        entries = json.loads(path.read_text())
    except ValueError as exc:
        msg = f"{path}: not JSON ({exc})"
        raise DataError(msg) from exc
    out: dict[str, tuple[str, str]] = {}
    for n, e in enumerate(entries):
        m = _AUDIT_ID.match(str(e.get("question_id", "")))
        if m is None or int(m.group(1)) >= len(convs):
            raise _fail(
                f"{path} entry {n}",
                "question_id",
                f"is not locomo_<conversation>_qa<i>: {e.get('question_id')!r}",
            )
        conv, i = convs[int(m.group(1))], int(m.group(2))
        if i >= len(conv.qa) or conv.qa[i].get("question") != e.get("question"):
            raise _fail(
                f"{path} entry {n}", "question", f"does not match {conv.sample_id}/q{i} of locomo10.json"
            )
        # the audit appends remarks to some answers ("aerial yoga (answer is correct, but question says
        # 2023 ...)"): a remark is not part of the gold, and an answer that only gains one is unchanged
        corrected = _REMARK.sub("", str(e.get("correct_answer") or "")).strip()
        if (
            e.get("error_type") != "WRONG_CITATION"
            and corrected
            and corrected != str(conv.qa[i].get("answer"))
        ):
            out[f"{conv.sample_id}/q{i}"] = (corrected, str(e["error_type"]))
    return out


def _question(sample_id: str, i: int, q: dict[str, Any], after: int, gold: str = GOLDS[0]) -> Question:
    cat = int(q["category"])
    qid = f"{sample_id}/q{i}"
    params: dict[str, Any] = {"category": cat, "evidence": list(q["evidence"])}
    if cat == 5:
        trap = str(q["adversarial_answer"])
        options = _options(qid, trap)
        # the official wording (task_eval/gpt_utils.py), so that the abstention it scores is one option
        text = f"{q['question']} Select the correct answer: (a) {options['a']} (b) {options['b']}."
        params.update(options=options, official_question=q["question"], adversarial_answer=trap)
        return Question(qid, text, (NOT_MENTIONED,), ADVERSARIAL, after, params=params)
    answer = str(q["answer"])
    corrected = audit_corrections().get(qid)
    if corrected is not None:
        audited, error = corrected
        params["audit_error"] = error
        if gold == "audited":
            params["alt_gold"] = {"kind": "original", "answer": answer}
            answer = audited
        else:
            params["alt_gold"] = {"kind": "audited", "answer": audited}
    return Question(
        qid,
        q["question"],
        (answer,),
        LOCOMO_CATEGORIES[cat],
        after,
        params=params,
        # the LLM judge ("J") decides correctness where a judge is configured
        needs_judge=True,
    )


def build_history(
    conv: Conversation, *, sessions: int | None = None, questions: int | None = None, gold: str = GOLDS[0]
) -> History:
    """One conversation as a history, cut to its first ``sessions`` sessions and ``questions`` questions,
    scored against the ``gold`` answers ("original" or "audited")."""
    if gold not in GOLDS:
        msg = f"locomo/{conv.sample_id}: gold must be one of {', '.join(GOLDS)}, got {gold!r}"
        raise ValueError(msg)
    for name, value in (("sessions", sessions), ("questions", questions)):
        if value is not None and value < 0:
            msg = f"locomo/{conv.sample_id}: {name} must be >= 0 (0 keeps all), got {value}"
            raise ValueError(msg)
    kept = conv.sessions[:sessions] if sessions else conv.sessions
    numbers = {s.number for s in kept}
    everything = len(kept) == len(conv.sessions)
    events: list[Event] = []
    for s in kept:
        for turn in s.turns:
            events.append(
                Event(
                    index=len(events),
                    text=turn_text(turn),
                    time=s.time,
                    source="user",
                    session_id=f"session_{s.number}",
                    role=turn.speaker,
                    turn_id=turn.dia_id,
                )
            )
    last = len(events) - 1
    picked: list[Question] = []
    for i, q in enumerate(conv.qa):
        named = evidence_sessions(q["evidence"])
        if everything or (named and named <= numbers):
            picked.append(_question(conv.sample_id, i, q, last, gold))
    if questions:
        picked = picked[:questions]
    params: dict[str, Any] = {"sample_id": conv.sample_id}
    suffix = ""
    for key, value in (("sessions", sessions), ("questions", questions)):
        if value:
            params[key] = value
            suffix += f"/{key}={value}"
    if gold != GOLDS[0]:
        params["gold"] = gold
        suffix += f"/gold={gold}"
    return History(
        id=f"{NAME}/{conv.sample_id}{suffix}",
        benchmark=NAME,
        subset=SUBSETS[0],
        events=tuple(events),
        questions=tuple(picked),
        params=params,
    )


def iter_locomo(
    subset: str = SUBSETS[0],
    *,
    sessions: int | None = None,
    questions: int | None = None,
    conversations: str | None = None,
    gold: str = GOLDS[0],
) -> Iterator[History]:
    """The histories of the file, in its order (``conversations``: comma-separated sample ids)."""
    if subset not in SUBSETS:
        msg = f"unknown locomo subset {subset!r} (known: {', '.join(SUBSETS)})"
        raise ValueError(msg)
    convs = load_locomo()
    if conversations:
        wanted = [c.strip() for c in conversations.split(",") if c.strip()]
        known = {c.sample_id: c for c in convs}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            msg = f"locomo: unknown conversation(s) {unknown} (known: {', '.join(known)})"
            raise ValueError(msg)
        convs = tuple(known[w] for w in dict.fromkeys(wanted))
    for conv in convs:
        yield build_history(conv, sessions=sessions, questions=questions, gold=gold)
