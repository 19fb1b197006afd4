"""Reads as of the past (``as_of``), checked against a replay written from the definition.

The reference never reads the graph's log: it keeps the calls it made and feeds the chosen ones to a new
graph. Each observation and operation (applied or not) consumes one arrival seq; a source authority
setting consumes none and belongs to the seq it followed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import strategies as st
from lengths import short_and_long

from pmem.graph import OPS, ProvenanceGraph

KEYS = ["a", "b", "c"]
VALUES = ["x", "y", "z"]
DAY0 = datetime(2026, 1, 1)

# ("observe", text, source, day or None, valid day or None)
# | (op, key, value, cite: evidence k back, or None, premises) | ("authority", source, level)
observe_call = st.tuples(
    st.just("observe"),
    st.sampled_from(["seen", "said", "read"]),
    st.sampled_from(["user", "tool", "web"]),
    st.one_of(st.none(), st.integers(0, 30)),
    st.one_of(st.none(), st.integers(0, 30)),
)


def day(n: int | None) -> str | None:
    return None if n is None else (DAY0 + timedelta(days=n)).isoformat()


op_call = st.tuples(
    st.sampled_from(OPS),
    st.sampled_from(KEYS),
    st.one_of(st.none(), st.sampled_from(VALUES)),
    st.one_of(st.none(), st.integers(0, 3)),
    st.lists(st.sampled_from(KEYS), max_size=2),
)
authority_call = st.tuples(st.just("authority"), st.sampled_from(["user", "tool", "web"]), st.integers(0, 2))
calls = st.lists(st.one_of(observe_call, op_call, authority_call), max_size=50)
configured = st.one_of(
    st.none(), st.dictionaries(st.sampled_from(["user", "tool", "web"]), st.integers(0, 2))
)


def build(chosen: list[tuple], authority: dict | None = None) -> ProvenanceGraph:
    """A new graph fed the calls in order; citations are to the k-th latest evidence *of these calls*."""
    g = ProvenanceGraph(authority=authority)
    evidence: list[str] = []
    for i, call in enumerate(chosen):
        if call[0] == "authority":
            g.set_authority(call[1], call[2])
        elif call[0] == "observe":
            _, text, source, seen, valid = call
            evidence.append(g.observe(f"{text} {i}", source, day(seen), day(valid)))
        else:
            op, key, value, back, premises = call
            if value is None and op in ("accept", "contest", "resolve"):
                value = VALUES[i % len(VALUES)]
            cited = evidence[-1 - back] if back is not None and back < len(evidence) else None
            held = [p for p in premises if p != key and g.head_value(p) is not None] or None
            g.apply(op, key, value, evidence=cited, depends_on=held)
    return g


def resolved(chosen: list[tuple], authority: dict | None = None) -> list[tuple]:
    """The calls as ``build`` made them (citations, values and premises made absolute, and what each
    reject or revoke retracts: the head it found, or a revoke's value), so that a subset replays the
    same requests: a retraction whose value is not the head there retracts nothing (issue 41)."""
    out: list[tuple] = []
    evidence: list[int] = []
    for i, call in enumerate(chosen):
        if call[0] == "authority":
            out.append(call)
        elif call[0] == "observe":
            _, text, source, seen, valid = call
            evidence.append(i)
            out.append(("observe", f"{text} {i}", source, seen, valid, i))
        else:
            op, key, value, back, premises = call
            if value is None and op in ("accept", "contest", "resolve"):
                value = VALUES[i % len(VALUES)]
            cited = evidence[-1 - back] if back is not None and back < len(evidence) else None
            before = build(chosen[:i], authority)  # the premises build() could name at this call
            held = [p for p in premises if p != key and before.head_value(p) is not None]
            target = None
            if op in ("reject", "revoke"):
                target = value if op == "revoke" and value is not None else before.head_value(key)
            out.append((op, key, value, cited, i, held, target))
    return out


def build_resolved(chosen: list[tuple], authority: dict | None = None) -> ProvenanceGraph:
    g = ProvenanceGraph(authority=authority)
    ids: dict[int, str] = {}
    for call in chosen:
        if call[0] == "authority":
            g.set_authority(call[1], call[2])
        elif call[0] == "observe":
            _, text, source, seen, valid, i = call
            ids[i] = g.observe(text, source, day(seen), day(valid))
        else:
            op, key, value, cited, _, premises, target = call
            held = [p for p in premises if p != key and g.head_value(p) is not None] or None
            evidence = None if cited is None else ids[cited]
            g.apply(op, key, value, evidence=evidence, depends_on=held, retracts=target)
    return g


def observed_by(chosen: list[tuple], cutoff: int) -> list[tuple]:
    """The definition: an operation's time is its evidence's (valid time where given, else observation
    time); an untimed arrival takes the latest time before it and is kept when there is none."""
    kept, latest, when_of = [], None, {}
    for call in chosen:
        if call[0] == "authority":  # a setting is not observed: it stays in its place
            kept.append(call)
            continue
        if call[0] == "observe":
            own = call[4] if call[4] is not None else call[3]
            when = own if own is not None else latest
            when_of[call[5]] = when
        else:
            when = latest if call[3] is None else when_of.get(call[3], latest)
        if when is not None:
            latest = when
        if when is None or when <= cutoff:
            kept.append(call)
    return kept


def up_to(chosen: list[tuple], cut: int) -> list[tuple]:
    """The calls up to arrival seq ``cut``, with the settings made after it and before the next."""
    arrivals = [i for i, call in enumerate(chosen) if call[0] != "authority"]
    return chosen if cut >= len(arrivals) else chosen[: arrivals[cut]]


def check_as_of_a_seq_is_the_graph_of_the_first_arrivals(chosen, cut, authority) -> None:
    g = build(chosen, authority)
    assert g.seq == sum(call[0] != "authority" for call in chosen)
    assert g.as_of(cut).to_bytes() == build(up_to(chosen, cut), authority).to_bytes()
    assert g.as_of().to_bytes() == g.to_bytes()


(
    test_as_of_a_seq_is_the_graph_of_the_first_arrivals,
    test_as_of_a_seq_is_the_graph_of_the_first_arrivals_at_length,
) = short_and_long(
    check_as_of_a_seq_is_the_graph_of_the_first_arrivals,
    calls,
    st.integers(0, 60),
    configured,
    short=100,
    full=300,
)


def check_as_of_a_time_is_the_graph_of_what_was_observed_by_then(chosen, cutoff, authority) -> None:
    g = build(chosen, authority)
    when = (DAY0 + timedelta(days=cutoff)).isoformat()
    want = build_resolved(observed_by(resolved(chosen, authority), cutoff), authority)
    assert g.as_of(time=when).to_bytes() == want.to_bytes()
    half = g.seq // 2
    both = build_resolved(observed_by(resolved(up_to(chosen, half), authority), cutoff), authority)
    assert g.as_of(half, time=when).to_bytes() == both.to_bytes()


(
    test_as_of_a_time_is_the_graph_of_what_was_observed_by_then,
    test_as_of_a_time_is_the_graph_of_what_was_observed_by_then_at_length,
) = short_and_long(
    check_as_of_a_time_is_the_graph_of_what_was_observed_by_then,
    calls,
    st.integers(0, 30),
    configured,
    short=100,
    full=300,
)


def test_a_replayed_graph_reads_but_refuses_writes_and_leaves_the_original_alone() -> None:
    g = ProvenanceGraph()
    e = g.observe("budget is 30k")
    g.apply("accept", "budget", "30k", evidence=e)
    g.registry.resolve("user.personal_best_5k")
    past = g.as_of(1)
    assert past.seq == 1 and past.head_value("budget") is None and past.stats()["evidence"] == 1
    for write in (
        lambda: past.observe("x"),
        lambda: past.apply("accept", "budget", "1"),
        lambda: past.apply_batch(None),
    ):
        with pytest.raises(PermissionError, match="read-only replay"):
            write()
    assert past.registry.keys == ["user.personal_best_5k"]
    past.registry.resolve("other.key")  # its registry is a copy
    assert g.registry.keys == ["user.personal_best_5k"]
    assert g.as_of(2).head_value("budget") == "30k" and g.seq == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seq": -1}, "seq must be a non-negative integer"),
        ({"seq": True}, "seq must be a non-negative integer"),
        ({"seq": 1.5}, "seq must be a non-negative integer"),
        ({"time": "yesterday"}, "time must be an ISO 8601"),
        ({"time": 3}, "time must be an ISO 8601"),
    ],
)
def test_as_of_refuses_bad_bounds(kwargs, match) -> None:
    g = ProvenanceGraph()
    g.observe("x", time="2026-01-01")
    with pytest.raises(ValueError, match=match):
        g.as_of(**kwargs)


def test_an_unparseable_stored_time_is_named() -> None:
    g = ProvenanceGraph()
    g.observe("x", time="last tuesday")
    with pytest.raises(ValueError, match="evidence e0: time must be an ISO 8601"):
        g.as_of(time="2026-01-01")
    assert g.as_of(1).stats()["evidence"] == 1  # a seq bound reads no time
