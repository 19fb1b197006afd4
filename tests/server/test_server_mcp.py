"""``pmem mcp`` driven by a real MCP client (the SDK's ClientSession) over stdio and streamable HTTP: a
scripted conversation of 30 turns through every tool, each reply compared with what ``pmem.Memory`` gives
for the same calls (issue 42, acceptance 1), and what a fresh client reads after the server restarted."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp_client import TOOLS, http_server, http_session, reply, stdio_session

import pmem
from pmem.server import Namespace
from pmem.server._replies import (
    add_reply,
    as_of_reply,
    cell_reply,
    cells_reply,
    op_reply,
    recall_reply,
    receipt_reply,
    search_reply,
    version_reply,
    why_reply,
)

TOKEN = "test-token-7f3a"
#: The memories' write options, in the server's config and in the reference memories alike: web
#: statements rank below the user's, so they contest instead of displacing (conflicts, resolve).
AUTHORITY = {"user": 2, "web": 0}
CONFIG = "[memory]\nauthority = { user = 2, web = 0 }\n"


@dataclass(frozen=True)
class Ref:
    """A value read from this side's reply to an earlier turn (each side reads its own)."""

    turn: int
    path: tuple[Any, ...]

    def read(self, replies: list[Any]) -> Any:
        value = replies[self.turn]
        for step in self.path:
            value = value[step]
        return value


A = {"user_id": "alice"}
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("add", {**A, "text": "The city of Alice is Paris."}),  # 0
    ("add", {**A, "text": "The city of Bob is Rome."}),
    ("search", {**A, "query": "Where does Alice live?", "k": 3}),
    ("get", {**A, "key": "alice.city"}),
    ("add", {**A, "text": "The city of Alice is Berlin.", "time": "2026-12-01T10:00:00"}),
    ("history", {**A, "key": "alice.city"}),  # 5
    ("why", {**A, "key": "alice.city"}),
    ("as_of", {**A, "seq": 2, "key": "alice.city"}),
    ("add", {**A, "text": "The city of Bob is Madrid.", "source": "web"}),
    ("conflicts", {**A}),
    ("resolve", {**A, "key": "bob.city", "value": "Madrid"}),  # 10
    ("why", {**A, "key": "bob.city"}),
    ("undo", {**A, "op_seq": Ref(11, ("operations", -1, "seq"))}),
    ("get", {**A, "key": "bob.city"}),
    ("add", {**A, "text": "Earlier observation: mug 1 was in shelf 2."}),
    ("add", {**A, "text": "Update: mug 1 has been moved from shelf 2 to desk 1."}),  # 15
    ("history", {**A, "key": "mug_1.location"}),
    ("erase", {**A, "evidence_id": Ref(15, ("evidence",))}),
    ("get", {**A, "key": "mug_1.location"}),
    ("search", {**A, "query": "where is the mug", "disclose": ["history"]}),
    ("add", {**A, "agent_id": "planner", "text": "The city of Carol is Oslo."}),  # 20
    ("get", {**A, "agent_id": "planner", "key": "carol.city"}),
    ("get", {**A, "key": "carol.city"}),
    ("add", {"user_id": "bob", "text": "The city of Alice is Lima."}),
    ("get", {"user_id": "bob", "key": "alice.city"}),
    ("get", {**A, "key": "alice.city"}),  # 25
    ("as_of", {**A, "seq": 4}),
    ("why", {**A, "key": "bob.city"}),
    ("conflicts", {**A}),
    ("search", {**A, "query": "city", "k": 5, "disclose": ["alternatives"]}),
    ("recall", {**A, "query": "Where is the mug now?", "budget": 300}),  # 30
]


def resolved(args: dict[str, Any], replies: list[Any]) -> dict[str, Any]:
    return {k: v.read(replies) if isinstance(v, Ref) else v for k, v in args.items()}


def on_memory(memories: dict[Namespace, pmem.Memory], tool: str, args: dict[str, Any]) -> Any:
    """The reference: the same call on a ``pmem.Memory`` of the namespace, in the reply's JSON form."""
    a = dict(args)
    ns = Namespace.of(a.pop("user_id"), a.pop("agent_id", None), a.pop("run_id", None))
    m = memories.setdefault(ns, pmem.Memory(authority=AUTHORITY))
    if tool == "add":
        return add_reply(m.add(a["text"], source=a.get("source", "user"), time=a.get("time")))
    if tool == "search":
        cells = m.search(a["query"], a.get("k", 12), disclose=a.get("disclose", ()))
        return search_reply(cells, [m.why(c.key) for c in cells])
    if tool == "recall":
        return recall_reply(m.recall(a["query"], a.get("budget", 1000)))
    if tool == "get":
        return cell_reply(m.get(a["key"]))
    if tool == "history":
        return [version_reply(v) for v in m.history(a["key"])]
    if tool == "as_of":
        return as_of_reply(m.as_of(a.get("seq"), time=a.get("time")), a.get("key"), a.get("limit", 100))
    if tool == "why":
        return why_reply(m.why(a["key"]))
    if tool == "undo":
        return op_reply(m.undo(a["op_seq"]))
    if tool == "erase":
        return receipt_reply(m.erase(a["evidence_id"]))
    if tool == "conflicts":
        return cells_reply(m.conflicts())
    if tool == "resolve":
        return op_reply(m.resolve(a["key"], a["value"]))
    raise AssertionError(tool)


