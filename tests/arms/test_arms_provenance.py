"""P-Mem's write path on the provenance probes: erase, authority, valid time, premises, unmerge.

``pmem-paper`` (the capabilities off) runs the same cases and must fail where a capability is what
passes. The acceptance figures (issue 16) on all 140 cases of each subset are the slow test at the end.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from arms_helpers import models, rate, run

from pmem.arms import make_arm
from pmem.arms._harness import run_history
from pmem.bench import Event, iter_histories
from pmem.bench import probe_templates as T
from pmem.bench._probes import SOURCE_AUTHORITY, artifact_bytes
from pmem.memory.writepath import question_instant

AUTHORITY = SOURCE_AUTHORITY


def _erased(arm: Any, q: Any) -> dict[str, Any]:
    """Bytes of the erased statement (and value) in what the arm retains, as the runner measures."""
    found = artifact_bytes(arm.retained(), q)
    return {} if found is None else {"artifact": found}


#: cases per subset in the default suite (every factor is counterbalanced within it); the acceptance
#: figures on all 140 are measured by the slow test at the end
CASES = 28


def _probes(arm: str, subset: str, cases: int = CASES, **options: Any) -> list[dict[str, Any]]:
    hs = list(iter_histories("provenance-probes", subset, cases=cases))
    return run(arm, hs, options=options or None, probe=_erased)


def test_erasure_leaves_no_trace_and_keeps_the_other_statement() -> None:
    rows = _probes("pmem", "erasure")
    assert rate(rows, "before_forget") == 1.0
    assert rate(rows, "forget_once") == 1.0  # no leak
    assert rate(rows, "forget_twice") == 1.0  # the document's statement stands
    assert [r["artifact"] for r in rows if "artifact" in r] == [0] * CASES
    paper = _probes("pmem-paper", "erasure")
    assert rate(paper, "forget_once") == 0.0
    assert all(r["artifact"] > 0 for r in paper if "artifact" in r)


def test_authority_holds_the_trusted_value_and_discloses_the_claim() -> None:
    rows = _probes("pmem", "authority", authority=AUTHORITY)
    for qtype in ("before_claims", "after_claims_k1", "after_claims_k4", "disclosure"):
        assert rate(rows, qtype) == 1.0, qtype
    paper = _probes("pmem-paper", "authority", authority=AUTHORITY)  # ignored: capabilities off
    assert rate(paper, "after_claims_k4") == 0.0
    assert rate(paper, "disclosure") == 0.0
    unranked = _probes("pmem", "authority")  # no authority table: the last claim wins, as before
    assert rate(unranked, "after_claims_k4") == 0.0


def test_late_arrivals_keep_the_present_and_answer_the_past() -> None:
    rows = _probes("pmem", "late-arrival")
    for qtype in ("before_late", "current", "as_of"):
        assert rate(rows, qtype) == 1.0, qtype
    paper = _probes("pmem-paper", "late-arrival")
    assert rate(paper, "current") == 0.0


def test_changed_premises_are_flagged() -> None:
    rows = _probes("pmem", "stale-premise")
    assert rate(rows, "before_change") == 1.0
    assert rate(rows, "after_change") == 1.0
    assert all("possibly out of date" in r["prediction"] for r in rows if r["qtype"] == "after_change")
    assert rate(_probes("pmem-paper", "stale-premise"), "after_change") == 0.0


def test_wrongly_merged_entities_are_separated() -> None:
    rows = _probes("pmem", "merge")
    assert rate(rows, "before_correction") == 0.0  # the merge did happen
    assert rate(rows, "after_correction") >= 0.97
    assert rate(_probes("pmem-paper", "merge"), "after_correction") <= 0.6


def _arm(**options: Any) -> Any:
    return make_arm("pmem", models(), options or None)


def _events(*items: tuple[str, str]) -> list[Event]:
    return [Event(index=i, text=t, source=s) for i, (t, s) in enumerate(items)]


def test_forget_erases_only_the_requesting_sources_statements() -> None:
    fact = T.FACT.format(attr="gate code", entity="the Hill Street garage", value="4821")
    doc = T.SOURCED_FACT.format(
        document="building notes", attr="gate code", entity="the Hill Street garage", value="4821"
    )
    forget = T.FORGET.format(attr="gate code", entity="the Hill Street garage")
    arm = _arm()
    asyncio.run(arm.ingest(_events((doc, "document"), (fact, "user"), (forget, "user"))))
    g = arm.graph()
    assert g.head_value("the_hill_street_garage.gate_code") == "4821"
    assert fact.encode() not in g.to_bytes() and doc.encode() in g.to_bytes()
    log = arm.write_log()
    assert [w.op for w in log] == ["accept", "noop", "erase"]
    # the arm's own log no longer holds the erased statement's value
    assert log[1].value is None and log[1].reason == "erased"
    assert log[0].value == "4821"
    again = _arm()
    asyncio.run(again.ingest(_events((fact, "user"), (forget, "agent"))))
    assert again.graph().head_value("the_hill_street_garage.gate_code") == "4821"
    assert again.write_log()[-1].reason == "forget: no statement by 'agent' about this key"


def test_a_write_log_handed_over_is_forgotten_and_a_later_forget_still_erases() -> None:
    """An ingest worker takes the log in pieces: the arm then holds no record per write, nor an index
    into records it no longer has."""
    fact = T.FACT.format(attr="gate code", entity="the Hill Street garage", value="4821")
    forget = T.FORGET.format(attr="gate code", entity="the Hill Street garage")
    arm = _arm()
    asyncio.run(arm.ingest(_events((fact, "user"))))
    taken = arm.take_write_log()
    assert [(w.op, w.value) for w in taken] == [("accept", "4821")]
    assert arm.write_log() == [] and not arm._records_of
    asyncio.run(arm.ingest([Event(index=1, text=forget, source="user")]))
    assert fact.encode() not in arm.graph().to_bytes()
    assert [w.op for w in arm.write_log()] == ["erase"]
    assert taken[0].value == "4821"  # what was handed over is the taker's


def test_a_repeated_statement_is_requested_as_an_accept_only_with_provenance() -> None:
    fact = T.FACT.format(attr="gate code", entity="the Elm Road depot", value="1234")
    for arm, requested in ((_arm(), "accept"), (make_arm("pmem-paper", models()), "noop")):
        asyncio.run(arm.ingest(_events((fact, "user"), (fact, "environment"))))
        ops = list(arm.graph().operations("the_elm_road_depot.gate_code"))
        assert [(o.requested, o.op) for o in ops] == [("accept", "accept"), (requested, "noop")]


def test_premises_are_recorded_only_when_they_hold_a_value() -> None:
    derived = T.DERIVED.format(person="Dana Reyes", room="room 12", attr="home room", entity="team Falcon")
    premise = T.FACT.format(attr="home room", entity="team Falcon", value="room 12")
    arm = _arm()
    asyncio.run(arm.ingest(_events((derived, "user"))))  # no premise stored yet: written without one
    assert arm.graph().cell("dana_reyes.room").stale == ()
    arm = _arm()
    change = T.UPDATE_FACT.format(attr="home room", entity="team Falcon", value="room 31")
    asyncio.run(arm.ingest(_events((premise, "user"), (derived, "user"), (change, "user"))))
    assert arm.graph().cell("dana_reyes.room").stale == ("team_falcon.home_room",)


def test_a_question_naming_a_date_reads_the_past_only_with_valid_times() -> None:
    assert question_instant("What was the rent of the Pine Street bakery on March 5, 2025?") == "2025-03-05"
    assert question_instant("What was it as of 2025-03-05?") == "2025-03-05"
    assert question_instant("What is the rent of the Pine Street bakery?") is None
    h = next(iter_histories("provenance-probes", "late-arrival"))
    rows = asyncio.run(run_history(_arm(), h))
    paper = asyncio.run(run_history(make_arm("pmem-paper", models()), h))
    as_of = next(r for r in rows if r["qtype"] == "as_of")
    assert as_of["correct"], as_of
    # the first case's values arrive in the order 0, 2, 1: without valid times the last arrival (1) is
    # taken as current, and the date between values 0 and 1 is answered with it
    assert h.params["order"] == "021"
    assert not next(r for r in paper if r["qtype"] == "as_of")["correct"]


def test_authority_option_is_checked() -> None:
    with pytest.raises(ValueError, match=r"authority\.web must be an integer"):
        _arm(authority={"web": "low"})
    with pytest.raises(ValueError, match="authority must be a table"):
        _arm(authority=5)
    arm = _arm(authority=[("web", 0)])
    assert arm.extra()["arm_config"]["authority"] == {"web": 0}
    assert make_arm("pmem-paper", models(), {"authority": {"web": 0}}).path.authority is None


def test_unmerge_follows_a_statement_that_two_names_differ() -> None:
    a = T.FACT.format(attr="phone extension", entity="Anna Mark", value="4417")
    b = T.FACT.format(attr="phone extension", entity="Anna Marks", value="5902")
    split = T.DISTINCT.format(a="Anna Marks", b="Anna Mark")
    later = T.UPDATE_FACT.format(attr="phone extension", entity="Anna Marks", value="6100")
    arm = _arm()
    asyncio.run(arm.ingest(_events((a, "user"), (b, "user"))))
    assert "anna_marks.phone_extension" not in arm.graph()  # merged into Anna Mark's key
    asyncio.run(arm.ingest(_events((split, "user"), (later, "user"))))
    g = arm.graph()
    assert g.head_value("anna_mark.phone_extension") == "4417"
    assert g.head_value("anna_marks.phone_extension") == "6100"
    assert [w.op for w in arm.write_log()][2] == "unmerge"
    paper = make_arm("pmem-paper", models())
    asyncio.run(paper.ingest(_events((a, "user"), (b, "user"), (split, "user"))))
    assert paper.graph().head_value("anna_mark.phone_extension") == "5902"


def test_the_oracle_write_path_reads_the_probe_templates() -> None:
    from pmem.memory.writepath import template_extraction

    events = _events(
        (
            T.DATED_FACT.format(
                date="March 3, 2025", attr="rent", entity="the Pine Street bakery", value="900 euros"
            ),
            "user",
        ),
        (
            T.DERIVED.format(person="Dana Reyes", room="room 12", attr="home room", entity="team Falcon"),
            "user",
        ),
        (T.FORGET.format(attr="gate code", entity="the Elm Road depot"), "user"),
        (T.DISTINCT.format(a="Anna Mark", b="Anna Marks"), "user"),
        # read by the probes' templates first: a probe fact is not FactConsolidation's office holder
        (T.FACT.format(attr="gate code", entity="the Elm Road depot", value="1234"), "user"),
    )
    ex = template_extraction(events)
    assert [(f.key, f.value, f.valid_time, f.depends_on) for f in ex.facts] == [
        ("the_pine_street_bakery.rent", "900 euros", "2025-03-03", ()),
        ("dana_reyes.room", "room 12", None, ("team_falcon.home_room",)),
        ("the_elm_road_depot.gate_code", "1234", None, ()),
    ]
    assert ex.forget == ("the_elm_road_depot.gate_code",)
    assert ex.distinct == (("Anna Mark", "Anna Marks"),)
    for subset, qtype in (
        ("erasure", "forget_once"),
        ("late-arrival", "as_of"),
        ("authority", "after_claims_k4"),
    ):
        rows = _probes("pmem-oracle", subset, authority=AUTHORITY)
        assert rate(rows, qtype) == 1.0, subset


def test_requests_the_text_does_not_make_are_dropped_with_their_reason() -> None:
    """A model's forget list or distinct pairs undo writes: they must name what the unit's text names."""
    from pmem.memory.writepath import Extraction

    fact = T.FACT.format(attr="gate code", entity="the Hill Street garage", value="4821")
    arm = _arm()
    asyncio.run(arm.ingest(_events((fact, "user"))))
    other = Event(index=1, text="Please keep this in mind.", source="user")
    arm.path._requests(
        Extraction(
            [other], other.text, [], None, ("the_hill_street_garage.gate_code",), (("Ann X", "Ann Xs"),)
        )
    )
    assert arm.graph().head_value("the_hill_street_garage.gate_code") == "4821"
    assert [(w.op, w.applied, w.reason) for w in arm.write_log()[1:]] == [
        ("noop", False, "forget: the text does not mention this subject"),
        ("noop", False, "distinct: the text does not name 'Ann X' and 'Ann Xs'"),
    ]


@pytest.mark.slow
def test_acceptance_on_all_140_cases_of_every_subset() -> None:
    """Issue 16's acceptance with the heuristic agent: no leak, nothing of the erased text kept, the
    trusted value held at k = 4, late arrivals and stale premises 100%, merges separated >= 97%."""
    erasure = _probes("pmem", "erasure", 140)
    assert rate(erasure, "forget_once") == rate(erasure, "forget_twice") == 1.0
    assert [r["artifact"] for r in erasure if "artifact" in r] == [0] * 140
    authority = _probes("pmem", "authority", 140, authority=AUTHORITY)
    assert rate(authority, "after_claims_k4") == rate(authority, "disclosure") == 1.0
    late = _probes("pmem", "late-arrival", 140)
    assert rate(late, "current") == rate(late, "as_of") == 1.0
    assert rate(_probes("pmem", "stale-premise", 140), "after_change") == 1.0
    assert rate(_probes("pmem", "merge", 140), "after_correction") >= 0.97


def test_an_arm_without_event_attribution_keeps_none_and_refuses_the_audit() -> None:
    fact = T.FACT.format(attr="gate code", entity="the Hill Street garage", value="4821")
    arm = _arm()
    asyncio.run(arm.ingest(_events((fact, "user"))))
    assert arm.active_facts() == [("the_hill_street_garage.gate_code", "4821", frozenset({0}))]
    quiet = _arm()
    quiet.path.track_attribution = False
    asyncio.run(quiet.ingest(_events((fact, "user"))))
    assert quiet.graph().to_bytes() == arm.graph().to_bytes()  # the memory itself is the same
    assert not quiet.path._key_events
    with pytest.raises(RuntimeError, match="attribution"):
        quiet.active_facts()
