"""The sweep's runners and the units on their way through them.

:class:`RunnerPool` holds the runner actors (started, restarted on death, stopped); :class:`Scheduler`
holds the scheduler's state, in one object declared in its ``__init__`` (Ray's ``ActorPool`` shape): the
queue of units not handed out, the units in flight on each runner, and what came back. The driver's loop
(:func:`pmem.runner._driver.execute`) only calls their operations.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.models import HOSTED_BACKENDS
from pmem.rundir import CACHE, LOGS, RESPONSE_CACHE
from pmem.runner._actor import Runner
from pmem.runner._execute import Unit, failure_row
from pmem.runner._hosting import HostedModels

if TYPE_CHECKING:
    from pmem.runner._config import SweepSpec
    from pmem.runner._driver import Plan
    from pmem.runner._progress import Progress

#: Histories with more events than this are put in Ray's object store once and shared by all arms.
_PUT_EVENTS = 200


class RunnerPool:
    """The live runner actors (one Ray actor per runner), restarted on death."""

    def __init__(self, plan: Plan, n: int, log: Any) -> None:
        import ray

        self.ray = ray
        self.plan = plan
        self.log = log
        spec = plan.spec
        self.opts = spec.run
        cpus = float(ray.cluster_resources().get("CPU", 1))
        if self.opts.placement == "driver-node":
            cpus = float(ray.available_resources().get("CPU", cpus))
            for node in ray.nodes():
                if node.get("Alive") and node["NodeID"] == ray.get_runtime_context().get_node_id():
                    cpus = float(node["Resources"].get("CPU", cpus))
        fit = max(1, int(cpus // self.opts.runner_cpus)) if self.opts.runner_cpus > 0 else n
        if n > fit:
            log(
                f"[pmem sweep] {n} runners x {self.opts.runner_cpus} CPU do not fit {cpus:g} CPUs: using {fit}"
            )
            n = fit
        self.n = n
        self.actors: list[Any] = [None] * n
        self.tokens: list[str] = [""] * n
        self.store = plan.store

        self.cls = ray.remote(Runner)

        self.hosts = HostedModels()
        specs = {f"agent:{a.model_id}": a for a in spec.agents} | {"embedder": spec.embedder}

        hosted = sorted({m.backend for m in specs.values() if m.backend in HOSTED_BACKENDS})
        if hosted:
            log(f"[pmem sweep] starting {' and '.join(hosted)} replicas (shared by all runners)")
        self.hosted = self.hosts.start(specs)
        for i in range(n):
            self.start(i)
        ray.get([a.ready.remote() for a in self.actors])

    def start(self, i: int) -> None:
        ray = self.ray
        spec = self.plan.spec
        token = uuid.uuid4().hex
        options: dict[str, Any] = {
            "num_cpus": self.opts.runner_cpus,
            "max_restarts": 0,
            "max_concurrency": max(1000, 4 * self.opts.in_flight),
            "name": f"pmem-runner:{self.plan.run_id}:{i}:{token[:8]}",
        }
        env = _plugin_pythonpath(spec)
        if env:
            options["runtime_env"] = {"env_vars": {"PYTHONPATH": env}}
        if self.opts.placement == "driver-node":
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                node_id=ray.get_runtime_context().get_node_id(), soft=False
            )
        cache_path = None
        if self.opts.cache:
            cache_path = self.opts.cache_path or str(self.store.root / CACHE / RESPONSE_CACHE)
            Path(cache_path).parent.mkdir(parents=True, exist_ok=True)
        self.actors[i] = self.cls.options(**options).remote(
            run_dir=str(self.store.root),
            run_id=self.plan.run_id,
            token=token,
            index=i,
            agents=list(spec.agents),
            embedder=spec.embedder,
            arm_options={k: dict(v) for k, v in spec.arm_options},
            in_flight=self.opts.in_flight,
            batch=self.opts.batch,
            flush_s=self.opts.flush_s,
            cache_path=cache_path,
            hosted=self.hosted,
        )
        self.tokens[i] = token

    def keep_logs(self) -> None:
        """Keep the hosted servers' logs in the run's ``logs/`` as they are now (each file rewritten with
        its server's log so far): the sweep loop does it every ``_LOG_SAVE_S`` seconds and at the end
        (:func:`pmem.runner._driver.execute`), so that a sweep killed mid-way keeps all but its last
        minutes of them."""
        self.hosts.save_logs(self.store.root / LOGS)

    def stop(self) -> None:
        for a in self.actors:
            if a is not None:
                with contextlib.suppress(Exception):
                    self.ray.kill(a, no_restart=True)
        self.keep_logs()
        self.hosts.stop()


def _plugin_pythonpath(spec: SweepSpec) -> str | None:
    """Plugin modules (``module:attr`` arms) must import in the runners: put their folders on the path."""
    import importlib.util

    dirs: list[str] = []
    for arm in {a for b in spec.benchmarks for a in b.arms if ":" in a}:
        top = arm.split(":", 1)[0].split(".")[0]
        found = importlib.util.find_spec(top)
        if found is None or not found.origin:
            continue
        origin = Path(found.origin)
        folder = origin.parent.parent if origin.name == "__init__.py" else origin.parent
        if str(folder) not in dirs:
            dirs.append(str(folder))
    if not dirs:
        return None
    return os.pathsep.join([*dirs, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)])


#: Ray's errors that mean a runner's process is gone, not that its history failed: the runner is replaced
#: and its uncommitted histories run again (up to the retry limit). A worker the node's memory monitor
#: killed is one (an accuracy run lost 67 histories in a minute to another process's memory use, each
#: recorded as failed while the runners were restarted under them).
RUNNER_DEATHS = (
    "RayActorError",
    "ActorDiedError",
    "ActorUnavailableError",
    "OutOfMemoryError",
    "WorkerCrashedError",
)


def is_runner_death(exc: BaseException) -> bool:
    import ray.exceptions as rex

    kinds = tuple(k for k in (getattr(rex, n, None) for n in RUNNER_DEATHS) if k is not None)
    return isinstance(exc, kinds)


#: at most this long between two polls of the runners' live call counts (the progress line's interval if shorter)
LIVE_POLL_S = 5.0


class LivePoll:
    """The runners' calls of histories in flight, for the progress line: asked every ``period`` seconds
    and read when the answers are there, so a runner whose event loop is busy never holds up the driver."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.asked: dict[Any, int] = {}  # stats reference -> runner index
        self.last = -float("inf")

    def poll(self, pool: RunnerPool, progress: Progress) -> None:
        import ray

        if self.asked:
            ready, _ = ray.wait(list(self.asked), num_returns=len(self.asked), timeout=0)
            for ref in ready:
                i = self.asked.pop(ref)
                try:
                    stats = ray.get(ref)
                except Exception:
                    continue  # a runner that just died has no stats to give (its units are requeued)
                progress.set_live(i, stats.get("live") or {})
        now = time.monotonic()
        if not self.asked and now - self.last >= self.period:
            self.last = now
            for i, actor in enumerate(pool.actors):
                if actor is not None:
                    self.asked[actor.stats.remote()] = i


def note_loop_stats(pool: RunnerPool, progress: Progress) -> None:
    import ray

    try:
        stats = ray.get([a.stats.remote() for a in pool.actors], timeout=10)
    except Exception:
        return  # a runner that just died has no stats to give
    lag = max(s["loop_lag_max_s"] for s in stats)
    blocked = sum(s["loop_blocked_s"] for s in stats)
    progress.detail(
        f"[pmem sweep] runner event loops: longest stall {1000 * lag:.0f} ms, "
        f"{blocked:.1f} s blocked in total (CPU work on the loop)"
    )


def record_failure(plan: Plan, u: Unit, error: str) -> None:
    """Write unit ``u``'s failure row (its history's failed file) in the plan's run."""
    history = plan.histories[plan.unit_history[u.uid]]
    plan.store.write_failure(u.uid, failure_row(plan.run_id, u, history, error))


class Scheduler:
    """The pending units of a sweep on their way through a :class:`RunnerPool`: longest histories
    first, each runner holding at most ``cap`` at a time, a dead runner's units queued again (up to the
    retry limit) on its replacement. The one owner of the scheduler's state; the loop calls
    :meth:`fill`, :meth:`wait` and :meth:`collect` while :attr:`busy`."""

    def __init__(self, plan: Plan, pending: list[Unit], pool: RunnerPool, progress: Progress) -> None:
        import ray

        self._ray = ray
        self.plan = plan
        self.pool = pool  # the runners units go to (a dead one is replaced in place)
        self.progress = progress  # told of each unit that ends, and of each runner's death
        run = plan.spec.run
        # Longest histories first (by events), config order among equals: a long history started last
        # would otherwise run alone at the end while the other runners idle.
        size = {u.uid: len(plan.histories[plan.unit_history[u.uid]].events) for u in pending}
        ordered = sorted(range(len(pending)), key=lambda i: (-size[pending[i].uid], i))
        self.queue: list[Unit] = [
            pending[i] for i in reversed(ordered)
        ]  # not handed out yet; next at the end
        self.inflight: dict[Any, tuple[Unit, int]] = {}  # result reference -> (unit, runner index)
        self.per_runner: Counter[int] = Counter()  # runner index -> its units in flight
        # a runner holds its in-flight units and the next batch, so it never waits for the driver
        self.cap = max(1, run.in_flight + min(run.batch, run.in_flight))
        self.max_retries = run.max_unit_retries  # a unit whose runner died this many times fails
        self.summaries: list[dict[str, Any]] = []  # each unit that ended (complete or failed), in order
        self.redone = 0  # units queued again after their runner died
        # Small histories travel with each call; large ones go to the object store once for all arms.
        self._shared: dict[str, Any] = {}  # history key -> its object reference

    @property
    def busy(self) -> bool:
        """Whether any unit is queued or in flight."""
        return bool(self.queue or self.inflight)

    def fill(self) -> None:
        """Hand each runner queued units until it holds :attr:`cap`."""
        for i in range(self.pool.n):
            while self.queue and self.per_runner[i] < self.cap:
                u = self.queue.pop()
                ref = self.pool.actors[i].run_unit.remote(u, self._history_arg(u))
                self.inflight[ref] = (u, i)
                self.per_runner[i] += 1

    def wait(self, timeout: float) -> list[Any]:
        """The results ready within ``timeout`` seconds: every one ready once the first is (none: [])."""
        ready, _ = self._ray.wait(list(self.inflight), num_returns=1, timeout=timeout)
        if not ready:
            return []
        ready, _ = self._ray.wait(list(self.inflight), num_returns=len(self.inflight), timeout=0)
        return list(ready)

    def collect(self, ready: list[Any]) -> None:
        """Take the ``ready`` results: each unit's summary; a runner that died is replaced, its units
        queued again or ended."""
        dead: set[int] = set()
        for ref in ready:
            u, i = self.inflight.pop(ref)
            self.per_runner[i] -= 1
            try:
                s = self._ray.get(ref)
            except Exception as exc:
                if is_runner_death(exc):
                    dead.add(i)
                    self.inflight[ref] = (u, i)  # handled with the runner's other units below
                    self.per_runner[i] += 1
                    continue
                # An error escaping the runner (e.g. a failed commit): the unit fails, the sweep goes on.
                s = {"uid": u.uid, "status": "failed", "error": f"runner error: {exc}"[:2000]}
                record_failure(self.plan, u, s["error"])
            self._ended(u, s)
        for i in sorted(dead):
            self._replace(i)

    def _history_arg(self, u: Unit) -> Any:
        hkey = self.plan.unit_history[u.uid]
        h = self.plan.histories[hkey]
        if len(h.events) <= _PUT_EVENTS:
            return h
        if hkey not in self._shared:
            self._shared[hkey] = self._ray.put(h)
        return self._shared[hkey]

    def _ended(self, u: Unit, summary: dict[str, Any]) -> None:
        self.summaries.append(summary)
        self.progress.update(u.group, summary)

    def _replace(self, i: int) -> None:
        """Recover dead runner ``i``'s staging, queue its uncommitted units again, start a fresh one."""
        with contextlib.suppress(Exception):
            self._ray.kill(self.pool.actors[i], no_restart=True)
        lost = [(ref, u) for ref, (u, j) in list(self.inflight.items()) if j == i]
        for ref, _ in lost:
            self.inflight.pop(ref)
        self.per_runner[i] = 0
        self.progress.set_live(
            i, {}
        )  # its histories in flight are requeued or done: their calls are not live
        committed = self.plan.store.recover(self.pool.tokens[i])
        redone = 0
        for _, u in lost:
            if u.uid in committed:
                self._ended(u, {"uid": u.uid, "status": "complete", "error": None})
            elif u.attempt >= self.max_retries:
                err = f"runner died {u.attempt + 1} times while running this history"
                record_failure(self.plan, u, err)
                self._ended(u, {"uid": u.uid, "status": "failed", "error": err})
            else:
                self.queue.append(Unit(**{**u.__dict__, "attempt": u.attempt + 1}))
                redone += 1
        self.redone += redone
        self.progress.note(
            f"[pmem sweep] runner {i} died: {redone} histories requeued, "
            f"{sum(1 for _, u in lost if u.uid in committed)} were already committed; starting a new runner"
        )
        self.pool.start(i)
