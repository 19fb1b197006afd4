"""What every write path records: model calls tagged with their purpose (the write-purpose ones charged to
the write path), embedding calls, and the write log, one :class:`WriteRecord` per operation asked for.

:class:`Writer` is that plumbing on its own: :class:`pmem.Memory` writes through one, and every memory arm
of the evaluation system is one (``pmem.arms``' base class extends it with reads and audits).

>>> import asyncio
>>> from pmem.models import make_chat_model, make_embedder
>>> w = Writer(make_chat_model("heuristic"), make_embedder("hashing"))
>>> c = asyncio.run(w.call("identity", KEY_A="apple_1.location", KEY_B="apple_2.location"))
>>> c.text, w.calls_by_purpose, w.write_stats().model_calls
('different', {'identity': 1}, 1)
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pmem.memory.prompts import build_messages, template
from pmem.models import ModelCallError

if TYPE_CHECKING:
    import numpy as np

    from pmem.models import ChatModel, Completion, Embedder

#: Purposes of the calls a peer library makes (:mod:`pmem.peers`): while it ingests, while it searches.
PEER_WRITE, PEER_READ = "peer_write", "peer_read"
#: Request purposes charged to the write path (the rest are reads: answers, lookups, pruning, judging).
WRITE_PURPOSES = frozenset({"extract", "annotate", "identity", "crud", "dedupe", PEER_WRITE})
#: Write units between yields to the event loop: long in-process write paths (the template path over
#: 18k facts) must not hold up the other histories a runner drives on the same loop.
YIELD_EVERY = 64
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


@dataclass(frozen=True)
class WriteRecord:
    """One operation a write path asked for (one row of a run's ``writes/`` dataset)."""

    seq: int
    op: str
    key: str | None
    value: str | None
    applied: bool
    reason: str | None = None
    #: the operation the write path asked for, when it differs from the effective ``op``
    requested: str | None = None
    #: the key as extracted, before soft identity mapped it onto ``key``
    source_key: str | None = None
    #: index of the first event of the write unit the fact came from
    event: int | None = None


@dataclass
class WriteStats:
    """Totals of a write path: its model calls and their tokens, facts, cells, applied ops by type."""

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    facts: int = 0
    cells: int = 0
    ops: dict[str, int] = field(default_factory=dict)


def parse_json_object(text: str) -> dict[str, Any] | None:
    """Lenient JSON-object parse: code fences stripped, else the outermost ``{...}`` span.

    >>> parse_json_object('Sure! {"op": "accept"} hope that helps')
    {'op': 'accept'}
    """
    if not text:
        return None
    m = _FENCE.match(text)
    body = m.group(1) if m else text.strip()
    for candidate in (body, body[body.find("{") : body.rfind("}") + 1] if "{" in body else ""):
        if not candidate:
            continue
        try:
            out = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(out, dict):
            return out
    return None


def completion_json(c: Completion) -> dict[str, Any] | None:
    """A reply's JSON object: the backend's parse when it made one, else :func:`parse_json_object`."""
    if isinstance(c.parsed, dict):
        return c.parsed
    return parse_json_object(c.text)


def first_word(text: str) -> str:
    """The first word of a reply, lower-cased (``same``/``different``, ``yes``/``no``)."""
    m = re.search(r"[A-Za-z]+", text or "")
    return m.group(0).lower() if m else ""


async def pause(i: int) -> None:
    """Yield to the event loop every :data:`YIELD_EVERY` units of a write loop."""
    if i and i % YIELD_EVERY == 0:
        await asyncio.sleep(0)


class Writer:
    """Model calls with purpose tags and write accounting, and the write log.

    Args:
        agent: the chat model every prompt goes to.
        embedder: the embedder of soft identity and retrieval.
        concurrency: how many extraction calls run at once.
        raise_failed_calls: raise :class:`~pmem.models.ModelCallError` for a call that got no reply
            (the server unreachable, an error status after the retries) instead of handing the failed
            completion on. A reply that does not parse, or a prompt longer than the model's context, is
            handed on either way: the write path records it as a noop with its reason.
    """

    def __init__(
        self, agent: ChatModel, embedder: Embedder, *, concurrency: int = 16, raise_failed_calls: bool = False
    ) -> None:
        self.agent = agent
        self.embedder = embedder
        self.concurrency = max(1, int(concurrency))
        self.raise_failed_calls = raise_failed_calls
        self._stats = WriteStats()
        self._log: list[WriteRecord] = []
        # evidence id -> positions in ``_log`` of the records citing it (an erasure redacts them)
        self._records_of: dict[str, list[int]] = {}
        self.calls_by_purpose: dict[str, int] = {}
        self.embed_calls = 0  # embedding requests
        self.embedded_texts = 0  # texts they carried

    async def call(self, name: str, **sections: str) -> Completion:
        """Send prompt template ``name`` filled with ``sections``; a write-purpose call is charged to
        :meth:`write_stats`.

        Returns:
            the model's completion (its ``error`` says why a prompt that did not fit got no reply).
        """
        t = template(name)
        c = await self.agent.complete(
            build_messages(name, **sections),
            purpose=t.purpose,
            max_tokens=t.reply_limit(sections),
            schema=t.schema,
        )
        self.count_call(t.purpose, c)
        if self.raise_failed_calls and c.error is not None and not c.overflow:
            msg = f"{t.purpose} call failed: {c.error}"
            raise ModelCallError(msg, attempts=c.attempts)
        return c

    def count_call(self, purpose: str, completion: Completion) -> None:
        """Count one model call: by purpose, and in the write accounting when ``purpose`` is a write one.

        :meth:`complete` counts its own calls; a caller that reaches the model another way (a peer
        library's requests, through the metering proxy) counts its calls here.
        """
        self.calls_by_purpose[purpose] = self.calls_by_purpose.get(purpose, 0) + 1
        if purpose in WRITE_PURPOSES:
            self._stats.model_calls += 1
            self._stats.prompt_tokens += int(completion.prompt_tokens)
            self._stats.completion_tokens += int(completion.completion_tokens)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (one request): one row per text."""
        self.embed_calls += 1
        self.embedded_texts += len(texts)
        return await self.embedder.embed(list(texts))

    def record(
        self,
        op: str,
        key: str | None,
        value: str | None,
        applied: bool,
        reason: str | None = None,
        *,
        evidence: str | None = None,
        **extra: Any,
    ) -> None:
        """Log one operation (``extra``: the other :class:`WriteRecord` fields); ``evidence``, the
        evidence it cites, lets :meth:`redact` find it."""
        if evidence is not None:
            self._records_of.setdefault(evidence, []).append(len(self._log))
        self._log.append(WriteRecord(len(self._log), op, key, value, applied, reason, **extra))
        if applied:
            self._stats.ops[op] = self._stats.ops.get(op, 0) + 1

    def redact(self, evidence: str) -> None:
        """Drop the values of the records citing ``evidence`` (it was erased): they say ``erased``."""
        for i in self._records_of.pop(evidence, []):
            self._log[i] = replace(self._log[i], value=None, reason="erased")

    @property
    def stats(self) -> WriteStats:
        """The running totals (the write path adds facts and cells to them)."""
        return self._stats

    def write_stats(self) -> WriteStats:
        """A copy of the totals so far."""
        return replace(self._stats, ops=dict(self._stats.ops))

    def write_log(self) -> list[WriteRecord]:
        """Every record so far (since the last :meth:`take_write_log`)."""
        return list(self._log)

    def take_write_log(self) -> list[WriteRecord]:
        """The write log so far, which the writer then forgets: a writer that runs for a whole stream (an
        ingest worker, a long-lived memory) hands it over in pieces instead of holding one record per
        write."""
        log, self._log = self._log, []
        self._records_of.clear()  # it indexes the records handed over: none of them is held any more
        return log
