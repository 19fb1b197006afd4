"""The memory's tools, without a transport: each call names its namespace, is checked against what the
caller may reach, runs on that namespace's memory alone, and replies in JSON (:mod:`._replies`).

:mod:`pmem.server._mcp` serves these over MCP; a test calls them as a client would and compares each reply
with what :class:`pmem.Memory` gives for the same calls.

>>> import asyncio, tempfile
>>> from pmem.server._store import Store
>>> async def demo():
...     store = Store.open(tempfile.mkdtemp())
...     tools = MemoryTools(store)
...     try:
...         await tools.add("alice", text="The city of Alice is Paris.")
...         return (await tools.get("alice", key="alice.city"))["value"], await tools.get("bob", key="alice.city")
...     finally:
...         await store.aclose()
>>> asyncio.run(demo())
('Paris', None)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pmem.graph import DISCLOSURES, StateChangedError
from pmem.memory import RECALL_TOKENS
from pmem.models import ModelCallError
from pmem.server._namespace import Namespace, NamespaceError
from pmem.server._replies import (
    add_reply,
    as_of_reply,
    cell_reply,
    cells_reply,
    op_reply,
    recall_reply,
    receipt_reply,
    search_reply,
    version_reply,
    why_reply,
)
from pmem.server._store import Store

#: The most cells one ``as_of`` reply lists (a whole past frontier can be large).
AS_OF_LIMIT = 500
#: The most hits one ``search`` returns.
SEARCH_LIMIT = 100
#: The largest budget (tokens) one ``recall`` fills.
RECALL_LIMIT = 32_000


class ToolCallError(ValueError):
    """A call the tools refuse or cannot carry out; the message says why, in one line."""


#: Decides whether the caller may reach a namespace (the server's transport knows who is calling).
Access = Callable[[Namespace], bool]


def _everyone(namespace: Namespace) -> bool:
    return True


class MemoryTools:
    """The eleven tools over a :class:`~pmem.server._store.Store`.

    Args:
        store: the namespaces.
        access: whether the current caller may reach a namespace (default: every namespace; the HTTP
            transport limits a token to its namespaces).
    """

    def __init__(self, store: Store, access: Access = _everyone) -> None:
        self._store = store
        self._access = access

    def _namespace(self, user_id: object, agent_id: object, run_id: object) -> Namespace:
        try:
            namespace = Namespace.of(user_id, agent_id, run_id)
        except NamespaceError as exc:
            raise ToolCallError(str(exc)) from None
        if not self._access(namespace):
            msg = f"namespace {namespace.label}: this token may not reach it"
            raise ToolCallError(msg)
        return namespace

    async def _call(
        self, ids: tuple[object, object, object], call: Callable[[Any], Any], *, write: bool = False
    ) -> Any:
        namespace = self._namespace(*ids)
        try:
            async with self._store.using(namespace, write=write) as memory:
                return await call(memory)
        except (ValueError, KeyError) as exc:  # a bad key, id or value: the caller's to mend
            text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise ToolCallError(f"{namespace.label}: {text}") from None
        except StateChangedError:  # the message names server paths: the caller gets what to do
            msg = (
                f"{namespace.label}: another process wrote this namespace's state; nothing was written, retry"
            )
            raise ToolCallError(msg) from None
        except ModelCallError as exc:
            msg = f"{namespace.label}: the memory's model could not be reached ({exc}); what was applied before is kept"
            raise ToolCallError(msg) from None
        except OSError as exc:  # the server's files (a full disk, a read-only folder): no path is named
            reason = exc.strerror or type(exc).__name__
            done = "nothing was written" if write else "nothing was read"
            msg = f"{namespace.label}: the server could not {'write' if write else 'read'} this namespace's files ({reason}); {done}, retry once the server's disk is mended"
            raise ToolCallError(msg) from None

    async def add(
        self,
        user_id: str,
        text: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        source: str = "user",
        time: str | None = None,
        valid_time: str | None = None,
    ) -> dict[str, Any]:
        """Commit what ``text`` states (durable when it returns)."""

        async def call(m: Any) -> dict[str, Any]:
            return add_reply(await m.add(text, source=source, time=time, valid_time=valid_time))

        reply: dict[str, Any] = await self._call((user_id, agent_id, run_id), call, write=True)
        return reply

    async def search(
        self,
        user_id: str,
        query: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        k: int = 12,
        disclose: Sequence[str] = (),
    ) -> list[dict[str, Any] | None]:
        """The current values nearest ``query``, best first, with their scores."""
        if not 1 <= k <= SEARCH_LIMIT:
            msg = f"search: k must be 1 to {SEARCH_LIMIT}, got {k}"
            raise ToolCallError(msg)
        unknown = sorted(set(disclose) - set(DISCLOSURES))
        if unknown:
            msg = f"search: disclose {unknown} unknown; one of {', '.join(DISCLOSURES)}"
            raise ToolCallError(msg)

        async def call(m: Any) -> list[dict[str, Any] | None]:
            cells = await m.search(query, k, disclose=tuple(disclose))
            return search_reply(cells, [await m.why(c.key) for c in cells])

        reply: list[dict[str, Any] | None] = await self._call((user_id, agent_id, run_id), call)
        return reply

    async def recall(
        self,
        user_id: str,
        query: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        budget: int = RECALL_TOKENS,
    ) -> dict[str, Any]:
        """The facts and the turns nearest ``query`` within ``budget`` tokens, as a context."""
        if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= RECALL_LIMIT:
            msg = f"recall: budget must be 1 to {RECALL_LIMIT} tokens, got {budget!r}"
            raise ToolCallError(msg)

        async def call(m: Any) -> dict[str, Any]:
            return recall_reply(await m.recall(query, budget))

        reply: dict[str, Any] = await self._call((user_id, agent_id, run_id), call)
        return reply

    async def get(
        self, user_id: str, key: str, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any] | None:
        """The cell of ``key`` (None: never held)."""

        async def call(m: Any) -> dict[str, Any] | None:
            return cell_reply(await m.get(key))

        reply: dict[str, Any] | None = await self._call((user_id, agent_id, run_id), call)
        return reply

    async def history(
        self, user_id: str, key: str, agent_id: str | None = None, run_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Every version of ``key``, in arrival order."""

        async def call(m: Any) -> list[dict[str, Any]]:
            return [version_reply(v) for v in await m.history(key)]

        reply: list[dict[str, Any]] = await self._call((user_id, agent_id, run_id), call)
        return reply

    async def as_of(
        self,
        user_id: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        seq: int | None = None,
        time: str | None = None,
        key: str | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        """The memory as it was after arrival ``seq`` and/or observation ``time``."""
        if seq is None and time is None:
            msg = "as_of: give seq (an arrival number) or time (ISO 8601), or both"
            raise ToolCallError(msg)
        if not 1 <= limit <= AS_OF_LIMIT:
            msg = f"as_of: limit must be 1 to {AS_OF_LIMIT}, got {limit}"
            raise ToolCallError(msg)

        async def call(m: Any) -> dict[str, Any]:
            return as_of_reply(await m.as_of(seq, time=time), key, limit)

        reply: dict[str, Any] = await self._call((user_id, agent_id, run_id), call)
        return reply

    async def why(
        self, user_id: str, key: str, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any] | None:
        """The evidence behind ``key``'s value and the operations on it."""

        async def call(m: Any) -> dict[str, Any] | None:
            return why_reply(await m.why(key))

        reply: dict[str, Any] | None = await self._call((user_id, agent_id, run_id), call)
        return reply

    async def undo(
        self, user_id: str, op_seq: int, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """Undo the operation at ``op_seq`` (durable when it returns)."""

        async def call(m: Any) -> dict[str, Any]:
            return op_reply(await m.undo(op_seq))

        reply: dict[str, Any] = await self._call((user_id, agent_id, run_id), call, write=True)
        return reply

    async def erase(
        self, user_id: str, evidence_id: str, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """Erase an evidence: its text leaves the memory and the disk; the receipt."""

        async def call(m: Any) -> dict[str, Any]:
            return receipt_reply(await m.erase(evidence_id))

        reply: dict[str, Any] = await self._call((user_id, agent_id, run_id), call, write=True)
        return reply

    async def conflicts(
        self, user_id: str, agent_id: str | None = None, run_id: str | None = None
    ) -> list[dict[str, Any] | None]:
        """The open contests: contested cells and their alternatives."""

        async def call(m: Any) -> list[dict[str, Any] | None]:
            return cells_reply(await m.conflicts())

        reply: list[dict[str, Any] | None] = await self._call((user_id, agent_id, run_id), call)
        return reply

    async def resolve(
        self,
        user_id: str,
        key: str,
        value: str,
        agent_id: str | None = None,
        run_id: str | None = None,
        source: str = "user",
        note: str | None = None,
    ) -> dict[str, Any]:
        """Settle ``key``'s contest on ``value`` (durable when it returns)."""

        async def call(m: Any) -> dict[str, Any]:
            return op_reply(await m.resolve(key, value, source=source, note=note))

        reply: dict[str, Any] = await self._call((user_id, agent_id, run_id), call, write=True)
        return reply
