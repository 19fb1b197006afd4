"""The `heuristic` backend: a deterministic agent with no LLM ("heuristic (no LLM)" in reports).

It reads the last user message's ``### SECTION`` blocks (:mod:`pmem.models.sections`) and answers each
prompt family with rules over exactly what an LLM would be shown:

========  ===================================================================================
extract   template fact extraction (:mod:`pmem.models._facts`) -> ``{"facts": [...]}``
annotate  typed operation from the fact's status, cue words and the head -> ``{"op", "key", "value"}``
identity  ``same``/``different`` from token overlap of the two key names
answer    extractive reader: the context line that best matches the question's words, its value
lookup    a lookup query (entity + relation words) or ``ANSWER``
prune     ``yes`` when the two turns state different values of the attribute
gate      ``prune`` when the question asks for a current/latest value, else ``keep``
crud      Mem0-style ``{"event": ADD|UPDATE|DELETE|NONE, "id", "key", "value"}``
dedupe    ``{"duplicates": [...], "contradictions": [...]}`` memory ids
judge     ``yes``/``no``: the normalized reference is a substring of the normalized response
========  ===================================================================================

Token counts use :func:`pmem.models._tokens.estimate_tokens` and are flagged ``tokens_estimated``.

>>> import asyncio
>>> from pmem.models.sections import format_sections
>>> m = HeuristicChatModel()
>>> msg = format_sections({"CONTEXT": "apple_1.location = fridge 1", "QUESTION": "Where is the apple 1 now?"})
>>> asyncio.run(m.complete([{"role": "user", "content": msg}], purpose="answer")).text
'fridge 1'
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pmem.graph import GENERIC_KEY_WORDS
from pmem.models._facts import RELATIONS, extract_facts, extract_requests, snake
from pmem.models._tokens import estimate_prompt_tokens, estimate_tokens
from pmem.models._types import CallOptions, ChatModel, Completion
from pmem.models.sections import parse_sections

if TYPE_CHECKING:
    from pmem.models._spec import ModelSpec

MODEL_ID = "heuristic"
LABEL = "heuristic (no LLM)"

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    [
        "the",
        "a",
        "an",
        "is",
        "was",
        "are",
        "were",
        "be",
        "been",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "where",
        "when",
        "how",
        "does",
        "do",
        "did",
        "of",
        "it",
        "its",
        "this",
        "that",
        "there",
        "their",
        "his",
        "her",
        "they",
        "he",
        "she",
        "you",
        "your",
        "i",
        "me",
        "my",
        "please",
        "tell",
        "now",
        "current",
        "currently",
        "latest",
        "today",
        "still",
        "anymore",
    ]
)
# Question words a reader maps onto the relation vocabulary of keys (rules over the question text).
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "prime": ("head", "government"),
    "minister": ("head", "government"),
    "premier": ("head", "government"),
    "chancellor": ("head", "government"),
    "president": ("head", "state"),
    "king": ("head", "state"),
    "queen": ("head", "state"),
    "monarch": ("head", "state"),
    "birth": ("born",),
    "birthplace": ("born", "city"),
    "death": ("died",),
    "die": ("died",),
    "developer": ("developed",),
    "founder": ("founded",),
    "creator": ("created",),
    "spouse": ("married",),
    "wife": ("married",),
    "husband": ("married",),
    "employer": ("employed",),
    "citizen": ("citizenship",),
    "nationality": ("citizenship", "country"),
    "performer": ("performed",),
    "genre": ("music", "type"),
    "ceo": ("chief", "executive", "officer"),
    "located": ("location",),
    "where": ("location",),
    "school": ("educated",),
    "studied": ("educated",),
    "manufacturer": ("produced", "company"),
}
_CUE_WITHDRAW = re.compile(
    r"\b(error|mistake|mistaken|wrong|incorrect|retract\w*|withdr\w+|not true|false)\b", re.I
)
_CUE_CONFIRM = re.compile(r"\b(confirm\w*|verified|settled|definitely|official)\b", re.I)
_CUE_REPORT = re.compile(r"\b(report\w*|reportedly|claims?|says|rumou?r\w*|allegedly|according to)\b", re.I)
_CUE_RECENCY = re.compile(
    r"\b(update\w*|now|moved|currently|latest|new|changed|has been|no longer|recently)\b", re.I
)
_CUE_CURRENT = re.compile(
    r"\b(current\w*|now|latest|most recent\w*|recent\w*|still|anymore|these days|today|present\w*|at the moment|"
    r"new|updated?|changed?)\b",
    re.I,
)
_CUE_CONFLICT_Q = re.compile(r"\b(conflict\w*|contest\w*|disput\w*|alternatives?|both|reports?)\b", re.I)
_CUE_STALE = re.compile(r"\|\s*stale:", re.I)
#: a fact line the memory marks current: "key = value (current; from e3, 8 May 2023)"
_CURRENT = re.compile(r"^\s*\(current\b", re.I)
#: how a turn read back starts: its date and its speaker ("[8 May 2023] Caroline: ", "environment: ")
_TURN_PREFIX = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?[A-Za-z][\w .'-]{0,40}:\s+(?=\S)")
_ANNOT = re.compile(r"\s*[\[(]([^\])]*)[\])]\s*$")
_NUMBER_TAG = re.compile(r"^\s*(?:\[(?:t=)?(\d+)\]|(\d+)[.)])\s*")
# where a rendered cell's disclosures start: " [contested]", " | support: 3", " (contested; ...)"
_LINE_ANNOT = re.compile(
    r"\s(?:\[|\|\s|\((?=(?:contested|active|current|asserted|reported|hedged|alternatives?|support\w*|history|superseded|previously|was|status)\b))",
    re.I,
)
_ALTERNATIVES = re.compile(r"alternatives?:\s*([^\]|)]+)", re.I)
_PUNCT = str.maketrans("", "", string.punctuation)


def _stem(tok: str) -> str:
    for suffix in ("ing", "ed", "es", "s", "e"):
        if len(tok) > len(suffix) + 2 and tok.endswith(suffix):
            return tok[: -len(suffix)]
    return tok


def _tokens(text: str) -> list[str]:
    return [_stem(t) for t in _WORD.findall(text.lower().replace("_", " "))]


def _content(text: str) -> list[str]:
    return [_stem(t) for t in _WORD.findall(text.lower().replace("_", " ")) if t not in _STOP]


def normalize_answer(text: str) -> str:
    """The official normalization: lowercase, drop punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _norm_value(text: str) -> str:
    return " ".join(text.strip().strip(".").lower().split())


