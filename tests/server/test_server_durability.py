"""Durable writes (issue 42, acceptance 3): a client writes facts to ``pmem mcp --http`` while the server
is killed with SIGKILL at random moments and started again. Every add whose reply arrived is in the state
after the restart, the state loads, and it holds nothing but facts that were sent (the one in flight at a
kill may be there or not). Four clients writing to one namespace at once lose no write. A second server on
the same store is refused in one line.

The default suite kills 3 times during 150 facts; ``-m slow`` runs the issue's 20 kills during 2,000."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from mcp_client import command, http_session, reply, start_http_server, stop

from pmem.graph import ProvenanceGraph
from pmem.server import Namespace

TOKEN = "tok-durable-3b8e"
ENV = {"PMEM_MCP_TOKEN": TOKEN}


def _state(store: Path, user: str) -> Path:
    return store / "namespaces" / Namespace.of(user).folder / "state.arrow"


def _fact(i: int) -> tuple[str, str, str]:
    """The text of fact ``i``, its key and value (one key per fact)."""
    return f"The city of Person{i} is Town{i}.", f"person{i}.city", f"Town{i}"


def write_through_kills(store: Path, facts: int, kills: int, seed: int) -> dict[str, int]:
    """Send ``facts`` adds to one namespace, killing the server ``kills`` times at random moments; check
    the state after the last restart. Returns what happened."""
    rng = random.Random(seed)
    acked: set[int] = set()
    in_flight: set[int] = set()  # adds sent when a kill came: each may or may not be there
    killed = 0
    i = 0
    # the kills are spread over the stream: after how many acknowledged adds each one is armed
    arm_at = sorted(rng.sample(range(1, facts), kills))
    while i < facts:
        process, url = start_http_server(store, ENV)
        armed = arm_at[killed] if killed < len(arm_at) else None
        timer: threading.Timer | None = None

        async def send(
            process: subprocess.Popen[str] = process, url: str = url, armed: int | None = armed
        ) -> None:
            nonlocal i, timer
            async with http_session(url, TOKEN) as session:
                while i < facts:
                    if armed is not None and len(acked) >= armed and timer is None:
                        # a random moment within the next few adds' time: mid-request or between
                        timer = threading.Timer(
                            rng.uniform(0.0, 0.05), os.kill, (process.pid, signal.SIGKILL)
                        )
                        timer.start()
                    text, _, _ = _fact(i)
                    in_flight.add(i)
                    r = reply(await session.call_tool("add", {"user_id": "writer", "text": text}))
                    assert "error" not in r, r
                    in_flight.discard(i)
                    acked.add(i)
                    i += 1

        try:
            asyncio.run(send())
        except BaseException as exc:  # the server died under the client: the transport's error
            if isinstance(exc, (KeyboardInterrupt, AssertionError)):
                raise
            assert process.wait(timeout=60) == -signal.SIGKILL, f"the server was not killed: {exc!r}"
            killed += 1
            i = max(in_flight, default=i - 1) + 1  # the add in flight is not sent again
            continue
        finally:
            if timer is not None:
                timer.cancel()
        stop(process)
    graph = ProvenanceGraph.load(_state(store, "writer"))  # the state loads
    held = dict(graph.frontier_items())
    sent = {_fact(n)[1]: _fact(n)[2] for n in range(facts)}
    lost = [n for n in acked if held.get(_fact(n)[1]) != _fact(n)[2]]
    assert not lost, f"{len(lost)} acknowledged adds lost: {sorted(lost)[:10]}"
    foreign = {k: v for k, v in held.items() if sent.get(k) != v}
    assert not foreign, f"the state holds what was never sent: {list(foreign.items())[:5]}"
    return {"kills": killed, "acked": len(acked), "held": len(held), "in_flight": len(held) - len(acked)}


def test_every_acknowledged_add_survives_kills_at_random_moments(tmp_path: Path) -> None:
    outcome = write_through_kills(tmp_path / "store", facts=150, kills=3, seed=42)
    assert outcome["kills"] == 3, outcome


@pytest.mark.slow
def test_every_acknowledged_add_of_2000_survives_20_kills(tmp_path: Path) -> None:
    outcome = write_through_kills(tmp_path / "store", facts=2000, kills=20, seed=7)
    print(outcome)
    assert outcome["kills"] == 20, outcome


def test_four_clients_writing_to_one_namespace_lose_no_write(tmp_path: Path) -> None:
    store = tmp_path / "store"
    process, url = start_http_server(store, ENV)
    per_client = 40

    async def client(c: int) -> list[str]:
        keys = []
        async with http_session(url, TOKEN) as session:
            for n in range(per_client):
                text, key, _ = _fact(c * 1000 + n)
                r = reply(await session.call_tool("add", {"user_id": "shared", "text": text}))
                assert r["operations"][0]["applied"], r
                keys.append(key)
        return keys

    async def run() -> list[list[str]]:
        return list(await asyncio.gather(*(client(c) for c in range(4))))

    try:
        written = asyncio.run(run())
    finally:
        stop(process)
    held = dict(ProvenanceGraph.load(_state(store, "shared")).frontier_items())
    assert set(held) == {k for keys in written for k in keys} and len(held) == 4 * per_client


def test_a_second_server_on_the_same_store_is_refused_in_one_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    process, _ = start_http_server(store, ENV)
    try:
        second = subprocess.run(
            command(store), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )
    finally:
        stop(process)
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {process.pid}" in lines[0] and "one server per store" in lines[0], (
        second.stderr
    )
