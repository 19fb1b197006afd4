"""P-Mem's write and read paths on small subsets of the acceptance probes (the full n = 140 runs are
`pmem arms check` and the slow tests)."""

from __future__ import annotations

import asyncio

import pytest
from arms_helpers import models, rate, run

from pmem.arms import make_arm
from pmem.arms._harness import run_history, store_values
from pmem.bench import Event, Question, iter_histories
from pmem.graph import ProvenanceGraph

CASES = 20


def _key(h):
    from pmem.bench.alfworld_templates import QUERY_PATTERN, location_key

    return location_key(QUERY_PATTERN.match(h.questions[0].text).group("obj"))


@pytest.mark.parametrize("L", [1, 2, 4, 8])
def test_chains_commit_is_exact_and_reads_one_cell(L):
    hs = list(iter_histories("alfworld-revision", "chains", L=L, cases=CASES))
    for arm in ("pmem", "pmem-oracle"):
        rows = run(arm, hs)
        assert rate(rows) == 1.0
        chars = sum(r["read_chars"] for r in rows) / len(rows)
        assert 20 <= chars <= 40, chars  # "key = value": about 30 characters
    raw = run("raw", hs)
    assert sum(r["read_chars"] for r in raw) / len(raw) > 400  # ten raw events


@pytest.mark.parametrize("d", [0, 32])
def test_retention_decides_reversibility(d):
    hs = list(iter_histories("alfworld-revision", "retraction", d=d, cases=CASES))
    for arm_name, recovered, kept in (("pmem", 1.0, True), ("pmem-no-retention", 0.0, False)):
        present = {}

        def after(arm, h, present=present):
            present[h.id] = h.params["v1"] in store_values(arm, _key(h))[1]

        rows = run(arm_name, hs, after=after)
        assert rate(rows, "before_retraction") == 1.0  # the error is committed
        assert rate(rows, "after_retraction") == recovered
        assert all(present.values()) if kept else not any(present.values())


def test_conflict_is_contested_then_resolved():
    hs = list(iter_histories("alfworld-revision", "conflict", cases=CASES))

    def probe(arm, q):
        if q.qtype != "before_settle":
            return {}
        current, _ = store_values(arm, _key_of(q))
        return {"both": set(q.gold) <= current}

    rows = run("pmem", hs, probe=probe)
    assert rate(rows, "before_settle", "both") == 1.0
    assert rate(rows, "before_settle") == 1.0  # the answer names both candidates
    assert rate(rows, "after_settle") >= 0.97
    lww = run("pmem-no-retention", hs, probe=probe)
    assert rate(lww, "before_settle", "both") == 0.0


def _key_of(q):
    from pmem.bench.alfworld_templates import QUERY_PATTERN, location_key

    return location_key(QUERY_PATTERN.match(q.text).group("obj"))


def test_contested_cell_is_flagged_in_the_read():
    h = next(iter_histories("alfworld-revision", "conflict", cases=1))
    arm = make_arm("pmem", models())
    q = next(q for q in h.questions if q.qtype == "before_settle")
    asyncio.run(arm.ingest(list(h.events[: q.after_event + 1])))
    read = asyncio.run(arm.read(q))
    assert "[contested]" in read.text and "alternatives:" in read.text
    ops = [w.op for w in arm.write_log()]
    assert "contest" in ops and "resolve" not in ops
    asyncio.run(arm.ingest(list(h.events[q.after_event + 1 :])))
    assert [w.op for w in arm.write_log()][-1] == "resolve"


def test_write_log_stats_and_saved_graph(tmp_path):
    h = next(iter_histories("alfworld-revision", "retraction", d=0, cases=1))
    arm = make_arm("pmem", models())
    asyncio.run(run_history(arm, h))
    log = arm.write_log()
    assert [w.seq for w in log] == list(range(len(log)))
    ops = arm.write_stats().ops
    assert ops.get("accept", 0) >= 2 and ops.get("revoke") == 1
    stats = arm.write_stats()
    # extraction and annotation once per event; identity only for shortlisted keys
    assert stats.model_calls >= 2 * len(h.events)
    assert stats.facts == len(h.events)
    g = arm.graph()
    g.save(tmp_path / "g.arrow")
    back = ProvenanceGraph.load(tmp_path / "g.arrow")
    assert back.render(disclose=("history",)) == g.render(disclose=("history",))
    # soft identity decisions are recorded (other objects' keys are shortlisted and kept apart)
    assert all(d.verdict in ("new", "different", "same") for d in g.registry.decisions)


