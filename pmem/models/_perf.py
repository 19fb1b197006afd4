"""`pmem perf client`: the openai client's throughput against the ideal, and heuristic calls/s.

1. Starts the local server (a subprocess, ``--latency-ms 20``) and drives it with the `openai`
   backend from 64 closed-loop workers (starts staggered over one latency period, measured in steady
   state); prints requests/s against the ideal ``concurrency / latency`` (target >= 90%). For
   reference, the same workers then drive the same server through a bare aiohttp session (the
   transport the client used before :mod:`pmem.models._transport`; ``--no-aiohttp`` skips it).
2. Runs the heuristic agent in process over a mix of prompt families; prints calls/s (target >= 5,000)
   and the ratio to a bare loop over the same rule functions (the cost of the async interface).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

from pmem.models._heuristic import HeuristicChatModel, respond
from pmem.models._loop import loop_name
from pmem.models._loop import run as run_loop
from pmem.models._openai import OpenAIChatModel, OpenAIClient
from pmem.models.sections import format_sections


def _prompts() -> list[tuple[str, list[dict[str, str]]]]:
    fams = [
        ("extract", {"TEXT": "Update: apple 1 has been moved from fridge 1 to countertop 2."}),
        ("extract", {"TEXT": "12. Thomas Kyd was born in the city of London.\n13. The chairperson of Fatah is Mahmoud Abbas."}),
        ("annotate", {"FACT": "apple_1.location: shelf 1 (reported)", "HEAD": "drawer 2 (active)",
                      "TEXT": "Another report says the apple 1 is in shelf 1."}),
        ("identity", {"KEY_A": "apple_1.location", "KEY_B": "apple_2.location"}),
        ("answer", {"CONTEXT": "\n".join(f"obj_{i}.location = shelf {i}" for i in range(12)),
                    "QUESTION": "Where is the obj 7 now?"}),
        ("gate", {"QUESTION": "What is my current 5K PB?"}),
        ("judge", {"QUESTION": "q", "REFERENCE": "Mahmoud Abbas", "RESPONSE": "Answer: Mahmoud Abbas"}),
    ]
    return [(p, [{"role": "user", "content": format_sections(s)}]) for p, s in fams]


def bench_heuristic(n: int) -> tuple[float, float]:
    prompts = _prompts()
    model = HeuristicChatModel()

    async def go() -> None:
        for i in range(n):
            purpose, msgs = prompts[i % len(prompts)]
            await model.complete(msgs, purpose=purpose)

    t0 = time.perf_counter()
    asyncio.run(go())
    rate = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for i in range(n):
        purpose, msgs = prompts[i % len(prompts)]
        respond(msgs, purpose)
    bare = n / (time.perf_counter() - t0)
    return rate, bare


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _proc_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _aiohttp_caller(base: str, concurrency: int) -> tuple[Any, Any]:
    """A bare aiohttp session posting the same payloads: the reference transport."""
    import aiohttp

    session: aiohttp.ClientSession | None = None
    shape = OpenAIChatModel(OpenAIClient(f"{base}/v1"), "heuristic")

    async def call(msgs: list[dict[str, str]], purpose: str) -> None:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency),
                                            cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)
        body = json.dumps(shape.payload(msgs, 64, 0.0, None)).encode()
        async with session.post(f"{base}/v1/chat/completions", data=body,
                                headers={"Content-Type": "application/json", "X-Purpose": purpose}) as resp:
            data = json.loads(await resp.read())
        if resp.status != 200 or not data["choices"][0]["message"]["content"]:
            msg = f"reference aiohttp call failed: HTTP {resp.status}"
            raise RuntimeError(msg)

    async def close() -> None:
        if session is not None:
            await session.close()

    return call, close


def bench_client(n: int, concurrency: int, latency_ms: float, workers: int, transport: str = "pmem"
                 ) -> tuple[float, float, float]:
    """Requests/s, and the client's and the server's CPU microseconds per request.

    ``transport`` is ``pmem`` (the `openai` backend) or ``aiohttp`` (a bare aiohttp session).
    """
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pmem.models.server", "--port", str(port), "--latency-ms",
                             str(latency_ms), "--workers", str(workers)], stdout=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        model = OpenAIChatModel(OpenAIClient(f"{base}/v1", concurrency=concurrency), "heuristic")
        prompts = _prompts()

        async def call_pmem(msgs: list[dict[str, str]], purpose: str) -> None:
            c = await model.complete(msgs, purpose=purpose, max_tokens=64)
            if c.error:
                raise RuntimeError(c.error)

        call, close = (call_pmem, model.aclose) if transport == "pmem" else _aiohttp_caller(base, concurrency)

        async def go() -> tuple[float, float, float]:
            # A closed-loop load generator: `concurrency` workers, each issuing requests back to back.
            # Their starts are staggered over one latency period; started together, with a perfectly fixed
            # server latency, they would stay phase-locked in waves whose serial CPU work (client and
            # server) is an artifact of the synthetic setup, not a property of the client.
            stagger = latency_ms / 1000.0 / concurrency
            done = 0
            window: list[float] = []

            async def worker(w: int, quota: int) -> None:
                nonlocal done
                await asyncio.sleep(w * stagger)
                for i in range(quota):
                    purpose, msgs = prompts[(w + i) % len(prompts)]
                    await call(msgs, purpose)
                    done += 1
                    if done == concurrency * 2:  # steady state reached: open the measuring window
                        window.append(time.perf_counter())
                        cpu.append((_self_cpu_s(), _proc_cpu_s(proc.pid)))

            cpu: list[tuple[float, float]] = []
            quota = max(4, n // concurrency)
            await asyncio.gather(*(worker(w, quota) for w in range(concurrency)))
            elapsed = time.perf_counter() - window[0]
            c1, s1 = _self_cpu_s(), _proc_cpu_s(proc.pid)
            measured = done - concurrency * 2
            await close()
            (c0, s0) = cpu[0]
            return measured / elapsed, (c1 - c0) / measured * 1e6, (s1 - s0) / measured * 1e6

        return run_loop(go())
    finally:
        proc.terminate()
        proc.wait(10)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--server-workers", type=int, default=1, help="server processes (SO_REUSEPORT)")
    parser.add_argument("--repeat", type=int, default=3, help="client runs (the machine may be shared)")
    parser.add_argument("--heuristic-calls", type=int, default=50000)
    parser.add_argument("--no-aiohttp", action="store_true", help="skip the bare-aiohttp reference run")


def run(args: argparse.Namespace) -> int:
    rate, bare = bench_heuristic(args.heuristic_calls)
    print(f"heuristic: {rate:,.0f} calls/s in process ({rate / 5000:.2f}x the 5,000 target); "
          f"bare rule loop {bare:,.0f} calls/s (interface overhead ratio {rate / bare:.2f})")
    ideal = args.concurrency / (args.latency_ms / 1000.0)
    runs = []
    for i in range(args.repeat):
        got, client_us, server_us = bench_client(args.requests, args.concurrency, args.latency_ms, args.server_workers)
        runs.append(got)
        print(f"openai client run {i + 1}: {got:,.0f} req/s at concurrency {args.concurrency}, "
              f"{args.latency_ms:g} ms/request; ideal {ideal:,.0f} req/s; ratio {got / ideal:.3f}; "
              f"CPU per request: client {client_us:.0f} us, server {server_us:.0f} us "
              f"(client busy {got * client_us / 1e6:.0%} of a core); load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs; event loop {loop_name()}")
    best, median = max(runs), sorted(runs)[len(runs) // 2]
    print(f"openai client: best {best:,.0f} req/s (ratio {best / ideal:.3f}), median {median:,.0f} req/s "
          f"(ratio {median / ideal:.3f}); target ratio >= 0.90")
    if not args.no_aiohttp:
        got, client_us, server_us = bench_client(args.requests, args.concurrency, args.latency_ms,
                                                 args.server_workers, transport="aiohttp")
        print(f"reference, bare aiohttp session, same server and workers: {got:,.0f} req/s (ratio {got / ideal:.3f}); "
              f"CPU per request: client {client_us:.0f} us, server {server_us:.0f} us; "
              f"openai client median / aiohttp: {median / got:.2f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pmem perf client")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
