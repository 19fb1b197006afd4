"""MemoryAgentBench FactConsolidation (the official Conflict_Resolution split), vendored.

One history per subset: the numbered fact list as events in order (event ``index`` = the fact's
number, text = the numbered line), then the 100 questions after the whole stream. The template
parser (:mod:`pmem.bench._facts`) gives every key's value sequence, the gold current state, the
overwritten-key counts and the single-hop stale-rate denominator:

- a single-hop question is *stale-scoreable* when a key whose subject occurs in the question has more
  than one parsed value and its final value equals the gold answer (the longest such subject wins);
  its ``stale`` values are that key's earlier values and ``stale_key`` the key;
- a prediction is stale when it is incorrect and matches one of those earlier values.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from pmem.bench._data import DataError, verified_path
from pmem.bench._facts import fact_key, parse_fact, split_number
from pmem.bench._scoring import normalize_answer
from pmem.bench._types import Event, History, Question

NAME = "factconsolidation"
LENGTHS: tuple[str, ...] = ("6k", "32k", "64k", "262k")
SUBSETS: tuple[str, ...] = tuple(f"{k}_{n}" for k in ("sh", "mh") for n in LENGTHS)
SOURCE = (
    "official MemoryAgentBench Conflict_Resolution split (FactConsolidation), vendored in "
    "datasets/factconsolidation/ (MIT; facts from MQuAKE)"
)


def data_file(subset: str) -> str:
    if subset not in SUBSETS:
        msg = f"unknown factconsolidation subset {subset!r} (known: {', '.join(SUBSETS)})"
        raise ValueError(msg)
    return f"factconsolidation/factconsolidation_{subset}.json"


@dataclass(frozen=True)
class ParsedFact:
    index: int
    subject: str
    relation: str
    object: str

    @property
    def key(self) -> str:
        return fact_key(self.subject, self.relation)


@dataclass
class FactStream:
    """What the template parser derives from one fact stream."""

    facts: list[ParsedFact] = field(default_factory=list)
    misses: list[tuple[int, str]] = field(default_factory=list)
    #: (subject, relation) -> values in arrival order
    sequences: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.facts) + len(self.misses)

    @property
    def coverage(self) -> float:
        return len(self.facts) / self.total if self.total else 1.0

    @property
    def keys(self) -> int:
        return len(self.sequences)

    @property
    def overwritten(self) -> int:
        """Keys with more than one parsed value (overwritten at least once)."""
        return sum(1 for v in self.sequences.values() if len(v) > 1)

    def current_state(self) -> dict[str, str]:
        """The gold current state: ``fact_key -> final value``, sorted by key."""
        return dict(sorted((fact_key(s, r), v[-1]) for (s, r), v in self.sequences.items()))

    def value_sequences(self) -> dict[str, list[str]]:
        return {fact_key(s, r): list(v) for (s, r), v in self.sequences.items()}


def analyze_lines(lines: list[tuple[int, str]]) -> FactStream:
    """Parse numbered fact lines ``(number, sentence)`` into a :class:`FactStream`."""
    out = FactStream()
    seqs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for number, text in lines:
        parsed = parse_fact(text)
        if parsed is None:
            out.misses.append((number, text))
            continue
        s, r, o = parsed
        out.facts.append(ParsedFact(number, s, r, o))
        seqs[(s, r)].append(o)
    out.sequences = dict(seqs)
    return out


@dataclass(frozen=True)
class RawSubset:
    subset: str
    path: Path
    lines: tuple[tuple[int, str], ...]
    questions: tuple[str, ...]
    answers: tuple[tuple[str, ...], ...]
    qa_ids: tuple[str, ...]


def _split_context(context: str, where: str) -> tuple[tuple[int, str], ...]:
    out: list[tuple[int, str]] = []
    body = context.split("\n")
    for pos, line in enumerate(body):
        if not line.strip() or (pos == 0 and not line[:1].isdigit()):
            continue  # the "Here is a list of facts:" header and blank lines
        number, text = split_number(line)
        if number is None:
            msg = f"{where}: context line {pos} is not a numbered fact: {line[:80]!r}"
            raise DataError(msg)
        out.append((number, text))
    return tuple(out)


@lru_cache(maxsize=16)
def _load_raw_cached(path: str, mtime_ns: int, subset: str) -> RawSubset:
    where = f"{path}"
    with open(path, encoding="utf-8") as f:
        row = json.load(f)
    for fld in ("context", "questions", "answers"):
        if fld not in row:
            msg = f"{where}: field {fld!r} is missing (expected context, questions, answers, metadata)"
            raise DataError(msg)
    if len(row["questions"]) != len(row["answers"]):
        msg = f"{where}: {len(row['questions'])} questions but {len(row['answers'])} answer lists"
        raise DataError(msg)
    ids = (row.get("metadata") or {}).get("qa_pair_ids") or [
        f"factconsolidation_{subset}_no{i}" for i in range(len(row["questions"]))
    ]
    return RawSubset(
        subset=subset,
        path=Path(path),
        lines=_split_context(row["context"], where),
        questions=tuple(row["questions"]),
        answers=tuple(tuple(a) for a in row["answers"]),
        qa_ids=tuple(ids),
    )


def load_raw(subset: str) -> RawSubset:
    path = verified_path(data_file(subset))
    return _load_raw_cached(str(path), path.stat().st_mtime_ns, subset)


@lru_cache(maxsize=8)
def _analyze_cached(path: str, mtime_ns: int, subset: str) -> FactStream:
    return analyze_lines(list(_load_raw_cached(path, mtime_ns, subset).lines))


def analyze_subset(subset: str) -> FactStream:
    """The parsed stream of a subset (sh and mh of one length share it)."""
    path = verified_path(data_file(subset))
    return _analyze_cached(str(path), path.stat().st_mtime_ns, subset)


@dataclass(frozen=True)
class StaleTarget:
    key: str
    subject: str
    relation: str
    earlier: tuple[str, ...]


def stale_targets(
    stream: FactStream, questions: tuple[str, ...], answers: tuple[tuple[str, ...], ...]
) -> list[StaleTarget | None]:
    """Per question, the overwritten key it asks about (see the module docstring), else None."""
    by_final: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for (s, r), values in stream.sequences.items():
        if len(values) > 1:
            by_final[normalize_answer(values[-1])].append((s, r))
    out: list[StaleTarget | None] = []
    for q, golds in zip(questions, answers, strict=True):
        ql = q.lower()
        best: tuple[str, str] | None = None
        for g in golds:
            for s, r in by_final.get(normalize_answer(g), ()):
                if s.lower() in ql and (best is None or len(s) > len(best[0])):
                    best = (s, r)
        if best is None:
            out.append(None)
            continue
        values = stream.sequences[best]
        earlier = tuple(dict.fromkeys(v for v in values[:-1] if v != values[-1]))
        out.append(StaleTarget(fact_key(*best), best[0], best[1], earlier))
    return out


def gold_not_final(stream: FactStream, raw: RawSubset) -> list[tuple[str, str, str, list[str]]]:
    """Single-hop questions whose gold is an *earlier* value of a key named in the question, never a
    final one: data quirks worth knowing when reading stale rates (question, gold, key, values)."""
    out: list[tuple[str, str, str, list[str]]] = []
    for q, golds in zip(raw.questions, raw.answers, strict=True):
        ql, gn = q.lower(), {normalize_answer(g) for g in golds}
        hits = [(s, r) for (s, r) in stream.sequences if s.lower() in ql]
        finals = [k for k in hits if normalize_answer(stream.sequences[k][-1]) in gn]
        earlier = [k for k in hits if any(normalize_answer(v) in gn for v in stream.sequences[k][:-1])]
        if not finals and earlier:
            k = earlier[0]
            out.append((q, golds[0], fact_key(*k), list(stream.sequences[k])))
    return out


def build_history(subset: str) -> History:
    raw = load_raw(subset)
    kind, length = subset.split("_")
    events = tuple(Event(index=n, text=f"{n}. {t}", source="fact") for n, t in raw.lines)
    expected = tuple(range(len(events)))
    if tuple(e.index for e in events) != expected:
        msg = f"{raw.path}: fact numbers are not 0..{len(events) - 1} in order"
        raise DataError(msg)
    params: dict[str, Any] = {"length": length, "hops": kind}
    targets: list[StaleTarget | None]
    if kind == "sh":
        targets = stale_targets(
            _analyze_cached(str(raw.path), raw.path.stat().st_mtime_ns, subset), raw.questions, raw.answers
        )
    else:
        targets = [None] * len(raw.questions)
    qtype = "single-hop" if kind == "sh" else "multi-hop"
    last = len(events) - 1
    questions = tuple(
        Question(
            id=qid,
            text=q,
            gold=golds,
            qtype=qtype,
            after_event=last,
            stale=t.earlier if t else (),
            params=dict(params),
            stale_key=t.key if t else None,
        )
        for qid, q, golds, t in zip(raw.qa_ids, raw.questions, raw.answers, targets, strict=True)
    )
    return History(
        id=f"{NAME}/{subset}",
        benchmark=NAME,
        subset=subset,
        events=events,
        questions=questions,
        params=params,
    )


def cut_history(history: History, *, events: int | None = None, questions: int | None = None) -> History:
    """A smaller slice of a FactConsolidation history, for tiers where every call costs real tokens:
    the first ``events`` facts of the stream, and the first ``questions`` questions whose gold value
    appears in what is kept (a question about a fact that was cut would test nothing), asked after the
    last kept fact. 0 or None keeps everything. The parameters go into ``params`` (and the history id).

    >>> h = build_history("sh_6k")  # doctest: +SKIP
    >>> small = cut_history(h, events=40, questions=5)  # doctest: +SKIP
    """
    for name, value in (("events", events), ("questions", questions)):
        if value is not None and value < 0:
            msg = f"{history.id}: {name} must be >= 0 (0 keeps all), got {value}"
            raise ValueError(msg)
    kept = history.events[:events] if events else history.events
    if not kept:
        msg = f"{history.id}: events={events} keeps no fact"
        raise ValueError(msg)
    text = "\n".join(e.text for e in kept).lower()
    last = len(kept) - 1
    params = {
        **history.params,
        **({"events": events} if events else {}),
        **({"questions": questions} if questions else {}),
    }
    answerable = [
        replace(q, after_event=last, params={**q.params, **params})
        for q in history.questions
        if not events or any(g and g.lower() in text for g in q.gold)
    ]
    picked = tuple(answerable[:questions] if questions else answerable)
    suffix = "".join(f"/{k}={params[k]}" for k in ("events", "questions") if k in params)
    return replace(history, id=f"{history.id}{suffix}", events=tuple(kept), questions=picked, params=params)
