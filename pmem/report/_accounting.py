"""Which histories completed and which model calls are charged to them.

:func:`history_status` and :func:`history_index` say, per (history, arm), its benchmark, subset and final
status; :func:`cost_requests` and :func:`request_sums` sum the ``requests/`` rows that count as costs per
(benchmark, subset, arm), split by purpose into write, read, harness and embed calls. The cost tables and
the provenance-probes cost table share them.
"""

from __future__ import annotations

import polars as pl

from pmem.memory.writepath import PEER_READ, WRITE_PURPOSES
from pmem.models import EMBED_PURPOSE
from pmem.report._load import Run
from pmem.rundir import columns as C

#: Request purposes charged to the write path are the arms' own (WRITE_PURPOSES); read-time ones and the
#: evaluation harness are kept apart.
READ_PURPOSES = frozenset({"answer", "lookup", "prune", "gate", PEER_READ})
HARNESS_PURPOSES = frozenset({"judge"})


def history_status(run: Run) -> pl.LazyFrame | None:
    """One row per (history, arm) of histories/: benchmark, subset, final status and error.

    A history that failed and then completed on a retry leaves both rows: complete wins, so it is not
    counted as failed.
    """
    if "history_status" in run.cache:
        return run.cache["history_status"]
    hs = run.frame("histories")
    cols = set(run.columns("histories"))
    if hs is None or not {C.BENCHMARK, C.SUBSET} <= cols:
        return None
    err = pl.col(C.ERROR) if C.ERROR in cols else pl.lit(None, dtype=pl.String)
    base = hs.select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET, C.STATUS, err.alias(C.ERROR))
    complete = base.filter(pl.col(C.STATUS) == "complete").unique([C.HISTORY_ID, C.ARM], keep="first")
    # only the (few) rows that are not complete need deduplicating against the complete ones
    rest = (
        base.filter(pl.col(C.STATUS) != "complete")
        .join(complete.select(C.HISTORY_ID, C.ARM), on=[C.HISTORY_ID, C.ARM], how="anti")
        .unique([C.HISTORY_ID, C.ARM], keep="last", maintain_order=True)
    )
    out = pl.concat([complete.with_columns(error=pl.lit(None, dtype=pl.String)), rest]).collect().lazy()
    run.cache["history_status"] = out
    return out


def history_index(run: Run) -> pl.LazyFrame | None:
    """(history_id, arm) -> (benchmark, subset, status), from histories/ or else from results/."""
    st = history_status(run)
    if st is not None:
        return st.select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET, C.STATUS)
    res = run.frame("results")
    if res is None:
        return None
    return (
        res.select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET)
        .unique()
        .with_columns(status=pl.lit("complete"))
    )


def cost_requests(run: Run) -> pl.LazyFrame | None:
    """requests/ rows that count as costs: rows written by a failed run of a history (``history_failed``,
    null read as false) are evidence of what went wrong, not the cost of the result reported."""
    req = run.frame("requests")
    if req is None or C.HISTORY_FAILED not in run.columns("requests"):
        return req
    return req.filter(~pl.col(C.HISTORY_FAILED).fill_null(False))


_REQ_SUMS = (
    "write_calls",
    "write_prompt_tokens",
    "write_completion_tokens",
    "read_calls",
    "read_call_tokens",
    "harness_calls",
    "embed_calls",
    "errors",
    C.CACHED,
    "calls",
)


def request_sums(run: Run, req: pl.LazyFrame, idx: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """Model calls and tokens per (benchmark, subset, arm), split into write / read / harness purposes.

    Calls of histories that did not complete are left out. When request rows carry ``benchmark`` and
    ``subset`` (a runner writes them for free: they are constant per file) the sums group by those
    low-cardinality keys directly; otherwise every call is first attributed through its (history, arm),
    a group-by over millions of distinct string pairs that costs about 4x more.
    """
    rcols = set(run.columns("requests"))
    # 0 write, 1 read, 2 harness, 3 embed, 4 any other purpose (counted in calls only)
    code = pl.col(C.PURPOSE).replace_strict(
        {
            **dict.fromkeys(WRITE_PURPOSES, 0),
            **dict.fromkeys(READ_PURPOSES, 1),
            **dict.fromkeys(HARNESS_PURPOSES, 2),
            EMBED_PURPOSE: 3,
        },
        default=4,
        return_dtype=pl.Int8,
    )
    err = pl.col(C.ERROR).is_not_null() if C.ERROR in rcols else pl.lit(False)
    cached = pl.col(C.CACHED).fill_null(False) if C.CACHED in rcols else pl.lit(False)
    pt, ct = (
        pl.col(C.PROMPT_TOKENS).fill_null(0).cast(pl.Int64),
        pl.col(C.COMPLETION_TOKENS).fill_null(0).cast(pl.Int64),
    )
    w, r = (pl.col("_c") == 0).cast(pl.Int64), (pl.col("_c") == 1).cast(pl.Int64)
    sums = [
        w.alias("write_calls"),
        (w * pt).alias("write_prompt_tokens"),
        (w * ct).alias("write_completion_tokens"),
        r.alias("read_calls"),
        (r * (pt + ct)).alias("read_call_tokens"),
        (pl.col("_c") == 2).cast(pl.Int64).alias("harness_calls"),
        (pl.col("_c") == 3).cast(pl.Int64).alias("embed_calls"),
        err.cast(pl.Int64).alias("errors"),
        cached.cast(pl.Int64).alias(C.CACHED),
        pl.lit(1, dtype=pl.Int64).alias("calls"),
    ]
    not_done = idx.filter(pl.col(C.STATUS) != "complete").select(C.HISTORY_ID, C.ARM)
    if {C.BENCHMARK, C.SUBSET} <= rcols:
        failed = not_done.collect()
        lf = req if failed.height == 0 else req.join(failed.lazy(), on=[C.HISTORY_ID, C.ARM], how="anti")
        return lf.with_columns(code.alias("_c")).select(*keys, *sums).group_by(keys).agg(pl.all().sum())
    done = idx.filter(pl.col(C.STATUS) == "complete").select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET)
    per = (
        req.with_columns(code.alias("_c"))
        .select(C.HISTORY_ID, C.ARM, *sums)
        .group_by(C.HISTORY_ID, C.ARM)
        .agg(pl.all().sum())
    )
    return done.join(per, on=[C.HISTORY_ID, C.ARM], how="inner").group_by(keys).agg(pl.col(*_REQ_SUMS).sum())
