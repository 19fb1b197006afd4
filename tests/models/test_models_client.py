"""The `openai` backend's HTTP client (aiohttp) against real sockets: scripted servers on 127.0.0.1 that
write raw responses (framings, faults), aiohttp servers, TLS with a private CA and proxies from the
environment."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import shutil
import ssl
import subprocess
from asyncio import run
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from ports import closed_port_url

from pmem.models import ModelCallError
from pmem.models._openai import OpenAIClient

PKG = Path(__file__).resolve().parents[2] / "pmem"


@dataclass
class Reply:
    """What the scripted server does for one request: write ``pieces`` (pausing between), then maybe close."""

    pieces: list[bytes]
    close: bool = False
    hang: bool = False


@dataclass
class Scripted:
    """A raw HTTP/1.1 server on 127.0.0.1 that answers each request with the next scripted reply."""

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
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def chunked(body: bytes, size: int = 7, trailer: bytes = b"") -> bytes:
    out = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out.append(f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n")
    out.append(b"0\r\n" + trailer + b"\r\n")
    return b"".join(out)


def client(url: str, **kw) -> OpenAIClient:
    return OpenAIClient(url, **{"max_retries": 0, "backoff_s": 0.001, "timeout_s": 5.0, **kw})


async def posts(
    replies: list[Reply], n: int = 1, pause: float = 0.0, **kw
) -> tuple[list[dict], Scripted, int]:
    """``n`` sequential posts through one client; (their JSON, the server, requests the client sent)."""
    async with Scripted(replies) as srv:
        c = client(f"{srv.url}/v1", **kw)
        out = []
        try:
            for _ in range(n):
                out.append((await c.post_json("/x", {})).data)
                await asyncio.sleep(pause)
        finally:
            await c.aclose()
        return out, srv, c.requests_sent


def test_keep_alive_reuses_one_connection_and_sends_a_proper_request() -> None:
    out, srv, sent = run(posts([Reply([ok(b'{"a":1}')]) for _ in range(5)], n=5, api_key="k"))
    assert out == [{"a": 1}] * 5 and sent == 5
    assert srv.connections == 1
    head, body = srv.requests[0]
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/x HTTP/1.1" and body == b"{}"
    assert f"Host: {srv.url.removeprefix('http://')}" in lines and "Content-Length: 2" in lines
    assert "Authorization: Bearer k" in lines and "Content-Type: application/json" in lines


@pytest.mark.parametrize(
    "reply",
    [
        chunked(json.dumps({"text": "x" * 300}).encode(), 1),
        chunked(json.dumps({"text": "x" * 300}).encode(), 4096, trailer=b"X-Checksum: 1\r\n"),
        b"HTTP/1.1 100 Continue\r\n\r\n" + ok(json.dumps({"text": "x" * 300}).encode()),
    ],
    ids=["chunked", "chunked-trailer", "informational"],
)
def test_response_framings(reply: bytes) -> None:
    out, srv, _ = run(posts([Reply([reply]), Reply([reply])], n=2))
    assert out == [{"text": "x" * 300}] * 2 and srv.connections == 1


def test_body_framed_by_close_and_connection_close_header() -> None:
    replies = [
        Reply(
            [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", b'{"part": ', b"1}"], close=True
        ),
        Reply([ok(b"{}", "Connection: close")], close=True),
        Reply([b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"], close=True),
        Reply([ok(b"[]")]),
    ]
    out, srv, sent = run(posts(replies, n=4))
    assert out == [{"part": 1}, {}, {}, []] and sent == 4  # no attempt was lost to a closed connection
    assert srv.connections == 4


def test_a_keep_alive_connection_the_server_closed_while_idle_is_replaced() -> None:
    # the server answers, then closes the idle connection: the next request goes out on a new one,
    # without a failed attempt (max_retries is 0)
    out, srv, sent = run(
        posts(
            [Reply([ok(b"1")], close=True), Reply([ok(b"2")], close=True), Reply([ok(b"3")])], n=3, pause=0.05
        )
    )
    assert out == [1, 2, 3] and sent == 3 and srv.connections == 3


@pytest.mark.parametrize(
    "pieces",
    [
        [b"SPDY/9 200 OK\r\n\r\n"],
        [b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"],
        [b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n"],
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"],
        [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"],  # then the server closes
    ],
    ids=["status-line", "header", "content-length", "chunk-size", "cut-short"],
)
def test_malformed_responses_are_retried_then_fail_naming_the_endpoint(pieces: list[bytes]) -> None:
    with pytest.raises(ModelCallError) as info:
        run(posts([Reply(pieces, close=True), Reply(pieces, close=True)], max_retries=1))
    assert re.search(r"POST http://127\.0\.0\.1:\d+/v1/x failed after 2 attempt\(s\)", str(info.value))
    assert info.value.failover  # the endpoint misbehaves: a router may try another replica
    out, _, sent = run(posts([Reply(pieces, close=True), Reply([ok(b'{"ok": 1}')])], max_retries=1))
    assert out == [{"ok": 1}] and sent == 2


def test_timeout_then_a_fresh_connection() -> None:
    async def go() -> tuple[str, dict, int]:
        async with Scripted([Reply([], hang=True), Reply([ok(b'{"after": 1}')])]) as srv:
            c = client(f"{srv.url}/v1", timeout_s=0.3)
            with pytest.raises(ModelCallError) as info:
                await c.post_json("/x", {})
            data = (
                await c.post_json("/x", {})
            ).data  # not on the connection that timed out: it is out of step
            await c.aclose()
            return str(info.value), data, srv.connections

    error, data, connections = run(go())
    assert "timed out after 0.3 s" in error and data == {"after": 1} and connections == 2
    assert error.startswith("POST http://127.0.0.1:")


def test_connection_refused_names_the_endpoint() -> None:
    url = closed_port_url()  # nothing listens: connections are refused
    with pytest.raises(ModelCallError, match=f"cannot connect to {url[:-3]}") as info:
        run(client(url).post_json("/x", {}))
    assert f"POST {url}/x failed after 1 attempt(s)" in str(info.value)
    assert info.value.failover


def test_bad_urls_are_refused_up_front() -> None:
    for url in ("ftp://host/v1", "127.0.0.1:8000/v1", "http:///v1"):
        with pytest.raises(ValueError, match="model endpoint URL"):
            OpenAIClient(url)


def test_retries_with_retry_after_and_no_redirects() -> None:
    async def go() -> tuple[dict, str, int]:
        replies = [
            Reply([b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Length: 4\r\n\r\nbusy"]),
            Reply([b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{not"]),
            Reply([chunked(b'{"ok": true}', 3)]),
            Reply(
                [
                    b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere/v1\r\nContent-Length: 0\r\n\r\n"
                ]
            ),
        ]
        async with Scripted(replies) as srv:
            c = client(f"{srv.url}/v1", max_retries=3)
            data = (await c.post_json("/chat/completions", {"m": 1})).data
            with pytest.raises(ModelCallError) as info:
                await c.post_json("/chat/completions", {"m": 2})
            await c.aclose()
            return data, str(info.value), c.requests_sent

    data, error, sent = run(go())
    assert data == {"ok": True}
    assert "HTTP 307" in error and "Location: http://elsewhere/v1" in error
    assert sent == 4  # 503 and the non-JSON body were retried; the redirect was neither retried nor followed


async def _serve(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
    return runner, runner.addresses[0][1]


def _echo_app(seen: list[str] | None = None) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        if seen is not None:
            seen.append(request.url.scheme)
        payload = await request.json()
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        text = json.dumps({"echo": payload, "pad": "y" * 5000}).encode()
        for i in range(0, len(text), 1000):
            await resp.write(text[i : i + 1000])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_concurrent_calls_against_an_aiohttp_server() -> None:
    async def go() -> list[dict]:
        runner, port = await _serve(_echo_app())
        c = OpenAIClient(f"http://127.0.0.1:{port}/v1", concurrency=8)
        try:
            return [
                r.data
                for r in await asyncio.gather(
                    *(c.post_json("/chat/completions", {"i": i}) for i in range(40))
                )
            ]
        finally:
            await c.aclose()
            await runner.cleanup()

    out = run(go())
    assert [d["echo"]["i"] for d in out] == list(range(40)) and all(len(d["pad"]) == 5000 for d in out)


def test_a_client_used_under_several_event_loops_leaves_no_open_session(caplog) -> None:
    async def go(c: OpenAIClient) -> dict:
        return (await c.post_json("/chat/completions", {"i": 1})).data

    async def serve_for(loops: int) -> None:
        runner, port = await _serve(_echo_app())
        c = OpenAIClient(f"http://127.0.0.1:{port}/v1")
        for _ in range(loops):  # each asyncio.run is a new loop: a session each, closed with its loop
            assert (await asyncio.to_thread(asyncio.run, go(c)))["echo"] == {"i": 1}
        await runner.cleanup()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run(serve_for(3))
        gc.collect()
    assert "Unclosed" not in caplog.text


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tuple[Path, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and a server context using it."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return cert, ctx


def test_https_with_a_private_ca_from_ssl_cert_file(tls, monkeypatch) -> None:
    cert, server_ctx = tls

    async def go() -> tuple[list[dict], list[str]]:
        seen: list[str] = []
        runner, port = await _serve(_echo_app(seen), server_ctx)
        try:
            with pytest.raises(
                ModelCallError, match=r"cannot connect to https://127\.0\.0\.1:\d+: .*CERTIFICATE_VERIFY"
            ):
                await client(f"https://127.0.0.1:{port}/v1").post_json("/chat/completions", {})
            monkeypatch.setenv("SSL_CERT_FILE", str(cert))
            c = client(f"https://127.0.0.1:{port}/v1")  # the CA store is read when the client is made
            out = [(await c.post_json("/chat/completions", {"tls": i})).data for i in range(2)]
            await c.aclose()
            return out, seen
        finally:
            await runner.cleanup()

    out, seen = run(go())
    assert [d["echo"] for d in out] == [{"tls": 0}, {"tls": 1}] and seen == ["https", "https"]


# --- proxies from the environment -------------------------------------------------------------------
@pytest.fixture
def proxy_env(monkeypatch):
    """No proxy settings but those a test makes. The machine's NO_PROXY often names 127.0.0.1, which
    would bypass the test's proxy: aiohttp decides with urllib's ``proxy_bypass`` (NO_PROXY/no_proxy)."""
    for name in (
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _forwarding_proxy(seen: list[str]) -> web.Application:
    """A plain HTTP forward proxy: the client sends the absolute URL as the request target."""

    async def forward(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.raw_path}")
        body = await request.read()
        async with (
            aiohttp.ClientSession() as s,
            s.request(  # trust_env off: no proxy for the proxy
                request.method, request.url, data=body, headers={"Content-Type": "application/json"}
            ) as r,
        ):
            return web.Response(status=r.status, body=await r.read(), content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def test_http_proxy_from_the_environment_and_no_proxy(proxy_env) -> None:
    async def go(no_proxy: str | None) -> tuple[dict, list[str]]:
        seen: list[str] = []
        upstream, up = await _serve(_echo_app())
        proxy, px = await _serve(_forwarding_proxy(seen))
        proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{px}")
        if no_proxy:
            proxy_env.setenv("NO_PROXY", no_proxy)
        c = client(f"http://127.0.0.1:{up}/v1")
        try:
            return (await c.post_json("/chat/completions", {"via": "proxy"})).data, seen
        finally:
            await c.aclose()
            await proxy.cleanup()
            await upstream.cleanup()

    data, seen = run(go(None))
    assert data["echo"] == {"via": "proxy"}
    assert len(seen) == 1 and re.fullmatch(r"POST http://127\.0\.0\.1:\d+/v1/chat/completions", seen[0])
    data, seen = run(go("127.0.0.1"))
    assert data["echo"] == {"via": "proxy"} and seen == []  # NO_PROXY: straight to the endpoint


async def _connect_proxy(seen: list[str]) -> tuple[asyncio.Server, int]:
    """An HTTPS proxy the way clients use one: ``CONNECT host:port``, then bytes piped both ways."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        line = head.split("\r\n", 1)[0]
        seen.append(line)
        host, port = line.split(" ")[1].rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_https_proxy_tunnels_an_https_endpoint_and_leaves_http_alone(tls, proxy_env) -> None:
    """HTTPS_PROXY applies to https:// endpoints (a CONNECT tunnel; TLS end to end, the endpoint's
    certificate checked against SSL_CERT_FILE); an http:// endpoint does not use it."""
    cert, server_ctx = tls
    proxy_env.setenv("SSL_CERT_FILE", str(cert))

    async def go() -> tuple[dict, dict, list[str], list[str]]:
        seen: list[str] = []
        schemes: list[str] = []
        tunnel, px = await _connect_proxy(seen)
        secure, sp = await _serve(_echo_app(schemes), server_ctx)
        plain, pp = await _serve(_echo_app(schemes))
        proxy_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{px}")
        c1, c2 = client(f"https://127.0.0.1:{sp}/v1"), client(f"http://127.0.0.1:{pp}/v1")
        try:
            through = (await c1.post_json("/chat/completions", {"via": "tunnel"})).data
            tunnels = list(seen)
            direct = (await c2.post_json("/chat/completions", {"via": "direct"})).data
            return through, direct, tunnels, seen
        finally:
            await c1.aclose()
            await c2.aclose()
            await secure.cleanup()
            await plain.cleanup()
            tunnel.close()

    through, direct, tunnels, seen = run(go())
    assert through["echo"] == {"via": "tunnel"} and direct["echo"] == {"via": "direct"}
    assert len(tunnels) == 1 and re.fullmatch(r"CONNECT 127\.0\.0\.1:\d+ HTTP/1\.1", tunnels[0])
    assert seen == tunnels  # the http:// call did not go through the proxy


