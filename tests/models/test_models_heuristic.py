"""The heuristic agent's prompt families, the hashing embedder, and FactConsolidation coverage."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from pmem.bench._data import verified_path
from pmem.bench._factconsolidation import data_file
from pmem.models import PURPOSES, make_chat_model, make_embedder
from pmem.models._facts import extract_facts
from pmem.models.sections import format_sections

AGENT = make_chat_model({"backend": "heuristic"})


def ask(purpose: str, schema: dict | None = None, **sections: str):
    msg = [{"role": "user", "content": format_sections(sections)}]
    return asyncio.run(AGENT.complete(msg, purpose=purpose, schema=schema))


@pytest.mark.parametrize(
    ("text", "key", "value", "status"),
    [
        ("Earlier observation: apple 1 was in fridge 1.", "apple_1.location", "fridge 1", "asserted"),
        (
            "Update: apple 1 has been moved from fridge 1 to countertop 2.",
            "apple_1.location",
            "countertop 2",
            "asserted",
        ),
        ("Update: apple 1 has been moved to drawer 3.", "apple_1.location", "drawer 3", "asserted"),
        (
            "mug 2 was taken from shelf 1 to sinkbasin 1, then put in cabinet 4.",
            "mug_2.location",
            "cabinet 4",
            "asserted",
        ),
        (
            "Correction: the report that apple 1 was moved to drawer 3 was an error.",
            "apple_1.location",
            "drawer 3",
            "withdrawn",
        ),
        ("Report: apple 1 is in drawer 2.", "apple_1.location", "drawer 2", "reported"),
        ("Another report says the apple 1 is in shelf 1.", "apple_1.location", "shelf 1", "reported"),
        ("1. The chairperson of Fatah is Mahmoud Abbas.", "fatah.chairperson", "Mahmoud Abbas", "asserted"),
        ("Thomas Kyd was born in the city of London.", "thomas_kyd.born_city", "London", "asserted"),
    ],
)
def test_extract_templates(text: str, key: str, value: str, status: str) -> None:
    c = ask("extract", schema={"type": "object"}, TEXT=text)
    assert c.parsed == {"facts": [{"key": key, "value": value, "status": status}]}
    assert c.tokens_estimated and c.prompt_tokens > 0 and c.completion_tokens > 0


def test_confirmation_is_marked() -> None:
    c = ask("extract", TEXT="Confirmed: apple 1 is in drawer 2.")
    assert json.loads(c.text)["facts"] == [
        {"key": "apple_1.location", "value": "drawer 2", "status": "asserted", "confirmed": True}
    ]


@pytest.mark.parametrize("subset", ["sh_6k", "sh_32k"])
def test_factconsolidation_coverage(subset: str) -> None:
    # the vendored copy in datasets/, verified against its manifest sha256
    path = verified_path(data_file(subset))
    lines = [ln for ln in json.loads(path.read_text())["context"].split("\n")[1:] if ln.strip()]
    facts = [extract_facts(ln) for ln in lines]
    coverage = sum(1 for f in facts if f) / len(lines)
    assert coverage >= 0.99, coverage
    # keys never contain the value
    assert all(f[0].value.lower().replace(" ", "_") not in f[0].key.split(".")[1] for f in facts if f)


@pytest.mark.parametrize(
    ("fact", "head", "text", "op"),
    [
        ("apple_1.location: fridge 1", "none", "Earlier observation: apple 1 was in fridge 1.", "accept"),
        (
            "apple_1.location: table 1",
            "fridge 1 (active)",
            "Update: apple 1 has been moved from fridge 1 to table 1.",
            "accept",
        ),
        ("apple_1.location: fridge 1", "fridge 1 (active)", "apple 1 is in fridge 1.", "noop"),
        (
            "apple_1.location: table 1 (withdrawn)",
            "table 1 (active)",
            "Correction: the report that apple 1 was moved to table 1 was an error.",
            "revoke",
        ),
        (
            "apple_1.location: shelf 1 (reported)",
            "drawer 2 (active)",
            "Another report says the apple 1 is in shelf 1.",
            "contest",
        ),
        (
            "apple_1.location: shelf 1\nconfirmed: true",
            "drawer 2 (contested; alternatives: shelf 1)",
            "Confirmed: apple 1 is in shelf 1.",
            "resolve",
        ),
    ],
)
def test_annotate(fact: str, head: str, text: str, op: str) -> None:
    out = json.loads(ask("annotate", FACT=fact, HEAD=head, TEXT=text).text)
    assert out["op"] == op and out["key"] == "apple_1.location"


def test_identity_answer_lookup_gate_prune_judge() -> None:
    assert ask("identity", KEY_A="apple_1.location", KEY_B="apple_2.location").text == "different"
    assert ask("identity", KEY_A="user.pb_5k", KEY_B="User.PB_5K").text == "same"
    ctx = (
        "thomas_kyd.born_city = London\nthomas_kyd.died_city = Paris\napple_1.location = fridge 1 [support 2]"
    )
    assert ask("answer", CONTEXT=ctx, QUESTION="Which city was Thomas Kyd born in?").text == "London"
    assert ask("answer", CONTEXT=ctx, QUESTION="Which city did Thomas Kyd die in?").text == "Paris"
    assert ask("answer", CONTEXT=ctx, QUESTION="Where is the apple 1 now?").text == "fridge 1"
    assert ask("answer", CONTEXT=ctx, QUESTION="Who founded Armani?").text == "unknown"
    contested = "apple_1.location = drawer 2 [contested; alternatives: shelf 1]"
    assert (
        ask("answer", CONTEXT=contested, QUESTION="Where is the apple 1 now?").text == "drawer 2 or shelf 1"
    )
    raw = "Earlier observation: apple 1 was in fridge 1.\nmug 1 was taken from a 1 to b 1, then put in c 1."
    assert ask("answer", CONTEXT=raw, QUESTION="Where is the mug 1 now?").text == "c 1"
    assert ask("lookup", CONTEXT=ctx, QUESTION="Who founded Armani?").text == "founded Armani"
    assert ask("lookup", CONTEXT=ctx, QUESTION="Which city was Thomas Kyd born in?").text == "ANSWER"
    assert ask("gate", QUESTION="What is my current 5K PB?").text == "prune"
    assert ask("gate", QUESTION="What did I name my dog?").text == "keep"
    assert (
        ask(
            "prune",
            ATTRIBUTE="5K PB",
            TURN_A="[2023-01-02] My 5K PB is 27:12.",
            TURN_B="[2023-05-01] Beat my 5K PB: 25:50!",
        ).text
        == "yes"
    )
    assert ask("prune", ATTRIBUTE="5K PB", TURN_A="My 5K PB is 27:12.", TURN_B="I like pasta.").text == "no"
    assert (
        ask("judge", QUESTION="q", REFERENCE="Mahmoud Abbas", RESPONSE="Answer: mahmoud abbas.").text == "yes"
    )
    assert ask("judge", QUESTION="q", REFERENCE="Mahmoud Abbas", RESPONSE="Yasser Arafat").text == "no"


def test_crud_and_dedupe() -> None:
    mem = "[0] apple_1.location: fridge 1\n[1] mug_1.location: table 1"
    assert json.loads(ask("crud", FACT="apple_1.location: shelf 2", MEMORIES=mem).text)["event"] == "UPDATE"
    assert json.loads(ask("crud", FACT="apple_1.location: fridge 1", MEMORIES=mem).text)["event"] == "NONE"
    assert json.loads(ask("crud", FACT="pan_1.location: stove 1", MEMORIES=mem).text) == {
        "event": "ADD",
        "id": None,
        "key": "pan_1.location",
        "value": "stove 1",
    }
    out = json.loads(
        ask("dedupe", FACT="apple_1.location: shelf 2", MEMORIES=mem + "\n[2] apple_1.location: shelf 2").text
    )
    assert out == {"duplicates": ["2"], "contradictions": ["0"]}


def test_every_purpose_is_served_deterministically() -> None:
    a = [
        ask(p, TEXT="Report: apple 1 is in drawer 2.", QUESTION="Where is apple 1 now?", CONTEXT="x = y").text
        for p in PURPOSES
    ]
    b = [
        ask(p, TEXT="Report: apple 1 is in drawer 2.", QUESTION="Where is apple 1 now?", CONTEXT="x = y").text
        for p in PURPOSES
    ]
    assert a == b and all(isinstance(t, str) for t in a)


def test_hashing_embedder_normalized() -> None:
    e = make_embedder({"backend": "hashing", "dim": 256})
    v = asyncio.run(e.embed(["apple_1.location: fridge 1", "apple_1.location", "Thomas Kyd"]))
    assert v.shape == (3, 256) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2]


def test_unknown_backend_is_clear() -> None:
    with pytest.raises(ValueError, match="unknown chat backend 'nope'"):
        make_chat_model({"backend": "nope"})


def test_annotate_cues_stay_with_their_fact() -> None:
    chunk = (
        "1. X is famous for Trial and Error.\n2. The chairperson of Fatah is Y.\n3. That report was an error."
    )
    assert (
        json.loads(ask("annotate", FACT="x.famous_for: Trial and Error", HEAD="none", TEXT=chunk).text)["op"]
        == "accept"
    )
    assert (
        json.loads(ask("annotate", FACT="fatah.chairperson: Y", HEAD="Z", TEXT=chunk).text)["op"] == "accept"
    )


def test_multi_hop_chain_and_lookup() -> None:
    q = "What is the country of citizenship of the spouse of Bianca Jagger?"
    one = "bianca_jagger.married_to = Mick Jagger\nbianca_jagger.born_city = Managua"
    assert ask("answer", CONTEXT=one, QUESTION=q).text == "Mick Jagger"
    assert ask("lookup", CONTEXT=one, QUESTION=q).text == "Mick Jagger citizenship country"
    two = one + "\nmick_jagger.citizenship_country = United Kingdom\nmick_jagger.born_city = Dartford"
    assert ask("answer", CONTEXT=two, QUESTION=q).text == "United Kingdom"
    assert ask("lookup", CONTEXT=two, QUESTION=q).text == "ANSWER"
    # a single-hop question does not wander into the next entity's cells
    assert ask("answer", CONTEXT=two, QUESTION="Who is Bianca Jagger married to?").text == "Mick Jagger"


def test_lookup_asks_for_the_relations_its_context_names_and_each_context_is_read_alone() -> None:
    """A relation the templates do not know (``favourite_colour``) is one the question can still ask for
    once the context names it on any line. A context is read once and its reading reused (cached), never
    another context's: the same question over a context without that line asks for nothing more."""
    q = "What is the favourite colour of the spouse of Bianca Jagger?"
    married = "bianca_jagger.married_to = Mick Jagger"
    named = married + "\nkeith_richards.favourite_colour = red"
    for _ in range(2):
        assert ask("lookup", CONTEXT=named, QUESTION=q).text == "Mick Jagger colour favourit"
        assert ask("lookup", CONTEXT=married, QUESTION=q).text == "ANSWER"
    assert ask("answer", CONTEXT=named, QUESTION="Who is Bianca Jagger married to?").text == "Mick Jagger"


