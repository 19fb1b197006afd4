"""Replica hosting: a model's replicas started as Ray actors, placed on GPUs, their logs kept.

:class:`ReplicaPool` starts a model's :class:`~pmem.models._replica.ReplicaActor` actors (one bundle of
``tensor_parallel`` GPUs in a STRICT_PACK placement group when a model needs several), draws the pool's
bearer key when none is configured (``secrets``), and returns the replicas' base URLs. How a server is
launched is :mod:`pmem.models._launch`; one replica's process supervision is :mod:`pmem.models._replica`.
Nothing here speaks the OpenAI protocol: clients of the URLs are :mod:`pmem.models._openai` clients
behind :mod:`pmem.models._routing`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pmem._atomic import atomic_write_bytes
from pmem.models._launch import ReplicaConfig
from pmem.models._replica import (
    WAIT_SLICE_S,
    ReplicaActor,
    ReplicaPlacementError,
    ReplicaStartCancelled,
    ReplicaStartError,
)


def _new_api_key() -> str:
    """A fresh random bearer token for one pool's replicas."""
    return secrets.token_urlsafe(32)


def _ray() -> Any:
    import ray

    return ray


def free_stem(folder: Path, stem: str, suffixes: tuple[str, ...]) -> str:
    """``stem``, or ``stem.2``, ``stem.3``, ...: the first that no ``folder/<stem><suffix>`` uses.

    >>> import tempfile; d = Path(tempfile.mkdtemp()); (d / "a.log").write_text("")
    0
    >>> free_stem(d, "a", (".log",)), free_stem(d, "b", (".log",))
    ('a.2', 'b')
    """
    n, candidate = 1, stem
    while any((folder / f"{candidate}{suffix}").exists() for suffix in suffixes):
        n += 1
        candidate = f"{stem}.{n}"
    return candidate


