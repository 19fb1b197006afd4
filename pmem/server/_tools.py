"""The memory's tools, without a transport: each call names its namespace, is checked against what the
caller may reach, runs on that namespace's memory alone, and replies in JSON (:mod:`._replies`). The tools
themselves, their arguments and checks are the table of :mod:`._table`; this module carries a call out.

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

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from pmem.graph import StateChangedError
from pmem.models import ModelCallError
from pmem.server._namespace import Namespace, NamespaceError
from pmem.server._store import Store
from pmem.server._table import TOOLS_BY_NAME, ToolCallError

__all__ = ["Access", "MemoryTools", "ToolCallError"]

#: Decides whether the caller may reach a namespace (the server's transport knows who is calling).
Access = Callable[[Namespace], bool]


def _everyone(namespace: Namespace) -> bool:
    return True


class MemoryTools:
    """The tools of :data:`pmem.server._table.TOOLS` over a :class:`~pmem.server._store.Store`: each is a
    method of its name taking the tool's arguments (``tools.get("alice", key="alice.city")``), or
    ``await tools.call("get", ...)``.

    Args:
        store: the namespaces.
        access: whether the current caller may reach a namespace (default: every namespace; the HTTP
            transport limits a token to its namespaces).
    """

    def __init__(self, store: Store, access: Access = _everyone) -> None:
        self._store = store
        self._access = access

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name in TOOLS_BY_NAME:
            return functools.partial(self.call, name)
        msg = f"{type(self).__name__!r} has no tool or attribute {name!r}"
        raise AttributeError(msg)

    async def call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call tool ``name`` with its arguments (as its table entry's signature takes them).

        Raises:
            ToolCallError: the tool is unknown, an argument is missing or refused, or the call failed (the
                message says why in one line; what was applied before is kept).
        """
        tool = TOOLS_BY_NAME.get(name)
        if tool is None:
            msg = f"no tool {name!r}; one of {', '.join(TOOLS_BY_NAME)}"
            raise ToolCallError(msg)
        try:
            bound = tool.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ToolCallError(f"{name}: {exc}") from None
        bound.apply_defaults()
        values = dict(bound.arguments)
        ids = (values.pop("user_id"), values.pop("agent_id"), values.pop("run_id"))
        tool.check(**values)
        return await self._call(ids, lambda memory: tool.run(memory, **values), write=tool.writes)

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
