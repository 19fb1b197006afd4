"""A reply cut at the reply limit is never a silent loss (issue 55, write path): the extraction of a unit
whose reply stopped at ``max_tokens`` is not parsed as it is (it lost the facts after the cut); the unit
is split in two and each half asked again, each split logged, and an event whose own reply is cut is a
noop saying so. Over real HTTP: the local OpenAI-compatible server cuts replies at ``max_tokens`` as a
model server does (``cut_replies``), and the openai backend caps every call's reply
(``max_reply_tokens``).

Before, a cut reply was "extract: reply is not a JSON object" and every fact of the unit was gone (17 of
pmem's LoCoMo extractions in the committed accuracy run)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from pmem.bench import iter_histories
from pmem.memory._writepath import WritePath
from pmem.memory._writer import Writer
from pmem.models import make_chat_model, make_embedder
from pmem.models._heuristic import HeuristicChatModel
from pmem.models.server import ServerThread


@pytest.fixture(scope="module")
def server():
    with ServerThread(cut_replies=True) as srv:
        yield srv


def _extract(
    url: str, limit: int | None, events: list
) -> tuple[list[tuple[str, str, int]], str | None, list[str]]:
    """The unit's facts (key, value, event), its extraction's error, and the noops logged."""
    config = {"backend": "openai", "url": url, "model": "heuristic"}
    if limit is not None:
        config["max_reply_tokens"] = limit

    async def run() -> tuple[list[tuple[str, str, int]], str | None, list[str]]:
        agent = make_chat_model(config)
        writer = Writer(agent, make_embedder({"backend": "hashing"}))
        try:
            (extraction,) = await WritePath(writer, {}).write([events])
        finally:
            await agent.aclose()
        noops = [r.reason or "" for r in writer.take_write_log() if r.op == "noop"]
        return [(f.key, f.value, f.event) for f in extraction.facts], extraction.error, noops

    return asyncio.run(run())


UNIT = list(next(iter_histories("factconsolidation", "sh_6k")).events[:8])


def test_a_unit_whose_reply_is_cut_is_split_and_asked_again_losing_nothing(server) -> None:
    whole, error, noops = _extract(server.url, None, UNIT)
    assert len(whole) == 8 and error is None and noops == []
    split, error, noops = _extract(server.url, 60, UNIT)
    assert split == whole and error is None  # every fact, each from its own event
    assert noops[0] == (
        "extract: the reply was cut at the reply limit (60 tokens): the unit's 8 events asked again as 4 and 4"
    )
    assert len(noops) == 3  # 8 -> 4 + 4 -> each 4 -> 2 + 2: every split logged


def test_an_event_whose_own_reply_is_cut_is_a_noop_that_says_so(server) -> None:
    whole, _, _ = _extract(server.url, None, UNIT)
    kept, error, _ = _extract(server.url, 30, UNIT)
    assert error == "extract: the reply was cut at the reply limit (30 tokens) on one event: nothing to split"
    assert set(kept) < set(whole) and len(kept) == len(whole) - 1  # the others' facts are kept


class LongUnitsGarbled(HeuristicChatModel):
    """A model whose extraction of more than two events is no JSON (a small model's prose, or its JSON
    broken off mid-object), and whose replies are otherwise the heuristic agent's."""

    async def generate(self, messages, options):  # type: ignore[no-untyped-def]
        reply = await super().generate(messages, options)
        text = messages[-1]["content"].split("### TEXT", 1)[-1]
        if options.purpose == "extract" and len([ln for ln in text.splitlines() if ln.strip()]) > 2:
            return dataclasses.replace(reply, text="Here are the facts: city of Person0 is", parsed=None)
        return reply


def test_a_reply_that_is_no_json_is_split_and_asked_again_losing_nothing() -> None:
    async def run(agent) -> tuple[list[tuple[str, str, int]], list[str]]:  # type: ignore[no-untyped-def]
        writer = Writer(agent, make_embedder({"backend": "hashing"}))
        (extraction,) = await WritePath(writer, {}).write([UNIT])
        noops = [r.reason or "" for r in writer.take_write_log() if r.op == "noop"]
        return [(f.key, f.value, f.event) for f in extraction.facts], noops

    whole, _ = asyncio.run(run(make_chat_model({"backend": "heuristic"})))
    split, noops = asyncio.run(run(LongUnitsGarbled()))
    assert split == whole and len(whole) == 8
    assert noops == [
        "extract: the reply is not a JSON object: the unit's 8 events asked again as 4 and 4",
        "extract: the reply is not a JSON object: the unit's 4 events asked again as 2 and 2",
        "extract: the reply is not a JSON object: the unit's 4 events asked again as 2 and 2",
    ]
