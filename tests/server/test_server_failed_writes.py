"""A server whose disk fails (issue 54): over MCP, a write the file system refuses replies with its reason
in one line (never "Error executing tool add" alone, never a server path), nothing of it is answered, and
the namespace takes writes again once the disk has room, without a restart. The server keeps a bounded
number of namespaces open, however many it is asked about."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from mcp_client import reply, stdio_session

import pmem
from pmem.memory import AsyncMemory
from pmem.server import Namespace, Store

#: bytes left free on the store's disk in each round
FILL_LEVELS = (0, 5_000, 24_000)


def test_a_full_disk_over_mcp_replies_its_reason_keeps_nothing_refused_and_goes_on(tmpfs, fill_disk) -> None:
    store = tmpfs(320) / "store"

    async def run() -> tuple[dict[str, str], list[str], dict[str, str], list[list[str]]]:
        acknowledged: dict[str, str] = {}
        errors: list[str] = []
        histories = []
        async with stdio_session(store) as session:

            async def call(tool: str, **args: object) -> object:
                return reply(await session.call_tool(tool, {"user_id": "alice", **args}))

            i = 0
            for leave in FILL_LEVELS:
                filler = fill_disk(store.parent, leave)
                for _ in range(400):  # adds until the disk refuses one
                    i += 1
                    added = await call("add", text=f"The city of Person{i} is Town{i}. " + "x" * 300)
                    if isinstance(added, dict) and "error" in added:
                        errors.append(added["error"])
                        assert await call("get", key=f"person{i}.city") is None  # not answered
                        hits = await call("search", query=f"Person{i} Town{i}", k=20)
                        assert f"person{i}.city" not in [hit["key"] for hit in hits]
                        break
                    (op,) = added["operations"]  # the value as the memory extracted it
                    acknowledged[op["key"]] = op["value"]
                filler.unlink()
                i += 1  # room again: the same server takes writes
                assert "error" not in await call("add", text=f"The city of Person{i} is Town{i}.")
                acknowledged[f"person{i}.city"] = f"Town{i}"
            answered = {key: (await call("get", key=key))["value"] for key in acknowledged}
            histories = [
                [v["value"] for v in await call("history", key=key)] for key in list(acknowledged)[:3]
            ]
        return acknowledged, errors, answered, histories

    acknowledged, errors, answered, histories = asyncio.run(run())
    assert len(errors) == len(FILL_LEVELS)  # each round's disk filled
    for error in errors:
        assert "alice: the server could not write this namespace's files (No space left on device)" in error
        assert "\n" not in error and str(store) not in error
    assert answered == acknowledged  # every acknowledged add, nothing refused
    assert all(len(h) == 1 for h in histories)
    state = store / "namespaces" / Namespace.of("alice").folder / "state.arrow"
    loaded = pmem.ProvenanceGraph.load(state)
    assert {k: c.value for k, c in loaded.frontier().items()} == acknowledged


def _alive() -> tuple[int, int]:
    """How many memories and locks this process holds (after a collection: what is kept, not garbage)."""
    gc.collect()
    objects = gc.get_objects()
    return sum(isinstance(o, AsyncMemory) for o in objects), sum(isinstance(o, asyncio.Lock) for o in objects)


def test_open_namespaces_are_bounded_and_reads_of_unwritten_ones_keep_nothing(tmp_path: Path) -> None:
    async def run() -> tuple[int, int, list[str | None], tuple[int, int], tuple[int, int]]:
        store = Store.open(tmp_path / "store", max_open=3)
        try:
            for i in range(8):
                async with store.using(Namespace.of(f"user{i}"), write=True) as memory:
                    await memory.add(f"The city of User{i} is Town{i}.")
            written_open = store.open_count
            before = _alive()
            for i in range(2000):
                async with store.using(Namespace.of(f"stranger{i}")) as memory:
                    assert await memory.get("stranger.city") is None
            del memory  # the loop's last one
            after = _alive()
            values = []
            for i in range(8):  # closed ones are read again from their files
                async with store.using(Namespace.of(f"user{i}")) as memory:
                    cell = await memory.get(f"user{i}.city")
                    values.append(None if cell is None else cell.value)
            return written_open, store.open_count, values, before, after
        finally:
            await store.aclose()

    written_open, open_after, values, before, after = asyncio.run(run())
    assert written_open == 3 and open_after == 3
    assert values == [f"Town{i}" for i in range(8)]
    # before: a memory and a lock kept for every namespace asked about (about 18 KB each)
    assert after == before, (
        f"(memories, locks) alive: {before} before 2,000 reads of unwritten namespaces, {after} after"
    )


def test_max_open_must_be_a_positive_whole_number(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_open must be a whole number of at least 1"):
        Store(tmp_path / "store", max_open=0)
