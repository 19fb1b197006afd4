"""The local stand-in server behind a capacity limit, for `pmem perf sweep`.

A real model server has a fixed number of batch slots and queues the requests beyond them; the stand-in
server (:mod:`pmem.models.server`) answers any number at once. This wraps its application with a
semaphore of ``capacity`` slots around chat requests (each holding a slot for the fixed latency) and
accounts slot-time, so the perf can report how busy a sweep kept the server:
``busy = slot-seconds used / (capacity x seconds from the first request to the last reply)``.

    python -m benchmarks.capserver --port 8011 --latency-ms 20 --capacity 8
    curl http://127.0.0.1:8011/_perf/busy
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any


def build_app(latency_ms: float, capacity: int) -> Any:
    from aiohttp import web

    from pmem.models.server import Faults, StandInServer

    sem = asyncio.Semaphore(capacity)
    acct: dict[str, float] = {"busy_s": 0.0, "requests": 0, "first": 0.0, "last": 0.0}

    @web.middleware
    async def limit(request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith("/v1/chat"):
            return await handler(request)
        async with sem:
            t0 = time.monotonic()
            if not acct["first"]:
                acct["first"] = t0
            try:
                return await handler(request)
            finally:
                t1 = time.monotonic()
                acct["busy_s"] += t1 - t0
                acct["requests"] += 1
                acct["last"] = t1

    async def busy(request: web.Request) -> web.Response:
        window = max(acct["last"] - acct["first"], 1e-9)
        return web.json_response(
            {**acct, "capacity": capacity, "window_s": window, "busy": acct["busy_s"] / (capacity * window)}
        )

    app = StandInServer(faults=Faults(latency_s=latency_ms / 1000.0)).app()
    app.middlewares.append(limit)
    app.router.add_get("/_perf/busy", busy)
    return app


def main() -> None:
    from aiohttp import web

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--capacity", type=int, default=8)
    a = p.parse_args()
    web.run_app(build_app(a.latency_ms, a.capacity), host="127.0.0.1", port=a.port, print=None)


if __name__ == "__main__":
    main()