def test_no_hand_written_http_in_the_package() -> None:
    """HTTP is aiohttp's job (client and stand-in server): no status lines, header parsing or stream
    framing of our own anywhere in pmem/."""
    pattern = re.compile(r"HTTP/1\.1|readuntil|b['\"]\\r\\n")
    offenders = [
        f"{p.relative_to(PKG)}:{n}"
        for p in PKG.rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def _embeddings_app(vectors: list) -> web.Application:
    """An embeddings endpoint that answers every request with ``vectors``, whatever the input."""

    async def embeddings(request: web.Request) -> web.Response:
        data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
        return web.json_response({"data": data, "usage": {"prompt_tokens": 3}})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    return app


@pytest.mark.parametrize(
    ("vectors", "needle"),
    [
        # llama.cpp without pooling: one vector per token, for each input
        ([[[0.1, 0.2], [0.3, 0.4]], [[0.5, 0.6], [0.7, 0.8]]], "no pooling"),
        ([[0.1, 0.2, 0.3], [0.4, 0.5]], "unequal or unknown dimensions"),
        ([[0.1, float("nan")], [0.4, 0.5]], "NaN or infinite"),
        ([[0.1, 0.2]], "1 vectors for 2 inputs"),
        ([["a", "b"], ["c", "d"]], "not numbers"),
    ],
)
def test_unusable_embeddings_are_one_line_naming_the_endpoint(vectors: list, needle: str) -> None:
    from pmem.models._openai import OpenAIEmbedder

    async def go() -> None:
        runner, port = await _serve(_embeddings_app(vectors))
        emb = OpenAIEmbedder(OpenAIClient(f"http://127.0.0.1:{port}/v1", max_retries=0), "e")
        try:
            await emb.embed(["first text", "second text"])
        finally:
            await emb.aclose()
            await runner.cleanup()

    with pytest.raises(ModelCallError) as info:
        run(go())
    message = str(info.value)
    assert needle in message and "/embeddings" in message and "127.0.0.1" in message
    assert "\n" not in message


def test_good_embeddings_pass_the_checks() -> None:
    from pmem.models._openai import OpenAIEmbedder

    async def go() -> np.ndarray:
        runner, port = await _serve(_embeddings_app([[3.0, 4.0], [0.0, 2.0]]))
        emb = OpenAIEmbedder(OpenAIClient(f"http://127.0.0.1:{port}/v1"), "e")
        try:
            return await emb.embed(["first text", "second text"])
        finally:
            await emb.aclose()
            await runner.cleanup()

    vectors = run(go())
    assert vectors.shape == (2, 2) and np.allclose(vectors, [[0.6, 0.8], [0.0, 1.0]])
