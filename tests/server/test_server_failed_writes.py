"""A server whose disk fails (issue 54): over MCP, a write the file system refuses replies with its reason
in one line (never "Error executing tool add" alone, never a server path), nothing of it is answered, and
the namespace takes writes again once the disk has room, without a restart. The server keeps a bounded
number of namespaces open, however many it is asked about."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from pathlib import Path

import pytest
from mcp_client import reply, stdio_session

import pmem
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


def test_open_namespaces_are_bounded_and_reads_of_unwritten_ones_keep_nothing(tmp_path: Path) -> None:
    async def run() -> tuple[int, int, list[str | None], int]:
        store = Store.open(tmp_path / "store", max_open=3)
        try:
            for i in range(8):
                async with store.using(Namespace.of(f"user{i}"), write=True) as memory:
                    await memory.add(f"The city of User{i} is Town{i}.")
            written_open = store.open_count

            async def read_unwritten(n: int, start: int) -> None:
                for i in range(start, start + n):
                    async with store.using(Namespace.of(f"stranger{i}")) as memory:
                        assert await memory.get("stranger.city") is None

            await read_unwritten(200, 0)  # warm: the allocator's pools, the embedder's caches
            tracemalloc.start()
            gc.collect()  # what is kept, not garbage a later collection would free
            before = tracemalloc.get_traced_memory()[0]
            await read_unwritten(2000, 10_000)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            values = []
            for i in range(8):  # closed ones are read again from their files
                async with store.using(Namespace.of(f"user{i}")) as memory:
                    cell = await memory.get(f"user{i}.city")
                    values.append(None if cell is None else cell.value)
            return written_open, store.open_count, values, grown
        finally:
            await store.aclose()

    written_open, open_after, values, grown = asyncio.run(run())
    assert written_open == 3 and open_after == 3
    assert values == [f"Town{i}" for i in range(8)]
    # before: about 18 KB kept for every namespace asked about (36 MB for these 2,000)
    assert grown < 2_000_000, f"{grown:,} bytes kept after 2,000 reads of unwritten namespaces"


def test_max_open_must_be_a_positive_whole_number(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_open must be a whole number of at least 1"):
        Store(tmp_path / "store", max_open=0)
