"""Shared helpers of the runner tests: config writing, reading a run directory, a poisoning proxy."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TINY = "runner_plugins:make_tiny"


def tiny_chains_body(cases: int) -> str:
    """A sweep of the tiny test arm over ``cases`` L=4 chain histories, committed in small batches on
    two runners, slow enough (10 ms per event) to be interrupted mid-run."""
    return f"""
arms = ["{TINY}"]
[arm_options."{TINY}"]
event_delay_s = 0.01
[run]
runners = 2
in_flight = 3
batch = 2
flush_s = 0.1
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = 4
cases = {cases}
"""


def config(tmp: Path, body: str, name: str = "t") -> Path:
    models = '\n[models.agent]\nbackend = "heuristic"\n[models.embedder]\nbackend = "hashing"\n'
    p = tmp / f"{name}.toml"
    p.write_text(f'name = "{name}"\n' + body + models)
    return p


def sweep_argv(cfg: Path, out: Path, address: str, *extra: str) -> list[str]:
    """The command line of a quiet ``pmem sweep`` driver process on the cluster at ``address``."""
    return [
        sys.executable,
        "-m",
        "pmem.cli",
        "sweep",
        str(cfg),
        "--out",
        str(out),
        "--quiet",
        *extra,
        "--address",
        address,
    ]


def read(run_dir: Path, dataset: str) -> pa.Table:
    files = sorted((run_dir / dataset).glob("*.parquet"))
    if not files:
        return pa.table({})
    return pa.concat_tables([pq.read_table(f) for f in files])


def result_keys(run_dir: Path) -> list[tuple[str, str, str]]:
    t = read(run_dir, "results")
    return list(
        zip(
            t.column("history_id").to_pylist(),
            t.column("arm").to_pylist(),
            t.column("question_id").to_pylist(),
            strict=True,
        )
    )


def runner_pids(ray: Any, run_dir: Path) -> dict[tuple[str, str], int]:
    """The live runner actors of the sweep writing ``run_dir`` (named ``pmem-runner:<run-id>:...``):
    (name, namespace) -> pid."""
    prefix = f"pmem-runner:{run_dir.name}:"
    out = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"].startswith(prefix):
            actor = ray.get_actor(entry["name"], namespace=entry["namespace"])
            out[(entry["name"], entry["namespace"])] = ray.get(actor.ready.remote(), timeout=30)["pid"]
    assert out, f"no runner of {run_dir.name} is alive"
    return out


def stop_processes(ray: Any, runners: dict[tuple[str, str], int], timeout_s: float = 120) -> None:
    """Kill the named runner actors and wait until each one's process has exited (bounded)."""
    import os
    import time

    for name, namespace in runners:
        with contextlib.suppress(ValueError):  # Ray may have reaped it already (its driver died)
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    deadline = time.monotonic() + timeout_s
    for pid in runners.values():
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, f"runner process {pid} still alive after {timeout_s} s"
            time.sleep(0.05)


class PoisonProxy:
    """A real HTTP server on 127.0.0.1 in front of the local model server: requests whose body
    contains ``marker`` get HTTP 500, every time (a permanent failure for the client); the rest are
    forwarded unchanged."""

    def __init__(self, upstream: str, marker: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.marker = marker
        self.port = 0
        self.poisoned = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _run(self) -> None:
        from aiohttp import ClientSession, web

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            if self.marker.encode() in body:
                self.poisoned += 1
                return web.Response(status=500, text="poisoned")
            async with (
                ClientSession() as s,
                s.request(
                    request.method,
                    self.upstream + request.path_qs.removeprefix("/v1"),
                    data=body,
                    headers={"Content-Type": "application/json"},
                ) as r,
            ):
                return web.Response(status=r.status, body=await r.read(), content_type="application/json")

        async def main() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handle)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()
            try:
                while True:
                    await asyncio.sleep(3600)
            finally:
                await runner.cleanup()  # close keep-alive connections and their handler tasks

        self._loop = asyncio.new_event_loop()
        self._task = self._loop.create_task(main())
        with contextlib.suppress(asyncio.CancelledError):
            self._loop.run_until_complete(self._task)

    def __enter__(self) -> PoisonProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(5)
