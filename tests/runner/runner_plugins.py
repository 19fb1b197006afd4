"""A real (small) arm and small benchmarks for the runner's tests, loaded as config plugins.

``TinyArm`` is a complete memory over the real model layer and the real core graph: every event goes
to the agent with the ``extract`` prompt, each fact is committed with ``accept``, and a question is
answered by the agent from the frontier (``answer`` prompt). It is not a fake: with the heuristic
agent it answers ALFWorld-Revision chains correctly. The package's arms are tested elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pmem
from pmem.arms import register_arm
from pmem.arms._base import Answer, ModelSet, ReadResult, WriteRecord, WriteStats
from pmem.bench._types import Event, History, Question
from pmem.models._types import CallContext
from pmem.models.sections import format_sections


class TinyArm:
    name = "tiny"

    def __init__(self, models: ModelSet, options: dict[str, Any]) -> None:
        self.models = models
        self.graph_ = pmem.ProvenanceGraph()
        self.log: list[WriteRecord] = []
        self.stats = WriteStats()
        self.ctx = CallContext()
        # simulated model latency per event (lets tests kill things while histories are in flight)
        self.delay_s = float(options.get("event_delay_s", 0.0))
        # the first history to start ingesting claims this file (writing its runner's pid) and then waits
        # to be killed: a test can kill a runner that certainly holds uncommitted work, without timing luck
        self.hold_once = options.get("hold_once")

    async def ingest(self, events: Sequence[Event]) -> None:
        if self.hold_once:
            try:
                fd = os.open(self.hold_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                await asyncio.sleep(600)
        for ev in events:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            prompt = format_sections({"TEXT": ev.text})
            c = await self.models.agent.complete(
                [{"role": "user", "content": prompt}],
                purpose="extract",
                schema={"type": "object", "properties": {"facts": {}}},
            )
            self.stats.model_calls += 1
            self.stats.prompt_tokens += c.prompt_tokens
            self.stats.completion_tokens += c.completion_tokens
            facts = (c.parsed or json.loads(c.text or "{}")).get("facts", [])
            eid = self.graph_.observe(ev.text, source=ev.source)
            for f in facts:
                r = self.graph_.apply("accept", f["key"], f["value"], evidence=eid)
                self.log.append(WriteRecord(len(self.log), r.op, f["key"], f["value"], r.applied, r.reason))
                self.stats.facts += 1
                self.stats.ops[r.op] = self.stats.ops.get(r.op, 0) + 1
        self.stats.cells = len(self.graph_.frontier())

    async def read(self, question: Question) -> ReadResult:
        lines = [f"{k}: {c.value}" for k, c in self.graph_.frontier().items()]
        text = "\n".join(lines)
        return ReadResult(text=text, tokens=(len(text) + 3) // 4, chars=len(text), items=tuple(lines))

    async def answer(self, question: Question) -> Answer:
        read = await self.read(question)
        prompt = format_sections({"CONTEXT": read.text, "QUESTION": question.text})
        c = await self.models.agent.complete([{"role": "user", "content": prompt}], purpose="answer")
        return Answer(prediction=c.text, read=read, raw=c.text)

    def write_stats(self) -> WriteStats:
        return self.stats

    def write_log(self) -> list[WriteRecord]:
        return list(self.log)

    def graph(self) -> pmem.ProvenanceGraph:
        return self.graph_

    def extra(self) -> dict[str, Any]:
        return {"cells": len(self.graph_.frontier())}


def make_tiny(models: ModelSet, options: dict[str, Any]) -> TinyArm:
    return TinyArm(models, options)


#: The tiny arm registered through the arm registry, with a label and a display place right after
#: ``pmem``. A config names it ``runner_plugins:tiny-registered``: each runner imports this module,
#: which registers it (tests/runner/test_runner_plugin_arm.py).
TINY_REGISTERED = register_arm("tiny-registered", make_tiny, label="tiny (registered test plugin)", order=0.5)


#: An event text the poisoning proxy in the tests answers with HTTP 500, forever.
POISON = "The crate was struck by lightning."


def poisoned(subset: str = "default", n: int = 6, poison_at: int = 2) -> Iterator[History]:
    """ALFWorld-Revision-like histories; history number ``poison_at`` contains the poison event."""
    from pmem.bench import iter_histories

    for i, h in enumerate(iter_histories("alfworld-revision", "chains", L=2, cases=n)):
        if i == poison_at:
            events = (
                *h.events[:1],
                Event(index=1, text=POISON),
                *(Event(index=e.index + 1, text=e.text) for e in h.events[1:]),
            )
            qs = tuple(Question(**{**q.__dict__, "after_event": q.after_event + 1}) for q in h.questions)
            h = History(
                id=h.id, benchmark="poisoned", subset=subset, events=events, questions=qs, params=h.params
            )
        else:
            h = History(
                id=h.id,
                benchmark="poisoned",
                subset=subset,
                events=h.events,
                questions=h.questions,
                params=h.params,
            )
        yield h


def judged(subset: str = "default", n: int = 3) -> Iterator[History]:
    """Histories whose questions need a model judge (as LongMemEval's do)."""
    for i in range(n):
        events = (
            Event(
                0,
                f"Update: the mug {i} has been moved from the desk to the shelf {i}.",
                time="2023/05/01",
                session_id=f"s{i}",
                role="user",
            ),
        )
        q = Question(
            id=f"j{i}",
            text=f"Where is the mug {i} now?",
            gold=(f"shelf {i}",),
            qtype="knowledge-update",
            after_event=0,
            needs_judge=True,
            params={"answer_session_ids": [f"s{i}"]},
        )
        yield History(id=f"judged/{i}", benchmark="judged", subset=subset, events=events, questions=(q,))


def ordinary(subset: str = "default", n: int = 2) -> Iterator[History]:
    """Ordinary sentences, none in a benchmark template: the heuristic agent extracts no fact from them."""
    for i in range(n):
        events = (
            Event(0, f"Alice moved to Berlin in spring {2000 + i}."),
            Event(1, "Bob's phone is now 555-1234."),
        )
        q = Question(
            id=f"o{i}", text="Where does Alice live?", gold=("Berlin",), qtype="current", after_event=1
        )
        yield History(id=f"ordinary/{i}", benchmark="ordinary", subset=subset, events=events, questions=(q,))


#: a statement, and the value only it states, that no other history of ``secret`` holds (erasure tests)
SECRET = "Earlier observation: zorbling 1 was in vaultcase 77."
SECRET_VALUE = "vaultcase 77"


def secret(subset: str = "default") -> Iterator[History]:
    """Two histories; the first holds :data:`SECRET`, asked about after it."""
    texts = {
        "secret/0": (SECRET, "Earlier observation: mug 2 was in shelf 3."),
        "secret/1": (
            "Earlier observation: mug 5 was in shelf 6.",
            "Update: mug 5 has been moved from shelf 6 to desk 1.",
        ),
    }
    for hid, (first, second) in texts.items():
        events = (Event(0, first), Event(1, second))
        obj = "zorbling 1" if hid == "secret/0" else "mug 5"
        gold = SECRET_VALUE if hid == "secret/0" else "desk 1"
        q = Question(
            id=f"{hid}-q", text=f"Where is the {obj} now?", gold=(gold,), qtype="current", after_event=1
        )
        yield History(id=hid, benchmark="secret", subset=subset, events=events, questions=(q,))
