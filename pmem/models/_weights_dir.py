"""Where the model layer keeps the weights it prepares (assembled GGUF files, converted folders)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["weights_cache"]


def weights_cache() -> Path:
    """Where converted folders live (``$PMEM_WEIGHTS_CACHE``, ``$XDG_CACHE_HOME/pmem/weights`` or
    ``~/.cache/pmem/weights``)."""
    configured = os.environ.get("PMEM_WEIGHTS_CACHE")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pmem" / "weights"
