"""`pmem.Memory`: text in, current values out, with P-Mem's whole write path (issue 30, first part)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import pmem
from pmem.memory import AddResult, AsyncMemory, Memory


def test_add_search_get_history_and_the_effective_operations() -> None:
    m = Memory()
    first = m.add("Earlier observation: mug 1 was in shelf 2.", source="camera", time="2026-01-05T09:00")
    assert isinstance(first, AddResult) and first.evidence == "e0"
    assert first.facts == [("mug_1.location", "shelf 2")]
    assert [(o.op, o.key, o.value, o.applied) for o in first.operations] == [
        ("accept", "mug_1.location", "shelf 2", True)
    ]
    m.add("Update: mug 1 has been moved from shelf 2 to desk 1.")  # a correction that supersedes
    assert m.get("mug_1.location").value == "desk 1"
    assert [(v.value, v.status) for v in m.history("mug_1.location")] == [
        ("shelf 2", "superseded"),
        ("desk 1", "active"),
    ]
    retraction = m.add("Correction: the report that mug 1 was moved to desk 1 was an error.")
    assert [o.op for o in retraction.operations if o.applied] and m.get("mug_1.location").value == "shelf 2"
    m.add("The city of Alice is Paris.")
    hits = m.search("Where does Alice live?", k=1)
    assert [(c.key, c.value) for c in hits] == [("alice.city", "Paris")]
    assert m.get("nobody.home") is None
    assert m.graph.evidence("e0").source == "camera"
    assert "mug_1.location = shelf 2" in m.render()


def test_messages_are_one_unit_and_a_bad_message_is_refused() -> None:
    m = Memory()
    r = m.add(
        [{"role": "user", "content": "The city of Bob is Oslo."}, {"role": "assistant", "content": "Noted."}]
    )
    assert r.evidence == "e0" and m.graph.stats()["evidence"] == 1  # one unit, one evidence
    assert m.graph.evidence("e0").text == "user: The city of Bob is Oslo.\nassistant: Noted."
    with pytest.raises(ValueError, match="message 0 must be a mapping with 'role' and 'content'"):
        m.add([{"role": "user"}])


def test_undo_erase_and_as_of() -> None:
    m = Memory()
    m.add("The city of Alice is Paris.")
    moved = m.add("The city of Alice is Rome.")
    assert m.get("alice.city").value == "Rome"
    seq = list(m.graph.operations("alice.city"))[-1].seq
    assert m.as_of(seq - 1).cell("alice.city").value == "Paris"
    undone = m.undo(seq)
    assert undone.applied and m.get("alice.city").value == "Paris"
    assert [c.value for c in m.search("Alice city", k=1)] == ["Paris"]  # the read follows the undo
    receipt = m.erase(moved.evidence)
    assert receipt.evidence == moved.evidence and b"Rome" not in m.graph.to_bytes()


def test_save_and_load_go_on_where_the_memory_was(tmp_path: Path) -> None:
    path = tmp_path / "memory.arrow"
    m = Memory(path=path)
    m.add("The city of Alice is Paris.")
    m.add("Earlier observation: mug 1 was in shelf 2.")
    assert m.save() == path
    again = Memory.load(path)
    assert again.get("alice.city").value == "Paris"
    assert [c.key for c in again.search("Where does Alice live?", k=1)] == ["alice.city"]  # cells re-read
    r = again.add("Update: mug 1 has been moved from shelf 2 to desk 1.")
    assert r.evidence == "e2" and again.get("mug_1.location").value == "desk 1"
    assert again.graph.cell("mug_1.location").history[0].value == "shelf 2"
    with pytest.raises(FileNotFoundError, match="no such state file"):
        Memory.load(tmp_path / "nope.arrow")


def test_async_memory_and_the_top_level_names() -> None:
    async def story() -> str | None:
        m = AsyncMemory()
        await m.add("The city of Alice is Paris.")
        cell = await m.get("alice.city")
        return None if cell is None else cell.value

    assert asyncio.run(story()) == "Paris"
    assert pmem.Memory is Memory and pmem.AsyncMemory is AsyncMemory and "Memory" in pmem.__all__


def test_memory_builds_the_same_graph_and_answers_as_the_pmem_arm_case_by_case() -> None:
    """One write path: feeding a history's events to Memory gives the pmem arm's graph, byte for byte,
    and for every question the arm's read (what its reader is shown) and answer."""
    from pmem.arms._base import ModelSet
    from pmem.arms._pmem import PMemArm
    from pmem.bench import iter_histories
    from pmem.models import make_chat_model, make_embedder

    histories = [
        *list(iter_histories("alfworld-revision", "chains", L=8, cases=6)),
        *list(iter_histories("alfworld-revision", "retraction", d=0, cases=4)),
    ]
    answers = 0
    for h in histories:
        models = ModelSet(
            agent=make_chat_model({"backend": "heuristic"}), embedder=make_embedder({"backend": "hashing"})
        )
        arm = PMemArm("pmem", models, {"stream": "events"})
        asyncio.run(arm.ingest(h.events))
        m = Memory()
        for e in h.events:
            m.add(e.text, source=e.source, time=e.time, valid_time=e.valid_time)
        assert m.graph.to_bytes() == arm.graph().to_bytes(), h.id
        for q in h.questions:
            read = asyncio.run(arm.read(q))  # an event stream reads one cell, with its open claims
            assert m.render(q.text, k=1, disclose=("alternatives",)) == read.text, (h.id, q.id)
            (cell,) = m.search(q.text, k=1)
            assert cell.value == asyncio.run(arm.answer(q)).prediction, (h.id, q.id)
            answers += 1
    assert answers == sum(len(h.questions) for h in histories) >= 10


