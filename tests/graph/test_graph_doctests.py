"""The core's docstring examples are runnable and stay correct."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    ["pmem", "pmem.graph._graph", "pmem.graph._identity", "pmem.graph._patch", "pmem.models.sections"],
)
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
