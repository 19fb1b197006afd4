"""Source authority: a lower-ranked source cannot displace what a higher-ranked one established."""

from __future__ import annotations

import random

import pytest

from pmem.graph import ProvenanceGraph

RANKS = {"user": 2, "tool": 1, "web": 0}


def test_a_low_source_contradicting_a_high_one_a_thousand_times_never_displaces_it() -> None:
    rng = random.Random(0)
    g = ProvenanceGraph(authority=RANKS, default_authority=1)
    truth: dict[str, str] = {}
    claims: dict[str, set[str]] = {}
    heads_kept = 0
    for i in range(1000):
        key = f"fact{rng.randrange(20)}"
        if key not in truth or rng.random() < 0.05:  # the user states (or restates) the fact
            truth[key] = f"true {i}"
            g.apply("accept", key, truth[key], g.observe(f"{key} is {truth[key]}", "user"))
            claims[key] = set()
        claim = f"false {rng.randrange(1000)}"
        result = g.apply("accept", key, claim, g.observe(f"{key} is {claim}", "web"))
        assert result.op in ("contest", "noop")  # lowered: kept as an alternative (or its support)
        claims[key].add(claim)
        heads_kept += g.head_value(key) == truth[key]
    assert heads_kept == 1000
    for key, cell in g.frontier().items():
        assert cell.value == truth[key]
        assert set(cell.alternatives) == claims[key]  # every low-rank claim since is visible
        assert cell.status == ("contested" if claims[key] else "active")
    lowered = [o for o in g.operations() if o.requested == "accept" and o.op == "contest"]
    assert lowered and all(g.evidence(o.evidence).source == "web" for o in lowered)


def test_reject_revoke_and_resolve_need_rank() -> None:
    g = ProvenanceGraph(authority=RANKS)
    g.apply("accept", "k", "a", g.observe("k is a", "tool"))
    for op in ("reject", "revoke"):
        result = g.apply(op, "k", None, g.observe("not a", "web"))
        assert (result.applied, result.reason) == (False, "insufficient authority")
    g.apply("accept", "k", "b", g.observe("k is b", "web"))  # lowered to an alternative
    assert g.cell("k").alternatives == ["b"]
    result = g.apply("resolve", "k", "b", g.observe("b it is", "web"))  # web < tool (the head)
    assert (result.applied, result.reason) == (False, "insufficient authority")
    assert g.apply("resolve", "k", "b").applied  # no evidence: default 1, equal to tool's
    assert g.head_value("k") == "b"
    # the head was created by web evidence: now web may displace it, and tool may too
    assert g.apply("accept", "k", "c", g.observe("k is c", "web")).op == "accept"
    assert g.apply("reject", "k", None, g.observe("c is wrong", "tool")).applied
    assert g.head_value("k") == "b"


def test_equal_or_higher_rank_behaves_as_without_authority() -> None:
    def stream(g: ProvenanceGraph, source: str) -> None:
        g.apply("accept", "k", "a", g.observe("a", "web"))
        g.apply("accept", "k", "b", g.observe("b", source))
        g.apply("reject", "k", None, g.observe("b was wrong", source))
        g.apply("accept", "k", "c", g.observe("c", source))
        g.apply("revoke", "k", "c", g.observe("drop c", source))

    plain = ProvenanceGraph()
    stream(plain, "user")
    for source in ("web", "user"):
        ranked = ProvenanceGraph(authority=RANKS)
        stream(ranked, source)
        assert ranked.frontier() == plain.frontier()
        assert [(o.op, o.applied) for o in ranked.operations()] == [
            (o.op, o.applied) for o in plain.operations()
        ]


def test_set_authority_applies_from_then_on_and_survives_save_and_as_of(tmp_path) -> None:
    g = ProvenanceGraph()
    g.apply("accept", "k", "a", g.observe("a", "user"))
    assert g.apply("accept", "k", "b", g.observe("b", "web")).op == "accept"  # not configured: today's rules
    g.set_authority("web", 0)
    g.set_authority("user", 5)
    g.apply("accept", "k", "c", g.observe("c", "user"))
    assert g.apply("accept", "k", "d", g.observe("d", "web")).op == "contest"
    assert g.authority("web") == 0 and g.authority("mail") == 1
    g.save(tmp_path / "s.arrow")
    h = ProvenanceGraph.load(tmp_path / "s.arrow")
    assert h.to_bytes() == g.to_bytes()
    assert h.apply("accept", "k", "e", h.observe("e", "web")).op == "contest"
    assert g.as_of(3).authority("web") == 1  # the settings were made after arrival 4
    assert g.as_of(4).authority("web") == 0
    assert g.as_of().to_bytes() == g.to_bytes()


def test_a_default_authority_alone_configures_no_ranking() -> None:
    """Only ``default_authority``, no table: operations and frontier as without any authority."""
    plain, ranked = ProvenanceGraph(), ProvenanceGraph(default_authority=3)
    for g in (plain, ranked):
        g.apply("accept", "k", "a", g.observe("a", "web"))
        g.apply("accept", "k", "b", g.observe("b", "user"))
    assert [o.op for o in ranked.operations()] == ["accept", "accept"]
    assert ranked.frontier() == plain.frontier()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ProvenanceGraph(authority={"user": "high"}), "authority of 'user' must be an integer"),
        (lambda: ProvenanceGraph(authority={"user": True}), "authority of 'user' must be an integer"),
        (lambda: ProvenanceGraph(authority=[("user", 1)]), "authority must be a mapping"),
        (lambda: ProvenanceGraph(authority={"": 1}), "a source must be a non-empty string"),
        (lambda: ProvenanceGraph(default_authority=1.5), "default_authority must be an integer"),
        (lambda: ProvenanceGraph().set_authority("web", None), "authority of 'web' must be an integer"),
        (lambda: ProvenanceGraph().set_authority("", 1), "source"),
    ],
)
def test_bad_authority_settings_are_refused(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_a_cell_contested_only_by_lower_ranked_sources_renders_as_held() -> None:
    g = ProvenanceGraph(authority={"user": 2, "web": 0})
    g.apply("accept", "p.room", "room 31", evidence=g.observe("The room of p is room 31.", source="user"))
    g.apply("accept", "p.room", "room 20", evidence=g.observe("The room of p is room 20.", source="web"))
    cell = g.cell("p.room")
    assert (cell.status, cell.held, cell.alternatives) == ("contested", True, ["room 20"])
    assert (
        g.render(disclose=["alternatives"])
        == "p.room = room 31 [held by source authority] | alternatives: room 20"
    )
    # an equal-ranked claim makes it an open conflict again
    g.apply("contest", "p.room", "room 44", evidence=g.observe("The room of p is room 44.", source="user"))
    assert not g.cell("p.room").held
    assert g.render() == "p.room = room 31 [contested]"
    plain = ProvenanceGraph()
    plain.apply("accept", "p.room", "room 31", evidence=plain.observe("a", source="user"))
    plain.apply("contest", "p.room", "room 20", evidence=plain.observe("b", source="web"))
    assert not plain.cell("p.room").held  # no authority configured: nothing outranks anything