def test_a_real_protocol_model_is_logged_and_a_bad_reply_is_a_noop_with_its_reason() -> None:
    """An OpenAI-compatible server on 127.0.0.1 (the stand-in, which serves the heuristic agent over
    HTTP): every request is one row with the server's token counts; a reply whose content does not
    parse is a noop with its reason, never an exception out of ``add``; no reply at all is an error."""
    from pmem.models import ModelCallError
    from pmem.models.server import ServerThread

    with (
        ServerThread() as server,
        Memory({"backend": "openai", "url": server.url, "model": "heuristic", "max_retries": 1}) as m,
    ):
        ok = m.add("The city of Alice is Paris.")
        assert [(o.op, o.key, o.value) for o in ok.operations] == [("accept", "alice.city", "Paris")]
        server.faults.script.append("malformed")  # the next reply's content is cut-off JSON
        bad = m.add("The city of Bob is Oslo.")
        (noop,) = bad.operations
        assert (noop.op, noop.applied) == ("noop", False) and "not a JSON object" in (noop.reason or "")
        assert bad.evidence == "e1" and m.get("bob.city") is None and m.get("alice.city").value == "Paris"
        server.faults.script.extend(
            ["garbage"] * 2
        )  # both attempts of the next call: a body that is no reply
        with pytest.raises(ModelCallError, match="extract call failed"):
            m.add("The city of Carol is Rome.")
        assert m.graph.stats()["evidence"] == 2 and m.add("The city of Dan is Oslo.").evidence == "e2"
        rows = [r for r in m.requests() if r.purpose != "embed"]  # the embedder runs in process
        assert len(rows) == server.stats["requests"]
        assert [(r.purpose, bool(r.error)) for r in rows] == [
            ("extract", False),
            ("annotate", False),
            ("extract", False),  # a reply came: its content did not parse
            ("extract", True),
            ("extract", True),
            ("extract", False),
            ("annotate", False),
        ]
        assert rows[0].prompt_tokens > 0 and rows[2].parse_error


def test_the_readme_budget_story_as_text_rolls_back_and_reports_the_facts_as_extracted(tmp_path) -> None:
    m = Memory()
    m.add("The budget of the project is $30k.")
    m.add("The budget of the project is $50k.")
    r = m.add("The report that the budget of the project is $50k was an error.")
    assert r.facts == [("the_project.budget", "$50k")]  # as extracted: the value withdrawn, not the op's
    assert [(o.op, o.key, o.applied) for o in r.operations] == [("revoke", "the_project.budget", True)]
    assert m.get("the_project.budget").value == "$30k"
    m.save(tmp_path / "m.arrow")
    assert Memory.load(tmp_path / "m.arrow").get("the_project.budget").value == "$30k"


def test_a_model_that_cannot_be_reached_is_an_error_and_writes_nothing() -> None:
    """A reply that does not parse is a noop; no reply at all is not a write that found no fact."""
    import socket

    from pmem.models import ModelCallError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = {"backend": "openai", "url": f"http://127.0.0.1:{port}/v1", "model": "m", "max_retries": 0}
    with Memory(model) as m:
        with pytest.raises(ModelCallError, match="extract call failed"):
            m.add("The city of Alice is Paris.")
        assert m.graph.stats()["evidence"] == 0  # the extraction comes first: nothing was admitted
        (row,) = m.requests()
        assert row.purpose == "extract" and row.error


def test_a_long_lived_memory_keeps_nothing_per_call_once_the_log_is_drained() -> None:
    m = Memory()
    m.add("The city of Alice is Paris.")
    first = m.requests(drain=True)
    assert [r.purpose for r in first if r.purpose != "embed"] == ["extract", "annotate"]
    assert m.requests() == []
    m.add("The city of Bob is Oslo.")
    assert [r.purpose for r in m.requests() if r.purpose != "embed"] == ["extract", "annotate"]
    assert m._async._writer.write_log() == []  # each add hands its records over: none held
