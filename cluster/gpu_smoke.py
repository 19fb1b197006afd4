"""GPU smoke test of the model layer: one agent replica and one embedder replica under vLLM on Ray.

    python cluster/gpu_smoke.py --agent /models/Qwen3-4B-Instruct-2507 --embedder /models/Qwen3-Embedding-4B

Starts both with ``vllm serve`` (Ray actors, one GPU each), runs 200 schema-constrained extraction
calls and 200 embedding requests at high concurrency, and prints throughput (requests/s, prompt and
completion tokens/s) and the structured-output parse rate. ``--launcher standin`` runs the same path
on CPU with the heuristic stand-in server (a dry run of the script itself).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import ray

from pmem.arms._prompts import build_messages, template
from pmem.models import CallContext, make_chat_model, make_embedder

# The smoke test sends the project's real extraction prompt and schema (what a sweep sends).
EXTRACT = template("extract")
SUBJECTS = ["Thomas Kyd", "Fatah", "Amy Winehouse", "Hines Ward", "Bengaluru", "apple 1", "mug 2", "Canadair"]


def prompt(i: int) -> list[dict[str, str]]:
    s = SUBJECTS[i % len(SUBJECTS)]
    text = (
        f"{i}. {s} was born in the city of City{i}.\n{i + 1}. The chairperson of {s} is Person {i}.\n"
        f"Update: {s.lower()} has been moved from shelf {i} to table {i + 1}."
    )
    return build_messages("extract", TEXT=text)


async def main_async(args: argparse.Namespace) -> int:
    common = {
        "launcher": args.launcher,
        "replicas": 1,
        "concurrency": args.concurrency,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_model_len": args.max_model_len,
    }
    agent = make_chat_model({"backend": "vllm", "model": args.agent, "served_model_name": "agent", **common})
    embedder = make_embedder(
        {
            "backend": "vllm",
            "model": args.embedder,
            "served_model_name": "embedder",
            **{**common, "gpu_memory_utilization": args.embed_gpu_memory_utilization},
        }
    )
    t0 = time.perf_counter()
    await asyncio.gather(agent.start(), embedder.router._ensure_started())
    print(
        f"replicas healthy after {time.perf_counter() - t0:.1f} s: agent {agent.router.pool.urls}, "
        f"embedder {embedder.router.pool.urls}"
    )
    try:
        t0 = time.perf_counter()
        done = await asyncio.gather(
            *(
                agent.complete(
                    prompt(i),
                    purpose=EXTRACT.purpose,
                    schema=EXTRACT.schema,
                    max_tokens=EXTRACT.max_tokens,
                    context=CallContext(f"h{i % 16}", "smoke"),
                )
                for i in range(args.n)
            )
        )
        el = time.perf_counter() - t0
        errors = [c.error for c in done if c.error]
        parsed = sum(1 for c in done if c.parsed is not None)
        pt, ct = sum(c.prompt_tokens for c in done), sum(c.completion_tokens for c in done)
        print(
            f"chat: {args.n} structured extraction calls in {el:.2f} s: {args.n / el:.1f} req/s, "
            f"{pt / el:,.0f} prompt tok/s, {ct / el:,.0f} completion tok/s; parsed {parsed}/{args.n}; "
            f"errors {len(errors)}" + (f" (first: {errors[0]})" if errors else "")
        )
        print(f"example: {done[0].text[:200]!r}")
        texts = [[f"{SUBJECTS[i % len(SUBJECTS)]}.relation_{i}: value {i}"] * 8 for i in range(args.n)]
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(
                embedder.embed_usage(t, context=CallContext(f"h{i % 16}", "smoke"))
                for i, t in enumerate(texts)
            )
        )
        el = time.perf_counter() - t0
        tokens = sum(r[1] for r in results)
        print(
            f"embeddings: {args.n} requests x 8 texts in {el:.2f} s: {args.n / el:.1f} req/s, "
            f"{tokens / el:,.0f} prompt tok/s; dim {results[0][0].shape[1]}"
        )
        return 1 if errors else 0
    finally:
        await agent.aclose()
        await embedder.aclose()
        agent.stop()
        embedder.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agent", required=True, help="local weights path of the agent model")
    p.add_argument("--embedder", required=True, help="local weights path of the embedding model")
    p.add_argument("--launcher", default="vllm", choices=["vllm", "standin", "auto"])
    p.add_argument("-n", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--gpus", type=int, default=None, help="GPUs for a local Ray (default: detected)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--embed-gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--max-model-len", type=int, default=8192)
    args = p.parse_args()
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        ray.init(address=address) if address else ray.init(num_gpus=args.gpus)
    gpus = ray.cluster_resources().get("GPU", 0)
    if gpus < 2:
        print(f"error: the smoke test needs 2 GPUs (agent + embedder); Ray sees {gpus:g}", file=sys.stderr)
        return 2
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
