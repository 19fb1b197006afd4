"""P-Mem as a LangGraph store: :class:`PMemStore` implements LangGraph's ``BaseStore`` (sync and async)
over a P-Mem store directory, the one ``pmem mcp`` serves (one of them at a time holds it).

A LangGraph namespace of one to three labels is a P-Mem namespace (``(user,)``, ``(user, agent)``,
``(user, agent, run)``): its own journaled memory, which no other namespace's calls reach. An item is a
key of that memory whose value is the item's JSON:

- ``put`` commits it (durable when it returns): a changed value supersedes the old one, which the key's
  history keeps; ``delete`` (a put of None) revokes the key's values until none is current;
- ``get`` and ``search`` read current values (``search`` with a query ranks them by P-Mem's search; a
  filter compares the items' fields, with ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``);
- and the reads no other store has: :meth:`PMemStore.recall` (the context to answer a question from:
  the items nearest it, each with the put it comes from and that put's date, within a token budget),
  :meth:`PMemStore.history` (every value an item held), :meth:`PMemStore.as_of` (an item as it was
  after an arrival or at a time) and :meth:`PMemStore.why` (the evidence and operations behind its
  value), with async twins.

The store's memories live on an event loop of its own (one thread), so that sync and async callers share
them safely. ``pip install 'pmem[langgraph]'`` installs LangGraph; the core install does not need it.

>>> import tempfile
>>> store = PMemStore(tempfile.mkdtemp())
>>> store.put(("alice",), "food", {"likes": "pizza"})
>>> store.put(("alice",), "food", {"likes": "sushi"})
>>> store.get(("alice",), "food").value, [v["likes"] for v in store.history(("alice",), "food")]
({'likes': 'sushi'}, ['pizza', 'sushi'])
>>> store.close()
"""

from __future__ import annotations

import asyncio
import json
import operator
import threading
from collections.abc import Callable, Coroutine, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from pmem.memory import RECALL_TOKENS, AsyncMemory, Recall, Why
from pmem.server import Namespace, NamespaceError, Store

T = TypeVar("T")

#: Who a LangGraph put is stated by, in the memory's evidence.
SOURCE = "langgraph"
#: The time an item written without one, or with a free-text one (by pmem.Memory's text path), reads as
#: created and updated.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def _observed_at(time: str | None) -> datetime:
    """An evidence's observation time as an item's (UTC): :data:`_EPOCH` when it has none, or when it is
    free text, which ``pmem.Memory.add`` takes (LoCoMo's "1:56 pm on 8 May, 2023", "last spring") and
    which names no instant this store could give."""
    if time is None:
        return _EPOCH
    try:
        at = datetime.fromisoformat(time)
    except ValueError:
        return _EPOCH
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def to_namespace(labels: tuple[str, ...]) -> Namespace:
    """The P-Mem namespace of a LangGraph namespace (1 to 3 labels: user, agent, run).

    Raises:
        InvalidNamespaceError: more than three labels, or a label that is no P-Mem id.
    """
    if not 1 <= len(labels) <= 3:
        msg = f"{labels}: a P-Mem store's namespaces have 1 to 3 labels (user, agent, run)"
        raise InvalidNamespaceError(msg)
    try:
        return Namespace.of(*labels)
    except NamespaceError as exc:
        raise InvalidNamespaceError(f"{labels}: {exc}") from None


def to_labels(namespace: Namespace) -> tuple[str, ...] | None:
    """The LangGraph namespace of a P-Mem one (None: a run without an agent, which no tuple names)."""
    if namespace.agent_id is None:
        return (namespace.user_id,) if namespace.run_id is None else None
    if namespace.run_id is None:
        return (namespace.user_id, namespace.agent_id)
    return (namespace.user_id, namespace.agent_id, namespace.run_id)