def _extract(template: str, text: str) -> dict[str, object]:
    from pmem.memory.prompts import build_messages

    reply = asyncio.run(AGENT.complete(build_messages(template, TEXT=text), purpose="extract")).text
    return json.loads(reply)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "As of March 3, 2025, the rent of the Pine Street bakery is 900 euros.",
            {"key": "the_pine_street_bakery.rent", "value": "900 euros", "valid_time": "2025-03-03"},
        ),
        (
            "Per the building notes, the gate code of the Hill Street garage is 4821.",
            {"key": "the_hill_street_garage.gate_code", "value": "4821"},
        ),
        (
            "Update: the home room of team Falcon is room 298.",
            {"key": "team_falcon.home_room", "value": "room 298"},
        ),
        (
            "Lena Fischer sits in room 286 because room 286 is the home room of team Falcon.",
            {"key": "lena_fischer.room", "value": "room 286", "depends_on": ["team_falcon.home_room"]},
        ),
    ],
)
def test_extract_probe_sentences(text: str, expected: dict[str, object]) -> None:
    assert _extract("extract_provenance", text) == {"facts": [{"status": "asserted", **expected}]}
    # the paper's prompt asks for no valid time and no premises: the reply has none
    plain = {k: v for k, v in expected.items() if k not in ("valid_time", "depends_on")}
    assert _extract("extract", text) == {"facts": [{"status": "asserted", **plain}]}


