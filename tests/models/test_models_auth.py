"""Bearer-token credentials: the stand-in server enforces them, the `openai` client sends them and does
not retry a refusal."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from auth_helpers import CHAT, KEY, MSG, check_auth, cmdlines, http
from ports import free_port

from pmem.models import ModelCallError, make_chat_model, make_embedder
from pmem.models._spec import ModelSpec
from pmem.models.server import ServerThread


def _serve(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pmem.models.server", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if _up(base):
            return proc, base
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("server did not become healthy")


def _up(base: str) -> bool:
    try:
        urllib.request.urlopen(f"{base}/health", timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("how", ["flag", "env"])
def test_standin_cli_requires_the_key(how: str) -> None:
    # a key of each case's own: the other case may be serving at the same time in another test process,
    # with its key on its command line
    key = f"{KEY}-{how}"
    args, env = (["--api-key", key], {}) if how == "flag" else ([], {"PMEM_API_KEY": key})
    proc, base = _serve([*args, "--workers", "2"], env)
    try:
        for _ in range(4):  # two processes share the port (SO_REUSEPORT): each must enforce the key
            check_auth(base, key)
        if how == "env":  # given through the environment, the key shows on no command line (workers included)
            assert not any(key.encode() in c for c in cmdlines())
        m = make_chat_model({"backend": "openai", "url": f"{base}/v1", "model": "heuristic", "api_key": key})
        assert asyncio.run(m.complete(MSG, purpose="identity")).text == "same"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert key.encode() not in out  # nor in what it prints


def test_standin_without_key_stays_open() -> None:
    with ServerThread() as srv:
        status, body = http(f"{srv.url}/chat/completions", body=CHAT)
        assert status == 200 and body["choices"][0]["message"]["content"] == "same"


def test_standin_app_enforces_the_key() -> None:
    """The aiohttp application form (mounted by `pmem perf`) enforces the same rule."""
    from aiohttp.test_utils import TestClient, TestServer

    from pmem.models.server import StandInServer

    async def go() -> None:
        async with TestClient(TestServer(StandInServer(api_key=KEY).app())) as client:
            assert (await client.get("/health")).status == 200
            r = await client.post("/v1/chat/completions", json=CHAT)
            assert r.status == 401 and (await r.json())["error"]["code"] == "invalid_api_key"
            r = await client.post(
                "/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {KEY[:-1]}"}
            )
            assert r.status == 401
            r = await client.post(
                "/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {KEY}"}
            )
            assert r.status == 200

    asyncio.run(go())


def test_refused_credentials_fail_at_once_without_the_key_in_the_error() -> None:
    with ServerThread(api_key=KEY) as srv:
        for sent in (None, "not-the-key"):
            m = make_chat_model(
                {
                    "backend": "openai",
                    "url": srv.url,
                    "model": "heuristic",
                    "api_key": sent,
                    "max_retries": 4,
                    "backoff_s": 0.01,
                }
            )
            c = asyncio.run(m.complete(MSG, purpose="identity"))
            assert m.client.requests_sent == 1  # a 401 is not transient: no retry
            assert c.error is not None and f"{srv.url}/chat/completions" in c.error and "HTTP 401" in c.error
            assert "credentials" in c.error and KEY not in c.error and "not-the-key" not in c.error
        emb = make_embedder(
            {
                "backend": "openai",
                "url": srv.url,
                "model": "hashing",
                "api_key": "not-the-key",
                "max_retries": 4,
            }
        )
        with pytest.raises(ModelCallError, match="HTTP 401") as info:
            asyncio.run(emb.embed(["x"]))
        # a router must not try it on the next replica as if this one were down
        assert not info.value.failover
        assert emb.client.requests_sent == 1
        ok = make_embedder({"backend": "openai", "url": srv.url, "model": "hashing", "api_key": KEY})
        assert asyncio.run(ok.embed(["x"])).shape[0] == 1


def test_spec_repr_and_errors_hide_the_key() -> None:
    spec = ModelSpec.from_mapping({"backend": "openai", "url": "http://h:1/v1", "api_key": KEY})
    assert spec.option("api_key") == KEY and KEY not in repr(spec) and KEY not in str(spec)
    with pytest.raises(ValueError) as info:
        ModelSpec.from_mapping({"api_key": KEY})
    assert KEY not in str(info.value)
