"""The baseline designs keep to the corner of the design space each stands for."""

from __future__ import annotations

import asyncio

from arms_helpers import models, rate, run

from pmem.arms import make_arm
from pmem.arms._harness import run_history, store_values
from pmem.bench import Event, Question, iter_histories


def _events(*texts):
    return [Event(i, t, source="environment") for i, t in enumerate(texts)]


Q = Question("q", "Where is the apple 1 now?", ("fridge 1",), "current", 0)
#: a move, then its retraction: the apple is back in the fridge
MOVED_THEN_RETRACTED = (
    "Earlier observation: apple 1 was in fridge 1.",
    "Update: apple 1 has been moved to table 2.",
    "Correction: the report that apple 1 was moved to table 2 was an error.",
)


def test_crud_overwrites_and_deletes():
    arm = make_arm("crud", models())
    asyncio.run(arm.ingest(_events(*MOVED_THEN_RETRACTED)))
    current, ever = store_values(arm, "apple_1.location")
    assert current == set() and ever == set()  # v1 overwritten, v2 deleted: nothing to return to
    assert [w.op for w in arm.write_log()] == ["add", "update", "delete"]
    assert arm.write_stats().ops == {"add": 1, "update": 1, "delete": 1}


def test_add_only_keeps_contradictions_and_dedupes_by_hash():
    arm = make_arm("add-only", models())
    asyncio.run(
        arm.ingest(
            _events(
                "Earlier observation: apple 1 was in fridge 1.",
                "Update: apple 1 has been moved to table 2.",
                "Update: apple 1 has been moved to table 2.",
            )
        )
    )
    current, _ = store_values(arm, "apple_1.location")
    assert current == {"fridge 1", "table 2"}
    assert [w.op for w in arm.write_log()] == ["add", "add", "none"]
    assert arm.write_stats().model_calls == 3  # extraction only


def test_bitemporal_invalidates_and_never_reopens():
    arm = make_arm("bitemporal", models())
    asyncio.run(arm.ingest(_events(*MOVED_THEN_RETRACTED)))
    current, ever = store_values(arm, "apple_1.location")
    assert ever == {"fridge 1", "table 2"}  # retained as an invalidated edge ...
    assert current == {"table 2"}  # ... but no operation reopens it
    invalid = [it for it in arm._items if it.invalid_at is not None]
    assert [(it.value, it.invalid_at) for it in invalid] == [("fridge 1", 1)]
    read = asyncio.run(arm.read(Q))
    assert "fridge 1" not in read.text


def test_raw_ordered_tags_sort_by_arrival_and_raw_keeps_similarity_order():
    h = next(iter_histories("alfworld-revision", "chains", L=4, cases=1))
    plain, tagged = make_arm("raw", models()), make_arm("raw-ordered", models())
    for a in (plain, tagged):
        asyncio.run(a.ingest(list(h.events)))
    r_plain, r_tagged = asyncio.run(plain.read(h.questions[0])), asyncio.run(tagged.read(h.questions[0]))
    assert len(r_plain.items) == len(r_tagged.items) == 10  # top-10 on event streams
    ts = [int(line.split("]")[0][3:]) for line in r_tagged.text.splitlines()]
    assert ts == sorted(ts)
    assert sorted(r_plain.text.splitlines()) == sorted(
        line.split("] ", 1)[1] for line in r_tagged.text.splitlines()
    )


def test_long_context_keeps_the_most_recent_window_oldest_first():
    arm = make_arm("long-context", models(), {"max_chars": 100})
    asyncio.run(
        arm.ingest(_events(*[f"Earlier observation: apple {i} was in fridge 1." for i in range(1, 8)]))
    )
    read = asyncio.run(arm.read(Q))
    lines = read.text.splitlines()
    assert read.chars <= 100 and lines[-1].startswith("Earlier observation: apple 7")
    assert [int(x.split()[3]) for x in lines] == sorted(int(x.split()[3]) for x in lines)


def test_long_context_recent_keeps_to_the_read_budget_and_long_context_does_not():
    events = _events(*[f"Earlier observation: apple {i} was in fridge 1." for i in range(1, 30)])
    bounded = make_arm("long-context-recent", models(), {"read_tokens": 40})
    ceiling = make_arm("long-context", models(), {"read_tokens": 40})
    for arm in (bounded, ceiling):
        asyncio.run(arm.ingest(events))
    recent, everything = asyncio.run(bounded.read(Q)), asyncio.run(ceiling.read(Q))
    assert recent.tokens <= 40 < everything.tokens
    assert len(everything.text.splitlines()) == 29
    # the most recent turns, oldest first
    assert recent.text.splitlines() == everything.text.splitlines()[-len(recent.text.splitlines()) :]
    assert len(recent.text.splitlines()) >= 2


def test_chunks_store_line_aligned_chunks_and_read_top_five():
    h = next(iter_histories("factconsolidation", "sh_6k"))
    arm = make_arm("chunks", models())
    rows = asyncio.run(run_history(arm, h))
    read = asyncio.run(arm.read(h.questions[0]))
    assert len(read.items) == 5
    assert all(len(arm._items[int(s)].text) <= 1000 for s in read.items)
    assert rows and arm.write_stats().model_calls == 0


def test_no_memory_reads_nothing():
    rows = run("no-memory", list(iter_histories("alfworld-revision", "chains", L=1, cases=3)))
    assert all(r["read_chars"] == 0 for r in rows)
    assert rate(rows) == 0.0
