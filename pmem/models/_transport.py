"""A small HTTP/1.1 client over asyncio protocols: the `openai` backend's transport.

Why not aiohttp: at the request rates a sweep drives (thousands per second from one process, each a
small JSON exchange), aiohttp's client machinery costs about 90 µs of CPU per request, enough on its
own to keep 64 concurrent callers from reaching a 20 ms server's ideal throughput. An OpenAI-compatible
endpoint needs only a narrow slice of HTTP: POST with a Content-Length body, keep-alive connections, and
responses framed by Content-Length, chunked transfer encoding or connection close. This module does
exactly that, with ``http`` and ``https`` URLs, and nothing else (no redirects, no cookies, no proxies,
no compression: it asks for ``identity``).

Failures are :class:`TransportError` (connection refused or lost, malformed responses) or
``TimeoutError`` (the per-request deadline); the caller decides about retries. A keep-alive
connection the server closed while it sat idle is detected and the request re-sent once on a fresh
connection, as browsers and aiohttp do, since no byte of a response had arrived.

Example:
    >>> import asyncio
    >>> from pmem.models.server import ServerThread
    >>> async def ping(url: str) -> int:
    ...     pool = ConnectionPool(url)
    ...     try:
    ...         return (await pool.request("GET", "/health", timeout_s=5)).status
    ...     finally:
    ...         await pool.aclose()
    >>> with ServerThread() as srv:
    ...     asyncio.run(ping(srv.url.removesuffix("/v1")))
    200
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, urlsplit

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ConnectionPool", "Response", "TransportError", "check_url"]

HEAD_LIMIT = 64 * 1024  # status line plus headers; chunk-size lines and trailers share it
_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _UNTIL_CLOSE = range(6)


class TransportError(Exception):
    """The exchange failed below HTTP semantics: no connection, a lost one, or a malformed response."""


class _Disconnected(TransportError):
    def __init__(self, msg: str, *, response_started: bool) -> None:
        super().__init__(msg)
        self.response_started = response_started


class Response:
    """Status, headers (names lower-cased, repeats joined with ``, ``) and the whole body."""

    __slots__ = ("body", "headers", "keep_alive", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes, keep_alive: bool) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive

    def __repr__(self) -> str:
        return f"Response(status={self.status}, {len(self.body)} bytes)"


class _ResponseParser:
    """Incremental parser for one response at a time (no pipelining)."""

    __slots__ = ("_body", "_buf", "_close", "_headers", "_remaining", "_scan", "_state", "_status", "started")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._buf = bytearray()
        self._scan = 0
        self._state = _HEAD
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body = bytearray()
        self._remaining = 0
        self._close = False
        self.started = False

    def feed(self, data: bytes) -> Response | None:
        """Consume bytes; the response once complete, else None. Raises TransportError on bad framing."""
        self.started = True
        if self._state == _UNTIL_CLOSE:
            self._body += data
            return None
        buf = self._buf
        buf += data
        while True:
            state = self._state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n", self._scan)
                if end < 0:
                    self._check_limit(len(buf), "response headers")
                    self._scan = max(0, len(buf) - 3)
                    return None
                self._check_limit(end, "response headers")
                self._parse_head(bytes(buf[:end]))
                del buf[: end + 4]
                self._scan = 0
                if self._state == _HEAD:  # an informational 1xx: the real response follows
                    continue
                if self._state == _BODY and self._remaining == 0:
                    return self._finish()
            elif state == _BODY:
                if len(buf) < self._remaining:
                    return None
                self._body = buf[: self._remaining]
                del buf[: self._remaining]
                return self._finish()
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    self._check_limit(len(buf), "a chunk-size line")
                    return None
                field = bytes(buf[:end]).split(b";", 1)[0].strip()
                try:
                    size = int(field, 16)
                except ValueError:
                    msg = f"malformed chunk size {field[:40]!r} in a chunked response"
                    raise TransportError(msg) from None
                if size < 0:
                    msg = f"negative chunk size {field[:40]!r} in a chunked response"
                    raise TransportError(msg)
                del buf[: end + 2]
                self._remaining = size
                self._state = _CHUNK_DATA if size else _TRAILER
            elif state == _CHUNK_DATA:
                if len(buf) < self._remaining + 2:
                    return None
                if buf[self._remaining : self._remaining + 2] != b"\r\n":
                    msg = "a chunk of a chunked response does not end in CRLF"
                    raise TransportError(msg)
                self._body += buf[: self._remaining]
                del buf[: self._remaining + 2]
                self._state = _CHUNK_SIZE
            elif state == _TRAILER:
                if buf[:2] == b"\r\n":
                    del buf[:2]
                    return self._finish()
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    self._check_limit(len(buf), "chunked trailers")
                    return None
                del buf[: end + 4]
                return self._finish()
            else:  # _UNTIL_CLOSE, entered from _HEAD with bytes already buffered
                self._body += buf
                buf.clear()
                return None

    def feed_eof(self) -> Response | None:
        """The server closed: the response if it was framed by the close, else None (it was cut short)."""
        if self._state == _UNTIL_CLOSE:
            return self._finish()
        return None

    def _check_limit(self, size: int, what: str) -> None:
        if size > HEAD_LIMIT:
            msg = f"{what} exceed {HEAD_LIMIT} bytes"
            raise TransportError(msg)

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            msg = f"not an HTTP/1.x status line: {lines[0][:80]!r}"
            raise TransportError(msg)
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                msg = f"malformed response header line {line[:80]!r}"
                raise TransportError(msg)
            name, value = name.lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if 100 <= status < 200:
            return  # stay in _HEAD
        self._status, self._headers = status, headers
        connection = headers.get("connection", "").lower()
        self._close = "close" in connection or (parts[0] == "HTTP/1.0" and "keep-alive" not in connection)
        if status in (204, 304):
            self._state, self._remaining = _BODY, 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            length = headers["content-length"].split(",")[0].strip()
            if not length.isdigit():
                msg = f"malformed Content-Length {headers['content-length'][:40]!r}"
                raise TransportError(msg)
            self._state, self._remaining = _BODY, int(length)
        else:
            self._state, self._close = _UNTIL_CLOSE, True

    def _finish(self) -> Response:
        leftover = bool(self._buf)  # bytes after a complete response: the connection is out of step
        response = Response(self._status, self._headers, bytes(self._body), not (self._close or leftover))
        self.reset()
        return response


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight on it."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._parser = _ResponseParser()
        self._waiter: asyncio.Future[Response] | None = None
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self.close()  # bytes nobody asked for: the connection cannot be trusted
            return
        try:
            response = self._parser.feed(data)
        except TransportError as exc:
            self._waiter = None
            waiter.set_exception(TransportError(f"{self._where}: {exc}"))
            self.close()
            return
        if response is not None:
            self._waiter = None
            waiter.set_result(response)

    def eof_received(self) -> bool:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            response = self._parser.feed_eof()
            if response is not None:
                self._waiter = None
                waiter.set_result(response)
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            why = f": {exc}" if exc else ""
            msg = f"{self._where}: the server closed the connection before the response was complete{why}"
            waiter.set_exception(_Disconnected(msg, response_started=self._parser.started))

    def send(self, data: bytes) -> asyncio.Future[Response]:
        assert self.transport is not None and self._waiter is None
        self._parser.reset()
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter

    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def check_url(base_url: str) -> SplitResult:
    """The URL's parts, or ValueError when it is not an ``http``/``https`` URL with a host."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = f"model endpoint URL must be http://host[:port]/... or https://..., got {base_url!r}"
        raise ValueError(msg)
    return parts


