"""``PMemStore``, LangGraph's BaseStore over a P-Mem store (issue 42, item 4 and acceptance 5): a real
``StateGraph`` stores and reads memories through it, sync and async; it answers get, put, delete, search
and list_namespaces as LangGraph's own InMemoryStore does, while keeping what a put displaced."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import TypedDict

import pytest

langgraph = pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402
from langgraph.store.base import InvalidNamespaceError  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from pmem.integrations.langgraph import PMemStore  # noqa: E402


class Turn(TypedDict, total=False):
    user: str
    said: str
    food: str
    recalled: str


def remember(state: Turn, runtime: Runtime) -> Turn:
    """Store what the user said they like (a stand-in for an extraction step)."""
    assert runtime.store is not None
    food = state["said"].rsplit(" ", 1)[-1].rstrip(".")
    runtime.store.put((state["user"],), "food", {"likes": food})
    return {"food": food}


def recall(state: Turn, runtime: Runtime) -> Turn:
    assert runtime.store is not None
    item = runtime.store.get((state["user"],), "food")
    return {"recalled": "" if item is None else item.value["likes"]}


async def arecall(state: Turn, runtime: Runtime) -> Turn:
    assert runtime.store is not None
    hits = await runtime.store.asearch((state["user"],), query="what food does the user like", limit=1)
    return {"recalled": hits[0].value["likes"] if hits else ""}


def graph(recall_node=recall):  # type: ignore[no-untyped-def]
    builder = StateGraph(Turn)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall_node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = PMemStore(tmp_path / "store")
    yield s
    s.close()


def test_a_state_graph_stores_and_reads_memories_through_the_store(store: PMemStore, tmp_path: Path) -> None:
    app = graph().compile(store=store)
    assert app.invoke({"user": "alice", "said": "I like pizza."})["recalled"] == "pizza"
    assert app.invoke({"user": "alice", "said": "These days I like sushi."})["recalled"] == "sushi"
    assert app.invoke({"user": "bob", "said": "I like curry."})["recalled"] == "curry"
    # the reads only P-Mem has: what alice's item held, and why it holds what it holds
    assert [v["likes"] for v in store.history(("alice",), "food")] == ["pizza", "sushi"]
    assert store.as_of(("alice",), "food", seq=2) == {"likes": "pizza"}
    why = store.why(("alice",), "food")
    assert why is not None and [e.text for e in why.evidence] == ['put food: {"likes":"sushi"}']
    assert [op.op for op in why.operations] == ["accept", "accept"]
    store.close()
    again = PMemStore(tmp_path / "store")  # every put was durable: a new process reads them
    try:
        assert again.get(("alice",), "food").value == {"likes": "sushi"}
        assert again.get(("bob",), "food").value == {"likes": "curry"}
    finally:
        again.close()


def test_an_async_state_graph_uses_the_async_twins(store: PMemStore) -> None:
    app = graph(arecall).compile(store=store)

    async def run() -> tuple[str, str]:
        first = await app.ainvoke({"user": "carol", "said": "I like ramen."})
        await store.aput(("carol",), "food", {"likes": "tacos"})
        item = await store.aget(("carol",), "food")
        return first["recalled"], item.value["likes"] if item else ""

    assert asyncio.run(run()) == ("ramen", "tacos")
    assert asyncio.run(store.ahistory(("carol",), "food")) == [{"likes": "ramen"}, {"likes": "tacos"}]


def test_delete_is_a_revoke_that_keeps_the_history(store: PMemStore) -> None:
    store.put(("alice", "planner"), "goal", {"text": "ship v1"})
    store.put(("alice", "planner"), "goal", {"text": "ship v2"})
    store.delete(("alice", "planner"), "goal")
    assert store.get(("alice", "planner"), "goal") is None
    assert store.history(("alice", "planner"), "goal") == [{"text": "ship v1"}, {"text": "ship v2"}]
    why = store.why(("alice", "planner"), "goal")
    assert (
        why is not None
        and why.value is None
        and [op.op for op in why.operations][-2:] == ["revoke", "revoke"]
    )
    store.put(("alice", "planner"), "goal", {"text": "ship v3"})
    assert store.get(("alice", "planner"), "goal").value == {"text": "ship v3"}


def test_search_and_list_namespaces(store: PMemStore) -> None:
    for user, food, stars in (("alice", "pizza", 5), ("bob", "curry", 3), ("dave", "pizza", 4)):
        store.put((user,), "food", {"likes": food, "stars": stars})
        store.put((user, "planner"), "goal", {"text": f"{user} ships"})
    store.put(("erin", "planner", "run1"), "note", {"text": "draft"})
    assert [i.namespace for i in store.search((), filter={"likes": "pizza"})] == [("alice",), ("dave",)]
    assert [i.namespace for i in store.search((), filter={"stars": {"$gte": 4}})] == [("alice",), ("dave",)]
    # a namespace prefix: bob's own items and his agent's, as LangGraph's stores search
    assert [(i.namespace, i.key) for i in store.search(("bob",))] == [
        (("bob",), "food"),
        (("bob", "planner"), "goal"),
    ]
    hits = store.search((), query="curry food", limit=2)
    assert hits[0].value["likes"] == "curry" and hits[0].score is not None and len(hits) == 2
    assert store.list_namespaces(prefix=("alice",)) == [("alice",), ("alice", "planner")]
    assert store.list_namespaces(suffix=("planner",)) == [(u, "planner") for u in ("alice", "bob", "dave")]
    assert store.list_namespaces(max_depth=1) == [("alice",), ("bob",), ("dave",), ("erin",)]
    assert ("erin", "planner", "run1") in store.list_namespaces()


def test_a_namespace_that_is_no_p_mem_namespace_is_refused(store: PMemStore) -> None:
    with pytest.raises(InvalidNamespaceError, match="1 to 3 labels"):
        store.put(("a", "b", "c", "d"), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="user_id"):
        store.put(("al/ice",), "k", {"v": 1})  # LangGraph allows the label; P-Mem ids do not
    assert store.list_namespaces() == []


def test_get_put_delete_answer_as_langgraphs_in_memory_store(store: PMemStore) -> None:
    """A differential check: random puts and deletes over a few namespaces and keys; every get and
    every namespace listing equals LangGraph's InMemoryStore's."""
    reference = InMemoryStore()
    rng = random.Random(3)
    namespaces = [("alice",), ("alice", "planner"), ("bob",)]
    for _ in range(120):
        ns, key = rng.choice(namespaces), rng.choice(["a", "b", "c"])
        if rng.random() < 0.25:
            store.delete(ns, key)
            reference.delete(ns, key)
        else:
            value = {"n": rng.randint(0, 3), "tag": rng.choice(["x", "y"])}
            store.put(ns, key, value)
            reference.put(ns, key, value)
        for check_ns in namespaces:
            for check_key in ("a", "b", "c"):
                mine, theirs = store.get(check_ns, check_key), reference.get(check_ns, check_key)
                assert (mine and mine.value) == (theirs and theirs.value), (check_ns, check_key)
    assert store.list_namespaces() == sorted(reference.list_namespaces())


def test_items_written_with_a_free_text_time_are_read_and_searched(tmp_path: Path) -> None:
    from pmem.server import Namespace, Store

    async def write() -> None:  # the store as pmem mcp writes it: pmem.Memory's text path takes free text
        shared = Store.open(tmp_path / "store")
        try:
            async with shared.using(Namespace.of("alice"), write=True) as memory:
                await memory.add("The city of Alice is Paris.", time="last spring")
                await memory.add("The city of Alice is Rome.", time="2024-03-01")
        finally:
            await shared.aclose()

    asyncio.run(write())
    store = PMemStore(tmp_path / "store")
    try:
        item = store.get(("alice",), "alice.city")
        assert item is not None and item.created_at.year == 1970  # no instant: the epoch, as for no time
        assert item.updated_at.isoformat() == "2024-03-01T00:00:00+00:00"
        assert [i.key for i in store.search((), query="city of Alice")] == ["alice.city"]
    finally:
        store.close()


@pytest.mark.parametrize("leave", [0, 5_000, 24_000])
def test_a_put_the_full_disk_refuses_raises_is_not_read_back_and_puts_go_on_once_there_is_room(
    tmpfs, fill_disk, leave: int
) -> None:
    folder = tmpfs(192)
    store = PMemStore(folder / "store")
    try:
        store.put(("alice",), "goal", {"text": "ship v0"})
        kept = [{"text": "ship v0"}]
        filler = fill_disk(folder, leave)
        for i in range(1, 400):
            value = {"text": f"ship v{i} " + "x" * 2000}
            try:
                store.put(("alice",), "goal", value)
            except OSError:
                assert store.get(("alice",), "goal").value == kept[-1]  # the refused put is not read
                break
            kept.append(value)
        else:
            pytest.fail("the disk never filled")
        filler.unlink()
        store.put(("alice",), "goal", {"text": "ship again"})
        kept.append({"text": "ship again"})
        assert store.history(("alice",), "goal") == kept
    finally:
        store.close()
    reopened = PMemStore(folder / "store")
    try:
        assert reopened.history(("alice",), "goal") == kept
    finally:
        reopened.close()


def test_recall_gives_the_items_with_the_put_they_come_from_and_its_date_within_a_budget(
    tmp_path: Path,
) -> None:
    store = PMemStore(tmp_path / "store")
    try:
        store.put(("alice",), "food", {"likes": "pizza"})
        store.put(("alice",), "food", {"likes": "sushi"})
        store.put(("bob",), "food", {"likes": "ramen"})
        found = store.recall(("alice",), "what food does alice like", budget=120)
        facts = [i.line for i in found.items if i.kind == "fact"]
        assert len(facts) == 1 and facts[0].startswith('food = {"likes":"sushi"} (current; from e1, ')
        assert 'earlier: {"likes":"pizza"}' in facts[0]
        assert found.tokens <= 120 and "ramen" not in found.context  # bob's namespace is his own
        assert (
            asyncio.run(store.arecall(("alice",), "food", budget=120)).context
            == store.recall(("alice",), "food", budget=120).context
        )
    finally:
        store.close()