def _split_fact(line: str) -> tuple[str, str, str | None]:
    """``key: value (status)`` -> (key, value, status)."""
    line = line.strip()
    status = None
    m = _ANNOT.search(line)
    if m and m.group(1).strip().lower() in {
        "asserted",
        "hedged",
        "reported",
        "withdrawn",
        "confirmed",
        "active",
        "contested",
    }:
        status = m.group(1).strip().lower()
        line = line[: m.start()].rstrip()
    for sep in (" = ", ": ", ":", "="):
        if sep in line:
            key, value = line.split(sep, 1)
            return key.strip(), value.strip(), status
    return line, "", status


def _section_lines(text: str) -> list[str]:
    return [ln for ln in (text or "").splitlines() if ln.strip()]


# --- families -------------------------------------------------------------------------------------
def _extract(sec: dict[str, str]) -> str:
    # a known key spelled differently (case, separators) is reused verbatim
    known = {snake(k): k.strip() for k in _section_lines(sec.get("KEYS", ""))}
    text = sec.get("TEXT", "")
    # what an LLM would be asked for: the provenance fields and lists only where the prompt names them
    asked = sec.get("", "")
    fields = {"key", "value", "status", "confirmed"} | {f for f in ("valid_time", "depends_on") if f in asked}
    facts = []
    # a prompt that asks which numbered line states each fact gets it, as a model that follows it would
    for line in text.splitlines():
        m = _TURN_NUMBER.match(line) if "- turn (" in asked else None
        turn = int(m.group(1)) if m else None
        for f in extract_facts(line[m.end() :] if m else line):
            d = {k: v for k, v in f.as_dict().items() if k in fields}
            d["key"] = known.get(snake(f.key), f.key)
            if turn is not None:
                d["turn"] = turn
            facts.append(d)
    out: dict[str, object] = {"facts": facts}
    asks = extract_requests(text) if '"forget"' in asked else None
    if asks is not None and asks.forget:  # only when present: other replies stay as they were
        out["forget"] = list(asks.forget)
    if asks is not None and asks.distinct:
        out["distinct"] = [list(pair) for pair in asks.distinct]
    return json.dumps(out, ensure_ascii=False)


#: a numbered turn of a citing extraction prompt: "Turn 3: ..."
_TURN_NUMBER = re.compile(r"^\s*Turn (\d+):\s")


