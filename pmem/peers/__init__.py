"""The real peer libraries as arms: Mem0 and Graphiti themselves, each behind the harness's models.

Each arm runs the unmodified library through its own write API and search, then the reader call every
arm makes. The library's HTTP calls reach the sweep's models through a :class:`MeteringProxy` on
127.0.0.1 (one per arm instance), which makes each of them one recorded model-layer call.
"""

from __future__ import annotations

from pmem.peers._proxy import PEER_READ, PEER_WRITE, REPLY_TOKENS, MeteringProxy

__all__ = ["PEER_READ", "PEER_WRITE", "REPLY_TOKENS", "MeteringProxy"]
