"""Names a package exports but imports on first use (PEP 562), so that importing it stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from ``package.modules[name]`` when first asked.

    Args:
        package: the package's dotted name (``"pmem.models"``).
        modules: each lazily exported name and the submodule that defines it (``{"PooledModel": "_vllm"}``).

    Returns:
        The function to bind as the package's ``__getattr__``; any other name raises ``AttributeError``.

    >>> getattr_ = lazy_exports("pmem.models", {"HeuristicChatModel": "_heuristic"})
    >>> getattr_("HeuristicChatModel").__name__
    'HeuristicChatModel'
    >>> getattr_("nope")
    Traceback (most recent call last):
    ...
    AttributeError: module 'pmem.models' has no attribute 'nope'
    """

    def get(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return get
