"""Valid time: a fact that arrives late (valid before the current value) does not roll the present back."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from pmem.graph import WRITE_BATCH_SCHEMA, ProvenanceGraph

DAY0 = datetime(2026, 1, 1)


def chain(g: ProvenanceGraph, key: str) -> list[str]:
    """Values along the supersedes edges from the head down: the key's order in valid time."""
    out, vid = [], g.storage.keys.k_head[g.storage.keys.kid[key]]
    while vid != -1:
        out.append(g.storage.versions.v_value[vid])
        vid = g.storage.versions.v_prev[vid]
    return out


def test_ten_thousand_updates_in_shuffled_order_end_as_in_valid_time_order() -> None:
    rng = random.Random(4)
    updates = [(f"k{k}", f"value {k}.{n}", n * 7 + rng.randrange(7)) for k in range(200) for n in range(50)]
    ordered = sorted(updates, key=lambda u: u[2])
    shuffled = updates[:]
    rng.shuffle(shuffled)
    graphs = []
    for stream in (ordered, shuffled):
        g = ProvenanceGraph()
        for key, value, days in stream:
            e = g.observe(f"{key} is {value}", valid_time=(DAY0 + timedelta(days=days)).isoformat())
            g.apply("accept", key, value, evidence=e)
        graphs.append(g)
    in_order, late = graphs
    assert in_order.frontier_items() == late.frontier_items()
    assert len(late.frontier_items()) == 200
    for key in in_order:
        assert chain(late, key) == chain(in_order, key)  # the history is in valid-time order too
        statuses = sorted(v.status for v in late.versions(key))
        assert (
            statuses == sorted(v.status for v in in_order.versions(key)) == ["active"] + ["superseded"] * 49
        )


def test_a_late_fact_enters_the_history_at_its_place_and_a_rollback_reaches_it() -> None:
    g = ProvenanceGraph()
    g.apply("accept", "ceo", "Ada", g.observe("Ada since 2020", valid_time="2020-01-01"))
    g.apply("accept", "ceo", "Cy", g.observe("Cy since 2024", valid_time="2024-01-01"))
    result = g.apply(
        "accept", "ceo", "Bo", g.observe("Bo was CEO from 2022 (late news)", valid_time="2022-01-01")
    )
    assert result.applied and result.op == "accept"
    assert g.head_value("ceo") == "Cy"
    ada, cy, bo = g.versions("ceo")
    assert (bo.status, bo.valid_from, bo.valid_to, bo.supersedes) == ("superseded", 6, 6, ada.id)
    assert cy.supersedes == bo.id and ada.valid_to == cy.valid_from  # Ada was closed when Cy arrived
    g.apply("reject", "ceo", evidence=g.observe("Cy never was CEO"))
    assert g.head_value("ceo") == "Bo"  # the most recent value in valid time before Cy's
    assert [v.value for v in g.cell("ceo").history] == ["Cy", "Ada"]


def test_undated_evidence_on_either_side_displaces_as_before() -> None:
    g = ProvenanceGraph()
    g.apply("accept", "k", "a", g.observe("a", valid_time="2026-05-01"))
    g.apply("accept", "k", "b", g.observe("b, undated"))
    g.apply("accept", "k", "c", g.observe("c", valid_time="2020-01-01"))  # the head (b) is undated
    assert g.head_value("k") == "c"
    g.apply("accept", "k", "c", g.observe("c again", valid_time="2019-01-01"))  # same value: support
    assert g.cell("k").support == 2


def test_valid_times_compare_as_instants_and_survive_save_and_load(tmp_path) -> None:
    g = ProvenanceGraph()
    g.apply("accept", "k", "a", g.observe("a", valid_time=datetime(2026, 1, 1, 12, tzinfo=UTC)))
    g.apply("accept", "k", "b", g.observe("b", valid_time="2026-01-01T13:00:00+02:00"))  # 11:00 UTC: earlier
    assert g.head_value("k") == "a"
    assert g.evidence("e0").time is None
    g.save(tmp_path / "s.arrow")
    h = ProvenanceGraph.load(tmp_path / "s.arrow")
    assert h.to_bytes() == g.to_bytes()
    for graph in (g, h):
        graph.apply("accept", "k", "c", graph.observe("c", valid_time="2025-12-31"))
    assert h.to_bytes() == g.to_bytes() and h.head_value("k") == "a"


def test_a_batch_applies_accepts_as_the_loop_does_once_valid_times_exist() -> None:
    rows: dict[str, list[object]] = {name: [] for name in WRITE_BATCH_SCHEMA.names}
    for op, key, value, ev in [("accept", "k", "x", 1), ("accept", "k", "y", None)]:
        for name, cell in zip(rows, (op, None, None, None, key, value, ev), strict=True):
            rows[name].append(cell)
    graphs = []
    for bulk in (False, True):
        g = ProvenanceGraph()
        g.apply("accept", "k", "now", g.observe("now", valid_time="2026-06-01"))
        g.observe("older news", valid_time="2026-01-01")
        if bulk:
            g.apply_batch(pa.table(rows, schema=WRITE_BATCH_SCHEMA))
        else:
            g.apply("accept", "k", "x", evidence="e1")
            g.apply("accept", "k", "y")
        graphs.append(g)
    assert graphs[0].to_bytes() == graphs[1].to_bytes()
    assert graphs[0].head_value("k") == "y"  # undated: displaces; the dated older "x" did not


@pytest.mark.parametrize("bad", ["yesterday", "", 3, "2026-13-01"])
def test_a_bad_valid_time_is_refused_and_nothing_is_written(bad) -> None:
    g = ProvenanceGraph()
    with pytest.raises(ValueError, match="valid_time must be an ISO 8601"):
        g.observe("x", valid_time=bad)
    assert g.seq == 0 and g.stats()["evidence"] == 0
