"""Recall (issue 55, read path): ``pmem.Memory.recall`` hands the model the facts with their status, the
turn each cites and that turn's date, and the turns themselves dated with their speaker, ranked by BM25
and the embedder fused by reciprocal rank, within a token budget. The heuristic agent and the hashing
embedder: no model, no network."""

from __future__ import annotations

import pytest

import pmem
from pmem.memory import RECALL_TOKENS, Recall
from pmem.memory._recall import day, fuse
from pmem.memory.prompts import build_messages
from pmem.models import estimate_tokens

MAY_8 = "2023-05-08T13:56:00"
JUNE_9 = "2023-06-09T10:00:00"


def test_dates_are_read_as_people_write_them_and_the_reader_answers_in_that_form() -> None:
    # "2023-05-08" scores nothing against LoCoMo's "8 May 2023": a reader answers in the form it read
    assert day(MAY_8) == "8 May 2023" and day("2024-12-31") == "31 December 2024"
    assert day("last spring") == "last spring"  # a time that is no date is shown as it was given
    answer = build_messages("answer", CONTEXT="c", QUESTION="q")[0]["content"]
    assert "yesterday in an item of 8 May 2023: 7 May 2023; last week: the week before 8 May 2023" in answer


def test_a_fact_line_names_its_status_its_cited_turn_and_that_turns_date() -> None:
    m = pmem.Memory()
    m.add("The city of Alice is Paris.", source="Alice", time=MAY_8)
    m.add("The city of Alice is Rome.", source="Alice", time=JUNE_9)
    found = m.recall("Which city does Alice live in?")
    assert isinstance(found, Recall) and pmem.Recall is Recall
    facts = [i for i in found.items if i.kind == "fact"]
    assert [i.line for i in facts] == ["alice.city = Rome (current; from e1, 9 June 2023; earlier: Paris)"]
    assert facts[0].cites == ("e1",)  # the turn that stated the current value, not the first one
    turns = [i.line for i in found.items if i.kind == "evidence"]
    assert "[8 May 2023] Alice: The city of Alice is Paris." in turns
    assert "[9 June 2023] Alice: The city of Alice is Rome." in turns
    # the context: facts first, then the turns in the order they were observed
    assert found.context.splitlines()[0] == facts[0].line
    assert found.context.splitlines()[1:] == sorted(turns, key=lambda t: t[1:11])


def test_a_turn_no_fact_holds_is_recalled_by_its_words() -> None:
    """What the extraction left out is one hop away: the turn itself, found lexically."""
    m = pmem.Memory()
    m.add("I went to a LGBTQ support group yesterday and it was powerful.", source="Caroline", time=MAY_8)
    m.add("The city of Alice is Paris.", source="Alice", time=MAY_8)
    assert m.graph.frontier().keys() == {"alice.city"}  # the heuristic agent found no fact in the first
    found = m.recall("When did Caroline go to the LGBTQ support group?", budget=40)
    assert found.items[0].line == (
        "[8 May 2023] Caroline: I went to a LGBTQ support group yesterday and it was powerful."
    )


def test_recall_keeps_within_its_budget_and_takes_the_best_first() -> None:
    m = pmem.Memory()
    for i in range(30):
        m.add(f"The city of Person{i} is Town{i}.", source="user", time=MAY_8)
    whole = m.recall("Which city does Person7 live in?", budget=10_000)
    for budget in (30, 80, 200):
        part = m.recall("Which city does Person7 live in?", budget=budget)
        assert part.tokens <= budget and part.budget == budget
        assert sum(estimate_tokens(i.line) for i in part.items) == part.tokens
        assert part.items[0] == whole.items[0]  # the best item comes first at every budget
    assert "person7.city = Town7" in m.recall("Which city does Person7 live in?", budget=30).context
    assert m.recall("Which city does Person7 live in?").budget == RECALL_TOKENS


@pytest.mark.parametrize("budget", [0, -5, 2.5, True, "100"])
def test_a_budget_that_is_no_positive_number_of_tokens_is_refused(budget: object) -> None:
    m = pmem.Memory()
    m.add("The city of Alice is Paris.")
    with pytest.raises(ValueError, match="budget must be a positive number of tokens"):
        m.recall("Alice", budget=budget)  # type: ignore[arg-type]


def test_an_erased_turn_is_never_recalled() -> None:
    """Wrong is worse than down: after an erasure, neither its text nor its fact comes back."""
    m = pmem.Memory()
    m.add("The gate code of the garage is 4471.", source="Bob", time=MAY_8)
    m.add("The city of Alice is Paris.", source="Alice", time=MAY_8)
    before = m.recall("What is the gate code of the garage?")
    assert "4471" in before.context  # indexed before the erasure
    m.erase("e0")
    after = m.recall("What is the gate code of the garage?")
    assert "4471" not in after.context and "gate code" not in after.context
    assert [i.id for i in after.items if i.kind == "evidence"] == ["e1"]


def test_a_contested_fact_says_so_and_names_its_alternative() -> None:
    m = pmem.Memory()
    m.put("door.color", "red", source="Ann")
    m.graph.apply("contest", "door.color", "blue", evidence=m.graph.observe("It is blue.", source="Bo"))
    line = next(i.line for i in m.recall("What color is the door?").items if i.kind == "fact")
    assert line.startswith("door.color = red (contested; from e0") and line.endswith("| alternatives: blue")


def test_recall_after_a_reload_finds_the_turns_of_the_saved_state(tmp_path) -> None:
    path = tmp_path / "state"
    with pmem.Memory(path=path) as m:
        m.add("Melanie painted a sunrise over the lake.", source="Melanie", time=MAY_8)
    with pmem.Memory.load(path) as again:
        assert again.recall("What did Melanie paint?").items[0].line == (
            "[8 May 2023] Melanie: Melanie painted a sunrise over the lake."
        )


def test_reciprocal_rank_fusion_counts_each_ranking_by_rank_alone() -> None:
    fused = dict(fuse([["a", "b"], ["b", "c"], ["b"]]))
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61) and fused["c"] == pytest.approx(1 / 62)
    assert [item for item, _ in fuse([["a", "b"], ["b", "c"], ["b"]])] == ["b", "a", "c"]


def test_a_value_withdrawn_as_wrong_is_named_retracted_and_an_undone_one_not_at_all() -> None:
    m = pmem.Memory()
    m.add("The budget of the project is $30k.")
    m.add("The budget of the project is $50k.")
    m.add("The report that the budget of the project is $50k was an error.")
    (line,) = [i.line for i in m.recall("What is the budget?").items if i.kind == "fact"]
    assert line == "the_project.budget = $30k (current; from e0; retracted: $50k)"
    m.add("The budget of the project is $70k.")
    last = m.history("the_project.budget")[-1]
    seq = next(op.seq for op in m.graph.operations("the_project.budget") if op.version == last.id)
    m.undo(seq)
    (line,) = [i.line for i in m.recall("What is the budget?").items if i.kind == "fact"]
    assert line == "the_project.budget = $30k (current; from e0; retracted: $50k)"  # $70k never held
