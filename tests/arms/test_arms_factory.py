"""The factory, the arm names, the protocol and the prompt templates."""

from __future__ import annotations

import asyncio
import dataclasses
import sys

import pytest
from arms_helpers import models

from pmem.arms import (
    ARM_NAMES,
    PEER_ARM_NAMES,
    VARIANT_ARM_NAMES,
    Arm,
    arm_label,
    arm_names,
    make_arm,
    register_arm,
    resolve_arm,
    sort_arms,
)
from pmem.arms import _registry as R
from pmem.bench import Event, Question
from pmem.memory import prompts as P
from pmem.memory.prompts import TEMPLATES, build_messages, prompt_hashes, prompt_templates_hash
from pmem.models.sections import parse_sections

DESIGN_ARMS = (
    "pmem",
    "pmem-iterative",
    "pmem-turn-prune",
    "pmem-no-retention",
    "pmem-no-identity",
    "pmem-oracle",
    "pmem-paper",
    "no-memory",
    "long-context",
    "raw",
    "raw-ordered",
    "chunks",
    "crud",
    "add-only",
    "bitemporal",
)


def test_arm_names_are_designs_contract():
    assert set(ARM_NAMES) == set(DESIGN_ARMS)


@pytest.mark.parametrize("name", DESIGN_ARMS)
def test_every_arm_satisfies_the_protocol_and_answers(name):
    arm = make_arm(name, models())
    assert isinstance(arm, Arm)
    assert arm.name == name
    events = [
        Event(0, "Earlier observation: mug 1 was in shelf 2.", source="environment"),
        Event(1, "Update: mug 1 has been moved from shelf 2 to sinkbasin 1.", source="environment"),
    ]
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


# -- the registry ------------------------------------------------------------------------------------------


@pytest.fixture
def registry(monkeypatch):
    """The arm registry with this test's plugins only (restored afterwards)."""
    reg = R._REGISTRY
    monkeypatch.setattr(reg, "plugins", {})
    monkeypatch.setattr(reg, "_refs", {})
    return reg


def _tiny(models, options):
    return make_arm("no-memory", models, options)


#: what `tests.arms.test_arms_factory:ENTRY`-style names resolve to (set by a test)
ENTRY = None


def test_registry_is_the_one_list_in_display_order(registry):
    # nothing registered: the built-in arms, in DESIGN.md's order, their variants outside `all`, then the
    # peer libraries with their extras
    assert arm_names() == (*ARM_NAMES, *VARIANT_ARM_NAMES, *PEER_ARM_NAMES)
    assert VARIANT_ARM_NAMES == ("long-context-recent",)
    assert [resolve_arm(n).extra for n in PEER_ARM_NAMES] == ["mem0", "graphiti"]
    assert not resolve_arm("crud").extra
    assert [resolve_arm(n).order for n in ARM_NAMES] == list(range(len(ARM_NAMES)))
    assert all(resolve_arm(n).builtin and arm_label(n) == n for n in ARM_NAMES)
    assert sort_arms(["crud", "zz", "pmem", "aa", "pmem"]) == [
        "pmem",
        "crud",
        "aa",
        "zz",
    ]  # unknown last, by name
    assert dict(resolve_arm("raw-ordered").options) == {"ordered": True}
    # fixed options win over the user's (pmem-oracle always writes through the templates)
    arm = make_arm("pmem-oracle", models(), {"write": "extract"})
    assert arm.path.write_mode == "oracle"


def test_register_arm_places_and_labels_a_plugin(registry):
    entry = register_arm("tiny", _tiny, label="Tiny", options={"top_k": 3}, order=0.5)
    assert arm_names()[:3] == ("pmem", "tiny", "pmem-iterative")
    assert arm_label("tiny") == "Tiny" and sort_arms(["raw", "tiny", "pmem"]) == ["pmem", "tiny", "raw"]
    assert resolve_arm("tiny") is entry and entry.target.endswith(":_tiny")
    arm = make_arm("tiny", models())
    assert isinstance(arm, Arm)
    late = register_arm("later", _tiny)  # no order: after everything registered so far
    assert late.order > max(resolve_arm(n).order for n in ARM_NAMES) and arm_names()[-1] == "later"
    for bad, exc in (("pmem", ValueError), ("a:b", ValueError), ("", ValueError), ("all", ValueError)):
        with pytest.raises(exc):
            register_arm(bad, _tiny)
    with pytest.raises(TypeError, match="callable"):
        register_arm("x", "not callable")  # type: ignore[arg-type]


def test_module_attr_names_resolve_through_the_registry(registry, monkeypatch):
    mod = __name__
    # a factory attribute: an entry of its own, named by the reference
    entry = resolve_arm(f"{mod}:_tiny")
    assert entry.name == f"{mod}:_tiny" and isinstance(make_arm(f"{mod}:_tiny", models()), Arm)
    # an entry that register_arm returned, and the name an import registered: the registered arm itself
    monkeypatch.setattr(sys.modules[mod], "ENTRY", register_arm("tiny-x", _tiny, label="T"))
    assert resolve_arm(f"{mod}:ENTRY") is resolve_arm(f"{mod}:tiny-x") is resolve_arm("tiny-x")
    assert arm_label(f"{mod}:tiny-x") == "T"
    with pytest.raises(ValueError, match="has no attribute 'nope' and registers no arm"):
        resolve_arm(f"{mod}:nope")
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        resolve_arm("no_such_module:x")
    with pytest.raises(ValueError, match="is a tuple: give an ArmEntry"):
        resolve_arm(f"{mod}:DESIGN_ARMS")
    # ordering and labels never import: an unresolved reference is simply unknown
    assert arm_label("no_such_module:x") == "no_such_module:x"
