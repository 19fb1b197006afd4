"""The runner: an async Ray actor holding many histories as coroutines.

Each runner builds the model clients once and shares them across its histories, so a model replica
sees requests from many histories at once (and batches them). At most ``in_flight`` histories run at
a time; finished ones wait in a batch that is committed (Parquet parts, Arrow states, commit record)
on a worker thread, so file writing never blocks the event loop that is waiting on models.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pmem.arms import ModelSet, make_arm
from pmem.models import CallContext, InstrumentedChatModel, InstrumentedEmbedder, ResponseCache
from pmem.rundir import (
    GRAPH_STATE,
    HISTORIES,
    REQUESTS,
    RESULTS,
    STORE_STATE,
    WRITES,
    failed_history_file,
    part_file,
    state_path,
)
from pmem.runner._execute import (
    CallRecorder,
    RecordingChatModel,
    RecordingEmbedder,
    Unit,
    UnitOutput,
    run_unit,
)
from pmem.runner._hosting import RoutedChat, RoutedEmbedder
from pmem.runner._store import RunStore, write_table

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from pmem.bench import History
    from pmem.graph import ProvenanceGraph
    from pmem.runner._config import RoleSpec


class Runner:
    """Plain class; the driver wraps it with ``ray.remote`` (so it is also usable without Ray)."""

    def __init__(
        self,
        *,
        run_dir: str,
        run_id: str,
        token: str,
        index: int,
        agents: list[RoleSpec],
        embedder: RoleSpec,
        arm_options: dict[str, dict[str, Any]],
        in_flight: int,
        batch: int,
        flush_s: float,
        cache_path: str | None,
        hosted: dict[str, Any] | None = None,
    ) -> None:
        self.store = RunStore(run_dir)
        self.run_id = run_id
        self.token = token
        self.label = f"{index}:{token[:8]}"
        self.arm_options = arm_options
        self.in_flight = in_flight
        self.batch_size = batch
        self.flush_s = flush_s
        cache = ResponseCache(cache_path) if cache_path else None
        hosted = hosted or {}
        self.agents = {a.model_id: model_client(a, f"agent:{a.model_id}", hosted, cache) for a in agents}
        self.embedder = model_client(embedder, "embedder", hosted, cache)
        self._sem: asyncio.Semaphore | None = None
        self._pending: list[tuple[UnitOutput, asyncio.Future[None]]] = []
        self._timer: asyncio.Task[None] | None = None
        self._seq = 0
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pmem-commit")
        self._inflight_now = 0
        #: the recorders of histories not yet returned (running or waiting for their commit), by unit
        self._live: dict[str, CallRecorder] = {}
        self._lag_max = 0.0
        self._lag_total = 0.0
        self._beat: asyncio.Task[None] | None = None

    async def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(), "runner": self.label}

    async def stats(self) -> dict[str, Any]:
        """Load and health: histories in flight, waiting for commit, and how long the event loop was
        blocked (CPU work on the loop delays every other history's model calls)."""
        return {
            "in_flight": self._inflight_now,
            "pending_commit": len(self._pending),
            "loop_lag_max_s": self._lag_max,
            "loop_blocked_s": self._lag_total,
            "live": self.live_counts(),
        }

    def live_counts(self) -> dict[str, tuple[int, int, int]]:
        """(calls, tokens, cached calls) so far of each history not yet returned, by unit id: the
        progress line adds them to the returned histories' counts, so a long history shows its calls
        while it runs; keyed by unit so that the driver drops a history's figure once it has returned."""
        return {
            uid: (r.calls, r.prompt_tokens + r.completion_tokens, r.cached) for uid, r in self._live.items()
        }

    async def _heartbeat(self, period: float = 0.05) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(period)
            lag = loop.time() - t - period
            self._lag_max = max(self._lag_max, lag)
            if lag > period:
                self._lag_total += lag

    def _models(self, unit: Unit, recorder: CallRecorder) -> Any:

        ctx = CallContext(history_id=unit.history_id, arm=unit.arm)
        return ModelSet(
            agent=RecordingChatModel(self.agents[unit.model], recorder, ctx),
            embedder=RecordingEmbedder(self.embedder, recorder, ctx),
        )

    async def run_unit(self, unit: Unit, history: History) -> dict[str, Any]:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.in_flight)
            self._beat = asyncio.create_task(self._heartbeat())
        try:
            async with self._sem:
                self._inflight_now += 1
                try:
                    recorder = CallRecorder(unit.keys(self.run_id))
                    self._live[unit.uid] = recorder
                    try:
                        arm = make_arm(
                            unit.arm, self._models(unit, recorder), dict(self.arm_options.get(unit.arm, {}))
                        )
                    except Exception as exc:
                        out = await run_unit(unit, history, _Broken(exc), recorder, run_id=self.run_id)
                    else:
                        out = await run_unit(unit, history, arm, recorder, run_id=self.run_id)
                finally:
                    self._inflight_now -= 1
            out.history_row = replace(out.history_row, runner=self.label)
            if out.status == "failed":
                await asyncio.get_running_loop().run_in_executor(self._io, self._write_failed, out)
            else:
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._pending.append((out, fut))
                if len(self._pending) >= self.batch_size:
                    self._flush_now()
                elif self._timer is None:
                    self._timer = asyncio.create_task(self._flush_later())
                await fut
        finally:
            # kept until the history returns: while it waits for its commit its calls are in no
            # returned count yet, and the progress line would dip
            self._live.pop(unit.uid, None)
        row = out.history_row
        return {
            "uid": unit.uid,
            "status": out.status,
            "error": out.error,
            "calls": row.model_calls,
            "cached": row.cached_calls,
            "tokens": (row.prompt_tokens or 0) + (row.completion_tokens or 0),
            "wall_s": out.wall_s,
            "n_questions": row.n_questions,
            "n_correct": row.n_correct,
        }

    def _write_failed(self, out: UnitOutput) -> None:
        """A failed history: its request rows first (evidence of what the servers said, kept per attempt),
        then its status row, so that a failed-* status row always has its calls beside it."""
        self.store.write_failed_requests(out.unit.uid, out.unit.attempt, out.requests)
        self.store.write_failure(out.unit.uid, out.history_row)

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.flush_s)
        self._timer = None
        self._flush_now()

    def _flush_now(self) -> None:
        if self._timer is not None and self._timer is not asyncio.current_task():
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        taken, self._pending = self._pending, []
        self._seq += 1
        batch_id = f"{self.token[:12]}-{self._seq:06d}"
        loop = asyncio.get_running_loop()
        cfut = loop.run_in_executor(self._io, self._commit, batch_id, [o for o, _ in taken])

        def _done(f: asyncio.Future[None]) -> None:
            exc = f.exception()
            for _, w in taken:
                if not w.done():
                    if exc is None:
                        w.set_result(None)
                    else:
                        w.set_exception(exc)

        cfut.add_done_callback(_done)

    def _commit(self, batch_id: str, outs: list[UnitOutput]) -> None:
        staged = self.store.stage(self.token, batch_id)
        hist_rows = []
        for o in outs:
            row = o.history_row
            u = o.unit
            if o.graph is not None and hasattr(o.graph, "save"):
                rel = state_path(u.arm, u.history_id, u.uid, GRAPH_STATE)
                path = staged.path_for(rel)
                _save_state(o.graph, path)
                row = replace(row, state_path=rel, state_bytes=path.stat().st_size)
            elif o.store is not None:  # a peer library's files, as one tar archive
                rel = state_path(u.arm, u.history_id, u.uid, STORE_STATE)
                path = staged.path_for(rel)
                path.write_bytes(o.store)
                row = replace(row, state_path=rel, state_bytes=len(o.store))
            hist_rows.append(row)
            staged.units.append(o.unit.uid)
            staged.drop.append(failed_history_file(o.unit.uid))
        parts: dict[str, Sequence[object]] = {  # row types differ per dataset
            RESULTS.name: [r for o in outs for r in o.results],
            WRITES.name: [r for o in outs for r in o.writes],
            REQUESTS.name: [r for o in outs for r in o.requests],
            HISTORIES.name: hist_rows,
        }
        for name, rows in parts.items():
            if rows:
                write_table(staged.path_for(part_file(name, batch_id)), rows, name)
        self.store.commit(staged)

    async def drain(self) -> int:
        """Commit whatever is pending now (used before a clean shutdown)."""
        self._flush_now()
        t0 = time.monotonic()
        while self._pending and time.monotonic() - t0 < 60:
            await asyncio.sleep(0.05)
        return len(self._pending)


