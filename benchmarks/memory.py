"""``pmem perf memory``: ``Memory.add`` and ``Memory.search`` per call, against the ``pmem`` arm's own
path as a sweep runs it (one event through ``ingest``; the state read of 12 cells) in the same run, over a
10,000-cell memory.

Both run the heuristic agent and the hashing embedder, so only the memory code is timed: the target
(issue 30) is that the library's entry costs no more than the harness's path, a ratio <= 1.0 (within
the machine's noise). Interleaved repetitions, best of each, on process CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import time

CELLS = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cells", type=int, default=CELLS, help=f"cells in the memory before timing ({CELLS:,})"
    )
    parser.add_argument(
        "--calls", type=int, default=300, help="timed calls of each kind per repetition (300)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="interleaved repetitions; the best is reported (3)"
    )


def _text(i: int) -> str:
    return f"Earlier observation: widget {i} was in drawer {i % 97}."


def _arm() -> object:
    """The arm as a sweep runs it: its models' calls recorded in a request log."""
    from pmem.arms import ModelSet, make_arm
    from pmem.models import RequestLog, make_chat_model, make_embedder

    log = RequestLog()
    models = ModelSet(agent=make_chat_model("heuristic", log=log), embedder=make_embedder("hashing", log=log))
    return make_arm("pmem", models, {"stream": "events", "top_k": 12})


def run(args: argparse.Namespace) -> int:
    from pmem.bench._types import Event
    from pmem.memory import AsyncMemory

    async def fill() -> tuple[AsyncMemory, object]:
        memory, arm = AsyncMemory(), _arm()
        events = [Event(i, _text(i)) for i in range(args.cells)]
        await arm.ingest(events)  # type: ignore[attr-defined]
        for e in events:
            await memory.add(e.text)
        await arm.path.search_keys("warm up the index", 12)  # type: ignore[attr-defined]
        await memory.search("warm up the index")
        return memory, arm

    async def measure(memory: AsyncMemory, arm: object, first: int) -> dict[str, float]:
        from pmem.bench._types import Event, Question

        out: dict[str, float] = {}
        texts = [_text(first + i) for i in range(args.calls)]
        t0 = time.process_time()
        for i, text in enumerate(texts):
            await arm.ingest([Event(first + i, text)])  # type: ignore[attr-defined]
        out["arm add"] = (time.process_time() - t0) / args.calls
        t0 = time.process_time()
        for text in texts:
            await memory.add(text)
        out["Memory.add"] = (time.process_time() - t0) / args.calls
        queries = [f"Where is widget {i * 31 % args.cells}?" for i in range(args.calls)]
        questions = [Question(f"q{i}", q, ("",), "current", first) for i, q in enumerate(queries)]
        t0 = time.process_time()
        for question in questions:
            await arm.read(question)  # type: ignore[attr-defined]  # the state read: 12 cells, rendered
        out["arm search"] = (time.process_time() - t0) / args.calls
        t0 = time.process_time()
        for q in queries:
            await memory.search(q, 12)
        out["Memory.search"] = (time.process_time() - t0) / args.calls
        return out

    async def main() -> dict[str, float]:
        print(f"filling a memory and an arm with {args.cells:,} cells each ...", flush=True)
        memory, arm = await fill()
        best: dict[str, float] = {}
        for r in range(args.repeat):
            for name, value in (await measure(memory, arm, args.cells + r * args.calls)).items():
                best[name] = min(best.get(name, float("inf")), value)
        return best

    best = asyncio.run(main())
    print(f"per call, process CPU time, best of {args.repeat} interleaved repetitions of {args.calls} calls")
    for kind in ("add", "search"):
        arm_s, mem_s = best[f"arm {kind}"], best[f"Memory.{kind}"]
        print(
            f"{kind:<7}: Memory {1e3 * mem_s:7.3f} ms, arm {1e3 * arm_s:7.3f} ms, ratio {mem_s / arm_s:.2f}x (target <= 1.0x)"
        )
    return 0


if __name__ == "__main__":
    from benchmarks import run_as_script

    raise SystemExit(run_as_script("memory", __doc__, add_arguments, run))
