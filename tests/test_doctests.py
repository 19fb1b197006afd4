"""Every docstring example in `pmem/` runs and stays correct (`make test` runs them all).

Modules are found by walking the package, so a new module's examples are run without a list to update.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import pmem

#: modules whose import needs an optional extra (they hold no examples)
OPTIONAL = {"pmem.models._st"}


def _modules() -> list[str]:
    names = ["pmem"]
    for info in pkgutil.walk_packages(pmem.__path__, prefix="pmem."):
        if info.name not in OPTIONAL:
            names.append(info.name)
    return sorted(names)


def _has_examples(module: object) -> bool:
    return any(test.examples for test in doctest.DocTestFinder().find(module))


MODULES = _modules()


def test_the_walk_finds_the_examples() -> None:
    with_examples = [name for name in MODULES if _has_examples(importlib.import_module(name))]
    # the core, the model layer and the runner all document themselves with runnable examples
    for name in ("pmem", "pmem.graph._graph", "pmem.models.sections", "pmem.runner._config"):
        assert name in with_examples


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
