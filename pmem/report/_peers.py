"""The real peer libraries next to our re-implementations of their designs, on the same histories.

A row per (benchmark, subset, arm) for each peer arm of the run (``mem0``, ``graphiti``) and the arm that
re-implements its design (``add-only`` for Mem0 2.x, which is add-only; ``bitemporal`` for Graphiti):
histories complete and failed (with the first reason), accuracy with a Wilson interval, model calls and
tokens per ingested event (write purposes) and per question (read purposes), model time per ingested
event, and what the store holds. This is what says how faithful the re-implementations are in cost and
behaviour; the accuracy is the run's agent model's, labelled as such.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import polars as pl

from pmem.memory.writepath import WRITE_PURPOSES
from pmem.report._accounting import READ_PURPOSES
from pmem.report._stats import wilson
from pmem.report._table import Table
from pmem.rundir import columns as C
from pmem.rundir import failure_reason

if TYPE_CHECKING:
    from pmem.report._base import Metrics

#: each peer arm and the arm that re-implements its design
COUNTERPART = {"mem0": "add-only", "graphiti": "bitemporal"}


def peer_table(m: Metrics) -> Table:
    run = m.run
    title = "Real peers vs our re-implementations of their designs"
    notes = [
        "mem0 and graphiti run the libraries themselves (Mem0 2.x is add-only; Graphiti over embedded Kuzu); "
        "add-only and bitemporal are this project's re-implementations of those designs, on the same "
        "histories and models. Calls and tokens are requests/ rows (every call a library made went "
        "through the harness's metering proxy); per event: write purposes over ingested events; per "
        "question: read purposes over questions; model s/event: the write calls' latency. store: bytes "
        "the library's store held at the end (extra.peer.store_bytes), else the state file.",
    ]
    hs = run.frame("histories")
    if hs is None:
        return Table("peers", title, pl.DataFrame(), None, [*notes, "No histories/."], section="peers")
    arms = set(COUNTERPART) | set(COUNTERPART.values())
    hist = hs.filter(pl.col(C.ARM).is_in(list(arms))).collect()
    peers_here = set(hist[C.ARM].to_list()) & set(COUNTERPART) if hist.height else set()
    if not peers_here:
        return Table(
            "peers", title, pl.DataFrame(), None, [*notes, "No peer arm in this run."], section="peers"
        )
    shown_arms = sorted(peers_here | {COUNTERPART[p] for p in peers_here})
    hist = hist.filter(pl.col(C.ARM).is_in(shown_arms))
    keys = [C.BENCHMARK, C.SUBSET, C.ARM]
    rows: list[dict[str, Any]] = []
    # the shown arms' results and calls, read once (the groups below take their histories' rows)
    in_shown = pl.col(C.ARM).is_in(shown_arms)
    res = run.frame("results")
    results = (
        None
        if res is None
        else res.filter(in_shown).select(C.ARM, C.HISTORY_ID, pl.col(C.CORRECT).cast(pl.Int64)).collect()
    )
    req = run.frame("requests")
    requests = (
        None
        if req is None
        else req.filter(in_shown & ~pl.col(C.HISTORY_FAILED).fill_null(False))
        .select(C.ARM, C.HISTORY_ID, C.PURPOSE, C.PROMPT_TOKENS, C.COMPLETION_TOKENS, C.LATENCY_S)
        .collect()
    )
    for (bench, subset, arm), grp in hist.group_by(keys, maintain_order=True):
        done = grp.filter(pl.col(C.STATUS) == "complete")
        failed = grp.filter(pl.col(C.STATUS) == "failed")
        ids = done[C.HISTORY_ID].to_list()
        events = int(done["n_events"].sum() or 0)
        row: dict[str, Any] = {
            C.BENCHMARK: bench,
            C.SUBSET: subset,
            C.ARM: arm,
            "design": arm if arm in COUNTERPART else f"ours ({arm})",
            "complete": done.height,
            "failed": failed.height,
            "first_failure": failure_reason(next(iter(failed[C.ERROR].drop_nulls().to_list()), None)),
        }
        if results is not None and ids:
            r = results.filter((pl.col(C.ARM) == arm) & pl.col(C.HISTORY_ID).is_in(ids))
            n, k = r.height, int(r[C.CORRECT].sum() or 0)
            lo, hi = wilson(k, n)
            row |= {"questions": n, "accuracy": k / n if n else None, "acc_lo": lo, "acc_hi": hi}
        if requests is not None and ids:
            calls = requests.filter((pl.col(C.ARM) == arm) & pl.col(C.HISTORY_ID).is_in(ids))
            write = calls.filter(pl.col(C.PURPOSE).is_in(list(WRITE_PURPOSES)))
            read = calls.filter(pl.col(C.PURPOSE).is_in(list(READ_PURPOSES)))
            q = row.get("questions") or 0
            row |= {
                "write_calls_per_event": write.height / events if events else None,
                "write_tokens_per_event": _tokens(write) / events if events else None,
                "model_s_per_event": float(write[C.LATENCY_S].sum() or 0) / events if events else None,
                "read_calls_per_question": read.height / q if q else None,
                "read_tokens_per_question": _tokens(read) / q if q else None,
            }
        row["store_bytes_mean"] = _store_bytes(done)
        rows.append(row)
    data = pl.DataFrame(rows).sort(keys)
    return Table(
        "peers", title, data, _display(data), notes, keys=tuple(keys), values=("accuracy",), section="peers"
    )


def _display(data: pl.DataFrame) -> pl.DataFrame:
    """The table as read: numbers rounded, the interval beside the accuracy, the failure last and short."""

    def rounded(name: str, digits: int) -> pl.Expr:
        if name not in data.columns:
            return pl.lit("—").alias(name)
        value = pl.col(name).cast(pl.Float64).round(digits)
        return (value.cast(pl.Int64) if digits == 0 else value).cast(pl.String).fill_null("—")

    acc = (
        pl.when(pl.col("accuracy").is_not_null())
        .then(
            pl.format(
                "{}% [{}, {}]",
                (pl.col("accuracy") * 100).round(1),
                (pl.col("acc_lo") * 100).round(1),
                (pl.col("acc_hi") * 100).round(1),
            )
        )
        .otherwise(pl.lit("—"))
        if "accuracy" in data.columns
        else pl.lit("—")
    )
    return data.select(
        C.BENCHMARK,
        C.SUBSET,
        C.ARM,
        "complete",
        "failed",
        acc.alias("accuracy (95% CI)"),
        rounded("write_calls_per_event", 2).alias("write calls/event"),
        rounded("write_tokens_per_event", 0).alias("write tokens/event"),
        rounded("model_s_per_event", 2).alias("model s/event"),
        rounded("read_tokens_per_question", 0).alias("read tokens/question"),
        rounded("store_bytes_mean", 0).alias("store bytes"),
        pl.col("first_failure").fill_null("").alias("first failure"),
    )


def _tokens(calls: pl.DataFrame) -> int:
    return int((calls[C.PROMPT_TOKENS].fill_null(0) + calls[C.COMPLETION_TOKENS].fill_null(0)).sum() or 0)


def _store_bytes(done: pl.DataFrame) -> float | None:
    """Mean bytes held per complete history: the peer library's store, else the state file."""
    sizes: list[int] = []
    for extra, state in zip(done["extra"].to_list(), done["state_bytes"].to_list(), strict=True):
        peer = (json.loads(extra) or {}).get("peer", {}) if extra else {}
        size = peer.get("store_bytes", state)
        if size is not None:
            sizes.append(int(size))
    return sum(sizes) / len(sizes) if sizes else None
