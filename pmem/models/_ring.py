"""Consistent hashing: one history's calls go to one replica (prefix-cache reuse), histories spread.

>>> ring = HashRing(3)
>>> ring.order("history-7") == ring.order("history-7"), sorted(ring.order("history-7"))
(True, [0, 1, 2])
"""

from __future__ import annotations

import bisect
import hashlib


def _h(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


class HashRing:
    """Replicas ``0..n-1`` with ``vnodes`` points each; :meth:`order` is the failover order for a key."""

    def __init__(self, n: int, vnodes: int = 64) -> None:
        if n < 1:
            msg = f"a hash ring needs at least one replica, got {n}"
            raise ValueError(msg)
        self.n = n
        points = sorted((_h(f"replica-{r}#{v}"), r) for r in range(n) for v in range(vnodes))
        self._hashes = [p[0] for p in points]
        self._owners = [p[1] for p in points]

    def order(self, key: str) -> list[int]:
        """Every replica once, starting with the key's owner, then the next distinct ones clockwise."""
        start = bisect.bisect(self._hashes, _h(key)) % len(self._hashes)
        seen: list[int] = []
        i = start
        while len(seen) < self.n:
            owner = self._owners[i]
            if owner not in seen:
                seen.append(owner)
            i = (i + 1) % len(self._owners)
        return seen
