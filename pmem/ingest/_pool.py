"""The ingest's workers: the model replicas they call, and the Ray actors (one per key partition) that
extract rows and commit the facts of the keys they own.

A worker runs its commit calls in the order the driver sent them (each carries its turn): the pool
numbers them, so the driver only says what goes to whom.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from pmem.ingest._worker import FactRun, IngestWorker, extraction_rows
from pmem.models import HOSTED_BACKENDS
from pmem.runner import HostedModels

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa

    from pmem.ingest._spec import IngestSpec
    from pmem.ingest._stream import StreamBatch


#: How long :meth:`WorkerPool.stop` waits for the workers to close their caches before killing them.
CLOSE_WAIT_S = 60.0


class WorkerPool:
    """The replicas and workers of one ingest.

    Args:
        spec: the ingest's models and options.
        partitions: the workers, one per key partition.
        say: prints one line of progress (``starting model replicas``).

    Example (no Ray needed until :meth:`start`)::

        pool = WorkerPool(spec, partitions=2, say=print)
        hosted = pool.host_models()
        try:
            pool.start(hosted, cache=None)
            refs = pool.extract(batch, first=0)
        finally:
            pool.stop()
    """

    def __init__(self, spec: IngestSpec, partitions: int, say: Callable[[str], None]) -> None:
        self._spec = spec
        self._partitions = partitions
        self._say = say
        self._hosts: HostedModels | None = None  # the model replicas this pool started, if any
        self.workers: list[Any] = []  # the Ray actors, in partition order (empty until started)
        self._turns: list[int] = []  # per worker, the commit calls sent to it (they run in this order)

    def host_models(self) -> dict[str, Any]:
        """Start the spec's hosted models (vLLM or llama.cpp replicas), outside any event loop (the pools
        start their own); their handles by name, empty when every model runs in process."""
        spec = self._spec
        specs = {f"agent:{spec.agent.model_id}": spec.agent, "embedder": spec.embedder}
        if not any(s.backend in HOSTED_BACKENDS for s in specs.values()):
            return {}
        self._hosts = HostedModels()
        self._say("starting model replicas")
        hosted = self._hosts.start(specs)
        # A row is not a conversation: no replica holds a prefix worth returning to, so each call goes
        # to the replica with the fewest calls in flight (a sweep pins a history to one replica instead).
        return {k: dataclasses.replace(h, routing="least-busy") for k, h in hosted.items()}

    def start(self, hosted: dict[str, Any], cache: str | None) -> None:
        """Start one worker per partition on the driver's node (they share the response ``cache`` file
        with the driver)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cpus = self._spec.worker_cpus
        if not cpus:
            total = ray.cluster_resources().get("CPU", 1.0)
            cpus = min(1.0, total / self._partitions)
        node = ray.get_runtime_context().get_node_id()
        cls = ray.remote(IngestWorker)
        self.workers = [
            cls.options(
                num_cpus=cpus,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            ).remote(self._spec, hosted, cache, i)
            for i in range(self._partitions)
        ]
        self._turns = [0] * self._partitions

    def stop(self) -> None:
        """Close the workers' response caches, kill the workers, and stop the replicas this pool
        started. A worker that does not answer within :data:`CLOSE_WAIT_S` (a failed run's, busy in a
        model call) is killed all the same."""
        import ray

        if self.workers:
            closing = [w.close.remote() for w in self.workers]
            ray.wait(closing, num_returns=len(closing), timeout=CLOSE_WAIT_S)
        for w in self.workers:
            ray.kill(w)
        if self._hosts is not None:
            self._hosts.stop()

    def extract(self, batch: StreamBatch, first: int) -> list[Any]:
        """Send a batch's text rows for extraction, split across every worker (none: no call); the calls'
        refs, whose answers in order are the rows' in order."""
        rows = extraction_rows(batch.events, first)
        n = len(self.workers)
        size = -(-len(rows) // n) if rows else 0
        return [
            self.workers[i].extract.remote(rows[i * size : (i + 1) * size])
            for i in range(n)
            if rows[i * size : (i + 1) * size]
        ]

    def catch_up(self, run: FactRun) -> list[Any]:
        """Every worker applies the fact rows of its keys in ``run`` (read from the stream) before its
        next commit."""
        refs = []
        for i, worker in enumerate(self.workers):
            self._turns[i] += 1
            refs.append(worker.catch_up.remote(self._turns[i], run, len(self.workers)))
        return refs

    def commit(self, index: int, items: list[Any], facts: pa.Table | None) -> Any:
        """Worker ``index`` commits ``items`` (routed facts) and ``facts`` (fact rows of its keys), after
        every commit sent to it before."""
        self._turns[index] += 1
        return self.workers[index].commit.remote(self._turns[index], items, facts)

    async def drain(self) -> list[dict[str, Any]]:
        """Each worker's request rows and refused writes since the last drain."""
        return list(await asyncio.gather(*(w.drain.remote() for w in self.workers)))

    async def peak_rss_mb(self) -> list[float]:
        """Each worker's peak resident memory (MiB)."""
        return list(await asyncio.gather(*(w.peak_rss_mb.remote() for w in self.workers)))
