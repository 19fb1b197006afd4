"""Group events into line-aligned chunks of at most ``max_chars`` characters (for chunk-ingesting arms).

An event longer than ``max_chars`` forms a chunk of its own; events are never split.

>>> from pmem.bench._types import Event
>>> [len(c) for c in chunk_events([Event(i, "x" * 400) for i in range(5)], max_chars=1000)]
[2, 2, 1]
"""

from __future__ import annotations

from collections.abc import Sequence

from pmem.bench._types import Event


def chunk_events(events: Sequence[Event], max_chars: int = 1000) -> list[list[Event]]:
    if max_chars <= 0:
        msg = f"max_chars must be positive, got {max_chars}"
        raise ValueError(msg)
    chunks: list[list[Event]] = []
    current: list[Event] = []
    size = 0
    for e in events:
        # +1 for the newline joining lines inside a chunk
        add = len(e.text) + (1 if current else 0)
        if current and size + add > max_chars:
            chunks.append(current)
            current, size, add = [], 0, len(e.text)
        current.append(e)
        size += add
    if current:
        chunks.append(current)
    return chunks
