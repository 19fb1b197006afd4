"""Speed benchmarks of P-Mem and their synthetic workloads: tooling, not product code.

Each module is run as ``python -m benchmarks.NAME`` from the repository root, or through the thin entry
``pmem perf NAME``; each prints its figures next to a baseline measured in the same run (the machines
these run on are shared and noisy, so only same-run ratios are comparable).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def run_as_script(
    name: str,
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None = None,
) -> int:
    """``python -m benchmarks.NAME``: the same options and output as ``pmem perf NAME``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{name}", description=(doc or "").splitlines()[0]
    )
    add_arguments(parser)
    return int(run(parser.parse_args(argv)) or 0)
