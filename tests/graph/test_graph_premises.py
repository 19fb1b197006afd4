"""Premises: facts derived from other keys read as stale once a premise changes (``depends_on``)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmem.graph import ProvenanceGraph


def derived_graph(
    rng: random.Random, bases: int, derived: int
) -> tuple[ProvenanceGraph, dict[str, list[str]]]:
    """Base keys, then derived keys each depending on 1-3 earlier keys (a random DAG)."""
    g = ProvenanceGraph()
    premises: dict[str, list[str]] = {}
    names = [f"base{i}" for i in range(bases)]
    for name in names:
        g.apply("accept", name, "1", g.observe(f"{name} is 1"))
    for i in range(derived):
        name = f"derived{i}"
        premises[name] = rng.sample(names, k=min(len(names), rng.randint(1, 3)))
        g.apply("accept", name, "1", g.observe(f"{name} from {premises[name]}"), depends_on=premises[name])
        names.append(name)
    return g, premises


def dependents(premises: dict[str, list[str]], changed: str) -> set[str]:
    """Every key that depends on ``changed`` through a chain of premises (the definition)."""
    out: set[str] = set()
    frontier = {changed}
    while frontier:
        frontier = {k for k, ps in premises.items() if frontier & set(ps)} - out
        out |= frontier
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 5), st.integers(1, 25))
def test_a_changed_premise_marks_every_dependent_stale_and_reasserting_clears_it(seed, bases, derived):
    rng = random.Random(seed)
    g, premises = derived_graph(rng, bases, derived)
    assert not any(cell.stale for cell in g.frontier().values())
    changed = rng.choice([*(f"base{i}" for i in range(bases)), *premises])
    g.apply("accept", changed, "2", g.observe(f"{changed} is now 2"))
    stale = {key for key, cell in g.frontier().items() if cell.stale}
    assert stale == dependents(premises, changed)
    for key in stale:  # each names exactly its premises that changed or are stale themselves
        assert set(g.cell(key).stale) == {p for p in premises[key] if p == changed or p in stale}
    for key in premises:  # re-asserted in derivation order with current premises
        if key in stale:
            g.apply("accept", key, "1", g.observe(f"{key} re-derived"), depends_on=premises[key])
    assert not any(cell.stale for cell in g.frontier().values())


def test_render_says_which_premise_changed_and_which_is_stale_through_its_own() -> None:
    g = ProvenanceGraph()
    g.apply("accept", "salary", "100", g.observe("salary is 100"))
    g.apply("accept", "tax", "30", g.observe("tax is 30"), depends_on=["salary"])
    g.apply("accept", "net", "70", g.observe("net is 70"), depends_on=("salary", "tax", "salary"))
    assert g.cell("net").stale == () and g.render(["net"]) == "net = 70"
    g.apply("accept", "salary", "200", g.observe("a raise"))
    assert g.cell("tax").stale == ("salary",)
    assert g.cell("net").stale == ("salary", "tax")
    assert g.render(["net", "tax"]) == (
        "net = 70 | stale: premise salary changed; premise tax is stale\ntax = 30 | stale: premise salary changed"
    )
    g.apply("accept", "tax", "60", g.observe("tax is 60"), depends_on=["salary"])
    assert g.render(["net"]) == "net = 70 | stale: premise salary changed; premise tax changed"
    g.apply("accept", "net", "70", g.observe("still 70"))  # re-asserted without premises: still stale
    assert g.cell("net").stale == ("salary", "tax")
    g.apply("accept", "net", "140", g.observe("net is 140"), depends_on=["salary", "tax"])
    assert g.cell("net").stale == ()
    g.apply("revoke", "salary", evidence=g.observe("the raise was revoked"))
    assert g.cell("net").stale == ("salary", "tax") and g.cell("tax").stale == ("salary",)


def test_premises_survive_save_and_load(tmp_path) -> None:
    g = ProvenanceGraph()
    g.apply("accept", "a", "1", g.observe("a"))
    g.apply("accept", "b", "2", g.observe("b"), depends_on=["a"])
    g.apply("accept", "a", "3", g.observe("a again"))
    g.save(tmp_path / "s.arrow")
    h = ProvenanceGraph.load(tmp_path / "s.arrow")
    assert h.cell("b").stale == ("a",) and h.to_bytes() == g.to_bytes()
    assert [o.seq for o in h.operations()] == [o.seq for o in g.operations()]


def test_a_cycle_of_premises_ends() -> None:
    g = ProvenanceGraph()
    g.apply("accept", "a", "1")
    g.apply("accept", "b", "1", depends_on=["a"])
    g.apply("accept", "a", "2", depends_on=["b"])  # a now depends on b, which depends on a's old head
    assert g.cell("b").stale == ("a",)
    assert g.cell("a").stale == ("b",)  # b is stale through a: the walk stops at the cycle


@pytest.mark.parametrize(
    ("depends_on", "match"),
    [
        (["nothing"], "premise 'nothing' has no current value"),
        (["empty"], "premise 'empty' has no current value"),
        (["k"], "cannot depend on its own key"),
        ("a", "depends_on must be a list or tuple of keys"),
        (3, "depends_on must be a list or tuple of keys"),
        ([3], "premise 3 has no current value"),
    ],
)
def test_bad_premises_are_refused_and_nothing_is_written(depends_on, match) -> None:
    g = ProvenanceGraph()
    g.apply("accept", "a", "1")
    g.apply("accept", "k", "1")
    g.apply("noop", "empty")
    before = g.to_bytes()
    with pytest.raises(ValueError, match=match):
        g.apply("accept", "k", "2", depends_on=depends_on)
    with pytest.raises(ValueError, match="a value is required"):  # other arguments are still checked first
        g.apply("accept", "k", None, depends_on=["a"])
    assert g.to_bytes() == before
