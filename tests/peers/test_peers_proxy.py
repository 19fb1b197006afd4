"""The metering proxy: a peer library's OpenAI requests become recorded model-layer calls, one each,
with the model layer's token counts in the reply's ``usage``; what it cannot carry is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from chat_server import ChatServer, Step, chat_body

from pmem.models import RequestLog, make_chat_model, make_embedder
from pmem.peers import PEER_READ, PEER_WRITE, REPLY_TOKENS, MeteringProxy


async def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as reply:
        return reply.status, await reply.json()


def test_every_request_is_one_recorded_call_and_usage_is_the_model_layers() -> None:
    async def go() -> tuple[list[Any], list[Any], MeteringProxy]:
        log = RequestLog()
        proxy = MeteringProxy(make_chat_model("heuristic", log=log), make_embedder("hashing", log=log))
        replies = []
        async with proxy:
            chat = {"messages": [{"role": "user", "content": "### KEY_A\na.b\n### KEY_B\na.c"}]}
            replies.append(await _post(proxy.url + "/chat/completions", chat))
            proxy.purpose = PEER_READ
            replies.append(
                await _post(
                    proxy.url + "/chat/completions", {**chat, "response_format": {"type": "json_object"}}
                )
            )
            replies.append(await _post(proxy.url + "/embeddings", {"input": ["one", "two", "three"]}))
        return replies, log.records(), proxy

    replies, rows, proxy = asyncio.run(go())
    assert [status for status, _ in replies] == [200, 200, 200] and proxy.requests == 3
    assert [r.purpose for r in rows] == [PEER_WRITE, PEER_READ, "embed"]
    for (_, body), row in zip(replies[:2], rows[:2], strict=True):
        assert body["usage"]["prompt_tokens"] == row.prompt_tokens > 0
        assert body["usage"]["completion_tokens"] == row.completion_tokens
        assert body["choices"][0]["message"]["content"]
    assert (
        len(replies[2][1]["data"]) == 3 and replies[2][1]["usage"]["prompt_tokens"] == rows[2].prompt_tokens
    )


def test_what_the_model_layer_cannot_carry_is_refused_and_a_failed_call_is_kept() -> None:
    async def go() -> tuple[list[Any], MeteringProxy]:
        dead = make_chat_model(
            {"backend": "openai", "url": "http://127.0.0.1:9/v1", "model": "m", "max_retries": 0}
        )
        proxy = MeteringProxy(dead, make_embedder("hashing"))
        out = []
        async with proxy:
            tools = {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}
            out.append(await _post(proxy.url + "/chat/completions", tools))
            out.append(await _post(proxy.url + "/embeddings", {"input": [1, 2]}))
            out.append(
                await _post(proxy.url + "/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
            )
        return out, proxy

    (tools, bad_input, unreachable), proxy = asyncio.run(go())
    assert tools[0] == 400 and "tool calls" in tools[1]["error"]["message"]
    assert bad_input[0] == 400 and "input" in bad_input[1]["error"]["message"]
    assert unreachable[0] == 502 and proxy.failure and "127.0.0.1:9" in proxy.failure


def test_no_reply_may_be_longer_than_the_ceiling_whatever_the_library_asks() -> None:
    from pmem.models.server import ServerThread

    chat = {"messages": [{"role": "user", "content": "hello"}]}

    async def go(server: ServerThread, asked: dict[str, Any], ceiling: int = REPLY_TOKENS) -> int:
        agent = make_chat_model({"backend": "openai", "url": server.url, "model": "m", "max_retries": 0})
        async with MeteringProxy(agent, make_embedder("hashing"), reply_tokens=ceiling) as proxy:
            status, _ = await _post(proxy.url + "/chat/completions", {**chat, **asked})
        assert status == 200
        return server.server.largest_reply_asked

    for asked, sent in [
        ({"max_tokens": 16_384}, REPLY_TOKENS),  # Graphiti's default: held to the ceiling
        ({"max_completion_tokens": 10 * REPLY_TOKENS}, REPLY_TOKENS),
        ({}, REPLY_TOKENS),  # no limit asked: not the server's context, the ceiling
        ({"max_tokens": 100}, 100),  # a smaller limit is the library's to ask
    ]:
        with ServerThread() as server:
            assert asyncio.run(go(server, asked)) == sent, asked
    # a raised ceiling (an arm's reply_tokens) is the limit when the library asks for none or for more
    for asked, sent in [({}, 3 * REPLY_TOKENS), ({"max_tokens": 16_384}, 3 * REPLY_TOKENS)]:
        with ServerThread() as server:
            assert asyncio.run(go(server, asked, 3 * REPLY_TOKENS)) == sent, asked


def test_a_library_asking_for_any_json_object_reaches_llama_cpp_as_its_json_mode() -> None:
    # Mem0 asks for json_object; sent on as the schema {"type": "object"}, llama.cpp's grammar of it made
    # Qwen2.5-1.5B answer every extraction with an empty list, so Mem0 stored nothing
    schema = {"type": "object", "properties": {"edges": {"type": "array"}}}
    asked = [{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "e", "schema": schema}}]

    async def go() -> list[dict[str, Any]]:
        async with ChatServer(default=Step(200, chat_body('{"memory": []}'))) as server:
            agent = make_chat_model(
                {"backend": "openai", "url": server.url, "model": "m", "structured": "json_object"}
            )
            async with MeteringProxy(agent, make_embedder("hashing")) as proxy:
                chat = {"messages": [{"role": "user", "content": "Alice moved to Paris."}]}
                for response_format in asked:
                    status, _ = await _post(
                        proxy.url + "/chat/completions", {**chat, "response_format": response_format}
                    )
                    assert status == 200
            return server.requests

    plain, with_schema = (r["response_format"] for r in asyncio.run(go()))
    assert plain == {"type": "json_object"}
    assert with_schema == {"type": "json_object", "schema": schema}  # a real schema still constrains