class ReplicaPool:
    """Starts ``replicas`` actors for one model, each on ``tensor_parallel`` (logical) GPUs."""

    def __init__(self, config: ReplicaConfig, replicas: int = 1) -> None:
        self.config = config
        self.n = int(replicas)
        self.actors: list[Any] = []
        self.urls: list[str] = []
        self._pgs: list[Any] = []
        self._placed: set[int] = set()  # indices of the actors Ray created (they can take a stop call)
        # set by cancel() from another thread: every wait of a start looks at it each WAIT_SLICE_S
        self._cancel = threading.Event()
        # each replica's log as last kept (save_logs): its file's stem, and the length and digest of the
        # log it held, so that a later save of the same log overwrites it and a new log gets a new file
        self._kept: dict[int, tuple[str, int, bytes]] = {}

    @property
    def api_key(self) -> str | None:
        """The key the replicas require (None until start() draws one, unless one was configured)."""
        return self.config.api_key

    def start(self) -> list[str]:
        if self.config.api_key is None:
            self.config = replace(self.config, api_key=_new_api_key())
        try:
            return self._start()
        except BaseException:
            self.stop()  # replicas that did start would otherwise hold their GPUs (and logs) until exit
            raise

    def cancel(self) -> None:
        """Stop a :meth:`start` under way (from another thread): it raises ReplicaStartCancelled within
        ``WAIT_SLICE_S`` instead of waiting out a placement or a server's start."""
        self._cancel.set()

    def _start_timeout_s(self) -> float:
        return float(self.config.health_timeout_s or self.config.engine.start_timeout_s)

    def _wait(self, refs: list[Any], deadline: float) -> list[Any]:
        """Wait for ``refs`` until ``deadline``, a slice at a time; the ones still pending then.

        Raises:
            ReplicaStartCancelled: :meth:`cancel` was called.
        """
        ray = _ray()
        pending = list(refs)
        while pending:
            if self._cancel.is_set():
                msg = "the replicas' start was cancelled"
                raise ReplicaStartCancelled(msg)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(WAIT_SLICE_S, left))
        return pending

    def _unplaced(self, count: int, resources: dict[str, float], timeout: float) -> ReplicaPlacementError:
        ray = _ray()
        asked = ", ".join(f"{k}: {v:g}" for k, v in resources.items() if v)
        have = ", ".join(
            f"{k}: {v:g}"
            for k, v in sorted(ray.cluster_resources().items())
            if not k.startswith(("node:", "memory", "object_store"))
        )
        msg = (
            f"Ray placed no node for {count} of {self.n} {self.config.kind} replica(s) of {self.config.model} within "
            f"{timeout:g} s: each asks for {{{asked}}}, the cluster has {{{have or 'nothing'}}} "
            "(add nodes with those resources, lower tensor_parallel/replicas, or raise health_timeout_s)"
        )
        return ReplicaPlacementError(msg)

    def _start(self) -> list[str]:
        ray = _ray()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not ray.is_initialized():
            ray.init(address=os.environ.get("RAY_ADDRESS") or "local")
        remote = ray.remote(ReplicaActor)
        driver_ip = ray.util.get_node_ip_address()
        # a CPU engine holds no GPU; its actor reserves the CPUs the config gives it (0: none, as the
        # server's threads run outside Ray's accounting, like a GPU engine's)
        tp = self.config.gpus
        # every wait below is bounded: placement by the start timeout (a cluster that never gets the
        # resources is a one-line error, not a hang), and sliced, so that cancel() ends it at once
        timeout = self._start_timeout_s()
        deadline = time.monotonic() + timeout
        for i in range(self.n):
            options: dict[str, Any] = {
                "num_cpus": self.config.num_cpus,
                "num_gpus": tp,
                "max_restarts": 2,
                "max_concurrency": 4,
            }
            if tp > 1:
                pg = placement_group([{"GPU": tp, "CPU": 0.01}], strategy="STRICT_PACK")
                self._pgs.append(pg)
                if self._wait([pg.ready()], deadline):
                    raise self._unplaced(self.n - i, {"GPU": tp, "CPU": 0.01}, timeout)
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=pg)
            self.actors.append(remote.options(**options).remote(self.config, i, driver_ip))
        ready = {a.__ray_ready__.remote(): i for i, a in enumerate(self.actors)}
        unplaced = self._wait(list(ready), deadline)
        self._placed = {i for ref, i in ready.items() if ref not in unplaced}
        if unplaced:
            raise self._unplaced(len(unplaced), {"CPU": self.config.num_cpus, "GPU": tp}, timeout)
        starts = [a.start.remote() for a in self.actors]
        # each actor's start has its own health deadline; this one only bounds a lost actor
        if self._wait(starts, time.monotonic() + timeout + 60):
            msg = f"the {self.config.kind} replicas of {self.config.model} did not answer their start within {timeout + 60:g} s"
            raise RuntimeError(msg)
        try:
            self.urls = ray.get(starts)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ReplicaStartError | ValueError):
                raise exc.cause from None  # the actor's own error, without Ray's traceback around it
            raise
        return self.urls

    async def ensure(self, index: int) -> str:
        """Replica ``index``'s server running (restarted if it died); its URL. Waits out a restart of
        the actor by Ray (calls to a restarting actor are retried; a dead one raises)."""
        ensure = self.actors[index].ensure.options(max_task_retries=-1)
        url: str = await ensure.remote()
        return url

    def info(self) -> list[dict[str, Any]]:
        return _ray().get([a.info.remote() for a in self.actors])

    def save_logs(self, folder: Path, prefix: str) -> list[Path]:
        """Write each replica's server log to ``folder/<prefix>-replica-<i>.log`` (before :meth:`stop`,
        which deletes them), and its counters, where the server keeps them (vLLM), to
        ``<prefix>-replica-<i>.metrics``; replicas that cannot answer are skipped. A resumed sweep
        keeps the earlier parts' logs: a name already taken gets ``.2``, ``.3``, ... before its suffix,
        so the run's logs hold every request its servers received.

        Called again (the sweep saves them every few minutes, so that a killed sweep keeps all but the
        last minutes of its servers' logs), a replica's log that still begins with what was kept
        overwrites its file; a log that does not (Ray restarted the actor: a new log) gets a new file."""
        ray = _ray()
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for i, actor in enumerate(self.actors):
            try:
                data = ray.get(actor.read_log.remote(), timeout=60)
                metrics = ray.get(actor.read_metrics.remote(), timeout=60)
            except Exception:
                continue
            kept = self._kept.get(i)
            if kept is not None and hashlib.sha256(data[: kept[1]]).digest() == kept[2]:
                stem = kept[0]  # the same log, grown (or not): its file is rewritten
            else:
                stem = free_stem(folder, f"{prefix}-replica-{i}", (".log", ".metrics"))
            path = folder / f"{stem}.log"
            atomic_write_bytes(path, data)
            self._kept[i] = (stem, len(data), hashlib.sha256(data).digest())
            written.append(path)
            if metrics:
                written.append(folder / f"{stem}.metrics")
                atomic_write_bytes(written[-1], metrics)
        return written

    def stop(self) -> None:
        ray = _ray()
        placed = [a for i, a in enumerate(self.actors) if i in self._placed]
        with contextlib.suppress(Exception):  # an actor Ray never placed cannot run stop: killed below
            ray.get([a.stop.remote() for a in placed], timeout=60)
        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        from ray.util.placement_group import remove_placement_group

        for pg in self._pgs:
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
        self.actors, self._pgs, self._placed = [], [], set()
