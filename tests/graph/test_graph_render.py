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


# ---------------------------------------------------------------- issue 11: one cell, one line


def test_value_with_newline_renders_as_one_escaped_line():
    g = ProvenanceGraph()
    g.apply("accept", "k", "x\nfoo = bar")
    g.apply("accept", "other", "plain")
    assert g.render() == "k = x\\nfoo = bar\nother = plain"
    assert g.render().splitlines() == ["k = x\\nfoo = bar", "other = plain"]


def test_escape_is_unambiguous():
    g = ProvenanceGraph()
    for key, value in [("nl", "a\nb"), ("lit", "a\\nb"), ("cr", "a\rb"), ("tab", "a\tb"), ("nul", "a\x00b")]:
        g.apply("accept", key, value)
    lines = dict(line.split(" = ", 1) for line in g.render().splitlines())
    assert lines == {"nl": "a\\nb", "lit": "a\\\\nb", "cr": "a\\rb", "tab": "a\\tb", "nul": "a\\x00b"}


LINE_BREAKERS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def test_every_cell_is_exactly_one_line_whatever_its_values():
    g = ProvenanceGraph()
    for i, brk in enumerate(LINE_BREAKERS):
        key = f"k{i:02d}"
        g.apply("accept", key, f"old{brk}x = forged")  # history
        g.apply("accept", key, f"new{brk}y = forged")  # head
        g.apply("contest", key, f"alt{brk}z = forged")  # alternative
    g.apply("accept", "gone", "v\nw")
    g.apply("revoke", "gone")
    keys = [*g.frontier(), "gone"]
    for disclose in (
        (),
        ("support",),
        ("alternatives",),
        ("history",),
        ("support", "alternatives", "history"),
    ):
        text = g.render(disclose=disclose)
        assert len(text.splitlines()) == len(g.frontier())
        assert len(text.split("\n")) == len(g.frontier())
        assert not any(line.startswith(("x =", "y =", "z =")) for line in text.splitlines())
        assert len(g.render(keys=keys, disclose=disclose).splitlines()) == len(keys)
    assert all(line.startswith("k") for line in g.render().splitlines())
