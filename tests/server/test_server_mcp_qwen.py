"""The MCP conversation with a real model (``qwen`` marker: ``make test-qwen``): Qwen2.5-Coder-1.5B on a
llama.cpp server extracts the facts, and every tool's reply over stdio is what ``pmem.Memory`` with the
same model gives for the same calls (issue 42, acceptance 1).

A model's reply to one prompt can differ between two calls (batching, the prompt cache), so the server
and the reference memory share a response cache: the reference is asked the prompts the server asked,
and gets the server's answers; a prompt the server never asked (its memory would have diverged) goes to
the model, and the replies then show the difference.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_client import reply, stdio_session

import pmem
from pmem.server import Namespace

pytestmark = pytest.mark.qwen

#: Ordinary sentences (the heuristic agent reads none of them), through every tool.
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("add", {"user_id": "dana", "text": "I moved to Lisbon last spring."}),
    ("add", {"user_id": "dana", "text": "My manager is Carol."}),
    ("add", {"user_id": "dana", "text": "The project budget is $30k."}),
    ("add", {"user_id": "dana", "text": "The project budget was raised to $50k."}),
    ("search", {"user_id": "dana", "query": "project budget", "k": 3}),
    ("add", {"user_id": "dana", "text": "Sorry, the raise to $50k was an error."}),
    ("search", {"user_id": "dana", "query": "Where does Dana live?", "k": 3}),
    ("conflicts", {"user_id": "dana"}),
    ("add", {"user_id": "eli", "text": "I live in Oslo."}),
    ("search", {"user_id": "eli", "query": "Where does Eli live?", "k": 3}),
]
#: After the script: the keys the model chose are read back through get, history and why.


def _llama_server(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    from pmem.models._gguf import resolve_gguf

    gguf = resolve_gguf("qwen2.5-coder-1.5b-instruct")
    log = tmp_path / "llama.log"
    with open(log, "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
             "--port", "0", "--n_ctx", "8192", "--logits_all", "false", "--model_alias", "qwen"],
            stderr=err, stdout=err,
        )  # fmt: skip
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return process, found.group(1) + "/v1"
        if process.poll() is not None:
            break
        time.sleep(0.5)
    process.kill()
    pytest.fail(f"the llama.cpp server did not start: {log.read_text()[-2000:]}")


def test_a_real_model_conversation_replies_as_the_memory_does(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    process, url = _llama_server(tmp_path)
    cache = tmp_path / "replies.sqlite"
    agent = {"backend": "openai", "url": url, "model": "qwen", "structured": "json_object"}
    config = tmp_path / "config.toml"
    config.write_text(
        f'cache = "{cache}"\n[models.agent]\n'
        + "".join(f'{k} = "{v}"\n' if isinstance(v, str) else f"{k} = {v}\n" for k, v in agent.items())
    )
    try:

        async def converse() -> list[Any]:
            out: list[Any] = []
            async with stdio_session(tmp_path / "store", "--config", str(config)) as session:
                for tool, args in SCRIPT:
                    out.append(reply(await session.call_tool(tool, args)))
                keys = sorted(
                    {
                        op["key"]
                        for (tool, args), r in zip(SCRIPT, out, strict=True)
                        if tool == "add" and args["user_id"] == "dana" and "operations" in r
                        for op in r["operations"]
                        if op["key"]
                    }
                )
                for key in keys:
                    for tool in ("get", "history", "why"):
                        out.append(reply(await session.call_tool(tool, {"user_id": "dana", "key": key})))
            return [*out, keys]

        served = asyncio.run(converse())
        from pmem.models import ResponseCache, make_chat_model

        model = make_chat_model(agent, cache=ResponseCache(cache))
        memories: dict[Namespace, pmem.Memory] = {}
        expected = [_on_memory(memories, model, tool, args) for tool, args in SCRIPT]
        keys = served[-1]
        for key in keys:
            m = memories[Namespace.of("dana")]
            expected += [_reply("get", m, key), _reply("history", m, key), _reply("why", m, key)]
    finally:
        process.terminate()
        process.wait(timeout=60)
    print(f"{len(expected)} replies compared; keys the model chose for dana: {keys}")
    assert len(keys) >= 2, f"the model extracted too little to compare: {served[:4]}"
    for turn, (got, want) in enumerate(zip(served[:-1], expected, strict=True)):
        assert got == want, f"turn {turn}"


def _reply(tool: str, m: pmem.Memory, key: str) -> Any:
    from pmem.server._replies import cell_reply, version_reply, why_reply

    if tool == "get":
        return cell_reply(m.get(key))
    if tool == "history":
        return [version_reply(v) for v in m.history(key)]
    return why_reply(m.why(key))


def _on_memory(memories: dict[Namespace, pmem.Memory], model: Any, tool: str, args: dict[str, Any]) -> Any:
    from pmem.server._replies import add_reply, cells_reply

    ns = Namespace.of(args["user_id"])
    m = memories.setdefault(ns, pmem.Memory(model))
    if tool == "add":
        return add_reply(m.add(args["text"]))
    if tool == "search":
        return cells_reply(m.search(args["query"], args["k"]))
    return cells_reply(m.conflicts())
