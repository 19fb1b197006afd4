"""Every prompt the arms send, in one place, as versioned templates.

A template is an instruction preamble plus the ``### SECTION`` names it fills
(:mod:`pmem.models.sections`), the purpose tag its calls carry, an optional JSON schema for
constrained decoding and a completion budget. The same text goes to an LLM (``openai``/``vllm``) and
to the heuristic backend, which reads the sections with rules. :func:`prompt_templates_hash` hashes all
of them; the runner folds it into a run's config hash, so editing a prompt changes the run identity.

Section layouts are chosen so that the heuristic backend (and the local server, which infers the
family from the section names when no purpose header travels) recognises each family: the answer
preamble never says "lookup", the CRUD preamble never says "duplicate" or "contradict".

>>> msgs = build_messages("identity", KEY_A="apple_1.location", KEY_B="apple_2.location")
>>> msgs[0]["role"], "### KEY_A" in msgs[0]["content"]
('user', True)
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pmem.graph import OPS
from pmem.models import estimate_tokens
from pmem.models.sections import format_sections

#: Statuses an extracted fact may carry (anything else is read as ``asserted``).
ASSERTION_STATUSES = ("asserted", "hedged", "reported", "withdrawn")
#: Typed operations an annotation may choose: every operation of the core.
ANNOTATION_OPS: tuple[str, ...] = OPS
#: Mem0-style CRUD events.
CRUD_EVENTS = ("ADD", "UPDATE", "DELETE", "NONE")


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    version: int
    purpose: str
    preamble: str
    sections: tuple[str, ...]
    schema: dict[str, Any] | None = None
    max_tokens: int = 256
    optional: tuple[str, ...] = field(default=())
    #: when set, (base, per input token): the reply may hold ``base + per x`` the sections' estimated
    #: tokens, up to ``max_tokens``. What a reply restates cannot be much longer than its input, and a
    #: small model that loops inside a JSON array stops there instead of at ``max_tokens``.
    reply_scale: tuple[int, float] | None = None

    def reply_limit(self, sections: Mapping[str, str]) -> int:
        """The ``max_tokens`` of one call with these sections.

        >>> template("extract").reply_limit({"TEXT": "Update: apple 1 has been moved from shelf 2 to desk 1."})
        92
        >>> template("answer").reply_limit({"CONTEXT": "x" * 10_000, "QUESTION": "?"})
        128
        """
        if self.reply_scale is None:
            return self.max_tokens
        base, per = self.reply_scale
        size = sum(estimate_tokens(v) for v in sections.values())
        return min(self.max_tokens, base + int(per * size))

    def fingerprint(self) -> dict[str, Any]:
        scale = {} if self.reply_scale is None else {"reply_scale": list(self.reply_scale)}
        return {
            **scale,
            "name": self.name,
            "version": self.version,
            "purpose": self.purpose,
            "preamble": self.preamble,
            "sections": list(self.sections),
            "optional": list(self.optional),
            "schema": self.schema,
            "max_tokens": self.max_tokens,
        }


_EXTRACT = PromptTemplate(
    name="extract",
    version=1,
    purpose="extract",
    preamble=(
        "You write an agent's long-term memory. Read the text under TEXT and list every fact it states.\n"
        'Return JSON: {"facts": [{"key": ..., "value": ..., "status": ...}, ...]}.\n'
        "- key: a snake_case identifier of the subject and the attribute, joined by a dot, for example "
        "apple_1.location or marie_curie.spouse. A key never contains the value: the same attribute of the "
        "same subject always gets the same key, whatever value it holds.\n"
        "- value: the value copied exactly as the text writes it.\n"
        "- status: asserted (stated as true), hedged (stated with doubt), reported (a claim passed on with no "
        "sign that it is newer or more reliable than what was known), or withdrawn (the text says an earlier "
        "statement was wrong; the value is the one declared wrong).\n"
        "Keep the facts in the order of the text. Do not merge, drop or deduplicate them. If the text states "
        'no fact, return {"facts": []}. TIME, when given, is when the text was observed: it is never a fact, '
        "a key or a value."
    ),
    sections=("TEXT",),
    optional=("TIME",),
    schema={
        "type": "object",
        "properties": {
            "facts": {
                "type": "array",
                "items": {
                    "type": "object",
                    # non-empty: the write path drops an empty key or value, so a grammar need not
                    # admit one (SmolLM2-135M on vLLM otherwise loops on '{"key":"","value":""}')
                    "properties": {
                        "key": {"type": "string", "minLength": 1},
                        "value": {"type": "string", "minLength": 1},
                        "status": {"type": "string", "enum": list(ASSERTION_STATUSES)},
                    },
                    "required": ["key", "value", "status"],
                },
            }
        },
        "required": ["facts"],
    },
    max_tokens=2048,
    reply_scale=(64, 2.0),
)


def _provenance_schema(base: dict[str, Any] | None) -> dict[str, Any]:
    """The paper's extraction schema plus the optional fields and lists of the provenance write path."""
    schema = copy.deepcopy(base or {})
    props = schema["properties"]
    props["facts"]["items"]["properties"].update(
        {
            "valid_time": {"type": "string"},
            "depends_on": {"type": "array", "items": {"type": "string"}},
            "turn": {"type": "integer", "minimum": 1},
        }
    )
    props["forget"] = {"type": "array", "items": {"type": "string"}}
    pair = {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}
    props["distinct"] = {"type": "array", "items": pair}
    return schema


