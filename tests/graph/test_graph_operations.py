"""Every row of DESIGN.md's operation table, failed preconditions and argument errors."""

from __future__ import annotations

import pytest

from pmem.graph import ProvenanceGraph


def statuses(g: ProvenanceGraph, key: str) -> list[tuple[str, str]]:
    return [(v.value, v.status) for v in g.versions(key)]


def heads(g: ProvenanceGraph, key: str) -> list[str]:
    return [v.value for v in g.versions(key) if v.valid_to is None and v.status in ("active", "contested")]


@pytest.fixture
def g() -> ProvenanceGraph:
    return ProvenanceGraph()


def test_accept_creates_cell_then_supersedes(g):
    r = g.apply("accept", "k", "a", evidence=g.observe("k is a"))
    assert (r.applied, r.op, r.reason) == (True, "accept", None)
    r = g.apply("accept", "k", "b", evidence=g.observe("k is b"))
    assert (r.applied, r.op) == (True, "accept")
    old, new = g.versions("k")
    assert (old.status, new.status) == ("superseded", "active")
    assert old.valid_to == new.valid_from and new.valid_to is None
    assert new.supersedes == old.id
    assert ("supersedes", new.id, old.id) in set(g.edges())
    assert g.cell("k").value == "b"


def test_accept_same_value_is_support(g):
    g.apply("accept", "k", "a", evidence=g.observe("k is a"))
    r = g.apply("accept", "k", "a", evidence=g.observe("k is still a"))
    assert r.applied and r.op == "noop" and "support" in r.reason
    assert len(g.versions("k")) == 1
    assert g.cell("k").support == 2


def test_reject_with_value_contradicts_head(g):
    g.apply("accept", "k", "a")
    g.apply("accept", "k", "b")
    r = g.apply("reject", "k", "c")
    assert (r.applied, r.op) == (True, "reject")
    assert statuses(g, "k") == [("a", "superseded"), ("b", "contradicted"), ("c", "active")]
    assert g.cell("k").value == "c"


def test_reject_without_value_rolls_back(g):
    g.apply("accept", "k", "a")
    g.apply("accept", "k", "b")
    r = g.apply("reject", "k")
    assert (r.applied, r.op) == (True, "reject")
    assert statuses(g, "k") == [("a", "active"), ("b", "contradicted")]
    a = g.versions("k")[0]
    assert a.valid_to is None  # reopened


def test_revoke_writes_tombstone_and_reinstates(g):
    g.apply("accept", "k", "a")
    g.apply("accept", "k", "b")
    r = g.apply("revoke", "k", evidence=g.observe("b was never true"))
    assert (r.applied, r.op) == (True, "revoke")
    assert statuses(g, "k") == [("a", "active"), ("b", "revoked")]
    revokes = [e for e in g.edges() if e[0] == "revokes"]
    assert revokes == [("revokes", "t0", g.versions("k")[1].id)]
    assert g.stats()["tombstones"] == 1


def test_revoke_only_version_empties_cell(g):
    g.apply("accept", "k", "a")
    g.apply("revoke", "k")
    cell = g.cell("k")
    assert (cell.value, cell.status) == (None, "empty")
    assert "k" not in g.frontier()
    assert statuses(g, "k") == [("a", "revoked")]


def test_revoke_naming_another_value_is_recorded_as_noop(g):
    g.apply("accept", "k", "a")
    r = g.apply("revoke", "k", "zzz")
    assert not r.applied and r.op == "noop" and "zzz" in r.reason
    assert g.cell("k").value == "a"


def test_contest_keeps_head_flags_it(g):
    g.apply("accept", "room", "A")
    r = g.apply("contest", "room", "B")
    assert (r.applied, r.op) == (True, "contest")
    cell = g.cell("room")
    assert (cell.value, cell.status, cell.alternatives) == ("A", "contested", ["B"])
    alt = g.versions("room")[1]
    assert alt.status == "alternative" and alt.alternative_of == g.versions("room")[0].id
    assert g.frontier()["room"].status == "contested"


def test_contest_several_alternatives_then_resolve_for_alternative(g):
    g.apply("accept", "room", "A")
    g.apply("contest", "room", "B")
    g.apply("contest", "room", "C")
    assert g.cell("room").alternatives == ["B", "C"]
    r = g.apply("resolve", "room", "C")
    assert (r.applied, r.op) == (True, "resolve")
    assert statuses(g, "room") == [("A", "contradicted"), ("B", "contradicted"), ("C", "active")]
    cell = g.cell("room")
    assert (cell.value, cell.status, cell.alternatives) == ("C", "active", [])
    assert heads(g, "room") == ["C"]


