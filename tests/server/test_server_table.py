"""The tools' table (pmem.server._table): one entry a tool, from which the in-process calls are made."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

from pmem.server import TOOLS, MemoryTools, Store, ToolCallError


def test_the_table_names_the_eleven_tools_each_with_user_id_first_and_the_narrower_ids() -> None:
    names = [t.name for t in TOOLS]
    assert names == [
        "add",
        "recall",
        "search",
        "get",
        "history",
        "as_of",
        "why",
        "undo",
        "erase",
        "conflicts",
        "resolve",
    ]
    for tool in TOOLS:
        params = list(tool.signature.parameters)
        assert params[0] == "user_id" and {"agent_id", "run_id"} <= set(params), tool.name
        assert [a.name for a in tool.arguments] == params
        assert [a.name for a in tool.arguments if a.default is inspect.Parameter.empty] == [
            p for p in params if tool.signature.parameters[p].default is inspect.Parameter.empty
        ]
        assert len(tool.summary) > 60 and all(a.description for a in tool.arguments), tool.name
    assert {t.name for t in TOOLS if t.writes} == {"add", "undo", "erase", "resolve"}
    assert [t.name for t in TOOLS if t.effect == "destroy"] == ["erase"]


def test_a_call_binds_positional_and_keyword_arguments_and_refuses_what_the_table_does_not_take(
    tmp_path: Path,
) -> None:
    async def run() -> list[object]:
        store = Store.open(tmp_path / "store")
        tools = MemoryTools(store)
        out: list[object] = []
        try:
            await tools.add("alice", "The city of Alice is Paris.")
            out.append((await tools.get("alice", "alice.city"))["value"])
            out.append((await tools.call("get", user_id="alice", key="alice.city"))["value"])
            for bad in (
                lambda: tools.call("forget", "alice"),
                lambda: tools.get("alice"),
                lambda: tools.get("alice", "alice.city", colour="red"),
                lambda: tools.as_of("alice"),
            ):
                with pytest.raises(ToolCallError) as err:
                    await bad()
                out.append(str(err.value))
            with pytest.raises(AttributeError):
                _ = tools.forget
        finally:
            await store.aclose()
        return out

    values = asyncio.run(run())
    assert values[:2] == ["Paris", "Paris"]
    assert values[2].startswith("no tool 'forget'")
    assert values[3].startswith("get:") and "key" in values[3]
    assert values[4].startswith("get:") and "colour" in values[4]
    assert values[5].startswith("as_of: give seq")
