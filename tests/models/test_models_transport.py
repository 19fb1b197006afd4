"""The HTTP/1.1 client transport against real sockets: scripted servers on 127.0.0.1 and aiohttp's."""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmem.models import ModelCallError
from pmem.models._openai import OpenAIClient
from pmem.models._transport import HEAD_LIMIT, ConnectionPool, Response, TransportError, _ResponseParser


@dataclass
class Reply:
    """What the scripted server does for one request: write ``pieces`` (pausing between), then maybe close."""

    pieces: list[bytes]
    close: bool = False
    hang: bool = False


@dataclass
class Scripted:
    replies: list[Reply]
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)  # (head, body) as received
    connections: int = 0
    server: asyncio.base_events.Server | None = None
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                reply = self.replies.pop(0)
                for piece in reply.pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.002)
                if reply.hang:
                    await asyncio.sleep(30)
                if reply.close:
                    return
        except asyncio.CancelledError:
            pass  # the test's loop is shutting down
        finally:
            writer.close()

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


def ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def chunked(body: bytes, size: int = 7, trailer: bytes = b"") -> bytes:
    out = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out.append(f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n")
    out.append(b"0\r\n" + trailer + b"\r\n")
    return b"".join(out)


def run(coro):
    return asyncio.run(coro)


async def one(url: str, replies: list[Reply], n: int = 1, timeout_s: float = 5.0) -> tuple[list[Response], Scripted]:
    async with Scripted(replies) as srv:
        pool = ConnectionPool(url.format(srv.url), limit=4)
        try:
            out = [await pool.request("POST", "/x", body=b"{}", timeout_s=timeout_s) for _ in range(n)]
        finally:
            await pool.aclose()
        return out, srv


def test_keep_alive_reuses_one_connection_and_sends_a_proper_request() -> None:
    out, srv = run(one("{}/v1", [Reply([ok(b'{"a":1}')]) for _ in range(5)], n=5))
    assert [r.body for r in out] == [b'{"a":1}'] * 5 and all(r.keep_alive for r in out)
    assert srv.connections == 1
    head, body = srv.requests[0]
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/x HTTP/1.1" and body == b"{}"
    assert f"Host: {srv.url.removeprefix('http://')}" in lines and "Content-Length: 2" in lines


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_chunked_body_with_extensions_and_trailers(size: int) -> None:
    body = json.dumps({"text": "x" * 300}).encode()
    replies = [Reply([chunked(body, size)]), Reply([chunked(body, size, trailer=b"X-Checksum: 1\r\n")])]
    out, srv = run(one("{}", replies, n=2))
    assert [r.body for r in out] == [body, body] and srv.connections == 1


def test_body_framed_by_close_and_connection_close_header() -> None:
    replies = [
        Reply([b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", b"part one, ", b"part two"], close=True),
        Reply([ok(b"{}", "Connection: close")], close=True),
        Reply([b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"], close=True),
        Reply([ok(b"[]")]),
    ]
    out, srv = run(one("{}", replies, n=4))
    assert [r.body for r in out] == [b"part one, part two", b"{}", b"{}", b"[]"]
    assert [r.keep_alive for r in out] == [False, False, False, True]
    assert srv.connections == 4


def test_informational_and_bodiless_responses() -> None:
    replies = [
        Reply([b"HTTP/1.1 100 Continue\r\n\r\n", ok(b'{"b":2}')]),
        Reply([b"HTTP/1.1 204 No Content\r\n\r\n"]),
        Reply([ok(b"{}")]),
    ]
    out, srv = run(one("{}", replies, n=3))
    assert [(r.status, r.body) for r in out] == [(200, b'{"b":2}'), (204, b""), (200, b"{}")]
    assert srv.connections == 1


def test_a_stale_keep_alive_connection_is_replaced_transparently() -> None:
    # the server answers, then closes the idle connection; the next request must not see an error
    out, srv = run(one("{}", [Reply([ok(b"1")], close=True), Reply([ok(b"2")], close=True), Reply([ok(b"3")])], n=3))
    assert [r.body for r in out] == [b"1", b"2", b"3"] and srv.connections == 3


@pytest.mark.parametrize(
    ("pieces", "why"),
    [
        ([b"SPDY/9 200 OK\r\n\r\n"], "not an HTTP/1.x status line"),
        ([b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"], "malformed response header line"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n"], "malformed Content-Length"),
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"], "malformed chunk size"),
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n"], "does not end in CRLF"),
        ([b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (HEAD_LIMIT + 10)], "exceed"),
    ],
)
def test_malformed_responses_raise_a_transport_error_naming_the_endpoint(pieces: list[bytes], why: str) -> None:
    with pytest.raises(TransportError, match=why) as info:
        run(one("{}", [Reply(pieces, hang=True)]))
    assert "http://127.0.0.1:" in str(info.value)


def test_a_response_cut_short_is_a_transport_error() -> None:
    with pytest.raises(TransportError, match="closed the connection before the response was complete"):
        run(one("{}", [Reply([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"], close=True)]))


def test_timeout_and_the_pool_drops_the_connection() -> None:
    async def go() -> tuple[int, bytes]:
        async with Scripted([Reply([], hang=True), Reply([ok(b"after")])]) as srv:
            pool = ConnectionPool(srv.url)
            with pytest.raises(TimeoutError):
                await pool.request("POST", "/x", timeout_s=0.2)
            resp = await pool.request("POST", "/x", timeout_s=5)
            await pool.aclose()
            return srv.connections, resp.body

    assert run(go()) == (2, b"after")


def test_connection_refused_names_the_endpoint() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(TransportError, match=f"cannot connect to http://127.0.0.1:{port}"):
            run(ConnectionPool(f"http://127.0.0.1:{port}").request("GET", "/", timeout_s=5))


def test_bad_urls_are_refused_up_front() -> None:
    for url in ("ftp://host/v1", "127.0.0.1:8000/v1", "http:///v1"):
        with pytest.raises(ValueError, match="model endpoint URL"):
            OpenAIClient(url)


def test_client_over_the_transport_retries_and_reports_redirects() -> None:
    async def go() -> tuple[dict, str, int]:
        replies = [
            Reply([b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Length: 4\r\n\r\nbusy"]),
            Reply([b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{not"]),
            Reply([chunked(b'{"ok": true}', 3)]),
            Reply([b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere/v1\r\nContent-Length: 0\r\n\r\n"]),
        ]
        async with Scripted(replies) as srv:
            client = OpenAIClient(f"{srv.url}/v1", api_key="k", max_retries=3, backoff_s=0.001, timeout_s=5)
            data = await client.post_json("/chat/completions", {"m": 1})
            with pytest.raises(ModelCallError) as info:
                await client.post_json("/chat/completions", {"m": 2})
            await client.aclose()
            head = srv.requests[0][0].decode()
            assert "Authorization: Bearer k" in head and "Content-Type: application/json" in head
            return data, str(info.value), client.requests_sent

    data, error, sent = run(go())
    assert data == {"ok": True}
    assert "HTTP 307" in error and "Location: http://elsewhere/v1" in error
    assert sent == 4  # 503 and the non-JSON body were retried; the redirect was not


def test_against_aiohttps_chunked_server() -> None:
    from aiohttp import web

    async def chat(request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        text = json.dumps({"echo": payload, "pad": "y" * 5000}).encode()
        for i in range(0, len(text), 1000):
            await resp.write(text[i : i + 1000])
        await resp.write_eof()
        return resp

    async def go() -> list[dict]:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        client = OpenAIClient(f"http://127.0.0.1:{port}/v1", concurrency=8)
        try:
            return await asyncio.gather(*(client.post_json("/chat/completions", {"i": i}) for i in range(40)))
        finally:
            await client.aclose()
            await runner.cleanup()

    out = run(go())
    assert [d["echo"]["i"] for d in out] == list(range(40)) and all(len(d["pad"]) == 5000 for d in out)


_STREAMS = [
    ok(b'{"k": "v"}', "X-A: 1", "X-A: 2"),
    chunked(b"0123456789abcdef" * 5, 5, trailer=b"T: x\r\n"),
    b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"[1,2,3]"),
    b"HTTP/1.1 204 No Content\r\n\r\n",
]


@settings(max_examples=200, deadline=None)
@given(which=st.integers(0, len(_STREAMS) - 1), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_parser_result_does_not_depend_on_how_bytes_arrive(which: int, cuts: list[int]) -> None:
    stream = _STREAMS[which]
    whole = _ResponseParser().feed(stream)
    assert whole is not None
    points = sorted({c % (len(stream) + 1) for c in cuts} - {0} | {len(stream)})
    parser, got, last = _ResponseParser(), None, 0
    for point in points:
        assert got is None  # nothing completes before the last byte has arrived
        got = parser.feed(stream[last:point])
        last = point
    assert got is not None
    assert (got.status, got.headers, got.body, got.keep_alive) == (whole.status, whole.headers, whole.body, True)
    if which == 0:
        assert whole.headers["x-a"] == "1, 2"


def test_https_with_a_private_ca(tmp_path, monkeypatch) -> None:
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    async def go(trusted: bool) -> bytes:
        async with Scripted([Reply([ok(b'{"tls": 1}')]), Reply([ok(b'{"tls": 2}')])]) as plain:
            port = int(plain.url.rsplit(":", 1)[1])
            plain.server.close()
            tls = await asyncio.start_server(plain.handle, "127.0.0.1", port, ssl=server_ctx)
            try:
                if trusted:
                    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
                pool = ConnectionPool(f"https://127.0.0.1:{port}/v1")
                bodies = [(await pool.request("POST", "/x", body=b"{}", timeout_s=5)).body for _ in range(2)]
                await pool.aclose()
                assert plain.connections == 1
                return b"".join(bodies)
            finally:
                tls.close()

    with pytest.raises(TransportError, match=r"cannot connect to https://127\.0\.0\.1:\d+: .*CERTIFICATE_VERIFY_FAILED"):
        run(go(trusted=False))
    assert run(go(trusted=True)) == b'{"tls": 1}{"tls": 2}'


def test_docstring_example_runs() -> None:
    import doctest

    import pmem.models._transport as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
