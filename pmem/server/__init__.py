"""P-Mem where agents live: a store of namespaced, journaled memories, served over MCP (``pmem mcp``).

- :class:`Store`: a directory of namespaces, each its own :class:`pmem.AsyncMemory` whose writes are
  durable when they return; calls on one namespace take turns.
- :class:`Namespace`: whose memory a call is about (``user_id``, ``agent_id``, ``run_id``), checked so that
  no call reaches another namespace's state.
- :data:`TOOLS`: the eleven tools (add, recall, search, get, history, as_of, why, undo, erase, conflicts,
  resolve) as one table of :class:`Tool` entries; :class:`MemoryTools` calls them without a transport,
  :func:`build_server` serves them with the official MCP SDK (the ``mcp`` extra).
"""

from __future__ import annotations

from pmem.server._mcp import StaticTokens, build_server
from pmem.server._namespace import Namespace, NamespaceError
from pmem.server._store import Store
from pmem.server._table import TOOLS, Arg, Tool, ToolCallError
from pmem.server._tools import MemoryTools

__all__ = [
    "TOOLS",
    "Arg",
    "MemoryTools",
    "Namespace",
    "NamespaceError",
    "StaticTokens",
    "Store",
    "Tool",
    "ToolCallError",
    "build_server",
]
