"""One read budget for every memory arm of ours (issue 55): with ``read_tokens`` set, an arm ranks more
items than it would show and keeps the best that fit; without it, reads are what they were. The
heuristic agent and the hashing embedder over a LoCoMo conversation (dialogue) and an ALFWorld-Revision
chain (events)."""

from __future__ import annotations

import asyncio

import pytest

from pmem.arms import make_arm
from pmem.arms._base import ModelSet
from pmem.bench import iter_histories
from pmem.models import make_chat_model, make_embedder

BUDGETED = [
    ("pmem", {}, "facts"),
    ("pmem", {"read": "recall"}, "facts"),
    ("pmem", {}, "dialogue"),  # auto: recall in a dialogue
    ("pmem-iterative", {}, "facts"),
    ("pmem-turn-prune", {}, "dialogue"),
    ("raw", {}, "facts"),
    ("raw-ordered", {}, "facts"),
    ("chunks", {}, "facts"),
    ("crud", {}, "facts"),
    ("add-only", {}, "facts"),
    ("bitemporal", {}, "facts"),
]
HISTORIES = {
    # the heuristic agent reads every FactConsolidation line (many facts) and no LoCoMo turn (turns only)
    "facts": next(iter_histories("factconsolidation", "sh_6k", events=120, questions=6)),
    "dialogue": next(iter_histories("locomo", sessions=2, conversations="conv-26")),
}


def reads(arm: str, options: dict, kind: str) -> list:
    models = ModelSet(
        agent=make_chat_model({"backend": "heuristic"}), embedder=make_embedder({"backend": "hashing"})
    )
    a = make_arm(arm, models, options)
    history = HISTORIES[kind]
    asyncio.run(a.ingest(history.events))
    return [asyncio.run(a.read(q)) for q in history.questions[:6]]


@pytest.mark.parametrize(
    ("arm", "options", "kind"), BUDGETED, ids=[f"{a}-{o.get('read', '')}-{k}" for a, o, k in BUDGETED]
)
def test_a_budgeted_read_keeps_the_best_items_that_fit(arm: str, options: dict, kind: str) -> None:
    small = reads(arm, {**options, "read_tokens": 60}, kind)
    large = reads(arm, {**options, "read_tokens": 400}, kind)
    assert all(r.tokens <= 60 for r in small) and all(r.tokens <= 400 for r in large)
    if arm != "pmem-turn-prune":  # its pruning compares the turns it holds: a smaller set prunes others
        # the same ranking, cut sooner: the best items the small budget shows, the large one shows too
        # (not all of them: a small item far down fits a budget that a larger one before it did not)
        for s, g in zip(small, large, strict=True):
            assert set(s.items) & set(g.items), (s.items, g.items)
    if arm != "chunks":  # a 1,000-character chunk is larger than 60 tokens: none fits
        assert all(r.items for r in small)
    assert sum(len(r.items) for r in large) > sum(len(r.items) for r in small)


def test_a_budget_that_is_no_positive_number_is_refused() -> None:
    models = ModelSet(
        agent=make_chat_model({"backend": "heuristic"}), embedder=make_embedder({"backend": "hashing"})
    )
    with pytest.raises(ValueError, match="read_tokens must be a positive number of tokens"):
        make_arm("raw", models, {"read_tokens": 0})