def test_resolve_for_incumbent(g):
    g.apply("accept", "room", "A")
    g.apply("contest", "room", "B")
    g.apply("contest", "room", "C")
    r = g.apply("resolve", "room", "A")
    assert r.applied and r.op == "resolve"
    assert statuses(g, "room") == [("A", "active"), ("B", "contradicted"), ("C", "contradicted")]
    assert g.cell("room").status == "active"


def test_resolved_alternative_rolls_back_past_contradicted_incumbent(g):
    g.apply("accept", "k", "old")
    g.apply("accept", "k", "A")
    g.apply("contest", "k", "B")
    g.apply("resolve", "k", "B")
    g.apply("revoke", "k")
    # B revoked; A was contradicted by the resolve, so rollback skips it and reinstates "old"
    assert g.cell("k").value == "old"


def test_noop_adds_support_edge(g):
    g.apply("accept", "k", "a", evidence=g.observe("k is a"))
    e = g.observe("yes, k is a")
    r = g.apply("noop", "k", evidence=e)
    assert (r.applied, r.op, r.reason) == (True, "noop", None)
    assert g.cell("k").support == 2
    assert ("supported-by", g.versions("k")[0].id, e) in set(g.edges())
    assert len(g.versions("k")) == 1


def test_noop_on_new_key_is_logged_without_creating_a_cell(g):
    r = g.apply("noop", "k")
    assert r.applied and r.op == "noop"
    assert g.cell("k").status == "empty" and g.frontier() == {}
    assert [op.op for op in g.operations("k")] == ["noop"]


@pytest.mark.parametrize(
    ("op", "value", "needle"),
    [
        ("reject", "x", "no current head"),
        ("reject", None, "no current head"),
        ("revoke", None, "no current head"),
        ("contest", "x", "no current head"),
        ("resolve", "x", "no current head"),
    ],
)
def test_failed_preconditions_without_head_are_noops(g, op, value, needle):
    r = g.apply(op, "k", value)
    assert (r.applied, r.op) == (False, "noop") and needle in r.reason
    assert g.versions("k") == []
    logged = list(g.operations("k"))
    assert [(o.requested, o.op, o.applied, o.reason) for o in logged] == [(op, "noop", False, r.reason)]


def test_resolve_needs_contested_cell_and_known_value(g):
    g.apply("accept", "k", "a")
    r = g.apply("resolve", "k", "a")
    assert not r.applied and "not contested" in r.reason
    g.apply("contest", "k", "b")
    r = g.apply("resolve", "k", "zzz")
    assert not r.applied and "neither" in r.reason
    assert g.cell("k").status == "contested"  # nothing changed
    assert [(o.requested, o.applied) for o in g.operations("k")] == [
        ("accept", True),
        ("resolve", False),
        ("contest", True),
        ("resolve", False),
    ]


def test_contest_repeating_values_counts_support(g):
    g.apply("accept", "k", "a")
    assert g.apply("contest", "k", "a").op == "noop"
    g.apply("contest", "k", "b")
    r = g.apply("contest", "k", "b")
    assert r.op == "noop" and "alternative" in r.reason
    assert g.cell("k").alternatives == ["b"]
    assert g.versions("k")[1].support == 2


def test_accept_on_contested_cell_closes_alternatives(g):
    g.apply("accept", "k", "a")
    g.apply("contest", "k", "b")
    g.apply("accept", "k", "c")
    cell = g.cell("k")
    assert (cell.value, cell.status, cell.alternatives) == ("c", "active", [])
    b = g.versions("k")[1]
    assert b.status == "alternative" and b.valid_to is not None
    assert heads(g, "k") == ["c"]


