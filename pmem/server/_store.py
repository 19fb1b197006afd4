"""A store: a directory of namespaces, each its own journaled memory, served by one process at a time.

::

    STORE/store.lock                     held by the process serving the store (pmem mcp)
    STORE/namespaces/<sha256>/namespace.json   the namespace's ids
    STORE/namespaces/<sha256>/state.arrow      its state, and state.arrow.journal: its writes since

A namespace's memory is a :class:`pmem.AsyncMemory` on its own state file (every write durable when it
returns, see ``pmem.graph._persist._journal``), made on first use and kept open, at most ``max_open`` of them: the
least recently used one beyond that is closed (its writes are on disk already; its next call reads it
again). A read of a namespace never written opens nothing and keeps nothing. Calls on one namespace take
turns (one lock each, held only while a call is there), so that concurrent clients lose no update; calls
on different namespaces do not wait for each other. What the server keeps thus stays bounded, however
many namespaces it is asked about.

>>> import asyncio, tempfile
>>> async def demo():
...     store = Store.open(tempfile.mkdtemp())
...     try:
...         async with store.using(Namespace.of("alice"), write=True) as memory:
...             await memory.add("The city of Alice is Paris.")
...         async with store.using(Namespace.of("bob")) as memory:
...             return await memory.get("alice.city"), [ns.label for ns in store.namespaces()]
...     finally:
...         await store.aclose()
>>> asyncio.run(demo())
(None, ['alice'])
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from filelock import BaseFileLock

from pmem._atomic import atomic_write_bytes
from pmem._lock import hold_exclusive
from pmem.memory import AsyncMemory
from pmem.models import ResponseCache, make_chat_model, make_embedder
from pmem.server._namespace import Namespace

#: The lock the process serving a store holds, where the namespaces live, and each one's files.
STORE_LOCK = "store.lock"
NAMESPACES = "namespaces"
NAMESPACE_RECORD = "namespace.json"
STATE_FILE = "state.arrow"
#: How many namespaces' memories a store keeps open by default (each holds its graph and key vectors).
MAX_OPEN = 256


class Store:
    """The namespaces of one store directory, each a journaled :class:`~pmem.AsyncMemory`.

    Args:
        root: the store directory (made when missing).
        model: the chat model of every namespace: a ``[models.agent]`` table as :class:`pmem.Memory`
            takes it, or a model object (None: ``heuristic``).
        embedder: the embedder of every namespace (None: ``hashing``).
        cache: a response cache file (SQLite, :class:`pmem.models.ResponseCache`): a prompt asked before is
            answered from it (None: none).
        max_open: the most namespaces' memories kept open (the least recently used beyond it is closed).
        options: the memories' write options (``pmem.Memory``'s keyword arguments).
    """

    def __init__(
        self,
        root: str | Path,
        model: Any = None,
        embedder: Any = None,
        lock: BaseFileLock | None = None,
        cache: str | Path | None = None,
        max_open: int = MAX_OPEN,
        **options: Any,
    ) -> None:
        if type(max_open) is not int or max_open < 1:
            msg = f"max_open must be a whole number of at least 1, got {max_open!r}"
            raise ValueError(msg)
        self.root = Path(root)
        # one model and one embedder for every namespace (a hosted model is started once, not per user);
        # with a response cache, a prompt asked before is answered from it
        replies = None if cache is None else ResponseCache(cache)
        self._agent = make_chat_model({"backend": "heuristic"} if model is None else model, cache=replies)
        self._embedder = make_embedder(
            {"backend": "hashing"} if embedder is None else embedder, cache=replies
        )
        self._options = dict(options)
        AsyncMemory(
            self._agent, self._embedder, **self._options
        )  # options it refuses fail here, not per user
        self._lock = lock  # the store's exclusive lock, held while serving (None: not taken)
        self._max_open = max_open
        # the namespaces' memories open now, least recently used first (at most max_open once no call
        # holds the others)
        self._memories: OrderedDict[Namespace, AsyncMemory] = OrderedDict()
        # one lock per namespace with a call in it or waiting (its calls take turns), and how many calls
        # are there: the lock goes when the last one leaves
        self._turns: dict[Namespace, asyncio.Lock] = {}
        self._callers: dict[Namespace, int] = {}

    @classmethod
    def open(
        cls,
        root: str | Path,
        model: Any = None,
        embedder: Any = None,
        cache: str | Path | None = None,
        max_open: int = MAX_OPEN,
        **options: Any,
    ) -> Store:
        """The store at ``root`` (made when missing), held by this process until :meth:`aclose`.

        Raises:
            LockHeldError: another process serves this store; the message names it.
            NotADirectoryError: ``root`` is a file.
        """
        root = Path(root)
        if root.exists() and not root.is_dir():
            msg = f"{root}: a store is a directory, and this is a file"
            raise NotADirectoryError(msg)
        (root / NAMESPACES).mkdir(parents=True, exist_ok=True)
        lock = hold_exclusive(
            root / STORE_LOCK, f"store {root}", hint="one server per store: stop the other first"
        )
        try:
            return cls(root, model, embedder, lock=lock, cache=cache, max_open=max_open, **options)
        except BaseException:
            lock.release()  # a refused model or option leaves the store free
            raise

    def folder(self, namespace: Namespace) -> Path:
        """The folder of ``namespace``'s state (it may not exist yet)."""
        return self.root / NAMESPACES / namespace.folder

    def namespaces(self) -> list[Namespace]:
        """Every namespace written to so far, by label."""
        found = []
        for record in sorted((self.root / NAMESPACES).glob(f"*/{NAMESPACE_RECORD}")):
            ids = json.loads(record.read_text())
            found.append(Namespace.of(ids["user_id"], ids.get("agent_id"), ids.get("run_id")))
        return sorted(found, key=lambda ns: ns.label)

    def _memory(self, namespace: Namespace, *, write: bool) -> AsyncMemory:
        """``namespace``'s memory, opened when it is not; a read of a namespace never written gets an
        empty memory of its own, bound to no file and kept by no one."""
        memory = self._memories.get(namespace)
        if memory is not None:
            self._memories.move_to_end(namespace)
            return memory
        if not write and not (self.folder(namespace) / NAMESPACE_RECORD).exists():
            return AsyncMemory(self._agent, self._embedder, **self._options)  # empty, bound to no file
        path = self.folder(namespace) / STATE_FILE
        memory = self._memories[namespace] = AsyncMemory(
            self._agent, self._embedder, path=path, **self._options
        )
        return memory

    def _close_unused(self) -> None:
        """Close the least recently used memories beyond ``max_open`` that no call is in."""
        for namespace in list(self._memories):
            if len(self._memories) <= self._max_open:
                return
            if namespace not in self._callers:
                del self._memories[namespace]  # its writes are on disk: nothing to flush

    @property
    def open_count(self) -> int:
        """How many namespaces' memories are open now."""
        return len(self._memories)

    def _create(self, namespace: Namespace) -> None:
        """Make ``namespace``'s folder and record, once."""
        folder = self.folder(namespace)
        record = folder / NAMESPACE_RECORD
        if not record.exists():
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(record, json.dumps(namespace.ids(), sort_keys=True).encode())

    @contextlib.asynccontextmanager
    async def using(self, namespace: Namespace, *, write: bool = False) -> AsyncIterator[AsyncMemory]:
        """``namespace``'s memory, for one call: calls on the namespace take turns.

        Args:
            namespace: whose memory.
            write: the call may write (its folder is made first; a read of a namespace never written
                makes nothing).
        """
        turn = self._turns.setdefault(namespace, asyncio.Lock())
        self._callers[namespace] = self._callers.get(namespace, 0) + 1
        try:
            async with turn:
                if write:
                    self._create(namespace)
                memory = self._memory(namespace, write=write)
                try:
                    yield memory
                finally:
                    memory.requests(drain=True)  # a server lives long: its memories keep no per-call rows
        finally:
            self._callers[namespace] -= 1
            if not self._callers[namespace]:
                del self._callers[namespace], self._turns[namespace]
            self._close_unused()

    async def aclose(self) -> None:
        """Close the model clients and release the store (every write is on disk already)."""
        self._memories.clear()
        for model in (self._agent, self._embedder):
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None