def test_extract_forget_requests_and_distinct_names_only_when_asked_and_present() -> None:
    forget = "Forget what I told you about the gate code of the Elm Road depot."
    assert _extract("extract_provenance", forget) == {"facts": [], "forget": ["the_elm_road_depot.gate_code"]}
    distinct = "Anna Mark and Anna Marks are two different people."
    assert _extract("extract_provenance", distinct) == {
        "facts": [],
        "distinct": [["Anna Mark", "Anna Marks"]],
    }
    assert _extract("extract", forget) == _extract("extract", distinct) == {"facts": []}
    # every other reply is exactly what it was: no empty lists added
    assert set(_extract("extract_provenance", "Update: apple 1 has been moved to drawer 3.")) == {"facts"}
    # a prefix that hides no fact leaves the sentence to the other rules
    assert extract_facts("According to my notes, my 5K PB is 25:50.")[0].key == "user.5k_pb"


def test_answer_flags_stale_premises_and_holds_authority() -> None:
    stale = "dana_reyes.room = room 12 | stale: premise team_falcon.home_room changed"
    out = ask("answer", CONTEXT=stale, QUESTION="Which room does Dana Reyes sit in?").text
    assert out.startswith("room 12") and "possibly out of date" in out
    held = "project_vega.meeting_room = room 31 [held by source authority] | alternatives: room 20"
    q = "What is the meeting room of project Vega?"
    assert ask("answer", CONTEXT=held, QUESTION=q).text == "room 31"
    conflict = "Is there any conflicting report about the meeting room of project Vega?"
    assert ask("answer", CONTEXT=held, QUESTION=conflict).text == "room 31 or room 20"
    contested = held.replace("held by source authority", "contested")
    assert ask("answer", CONTEXT=contested, QUESTION=q).text == "room 31 or room 20"


def test_a_relation_reported_in_error_is_extracted_as_withdrawn() -> None:
    """The README's budget story, as text: the retraction names the wrong value, never the right one."""
    (withdrawn,) = extract_facts("The report that the budget of the project is $50k was an error.")
    assert withdrawn.as_dict() == {"key": "the_project.budget", "value": "$50k", "status": "withdrawn"}
    # ALFWorld's own retraction template is still read by its location rule
    (moved,) = extract_facts("Correction: the report that mug 1 was moved to desk 1 was an error.")
    assert (moved.key, moved.value, moved.status) == ("mug_1.location", "desk 1", "withdrawn")
