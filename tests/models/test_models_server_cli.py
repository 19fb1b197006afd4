"""`python -m pmem.models.server` as a subprocess: CLI fault rates and several worker processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ports import free_port

from pmem.models import make_chat_model
from pmem.models.sections import format_sections


def _serve(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pmem.models.server", "--port", str(port), *args], stdout=subprocess.DEVNULL
    )
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


def _children(pid: int) -> dict[int, str]:
    """Child processes of ``pid`` and their states (``Z``: exited, never waited for)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out[int(d.name)] = fields[0]
    return out


def test_cli_rates_and_workers() -> None:
    msg = [{"role": "user", "content": format_sections({"KEY_A": "a.b", "KEY_B": "a.b"})}]
    proc, url = _serve("--workers", "2", "--rate-500", "1.0")
    try:
        # the worker process shares the port (SO_REUSEPORT on every socket): it must still run, not have
        # exited on "address already in use"
        time.sleep(3)
        children = _children(proc.pid)
        assert len(children) == 1 and "Z" not in children.values(), children
        m = make_chat_model(
            {"backend": "openai", "url": url, "model": "heuristic", "max_retries": 2, "backoff_s": 0.01}
        )
        c = asyncio.run(m.complete(msg, purpose="identity"))
        assert c.error is not None and url in c.error and "HTTP 500" in c.error
    finally:
        proc.terminate()
        proc.wait(10)
    proc, url = _serve("--rate-429", "0.3", "--seed", "3")
    try:
        m = make_chat_model(
            {"backend": "openai", "url": url, "model": "heuristic", "max_retries": 8, "backoff_s": 0.01}
        )

        async def many():
            return await asyncio.gather(*(m.complete(msg, purpose="identity") for _ in range(40)))

        out = asyncio.run(many())
        assert all(c.error is None and c.text == "same" for c in out)
        assert m.client.requests_sent > 40  # some were rate limited and retried
    finally:
        proc.terminate()
        proc.wait(10)


def test_every_serve_option_has_help_text() -> None:
    import argparse

    from pmem.models import server

    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    assert [a.option_strings for a in parser._actions if not a.help] == []
    out = subprocess.run(
        [sys.executable, "-m", "pmem.models.server", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert (
        "--latency-ms" in out and "--workers" in out and "SO_REUSEPORT" in out and "--worker-child" not in out
    )


def test_standin_latency_is_counted_from_arrival_and_connections_are_kept_alive() -> None:
    from pmem.models.server import Faults, ServerThread

    msg = [{"role": "user", "content": format_sections({"KEY_A": "a.b", "KEY_B": "a.b"})}]
    with ServerThread(faults=Faults(latency_s=0.05)) as srv:
        m = make_chat_model({"backend": "openai", "url": srv.url, "model": "heuristic"})

        async def calls() -> list[float]:
            out = []
            for _ in range(5):
                t0 = time.perf_counter()
                c = await m.complete(msg, purpose="identity")
                assert c.error is None and c.text == "same"
                out.append(time.perf_counter() - t0)
            connector = m.client._session.connector
            assert len(connector._conns) == 1  # one idle keep-alive connection: all five calls used it
            return out

        took = asyncio.run(calls())
    assert all(0.05 <= t < 0.5 for t in took), took


def test_standin_checks_the_key_before_routing() -> None:
    from auth_helpers import KEY, http

    from pmem.models.server import ServerThread

    with ServerThread(api_key=KEY) as srv:
        base = srv.url.removesuffix("/v1")
        assert (
            http(f"{base}/no/such/route")[0] == 401
        )  # an unknown path tells a caller without the key nothing
        assert http(f"{base}/no/such/route", key=KEY)[0] == 404
