"""Reports over a run directory: Polars metrics, paired statistics, cost accounting, write-path audits,
the paper's published figures side by side with ours, plots, Markdown and self-contained HTML.

Reads only run files (``run.toml`` and the Parquet datasets), never the runner's code.

>>> from pmem.report import build_report                       # doctest: +SKIP
>>> paths = build_report("runs/quickstart")                     # doctest: +SKIP
>>> paths.html                                                  # doctest: +SKIP
PosixPath('runs/quickstart/report/report.html')
"""

from __future__ import annotations

from pmem.report._base import Metrics
from pmem.report._build import ReportPaths, build_compare, build_report
from pmem.report._load import Run, RunError, open_run
from pmem.report._metrics import compute
from pmem.report._stats import cluster_bootstrap, mcnemar_exact, wilson
from pmem.report._table import Table

__all__ = [
    "Metrics",
    "ReportPaths",
    "Run",
    "RunError",
    "Table",
    "build_compare",
    "build_report",
    "cluster_bootstrap",
    "compute",
    "mcnemar_exact",
    "open_run",
    "wilson",
]
