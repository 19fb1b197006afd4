"""Validation of model output on the write path: extraction and annotation never trust the reply."""

from __future__ import annotations

from pmem.bench import Event
from pmem.memory.writepath import (
    Fact,
    Head,
    normalize_key,
    parse_extraction,
    parse_json_object,
    template_facts,
    validate_annotation,
)

UNIT = [
    Event(3, "3. The chairperson of Fatah is Mahmoud Abbas.", source="fact"),
    Event(4, "4. Thomas Kyd was born in the city of London.", source="fact"),
]


def test_extraction_is_normalized_attributed_and_filtered():
    payload = {
        "facts": [
            {"key": "Fatah . Chair Person", "value": "Mahmoud Abbas", "status": "ASSERTED"},
            {"key": "thomas_kyd.birthplace", "value": "London", "status": "rumoured"},
            {"key": "", "value": "x"},
            {"key": "a.b", "value": "   "},
            "not an object",
        ]
    }
    facts, error = parse_extraction(UNIT, payload)
    assert [(f.key, f.value, f.status, f.event) for f in facts] == [
        ("fatah.chair_person", "Mahmoud Abbas", "asserted", 3),
        ("thomas_kyd.birthplace", "London", "asserted", 4),
    ]
    assert error == "extract: dropped 3 malformed fact(s)"
    assert parse_extraction(UNIT, None) == ([], "extract: reply is not a JSON object")
    assert parse_extraction(UNIT, {"facts": "x"})[1] == "extract: reply has no 'facts' list"


def test_lenient_json():
    assert parse_json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_json_object('Sure! {"op": "accept"} hope that helps') == {"op": "accept"}
    assert parse_json_object('{"op": "acc') is None
    assert parse_json_object("[1, 2]") is None


def test_annotation_preconditions_become_noops_with_reasons():
    fact = Fact("k", "v2")
    active, contested = Head("v1", "active", []), Head("v1", "contested", ["v3"])
    assert validate_annotation({"op": "accept", "value": None}, fact, active) == ("accept", "v2", None)
    assert validate_annotation({"op": "contest", "value": "v2"}, fact, active) == ("contest", "v2", None)
    assert validate_annotation({"op": "contest", "value": "v2"}, fact, contested)[2] == (
        "annotation: contest needs an active incumbent"
    )
    assert validate_annotation({"op": "resolve", "value": "v3"}, fact, active)[2] == (
        "annotation: resolve needs a contested cell"
    )
    assert validate_annotation({"op": "revoke", "value": None}, fact, None)[2] == (
        "annotation: revoke needs a current value"
    )
    assert validate_annotation({"op": "delete"}, fact, active)[2] == "annotation: unknown op 'delete'"
    assert validate_annotation(None, fact, active)[2] == "annotation: reply is not a JSON object"
    assert validate_annotation({"op": "Reject", "value": "null"}, fact, active) == ("reject", None, None)


def test_normalize_key_and_templates():
    assert normalize_key("Apple 1.Location") == "apple_1.location"
    assert normalize_key("..a..b..") == "a.b"
    facts = template_facts(
        [
            Event(0, "Correction: the report that mug 1 was moved to shelf 2 was an error."),
            Event(1, "Report: mug 1 is in sinkbasin 1."),
            UNIT[1],
        ]
    )
    assert [(f.key, f.value, f.status, f.kind) for f in facts] == [
        ("mug_1.location", "shelf 2", "withdrawn", "retraction"),
        ("mug_1.location", "sinkbasin 1", "reported", "conflict_report"),
        ("thomas_kyd.birthplace", "London", "asserted", "fact"),
    ]


def test_extraction_drops_values_no_state_file_could_hold():
    """JSON's "\\udc80" escape decodes to a lone surrogate: the core refuses it, so the write path drops the
    fact (counted, with its reason) instead of failing the history; a line break in a value is kept."""
    import json

    payload = json.loads(
        '{"facts": [{"key": "fatah.chair", "value": "Abb\\udc80as"},'
        ' {"key": "kyd.birthplace", "value": "Lon\\ndon"}]}'
    )
    facts, error = parse_extraction(UNIT, payload)
    assert [(f.key, f.value) for f in facts] == [("kyd.birthplace", "Lon\ndon")]
    assert error == "extract: dropped 1 malformed fact(s)"


def test_annotation_the_core_refuses_is_a_noop_with_its_reason():
    import asyncio

    from pmem.memory.writepath import Fact, WritePath, Writer
    from pmem.models import make_chat_model, make_embedder

    path = WritePath(Writer(make_chat_model("heuristic"), make_embedder("hashing")))
    fact = Fact("room", "kitchen")
    path._commit(fact, "room\nfake = value", "accept", "kitchen", None, "accept", None, fact.event)
    (r,) = path.writer.write_log()
    assert (r.applied, r.op) == (False, "noop") and "invalid annotation" in (r.reason or "")
    assert path.graph.frontier() == {}
    asyncio.run(path.write([]))  # the write path is still usable


def test_a_retraction_is_lowered_against_the_head_it_names_with_and_without_retention():
    """The write path lowers each fact against the key's head as read: a correction naming the head
    rolls it back (retention on) or deletes the cell (off); one naming another value changes nothing."""
    import asyncio

    from pmem.bench import Event
    from pmem.memory.writepath import WritePath, Writer
    from pmem.models import make_chat_model, make_embedder

    moved = [
        "Earlier observation: apple 1 was in fridge 1.",
        "Update: apple 1 has been moved to table 2.",
    ]
    named = "Correction: the report that apple 1 was moved to table 2 was an error."
    stale = "Correction: the report that apple 1 was moved to shelf 9 was an error."
    outcomes = {}
    for retention in (True, False):
        for correction in (named, stale):
            path = WritePath(
                Writer(make_chat_model("heuristic"), make_embedder("hashing")),
                {"write": "oracle", "retention": retention},
            )
            events = [Event(i, text) for i, text in enumerate([*moved, correction])]
            asyncio.run(path.write([[e] for e in events]))
            outcomes[retention, correction] = {key: value for key, value, _ in path.active_items()}
    assert outcomes[True, named] == {"apple_1.location": "fridge 1"}
    assert outcomes[False, named] == {}
    assert outcomes[True, stale] == outcomes[False, stale] == {"apple_1.location": "table 2"}
