"""The metering proxy: an OpenAI-compatible endpoint on 127.0.0.1 that a peer library is pointed at.

A peer library (Mem0, Graphiti) makes its own HTTP calls. Instead of patching it, the harness gives it a
base URL of its own: each request that arrives here becomes one call of the harness's model layer (the
history's recorded chat model or embedder), so it is routed to the sweep's replicas, cached, retried and
written to ``requests/`` with the history, the arm and the purpose, like any arm's call. The purpose is
the arm's to set (:attr:`MeteringProxy.purpose`): ``peer_write`` while it ingests, ``peer_read`` while it
searches.

What the model layer cannot carry (tool calls, several choices) is refused with HTTP 400 and a message
naming the field; a call that failed for good is HTTP 502 with the model layer's reason, and
:attr:`MeteringProxy.failure` keeps the first such reason so the arm can fail the history with it. Neither
is asked again by the library's client (``x-should-retry: false``).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from pmem.memory.prompts import template
from pmem.memory.writepath import PEER_READ, PEER_WRITE
from pmem.models import ANY_JSON_OBJECT, ModelCallError

if TYPE_CHECKING:
    from collections.abc import Callable

    from pmem.models import ChatModel, Completion, Embedder

__all__ = ["PEER_READ", "PEER_WRITE", "REPLY_TOKENS", "MeteringProxy"]  # the purposes are the writer's

#: the longest reply a peer library gets: the ceiling of our own extraction call. The proxy holds every
#: request to it, whatever the library asks (Graphiti asks for 16,384 by default, which a small model fills
#: by looping inside its JSON; without ``max_tokens`` a server may reply up to its context).
REPLY_TOKENS = template("extract").max_tokens


class MeteringProxy:
    """An OpenAI-compatible server on 127.0.0.1 whose every request is one model-layer call.

    Args:
        agent: the chat model calls go to (a history's recorded view in a sweep).
        embedder: the embedder embedding requests go to.
        model_name: the model name the library is told to use (any name is accepted).
        reply_tokens: the most tokens a reply may have; a request asking for more (or for no limit)
            gets this many.
        on_reply: called with the purpose and the completion of every chat call that got a reply.

    >>> import asyncio, json, urllib.request
    >>> from pmem.models import make_chat_model, make_embedder
    >>> async def demo():
    ...     async with MeteringProxy(make_chat_model("heuristic"), make_embedder("hashing")) as proxy:
    ...         body = json.dumps({"input": ["a", "b"]}).encode()
    ...         req = urllib.request.Request(proxy.url + "/embeddings", body, {"Content-Type": "application/json"})
    ...         reply = await asyncio.to_thread(lambda: json.load(urllib.request.urlopen(req)))
    ...         return len(reply["data"]), proxy.requests
    >>> asyncio.run(demo())
    (2, 1)
    """

    def __init__(
        self,
        agent: ChatModel,
        embedder: Embedder,
        *,
        model_name: str = "agent",
        reply_tokens: int = REPLY_TOKENS,
        on_reply: Callable[[str, Completion], None] | None = None,
    ) -> None:
        self.agent = agent
        self.embedder = embedder
        self.model_name = model_name
        self.reply_tokens = reply_tokens  # the ceiling of every reply's max_tokens, whatever is asked
        self.on_reply = on_reply  # told of each chat completion with its purpose (the arm's write accounting)
        #: the purpose tag of the calls from now on (the arm switches it between writing and reading)
        self.purpose = PEER_WRITE
        #: the first reason a call got no reply (the history fails with it), or None
        self.failure: str | None = None
        self.requests = 0  # requests served (any route)
        self._runner: web.AppRunner | None = None  # the aiohttp server, while started
        self._url: str | None = None

    @property
    def url(self) -> str:
        """The base URL to give the library (``http://127.0.0.1:PORT/v1``)."""
        if self._url is None:
            msg = "the metering proxy is not started"
            raise RuntimeError(msg)
        return self._url

    async def start(self) -> str:
        """Listen on a free local port; the base URL."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self._url = f"http://127.0.0.1:{port}/v1"
        return self._url

    async def stop(self) -> None:
        """Stop listening (requests in flight are answered first)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> MeteringProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ routes

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model_name, "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = await request.json()
        refused = _unsupported(body)
        if refused:
            return _error(400, f"the metering proxy cannot carry {refused}")
        messages = [
            {"role": str(m.get("role", "user")), "content": _text(m.get("content"))} for m in body["messages"]
        ]
        asked = body.get("max_tokens") or body.get("max_completion_tokens") or self.reply_tokens
        try:
            c = await self.agent.complete(
                messages,
                purpose=self.purpose,
                max_tokens=min(int(asked), self.reply_tokens),
                temperature=float(body.get("temperature") or 0.0),
                schema=_schema(body.get("response_format")),
            )
        except ModelCallError as exc:  # a sweep's recorded model raises what a bare one returns
            self.failure = self.failure or str(exc)
            return _error(502, str(exc))
        if c.error is not None and not c.overflow:
            self.failure = self.failure or c.error
            return _error(502, c.error)
        if c.error is not None:  # the prompt does not fit the model's context: the library's request fails
            return _error(400, c.error)
        if self.on_reply is not None:
            self.on_reply(self.purpose, c)
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": c.text},
                        "finish_reason": c.finish_reason or "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": c.prompt_tokens,
                    "completion_tokens": c.completion_tokens,
                    "total_tokens": c.prompt_tokens + c.completion_tokens,
                },
            }
        )

    async def _embeddings(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = await request.json()
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return _error(400, "embeddings: 'input' must be a string or a list of strings")
        try:
            embedding = await self.embedder.embed_usage(texts)
        except ModelCallError as exc:  # the model layer gave up: the library's request fails with the reason
            self.failure = self.failure or str(exc)
            return _error(502, str(exc))
        data = [
            {"object": "embedding", "index": i, "embedding": vector.tolist()}
            for i, vector in enumerate(embedding.vectors)
        ]
        usage = {"prompt_tokens": embedding.prompt_tokens, "total_tokens": embedding.prompt_tokens}
        return web.json_response({"object": "list", "data": data, "model": self.model_name, "usage": usage})


def _error(status: int, message: str) -> web.Response:
    """An error answer the library's openai client does not ask again: a refusal is the same every time,
    and a failed call has had the model layer's retries and failover already (``x-should-retry`` is the
    openai SDK's header for it)."""
    body = {"error": {"message": message, "type": "metering_proxy"}}
    return web.json_response(body, status=status, headers={"x-should-retry": "false"})


def _unsupported(body: dict[str, Any]) -> str | None:
    """What of a chat request the model layer cannot carry (None when it can carry all of it)."""
    if not isinstance(body.get("messages"), list):
        return "a request without a 'messages' list"
    if body.get("tools") or body.get("functions"):
        return "tool calls ('tools')"
    if int(body.get("n") or 1) != 1:
        return "several choices ('n')"
    if body.get("stream"):
        return "streamed replies ('stream')"
    return None


def _text(content: Any) -> str:
    """A message's content as text (a list of parts: their text parts, joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _schema(response_format: Any) -> dict[str, Any] | None:
    """The JSON schema the reply must follow, from the request's ``response_format``."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else ANY_JSON_OBJECT
    if kind == "json_object":
        return ANY_JSON_OBJECT
    return None