#: The extraction of P-Mem's replayable-provenance write path (``provenance = true``): the paper's prompt
#: plus what that path acts on (valid times, premises, forget requests, names that differ). The other
#: arms, and ``pmem-paper``, keep the paper's prompt: they would ignore the extra fields, and a small
#: model writes worse JSON under the longer instruction (SmolLM2-135M on the CPU tier: 48 of 81 replies
#: cut at their limit with this prompt, 21 of 81 with the paper's).
_EXTRACT_PROVENANCE = PromptTemplate(
    name="extract_provenance",
    version=3,
    purpose="extract",
    preamble=(
        _EXTRACT.preamble.replace(
            # a person's key in the example: with only an object's (apple_1) Qwen2.5-Coder-1.5B numbered
            # people too (john_1.hobbies, then james_1 and john_2 for one speaker)
            "apple_1.location or marie_curie.spouse",
            "caroline.job, apple_1.location or marie_curie.spouse",
        )
        .replace(
            # the longer instruction made the model list fewer facts: 24 against the paper prompt's 50 on
            # four LoCoMo sessions (Qwen2.5-Coder-1.5B); asking for each fact of a turn brought 49
            "Keep the facts in the order of the text.",
            "Keep the facts in the order of the text. A turn or sentence often states several facts: list "
            "each one (what a person does, has, plans, likes, feels, where and when).",
        )
        .replace(
            "Keep the facts in the order",
            "- valid_time (only when the text says from when the fact holds, as in 'As of March 3, 2025, "
            "...'): that date as YYYY-MM-DD.\n"
            "- depends_on (only when the text gives the fact as following from other facts, as in '... "
            "because ...'): the keys of those premise facts.\n"
            "- turn (only when the lines of TEXT are numbered turns, 'Turn 3: ...'): the number of the turn "
            "that states the fact.\n"
            "Keep the facts in the order",
        )
        + '\nTwo more lists, only when the text asks for them: "forget": the keys the user asks you to forget '
        'what they told you about; "distinct": pairs of names that the text says are different people or '
        'things, each pair as ["name", "name"].'
    ),
    sections=("TEXT",),
    optional=("TIME",),
    schema=_provenance_schema(_EXTRACT.schema),
    max_tokens=2048,
    reply_scale=(64, 2.0),
)

