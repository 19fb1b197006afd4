"""``pmem perf server``: ``pmem mcp``'s durable add and its search, at 1k, 100k and 1M facts in a namespace,
through a real MCP client over streamable HTTP on 127.0.0.1, in one run; and ``Memory.search`` in this
process on the same states, as the baseline of the server's search.

Each namespace's state is built column-wise (``apply_batch``) as a memory that took that many facts would
hold it: one evidence and one ``accept`` per fact, ten facts per key (so 1M facts are 100k keys, each with
ten versions), every key registered for soft identity. The server then takes, per namespace, adds of two
kinds, each durable when its reply arrives (one journal record, fsynced):

- ``update``: a new value of a key the memory holds (the common case: soft identity finds it at once);
- ``new key``: a key it does not hold (soft identity scores it against every registered key);

and searches for a key's current value. Warm-up calls first (a namespace's first call loads its state).
The target (issue 42): a durable add at 1M facts within 1.5x of one at 1k. Latencies are wall time per
call as the client sees it (median and p95); the machine is shared, so read the ratios of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = (1_000, 100_000, 1_000_000)
#: Facts per key: a memory holds each key's history, so 1M facts are 100k keys of ten versions each.
FACTS_PER_KEY = 10
TOKEN = "perf-server-token"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="facts per namespace (1000,100000,1000000)"
    )
    parser.add_argument("--calls", type=int, default=200, help="timed calls of each kind per namespace (200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls first (20)")
    parser.add_argument(
        "--keep", type=Path, help="build the store here and keep it (default: a temporary folder)"
    )


def _fact(key_index: int, version: int) -> tuple[str, str, str]:
    value = f"Town{key_index}v{version}"
    return f"The city of Person{key_index} is {value}.", f"person{key_index}.city", value


def build_state(path: Path, facts: int) -> float:
    """Write a state of ``facts`` facts (see the module docstring) to ``path``; seconds it took."""
    import pyarrow as pa

    from pmem.graph import WRITE_BATCH_SCHEMA, ProvenanceGraph

    started = time.perf_counter()
    keys = max(1, facts // FACTS_PER_KEY)
    graph = ProvenanceGraph()
    step = 100_000
    for first in range(0, facts, step):
        n = min(step, facts - first)
        ops, texts, names, values, evidence = [], [], [], [], []
        for i in range(first, first + n):
            text, key, value = _fact(i % keys, i // keys)
            ops += [None, "accept"]
            texts += [text, None]
            names += [None, key]
            values += [None, value]
            evidence += [i, i]
        rows = 2 * n
        batch = pa.table(
            {
                "op": ops,
                "text": texts,
                "source": pa.nulls(rows, pa.string()),
                "time": pa.nulls(rows, pa.string()),
                "key": names,
                "value": values,
                "evidence": evidence,
            },
            schema=WRITE_BATCH_SCHEMA,
        )
        graph.apply_batch(batch)
    registered = [f"person{k}.city" for k in range(keys)]
    new = [
        {"candidate": k, "shortlisted": None, "score": 0.0, "verdict": "new", "canonical": k}
        for k in registered
    ]
    graph.registry.extend(registered, new)
    graph.save(path)
    return time.perf_counter() - started


def _namespace_state(store: Path, user: str) -> Path:
    from pmem.server import Namespace
    from pmem.server._store import NAMESPACE_RECORD, NAMESPACES, STATE_FILE

    namespace = Namespace.of(user)
    folder = store / NAMESPACES / namespace.folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / NAMESPACE_RECORD).write_text(json.dumps(namespace.ids()))
    return folder / STATE_FILE


def _start_server(store: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = store.parent / "server.log"
    with open(log, "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "pmem.cli", "mcp", "--store", str(store), "--http", "--port", "0"],
            env={**os.environ, "PMEM_MCP_TOKEN": TOKEN},
            stderr=err,
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if " on http://" in line:
                return process, line.rsplit(" on ", 1)[1].strip()
        if process.poll() is not None:
            break
        time.sleep(0.1)
    msg = f"pmem mcp did not start: {log.read_text()[-2000:]}"
    raise RuntimeError(msg)


def _stats(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "median_ms": 1000 * statistics.median(ordered),
        "p95_ms": 1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


async def _through_server(
    url: str, users: dict[int, str], calls: int, warmup: int
) -> dict[int, dict[str, Any]]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    out: dict[int, dict[str, Any]] = {}
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=600) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for facts, user in users.items():
            keys = max(1, facts // FACTS_PER_KEY)

            async def call(tool: str, args: dict[str, Any], user: str = user) -> float:
                t0 = time.perf_counter()
                result = await session.call_tool(tool, {"user_id": user, **args})
                elapsed = time.perf_counter() - t0
                if result.is_error:
                    raise RuntimeError(f"{tool}: {result.content}")
                return elapsed

            loaded = await call("get", {"key": "person0.city"})  # the first call loads the state
            kinds: dict[str, list[float]] = {"update": [], "new key": [], "search": []}
            for i in range(warmup + calls):
                k = (i * 7919) % keys
                update = await call("add", {"text": _fact(k, FACTS_PER_KEY + i)[0]})
                new = await call("add", {"text": f"The city of Newcomer{i} is Town{i}."})
                search = await call("search", {"query": f"Where does Person{k} live?", "k": 12})
                if i >= warmup:
                    kinds["update"].append(update)
                    kinds["new key"].append(new)
                    kinds["search"].append(search)
            out[facts] = {"first call s": loaded, **{kind: _stats(v) for kind, v in kinds.items()}}
    return out


def _in_process(state: Path, facts: int, calls: int, warmup: int) -> dict[str, float]:
    """``Memory.search`` on the same state, in this process (the server's search without the server)."""
    import pmem

    memory = pmem.Memory.load(state)
    keys = max(1, facts // FACTS_PER_KEY)
    times = []
    for i in range(warmup + calls):
        query = f"Where does Person{(i * 7919) % keys} live?"
        t0 = time.perf_counter()
        memory.search(query, 12)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    memory.close()
    return _stats(times)


def run(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in str(args.sizes).split(",")]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pmem-perf-server-"))
    store = root / "store"
    users = {facts: f"perf{facts}" for facts in sizes}
    states: dict[int, Path] = {}
    for facts, user in users.items():
        states[facts] = path = _namespace_state(store, user)
        print(f"building {facts:,} facts ({max(1, facts // FACTS_PER_KEY):,} keys) ...", flush=True)
        seconds = build_state(path, facts)
        print(f"  {seconds:.1f} s, {path.stat().st_size / 2**20:.1f} MiB", flush=True)
    in_process = {facts: _in_process(states[facts], facts, args.calls, args.warmup) for facts in sizes}
    process, url = _start_server(store)
    try:
        served = asyncio.run(_through_server(url, users, args.calls, args.warmup))
    finally:
        process.terminate()
        process.wait(timeout=120)
    print()
    print(
        f"pmem perf server: {args.calls} timed calls of each kind per namespace, MCP over HTTP on 127.0.0.1"
    )
    header = f"{'facts':>10} {'kind':>22} {'median ms':>10} {'p95 ms':>10}"
    print(header)
    for facts in sizes:
        row = served[facts]
        print(f"{facts:>10,} {'first call (load) s':>22} {row['first call s']:>10.2f}")
        for kind in ("update", "new key", "search"):
            print(
                f"{facts:>10,} {'durable add: ' + kind if kind != 'search' else 'search (server)':>22} {row[kind]['median_ms']:>10.2f} {row[kind]['p95_ms']:>10.2f}"
            )
        print(
            f"{facts:>10,} {'Memory.search in-proc':>22} {in_process[facts]['median_ms']:>10.2f} {in_process[facts]['p95_ms']:>10.2f}"
        )
    small, large = sizes[0], sizes[-1]
    print()
    for kind in ("update", "new key"):
        ratio = served[large][kind]["median_ms"] / served[small][kind]["median_ms"]
        p95 = served[large][kind]["p95_ms"] / served[small][kind]["p95_ms"]
        print(
            f"durable add ({kind}) at {large:,} / at {small:,}: median {ratio:.2f}x, p95 {p95:.2f}x (target <= 1.5x)"
        )
    search = served[large]["search"]["p95_ms"] / in_process[large]["p95_ms"]
    print(
        f"search p95 at {large:,}: server {served[large]['search']['p95_ms']:.2f} ms vs in-process Memory.search {in_process[large]['p95_ms']:.2f} ms ({search:.2f}x)"
    )
    if args.keep is None:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("server", __doc__, add_arguments, run))
