"""Token and call costs: read cost per query, write cost per completed history, and the break-even
number of queries after which a write-time arm's extra write tokens are repaid."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from pmem.memory.writepath import WRITE_PURPOSES
from pmem.models import EMBED_PURPOSE
from pmem.report._accounting import (
    HARNESS_PURPOSES,
    READ_PURPOSES,
    cost_requests,
    history_index,
    request_sums,
)
from pmem.report._base import Metrics
from pmem.report._table import Table
from pmem.rundir import columns as C

#: Ops that commit a value (a "committed fact").
VALUE_OPS = ("accept", "reject", "contest", "resolve")
#: histories/ columns whose per-history mean the write-cost table reports
HISTORY_COSTS = (C.WALL_S, C.STATE_BYTES)


def read_cost_table(m: Metrics) -> Table:
    keys = [C.BENCHMARK, C.SUBSET, C.ARM]
    notes = [
        "Read cost per query: context tokens and characters shown to the reader (results.read_tokens / "
        "read_chars), accuracy, and accuracy points per 1k context tokens (Table 5 convention)."
    ]
    if m.accuracy.height == 0:
        return Table("read_cost", "Read cost per query", pl.DataFrame(), None, notes, section="cost")
    data = (
        m.accuracy.group_by(keys)
        .agg(
            n=pl.col("n").sum(),
            correct=pl.col(C.CORRECT).sum(),
            tok=pl.col("tok").sum(),
            chars=pl.col("chars").sum(),
            tok_n=pl.col("tok_n").sum(),
        )
        .with_columns(
            accuracy=pl.col(C.CORRECT) / pl.col("n"),
            read_tokens=pl.col("tok") / pl.col("tok_n"),
            read_chars=pl.col("chars") / pl.col("tok_n"),
        )
        .with_columns(
            acc_per_1k_tokens=pl.when(pl.col(C.READ_TOKENS) > 0).then(
                100 * pl.col("accuracy") / (pl.col(C.READ_TOKENS) / 1000)
            )
        )
        .select(*keys, "n", "accuracy", C.READ_TOKENS, C.READ_CHARS, "acc_per_1k_tokens")
        .sort(keys)
    )
    display = data.select(
        *keys,
        "n",
        (pl.col("accuracy") * 100).round(1).alias("accuracy %"),
        pl.col(C.READ_TOKENS).round(1).alias("tokens/query"),
        pl.col(C.READ_CHARS).round(1).alias("chars/query"),
        pl.col("acc_per_1k_tokens").round(2).alias("acc points per 1k tokens"),
    )
    return Table(
        "read_cost",
        "Read cost per query",
        data,
        display,
        notes,
        keys=tuple(keys),
        values=(C.READ_TOKENS, C.READ_CHARS, "acc_per_1k_tokens"),
        section="cost",
    )


def write_cost_table(m: Metrics) -> Table:
    run = m.run
    keys = [C.BENCHMARK, C.SUBSET, C.ARM]
    notes = [
        "Write cost per completed history (means), and per event (the cell's writes, tokens and wall "
        "time over its histories' events: every arm, the peers included). Write calls: requests with a write purpose "
        f"({', '.join(sorted(WRITE_PURPOSES))}); read calls: {', '.join(sorted(READ_PURPOSES))}; the "
        f"evaluation harness ({', '.join(sorted(HARNESS_PURPOSES))}) is neither. Embed calls (purpose "
        f"{EMBED_PURPOSE}) are counted apart and not charged as writes: the runner logs embedding requests "
        "made while writing and while answering alike. Requests written by a failed run of a history "
        f"({C.HISTORY_FAILED}) are not costs. Committed facts: applied writes with a value-carrying op ("
        + ", ".join(VALUE_OPS)
        + "); cells: "
        "distinct keys they touched. Wall time and state bytes from histories/.",
    ]
    idx = history_index(run)
    if idx is None:
        return Table(
            "write_cost",
            "Write cost per history",
            pl.DataFrame(),
            None,
            [*notes, "No results/ or histories/: nothing to attribute costs to."],
            section="cost",
        )
    # one row per (history, arm) already (history_status dedups; the results fallback is unique())
    done = idx.filter(pl.col(C.STATUS) == "complete").select(C.HISTORY_ID, C.ARM, C.BENCHMARK, C.SUBSET)
    base = done.group_by(keys).agg(histories=pl.len())
    frames = [base]
    req = cost_requests(run)
    if req is not None:
        frames.append(request_sums(run, req, idx, keys))
    wr = run.frame("writes")
    ops_cols: list[str] = []
    if wr is not None:
        wcols = set(run.columns("writes"))
        value_op = pl.col(C.OP).is_in(list(VALUE_OPS)) & pl.col(C.APPLIED).fill_null(False)
        if C.VALUE in wcols:
            value_op &= pl.col(C.VALUE).is_not_null()
        key = pl.col(C.KEY) if C.KEY in wcols else pl.lit(None, dtype=pl.String)
        per_w = (
            wr.with_columns(value_op.alias("vop"), key.alias(C.KEY))
            .group_by(C.HISTORY_ID, C.ARM)
            .agg(
                committed_facts=pl.col("vop").sum(),
                cells=pl.col(C.KEY).filter(pl.col("vop")).n_unique(),
                write_ops=pl.len(),
                applied_ops=pl.col(C.APPLIED).fill_null(False).sum(),
            )
        )
        ops = wr.group_by(C.HISTORY_ID, C.ARM, C.OP).agg(c=pl.len()).collect()
        ops_cols = sorted(ops[C.OP].drop_nulls().unique().to_list())
        ops_w = ops.pivot(on=C.OP, index=[C.HISTORY_ID, C.ARM], values="c").lazy() if ops.height else None
        agg_w = done.join(per_w, on=[C.HISTORY_ID, C.ARM], how="inner")
        if ops_w is not None:
            agg_w = agg_w.join(
                ops_w.rename({o: f"op_{o}" for o in ops_cols}), on=[C.HISTORY_ID, C.ARM], how="left"
            )
        frames.append(
            agg_w.group_by(keys).agg(
                pl.col(
                    "committed_facts", "cells", "write_ops", "applied_ops", *[f"op_{o}" for o in ops_cols]
                ).sum(),
                writes_histories=pl.len(),
            )
        )
    hs = run.frame("histories")
    hcols = set(run.columns("histories"))
    extra = [c for c in HISTORY_COSTS if c in hcols]
    # per event as well (every arm, the peers included): a history's events are its n_events
    by_cell = hs is not None and extra and {C.BENCHMARK, C.SUBSET} <= hcols
    per_event = by_cell and C.N_EVENTS in hcols and C.WALL_S in hcols
    if hs is not None and by_cell:
        totals = [pl.col(C.N_EVENTS).sum().alias("events"), pl.col(C.WALL_S).sum().alias("wall_s_total")]
        frames.append(
            hs.filter(pl.col(C.STATUS) == "complete")
            .group_by(keys)
            .agg(*[pl.col(c).mean().alias(f"{c}_mean") for c in extra], *(totals if per_event else []))
        )
    out = frames[0]
    for f in frames[1:]:
        out = out.join(f, on=keys, how="left", nulls_equal=True)
    df = out.collect().sort(keys)
    h = pl.col("histories")
    per_hist: list[pl.Expr] = []
    if req is not None:
        per_hist += [
            (pl.col("write_calls") / h).alias("write_calls_per_history"),
            (pl.col("write_prompt_tokens") / h).alias("write_prompt_tokens_per_history"),
            (pl.col("write_completion_tokens") / h).alias("write_completion_tokens_per_history"),
            ((pl.col("write_prompt_tokens") + pl.col("write_completion_tokens")) / h).alias(
                "write_tokens_per_history"
            ),
            (pl.col("read_calls") / h).alias("read_calls_per_history"),
            (pl.col("embed_calls") / h).alias("embed_calls_per_history"),
            (pl.col("errors") / h).alias("errors_per_history"),
        ]
        if per_event:
            events = pl.when(pl.col("events") > 0).then(pl.col("events"))  # null: no event to divide by
            per_hist += [
                (pl.col("write_calls") / events).alias("write_calls_per_event"),
                ((pl.col("write_prompt_tokens") + pl.col("write_completion_tokens")) / events).alias(
                    "write_tokens_per_event"
                ),
                (pl.col("wall_s_total") / events).alias("wall_s_per_event"),
            ]
    else:
        notes.append("requests/ is missing: model calls and tokens are not reported (not zero).")
    if wr is not None:
        per_hist += [
            (pl.col("committed_facts") / pl.col("writes_histories")).alias("committed_facts_per_history"),
            (pl.col("cells") / pl.col("writes_histories")).alias("cells_per_history"),
            pl.when(pl.col("cells") > 0)
            .then(pl.col("committed_facts") / pl.col("cells"))
            .alias("facts_per_cell"),
            *[
                (pl.col(f"op_{o}") / pl.col("writes_histories")).alias(f"op_{o}_per_history")
                for o in ops_cols
            ],
        ]
        if req is not None:
            per_hist.append(
                pl.when(pl.col("committed_facts") > 0)
                .then(pl.col("write_calls") / pl.col("committed_facts"))
                .alias("calls_per_committed_fact")
            )
    else:
        notes.append("writes/ is missing: committed facts, cells and operations are not reported (not zero).")
    absent = [c for c in HISTORY_COSTS if c not in extra]
    if absent:
        notes.append(f"histories/ has no {', '.join(absent)}: not reported (not zero).")
    df = df.with_columns(per_hist)
    value_cols = [
        c
        for c in df.columns
        if c.endswith(("_per_history", "_per_event"))
        or c
        in (
            "calls_per_committed_fact",
            "facts_per_cell",
            "wall_s_mean",
            "state_bytes_mean",
        )
    ]
    data = df.select(*keys, "histories", *value_cols)
    show = {
        "write_calls_per_history": "write calls",
        "calls_per_committed_fact": "calls/committed fact",
        "write_prompt_tokens_per_history": "write prompt tok",
        "write_completion_tokens_per_history": "write compl. tok",
        "committed_facts_per_history": "committed facts",
        "cells_per_history": "cells",
        "facts_per_cell": "facts/cell",
        "wall_s_mean": "wall s",
        "state_bytes_mean": "state bytes",
        "read_calls_per_history": "read calls",
        "embed_calls_per_history": "embed calls",
        "errors_per_history": "errors",
        "write_calls_per_event": "write calls/event",
        "write_tokens_per_event": "write tok/event",
        "wall_s_per_event": "wall s/event",
    }
    disp_cols = [pl.col(c).round(2).alias(lbl) for c, lbl in show.items() if c in data.columns]
    op_cols = [c for c in data.columns if c.startswith("op_")]
    if op_cols:

        def ops_text(r: dict[str, Any]) -> str:
            parts = [f"{c[3:-12]} {r[c]:.1f}" for c in op_cols if r[c]]
            return ", ".join(parts)

        disp_cols.append(
            pl.struct(op_cols).map_elements(ops_text, return_dtype=pl.String).alias("ops per history")
        )
    display = data.select(*keys, "histories", *disp_cols)
    return Table(
        "write_cost",
        "Write cost per history",
        data,
        display,
        notes,
        keys=tuple(keys),
        values=tuple(value_cols),
        section="cost",
    )


def break_even_table(m: Metrics, read: Table, write: Table) -> Table:
    notes = [
        "Break-even: queries per history after which a write-time arm's extra write tokens are repaid by the "
        "context tokens it saves per query: N = (write tokens/history(W) − write tokens/history(R)) / "
        "(read tokens/query(R) − read tokens/query(W)). Assumptions: write and read tokens priced equally; "
        "read cost = context tokens shown to the reader (results.read_tokens); write cost = prompt + completion "
        f"tokens of write-purpose model calls (requests/: {', '.join(sorted(WRITE_PURPOSES))}); judging not "
        f"charged; embedding calls not charged at all (the runner logs them with purpose {EMBED_PURPOSE} "
        "whether made while writing or while answering, so write-time embeddings are left out too: an arm "
        "that embeds what it stores is charged less than it spends); read-time arms R are those with "
        "no write-purpose model calls in the cell; per-query "
        "verification calls of read-time paths not charged (they would lower N). 'never' = W reads no fewer "
        "tokens than R.",
    ]
    keys = [C.BENCHMARK, C.SUBSET]
    if read.empty or write.empty or "write_tokens_per_history" not in write.data.columns:
        return Table(
            "break_even",
            "Break-even queries per history",
            pl.DataFrame(),
            None,
            [*notes, "Not computable: needs results/ and requests/."],
            section="cost",
        )
    j = read.data.join(
        write.data.select(*keys, C.ARM, "write_tokens_per_history", "histories"),
        on=[*keys, C.ARM],
        how="left",
    ).with_columns(pl.col("write_tokens_per_history").fill_null(0.0))
    rows = []
    for gkey, sub in j.partition_by(keys, as_dict=True, maintain_order=True).items():
        recs = sub.to_dicts()
        readers = [r for r in recs if not r["write_tokens_per_history"]]
        for w in recs:
            if not w["write_tokens_per_history"] or w["write_tokens_per_history"] <= 0:
                continue
            for r in readers:
                extra = w["write_tokens_per_history"] - r["write_tokens_per_history"]
                saved = (r[C.READ_TOKENS] or 0) - (w[C.READ_TOKENS] or 0)
                if extra <= 0:
                    n_star, verdict = 0.0, "0 (no extra write cost)"
                elif saved <= 0:
                    n_star, verdict = math.inf, "never"
                else:
                    n_star = extra / saved
                    verdict = f"{n_star:,.1f}"
                qph = (w["n"] / w["histories"]) if w.get("histories") else None
                rows.append(
                    {
                        C.BENCHMARK: gkey[0],
                        C.SUBSET: gkey[1],
                        "write_arm": w[C.ARM],
                        "read_arm": r[C.ARM],
                        "extra_write_tokens_per_history": extra,
                        "read_tokens_saved_per_query": saved,
                        "break_even_queries": n_star,
                        "queries_per_history_here": qph,
                        "verdict": verdict,
                    }
                )
    data = pl.DataFrame(rows) if rows else pl.DataFrame()
    display = None
    if data.height:
        display = data.select(
            C.BENCHMARK,
            C.SUBSET,
            "write_arm",
            "read_arm",
            pl.col("extra_write_tokens_per_history").round(0).alias("extra write tok/history"),
            pl.col("read_tokens_saved_per_query").round(1).alias("read tok saved/query"),
            pl.col("verdict").alias("break-even queries"),
            pl.col("queries_per_history_here").round(1).alias("queries/history in this run"),
        )
    return Table(
        "break_even",
        "Break-even queries per history (write-time vs read-time arms)",
        data,
        display,
        notes,
        keys=(C.BENCHMARK, C.SUBSET, "write_arm", "read_arm"),
        values=("break_even_queries",),
        section="cost",
    )
