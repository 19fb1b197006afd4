"""Patch lowering: exactly one typed operation per patch, against the current head."""

from __future__ import annotations

import pytest

from pmem.graph import Patch, PatchController, ProvenanceGraph


@pytest.fixture
def g() -> ProvenanceGraph:
    g = ProvenanceGraph()
    g.apply("accept", "k", "a")
    return g


C = PatchController()


@pytest.mark.parametrize(
    ("patch", "op", "value"),
    [
        (Patch("new", "x"), "accept", "x"),
        (Patch("new", None), "noop", None),
        (Patch("k", "a"), "noop", "a"),
        (Patch("k", "b"), "accept", "b"),
        (Patch("k", "b", old_value="a"), "accept", "b"),
        (Patch("k", "b", old_value="a", marks_old_wrong=True), "reject", "b"),
        (Patch("k", None, marks_old_wrong=True), "reject", None),
        (Patch("k", None), "revoke", None),
        (Patch("k", "b", old_value="zzz"), "noop", "b"),
        (Patch("k", "b", old_value="zzz", hard_commit=True), "accept", "b"),
        (Patch("k", "b", op="contest"), "contest", "b"),
        (Patch("k", "b", op="resolve"), "resolve", "b"),
        (Patch("k", "b", op="resolve", hard_commit=True), "accept", "b"),
        (Patch("new", "x", op="contest", hard_commit=True), "accept", "x"),
        (Patch("k", "a", op="revoke"), "revoke", None),
        (Patch("k", "a", op="noop"), "noop", "a"),
        (Patch("k", "b", op="noop"), "noop", "b"),
        (Patch("k", "b", op="noop", hard_commit=True), "accept", "b"),
    ],
)
def test_lowering_table(g, patch, op, value):
    low = C.lower(g, patch)
    assert (low.op, low.value) == (op, value)
    assert low.reason


def test_apply_makes_exactly_one_operation(g):
    n = len(list(g.operations()))
    r = C.apply(
        g, Patch("k", "b", old_value="a", marks_old_wrong=True), evidence=g.observe("a was wrong, it's b")
    )
    assert r.op == "reject"
    assert len(list(g.operations())) == n + 1
    assert [(v.value, v.status) for v in g.versions("k")] == [("a", "contradicted"), ("b", "active")]


def test_explicit_op_failing_precondition_is_kept_and_recorded(g):
    r = C.apply(g, Patch("k", "b", op="resolve"))
    assert not r.applied and "not contested" in r.reason
    assert list(g.operations())[-1].requested == "resolve"


def test_invalid_patch_raises():
    with pytest.raises(ValueError, match="unknown op"):
        Patch("k", "v", op="delete")
    with pytest.raises(ValueError, match="key"):
        Patch("", "v")


def test_stale_patch_is_not_counted_as_support_for_the_head(g):
    r = C.apply(g, Patch("k", "b", old_value="zzz"))
    assert (r.applied, r.op) == (False, "noop")
    assert g.cell("k").support == 1
