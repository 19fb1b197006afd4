"""Through ``pmem.Memory`` and the heuristic agent: a retraction retracts what it named, so erasing or
undoing any statement equals never having made it (issue 41).

The README's example was the report: ``$30k``, ``$50k``, "the report that ... is $50k was an error";
erasing the $50k statement (or undoing its accept, or ``pmem erase`` on the saved state) emptied the
cell, because the retraction was replayed against whatever the head then was. The property test feeds
generated histories of statements, corrections and retractions to a memory, and compares each erasure
and each undo with a memory fed the same texts less the one erased (or undone).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pmem
from pmem import cli
from pmem.graph import journal_path

README = [
    "The budget of the project is $30k.",
    "The budget of the project is $50k.",
    "The report that the budget of the project is $50k was an error.",
]
KEY = "the_project.budget"


def history(m: pmem.Memory, key: str) -> list[tuple[str, str]]:
    return [(v.value, v.status) for v in m.history(key)]


def test_the_readme_example_erased_at_the_retracted_statement_keeps_the_value_before() -> None:
    m = pmem.Memory()
    ids = [m.add(text).evidence for text in README]
    assert m.get(KEY).value == "$30k"
    receipt = m.erase(ids[1])
    assert receipt.changed == {} and m.get(KEY).value == "$30k"
    assert history(m, KEY) == [("$30k", "active"), ("", "erased")]
    assert m.as_of().cell(KEY).value == "$30k"


def test_the_readme_example_with_the_retracted_accept_undone_keeps_the_value_before() -> None:
    m = pmem.Memory()
    for text in README:
        m.add(text)
    accept = next(o for o in m.graph.operations(KEY) if o.value == "$50k")
    assert m.undo(accept.seq).applied
    assert m.get(KEY).value == "$30k"
    assert history(m, KEY) == [("$30k", "active"), ("$50k", "undone")]
    revoke = list(m.graph.operations(KEY))[2]
    assert (revoke.requested, revoke.applied, revoke.retracts) == ("revoke", False, "$50k")
    assert m.undo(m.graph.seq).applied  # the undo undone: the $50k and its retraction are back
    assert m.get(KEY).value == "$30k" and history(m, KEY) == [("$30k", "active"), ("$50k", "revoked")]


def test_pmem_erase_of_the_retracted_statement_keeps_the_value_before(tmp_path: Path, capsys) -> None:
    m = pmem.Memory()
    ids = [m.add(text).evidence for text in README]
    m.save(tmp_path / "memory.arrow")
    assert (
        cli.main(["erase", str(tmp_path / "memory.arrow"), ids[1], "--out", str(tmp_path / "new.arrow")]) == 0
    )
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["changed"] == {}
    assert pmem.Memory.load(tmp_path / "new.arrow").get(KEY).value == "$30k"


def test_a_retraction_of_a_value_that_is_not_the_head_is_kept_for_a_replay_where_it_is() -> None:
    """ "$70k was a mistake" while the head is $30k retracts nothing now (a noop with the reason, no
    support for $30k); erase the $30k statement and the retraction finds $70k at the head, as a memory
    never told $30k would have retracted it."""
    said = [
        "The budget of the project is $70k.",
        "The budget of the project is $30k.",
        "The report that the budget of the project is $70k was a mistake.",
    ]
    m = memory_of(said)
    last = list(m.graph.operations(KEY))[-1]
    assert (last.requested, last.applied, last.retracts) == ("revoke", False, "$70k")
    assert last.reason == "revoke names '$70k' but the current head is '$30k'"
    assert m.get(KEY).value == "$30k" and m.get(KEY).support == 1
    m.erase("e1")
    assert views(m) == views(memory_of([said[0], said[2]]))
    assert m.get(KEY) is not None and m.get(KEY).value is None  # $70k retracted: nothing before it


# ---------------------------------------------------------------- the property, through Memory.add

MUG = ("shelf 2", "desk 1", "drawer 3")
BUDGET = ("$30k", "$50k", "$70k")
#: the agent's sentences: a statement, a correction (a move), two ways to retract; per key
SAY = {
    "mug": (
        lambda v: f"Earlier observation: mug 1 was in {v}.",
        lambda v: f"Update: mug 1 has been moved from the hall to {v}.",
        lambda v: f"Correction: the report that mug 1 was moved to {v} was an error.",
        lambda v: f"Mug 1 was never moved to {v}.",
    ),
    "budget": (
        lambda v: f"The budget of the project is {v}.",
        lambda v: f"Update: the budget of the project is {v}.",
        lambda v: f"The report that the budget of the project is {v} was an error.",
        lambda v: f"The report that the budget of the project is {v} was a mistake.",
    ),
}
KEYS = {"mug": "mug_1.location", "budget": KEY}

texts = st.lists(
    st.tuples(st.sampled_from(sorted(SAY)), st.integers(0, 3), st.integers(0, 2)).map(
        lambda t: SAY[t[0]][t[1]]((MUG if t[0] == "mug" else BUDGET)[t[2]])
    ),
    max_size=10,
)


def memory_of(said: list[str]) -> pmem.Memory:
    m = pmem.Memory()
    for text in said:
        m.add(text)
    return m


def views(m: pmem.Memory) -> dict[str, tuple]:
    out = {}
    for key in KEYS.values():
        cell = m.get(key)
        live = [(v.value, v.status) for v in m.history(key) if v.status not in ("undone", "erased")]
        if cell is not None and (cell.value is not None or live):
            out[key] = ((cell.value, cell.status, cell.alternatives), live)
    return out


def check_every_erasure_and_undo(said: list[str], tmp_path: Path) -> None:
    m = memory_of(said)
    ids = [f"e{i}" for i in range(len(said))]  # one statement, one evidence
    state = tmp_path / f"memory-{len(list(tmp_path.iterdir()))}.arrow"
    m.save(state)

    def fresh() -> pmem.Memory:
        """The saved memory, from a copy of its file: an erase or undo is committed to the file it
        was loaded from, and each case starts from the saved state."""
        copy = state.with_name("case.arrow")
        shutil.copyfile(state, copy)
        journal_path(copy).unlink(missing_ok=True)
        return pmem.Memory.load(copy)

    for i, evidence in enumerate(ids):
        erased = fresh()
        erased.erase(evidence)
        assert views(erased) == views(memory_of(said[:i] + said[i + 1 :])), f"erase {evidence}: {said[i]}"
    for op in m.graph.operations():
        undone = fresh()
        if not undone.undo(op.seq).applied:
            assert views(undone) == views(m)
            continue
        (i,) = [int(op.evidence[1:])]  # one fact per statement: undoing it is not having said it
        assert views(undone) == views(memory_of(said[:i] + said[i + 1 :])), f"undo of {said[i]}"


@settings(max_examples=15, deadline=None)
@given(texts)
def test_erasing_or_undoing_any_statement_equals_never_having_made_it(tmp_path_factory, said) -> None:
    check_every_erasure_and_undo(said, tmp_path_factory.mktemp("m"))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(texts)
def test_erasing_or_undoing_any_statement_equals_never_having_made_it_at_length(
    tmp_path_factory, said
) -> None:
    check_every_erasure_and_undo(said, tmp_path_factory.mktemp("m"))