def expected_replies() -> list[Any]:
    memories: dict[Namespace, pmem.Memory] = {}
    out: list[Any] = []
    for tool, args in SCRIPT:
        out.append(on_memory(memories, tool, resolved(args, out)))
    return out


async def converse(session: Any) -> list[Any]:
    out: list[Any] = []
    for tool, args in SCRIPT:
        out.append(reply(await session.call_tool(tool, resolved(args, out))))
    return out


def test_the_script_exercises_every_tool_and_what_each_is_for() -> None:
    """The reference replies show the behaviours the conversation is meant to reach (else it would
    compare empty answers)."""
    tools = {tool for tool, _ in SCRIPT}
    assert tools == set(TOOLS)
    assert len(SCRIPT) == 31
    r = expected_replies()
    # a search hit carries the turn its value comes from, with its source and time
    hit = r[2][0]
    assert hit["key"] == "alice.city" and [e["text"] for e in hit["evidence"]] == [
        "The city of Alice is Paris."
    ]
    assert hit["evidence"][0]["source"] == "user" and hit["evidence"][0]["id"] == "e0"
    assert r[8]["operations"][0]["op"] == "contest"  # the web source contests
    assert r[9][0]["alternatives"] == ["Madrid"] and r[10]["applied"]
    assert r[12]["applied"] and r[13]["value"] == "Rome"  # the undo of the resolve
    assert r[17]["changed"] == {"mug_1.location": {"before": "desk 1", "after": "shelf 2"}}
    assert r[21]["value"] == "Oslo" and r[22] is None  # the agent's memory is its own
    assert r[24]["value"] == "Lima" and r[25]["value"] == "Berlin"  # and so is each user's
    # the recall: the mug's current value with its turn, and nothing of the erased turn
    assert r[30]["context"].splitlines()[0] == "mug_1.location = shelf 2 (current; from e5)"
    assert "desk 1" not in json.dumps(r[30]) and r[30]["tokens"] <= 300


@pytest.fixture
def store(tmp_path: Path) -> Path:
    (tmp_path / "config.toml").write_text(CONFIG)
    return tmp_path / "store"


def test_stdio_conversation_replies_as_the_memory_does_and_survives_a_restart(store: Path) -> None:
    config = str(store.parent / "config.toml")

    async def run() -> tuple[list[Any], Any]:
        async with stdio_session(store, "--config", config) as session:
            replies = await converse(session)
        async with stdio_session(store, "--config", config) as session:  # a new server on the same store
            after = reply(await session.call_tool("why", {"user_id": "alice", "key": "bob.city"}))
        return replies, after

    replies, after = asyncio.run(run())
    expected = expected_replies()
    for turn, (got, want) in enumerate(zip(replies, expected, strict=True)):
        assert got == want, f"turn {turn} {SCRIPT[turn][0]}"
    assert after == expected[27]


def test_http_conversation_replies_as_the_memory_does(store: Path) -> None:
    config = str(store.parent / "config.toml")
    with http_server(store, {"PMEM_MCP_TOKEN": TOKEN}, "--config", config) as url:

        async def run() -> list[Any]:
            async with http_session(url, TOKEN) as session:
                return await converse(session)

        replies = asyncio.run(run())
    assert replies == expected_replies()


def test_tools_list_every_tool_with_a_schema_and_a_description(store: Path) -> None:
    async def run() -> list[Any]:
        async with stdio_session(store) as session:
            return list((await session.list_tools()).tools)

    tools = {t.name: t for t in asyncio.run(run())}
    assert set(tools) == set(TOOLS)
    assert tools["erase"].annotations.destructive_hint and not tools["add"].annotations.read_only_hint
    assert all(
        tools[t].annotations.read_only_hint
        for t in ("recall", "search", "get", "history", "as_of", "why", "conflicts")
    )
    for tool in tools.values():
        assert len(tool.description or "") > 60, tool.name
        assert "user_id" in tool.input_schema["required"], tool.name
        assert tool.input_schema["properties"]["user_id"]["description"]