_ANNOTATE = PromptTemplate(
    name="annotate",
    version=2,
    purpose="annotate",
    preamble=(
        "You keep a memory that holds one current value per key. A new fact has arrived (FACT, with its "
        "status); HEAD is the key's current value and its status, or none. TEXT is the observation the fact "
        "came from. Choose the one operation that places the fact:\n"
        "- accept: the fact is the new current value (a change, a move, a newer statement).\n"
        "- reject: the current value was wrong; value = the replacement if the fact gives one, else null.\n"
        "- revoke: the fact withdraws the current value and gives no replacement (value null).\n"
        "- contest: a competing claim with no sign that it is newer or more authoritative; both are kept "
        "until something settles them (only when HEAD is active).\n"
        "- resolve: HEAD is contested and the fact settles it; value = the winning value.\n"
        "- noop: the fact repeats the current value or changes nothing.\n"
        'Return JSON: {"op": ..., "key": ..., "value": ...}.'
    ),
    # the unit's text first: every fact of a unit is annotated over the same text, so a server's prompt
    # cache resumes each call after it (in the dev slice a LoCoMo session's 1,700-token annotation took
    # 91 s a call with the text last, the whole prompt evaluated again for each fact)
    sections=("TEXT", "FACT", "HEAD"),
    schema={
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(ANNOTATION_OPS)},
            "key": {"type": "string"},
            "value": {"type": ["string", "null"]},
        },
        "required": ["op", "key", "value"],
    },
    max_tokens=128,
)

_IDENTITY = PromptTemplate(
    name="identity",
    version=1,
    purpose="identity",
    preamble=(
        "Two memory keys are shown, names only. Do they name the same attribute of the same subject? "
        "Reply with one word: same or different."
    ),
    sections=("KEY_A", "KEY_B"),
    max_tokens=4,
)

_ANSWER = PromptTemplate(
    name="answer",
    version=4,
    purpose="answer",
    preamble=(
        "Answer the question using the memory under CONTEXT, one item per line: facts (key = value, with "
        "their status and the turn and date they come from) and dated turns of what was said "
        "([date] speaker: text). The memory overrides what you know about the world. When two items give "
        "different values for the same thing, the later one holds (a higher [t=...] tag or a later date). "
        "If the memory marks a value as contested, give every candidate value; a value held by source "
        "authority is the current one, and its alternatives are claims by lower-ranked sources (name them "
        "only when asked about conflicting reports). If the memory marks a value as stale, say that it may "
        "be out of date. A relative time in an item (yesterday, last week, next month) counts from that "
        "item's date: answer with the date it means, written as the memory writes dates (yesterday in an "
        "item of 8 May 2023: 7 May 2023; last week: the week before 8 May 2023). Answer in plain words, "
        "never with a key, an id or a tag. Reply with the answer only, as short as possible."
    ),
    sections=("CONTEXT", "QUESTION"),
    optional=("DATE",),
    max_tokens=128,
)

_LOOKUP = PromptTemplate(
    name="lookup",
    version=1,
    purpose="lookup",
    preamble=(
        "You are answering the question from the memory under CONTEXT and may fetch more memory first. "
        "If the context is enough to answer, reply ANSWER. Otherwise reply with one lookup, written as "
        "LOOKUP: <entity> <relation>, naming the entity and relation whose value you need next."
    ),
    sections=("CONTEXT", "QUESTION"),
    max_tokens=32,
)

_PRUNE = PromptTemplate(
    name="prune",
    version=1,
    purpose="prune",
    preamble=(
        "Two dated turns and the attribute a question asks about. Do the two turns state different values "
        "of that attribute? Reply with one word: yes or no."
    ),
    sections=("ATTRIBUTE", "TURN_A", "TURN_B"),
    max_tokens=2,
)

_GATE = PromptTemplate(
    name="gate",
    version=1,
    purpose="gate",
    preamble=(
        "Does this question ask for the current value of something that may have changed over time? "
        "Reply with one word: prune if it does, keep if it does not."
    ),
    sections=("QUESTION",),
    max_tokens=2,
)

