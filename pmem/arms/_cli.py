"""``pmem arms``: list the arms, print the acceptance measurements, run the plumbing check.

- ``pmem arms list``: arm names, classes and prompt-template hashes.
- ``pmem arms check [--cases N] [--only chains retraction conflict factconsolidation]``: the issue's
  acceptance measurements with the heuristic agent and the hashing embedder (no LLM).
- ``pmem arms plumbing [--url URL --model M --embed-model E] [--longmemeval FILE]``: every arm against
  the ``openai`` backend for one history of each benchmark (LongMemEval's when a file is given); without ``--url`` a local stand-in server is started on
  127.0.0.1. Every model call is logged with its purpose and the per-purpose counts are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pmem.arms import ARM_NAMES, ModelSet, arm_names, make_arm, resolve_arm
from pmem.arms._common import ArmBase
from pmem.arms._harness import mean, run_history, run_many, store_values
from pmem.bench import SOURCE_AUTHORITY, benchmark_info, iter_histories
from pmem.bench.alfworld_templates import QUERY_PATTERN, location_key
from pmem.memory.prompts import prompt_hashes, prompt_templates_hash
from pmem.models import CallContext, ChatModel, Embedder, RequestLog, make_chat_model, make_embedder
from pmem.models.server import ServerThread

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy as np

    from pmem.arms._base import ModelSet
    from pmem.models import CallContext, CallOptions, Completion, Embedding

SECTIONS = ("chains", "retraction", "conflict", "factconsolidation")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="arms_command", metavar="ACTION")
    sub.add_parser("list", help="arm names, classes and prompt hashes")
    check = sub.add_parser("check", help="acceptance measurements (heuristic agent, hashing embedder)")
    check.add_argument("--cases", type=int, default=140, help="ALFWorld-Revision cases per setting (140)")
    check.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="measure only these settings (all)",
    )
    check.add_argument("--concurrency", type=int, default=32, help="histories in flight (32)")
    plumb = sub.add_parser("plumbing", help="every arm against the openai backend, one history per benchmark")
    plumb.add_argument(
        "--url",
        default=None,
        help="OpenAI-compatible base URL ending in /v1 (default: local stand-in server)",
    )
    plumb.add_argument("--model", default="heuristic", help="chat model name the server serves (heuristic)")
    plumb.add_argument(
        "--embed-model", default="hashing", help="embedding model name the server serves (hashing)"
    )
    plumb.add_argument("--arms", nargs="+", default=None, help="arms to run (default: every arm)")
    plumb.add_argument(
        "--longmemeval",
        metavar="FILE",
        default=None,
        help="a LongMemEval-format JSON file: also run its first history (unverified; a fixture is fine)",
    )


def _models() -> Callable[[], ModelSet]:

    agent, emb = make_chat_model("heuristic"), make_embedder("hashing")
    return lambda: ModelSet(agent, emb)


def _pct(x: float | None) -> str:
    return "   n/a" if x is None else f"{100 * x:5.1f}%"


def _query_key(text: str) -> str:
    """The location key an ALFWorld-Revision query asks about (refused for any other text, whose
    store check would silently look up nothing)."""

    m = QUERY_PATTERN.match(text.strip())
    if m is None:
        msg = f"not an ALFWorld-Revision location query: {text!r}"
        raise ValueError(msg)
    return location_key(m.group("obj"))


async def _chains(cases: int, conc: int) -> None:

    models = _models()
    print("== 1. ALFWorld-Revision chains (current-value accuracy, mean read chars per query)")
    print(f"   n = {cases} per L; P-Mem reads its top-1 cell, raw reads the top-10 events")
    arms = ("pmem", "pmem-oracle", "raw", "raw-ordered")
    print("   L  " + "".join(f"{a:>26}" for a in arms))
    for L in (1, 2, 4, 8):
        hs = list(iter_histories("alfworld-revision", "chains", L=L, cases=cases))
        cells = []
        for arm in arms:
            rows = await run_many(arm, models, hs, concurrency=conc)
            acc, chars = mean([r["correct"] for r in rows]), mean([r["read_chars"] for r in rows])
            cells.append(f"{_pct(acc)} / {chars:6.0f} chars")
        print(f"   {L}  " + "".join(f"{c:>26}" for c in cells))


async def _retraction(cases: int, conc: int) -> None:

    models = _models()
    print(
        "== 2. Retraction (committed = pre-retraction answer is v2; recovered = post-retraction answer is v1, "
        "over committed cases; v1 in store at the end)"
    )
    arms = ("pmem", "pmem-no-retention", "raw", "crud", "add-only", "bitemporal")
    print(f"   {'arm':<20}{'d':>4}{'committed':>11}{'recovered':>11}{'v1 in store':>13}")
    for d in (0, 32):
        hs = list(iter_histories("alfworld-revision", "retraction", d=d, cases=cases))
        for arm in arms:
            present: dict[str, bool] = {}

            def after(a: Any, h: Any, present: dict[str, bool] = present) -> None:
                key = _query_key(h.questions[0].text)
                present[h.id] = h.params["v1"] in store_values(a, key)[1]

            rows = await run_many(arm, models, hs, concurrency=conc, after=after)
            by_h: dict[str, dict[str, Any]] = {}
            for r in rows:
                by_h.setdefault(r["history"], {})[r["qtype"]] = r["correct"]
            committed = [h for h, v in by_h.items() if v.get("before_retraction")]
            recovered = mean([by_h[h].get("after_retraction") for h in committed])
            print(
                f"   {arm:<20}{d:>4}{_pct(len(committed) / len(by_h)):>11}{_pct(recovered):>11}"
                f"{_pct(mean(list(present.values()))):>13}"
            )


async def _conflict(cases: int, conc: int) -> None:

    models = _models()
    print(
        "== 3. Conflict (before settling: both candidates held in the store, the read flags the conflict, "
        "the answer gives both; after settling: accuracy)"
    )
    arms = ("pmem", "pmem-oracle", "pmem-no-retention", "crud", "raw", "add-only", "bitemporal")
    hs = list(iter_histories("alfworld-revision", "conflict", cases=cases))
    print(f"   {'arm':<20}{'both held':>11}{'flagged':>10}{'answered both':>15}{'after settle':>14}")
    for arm in arms:

        def probe(a: Any, q: Any) -> dict[str, Any]:
            if q.qtype != "before_settle":
                return {}
            current, _ = store_values(a, _query_key(q.text))
            return {"both_held": set(q.gold) <= current}

        rows = await run_many(arm, models, hs, probe=probe, concurrency=conc)
        before = [r for r in rows if r["qtype"] == "before_settle"]
        after = [r for r in rows if r["qtype"] == "after_settle"]
        flagged = await _flag_rate(arm, hs, models)
        print(
            f"   {arm:<20}{_pct(mean([r['both_held'] for r in before])):>11}{_pct(flagged):>10}"
            f"{_pct(mean([r['correct'] for r in before])):>15}{_pct(mean([r['correct'] for r in after])):>14}"
        )


async def _flag_rate(arm_name: str, histories: list[Any], models: Any) -> float | None:
    """Share of pre-settle reads that mark the queried value as contested."""

    hits = []
    for h in histories:
        arm = make_arm(arm_name, models())
        q = next(q for q in h.questions if q.qtype == "before_settle")
        await arm.ingest(list(h.events[: q.after_event + 1]))
        read = await arm.read(q)
        hits.append("[contested]" in read.text)
    return sum(hits) / len(hits) if hits else None


async def _factconsolidation(conc: int) -> None:

    models = _models()
    print(
        "== 4. FactConsolidation 6k: write-path audit (gold current value in an active cell / in a cell "
        "written from its own key; stale sibling rate over overwritten keys)"
    )
    sh = next(iter_histories("factconsolidation", "sh_6k"))
    mh = next(iter_histories("factconsolidation", "mh_6k"))
    for name, label in (
        ("pmem-oracle", "template (oracle) write path"),
        ("pmem", "heuristic extraction + soft identity"),
        ("pmem-no-identity", "heuristic extraction, no soft identity"),
    ):
        arm = make_arm(name, models())
        if not isinstance(arm, ArmBase):  # the write-path audit is ArmBase's
            msg = f"arm {name!r} has no write-path audit"
            raise TypeError(msg)
        await arm.ingest(list(sh.events))
        a = arm.audit(sh)
        print(
            f"   {label:<40} gold keys {a['gold_keys']}, cells {a['active_items']}: "
            f"gold in active cell {_pct(a['gold_in_active_cell'])}, in matching cell "
            f"{_pct(a['gold_in_matching_cell'])}, stale sibling {_pct(a['stale_sibling_rate'])} "
            f"of {a['overwritten_keys']} overwritten keys"
        )
    print(
        "   every arm end to end (accuracy, single-hop stale rate, mean read chars, write-side model calls):"
    )
    print(f"   {'arm':<20}{'sh_6k':>8}{'stale':>8}{'mh_6k':>8}{'chars':>9}{'write calls':>13}{'wall s':>8}")
    for name in ARM_NAMES:
        t0 = time.perf_counter()
        arm_sh = make_arm(name, models())
        rows_sh = await run_history(arm_sh, sh)
        arm_mh = make_arm(name, models())
        rows_mh = await run_history(arm_mh, mh)
        chars = mean([r["read_chars"] for r in rows_sh + rows_mh])
        print(
            f"   {name:<20}{_pct(mean([r['correct'] for r in rows_sh])):>8}"
            f"{_pct(mean([r['stale'] for r in rows_sh])):>8}{_pct(mean([r['correct'] for r in rows_mh])):>8}"
            f"{chars:9.0f}{arm_sh.write_stats().model_calls:>13}{time.perf_counter() - t0:8.2f}"
        )
    del conc


def _list() -> int:

    for name in arm_names():
        entry = resolve_arm(name)
        needs = f"needs pip install 'pmem[{entry.extra}]' and a real model" if entry.extra else ""
        print(f"{name:<20} {entry.target.rsplit(':', 1)[1]:<16} {dict(entry.options) or needs}")
    print(f"prompt templates hash {prompt_templates_hash()}")
    for name, h in prompt_hashes().items():
        print(f"  {name:<10} {h}")
    return 0


def _plumbing_options(arm: str, options: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any] | None:

    if options is not None:
        return dict(options.get(arm, {}))
    return {"authority": SOURCE_AUTHORITY} if arm.startswith("pmem") else None


def _plumbing_histories(longmemeval: str | None = None) -> list[Any]:

    hs = [
        next(iter_histories("alfworld-revision", "chains", L=2, cases=1)),
        next(iter_histories("alfworld-revision", "retraction", d=0, cases=1)),
        next(iter_histories("alfworld-revision", "conflict", cases=1)),
        next(iter_histories("factconsolidation", "sh_6k")),
        *(
            next(iter_histories("provenance-probes", s, cases=1))
            for s in benchmark_info("provenance-probes").subsets
        ),
    ]
    if longmemeval is not None:
        hs.append(next(iter_histories("longmemeval", "s", path=longmemeval, verify=False)))
    return hs


async def plumbing(
    url: str,
    model: str,
    embed_model: str,
    arms: list[str] | None = None,
    histories: list[Any] | None = None,
    out: Any = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every arm x history over the openai backend; returns per-(arm, history) purpose counts.

    ``options``: arm -> its options (``[arm_options.ARM]``); by default every P-Mem arm ranks sources
    as the provenance probes' job does (``pmem.bench._probes.SOURCE_AUTHORITY``)."""

    out = out or sys.stdout
    log = RequestLog()
    agent = make_chat_model({"backend": "openai", "url": url, "model": model}, log=log)
    emb = make_embedder({"backend": "openai", "url": url, "model": embed_model}, log=log)
    results: dict[str, Any] = {}
    for h in histories or _plumbing_histories():
        for name in arms or ARM_NAMES:
            ctx = CallContext(history_id=h.id, arm=name)
            models = ModelSet(_BoundChat(agent, ctx), _BoundEmbedder(emb, ctx))

            arm = make_arm(name, models, _plumbing_options(name, options))
            rows = await run_history(arm, h)
            recs = log.drain(h.id, name)
            purposes = Counter(r.purpose for r in recs)
            errors = sum(1 for r in recs if r.error and not r.error.startswith("parse"))
            scored = [bool(r["correct"]) for r in rows if r["correct"] is not None]  # judge-scored: n/a here
            acc = sum(scored) / len(scored) if scored else None
            results[f"{name}|{h.id}"] = {
                "purposes": dict(purposes),
                "errors": errors,
                "accuracy": acc,
                "calls": len(recs),
                "unlabelled": sum(1 for r in recs if not r.purpose),
            }
            print(
                f"{name:<18} {h.id:<42} acc {_pct(acc)}  calls {len(recs):>5}  errors {errors}  "
                + " ".join(f"{p}={n}" for p, n in sorted(purposes.items())),
                file=out,
            )
    for m in (agent, emb):
        await m.aclose()
    return results