def _fact_fields(sec: dict[str, str]) -> tuple[str, str, str, bool]:
    lines = _section_lines(sec.get("FACT", ""))
    key, value, status = _split_fact(lines[0]) if lines else ("", "", None)
    confirmed = status == "confirmed"
    for extra in lines[1:]:
        k, v, _ = _split_fact(extra)
        if k.lower() == "status":
            status = v.lower()
        elif k.lower() == "confirmed":
            confirmed = v.lower() in {"true", "yes", "1"}
    if status == "confirmed":
        status = "asserted"
    return key, value, status or "asserted", confirmed


def _relevant(text: str, key: str, value: str) -> str:
    """The sentences of TEXT about this fact (its value, else its entity): cue words elsewhere in a
    multi-fact chunk ("Trial and Error", another fact's correction) must not leak into this one."""
    sentences = [s for line in text.splitlines() for s in re.split(r"(?<=[.!?])\s+", line) if s.strip()]
    if len(sentences) <= 1:
        return text
    v = value.strip().lower()
    hits = [s for s in sentences if v and v in s.lower()]
    if not hits:
        entity = set(_tokens(key.split(".", 1)[0]))
        hits = [s for s in sentences if entity and entity <= set(_tokens(s))]
    return "\n".join(hits)


def _annotate(sec: dict[str, str]) -> str:
    key, value, status, confirmed = _fact_fields(sec)
    text = _relevant(sec.get("TEXT", ""), key, value)
    if value.strip():  # cue words inside the value itself ("Trial and Error") are not cues
        text = re.sub(re.escape(value.strip()), " ", text, flags=re.I)
    head_line = (
        (sec.get("HEAD") or "none").strip().splitlines()[0] if (sec.get("HEAD") or "").strip() else "none"
    )
    head_value, head_status = None, None
    if head_line.lower() not in {"none", "(none)", "empty", "-"}:
        m = _LINE_ANNOT.search(head_line)
        head_value = head_line[: m.start()].strip() if m else head_line.strip()
        head_status = "contested" if m and "contested" in head_line[m.start() :].lower() else "active"
    alternatives = {
        _norm_value(v)
        for chunk in _ALTERNATIVES.findall(sec.get("HEAD", ""))
        for v in re.split(r"[;,]", chunk)
    }

    def out(op: str, val: str | None) -> str:
        return json.dumps({"op": op, "key": key, "value": val}, ensure_ascii=False)

    same = head_value is not None and _norm_value(value) == _norm_value(head_value)
    confirmed = confirmed or bool(_CUE_CONFIRM.search(text))
    withdrawn = status == "withdrawn" or bool(_CUE_WITHDRAW.search(text))
    if head_value is None:
        return out("noop", None) if withdrawn or not value else out("accept", value)
    if withdrawn:
        if same:
            return out("revoke", None)
        # a correction carrying a replacement value (the withdrawn value is not the head's)
        return out("reject", value) if value and status != "withdrawn" else out("noop", None)
    if head_status == "contested" and confirmed and (same or _norm_value(value) in alternatives or value):
        return out("resolve", value)
    if same:
        return out("noop", None)
    reported = status == "reported" or (bool(_CUE_REPORT.search(text)) and not confirmed)
    if reported and not _CUE_RECENCY.search(text):
        return out("contest", value)
    return out("accept", value)


def _identity(sec: dict[str, str]) -> str:
    """Same key iff the subjects match exactly and the attributes differ only by generic qualifiers."""
    a, b = sec.get("KEY_A", "").strip().lower(), sec.get("KEY_B", "").strip().lower()
    if "." in a and "." in b:
        (sa, xa), (sb, xb) = a.split(".", 1), b.split(".", 1)
        if set(_tokens(sa)) != set(_tokens(sb)):
            return "different"
        ta, tb = set(_content(xa)), set(_content(xb))
    else:
        ta, tb = set(_content(a)), set(_content(b))
    if not ta or not tb:
        return "different"
    if {t for t in ta if t.isdigit()} != {t for t in tb if t.isdigit()}:
        return "different"
    return "same" if (ta ^ tb) <= GENERIC_KEY_WORDS else "different"


def _line_parts(line: str) -> tuple[str, str, str]:
    """A context line -> (key-ish text, value, annotation)."""
    body = _NUMBER_TAG.sub("", line.strip()).lstrip("-*• ").strip()
    annotation = ""
    m = _LINE_ANNOT.search(body)
    if m:
        annotation = body[m.start() :]
        body = body[: m.start()].rstrip()
    for sep in (" = ", ": "):
        idx = body.find(sep)
        head = body[:idx].strip()
        # "key: value" only when the left side looks like a key (a raw "Update: ..." sentence does not)
        if idx > 0 and " " not in head and (sep == " = " or "." in head or "_" in head):
            return head, body[idx + len(sep) :].strip(), annotation
    return body, "", annotation


