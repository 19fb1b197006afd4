"""The heuristic agent driving a real provenance graph through ALFWorld-Revision-style streams.

extract -> annotate (with the head rendered by the graph) -> apply -> render -> answer, exactly as a
memory would prompt an LLM; the sentences are the benchmark's templates.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from pmem.models import make_chat_model
from pmem.models.sections import format_sections

graph_mod = pytest.importorskip("pmem.graph")
AGENT = make_chat_model("heuristic")


def _call(purpose: str, **sections: str) -> str:
    msg = [{"role": "user", "content": format_sections(sections)}]
    return asyncio.run(AGENT.complete(msg, purpose=purpose)).text


def ingest(g, sentence: str) -> None:
    eid = g.observe(sentence, source="user")
    for fact in json.loads(_call("extract", TEXT=sentence))["facts"]:
        line = g.render(keys=[fact["key"]], disclose=("alternatives",))
        head = line.split(" = ", 1)[1] if line else "none"
        fact_line = f"{fact['key']}: {fact['value']} ({fact['status']})" + (
            "\nconfirmed: true" if fact.get("confirmed") else ""
        )
        op = json.loads(_call("annotate", FACT=fact_line, HEAD=head, TEXT=sentence))
        g.apply(op["op"], op["key"], op["value"], evidence=eid)


def answer(g, question: str) -> str:
    return _call("answer", CONTEXT=g.render(disclose=("alternatives", "history")), QUESTION=question)


@pytest.mark.parametrize("length", [1, 2, 4, 8])
def test_chain(length: int) -> None:
    g = graph_mod.ProvenanceGraph()
    ingest(g, "Earlier observation: apple 1 was in fridge 1.")
    ingest(g, "Earlier observation: mug 2 was in shelf 1.")
    loc = "fridge 1"
    for i in range(length):
        new = f"countertop {i + 2}"
        ingest(g, f"Update: apple 1 has been moved from {loc} to {new}.")
        loc = new
    assert answer(g, "Where is the apple 1 now?") == loc
    assert answer(g, "Where is the mug 2 now?") == "shelf 1"


def test_retraction_rolls_back() -> None:
    g = graph_mod.ProvenanceGraph()
    ingest(g, "Earlier observation: apple 1 was in fridge 1.")
    ingest(g, "Update: apple 1 has been moved to drawer 3.")
    assert answer(g, "Where is the apple 1 now?") == "drawer 3"
    ingest(g, "Correction: the report that apple 1 was moved to drawer 3 was an error.")
    assert answer(g, "Where is the apple 1 now?") == "fridge 1"


@pytest.mark.parametrize("settle", ["drawer 2", "shelf 1"])
def test_conflict_contest_then_resolve(settle: str) -> None:
    g = graph_mod.ProvenanceGraph()
    ingest(g, "Report: apple 1 is in drawer 2.")
    ingest(g, "Report: apple 1 is in shelf 1.")
    assert g.cell("apple_1.location").status == "contested"
    before = answer(g, "Where is the apple 1 now?")
    assert "drawer 2" in before and "shelf 1" in before
    ingest(g, f"Confirmed: apple 1 is in {settle}.")
    assert g.cell("apple_1.location").status == "active"
    assert answer(g, "Where is the apple 1 now?") == settle
