"""The factory, the arm names, the protocol and the prompt templates."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from arms_helpers import models

from pmem.arms import (
    ARM_NAMES,
    TEMPLATES,
    Arm,
    build_messages,
    make_arm,
    prompt_hashes,
    prompt_templates_hash,
)
from pmem.arms import _prompts as P
from pmem.bench import Event, Question
from pmem.models.sections import parse_sections

DESIGN_ARMS = ("pmem", "pmem-iterative", "pmem-turn-prune", "pmem-no-retention", "pmem-no-identity",
               "pmem-oracle", "no-memory", "long-context", "raw", "raw-ordered", "chunks", "crud", "add-only",
               "bitemporal")


def test_arm_names_are_designs_contract():
    assert set(ARM_NAMES) == set(DESIGN_ARMS)


@pytest.mark.parametrize("name", DESIGN_ARMS)
def test_every_arm_satisfies_the_protocol_and_answers(name):
    arm = make_arm(name, models())
    assert isinstance(arm, Arm)
    assert arm.name == name
    events = [Event(0, "Earlier observation: mug 1 was in shelf 2.", source="environment"),
              Event(1, "Update: mug 1 has been moved from shelf 2 to sinkbasin 1.", source="environment")]
    asyncio.run(arm.ingest(events))
    q = Question("q", "Where is the mug 1 now?", ("sinkbasin 1",), "current", 1)
    ans = asyncio.run(arm.answer(q))
    assert ans.read.chars == len(ans.read.text)
    assert ans.read.tokens == (len(ans.read.text.encode()) + 3) // 4
    stats = arm.write_stats()
    assert stats.model_calls >= 0 and isinstance(stats.ops, dict)
    assert isinstance(arm.extra(), dict)
    if name != "no-memory":
        assert "sinkbasin 1" in ans.read.text


def test_unknown_arm_and_option_are_rejected():
    with pytest.raises(ValueError, match="unknown arm 'nope'"):
        make_arm("nope", models())
    with pytest.raises(ValueError, match="unknown option"):
        make_arm("pmem", models(), {"topk": 3})
    with pytest.raises(ValueError, match="read must be"):
        make_arm("pmem", models(), {"read": "magic"})


def test_prompt_hash_covers_every_template(monkeypatch):
    before = prompt_templates_hash()
    assert set(prompt_hashes()) == set(TEMPLATES)
    assert prompt_templates_hash() == before  # deterministic
    changed = dataclasses.replace(TEMPLATES["answer"], preamble=TEMPLATES["answer"].preamble + " Be brief.")
    monkeypatch.setitem(P.TEMPLATES, "answer", changed)
    assert prompt_templates_hash() != before
    assert prompt_hashes()["answer"] != prompt_hashes()["extract"]


def test_prompt_sections_follow_the_convention():
    msgs = build_messages("annotate", FACT="a.b: c\nstatus: asserted", HEAD="none", TEXT="a b is c")
    sec = parse_sections(msgs[0]["content"])
    assert sec["FACT"].startswith("a.b: c") and sec["HEAD"] == "none"
    assert "accept" in sec[""]  # the instruction preamble
    with pytest.raises(ValueError, match="missing sections"):
        build_messages("answer", CONTEXT="x")
    # the local server infers a family from the sections when no purpose travels: keep them apart
    assert "lookup" not in TEMPLATES["answer"].preamble.lower()
    assert "duplicate" not in TEMPLATES["crud"].preamble.lower()
    assert "contradict" not in TEMPLATES["crud"].preamble.lower()
    assert "duplicate" in TEMPLATES["dedupe"].preamble.lower()
    for t in TEMPLATES.values():
        if t.schema is not None:
            assert t.schema["type"] == "object" and t.schema["required"]
