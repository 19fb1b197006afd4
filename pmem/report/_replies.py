"""Reply quality per (arm, purpose) from ``requests/``: requests sent, how they failed, replies cut off
or unparseable, retries."""

from __future__ import annotations

import polars as pl

from pmem.report._base import Metrics
from pmem.report._table import Table
from pmem.rundir import columns as C


def _has_error(status: pl.Expr, lo: int, hi: int) -> pl.Expr:
    return pl.col(C.ERROR).is_not_null() & status.is_between(lo, hi)


def _rows(where: pl.Expr) -> pl.Expr:
    """The number of rows where ``where`` holds (null counts as false)."""
    return where.fill_null(False).cast(pl.Int64).sum()


#: reply-quality counts per (arm, purpose): name -> (the requests/ columns it needs, its count, its
#: heading). Counts over columns a run lacks are reported as missing, never as zero.
REPLY_COLUMNS: dict[str, tuple[tuple[str, ...], pl.Expr, str]] = {
    "requests": ((), pl.len(), "requests"),
    "sent": ((C.HTTP_ATTEMPT,), _rows(pl.col(C.HTTP_ATTEMPT).is_not_null()), "sent to a server"),
    "failed": ((C.ERROR,), _rows(pl.col(C.ERROR).is_not_null()), "failed"),
    "refused": (
        (C.ERROR, C.HTTP_STATUS),
        _rows(_has_error(pl.col(C.HTTP_STATUS), 400, 499)),
        "refused (4xx)",
    ),
    "server_errors": (
        (C.ERROR, C.HTTP_STATUS),
        _rows(_has_error(pl.col(C.HTTP_STATUS), 500, 599)),
        "server error (5xx)",
    ),
    "no_response": (
        (C.ERROR, C.HTTP_STATUS),
        _rows(pl.col(C.ERROR).is_not_null() & pl.col(C.HTTP_STATUS).is_null()),
        "no response",
    ),
    "context_overflow": (
        (C.ERROR,),
        _rows(pl.col(C.ERROR).str.to_lowercase().str.contains("context", literal=True)),
        "context overflow",
    ),
    "truncated": ((C.FINISH_REASON,), _rows(pl.col(C.FINISH_REASON) == "length"), "truncated (length)"),
    "unparseable": ((C.PARSE_ERROR,), _rows(pl.col(C.PARSE_ERROR).is_not_null()), "unparseable"),
    "retries": ((C.HTTP_ATTEMPT,), _rows(pl.col(C.HTTP_ATTEMPT) > 1), "retries"),
    "failed_history_rows": (
        (C.HISTORY_FAILED,),
        _rows(pl.col(C.HISTORY_FAILED)),
        "from failed histories",
    ),
}
#: requests/ columns the runner added for this table: a run without any of them predates it
REPLY_SOURCE_COLUMNS = (C.HTTP_ATTEMPT, C.HTTP_STATUS, C.FINISH_REASON, C.PARSE_ERROR, C.HISTORY_FAILED)


def reply_quality_table(m: Metrics) -> Table:
    """Per (arm, purpose): requests sent, how they failed, replies cut or unparseable, retries. Rows of
    failed histories are counted: here they are evidence."""
    keys = (C.ARM, C.PURPOSE)
    notes = [
        "One row of requests/ per HTTP request (retries and failovers are rows of their own), every row "
        "counted, those written by failed runs of a history included ('from failed histories'). sent to a "
        f"server: {C.HTTP_ATTEMPT} set (cache hits and in-process models are not sent); failed: {C.ERROR} "
        "set, split by the server's status into refused (4xx), server error (5xx) and no response (no "
        "status: a timeout or a refused connection, or a call that never reached a server); context "
        "overflow: the error mentions the context (also counted under its status); truncated: "
        f"{C.FINISH_REASON} = length (the reply hit max_tokens); unparseable: a reply asked for as JSON that "
        f"did not parse ({C.PARSE_ERROR}); retries: requests after the first of their call.",
    ]
    empty = Table(
        "reply_quality",
        "Model replies: failures, truncation, retries",
        pl.DataFrame(),
        None,
        notes,
        keys=keys,
        section="replies",
    )
    req = m.run.frame("requests")
    if req is None:
        empty.notes.append("requests/ is missing: nothing to count (not zero).")
        return empty
    have = set(m.run.columns("requests"))
    lacking = [c for c in (*REPLY_SOURCE_COLUMNS, C.ERROR) if c not in have]
    counted = {k: v for k, v in REPLY_COLUMNS.items() if set(v[0]) <= have}
    data = (
        req.group_by(keys)
        .agg(*[count.cast(pl.Int64).alias(k) for k, (_, count, _) in counted.items()])
        .collect()
        .sort(keys)
    )
    if lacking:
        old = "predates these columns" if all(c not in have for c in REPLY_SOURCE_COLUMNS) else "lacks them"
        notes.append(
            f"requests/ has no {', '.join(lacking)} column(s) (this run {old}): the counts that need them "
            "are shown as missing, not zero."
        )
    display = data.select(
        *keys,
        *[
            pl.col(k).alias(label)
            if k in counted
            else pl.lit(f"missing (no {next(c for c in cols if c not in have)} column)").alias(label)
            for k, (cols, _, label) in REPLY_COLUMNS.items()
        ],
    )
    return Table(
        empty.name,
        empty.title,
        data,
        display,
        notes,
        keys=keys,
        values=tuple(k for k in counted),
        section="replies",
    )
