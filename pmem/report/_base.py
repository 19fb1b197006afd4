"""What every metric module shares: the :class:`Metrics` a run's tables are gathered in, the keys a
cell is grouped by, the order arms and stream lengths are shown in, and the cells a run's config asks for.

Imports no other metric module of the report: the table modules, the probes, the published figures, the
peers table and the plots all import from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import polars as pl

from pmem.arms import sort_arms
from pmem.report._load import Run
from pmem.report._table import Table
from pmem.rundir import columns as C


@dataclass
class Metrics:
    """All computed tables of one run, plus what was missing."""

    run: Run
    params: list[str]
    hist: pl.DataFrame  # per (group, history) counts
    accuracy: pl.DataFrame
    tables: dict[str, Table] = field(default_factory=dict)
    missing_notes: list[str] = field(default_factory=list)


def group_keys(params: Sequence[str]) -> list[str]:
    """The keys an accuracy cell is grouped by: benchmark, subset, arm, the run's parameters, question type."""
    return [C.BENCHMARK, C.SUBSET, C.ARM, *params, C.QUESTION_TYPE]


def order_arms(arms: Iterable[str]) -> list[str]:
    """``arms`` in the arm registry's display order (the order of every table's rows and columns)."""

    return sort_arms(arms)


def length_order(length: str) -> int:
    """Sort key of a FactConsolidation stream length such as ``"32k"``: its number, an unreadable one last."""
    try:
        return int(length.rstrip("k"))
    except ValueError:
        return 10**9


def expected_cells(run: Run) -> list[tuple[str, str | None, str]]:
    """(benchmark, subset or None when the config names none, arm) the config asks for.

    A config may list one benchmark several times with different subsets and arms (the quickstart does).
    """
    cfg = run.config
    global_arms = [str(a) for a in cfg.get("arms", []) or []] if isinstance(cfg.get("arms"), list) else []
    out: list[tuple[str, str | None, str]] = []
    for b in cfg.get("benchmarks", []) or []:
        if not isinstance(b, dict) or "name" not in b:
            continue
        subsets = b.get("subsets") or ([b["subset"]] if b.get("subset") else [None])
        arms = [str(a) for a in b.get("arms") or global_arms]
        out += [(str(b["name"]), None if s is None else str(s), a) for s in subsets for a in arms]
    return list(dict.fromkeys(out))


def expected_arms(run: Run, benchmark: str, subset: str | None = None) -> list[str]:
    """The arms the config asks for on ``benchmark`` (and ``subset``, when given)."""
    return [
        a for b, s, a in expected_cells(run) if b == benchmark and (subset is None or s in (None, subset))
    ]