_RELATION_WORDS = frozenset(t for r in RELATIONS for t in _tokens(r)) - {"of", "in", "by", "to", "at", "for"}


@dataclass(frozen=True)
class _Item:
    idx: int
    line: str
    value: str
    annotation: str
    toks: frozenset[str]  # "key = value" lines: the key's tokens; raw lines: every token
    subject: str  # snake_case entity ("" when unknown)
    relation: frozenset[str]


@functools.lru_cache(maxsize=16_384)
def _line_reading(line: str) -> tuple[str, str, frozenset[str], str, frozenset[str]]:
    """A context line's value, annotation, key tokens, subject and relation words. Cached: the lines of a
    history recur in every context built from it (each retrieved answer reads its top lines again)."""
    key, value, annotation = _line_parts(line)
    fact_key = key
    if not value:  # a raw sentence (a turn read back: "[date] speaker: text"): read it with the templates
        facts = extract_facts(key) or extract_facts(_TURN_PREFIX.sub("", key))
        if facts:
            fact_key, value = facts[-1].key, facts[-1].value
    subject, _, relation = fact_key.partition(".")
    return (
        value or key,
        annotation,
        frozenset(_tokens(key)),
        snake(subject) if relation else "",
        frozenset(_tokens(relation)),
    )


def _items(context: str) -> tuple[_Item, ...]:
    return tuple(_Item(idx, line, *_line_reading(line)) for idx, line in enumerate(_section_lines(context)))


@dataclass(frozen=True)
class _Context:
    """A context section read once: its lines, how many lines hold each token, the lines of each subject,
    and every relation word it names."""

    items: tuple[_Item, ...]
    df: Counter[str]
    by_subject: dict[str, tuple[_Item, ...]]
    vocabulary: frozenset[str]


@functools.lru_cache(maxsize=16)
def _context(context: str) -> _Context:
    """The reading of a context section. Cached: a long-context arm asks every question of a history over
    the same prompt, which took 35 ms to read each time on a 6k-token history. The cache holds 16 contexts,
    not thousands, since a LongMemEval context is megabytes of lines."""
    items = _items(context)
    df: Counter[str] = Counter()
    by_subject: dict[str, list[_Item]] = {}
    for it in items:
        df.update(it.toks)
        if it.subject:
            by_subject.setdefault(it.subject, []).append(it)
    vocabulary = frozenset(_RELATION_WORDS.union(*(it.relation for it in items)))
    return _Context(items, df, {k: tuple(v) for k, v in by_subject.items()}, vocabulary)


@dataclass(frozen=True)
class _Reading:
    path: tuple[_Item, ...]  # the matched line, then the lines a multi-hop question chains through
    remaining: frozenset[str]  # relation words of the question no line of the path explains


_CUE_CHANGE = re.compile(r"\b(?:update[ds]?|moved|has been moved|then put|changed|switched)\b", re.IGNORECASE)


#: Prompts longer than this are answered on a worker thread (see HeuristicChatModel.complete).
_THREAD_ABOVE_CHARS = 20_000


