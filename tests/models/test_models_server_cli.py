"""`python -m pmem.models.server` as a subprocess: CLI fault rates and several worker processes."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import urllib.request

from pmem.models import make_chat_model
from pmem.models.sections import format_sections


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "pmem.models.server", "--port", str(port), *args],
                            stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/health", timeout=1).close()
            return proc, f"{base}/v1"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("server did not become healthy")


def test_cli_rates_and_workers() -> None:
    msg = [{"role": "user", "content": format_sections({"KEY_A": "a.b", "KEY_B": "a.b"})}]
    proc, url = _serve("--workers", "2", "--rate-500", "1.0")
    try:
        m = make_chat_model({"backend": "openai", "url": url, "model": "heuristic", "max_retries": 2,
                             "backoff_s": 0.01})
        c = asyncio.run(m.complete(msg, purpose="identity"))
        assert c.error is not None and url in c.error and "HTTP 500" in c.error
    finally:
        proc.terminate()
        proc.wait(10)
    proc, url = _serve("--rate-429", "0.3", "--seed", "3")
    try:
        m = make_chat_model({"backend": "openai", "url": url, "model": "heuristic", "max_retries": 8,
                             "backoff_s": 0.01})

        async def many():
            return await asyncio.gather(*(m.complete(msg, purpose="identity") for _ in range(40)))

        out = asyncio.run(many())
        assert all(c.error is None and c.text == "same" for c in out)
        assert m.client.requests_sent > 40  # some were rate limited and retried
    finally:
        proc.terminate()
        proc.wait(10)
