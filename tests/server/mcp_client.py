"""A real MCP client of ``pmem mcp``, for the server's tests: the SDK's ``ClientSession`` over stdio (the
server as its child process) or over streamable HTTP (the server started with ``--http --port 0``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import pmem.server

mcp = pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

#: The tools of the server's table (issue 48 named ten; issue 55 added recall): the server must list
#: exactly these, and the scripted conversation must call each.
TOOLS = tuple(tool.name for tool in pmem.server.TOOLS)
#: How long a server may take to start on a loaded machine.
START_TIMEOUT_S = 120


def command(store: Path, *extra: str) -> list[str]:
    """The ``pmem mcp`` command line for ``store``."""
    return [sys.executable, "-m", "pmem.cli", "mcp", "--store", str(store), *extra]


def reply(result: Any) -> Any:
    """A tool result's reply: its structured content (a list or null comes wrapped as ``result``), or
    the error's text as ``{"error": ...}``."""
    if result.is_error:
        return {"error": " ".join(block.text for block in result.content)}
    content = result.structured_content
    if isinstance(content, dict) and set(content) == {"result"}:
        return content["result"]
    return content


@contextlib.asynccontextmanager
async def stdio_session(store: Path, *extra: str) -> AsyncIterator[ClientSession]:
    """A session with ``pmem mcp --store STORE`` run as a child over stdio."""
    cmd = command(store, *extra)
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def start_http_server(store: Path, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``pmem mcp --http --port 0`` on ``store`` with ``env`` added; the process and its endpoint
    URL, once it serves. Its stderr goes to a file beside the store (a pipe nobody reads could fill and
    stall it), which a failed start shows."""
    log = store.with_name(f"{store.name}-server-{time.monotonic_ns()}.log")
    with open(log, "w") as err:
        process = subprocess.Popen(
            command(store, "--http", "--port", "0", *extra), env={**os.environ, **env}, stderr=err, text=True
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        text = log.read_text()
        for line in text.splitlines():
            if " on http://" in line:
                return process, line.rsplit(" on ", 1)[1].strip()
        if process.poll() is not None:
            pytest.fail(f"pmem mcp --http exited {process.returncode}: {text[-2000:]}")
        assert time.monotonic() < deadline, f"pmem mcp --http did not start: {text[-2000:]}"
        time.sleep(0.05)


def stop(process: subprocess.Popen[str]) -> None:
    """Stop a server (SIGTERM, then SIGKILL if it lingers)."""
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def http_server(store: Path, env: dict[str, str], *extra: str) -> Iterator[str]:
    """``pmem mcp --http --port 0`` on ``store`` with ``env`` added; yields its endpoint URL."""
    process, url = start_http_server(store, env, *extra)
    try:
        yield url
    finally:
        stop(process)


@contextlib.asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """A session with the server at ``url``, sending ``token`` as its bearer token (None: none)."""
    import httpx2

    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session
