"""Rollback along supersedes edges."""

from __future__ import annotations

import pytest
from determinism import digest, digests_elsewhere

from pmem.graph import ProvenanceGraph


def chain(values: list[str]) -> ProvenanceGraph:
    g = ProvenanceGraph()
    for v in values:
        g.apply("accept", "k", v, evidence=g.observe(f"k is {v}"))
    return g


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("op", ["revoke", "reject"])
def test_k_retractions_reinstate_value_before_k_commits(k, op):
    values = ["v0", "v1", "v2", "v3", "v4"]
    g = chain(values)
    for _ in range(k):
        assert g.apply(op, "k").applied
    assert g.cell("k").value == values[-1 - k]
    expected = "revoked" if op == "revoke" else "contradicted"
    assert [v.status for v in g.versions("k")][-k:] == [expected] * k


def test_retracting_every_commit_empties_the_cell():
    g = chain(["v0", "v1", "v2"])
    for _ in range(3):
        g.apply("revoke", "k")
    assert g.cell("k").status == "empty"
    r = g.apply("revoke", "k")
    assert not r.applied and r.op == "noop"


def test_rollback_skips_contradicted_predecessor():
    g = chain(["v0", "v1"])
    g.apply("reject", "k", "v2")  # v1 contradicted, v2 supersedes it
    g.apply("revoke", "k")  # v2 revoked: skip contradicted v1, reinstate v0
    assert g.cell("k").value == "v0"
    assert [(v.value, v.status) for v in g.versions("k")] == [
        ("v0", "active"),
        ("v1", "contradicted"),
        ("v2", "revoked"),
    ]


def test_rollback_skips_revoked_predecessor_after_reaccept():
    g = chain(["v0", "v1"])
    g.apply("revoke", "k")  # -> v0
    g.apply("accept", "k", "v2")  # supersedes the reinstated v0
    g.apply("revoke", "k")  # -> v0 again (v1 is not on v2's chain)
    assert g.cell("k").value == "v0"
    v0 = g.versions("k")[0]
    assert v0.status == "active" and v0.valid_to is None


def test_rollback_with_no_superseded_predecessor_empties():
    g = chain(["v0"])
    g.apply("reject", "k", "v1")  # v0 contradicted
    g.apply("reject", "k")  # v1 contradicted, v0 contradicted too -> empty
    assert g.cell("k").status == "empty"


def rolled_back(values: list[str]) -> ProvenanceGraph:
    """A chain of ``values``, a rejection with a new value, then two revokes."""
    g = chain(values)
    g.apply("reject", "k", "e")
    g.apply("revoke", "k")
    g.apply("revoke", "k")
    return g


def test_rollback_is_deterministic_across_interpreters():
    """The same rollbacks give the same bytes in fresh interpreters with other hash seeds."""
    inputs = [[["a", "b", "c", "d"]], [["x", "y"]], [["a", "a", "b", "a"]]]
    here = [digest(rolled_back(*args)) for args in inputs]
    assert rolled_back(["a", "b", "c", "d"]).cell("k").value == "b"  # the rollbacks did reinstate
    for seed in (0, 777):
        assert digests_elsewhere("test_graph_rollback:rolled_back", inputs, seed) == here


def test_one_open_head_after_rollbacks():
    g = chain(["a", "b", "c"])
    g.apply("revoke", "k")
    g.apply("accept", "k", "d")
    g.apply("reject", "k")
    open_heads = [v for v in g.versions("k") if v.valid_to is None and v.status in ("active", "contested")]
    assert [v.value for v in open_heads] == ["b"]


def test_valid_to_is_the_newest_superseders_arrival():
    """One version superseded three times (rollback and re-accept between): valid_to is the last one's."""
    g = ProvenanceGraph()
    a = g.apply("accept", "k", "a", evidence=g.observe("k is a", time="2024-01-01"))  # seq 2
    g.apply("accept", "k", "b", evidence=g.observe("k is b", time="2024-02-01"))  # seq 4
    g.apply("reject", "k")  # seq 5: b contradicted, a reopened
    g.apply("accept", "k", "c", evidence=g.observe("k is c", time="2024-03-01"))  # seq 7
    g.apply("revoke", "k")  # seq 8: c revoked, a reopened
    g.apply("accept", "k", "d", evidence=g.observe("k is d", time="2024-04-01"))  # seq 10
    assert a.applied
    expected = [
        ("a", "superseded", 2, 10),
        ("b", "contradicted", 4, 5),
        ("c", "revoked", 7, 8),
        ("d", "active", 10, None),
    ]
    assert [(v.value, v.status, v.valid_from, v.valid_to) for v in g.versions("k")] == expected
    assert [(v.value, v.valid_to) for v in g.cell("k").history] == [("c", 8), ("b", 5), ("a", 10)]
    h = ProvenanceGraph.from_bytes(g.to_bytes())
    assert [(v.value, v.status, v.valid_from, v.valid_to) for v in h.versions("k")] == expected
    # and a rollback now reopens it, closing it again when re-superseded
    g.apply("reject", "k")  # seq 11
    g.apply("accept", "k", "e")  # seq 12
    assert (g.versions("k")[0].value, g.versions("k")[0].valid_to) == ("a", 12)
