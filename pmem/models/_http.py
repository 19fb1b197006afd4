"""A minimal HTTP/1.1 server on asyncio streams, for the stand-in model server.

The stand-in exists to be measured *against*: its own cost per request must stay small next to the
client's. aiohttp's server machinery costs several times more per request than this loop, which only
does what an OpenAI-compatible endpoint needs: request line and headers, a body by Content-Length or
chunked encoding, keep-alive, and responses with a Content-Length. Handlers receive a :class:`Request`
with the slice of aiohttp's request interface they use and return aiohttp ``web.Response`` objects
(plain data holders here), so the same handlers also mount in an aiohttp application.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from multidict import CIMultiDict

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from aiohttp import web

_HEADER_LIMIT = 64 * 1024
_SKIP = frozenset({"content-length", "connection", "transfer-encoding"})


class Request:
    """What a handler sees: method, path, headers, the body, and the connection's transport."""

    __slots__ = ("body", "headers", "method", "path", "transport")

    def __init__(self, method: str, path: str, headers: CIMultiDict[str], body: bytes, transport: Any) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.transport = transport

    async def read(self) -> bytes:
        return self.body

    async def json(self) -> Any:
        return json.loads(self.body)




class _BadRequest(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def encode_response(resp: web.Response, keep_alive: bool) -> bytes:
    body = resp.body if isinstance(resp.body, (bytes, bytearray)) else b""
    head = [_status_line(resp.status)]
    for name, value in resp.headers.items():
        if name.lower() not in _SKIP:
            head.append(f"{name}: {value}\r\n".encode("latin-1"))
    head.append(f"Content-Length: {len(body)}\r\n".encode("latin-1"))
    head.append(b"Connection: keep-alive\r\n\r\n" if keep_alive else b"Connection: close\r\n\r\n")
    return b"".join(head) + bytes(body)


def _plain(status: int, why: str) -> bytes:
    body = json.dumps({"error": {"message": why}}).encode()
    return (
        _status_line(status)
        + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


async def _read_chunked(reader: asyncio.StreamReader, max_body: int) -> bytes:
    parts, size = [], 0
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            n = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadRequest(400, "bad chunk size") from None
        if n == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        size += n
        if size > max_body:
            raise _BadRequest(413, f"request body over {max_body} bytes")
        parts.append(await reader.readexactly(n))
        await reader.readexactly(2)


async def _read_request(reader: asyncio.StreamReader, max_body: int) -> tuple[str, str, str, CIMultiDict[str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise _BadRequest(400, f"bad request line {lines[0][:80]!r}") from None
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequest(400, f"bad header line {line[:80]!r}")
        headers.add(name.strip(), value.strip())
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        body = await _read_chunked(reader, max_body)
    else:
        try:
            n = int(headers.get("Content-Length", "0") or 0)
        except ValueError:
            raise _BadRequest(400, "bad Content-Length") from None
        if n > max_body:
            raise _BadRequest(413, f"request body over {max_body} bytes")
        body = await reader.readexactly(n) if n else b""
    return method, target.split("?", 1)[0], version, headers, body


class LeanServer:
    """Serves ``handler`` on host:port; :meth:`stop` closes connections and waits for their tasks."""

    def __init__(self, handler: Callable[[Request], Awaitable[web.StreamResponse]], max_body: int) -> None:
        self._handler = handler
        self._max_body = max_body
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> asyncio.Server:
        self._server = await asyncio.start_server(
            self._serve, host, port, reuse_port=reuse_port or None, limit=_HEADER_LIMIT
        )
        return self._server

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections[task] = writer
        try:
            while True:
                try:
                    method, path, version, headers, body = await _read_request(reader, self._max_body)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed the connection
                except asyncio.LimitOverrunError:
                    writer.write(_plain(431, "request headers too large"))
                    return
                except _BadRequest as exc:
                    writer.write(_plain(exc.status, str(exc)))
                    return
                resp = await self._handler(Request(method, path, headers, body, writer.transport))
                if writer.is_closing():  # the handler dropped the connection (an injected fault)
                    return
                connection = headers.get("Connection", "").lower()
                keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
                writer.write(encode_response(resp, keep))
                await writer.drain()
                if not keep:
                    return
        except ConnectionError:
            return
        finally:
            self._connections.pop(task, None)  # type: ignore[arg-type]
            writer.close()

    async def stop(self, timeout: float = 1.0) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections.values()):
            writer.close()
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:  # a handler still sleeping (the "slow" fault): cancel it
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*pending, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