class ConnectionPool:
    """Keep-alive HTTP/1.1 connections to one origin, bound to the event loop that first uses it.

    ``base_url`` is ``http://host[:port][/prefix]`` or ``https://...``; request paths are appended to
    the prefix. At most ``limit`` idle connections are kept; callers bound concurrency themselves.
    """

    def __init__(self, base_url: str, *, limit: int = 64, headers: Mapping[str, str] | None = None) -> None:
        parts = check_url(base_url)
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.limit = int(limit)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        authority = host if default_port else f"{host}:{self.port}"
        fixed = {"Host": authority, "User-Agent": "pmem", "Accept-Encoding": "identity", **(headers or {})}
        self._fixed_head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._where = f"{parts.scheme}://{authority}"
        self._idle: list[_Connection] = []
        self.connections_opened = 0

    def _encode(self, method: str, path: str, headers: Mapping[str, str] | None, body: bytes) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._fixed_head}{extra}Content-Length: {len(body)}\r\n\r\n"
        return head.encode("latin-1") + body

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                lambda: _Connection(self._where), self.host, self.port, ssl=self._ssl,
                server_hostname=self.host if self._ssl else None,
            )
        except (OSError, ssl.SSLError) as exc:
            msg = f"cannot connect to {self._where}: {exc}"
            raise TransportError(msg) from exc
        self.connections_opened += 1
        return conn

    async def request(self, method: str, path: str, *, headers: Mapping[str, str] | None = None,
                      body: bytes = b"", timeout_s: float) -> Response:
        """Send one request and read its whole response within ``timeout_s`` (else ``TimeoutError``)."""
        data = self._encode(method, path, headers, body)
        async with asyncio.timeout(timeout_s):
            while True:
                conn = None
                while self._idle:
                    candidate = self._idle.pop()
                    if candidate.usable():
                        conn = candidate
                        break
                reused = conn is not None
                if conn is None:
                    conn = await self._open()
                try:
                    response = await conn.send(data)
                except _Disconnected as exc:
                    if reused and not exc.response_started:
                        continue  # the server dropped an idle keep-alive connection: re-send on a fresh one
                    raise
                except BaseException:
                    conn.close()  # a timeout or cancellation mid-exchange leaves the connection out of step
                    raise
                if response.keep_alive and conn.usable() and len(self._idle) < self.limit:
                    self._idle.append(conn)
                else:
                    conn.close()
                return response

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if idle:
            await asyncio.sleep(0)  # let the transports run their close callbacks on this loop
