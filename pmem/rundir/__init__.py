"""The run directory contract (DESIGN.md): the datasets of ``runs/<id>/``, defined once.

The runner writes with this package and the report reads with it; it belongs to neither. Each dataset
(``results``, ``writes``, ``requests``, ``histories``, ``judgments``) is a frozen row type whose fields are
its columns (:mod:`pmem.rundir._rows`), an Arrow schema derived from it, and one conversion from rows to
a table that refuses unknown and missing columns. Column names for readers are constants in
:mod:`pmem.rundir.columns`.

Importing this package is cheap (no pyarrow, no graph): the model layer uses it for the request log.
It may import pyarrow and :mod:`pmem.graph` (lazily), nothing else from ``pmem``.

>>> from pmem import rundir
>>> rundir.WRITES.table([{"history_id": "h"}])
Traceback (most recent call last):
...
pmem.rundir._datasets.SchemaError: writes: row 0 lacks required column(s) 'applied', 'arm', ...
"""

from __future__ import annotations

from pmem.rundir import columns
from pmem.rundir._datasets import (
    DATASETS,
    HISTORIES,
    JUDGMENTS,
    REQUESTS,
    RESULTS,
    WRITES,
    Dataset,
    SchemaError,
    dataset,
    to_table,
)
from pmem.rundir._rows import (
    HistoryRow,
    JudgmentRow,
    ParamColumns,
    RequestRow,
    ResultRow,
    RowKeys,
    WriteRow,
)

__all__ = [
    "DATASETS",
    "HISTORIES",
    "JUDGMENTS",
    "REQUESTS",
    "RESULTS",
    "WRITES",
    "Dataset",
    "HistoryRow",
    "JudgmentRow",
    "ParamColumns",
    "RequestRow",
    "ResultRow",
    "RowKeys",
    "SchemaError",
    "WriteRow",
    "columns",
    "dataset",
    "to_table",
]