def _read(sec: dict[str, str]) -> _Reading | None:
    """The context line that best matches the question, followed through hops while later lines'
    relations explain more of the question's words (``X.spouse = Y``, ``y.citizenship_country = Z``)."""
    context = _context(sec.get("CONTEXT", ""))
    items = context.items
    question = sec.get("QUESTION", "")
    q = _content(question)
    expanded = set(q)
    for t in q:
        expanded.update(_stem(s) for s in _SYNONYMS.get(t, ()))
    # proper-noun tokens of the question (not its first word) must be matched if there are any
    words = re.findall(r"[\w'’]+", question)
    proper = {_stem(w.lower()) for w in words[1:] if w[:1].isupper()} - _STOP
    df = context.df
    n = len(items)
    best: tuple[tuple[float, int, bool, int], _Item] | None = None
    for it in items:
        hit = it.toks & expanded
        if not hit or (proper and not (proper & it.toks)):
            continue
        score = sum(math.log(1.0 + n / df[t]) for t in hit)
        tag = _NUMBER_TAG.match(it.line.strip())
        order = int(tag.group(1) or tag.group(2)) if tag else -1
        # ties: the higher order tag (newer) wins; then a line that states a change ("moved from a to
        # b") over a static record of the same thing; then the earlier (higher-ranked) line
        rank = (round(score, 9), order, bool(_CUE_CHANGE.search(it.line)), -it.idx)
        if best is None or rank > best[0]:
            best = (rank, it)
    if best is None:
        return None
    chosen = best[1]
    if not _CURRENT.search(chosen.annotation) and chosen.subject:
        # a turn about a subject whose value the memory marks current: the current value answers (the
        # turn may be an earlier move of it)
        current = [
            it
            for it in context.by_subject.get(chosen.subject, ())
            if it.relation == chosen.relation and _CURRENT.search(it.annotation)
        ]
        chosen = current[0] if current else chosen
    path = [chosen]
    used = set(chosen.toks & expanded)
    for _ in range(4):
        candidates = [it for it in context.by_subject.get(snake(path[-1].value), ()) if it not in path]
        gains = [(len((it.relation & expanded) - used), -it.idx, it) for it in candidates]
        gains = [g for g in gains if g[0] > 0]
        if not gains:
            break
        step = max(gains, key=lambda g: (g[0], g[1]))[2]
        path.append(step)
        used |= step.relation & expanded
    return _Reading(tuple(path), frozenset((expanded & context.vocabulary) - used - proper))


def _answer(sec: dict[str, str]) -> str:
    reading = _read(sec)
    if reading is None:
        return "unknown"
    last = reading.path[-1]
    answer, annotation = last.value, last.annotation
    if (annotation and _CUE_CONFLICT_Q.search(sec.get("QUESTION", ""))) or "contested" in annotation.lower():
        alts = _ALTERNATIVES.findall(annotation)
        others = [a.strip() for chunk in alts for a in re.split(r"[;,]", chunk) if a.strip()]
        if others:
            answer = " or ".join([answer, *others])
    if _CUE_STALE.search(annotation):
        answer += " (possibly out of date: a premise it was derived from changed)"
    return answer


def _lookup(sec: dict[str, str]) -> str:
    reading = _read(sec)
    if reading is None:
        question = sec.get("QUESTION", "")
        words = [w for w in re.findall(r"[\w'’]+", question) if w.lower() not in _STOP]
        return " ".join(words) if words else "ANSWER"
    if not reading.remaining:
        return "ANSWER"
    # the chain stops at an entity the context has no line for: ask for it and the unexplained relation
    return " ".join([reading.path[-1].value, *sorted(reading.remaining)])


def _turn_value(turn: str, attr: set[str]) -> tuple[set[str], bool]:
    best: tuple[int, set[str]] = (0, set())
    for sentence in re.split(r"(?<=[.!?])\s+", turn):
        toks = set(_content(sentence))
        hit = len(toks & attr)
        if hit > best[0]:
            best = (hit, toks - attr)
    return best[1], best[0] > 0


def _prune(sec: dict[str, str]) -> str:
    attr = set(_content(sec.get("ATTRIBUTE", "")))
    va, ma = _turn_value(re.sub(r"^\s*\[[^\]]*\]\s*", "", sec.get("TURN_A", "")), attr)
    vb, mb = _turn_value(re.sub(r"^\s*\[[^\]]*\]\s*", "", sec.get("TURN_B", "")), attr)
    if not (ma and mb):
        return "no"
    na = {t for t in va if any(c.isdigit() for c in t)}
    nb = {t for t in vb if any(c.isdigit() for c in t)}
    if na and nb:
        return "yes" if na != nb else "no"
    union = va | vb
    return "yes" if union and len(va & vb) / len(union) < 0.5 else "no"


def _gate(sec: dict[str, str]) -> str:
    return "prune" if _CUE_CURRENT.search(sec.get("QUESTION", "")) else "keep"


def _memories(sec: dict[str, str]) -> list[tuple[str, str, str]]:
    out = []
    for line in _section_lines(sec.get("MEMORIES", "")):
        m = re.match(r"^\s*\[?([\w\-]+)\]?[.)]?\s+(.*)$", line)
        if m:
            key, value, _ = _split_fact(m.group(2))
            out.append((m.group(1), key, value))
    return out


