"""A retraction retracts what it named (issue 41): erasing or undoing any statement equals never having
made it, retractions of it included.

"X was an error" is a reject or revoke of the head *as it was when it arrived*. The graph records that
value (``Operation.retracts``) and replays the retraction only while it is the head, so that erasing the
statement of X, or undoing its accept, leaves the retraction a noop instead of retracting the value
before X. The reference here never calls ``erase`` or ``undo``: it feeds the calls left (each
retraction skipped where the value it retracts is not the head) to the naive model of
``test_graph_reference_model``, and the graph must agree with it on every cell and every live version.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph_bulk import assert_same, batch, scripts
from test_graph_reference_model import ReferenceGraph

from pmem.graph import OPS, ProvenanceGraph
from pmem.graph._ops import _bulk

KEYS = ("a", "b")
VALUES = ("x", "y", "z")
RETRACTIONS = ("reject", "revoke")


@dataclasses.dataclass(frozen=True)
class Call:
    op: str
    key: str
    value: str | None
    evidence: int  # index of the observation it cites
    retracts: str | None  # what the head was when it arrived (a revoke's value names it): the reference's


def run(script: list[tuple[str, str, str | None, bool]]) -> tuple[ProvenanceGraph, list[Call], list[int]]:
    """The script's calls on a graph: each cites a new observation, or (``again``) the last one. Returns
    the graph, the calls with what each retraction retracts (read off the naive model), and each
    call's seq."""
    g, model = ProvenanceGraph(), ReferenceGraph()
    calls, seqs = [], []
    for op, key, value, again in script:
        if value is None and op in ("accept", "contest", "resolve"):
            value = VALUES[len(calls) % len(VALUES)]
        if not again or not calls:
            g.observe(f"statement {len(calls)}")
            model.observe()
        evidence = g.stats()["evidence"] - 1
        head = model.head.get(key)
        target = None
        if op == "revoke" and value is not None:
            target = value
        elif op in RETRACTIONS and head is not None:
            target = model.versions[head]["value"]
        g.apply(op, key, value, evidence=f"e{evidence}")
        model.apply(op, key, value)
        calls.append(Call(op, key, value, evidence, target))
        seqs.append(g.seq)
    return g, calls, seqs


def rebuilt(calls: list[Call], left_out: set[int]) -> ReferenceGraph:
    """The naive model fed every call but ``left_out`` (call indices); a retraction whose value is not
    the head then retracts nothing."""
    model = ReferenceGraph()
    for i, c in enumerate(calls):
        if i in left_out:
            continue
        head = model.head.get(c.key)
        said = head is not None and model.versions[head]["value"] == c.retracts
        if c.op in RETRACTIONS and c.retracts is not None and not said:
            continue  # what it retracted was never said here: a noop
        model.apply(c.op, c.key, c.value)
    return model


def views(g: ProvenanceGraph) -> dict[str, tuple]:
    """Each key's cell and live versions (undone and erased ones are no longer the key's history); a
    key with neither is left out (a replay without its operations never writes it)."""
    out = {}
    for key in KEYS:
        cell = g.cell(key)
        if cell is None:
            continue
        live = [(v.value, v.status) for v in g.versions(key) if v.status not in ("undone", "erased")]
        if cell.value is not None or live:
            out[key] = ((cell.value, cell.status, cell.alternatives), live)
    return out


def model_views(model: ReferenceGraph) -> dict[str, tuple]:
    out = {}
    for key in KEYS:
        versions, cell = model.view(key)
        if cell[0] is not None or versions:
            out[key] = (cell, [(value, status) for value, status, _, _ in versions])
    return out


script = st.lists(
    st.tuples(
        st.sampled_from(("accept", "accept", *OPS[1:])),  # accepts twice as often: values to retract
        st.sampled_from(KEYS),
        st.one_of(st.none(), st.sampled_from(VALUES)),
        st.sampled_from((False, False, False, True)),  # now and then two operations cite one statement
    ),
    max_size=24,
)


def check_every_erasure_and_undo(script_: list[tuple[str, str, str | None, bool]]) -> None:
    g, calls, seqs = run(script_)
    saved = g.to_bytes()
    assert views(g) == model_views(rebuilt(calls, set()))  # the targets change nothing as said
    for e in sorted({c.evidence for c in calls}):
        erased = ProvenanceGraph.from_bytes(saved)  # each from the saved state: the targets load
        erased.erase(f"e{e}")
        want = model_views(rebuilt(calls, {i for i, c in enumerate(calls) if c.evidence == e}))
        assert views(erased) == want, f"erase e{e}"
        assert views(erased.as_of()) == want, f"as_of after erase e{e}"
        again = ProvenanceGraph.from_bytes(erased.to_bytes())
        assert views(again) == want and again.to_bytes() == erased.to_bytes()
    for i, seq in enumerate(seqs):
        undone = ProvenanceGraph.from_bytes(saved)
        result = undone.undo(seq)
        want = model_views(rebuilt(calls, {i} if result.applied else set()))
        assert views(undone) == want, f"undo of call {i} ({calls[i].op} at seq {seq})"
        assert views(undone.as_of()) == want, f"as_of after undo of call {i}"


@settings(max_examples=25, deadline=None)  # a few seconds; the slow variant below runs 500
@given(script)
def test_erasing_or_undoing_any_statement_equals_never_having_made_it(script_) -> None:
    check_every_erasure_and_undo(script_)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(script)
def test_erasing_or_undoing_any_statement_equals_never_having_made_it_at_length(script_) -> None:
    check_every_erasure_and_undo(script_)