_CRUD = PromptTemplate(
    name="crud",
    version=1,
    purpose="crud",
    preamble=(
        "You manage a memory store. Compare the new fact (FACT, with its status) with the most similar "
        "stored memories (MEMORIES, each written [id] key: value) and choose one event:\n"
        "- ADD: new information not yet stored.\n"
        "- UPDATE: a stored memory about the same thing holds a different value; it is replaced (give its "
        "id).\n"
        "- DELETE: the fact says a stored memory is wrong or no longer true; it is removed (give its id).\n"
        "- NONE: already stored, or nothing to do.\n"
        'Return JSON: {"event": ..., "id": ..., "key": ..., "value": ...}.'
    ),
    sections=("FACT", "MEMORIES"),
    schema={
        "type": "object",
        "properties": {
            "event": {"type": "string", "enum": list(CRUD_EVENTS)},
            "id": {"type": ["string", "null"]},
            "key": {"type": "string"},
            "value": {"type": ["string", "null"]},
        },
        "required": ["event", "id", "key", "value"],
    },
    max_tokens=128,
)

_DEDUPE = PromptTemplate(
    name="dedupe",
    version=1,
    purpose="dedupe",
    preamble=(
        "You maintain a knowledge graph whose facts carry validity intervals. For the new fact (FACT), list "
        "the ids of the stored facts (MEMORIES, each [id] key: value) that are duplicates of it (the same "
        "information) and the ids of those it contradicts (same subject and attribute, a different value: "
        'they stop being valid now). Return JSON: {"duplicates": [...], "contradictions": [...]}.'
    ),
    sections=("FACT", "MEMORIES"),
    schema={
        "type": "object",
        "properties": {
            "duplicates": {"type": "array", "items": {"type": "string"}},
            "contradictions": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["duplicates", "contradictions"],
    },
    max_tokens=128,
)

TEMPLATES: dict[str, PromptTemplate] = {
    t.name: t
    for t in (
        _EXTRACT,
        _EXTRACT_PROVENANCE,
        _ANNOTATE,
        _IDENTITY,
        _ANSWER,
        _LOOKUP,
        _PRUNE,
        _GATE,
        _CRUD,
        _DEDUPE,
    )
}


def template(name: str) -> PromptTemplate:
    try:
        return TEMPLATES[name]
    except KeyError:
        msg = f"unknown prompt template {name!r}; known: {', '.join(sorted(TEMPLATES))}"
        raise KeyError(msg) from None


def cites_turns(name: str) -> bool:
    """Whether template ``name``'s facts name the numbered turn they come from (a ``turn`` field).

    >>> cites_turns("extract_provenance"), cites_turns("extract")
    (True, False)
    """
    schema = template(name).schema or {}
    item = schema.get("properties", {}).get("facts", {}).get("items", {})
    return "turn" in item.get("properties", {})


def build_messages(name: str, **sections: str) -> list[dict[str, str]]:
    """The chat messages of template ``name`` with its sections filled (one user message)."""
    t = template(name)
    missing = [s for s in t.sections if s not in sections]
    unknown = [s for s in sections if s not in t.sections and s not in t.optional]
    if missing or unknown:
        msg = f"prompt {name!r}: missing sections {missing}, unknown sections {unknown}"
        raise ValueError(msg)
    ordered = {s: sections[s] if sections[s].strip() else "(none)" for s in t.sections}
    for s in t.optional:
        if sections.get(s):
            ordered[s] = sections[s]
    return [{"role": "user", "content": format_sections(ordered, t.preamble)}]


def prompt_hashes() -> dict[str, str]:
    """Per-template sha256 (first 16 hex digits) of the template's full fingerprint."""
    return {
        name: hashlib.sha256(json.dumps(t.fingerprint(), sort_keys=True).encode()).hexdigest()[:16]
        for name, t in sorted(TEMPLATES.items())
    }


def prompt_templates_hash() -> str:
    """One sha256 (16 hex digits) over every template: what the run's config hash includes."""
    blob = json.dumps([t.fingerprint() for _, t in sorted(TEMPLATES.items())], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
