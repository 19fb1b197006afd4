"""Property tests at two lengths: a short run in the default suite and the full run in ``make test-slow``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings


def short_and_long(check: Any, *strategies: Any, short: int, full: int) -> tuple[Any, Any]:
    """Two tests of ``check`` over ``strategies``: ``short`` examples (seconds, the default suite) and
    ``full`` examples marked ``slow``. Assign them to two ``test_`` names of the module.

    Example::

        test_x, test_x_at_length = short_and_long(check_x, st.data(), short=100, full=400)
    """
    default = settings(max_examples=short, deadline=None)(given(*strategies)(check))
    at_length = settings(max_examples=full, deadline=None)(given(*strategies)(check))
    return default, pytest.mark.slow(at_length)