class _BoundChat(ChatModel):
    """Passes a fixed CallContext (history, arm) on every call so the request log can group rows."""

    def __init__(self, inner: ChatModel, context: CallContext) -> None:
        self._inner, self._ctx = inner, context
        self.model_id = inner.model_id

    async def call(self, messages: Sequence[dict[str, str]], options: CallOptions) -> Completion:
        if options.context is None:
            options = dataclasses.replace(options, context=self._ctx)
        return await self._inner.call(messages, options)


class _BoundEmbedder(Embedder):
    """:class:`_BoundChat` for an embedder (both entry points, so an embedder's fast ``embed`` is kept)."""

    def __init__(self, inner: Embedder, context: CallContext) -> None:
        self._inner, self._ctx = inner, context
        self.model_id = inner.model_id

    async def embed(self, texts: Sequence[str], *, context: CallContext | None = None) -> np.ndarray:
        return await self._inner.embed(texts, context=context or self._ctx)

    async def embed_usage(self, texts: Sequence[str], *, context: CallContext | None = None) -> Embedding:
        return await self._inner.embed_usage(texts, context=context or self._ctx)


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "arms_command", None)
    if cmd == "list" or cmd is None:
        return _list()
    if cmd == "plumbing":
        if args.url:
            asyncio.run(
                plumbing(
                    args.url, args.model, args.embed_model, args.arms, _plumbing_histories(args.longmemeval)
                )
            )
            return 0

        with ServerThread() as srv:
            print(f"stand-in OpenAI-compatible server at {srv.url}")
            histories = _plumbing_histories(args.longmemeval)
            res = asyncio.run(plumbing(srv.url, args.model, args.embed_model, args.arms, histories))
        bad = [k for k, v in res.items() if v["errors"] or v["unlabelled"]]
        print(
            f"{len(res)} arm x history runs, {sum(v['calls'] for v in res.values())} logged calls, "
            f"{len(bad)} with errors or unlabelled calls"
        )
        return 1 if bad else 0
    t0 = time.perf_counter()
    for section in args.only:
        t = time.perf_counter()
        if section == "chains":
            asyncio.run(_chains(args.cases, args.concurrency))
        elif section == "retraction":
            asyncio.run(_retraction(args.cases, args.concurrency))
        elif section == "conflict":
            asyncio.run(_conflict(args.cases, args.concurrency))
        else:
            asyncio.run(_factconsolidation(args.concurrency))
        print(f"   ({time.perf_counter() - t:.1f} s)")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0
