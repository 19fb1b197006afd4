"""The store without a transport: options refused before anything is held, reads that make nothing, one
namespace per id set, and the state files a plain ``pmem.Memory`` reads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import pmem
from pmem.server import Namespace, Store


def test_a_refused_option_leaves_the_store_free(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unknown option"):
        Store.open(tmp_path / "store", nonsense=1)
    asyncio.run(Store.open(tmp_path / "store").aclose())  # not held by the failed one


def test_reads_make_nothing_and_writes_make_one_namespace_each(tmp_path: Path) -> None:
    async def run() -> list[str]:
        store = Store.open(tmp_path / "store")
        try:
            for ids in (("alice",), ("alice", "planner"), ("alice", None, "r1"), ("bob",)):
                async with store.using(Namespace.of(*ids)) as memory:
                    assert await memory.get("alice.city") is None
            assert store.namespaces() == []
            for ids in (("alice",), ("alice", "planner"), ("alice", None, "r1")):
                async with store.using(Namespace.of(*ids), write=True) as memory:
                    await memory.add(f"The city of Alice is {'-'.join(i or 'x' for i in ids)}.")
            return [ns.label for ns in store.namespaces()]
        finally:
            await store.aclose()

    assert asyncio.run(run()) == ["alice", "alice/planner", "alice/run:r1"]
    state = tmp_path / "store" / "namespaces" / Namespace.of("alice", "planner").folder / "state.arrow"
    assert pmem.Memory.load(state).get("alice.city").value == "alice-planner"  # a plain memory reads it
