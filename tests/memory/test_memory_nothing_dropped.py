"""`pmem.Memory` says what yields nothing (issue 41, item 7): a text the agent finds no fact in is a noop
with its reason, a search that nothing matches comes back empty and every hit carries its score, and a
script that never closes a memory on an OpenAI-compatible model ends without asyncio's or aiohttp's
complaints (item 8)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pmem.graph import Cell
from pmem.memory import SEARCH_MIN_SCORE, Memory, ScoredCell

#: Ordinary sentences the heuristic agent has no template for (the issue's examples).
ORDINARY = ("Bob no longer works at Google.", "On 2024-03-01 Alice moved to Berlin.")


@pytest.mark.parametrize("text", ORDINARY)
def test_a_text_with_no_fact_is_a_noop_that_says_why(text: str) -> None:
    m = Memory()
    r = m.add(text)
    assert r.facts == []
    (noop,) = r.operations
    assert (noop.op, noop.key, noop.value, noop.applied) == ("noop", None, None, False)
    reason = noop.reason or ""
    assert reason.startswith("extract: no fact found in the text: the default agent (heuristic, no LLM)")
    assert "pmem.Memory({" in reason  # how to bring a real model, in the memory's own terms
    assert m.graph.evidence(r.evidence).text == text  # the text is kept as evidence all the same


def test_a_text_with_facts_has_no_extra_noop() -> None:
    r = Memory().add("The city of Alice is Paris.")
    assert [(o.op, o.applied) for o in r.operations] == [("accept", True)]


def test_search_results_carry_their_score_and_nothing_unrelated_comes_back() -> None:
    m = Memory()
    m.add("The city of Alice is Paris.")
    m.add("Earlier observation: mug 1 was in shelf 2.")
    m.add("The budget of the project is $30k.")
    (hit,) = m.search("Where does Alice live?", k=1)
    assert isinstance(hit, ScoredCell) and isinstance(hit, Cell)  # still the contract's Cell
    assert (hit.key, hit.value) == ("alice.city", "Paris") and hit.score >= SEARCH_MIN_SCORE
    for question in ("How many moons does Jupiter have?", "What did I eat for breakfast?", "xyzzy"):
        assert m.search(question) == [], question
    everything = m.search("How many moons does Jupiter have?", min_score=None)
    assert len(everything) == 3  # no floor: the k nearest, as before
    scores = [c.score for c in everything]  # type: ignore[attr-defined]
    assert scores == sorted(scores, reverse=True) and all(s < SEARCH_MIN_SCORE for s in scores)
    assert len(m.search("Where is the mug 1?", k=12)) <= 3  # never more than the memory holds


def test_a_real_protocol_model_that_finds_nothing_says_where_its_replies_are() -> None:
    from pmem.models.server import ServerThread

    with (
        ServerThread() as server,
        Memory({"backend": "openai", "url": server.url, "model": "heuristic", "max_retries": 1}) as m,
    ):
        (noop,) = m.add(ORDINARY[0]).operations
    assert noop.op == "noop" and not noop.applied
    assert noop.reason == (
        "extract: no fact found in the text: the agent's replies held no fact (see the request log in "
        "m.requests())"
    )


SCRIPT = textwrap.dedent(
    """
    import sys

    import pmem

    m = pmem.Memory({"backend": "openai", "url": sys.argv[1], "model": "heuristic"})
    print(m.add("The city of Alice is Paris.").operations[0].op)
    print([c.value for c in m.search("Where does Alice live?")])
    # no m.close(): the script just ends
    """
)


def test_a_script_that_never_closes_its_memory_ends_quietly() -> None:
    """The model client's HTTP session lives on the memory's private event loop: a script that does
    not call close() used to end with "Unclosed client session" and "Task was destroyed but it is
    pending!"; the memory now closes both when it is collected or the interpreter exits."""
    from pmem.models.server import ServerThread

    with ServerThread() as server:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, server.url], capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["accept", "['Paris']"]
    for complaint in ("Unclosed client session", "Task was destroyed", "Unclosed connector", "Traceback"):
        assert complaint not in done.stderr, done.stderr[-3000:]


def test_close_is_idempotent_and_a_closed_memory_is_not_closed_again_at_exit() -> None:
    m = Memory()
    m.add("The city of Alice is Paris.")
    m.close()
    m.close()
    assert m._loop.is_closed()
