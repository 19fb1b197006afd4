"""The one shape every report table takes: numbers for the CSV, strings for Markdown/HTML."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl


@dataclass
class Table:
    """A report table.

    ``data`` holds raw numbers (written to ``tables/<name>.csv``); ``display`` the formatted view shown in
    report.md/report.html (``data`` itself when ``None``); ``keys`` identify a row and ``values`` are the
    numeric columns ``--compare`` puts side by side. ``notes`` are shown above the table, ``footer``
    sentences under it; a ``folded`` table is shown collapsed in report.html (its notes stay visible).
    """

    name: str
    title: str
    data: pl.DataFrame
    display: pl.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    keys: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    section: str = ""
    footer: list[str] = field(default_factory=list)
    folded: bool = False

    @property
    def shown(self) -> pl.DataFrame:
        return self.display if self.display is not None else self.data

    @property
    def empty(self) -> bool:
        return self.data.height == 0

    @property
    def has_rows(self) -> bool:
        """Whether the report shows any row of it (the CSV is written either way)."""
        return self.shown.height > 0


def pct(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.{digits}f}"


def ci(lo: float | None, hi: float | None) -> str:
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return ""
    return f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def num(x: float | int | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, int) or (float(x).is_integer() and abs(x) >= 100):
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"
