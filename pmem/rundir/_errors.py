"""A failed history's reason in one line: the rule the terminal (``pmem sweep``) and the report share."""

from __future__ import annotations

import re

#: an exception's module path before its name: ``pmem.peers._base.PeerFailed: ...`` reads ``PeerFailed: ...``
_MODULE_PATH = re.compile(r"^(?:[a-z_]\w*\.)+(?=[A-Z]\w*[:(])")


def failure_reason(error: str | None, width: int = 160) -> str | None:
    """A failed history's reason in one line of at most ``width`` characters; ``histories/`` keeps the
    whole error.

    The line is a Python traceback's last line that says something (a pydantic error ends on a URL),
    else the error's first line (Ray's out-of-memory kill puts its reason first and the node's memory
    report after it), without the exception's module path. A longer line keeps its start and its end,
    since a server's reason comes last (``... HTTP 400: {"error": ... "context_length_exceeded"}``).
    None when there is no error.

    >>> failure_reason("Traceback (most recent call last):\\n  File ...\\npmem.peers._base.PeerFailed: graphiti add_episode")
    'PeerFailed: graphiti add_episode'
    >>> failure_reason("runner error: 3 worker(s) were killed due to the node running low on memory.\\nMemory on the node ...")
    'runner error: 3 worker(s) were killed due to the node running low on memory.'
    >>> failure_reason("Traceback ...\\nModelCallError: " + "x" * 500 + " context_length_exceeded", width=60)
    'ModelCallError: … xxxxxxxxxxxxxxxxxx context_length_exceeded'
    """
    lines = [ln.strip() for ln in (error or "").splitlines() if ln.strip()]
    if not lines:
        return None
    if any(ln.startswith("Traceback") for ln in lines):
        said = [ln for ln in lines if not ln.startswith("For further information")] or lines
        reason = said[-1]
    else:
        reason = lines[0]
    reason = _MODULE_PATH.sub("", reason)
    if len(reason) <= width:
        return reason
    head = width // 4
    return f"{reason[:head]} … {reason[-(width - head - 3) :]}"
