"""Every arm over the `openai` backend against the local OpenAI-compatible server (real HTTP on
127.0.0.1): one history of each benchmark, every call logged with its purpose; and model output that
fails to parse degrades to a logged noop, never a crash."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from pmem.arms import ARM_NAMES, ModelSet, make_arm
from pmem.arms._cli import plumbing
from pmem.arms._harness import run_history
from pmem.bench import Event, History, iter_histories
from pmem.models import PURPOSES, make_chat_model, make_embedder
from pmem.models.server import ServerThread

FIXTURE = Path(__file__).resolve().parents[1] / "bench" / "fixtures" / "longmemeval_synthetic.json"


@pytest.fixture(scope="module")
def server():
    with ServerThread() as srv:
        yield srv


def _histories():
    fc = next(iter_histories("factconsolidation", "sh_6k"))
    # the first 60 facts and the questions whose stale key they cover keep the run short
    small_fc = History(
        fc.id, fc.benchmark, fc.subset, fc.events[:60], tuple(q for q in fc.questions[:10]), fc.params
    )
    return [
        next(iter_histories("alfworld-revision", "chains", L=2, cases=1)),
        next(iter_histories("alfworld-revision", "retraction", d=0, cases=1)),
        next(iter_histories("alfworld-revision", "conflict", cases=1)),
        small_fc,
        next(iter_histories("longmemeval", "s", path=str(FIXTURE), verify=False)),
    ]


def test_every_arm_runs_over_openai_with_every_call_labelled(server):
    out = io.StringIO()
    res = asyncio.run(plumbing(server.url, "heuristic", "hashing", histories=_histories(), out=out))
    assert len(res) == len(ARM_NAMES) * 5
    for key, v in res.items():
        assert v["errors"] == 0, key
        assert v["unlabelled"] == 0, key
        assert v["purposes"].get("answer", 0) >= 1, key
        assert set(v["purposes"]) <= {*PURPOSES, "embed"}, key
    # the P-Mem write path calls extract/annotate on event streams, extract/identity on fact streams
    assert res["pmem|alfworld-revision/chains/L2/case000"]["purposes"].get("annotate", 0) > 0
    # embedding calls are grouped under their (history, arm) too
    assert res["pmem|alfworld-revision/chains/L2/case000"]["purposes"].get("embed", 0) > 0
    assert res["crud|factconsolidation/sh_6k"]["purposes"].get("crud", 0) > 0
    assert res["bitemporal|factconsolidation/sh_6k"]["purposes"].get("dedupe", 0) > 0
    # same answers as the in-process heuristic agent: the HTTP path changes nothing
    assert res["pmem|alfworld-revision/chains/L2/case000"]["accuracy"] == 1.0
    assert "pmem-oracle" in out.getvalue()


def _openai_models(srv):
    return ModelSet(
        make_chat_model({"backend": "openai", "url": srv.url, "model": "heuristic"}),
        make_embedder({"backend": "openai", "url": srv.url, "model": "hashing"}),
    )


async def _closing(models, coro):
    try:
        return await coro
    finally:
        await models.agent.aclose()
        await models.embedder.aclose()


def test_unparseable_annotation_becomes_a_logged_noop(server):
    event = Event(0, "Earlier observation: apple 1 was in fridge 1.", source="environment")
    # request order for one event: extract (chat), embed the new key, annotate (chat)
    server.set_faults(script=["ok", "ok", "malformed"])
    try:
        models = _openai_models(server)
        arm = make_arm("pmem", models)
        asyncio.run(_closing(models, arm.ingest([event])))
    finally:
        server.set_faults(script=[])
    log = arm.write_log()
    assert len(log) == 1 and log[0].op == "noop" and not log[0].applied
    assert "annotation" in log[0].reason
    assert arm.graph().cell("apple_1.location") is None  # nothing was applied


def test_every_reply_malformed_still_completes(server):
    h = next(iter_histories("alfworld-revision", "retraction", d=0, cases=1))
    server.set_faults(rates={"malformed": 1.0})
    try:
        for name in ("pmem", "crud", "bitemporal", "add-only"):
            models = _openai_models(server)
            arm = make_arm(name, models)
            rows = asyncio.run(_closing(models, run_history(arm, h)))
            assert len(rows) == len(h.questions)
            reasons = [w.reason or "" for w in arm.write_log()]
            assert any("extract" in r for r in reasons), name
    finally:
        server.set_faults(rates={})


def test_plumbing_runs_longmemeval_only_from_the_file_it_is_given():
    from pmem.arms._cli import _plumbing_histories

    without = [h.benchmark for h in _plumbing_histories()]
    with_file = [h.benchmark for h in _plumbing_histories(str(FIXTURE))]
    assert "longmemeval" not in without
    assert with_file == [*without, "longmemeval"]


def test_the_provenance_probes_run_over_openai_with_no_errors(server):
    """Acceptance 4: every arm through the OpenAI protocol on a few cases of each probe subset; P-Mem's
    answers are those of the in-process heuristic agent."""
    from pmem.bench._probes import SOURCE_AUTHORITY, SUBSETS

    hs = [h for s in SUBSETS for h in iter_histories("provenance-probes", s, cases=2)]
    res = asyncio.run(plumbing(server.url, "heuristic", "hashing", histories=hs, out=io.StringIO()))
    assert len(res) == len(ARM_NAMES) * len(hs)
    assert sum(v["errors"] for v in res.values()) == 0
    assert all(v["unlabelled"] == 0 for v in res.values())
    local = ModelSet(make_chat_model("heuristic"), make_embedder("hashing"))
    for h in hs:
        arm = make_arm("pmem", local, {"authority": SOURCE_AUTHORITY})
        rows = asyncio.run(run_history(arm, h))
        expected = sum(bool(r["correct"]) for r in rows) / len(rows)
        assert res[f"pmem|{h.id}"]["accuracy"] == expected, h.id
        # every probe after its critical event passes (before a correction, the wrong merge still holds)
        assert all(r["correct"] for r in rows if not r["qtype"].startswith("before")), h.id
    # the write path's new requests travel over HTTP too: a forget became an erase
    assert res["pmem|provenance-probes/erasure/case000"]["purposes"].get("extract", 0) > 0
