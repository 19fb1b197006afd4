"""LongMemEval from a user-supplied official file, checked against the official sha256.

No official LongMemEval data is obtainable offline, so nothing is vendored: pass the path of
``longmemeval_oracle.json`` (subset ``oracle``) or ``longmemeval_s_cleaned.json`` (subset ``s``). The
file's sha256 must equal the official one; the schema is checked record by record. One history per
question: its haystack sessions become dated turns (events, in date order, each with its session id
and role), and the question is asked after the last turn and judged by an LLM
(:mod:`pmem.bench._judge`).

Selections: ``ku=True`` keeps the knowledge-update questions (78 in the official files);
``answer_class=`` keeps one judge-assigned class (superseded / aggregation / single) given a stored
classification (``answer_classes=`` path or mapping ``question_id -> class``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pmem._atomic import file_sha256
from pmem.bench._data import DataError
from pmem.bench._judge import ANSWER_CLASSES, QUESTION_TYPE_KINDS, is_abstention
from pmem.bench._types import Event, History, Question

NAME = "longmemeval"
SUBSETS: tuple[str, ...] = ("oracle", "s")
#: subset -> (official file name, official sha256), from the project's data notes.
OFFICIAL: dict[str, tuple[str, str]] = {
    "oracle": ("longmemeval_oracle.json", "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c"),
    "s": ("longmemeval_s_cleaned.json", "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442"),
}
SOURCE = "user-supplied official file (HF xiaowu0162/longmemeval-cleaned), sha256-checked; not vendored"
OBTAIN = (
    "download longmemeval_oracle.json or longmemeval_s_cleaned.json from the Hugging Face dataset "
    "xiaowu0162/longmemeval-cleaned on a machine with network access, copy it here, and pass its path"
)
KU_TYPE = "knowledge-update"
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "question_id": str,
    "question_type": str,
    "question": str,
    "answer": (str, int, float),
    "question_date": str,
    "haystack_session_ids": list,
    "haystack_dates": list,
    "haystack_sessions": list,
    "answer_session_ids": list,
}
_DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"


@dataclass(frozen=True)
class LongMemEvalFile:
    path: Path
    subset: str
    records: tuple[dict[str, Any], ...]
    verified: bool


def subset_for(path: Path) -> str:
    for subset, (name, _) in OFFICIAL.items():
        if path.name == name:
            return subset
    msg = (
        f"{path}: cannot tell the LongMemEval subset from the file name; pass subset='oracle' or 's' "
        f"(official names: {', '.join(n for n, _ in OFFICIAL.values())})"
    )
    raise DataError(msg)


def check_hash(path: Path, expected: str) -> None:
    if not path.is_file():
        msg = f"LongMemEval file {path} does not exist: {OBTAIN}"
        raise DataError(msg)
    actual = file_sha256(path)
    if actual != expected:
        msg = (
            f"{path}: sha256 {actual} does not match the official {expected}; this is not the official "
            f"LongMemEval file (altered, truncated or a derivative) and is refused: {OBTAIN}"
        )
        raise DataError(msg)


def validate_records(records: Any, where: str) -> None:
    """Raise :class:`DataError` naming the record and field on any departure from the official schema."""
    if not isinstance(records, list):
        msg = f"{where}: expected a JSON list of question records, got {type(records).__name__}"
        raise DataError(msg)
    for i, r in enumerate(records):
        at = f"{where}: record {i}"
        if not isinstance(r, dict):
            msg = f"{at} is a {type(r).__name__}, not an object"
            raise DataError(msg)
        at = f"{at} ({r.get('question_id', '?')})"
        for fld, typ in _REQUIRED.items():
            if fld not in r:
                extra = sorted(set(r) - set(_REQUIRED))
                hint = f"; unexpected fields {extra}" if extra else ""
                msg = f"{at}: field {fld!r} is missing (not the official LongMemEval schema{hint})"
                raise DataError(msg)
            if not isinstance(r[fld], typ) or isinstance(r[fld], bool):
                msg = f"{at}: field {fld!r} has type {type(r[fld]).__name__}"
                raise DataError(msg)
        if r["question_type"] not in QUESTION_TYPE_KINDS:
            msg = f"{at}: unknown question_type {r['question_type']!r}"
            raise DataError(msg)
        n = len(r["haystack_sessions"])
        if len(r["haystack_session_ids"]) != n or len(r["haystack_dates"]) != n:
            msg = (
                f"{at}: haystack_sessions ({n}), haystack_session_ids ({len(r['haystack_session_ids'])}) "
                f"and haystack_dates ({len(r['haystack_dates'])}) differ in length"
            )
            raise DataError(msg)
        for s, session in enumerate(r["haystack_sessions"]):
            if not isinstance(session, list):
                msg = f"{at}: haystack_sessions[{s}] is not a list of turns"
                raise DataError(msg)
            for t, turn in enumerate(session):
                if (
                    not isinstance(turn, dict)
                    or turn.get("role") not in ("user", "assistant")
                    or not isinstance(turn.get("content"), str)
                ):
                    msg = f"{at}: haystack_sessions[{s}][{t}] is not a turn {{role: user|assistant, content: str}}"
                    raise DataError(msg)


def load_longmemeval(
    path: str | Path, subset: str | None = None, *, expected_sha256: str | None = None, verify: bool = True
) -> LongMemEvalFile:
    """Load and check an official LongMemEval file.

    ``expected_sha256`` overrides the official hash (for tests with synthetic fixtures);
    ``verify=False`` skips the hash check, and the histories then say ``data_verified: False``
    (smoke runs only, never a reported score)."""
    path = Path(path)
    subset = subset or subset_for(path)
    if subset not in OFFICIAL:
        msg = f"unknown longmemeval subset {subset!r} (known: {', '.join(SUBSETS)})"
        raise ValueError(msg)
    if verify:
        check_hash(path, expected_sha256 or OFFICIAL[subset][1])
    elif not path.is_file():
        msg = f"LongMemEval file {path} does not exist: {OBTAIN}"
        raise DataError(msg)
    try:
        with path.open(encoding="utf-8") as f:
            records = json.load(f)
    except json.JSONDecodeError as exc:
        msg = f"{path}: not valid JSON ({exc})"
        raise DataError(msg) from exc
    validate_records(records, str(path))
    return LongMemEvalFile(path, subset, tuple(records), verified=verify)


def load_answer_classes(source: str | Path | Mapping[str, str]) -> dict[str, str]:
    """A stored classification ``question_id -> superseded|aggregation|single`` (JSON object)."""
    if isinstance(source, Mapping):
        data, where = dict(source), "answer_classes"
    else:
        where = str(source)
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            msg = f"{where}: cannot read the answer-class file ({exc})"
            raise DataError(msg) from exc
    if not isinstance(data, dict):
        msg = f"{where}: expected a JSON object question_id -> class"
        raise DataError(msg)
    for qid, cls in data.items():
        if cls not in ANSWER_CLASSES:
            msg = f"{where}: question {qid!r} has class {cls!r} (allowed: {', '.join(ANSWER_CLASSES)})"
            raise DataError(msg)
    return data


def _date_key(date: str) -> tuple[int, str]:
    try:
        return 0, datetime.strptime(date, _DATE_FORMAT).isoformat()
    except ValueError:
        return 1, date


def record_to_history(
    record: dict[str, Any], subset: str, *, verified: bool = True, answer_class: str | None = None
) -> History:
    order = sorted(
        range(len(record["haystack_sessions"])), key=lambda i: _date_key(record["haystack_dates"][i])
    )  # stable: ties keep file order
    events: list[Event] = []
    for s in order:
        sid, date = record["haystack_session_ids"][s], record["haystack_dates"][s]
        for turn in record["haystack_sessions"][s]:
            events.append(
                Event(
                    index=len(events),
                    text=turn["content"],
                    time=date,
                    source=turn["role"],
                    session_id=sid,
                    role=turn["role"],
                )
            )
    qid = record["question_id"]
    params: dict[str, Any] = {"abstention": is_abstention(qid)}
    q = Question(
        id=qid,
        text=record["question"],
        gold=(str(record["answer"]),),
        qtype=record["question_type"],
        after_event=len(events) - 1,
        params=params,
        needs_judge=True,
        question_date=record["question_date"],
        answer_class=answer_class,
    )
    return History(
        id=f"{NAME}/{subset}/{qid}",
        benchmark=NAME,
        subset=subset,
        events=tuple(events),
        questions=(q,),
        params={
            "data_verified": verified,
            "answer_session_ids": list(map(str, record["answer_session_ids"])),
        },
    )


def evidence_text(record: dict[str, Any]) -> str:
    """Dated answer-bearing turns (``has_answer``), else the answer sessions' turns: the judge's evidence
    for stale-value extraction and answer-class assignment."""
    lines: list[str] = []
    answer_sessions = set(map(str, record["answer_session_ids"]))
    for want_flag in (True, False):
        for sid, date, session in zip(
            record["haystack_session_ids"], record["haystack_dates"], record["haystack_sessions"], strict=True
        ):
            for turn in session:
                if turn.get("has_answer") if want_flag else str(sid) in answer_sessions:
                    lines.append(f"[{date}] {turn['role']}: {turn['content']}")
        if lines:
            break
    return "\n".join(lines)


def iter_longmemeval(
    subset: str,
    *,
    path: str | Path | None = None,
    ku: bool = False,
    question_types: tuple[str, ...] | None = None,
    answer_class: str | None = None,
    answer_classes: str | Path | Mapping[str, str] | None = None,
    expected_sha256: str | None = None,
    verify: bool = True,
) -> Iterator[History]:
    if path is None:
        msg = f"longmemeval: not run: data not provided (pass path=...; {OBTAIN})"
        raise DataError(msg)
    data = load_longmemeval(path, subset, expected_sha256=expected_sha256, verify=verify)
    classes = load_answer_classes(answer_classes) if answer_classes is not None else {}
    if answer_class is not None:
        if answer_class not in ANSWER_CLASSES:
            msg = f"longmemeval: answer_class {answer_class!r} (allowed: {', '.join(ANSWER_CLASSES)})"
            raise ValueError(msg)
        if not classes:
            msg = "longmemeval: answer_class selection needs a stored classification (answer_classes=...)"
            raise ValueError(msg)
    types = (KU_TYPE,) if ku else question_types
    for record in data.records:
        if types is not None and record["question_type"] not in types:
            continue
        cls = classes.get(record["question_id"])
        if answer_class is not None and cls != answer_class:
            continue
        yield record_to_history(record, data.subset, verified=data.verified, answer_class=cls)
