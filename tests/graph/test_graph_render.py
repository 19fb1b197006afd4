"""Materialization text: deterministic, query-independent, current value first."""

from __future__ import annotations

import pytest

from pmem.graph import ProvenanceGraph


def build(order: list[str]) -> ProvenanceGraph:
    g = ProvenanceGraph()
    for key in order:
        g.apply("accept", key, f"{key}-1")
        g.apply("accept", key, f"{key}-2")
    g.apply("contest", "b", "b-alt")
    g.apply("noop", "a")
    return g


def test_default_is_one_line_per_cell_sorted():
    text = build(["b", "a"]).render()
    assert text.splitlines() == ["a = a-2", "b = b-2 [contested]"]


def test_disclosure_modes_fixed_order_and_content():
    g = build(["a", "b"])
    full = g.render(disclose=("history", "support", "alternatives"))
    assert full == g.render(disclose=("alternatives", "support", "history"))
    a, b = full.splitlines()
    assert a.startswith("a = a-2 | support: 2 | history: a-1 (superseded, t=")
    assert b.startswith("b = b-2 [contested] | support: 1 | alternatives: b-alt | history: b-1 (superseded")


def test_render_is_deterministic_across_insertion_order():
    assert build(["a", "b"]).render(disclose=("support",)) == build(["b", "a"]).render(disclose=("support",))


def test_keys_in_given_order_and_unknown_skipped():
    g = build(["a", "b"])
    assert g.render(keys=["b", "zzz", "a", "b"]).splitlines() == ["b = b-2 [contested]", "a = a-2"]
    g.apply("revoke", "a")
    g.apply("revoke", "a")
    assert g.render(keys=["a"]) == "a = (no current value)"


def test_unknown_disclosure_raises():
    with pytest.raises(ValueError, match="disclosure"):
        ProvenanceGraph().render(disclose=("everything",))
