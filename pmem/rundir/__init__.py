"""The run directory contract (DESIGN.md): the layout and the datasets of ``runs/<id>/``, defined once.

The runner writes with this package and the report reads with it; it belongs to neither. Each dataset
(``results``, ``writes``, ``requests``, ``histories``, ``judgments``) is a frozen row type whose fields are
its columns (:mod:`pmem.rundir._rows`), an Arrow schema derived from it, and one conversion from rows to
a table that refuses unknown and missing columns. Column names for readers are constants in
:mod:`pmem.rundir.columns`. Every other folder and file name of a run directory (``states/``,
``_commits/``, ``_staging/``, ``run.toml``, ``plan.json``, ...), the state path of a history and the fields
of a plan cell are in :mod:`pmem.rundir._layout`; the commit record, read, written and verified, is
:class:`CommitRecord` (:mod:`pmem.rundir._commits`). Code elsewhere names them through this package.

Importing this package is cheap (no pyarrow, no graph): the model layer uses it for the request log.
It may import pyarrow and :mod:`pmem.graph` (lazily) and the shared helpers (:mod:`pmem._atomic`),
nothing else from ``pmem``.

>>> from pmem import rundir
>>> rundir.WRITES.table([{"history_id": "h"}])
Traceback (most recent call last):
...
pmem.rundir._datasets.SchemaError: writes: row 0 lacks required column(s) 'applied', 'arm', ...
"""

from __future__ import annotations

from pmem.rundir import columns
from pmem.rundir._commits import CommitRecord, CommitRecordError, Damaged, record_digests, verify_commits
from pmem.rundir._datasets import (
    CALIBRATION,
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
from pmem.rundir._errors import failure_reason
from pmem.rundir._files import LOGS, PROGRESS_LOG
from pmem.rundir._layout import (
    CACHE,
    COMMITS,
    FAILED_HISTORIES_GLOB,
    GRAPH_STATE,
    LOCK,
    PLAN,
    PLAN_FIELDS,
    REPORT,
    RESPONSE_CACHE,
    RUN_TOML,
    STAGING,
    STATES,
    STORE_STATE,
    SUMMARY,
    PlanCell,
    failed_history_file,
    failed_requests_file,
    failed_unit,
    judge_file,
    part_file,
    safe_name,
    state_path,
    states_of,
)
from pmem.rundir._rows import (
    CalibrationRow,
    HistoryRow,
    JudgmentRow,
    ParamColumns,
    RequestRow,
    ResultRow,
    RowKeys,
    WriteRow,
)

__all__ = [
    "CACHE",
    "CALIBRATION",
    "COMMITS",
    "DATASETS",
    "FAILED_HISTORIES_GLOB",
    "GRAPH_STATE",
    "HISTORIES",
    "JUDGMENTS",
    "LOCK",
    "LOGS",
    "PLAN",
    "PLAN_FIELDS",
    "PROGRESS_LOG",
    "REPORT",
    "REQUESTS",
    "RESPONSE_CACHE",
    "RESULTS",
    "RUN_TOML",
    "STAGING",
    "STATES",
    "STORE_STATE",
    "SUMMARY",
    "WRITES",
    "CalibrationRow",
    "CommitRecord",
    "CommitRecordError",
    "Damaged",
    "Dataset",
    "HistoryRow",
    "JudgmentRow",
    "ParamColumns",
    "PlanCell",
    "RequestRow",
    "ResultRow",
    "RowKeys",
    "SchemaError",
    "WriteRow",
    "columns",
    "dataset",
    "failed_history_file",
    "failed_requests_file",
    "failed_unit",
    "failure_reason",
    "judge_file",
    "part_file",
    "record_digests",
    "safe_name",
    "state_path",
    "states_of",
    "to_table",
    "verify_commits",
]