def test_the_readme_retraction_keeps_the_value_before_once_its_target_is_erased() -> None:
    """The core's own example: a reject of $50k, then the $50k statement erased or its accept undone."""
    g = ProvenanceGraph()
    g.apply("accept", "project.budget", "$30k", evidence=g.observe("The budget is $30k."))
    raised = g.observe("Budget raised to $50k.")
    g.apply("accept", "project.budget", "$50k", evidence=raised)
    g.apply("reject", "project.budget", evidence=g.observe("The $50k figure was an error."))
    (reject,) = [o for o in g.operations() if o.requested == "reject"]
    assert reject.retracts == "$50k"
    undone = ProvenanceGraph.from_bytes(g.to_bytes())
    undone.undo(list(undone.operations())[1].seq)
    assert undone.head_value("project.budget") == "$30k"
    assert list(undone.operations())[2].reason == "reject retracts '$50k' but the current head is '$30k'"
    receipt = g.erase(raised)
    assert receipt.changed == {} and g.head_value("project.budget") == "$30k"
    assert [(v.value, v.status) for v in g.versions("project.budget")] == [("$30k", "active"), ("", "erased")]
    # the value only the erased statement stated leaves the retraction too: no byte of it is kept
    assert b"$50k" in g.to_bytes()  # the reject's own evidence says "$50k": that text is not erased
    (reject,) = [o for o in g.operations() if o.requested == "reject"]
    assert (reject.applied, reject.retracts, reject.reason) == (
        False,
        None,
        "left out: the value it retracts was erased",
    )


def test_a_retracted_value_only_the_erased_evidence_stated_is_gone_from_every_byte() -> None:
    """A retraction whose own text does not name the value (``revoke k``): its record of the value
    would keep what the erasure removes, so the erasure takes it out, and the retraction stays a noop
    in every later replay."""
    g = ProvenanceGraph()
    g.apply("accept", "user.city", "Lisbon", evidence=g.observe("I live in Lisbon"))
    secret = g.observe("Moved to Qwertyville-7731")
    g.apply("accept", "user.city", "Qwertyville-7731", evidence=secret)
    g.apply("revoke", "user.city", evidence=g.observe("forget that"))
    assert list(g.operations())[-1].retracts == "Qwertyville-7731"
    g.erase(secret)
    assert b"Qwertyville" not in g.to_bytes() and g.head_value("user.city") == "Lisbon"
    loaded = ProvenanceGraph.from_bytes(g.to_bytes())
    loaded.apply("accept", "user.city", "Porto", evidence=loaded.observe("now Porto"))
    loaded.undo(loaded.seq)  # re-derives the key: the revoke is still left out, Lisbon stays
    assert loaded.head_value("user.city") == "Lisbon"
    assert loaded.as_of().head_value("user.city") == "Lisbon"


def test_a_retraction_named_elsewhere_is_kept_with_what_it_names() -> None:
    """A revoke naming its value, and ``retracts`` given: a value other than the head's is a noop with
    the reason; each is recorded as named."""
    g = ProvenanceGraph()
    g.apply("accept", "k", "a", evidence=g.observe("k is a"))
    assert not g.apply("revoke", "k", "b").applied
    assert not g.apply("reject", "k", "c", retracts="b").applied
    r = g.apply("reject", "k", "c", retracts="a")
    assert r.applied and g.head_value("k") == "c"
    assert [(o.requested, o.retracts, o.reason) for o in g.operations()][1:] == [
        ("revoke", "b", "revoke names 'b' but the current head is 'a'"),
        ("reject", "b", "reject retracts 'b' but the current head is 'a'"),
        ("reject", "a", None),
    ]
    with pytest.raises(ValueError, match="retracts names what a reject or revoke retracts"):
        g.apply("accept", "k", "d", retracts="c")
    with pytest.raises(ValueError, match="name different values"):
        g.apply("revoke", "k", "c", retracts="d")
    assert g.stats()["operations"] == 4  # the refused calls wrote nothing


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_replayed_batch_with_what_each_retraction_retracts_equals_the_loop(data: st.DataObject) -> None:
    """Replay feeds each retraction's recorded value beside the batch (``_bulk.apply_batch(...,
    retracts)``): column-wise, a value that is not the head fails exactly as ``apply(...,
    retracts=...)`` does, and the recorded values are the loop's, in the loop's order."""
    prefix = data.draw(scripts(max_size=20), label="prefix")
    seq_graph, bulk_graph = ProvenanceGraph(), ProvenanceGraph()
    for g in (seq_graph, bulk_graph):
        g.apply_batch(batch(prefix))
    n = seq_graph.stats()["evidence"]
    part = data.draw(scripts(evidence_before=n, max_size=40), label="part")
    named = st.one_of(st.none(), st.sampled_from(["x", "y", "z", "never said"]))
    targets = [
        (row[2] if row[2] is not None and data.draw(st.booleans()) else None)
        if row[0] == "revoke"
        else data.draw(named)
        if row[0] == "reject"
        else None
        for row in part
    ]
    expected = []
    for row, target in zip(part, targets, strict=True):
        if row[0] == "obs":
            seq_graph.observe(row[1], row[2] or "user", row[3])
        else:
            evidence = None if row[3] is None else f"e{row[3]}"
            expected.append(seq_graph.apply(row[0], row[1], row[2], evidence=evidence, retracts=target))
    result = _bulk.apply_batch(bulk_graph, batch(part), pa.array(targets, pa.large_string()))
    assert [OPS[c] for c in result.op.tolist()] == [r.op for r in expected]
    assert result.applied.tolist() == [r.applied for r in expected]
    assert_same(bulk_graph, seq_graph)