def _crud(sec: dict[str, str]) -> str:
    key, value, status, _ = _fact_fields(sec)
    withdrawn = status == "withdrawn" or bool(_CUE_WITHDRAW.search(sec.get("TEXT", "")))
    for mid, mkey, mvalue in _memories(sec):
        if snake(mkey) == snake(key):
            if withdrawn:
                event = "DELETE" if _norm_value(mvalue) == _norm_value(value) else "NONE"
            else:
                event = "NONE" if _norm_value(mvalue) == _norm_value(value) else "UPDATE"
            return json.dumps({"event": event, "id": mid, "key": key, "value": value}, ensure_ascii=False)
    event = "NONE" if withdrawn or not value else "ADD"
    return json.dumps({"event": event, "id": None, "key": key, "value": value}, ensure_ascii=False)


def _dedupe(sec: dict[str, str]) -> str:
    key, value, _, _ = _fact_fields(sec)
    dup: list[str] = []
    con: list[str] = []
    for mid, mkey, mvalue in _memories(sec):
        if snake(mkey) == snake(key):
            (dup if _norm_value(mvalue) == _norm_value(value) else con).append(mid)
    return json.dumps({"duplicates": dup, "contradictions": con})


def _judge(sec: dict[str, str]) -> str:
    response = normalize_answer(sec.get("RESPONSE", ""))
    refs = [normalize_answer(r) for r in re.split(r"\n|\s\|\s", sec.get("REFERENCE", "")) if r.strip()]
    return "yes" if any(r and r in response for r in refs) else "no"


FAMILIES: dict[str, Callable[[dict[str, str]], str]] = {
    "extract": _extract,
    "annotate": _annotate,
    "identity": _identity,
    "answer": _answer,
    "lookup": _lookup,
    "prune": _prune,
    "gate": _gate,
    "crud": _crud,
    "dedupe": _dedupe,
    "judge": _judge,
}


def infer_purpose(sections: dict[str, str]) -> str:
    """The prompt family from the section names (used when no purpose tag travels, e.g. over HTTP)."""
    names = set(sections)
    preamble = sections.get("", "").lower()
    if "TEXT" in names and "FACT" not in names:
        return "extract"
    if {"FACT", "HEAD"} <= names:
        return "annotate"
    if {"KEY_A", "KEY_B"} <= names:
        return "identity"
    if {"REFERENCE", "RESPONSE"} <= names:
        return "judge"
    if "TURN_A" in names:
        return "prune"
    if {"FACT", "MEMORIES"} <= names:
        return "dedupe" if "duplicate" in preamble or "contradict" in preamble else "crud"
    if "CONTEXT" in names:
        return "lookup" if "lookup" in preamble else "answer"
    if "QUESTION" in names:
        return "gate"
    return "unknown"


def respond(
    messages: Sequence[dict[str, str]], purpose: str | None = None, schema: dict[str, Any] | None = None
) -> str:
    """The heuristic agent's reply text to a chat prompt."""
    last = next((m for m in reversed(messages) if m.get("role", "user") == "user"), None)
    sections = parse_sections(str(last.get("content") or "")) if last else {"": ""}
    family = FAMILIES.get(purpose or "") or FAMILIES.get(infer_purpose(sections))
    text = family(sections) if family else ""
    if schema and not text.startswith("{"):
        props = list((schema.get("properties") or {}).keys())
        text = json.dumps({props[0] if props else "answer": text}, ensure_ascii=False)
    return text


class HeuristicChatModel(ChatModel):
    """The embedded default agent. Deterministic; never sees gold answers (only the judge's reference)."""

    label = LABEL

    def __init__(self, model_id: str = MODEL_ID) -> None:
        self.model_id = model_id

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> HeuristicChatModel:
        return cls(spec.model or MODEL_ID)

    async def generate(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        t0 = time.perf_counter()
        purpose, schema = options.purpose, options.schema
        if sum(len(m.get("content") or "") for m in messages) > _THREAD_ABOVE_CHARS:
            # a long-context read costs milliseconds of rules: keep the caller's event loop responsive
            text = await asyncio.to_thread(respond, messages, purpose, schema)
        else:
            text = respond(messages, purpose, schema)
            await asyncio.sleep(0)  # yield like a real model call, so histories interleave
        parsed, parse_error = None, None
        if schema is not None:
            try:
                parsed = json.loads(text)
            except ValueError as exc:
                parse_error = f"heuristic output is not JSON: {exc}"
        return Completion(
            text=text,
            model=self.model_id,
            purpose=purpose,
            prompt_tokens=estimate_prompt_tokens(messages),
            completion_tokens=estimate_tokens(text),
            latency_s=time.perf_counter() - t0,
            parsed=parsed,
            parse_error=parse_error,
            tokens_estimated=True,
        )
