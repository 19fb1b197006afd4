"""A scripted OpenAI-compatible chat server on 127.0.0.1 that records what it is sent: for tests of the
model layer's requests and of whatever sends through it (the peers' proxy)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


def chat_body(
    text: str = "ok", *, finish: str | None = "stop", usage: tuple[int, int] | None = (11, 3)
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
    return body


@dataclass
class Step:
    """How the server answers one request: after ``delay`` seconds, ``status`` with ``body``."""

    status: int = 200
    body: dict[str, Any] | None = None  # None: a chat reply echoing the prompt
    delay: float = 0.0


async def serve_locally(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on a free port of 127.0.0.1: its runner (to clean up) and its ``/v1`` base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"


@dataclass
class ChatServer:
    """An aiohttp server on 127.0.0.1 answering ``/v1/chat/completions`` with the next scripted step
    (``default`` once the script is used up), recording every request's JSON payload.

    ``serial_s`` makes it serve one request at a time, holding a lock that long per request (as
    llama-cpp-python's server does)."""

    script: list[Step] = field(default_factory=list)
    default: Step = field(default_factory=Step)
    serial_s: float | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _release: asyncio.Event | None = None
    _lock: asyncio.Lock | None = None

    async def _chat(self, request: web.Request) -> web.Response:
        payload = await request.json()
        self.requests.append(payload)
        step = self.script.pop(0) if self.script else self.default
        if self.serial_s is not None:
            assert self._lock is not None
            async with self._lock:
                await asyncio.sleep(self.serial_s)
        elif step.delay:
            assert self._release is not None
            # a long delay ends when the server closes, so that cleanup does not wait for it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._release.wait(), step.delay)
        body = (
            step.body
            if step.body is not None
            else chat_body(f"reply to {payload['messages'][-1]['content']}")
        )
        return web.json_response(body, status=step.status)

    async def __aenter__(self) -> ChatServer:
        self._release, self._lock = asyncio.Event(), asyncio.Lock()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner, self.url = await serve_locally(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None and self._release is not None
        self._release.set()
        await self._runner.cleanup()