def _encode(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _decode(text: str) -> dict[str, Any]:
    """An item's value (a value the memory holds that is not an item's JSON reads as ``{"value": ...}``)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {"value": text}
    return value if isinstance(value, dict) else {"value": value}


def _matches(value: dict[str, Any], conditions: dict[str, Any]) -> bool:
    for field, wanted in conditions.items():
        have = value.get(field)
        tests = (
            wanted.items()
            if isinstance(wanted, dict) and wanted and all(k in _OPERATORS for k in wanted)
            else [("$eq", wanted)]
        )
        for name, operand in tests:
            try:
                if not _OPERATORS[name](have, operand):
                    return False
            except TypeError:  # an ordering between a missing field (or another type) and the operand
                return False
    return True


def _labels_match(labels: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(labels):
        return False
    part = labels[: len(path)] if condition.match_type == "prefix" else labels[len(labels) - len(path) :]
    return all(p == "*" or p == label for p, label in zip(path, part, strict=True))


class PMemStore(BaseStore):
    """LangGraph's ``BaseStore`` over the P-Mem store at ``root`` (see the module docstring).

    Args:
        root: the store directory (made when missing; held by this process until :meth:`close`).
        model: the memories' chat model, as :class:`pmem.Memory` takes it (used by their text path; a
            put writes its value as is).
        embedder: the memories' embedder (search ranks by it; None: ``hashing``).
        options: the memories' write options.
    """

    def __init__(self, root: str | Path, model: Any = None, embedder: Any = None, **options: Any) -> None:
        # one event loop owns the memories (and their model clients): sync and async calls run on it
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pmem-store", daemon=True)
        self._thread.start()
        self._store = Store.open(root, model, embedder, **options)

    # ------------------------------------------------------------------ running on the store's loop

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    async def _arun(self, work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._run(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._arun(self._batch(list(ops)))

    def close(self) -> None:
        """Release the store (every put is on disk already) and stop its loop."""
        if self._loop.is_closed():
            return
        self._run(self._store.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    # ------------------------------------------------------------------ the operations

    async def _batch(self, ops: list[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op.namespace, op.key))
            elif isinstance(op, PutOp):
                await self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list(op))
            else:
                msg = f"PMemStore: unknown operation {type(op).__name__}"
                raise TypeError(msg)
        return results

    async def _item(self, memory: AsyncMemory, labels: tuple[str, ...], key: str) -> Item | None:
        cell = await memory.get(key)
        if cell is None or cell.value is None:
            return None
        versions = await memory.history(key)
        graph = memory.graph
        head = next(
            (v for v in reversed(versions) if v.value == cell.value and v.status in ("active", "contested")),
            versions[-1],
        )

        def stamp(evidence: str | None) -> datetime:
            return _observed_at(None if evidence is None else graph.evidence(evidence).time)

        return Item(
            value=_decode(cell.value),
            key=key,
            namespace=labels,
            created_at=stamp(versions[0].evidence),
            updated_at=stamp(head.evidence),
        )

    async def _get(self, labels: tuple[str, ...], key: str) -> Item | None:
        async with self._store.using(to_namespace(labels)) as memory:
            return await self._item(memory, tuple(labels), key)

    async def _put(self, op: PutOp) -> None:
        namespace = to_namespace(op.namespace)
        now = datetime.now(UTC).isoformat()
        value = None if op.value is None else _encode(op.value)
        text = f"delete {op.key}" if value is None else f"put {op.key}: {value}"
        async with self._store.using(namespace, write=True) as memory:
            await memory.put(op.key, value, source=SOURCE, time=now, text=text)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        found: list[tuple[float | None, tuple[str, ...], Item]] = []
        for namespace in self._store.namespaces():
            labels = to_labels(namespace)
            if labels is None or labels[: len(prefix)] != prefix:
                continue
            async with self._store.using(namespace) as memory:
                if op.query:
                    k = 10_000 if op.filter else op.limit + op.offset
                    hits = [
                        (c.key, getattr(c, "score", None))
                        for c in await memory.search(op.query, k, min_score=None)
                    ]
                else:
                    hits = [(key, None) for key in memory.graph.frontier()]
                for key, score in hits:
                    item = await self._item(memory, labels, key)
                    if item is not None and (not op.filter or _matches(item.value, op.filter)):
                        found.append((score, labels, item))
        if op.query:
            found.sort(key=lambda f: (-(f[0] or 0.0), f[1], f[2].key))
        else:
            found.sort(key=lambda f: (f[1], f[2].key))
        return [
            SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)
            for score, _, item in found[op.offset : op.offset + op.limit]
        ]

    def _list(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        out: set[tuple[str, ...]] = set()
        for namespace in self._store.namespaces():
            labels = to_labels(namespace)
            if labels is None or not all(_labels_match(labels, c) for c in op.match_conditions or ()):
                continue
            out.add(labels[: op.max_depth] if op.max_depth is not None else labels)
        return sorted(out)[op.offset : op.offset + op.limit]

    # ------------------------------------------------------------------ reads only P-Mem has

    async def _recall(self, labels: tuple[str, ...], query: str, budget: int) -> Recall:
        async with self._store.using(to_namespace(labels)) as memory:
            return await memory.recall(query, budget)

    def recall(self, namespace: tuple[str, ...], query: str, *, budget: int = RECALL_TOKENS) -> Recall:
        """The context to answer ``query`` from, within ``budget`` tokens (:meth:`pmem.Memory.recall`):
        the namespace's items nearest it, each with the put it comes from and that put's date, and the
        puts themselves. Put ``.context`` in the prompt."""
        return self._run(self._recall(namespace, query, budget))

    async def arecall(self, namespace: tuple[str, ...], query: str, *, budget: int = RECALL_TOKENS) -> Recall:
        return await self._arun(self._recall(namespace, query, budget))

    async def _history(self, labels: tuple[str, ...], key: str) -> list[dict[str, Any]]:
        async with self._store.using(to_namespace(labels)) as memory:
            return [_decode(v.value) for v in await memory.history(key) if v.value is not None]

    def history(self, namespace: tuple[str, ...], key: str) -> list[dict[str, Any]]:
        """Every value the item has held, in arrival order (superseded, withdrawn and current alike)."""
        return self._run(self._history(namespace, key))

    async def ahistory(self, namespace: tuple[str, ...], key: str) -> list[dict[str, Any]]:
        return await self._arun(self._history(namespace, key))

    async def _as_of(
        self, labels: tuple[str, ...], key: str, seq: int | None, time: str | None
    ) -> dict[str, Any] | None:
        async with self._store.using(to_namespace(labels)) as memory:
            cell = (await memory.as_of(seq, time=time)).cell(key)
        return None if cell is None or cell.value is None else _decode(cell.value)

    def as_of(
        self, namespace: tuple[str, ...], key: str, *, seq: int | None = None, time: str | None = None
    ) -> dict[str, Any] | None:
        """The item's value as it was after arrival ``seq`` and/or at observation ``time`` (ISO 8601)."""
        return self._run(self._as_of(namespace, key, seq, time))

    async def aas_of(
        self, namespace: tuple[str, ...], key: str, *, seq: int | None = None, time: str | None = None
    ) -> dict[str, Any] | None:
        return await self._arun(self._as_of(namespace, key, seq, time))

    async def _why(self, labels: tuple[str, ...], key: str) -> Why | None:
        async with self._store.using(to_namespace(labels)) as memory:
            return await memory.why(key)

    def why(self, namespace: tuple[str, ...], key: str) -> Why | None:
        """The evidence behind the item's value (each put that stated it, with its time) and every
        operation on it."""
        return self._run(self._why(namespace, key))

    async def awhy(self, namespace: tuple[str, ...], key: str) -> Why | None:
        return await self._arun(self._why(namespace, key))
