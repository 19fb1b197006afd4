"""Namespaces cannot leak (issue 42, acceptance 2): over streamable HTTP, with a token limited to alice and
one that reaches everyone, at least 40 attempts to read or change bob's memory from elsewhere (every tool,
every id kind, path-like names, NUL, a 10 kB name, Unicode look-alikes, bob's own evidence ids and seqs
used in alice's namespace). Each attempt is refused with one clear line or answers from its own namespace;
no reply holds bob's secret, and bob's files are byte for byte what they were."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp_client import TOOLS, http_server, http_session, reply

from pmem.server._store import STORE_LOCK

ALICE_TOKEN = "tok-alice-91c2"
OPS_TOKEN = "tok-ops-5d10"
TOKENS = json.dumps({ALICE_TOKEN: ["alice"], OPS_TOKEN: ["*"]})
SECRET = "Reykjavik"

#: Arguments each tool needs besides the namespace.
ARGS: dict[str, dict[str, Any]] = {
    "add": {"text": "The city of Mallory is Nowhere."},
    "recall": {"query": "city"},
    "search": {"query": "city"},
    "get": {"key": "bob.city"},
    "history": {"key": "bob.city"},
    "as_of": {"seq": 2},
    "why": {"key": "bob.city"},
    "undo": {"op_seq": 2},
    "erase": {"evidence_id": "e0"},
    "conflicts": {},
    "resolve": {"key": "bob.city", "value": SECRET},
}

#: user_ids that must not reach bob (nor any file outside the store).
HOSTILE_USERS = [
    "../bob",
    "bob/../bob",
    "/etc/passwd",
    "bob\x00",
    "b" * 10_000,
    "b\u043eb",  # Cyrillic o
    "\uff42\uff4f\uff42",  # full-width bob
    " bob",
    "..",
    "",
    "bob/agent",
    "bob\\x",
    "%2e%2e%2fbob",
    "bob\n",
]
#: agent_id and run_id values that must not climb out of alice's namespace.
HOSTILE_SUB_IDS = ["../../bob", "/bob", "bob\x00", "x" * 10_000, ".."]


def _files(store: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(store)): p.read_bytes()
        for p in sorted(store.rglob("*"))
        if p.is_file() and p.name != f"{STORE_LOCK}.holder"
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Any:
    store = tmp_path_factory.mktemp("leaks") / "store"
    with http_server(store, {"PMEM_MCP_TOKENS": TOKENS}) as url:

        async def seed() -> None:
            async with http_session(url, OPS_TOKEN) as s:
                for user, text in (
                    ("bob", f"The city of Bob is {SECRET}."),
                    ("alice", "The city of Alice is Paris."),
                ):
                    r = reply(await s.call_tool("add", {"user_id": user, "text": text}))
                    assert r["operations"][0]["applied"], r

        asyncio.run(seed())
        yield store, url


def _bob_files(store: Path) -> dict[str, bytes]:
    from pmem.server import Namespace

    folder = Namespace.of("bob").folder
    return {k: v for k, v in _files(store).items() if folder in k}


def test_no_call_from_elsewhere_reads_or_changes_bobs_memory(served) -> None:
    store, url = served
    bob_before = _bob_files(store)
    assert bob_before, "bob's state is on disk"
    attempts: list[tuple[str, Any]] = []

    async def run() -> None:
        async with http_session(url, ALICE_TOKEN) as alice:
            for tool in TOOLS:  # alice's token asks for bob: refused by every tool
                attempts.append(
                    (
                        f"alice-token {tool} bob",
                        reply(await alice.call_tool(tool, {"user_id": "bob", **ARGS[tool]})),
                    )
                )
            # bob's ids used in alice's own namespace answer from alice's memory only
            for tool in ("get", "history", "why"):
                attempts.append(
                    (
                        f"alice {tool} bob.city",
                        reply(await alice.call_tool(tool, {"user_id": "alice", **ARGS[tool]})),
                    )
                )
            for key in ("../bob/bob.city", "bob.city\x00", "/bob.city"):
                attempts.append(
                    (
                        f"alice get {key!r}",
                        reply(await alice.call_tool("get", {"user_id": "alice", "key": key})),
                    )
                )
            for evidence in ("../e0", "e0\x00", "bob:e0", "e99"):
                attempts.append(
                    (
                        f"alice why-erase {evidence!r}",
                        reply(await alice.call_tool("erase", {"user_id": "alice", "evidence_id": evidence})),
                    )
                )
            for sub in HOSTILE_SUB_IDS:
                attempts.append(
                    (
                        f"alice agent_id {sub[:12]!r}",
                        reply(
                            await alice.call_tool(
                                "get", {"user_id": "alice", "agent_id": sub, "key": "bob.city"}
                            )
                        ),
                    )
                )
                attempts.append(
                    (
                        f"alice run_id {sub[:12]!r}",
                        reply(
                            await alice.call_tool(
                                "search", {"user_id": "alice", "run_id": sub, "query": "city"}
                            )
                        ),
                    )
                )
        async with http_session(url, OPS_TOKEN) as ops:
            for i, user in enumerate(HOSTILE_USERS):
                tool = TOOLS[i % len(TOOLS)]
                attempts.append(
                    (
                        f"ops {tool} {user[:12]!r}",
                        reply(await ops.call_tool(tool, {"user_id": user, **ARGS[tool]})),
                    )
                )

    asyncio.run(run())
    assert len(attempts) >= 40, len(attempts)
    refused = 0
    for name, answer in attempts:
        text = json.dumps(answer)
        assert SECRET not in text, f"{name} leaked bob's value: {text[:300]}"
        if isinstance(answer, dict) and "error" in answer:
            refused += 1
            error = answer["error"]
            assert "\n" not in error and len(error) < 400, f"{name}: not one clear line: {error[:500]!r}"
            assert any(
                word in error
                for word in (
                    "user_id",
                    "agent_id",
                    "run_id",
                    "may not reach",
                    "key",
                    "unknown id",
                    "evidence",
                )
            ), f"{name}: {error}"
    print(
        f"{len(attempts)} attempts, {refused} refused in one line, the rest answered from their own namespace"
    )
    assert refused >= 30, refused
    assert _bob_files(store) == bob_before  # bob's state and journal untouched, byte for byte
    # nothing was written outside the store's namespaces, whatever the names
    assert all(k.startswith("namespaces/") or k == STORE_LOCK for k in _files(store)), sorted(_files(store))


def test_a_request_without_a_known_token_is_refused(served) -> None:
    """An MCP request with no token, an unknown one or one a byte off gets HTTP 401; the known token's
    gets through."""
    import httpx2

    _, url = served
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    statuses = {}
    for token in (None, "wrong-token", ALICE_TOKEN + "x", ALICE_TOKEN):
        headers = accept if token is None else {**accept, "Authorization": f"Bearer {token}"}
        statuses[token] = httpx2.post(url, json=initialize, headers=headers, timeout=60).status_code
    assert statuses == {None: 401, "wrong-token": 401, ALICE_TOKEN + "x": 401, ALICE_TOKEN: 200}


def test_bobs_memory_still_answers_bob(served) -> None:
    _, url = served

    async def run() -> Any:
        async with http_session(url, OPS_TOKEN) as ops:
            return reply(await ops.call_tool("get", {"user_id": "bob", "key": "bob.city"}))

    assert asyncio.run(run())["value"] == SECRET