@pytest.mark.parametrize(
    ("args", "kwargs", "needle"),
    [
        (("bogus", "k", "v"), {}, "unknown operation"),
        (("accept", "k"), {}, "value is required"),
        (("contest", "k"), {}, "value is required"),
        (("resolve", "k"), {}, "value is required"),
        (("accept", "", "v"), {}, "non-empty"),
        (("accept", None, "v"), {}, "non-empty"),
        (("accept", "k", 5), {}, "must be a string"),
        (("accept", "k", "v"), {"evidence": "e999"}, "unknown evidence"),
        (("accept", "k", "v"), {"evidence": "e+0"}, "unknown evidence"),
    ],
)
def test_invalid_arguments_raise_and_change_nothing(g, args, kwargs, needle):
    g.observe("something")
    g.apply("accept", "k", "a")
    before = (g.stats(), g.to_bytes())
    with pytest.raises(ValueError, match=needle):
        g.apply(*args, **kwargs)
    assert (g.stats(), g.to_bytes()) == before


def test_observe_rejects_bad_input(g):
    with pytest.raises(ValueError, match="text"):
        g.observe(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="source"):
        g.observe("x", source="")
    e = g.observe("x", source="tool", time="2024-05-01T10:00:00")
    ev = g.evidence(e)
    assert (ev.text, ev.source, ev.time) == ("x", "tool", "2024-05-01T10:00:00")


def test_evidence_of_earlier_observation_can_be_cited(g):
    e1 = g.observe("first")
    e2 = g.observe("second")
    g.apply("accept", "k", "a", evidence=e1)
    g.apply("accept", "k", "b", evidence=e2)
    assert [v.evidence for v in g.versions("k")] == [e1, e2]


def test_frontier_sorted_non_empty_only(g):
    for key in ("b", "a", "c"):
        g.apply("accept", key, key.upper())
    g.apply("revoke", "c")
    assert list(g.frontier()) == ["a", "b"]
    assert g.frontier_items() == [("a", "A"), ("b", "B")]
    assert g.cell("missing") is None and g.versions("missing") == []


def test_noop_naming_another_value_is_a_failed_precondition_not_support(g):
    g.apply("accept", "k", "a", evidence=g.observe("k is a"))
    e = g.observe("k is zzz")
    edges = set(g.edges())
    r = g.apply("noop", "k", "zzz", evidence=e)
    assert (r.applied, r.op) == (False, "noop") and "zzz" in r.reason and "'a'" in r.reason
    assert g.cell("k").support == 1 and g.versions("k")[0].support == 1
    assert set(g.edges()) == edges  # no supported-by edge from e
    last = list(g.operations("k"))[-1]
    assert (last.requested, last.op, last.applied, last.value, last.reason) == (
        "noop",
        "noop",
        False,
        "zzz",
        r.reason,
    )
    assert g.stats()["failed_operations"] == 1
    # the head's own value, or no value at all, still count as support
    assert g.apply("noop", "k", "a", evidence=g.observe("k is a again")).applied
    assert g.apply("noop", "k").applied
    assert g.cell("k").support == 3


def test_noop_naming_an_alternative_is_not_support_for_the_head(g):
    g.apply("accept", "k", "a")
    g.apply("contest", "k", "b")
    r = g.apply("noop", "k", "b")
    assert not r.applied and r.op == "noop"
    assert g.cell("k").support == 1 and g.versions("k")[1].support == 1


def test_one_keys_operations_are_the_logs_entries_on_that_key_in_order() -> None:
    """``operations(key)`` (found column-wise) lists exactly the whole log's entries on the key, in log
    order: applied and failed operations, noops, undos and what an erasure left."""
    import random

    rng = random.Random(11)
    g = ProvenanceGraph(authority={"user": 2, "web": 0})
    keys = ["a", "b", "c", "a.b"]
    for _ in range(400):
        roll = rng.random()
        if roll < 0.05 and g.stats()["evidence"]:
            g.erase(f"e{rng.randrange(g.stats()['evidence'])}")
            continue
        if roll < 0.1 and g.stats()["operations"]:
            seq = rng.choice([op.seq for op in g.operations()])
            g.undo(seq)
            continue
        e = g.observe("said", rng.choice(["user", "web"]))
        op = rng.choice(["accept", "accept", "contest", "reject", "revoke", "resolve", "noop"])
        value = (
            rng.choice([None, "x", "y", "z"])
            if op not in ("accept", "contest", "resolve")
            else rng.choice("xyz")
        )
        g.apply(op, rng.choice(keys), value, evidence=e)
    log = list(g.operations())
    assert {op.op for op in log} >= {"accept", "contest", "noop", "undo"}
    for key in [*keys, "never"]:
        assert list(g.operations(key)) == [op for op in log if op.key == key], key