def test_identity_off_routes_by_exact_key_only():
    events = [
        Event(0, "1. The chairperson of Fatah is Mahmoud Abbas.", source="fact"),
        Event(1, "2. The chairperson of Fatah is Yasser Arafat.", source="fact"),
    ]
    for name, calls in (("pmem", "identity"), ("pmem-no-identity", None)):
        arm = make_arm(name, models())
        asyncio.run(arm.ingest(events))
        assert arm.graph().cell("fatah.chairperson").value == "Yasser Arafat"
        if calls is None:
            assert "identity" not in arm.extra()["calls_by_purpose"]


def test_iterative_readout_bounds_lookups():
    h = next(iter_histories("factconsolidation", "mh_6k"))
    arm = make_arm("pmem-iterative", models(), {"top_k": 1})
    rows = asyncio.run(run_history(arm, h))
    calls = arm.extra()["calls_by_purpose"]
    assert 0 < calls["lookup"] <= 3 * len(h.questions)
    # one cell, then at most three lookups of six cells each
    assert max(len(r["prediction"]) for r in rows) > 0
    q = h.questions[0]
    read = asyncio.run(arm.read(q))
    assert 1 <= len(read.items) <= 1 + 3 * 6
    assert len(set(read.items)) == len(read.items)


def _dialogue():
    turns = [
        ("s1", "2023/05/01 (Mon) 08:00", "user", "My personal best for the 5K is 27:12."),
        ("s1", "2023/05/01 (Mon) 08:00", "assistant", "Nice work on the run."),
        ("s2", "2023/06/10 (Sat) 10:30", "user", "Can you suggest a stretching routine?"),
        ("s3", "2023/10/20 (Fri) 18:45", "user", "My personal best for the 5K is 25:50 now."),
        ("s3", "2023/10/20 (Fri) 18:45", "assistant", "Great improvement."),
    ]
    return [
        Event(i, text, time=t, source=role, session_id=sid, role=role)
        for i, (sid, t, role, text) in enumerate(turns)
    ]


def test_turn_read_prunes_the_earlier_of_two_disagreeing_turns():
    events = _dialogue()
    q = Question("q", "What is my personal best for the 5K now?", ("25:50",), "knowledge-update", 4)
    arm = make_arm("pmem-turn-prune", models())
    plain = make_arm("pmem-turn-prune", models(), {"prune_threshold": 1.01})  # no pair qualifies
    for a in (arm, plain):
        asyncio.run(a.ingest(events))
    pruned_read, plain_read = asyncio.run(arm.read(q)), asyncio.run(plain.read(q))
    assert "27:12" in plain_read.text
    assert "25:50" in pruned_read.text and "27:12" not in pruned_read.text
    assert len(pruned_read.items) == len(plain_read.items) - 1
    assert arm.extra()["calls_by_purpose"]["prune"] >= 1
    assert asyncio.run(arm.answer(q)).prediction.find("25:50") >= 0
    gated = make_arm("pmem-turn-prune", models(), {"gate": "model"})
    asyncio.run(gated.ingest(events))
    kept = asyncio.run(gated.read(Question("q2", "Which stretches did you suggest?", ("x",), "t", 4)))
    assert gated.extra()["prune"]["gated_keep"] == 1 and "prune" not in gated.extra()["calls_by_purpose"]
    assert kept.chars > 0


def test_classifier_gate(tmp_path):
    import json

    events = _dialogue()
    arm = make_arm("pmem-turn-prune", models(), {"gate": "classifier"})
    asyncio.run(arm.ingest(events))
    now = asyncio.run(arm.read(Question("q", "What is my personal best for the 5K now?", ("25:50",), "t", 4)))
    asyncio.run(arm.read(Question("q2", "How many stretches did you suggest in total?", ("x",), "t", 4)))
    assert "27:12" not in now.text
    assert arm.extra()["prune"]["gated_keep"] == 1 and "gate" not in arm.extra()["calls_by_purpose"]
    path = tmp_path / "gate.json"
    path.write_text(json.dumps({"What is my PB?": "keep", "List my runs.": "prune"}))
    flipped = make_arm("pmem-turn-prune", models(), {"gate": "classifier", "gate_examples": str(path)})
    assert flipped._classifier.source == str(path)
    path.write_text(json.dumps({"a": "prune", "b": "maybe"}))
    with pytest.raises(ValueError, match="labels must be"):
        make_arm("pmem-turn-prune", models(), {"gate": "classifier", "gate_examples": str(path)})
