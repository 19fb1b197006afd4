"""`pmem perf client` (``python -m benchmarks.client``): the `openai` client's throughput against the
ideal, and the heuristic agent's calls/s.

1. Runs the heuristic agent in process over a mix of prompt families; prints calls/s (target >= 5,000)
   and the ratio to a bare loop over the same rule functions (the cost of the async interface).
2. For each (server latency, workers) point, by default 20 ms x 64 and 200 ms x 256: starts the local
   stand-in server (a subprocess, ``--latency-ms``) and drives it with the `openai` backend from that
   many closed-loop workers (starts staggered over one latency period, measured in steady state);
   prints requests/s against the ideal ``workers / latency`` (target at 200 ms: >= 0.97). For
   reference, the same workers then drive the same server through a bare aiohttp session, without the
   client's retries, concurrency bound and reply parsing (``--no-aiohttp`` skips it).
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
from pmem.models._types import CallOptions
from pmem.models.sections import format_sections

#: ratio to ideal each latency (ms) must reach; other points are reported without a target
TARGETS = {200.0: 0.97}


def _prompts() -> list[tuple[str, list[dict[str, str]]]]:
    fams = [
        ("extract", {"TEXT": "Update: apple 1 has been moved from fridge 1 to countertop 2."}),
        (
            "extract",
            {
                "TEXT": "12. Thomas Kyd was born in the city of London.\n13. The chairperson of Fatah is Mahmoud Abbas."
            },
        ),
        (
            "annotate",
            {
                "FACT": "apple_1.location: shelf 1 (reported)",
                "HEAD": "drawer 2 (active)",
                "TEXT": "Another report says the apple 1 is in shelf 1.",
            },
        ),
        ("identity", {"KEY_A": "apple_1.location", "KEY_B": "apple_2.location"}),
        (
            "answer",
            {
                "CONTEXT": "\n".join(f"obj_{i}.location = shelf {i}" for i in range(12)),
                "QUESTION": "Where is the obj 7 now?",
            },
        ),
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
    """A bare aiohttp session posting the same payloads: the baseline."""
    import aiohttp

    session: aiohttp.ClientSession | None = None
    shape = OpenAIChatModel(OpenAIClient(f"{base}/v1"), "heuristic")

    async def call(msgs: list[dict[str, str]], purpose: str) -> None:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=concurrency), cookie_jar=aiohttp.DummyCookieJar()
            )
        body = json.dumps(shape.payload(msgs, CallOptions(purpose, max_tokens=64))).encode()
        async with session.post(
            f"{base}/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json", "X-Purpose": purpose},
        ) as resp:
            data = json.loads(await resp.read())
        if resp.status != 200 or not data["choices"][0]["message"]["content"]:
            msg = f"baseline aiohttp call failed: HTTP {resp.status}"
            raise RuntimeError(msg)

    async def close() -> None:
        if session is not None:
            await session.close()

    return call, close


def bench_client(
    n: int, concurrency: int, latency_ms: float, workers: int, transport: str = "pmem"
) -> tuple[float, float, float]:
    """Requests/s, and the client's and the server's CPU microseconds per request.

    ``transport`` is ``pmem`` (the `openai` backend) or ``aiohttp`` (a bare aiohttp session).
    """
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pmem.models.server",
            "--port",
            str(port),
            "--latency-ms",
            str(latency_ms),
            "--workers",
            str(workers),
        ],
        stdout=subprocess.DEVNULL,
    )
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

            # The window is steady state only: it opens once every worker has had two replies and
            # closes when the first worker runs out of requests; after that fewer than `concurrency`
            # are in flight, and counting the drain would charge the client for the generator's tail.
            marks: list[
                tuple[float, int, float, float]
            ] = []  # (time, replies so far, client CPU, server CPU)

            def mark() -> None:
                marks.append((time.perf_counter(), done, _self_cpu_s(), _proc_cpu_s(proc.pid)))

            async def worker(w: int, quota: int) -> None:
                nonlocal done
                await asyncio.sleep(w * stagger)
                for i in range(quota):
                    purpose, msgs = prompts[(w + i) % len(prompts)]
                    await call(msgs, purpose)
                    done += 1
                    if done == concurrency * 2:
                        mark()
                if len(marks) == 1:
                    mark()

            quota = max(4, n // concurrency)
            await asyncio.gather(*(worker(w, quota) for w in range(concurrency)))
            await close()
            if len(marks) < 2:
                msg = f"{n} requests leave no steady state for {concurrency} workers: give --requests more"
                raise RuntimeError(msg)
            (t0, n0, c0, s0), (t1, n1, c1, s1) = marks[0], marks[1]
            measured = n1 - n0
            return measured / (t1 - t0), (c1 - c0) / measured * 1e6, (s1 - s0) / measured * 1e6

        return run_loop(go())
    finally:
        proc.terminate()
        proc.wait(10)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requests",
        type=int,
        default=12000,
        help="requests per client run; a longer steady state is a steadier figure (default: %(default)s)",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        nargs="+",
        default=[20.0, 200.0],
        help="server latencies to measure at, one point each (default: 20 200)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[64, 256],
        help="closed-loop workers at each latency, in the same order (default: 64 256)",
    )
    parser.add_argument(
        "--server-workers",
        type=int,
        default=1,
        help="stand-in server processes sharing the port (default: %(default)s)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="client runs per point; best and median are reported (default: %(default)s)",
    )
    parser.add_argument(
        "--heuristic-calls", type=int, default=50000, help="in-process heuristic calls (default: %(default)s)"
    )
    parser.add_argument("--no-aiohttp", action="store_true", help="skip the bare-aiohttp baseline runs")


def _line(got: float, ideal: float, client_us: float, server_us: float) -> str:
    return (
        f"{got:,.0f} req/s; ideal {ideal:,.0f} req/s; ratio {got / ideal:.3f}; CPU per request: "
        f"client {client_us:.0f} us, server {server_us:.0f} us"
    )


def run(args: argparse.Namespace) -> int:
    if len(args.latency_ms) != len(args.concurrency):
        msg = "--latency-ms and --concurrency need as many values each (one point per pair)"
        raise SystemExit(msg)
    rate, bare = bench_heuristic(args.heuristic_calls)
    print(
        f"heuristic: {rate:,.0f} calls/s in process ({rate / 5000:.2f}x the 5,000 target); "
        f"bare rule loop {bare:,.0f} calls/s (interface overhead ratio {rate / bare:.2f})"
    )
    print(f"event loop {loop_name()}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    for latency_ms, concurrency in zip(args.latency_ms, args.concurrency, strict=True):
        point = f"{latency_ms:g} ms x {concurrency} workers"
        ideal = concurrency / (latency_ms / 1000.0)
        runs = []
        for i in range(args.repeat):
            got, client_us, server_us = bench_client(
                args.requests, concurrency, latency_ms, args.server_workers
            )
            runs.append(got)
            print(f"openai client, {point}, run {i + 1}: {_line(got, ideal, client_us, server_us)}")
        best, median = max(runs), sorted(runs)[len(runs) // 2]
        target = TARGETS.get(float(latency_ms))
        verdict = "no target" if target is None else f"target ratio >= {target}"
        print(
            f"openai client, {point}: best {best:,.0f} req/s (ratio {best / ideal:.3f}), median {median:,.0f} "
            f"req/s (ratio {median / ideal:.3f}); {verdict}"
        )
        if not args.no_aiohttp:
            got, client_us, server_us = bench_client(
                args.requests, concurrency, latency_ms, args.server_workers, transport="aiohttp"
            )
            print(
                f"baseline, bare aiohttp session, {point}: {_line(got, ideal, client_us, server_us)}; "
                f"openai client median / baseline: {median / got:.2f}x"
            )
    return 0


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("client", __doc__, add_arguments, run))
