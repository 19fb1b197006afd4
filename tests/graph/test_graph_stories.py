"""The paper's two motivating stories, end to end on the core."""

from __future__ import annotations

from pmem.graph import ProvenanceGraph


def test_budget_raised_then_retracted_as_error():
    g = ProvenanceGraph()
    g.apply("accept", "project.budget", "$30k", evidence=g.observe("The project budget is $30k."))
    g.apply("accept", "project.budget", "$50k", evidence=g.observe("Good news: budget raised to $50k."))
    assert g.cell("project.budget").value == "$50k"
    r = g.apply("reject", "project.budget", evidence=g.observe("Sorry, the $50k figure was an error."))
    assert r.applied and r.op == "reject"
    cell = g.cell("project.budget")
    assert (cell.value, cell.status) == ("$30k", "active")
    assert [(v.value, v.status) for v in g.versions("project.budget")] == [
        ("$30k", "active"),
        ("$50k", "contradicted"),
    ]
    text = g.render(disclose=("history",))
    assert text.startswith("project.budget = $30k") and "$50k (contradicted" in text


def test_two_rooms_without_precedence_stay_contested_until_resolved():
    g = ProvenanceGraph()
    g.apply("accept", "meeting.room", "Room 4B", evidence=g.observe("Alice: the meeting is in Room 4B."))
    g.apply("contest", "meeting.room", "Room 7A", evidence=g.observe("Bob: the meeting is in Room 7A."))
    cell = g.cell("meeting.room")
    assert (cell.value, cell.status, cell.alternatives) == ("Room 4B", "contested", ["Room 7A"])
    shown = g.render(disclose=("alternatives",))
    assert "Room 4B" in shown and "Room 7A" in shown and "[contested]" in shown
    g.apply("resolve", "meeting.room", "Room 7A", evidence=g.observe("Facilities: confirmed, Room 7A."))
    cell = g.cell("meeting.room")
    assert (cell.value, cell.status, cell.alternatives) == ("Room 7A", "active", [])
    assert [(v.value, v.status) for v in g.versions("meeting.room")] == [
        ("Room 4B", "contradicted"),
        ("Room 7A", "active"),
    ]
