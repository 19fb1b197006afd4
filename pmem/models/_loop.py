"""Running an event loop: uvloop when it is installed (the `fast` extra), the standard loop otherwise.

The local server and the throughput benchmark are dominated by per-request event-loop work; uvloop
roughly halves it. Set ``PMEM_NO_UVLOOP=1`` to compare against the standard loop.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Coroutine


def loop_name() -> str:
    return "uvloop" if _uvloop() is not None else "asyncio"


def _uvloop() -> Any:
    if os.environ.get("PMEM_NO_UVLOOP"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run`` on uvloop when available."""
    uvloop = _uvloop()
    if uvloop is None:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)