def model_client(spec: RoleSpec, key: str, hosted: dict[str, Any], cache: Any) -> Any:
    """The client for the model of ``spec`` (under ``key``: ``agent:MODEL_ID``, ``embedder``): the
    driver-hosted replicas when ``hosted`` has some, else one of its own, built from the spec; behind
    ``cache`` when there is one. Runners and ingest workers build their clients with it."""
    h = hosted.get(key)
    if h is None:
        return spec.model(cache)

    model = RoutedEmbedder(h) if spec.role == "embedder" else RoutedChat(h)
    if cache is None:
        return model
    return (InstrumentedEmbedder if spec.role == "embedder" else InstrumentedChatModel)(model, cache=cache)


def _save_state(graph: ProvenanceGraph, path: Path) -> None:
    """The graph's Arrow bytes, written without a per-file fsync: the batch's commit record is the
    durability point, and recovery drops a record whose files did not survive (see RunStore.recover)."""
    with open(path, "wb") as f:
        f.write(graph.to_bytes())


class _Broken:
    """An arm that could not be built: every history through it fails with the construction error."""

    name = "broken"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def ingest(self, events: Any) -> None:
        raise self.exc

    async def read(self, question: Any) -> Any:
        raise self.exc

    async def answer(self, question: Any) -> Any:
        raise self.exc

    def write_stats(self) -> Any:
        raise self.exc

    def write_log(self) -> list[Any]:
        return []

    def graph(self) -> None:
        return None

    def extra(self) -> dict[str, Any]:
        return {}
