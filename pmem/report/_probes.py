"""The provenance-probes section: per-subset probe accuracies, paired tests and cost per arm.

Every number comes from the benchmark's question rows in ``results/`` (one lazy filter, collected once)
and, for the write path, from ``histories/`` and ``requests/`` through the cost helpers of
:mod:`pmem.report._accounting`. Rows whose ``correct`` is null (no verdict) are left out of every
denominator here and counted in a note: a probe asks whether a behaviour happened, and an unjudged
answer says nothing either way.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from pmem.report._accounting import cost_requests, history_index, history_status, request_sums
from pmem.report._base import Metrics, order_arms
from pmem.report._load import AGENT_SEP
from pmem.report._palette import soft_identity
from pmem.report._stats import mcnemar_exact, wilson
from pmem.report._table import Table, ci, num, pct
from pmem.rundir import columns as C

BENCHMARK = "provenance-probes"
SECTION = "provenance"

#: the question types of each subset, in the order the tables show them
PROBE_TYPES: dict[str, tuple[str, ...]] = {
    "erasure": ("before_forget", "forget_once", "forget_twice"),
    "authority": ("before_claims", "after_claims_k1", "after_claims_k4", "disclosure"),
    "late-arrival": ("before_late", "current", "as_of"),
    "stale-premise": ("before_change", "after_change"),
    "merge": ("before_correction", "after_correction"),
}
#: erasure questions whose rows carry ``artifact_bytes``
FORGET_TYPES = ("forget_once", "forget_twice")
#: the two artifact metrics of the erasure table (metric names in its CSV)
ARTIFACT_MEAN, ARTIFACT_HELD = "artifact_bytes_mean", "artifact_held"
#: (reference arm, other arm) pairs tested with McNemar on every post-event probe
PAIRS = (("pmem", "pmem-paper"), ("pmem", "bitemporal"))

#: short column headings of the per-subset tables
LABELS = {
    "before_forget": "before forget",
    "forget_once": "forget once: no leak",
    "forget_twice": "forget 1 of 2: kept",
    ARTIFACT_MEAN: "erased bytes held (mean)",
    ARTIFACT_HELD: "states holding erased text",
    "before_claims": "before claims",
    "after_claims_k1": "after 1 claim",
    "after_claims_k4": "after 4 claims",
    "disclosure": "discloses conflict",
    "before_late": "before late update",
    "current": "current (valid time)",
    "as_of": "as of date",
    "before_change": "before change",
    "after_change": "flagged or re-derived",
    "before_correction": "before correction",
    "after_correction": "own value per entity",
}

#: one plain sentence per probe, shown under its subset's table
MEANINGS = {
    "before_forget": "before forget: the fact is answered correctly before the user asks to forget it "
    "(a baseline: the arm had the value to lose).",
    "forget_once": "forget once: after the user asked to forget the only statement of a fact, the answer "
    "does not reveal the erased value.",
    "forget_twice": "forget 1 of 2: after one of two statements of a fact was forgotten, the value is "
    "still given (the other statement still supports it).",
    ARTIFACT_MEAN: "erased bytes held: mean number of bytes of the erased statement's text (and, where no "
    "other statement made it, of its value) still found in what the arm keeps, over forget questions "
    "where it was measured.",
    ARTIFACT_HELD: "states holding erased text: share of those forget questions where any of the erased "
    "content is still kept (more than 0 bytes).",
    "before_claims": "before claims: the trusted value is answered before any untrusted claim arrives.",
    "after_claims_k1": "after 1 claim: after one contradicting claim from an untrusted source, the trusted "
    "value is still given and the untrusted one is not stated as current.",
    "after_claims_k4": "after 4 claims: the same after four contradicting untrusted claims.",
    "disclosure": "discloses conflict: asked whether any report conflicts, the answer names the trusted "
    "value and the untrusted claim.",
    "before_late": "before late update: the value is answered before the out-of-order update arrives.",
    "current": "current (valid time): after an update that arrives out of valid-time order, the answer "
    "is the value latest in valid time, not the one received last.",
    "as_of": "as of date: asked for the value on a given date, the answer is the value valid on that "
    "date, taken from history.",
    "before_change": "before change: the derived answer is correct before its premise changes.",
    "after_change": "flagged or re-derived: after a premise changed, the derived answer is flagged as "
    "possibly stale or derived again; stating the old answer as current without a flag fails.",
    "before_correction": "before correction: the value is answered before the two similarly named "
    "entities are said to differ.",
    "after_correction": "own value per entity: after a correction says two near-identically named "
    "entities are different, each gets its own value back.",
}


#: what "before" and "after" mean in each subset: the question asked before the case's critical event and
#: those asked after it (pmem/bench/_probes.py builds the cases; docs/bench.md "Provenance probes")
BEFORE_AFTER = {
    "erasure": "Before: asked once the fact has been stated, before the user asks to forget what they said "
    "about it. After: asked after that request; 'forget once' where the user's statement was the only one, "
    "'forget 1 of 2' where a document also stated the fact.",
    "authority": "Before: asked once a trusted source (user or environment) has set the value, before any "
    "untrusted claim. After: asked after an untrusted source (web or agent) claimed another value 1 or 4 "
    "times; the disclosure question is asked after the claims too.",
    "late-arrival": "Before: asked after the first two dated values have arrived. After: asked once a third "
    "arrives out of valid-time order (the last arrival is never the latest in valid time).",
    "stale-premise": "Before: asked while the person's seat follows from their team's home room. After: "
    "asked once that home room, the premise, has changed.",
    "merge": "Before: asked about the first-named of two people whose names differ by a final 's' (Anna "
    "Mark, Anna Marks) once both have a value, before a correction says they are different people. After: "
    "asked about each of the two after the correction (in half the cases one of them then gets a new value).",
}


def merge_premise(data: pl.DataFrame) -> str | None:
    """The sentence under the merge table when arms with soft identity fail before the correction.

    A key matched by similarity (P-Mem's soft identity, :func:`pmem.report._palette.soft_identity`) merges
    the two near-identical names, so such an arm answers the other person's value before the correction:
    the false merge the probe sets up for the correction to undo. Said only when the run's numbers show it:
    such an arm's before-correction pass rate is below one half with its whole Wilson 95% interval."""

    index = {(r[C.ARM], r["metric"]): r for r in data.iter_rows(named=True)}
    merged = [
        a
        for a in order_arms({a for a, _ in index})
        if soft_identity(a)
        and (r := index.get((a, "before_correction"))) is not None
        and r["wilson_hi"] is not None
        and r["wilson_hi"] < 0.5
    ]
    if not merged:
        return None

    def rate(a: str, metric: str) -> str:
        r = index.get((a, metric))
        return "–" if r is None else f"{a} {pct(r['rate'])}% {ci(r['wilson_lo'], r['wilson_hi'])}"

    before = ", ".join(rate(a, "before_correction") for a in merged)
    after = ", ".join(rate(a, "after_correction") for a in merged if (a, "after_correction") in index)
    return (
        "A low score before the correction for an arm that matches names by similarity (P-Mem's soft "
        "identity) is the probe's premise: the two near-identical names are merged into one entity and "
        f"the other person's value comes back ({before} before). This false merge is what the correction "
        f"is there to undo; after it: {after or 'no after-correction rows'}."
    )


def post_event(qtype: str) -> bool:
    """A probe asked after its event (every type but the ``before_*`` baselines)."""
    return not qtype.startswith("before_")


def table_name(subset: str) -> str:
    return f"provenance_{subset.replace('-', '_')}"


def probe_rows(m: Metrics) -> pl.DataFrame:
    """The benchmark's question rows: keys, correct, and artifact_bytes / read_tokens (null when absent)."""
    run = m.run
    if "probe_rows" in run.cache:
        return run.cache["probe_rows"]
    lf = run.frame("results")
    cols = set(run.columns("results"))
    art = pl.col(C.ARTIFACT_BYTES) if C.ARTIFACT_BYTES in cols else pl.lit(None, dtype=pl.Int64)
    tok = pl.col(C.READ_TOKENS) if C.READ_TOKENS in cols else pl.lit(None, dtype=pl.Int64)
    schema = {
        C.SUBSET: pl.String,
        C.ARM: pl.String,
        C.HISTORY_ID: pl.String,
        C.QUESTION_ID: pl.String,
        C.QUESTION_TYPE: pl.String,
        C.CORRECT: pl.Boolean,
        C.ARTIFACT_BYTES: pl.Int64,
        C.READ_TOKENS: pl.Float64,
    }
    if lf is None:
        out = pl.DataFrame(schema=schema)
    else:
        out = (
            lf.filter(pl.col(C.BENCHMARK) == BENCHMARK)
            .select(
                C.SUBSET,
                C.ARM,
                C.HISTORY_ID,
                C.QUESTION_ID,
                C.QUESTION_TYPE,
                pl.col(C.CORRECT).cast(pl.Boolean),
                art.cast(pl.Int64).alias(C.ARTIFACT_BYTES),
                tok.cast(pl.Float64).alias(C.READ_TOKENS),
            )
            .collect()
        )
    run.cache["probe_rows"] = out
    return out


# -- per-subset tables -------------------------------------------------------------------------------------

_TIDY = {
    C.ARM: pl.String,
    "metric": pl.String,
    "n": pl.Int64,
    "k": pl.Int64,
    "rate": pl.Float64,
    "wilson_lo": pl.Float64,
    "wilson_hi": pl.Float64,
    "mean_bytes": pl.Float64,
}


def _rate_rows(counts: pl.DataFrame, metric: str | None = None) -> list[dict[str, Any]]:
    """Tidy rows of proportions from (arm, question_type or ``metric``, n, k) counts, with Wilson bounds."""
    out = []
    for r in counts.iter_rows(named=True):
        n, k = r["n"], r["k"]
        lo, hi = wilson(k, n)
        out.append(
            {
                C.ARM: r[C.ARM],
                "metric": metric or r[C.QUESTION_TYPE],
                "n": n,
                "k": k,
                "rate": k / n,
                "wilson_lo": lo,
                "wilson_hi": hi,
                "mean_bytes": None,
            }
        )
    return out


def _rate_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "–"
    return f"{pct(r['rate'])} {ci(r['wilson_lo'], r['wilson_hi'])} (n={r['n']})"


def _held_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "–"
    return f"{pct(r['rate'])} {ci(r['wilson_lo'], r['wilson_hi'])} ({r['k']}/{r['n']})"


def _bytes_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "–"
    return f"{num(r['mean_bytes'])} B (n={r['n']})"


def subset_table(m: Metrics, subset: str) -> Table:
    """Arms x probes of one subset: accuracy % [Wilson 95% CI] (n) per question type (+ erasure artifacts)."""
    types = PROBE_TYPES[subset]
    metrics = [*types, *((ARTIFACT_MEAN, ARTIFACT_HELD) if subset == "erasure" else ())]
    notes = [
        "Cells: share of probes passed, % [Wilson 95% CI] (n = judged questions); '–' = the arm has no "
        "such question in this run (not 0). Rows with no verdict (correct null) are left out of n."
    ]
    notes += [MEANINGS[t] for t in metrics]
    title = f"Provenance probes: {subset}"
    empty = Table(
        table_name(subset),
        title,
        pl.DataFrame(schema=_TIDY),
        None,
        notes,
        keys=(C.ARM, "metric"),
        values=("rate", "mean_bytes"),
        section=SECTION,
    )
    rows = probe_rows(m).filter(pl.col(C.SUBSET) == subset)
    if rows.height == 0:
        notes.append(f"No {BENCHMARK} rows of subset {subset} in this run.")
        return empty
    unjudged = rows.filter(pl.col(C.CORRECT).is_null()).height
    judged = rows.filter(pl.col(C.CORRECT).is_not_null())
    counts = (
        judged.group_by(C.ARM, C.QUESTION_TYPE)
        .agg(n=pl.len().cast(pl.Int64), k=pl.col(C.CORRECT).cast(pl.Int64).sum())
        .sort(C.ARM, C.QUESTION_TYPE)
    )
    tidy = _rate_rows(counts)
    extra = sorted(set(counts[C.QUESTION_TYPE].to_list()) - set(types))
    if extra:
        metrics += extra
        notes.append(f"Question types this subset does not define (shown last): {', '.join(extra)}.")
    if unjudged:
        notes.append(f"{unjudged} question(s) without a verdict (correct null) are not counted.")
    if subset == "erasure":
        # artifact bytes are measured on the retained state, whatever the answer's verdict
        forget = rows.filter(
            pl.col(C.QUESTION_TYPE).is_in(FORGET_TYPES) & pl.col(C.ARTIFACT_BYTES).is_not_null()
        )
        per_arm = (
            forget.group_by(C.ARM)
            .agg(
                n=pl.len().cast(pl.Int64),
                k=(pl.col(C.ARTIFACT_BYTES) > 0).cast(pl.Int64).sum(),
                mean_bytes=pl.col(C.ARTIFACT_BYTES).cast(pl.Float64).mean(),
            )
            .sort(C.ARM)
        )
        tidy += [
            {
                C.ARM: r[C.ARM],
                "metric": ARTIFACT_MEAN,
                "n": r["n"],
                "k": None,
                "rate": None,
                "wilson_lo": None,
                "wilson_hi": None,
                "mean_bytes": r["mean_bytes"],
            }
            for r in per_arm.iter_rows(named=True)
        ]
        tidy += _rate_rows(per_arm.drop("mean_bytes"), ARTIFACT_HELD)
        if C.ARTIFACT_BYTES not in m.run.columns("results"):
            notes.append(f"results/ has no {C.ARTIFACT_BYTES} column: the artifact columns are not measured.")
    order = {t: i for i, t in enumerate(metrics)}
    data = (
        pl.DataFrame(tidy, schema=_TIDY)
        .with_columns(_o=pl.col("metric").replace_strict(order, default=len(order), return_dtype=pl.Int64))
        .sort("_o", C.ARM)
        .drop("_o")
        .select(pl.lit(subset).alias(C.SUBSET), *_TIDY)
    )
    index = {(r[C.ARM], r["metric"]): r for r in data.iter_rows(named=True)}
    footer = [BEFORE_AFTER[subset]]
    if subset == "merge" and (premise := merge_premise(data)) is not None:
        footer.append(premise)
    shown = []
    for a in order_arms(rows[C.ARM].unique().to_list()):
        line = {C.ARM: a}
        for t in metrics:
            cell = _bytes_cell if t == ARTIFACT_MEAN else _held_cell if t == ARTIFACT_HELD else _rate_cell
            line[LABELS.get(t, t)] = cell(index.get((a, t)))
        shown.append(line)
    return Table(
        empty.name,
        title,
        data,
        pl.DataFrame(shown),
        notes,
        keys=(C.ARM, "metric"),
        values=("rate", "mean_bytes"),
        section=SECTION,
        footer=footer,
    )


# -- paired tests ------------------------------------------------------------------------------------------

_PAIRED = {
    C.SUBSET: pl.String,
    C.QUESTION_TYPE: pl.String,
    "arm_a": pl.String,
    "arm_b": pl.String,
    "n": pl.Int64,
    "a_only": pl.Int64,
    "b_only": pl.Int64,
    "acc_a": pl.Float64,
    "acc_b": pl.Float64,
    "mcnemar_p": pl.Float64,
}


def probe_mcnemar_table(m: Metrics) -> Table:
    """Exact McNemar of pmem against pmem-paper and bitemporal on every post-event probe."""
    notes = [
        "Paired on the same questions (history_id, question_id) that both arms answered with a verdict. "
        "a only: questions the first arm passes and the second fails; b only: the reverse. McNemar: exact "
        "two-sided binomial test on those discordant counts. Baselines (before_*) are not tested."
    ]
    title = "Provenance probes: paired tests (exact McNemar)"
    empty = Table(
        "provenance_paired",
        title,
        pl.DataFrame(schema=_PAIRED),
        None,
        notes,
        keys=(C.SUBSET, C.QUESTION_TYPE, "arm_a", "arm_b"),
        values=("acc_a", "acc_b", "mcnemar_p"),
        section=SECTION,
    )
    rows = probe_rows(m)
    if rows.height == 0:
        return empty
    # several agent models label arms "arm@model": each pair is tested within one agent
    rows = rows.filter(pl.col(C.CORRECT).is_not_null()).with_columns(
        _base=pl.col(C.ARM).str.split(AGENT_SEP).list.first(),
        _agent=pl.col(C.ARM).str.split(AGENT_SEP).list.get(1, null_on_oob=True).fill_null(""),
    )
    present = set(probe_rows(m)[C.ARM].str.split(AGENT_SEP).list.first().to_list())
    post = rows.filter(~pl.col(C.QUESTION_TYPE).str.starts_with("before_"))
    out: list[dict[str, Any]] = []
    for ref, other in PAIRS:
        lacking = [a for a in (ref, other) if a not in present]
        if lacking:
            notes.append(f"{ref} vs {other}: skipped, no {BENCHMARK} rows for {' and '.join(lacking)}.")
            continue
        side = [C.HISTORY_ID, C.QUESTION_ID, "_agent"]
        a = post.filter(pl.col("_base") == ref).select(
            *side, C.SUBSET, C.QUESTION_TYPE, pl.col(C.ARM).alias("arm_a"), pl.col(C.CORRECT).alias("a")
        )
        b = post.filter(pl.col("_base") == other).select(
            *side, pl.col(C.ARM).alias("arm_b"), pl.col(C.CORRECT).alias("b")
        )
        agg = (
            a.join(b, on=side, how="inner")
            .group_by(C.SUBSET, C.QUESTION_TYPE, "arm_a", "arm_b")
            .agg(
                n=pl.len().cast(pl.Int64),
                a_only=(pl.col("a") & ~pl.col("b")).cast(pl.Int64).sum(),
                b_only=(~pl.col("a") & pl.col("b")).cast(pl.Int64).sum(),
                acc_a=pl.col("a").cast(pl.Float64).mean(),
                acc_b=pl.col("b").cast(pl.Float64).mean(),
            )
        )
        if agg.height == 0:
            notes.append(f"{ref} vs {other}: no post-event question answered by both.")
        out += [
            {**r, "mcnemar_p": mcnemar_exact(r["a_only"], r["b_only"])} for r in agg.iter_rows(named=True)
        ]
    if not out:
        return Table(empty.name, title, empty.data, None, notes, empty.keys, empty.values, SECTION)
    types = [t for ts in PROBE_TYPES.values() for t in ts]
    subsets = list(PROBE_TYPES)
    data = (
        pl.DataFrame(out, schema=_PAIRED)
        .with_columns(
            _s=pl.col(C.SUBSET).replace_strict(
                {s: i for i, s in enumerate(subsets)}, default=len(subsets), return_dtype=pl.Int64
            ),
            _t=pl.col(C.QUESTION_TYPE).replace_strict(
                {t: i for i, t in enumerate(types)}, default=len(types), return_dtype=pl.Int64
            ),
            _p=pl.col("arm_b")
            .str.split(AGENT_SEP)
            .list.first()
            .replace_strict({b: i for i, (_, b) in enumerate(PAIRS)}, return_dtype=pl.Int64),
        )
        .sort("_s", C.SUBSET, "_t", C.QUESTION_TYPE, "_p", "arm_a", "arm_b")
        .drop("_s", "_t", "_p")
    )

    def acc(x: float) -> str:
        return pct(x) if not math.isnan(x) else "–"

    shown = pl.DataFrame(
        [
            {
                C.SUBSET: r[C.SUBSET],
                "probe": LABELS.get(r[C.QUESTION_TYPE], r[C.QUESTION_TYPE]),
                "pair": f"{r['arm_a']} vs {r['arm_b']}",
                "n": r["n"],
                "a only / b only": f"{r['a_only']} / {r['b_only']}",
                "acc a / b %": f"{acc(r['acc_a'])} / {acc(r['acc_b'])}",
                "McNemar p": f"{r['mcnemar_p']:.3g}",
            }
            for r in data.iter_rows(named=True)
        ]
    )
    return Table(empty.name, title, data, shown, notes, empty.keys, empty.values, SECTION)


# -- cost --------------------------------------------------------------------------------------------------

_COST = {
    C.ARM: pl.String,
    "questions": pl.Int64,
    C.READ_TOKENS: pl.Float64,
    "histories": pl.Int64,
    "write_prompt_tokens_per_history": pl.Float64,
    "write_completion_tokens_per_history": pl.Float64,
    "write_tokens_per_history": pl.Float64,
    "write_call_tokens_per_history": pl.Float64,
}


def cost_table(m: Metrics) -> Table:
    """Read tokens per question and write-path tokens per completed history, per arm, on the probes only."""
    run = m.run
    notes = [
        f"Cost on {BENCHMARK} only, all subsets pooled. tokens/question: mean results.{C.READ_TOKENS} (context "
        f"shown to the reader). write tok/history: mean {C.WRITE_PROMPT_TOKENS} + {C.WRITE_COMPLETION_TOKENS} "
        "of histories/ (the arm's own count of its write path) over completed histories. write-call "
        "tok/history: prompt + completion tokens of write-purpose requests/ rows, counted as in the write-cost "
        "table, divided by the same histories (a cross-check from the request log)."
    ]
    empty = Table(
        "provenance_cost",
        "Provenance probes: cost per arm",
        pl.DataFrame(schema=_COST),
        None,
        notes,
        keys=(C.ARM,),
        values=(C.READ_TOKENS, "write_tokens_per_history"),
        section=SECTION,
    )
    rows = probe_rows(m)
    if rows.height == 0:
        return empty
    frame = rows.group_by(C.ARM).agg(
        questions=pl.len().cast(pl.Int64), read_tokens=pl.col(C.READ_TOKENS).mean()
    )
    st = history_status(run)
    hs = run.frame("histories")
    hcols = set(run.columns("histories"))
    tok_cols = (C.WRITE_PROMPT_TOKENS, C.WRITE_COMPLETION_TOKENS)
    if st is None or hs is None:
        notes.append("histories/ is missing (or lacks benchmark/subset): write tokens are not reported.")
    else:
        done = (
            st.filter((pl.col(C.BENCHMARK) == BENCHMARK) & (pl.col(C.STATUS) == "complete"))
            .select(C.HISTORY_ID, C.ARM)
            .collect()
        )
        frame = frame.join(done.group_by(C.ARM).agg(histories=pl.len().cast(pl.Int64)), on=C.ARM, how="left")
        if set(tok_cols) <= hcols:
            # one row per completed (history, arm), as history_status counts them: a retried history once
            per = (
                hs.filter(pl.col(C.STATUS) == "complete")
                .join(done.lazy(), on=[C.HISTORY_ID, C.ARM], how="semi")
                .unique([C.HISTORY_ID, C.ARM], keep="first", maintain_order=True)
                .group_by(C.ARM)
                .agg(
                    write_prompt_tokens_per_history=pl.col(C.WRITE_PROMPT_TOKENS).cast(pl.Float64).mean(),
                    write_completion_tokens_per_history=pl.col(C.WRITE_COMPLETION_TOKENS)
                    .cast(pl.Float64)
                    .mean(),
                    write_tokens_per_history=(
                        pl.col(C.WRITE_PROMPT_TOKENS) + pl.col(C.WRITE_COMPLETION_TOKENS)
                    )
                    .cast(pl.Float64)
                    .mean(),
                )
                .collect()
            )
            frame = frame.join(per, on=C.ARM, how="left")
        else:
            notes.append(
                f"histories/ has no {' / '.join(c for c in tok_cols if c not in hcols)} column: write tokens "
                "from histories/ are not reported (not zero)."
            )
    req, idx = cost_requests(run), history_index(run)
    if req is not None and idx is not None:
        keys = [C.BENCHMARK, C.SUBSET, C.ARM]
        sums = (
            request_sums(run, req, idx, keys)
            .filter(pl.col(C.BENCHMARK) == BENCHMARK)
            .group_by(C.ARM)
            .agg(_wt=(pl.col("write_prompt_tokens") + pl.col("write_completion_tokens")).sum())
            .collect()
        )
        frame = frame.join(sums, on=C.ARM, how="left")
        if "histories" in frame.columns:
            frame = frame.with_columns(
                write_call_tokens_per_history=pl.col("_wt").fill_null(0).cast(pl.Float64)
                / pl.col("histories")
            )
    else:
        notes.append("requests/ is missing: write-call tokens are not reported (not zero).")
    frame = frame.with_columns(
        [pl.lit(None, dtype=t).alias(c) for c, t in _COST.items() if c not in frame.columns]
    ).select([pl.col(c).cast(t) for c, t in _COST.items()])
    order = {a: i for i, a in enumerate(order_arms(frame[C.ARM].to_list()))}
    data = frame.sort(pl.col(C.ARM).replace_strict(order, return_dtype=pl.Int64))

    def tok(x: float | None) -> str:
        return num(x) if x is not None else "missing"

    shown = pl.DataFrame(
        [
            {
                C.ARM: r[C.ARM],
                "questions": r["questions"],
                "read tok/question": tok(r[C.READ_TOKENS]),
                "histories": str(r["histories"]) if r["histories"] is not None else "missing",
                "write tok/history": tok(r["write_tokens_per_history"]),
                "write prompt / compl.": (
                    f"{tok(r['write_prompt_tokens_per_history'])} / {tok(r['write_completion_tokens_per_history'])}"
                ),
                "write-call tok/history (requests/)": tok(r["write_call_tokens_per_history"]),
            }
            for r in data.iter_rows(named=True)
        ]
    )
    return Table(empty.name, empty.title, data, shown, notes, empty.keys, empty.values, SECTION)


def probe_tables(m: Metrics) -> dict[str, Table]:
    """Every table of the section, by name (empty tables when the run has no probe rows)."""
    out = {table_name(s): subset_table(m, s) for s in PROBE_TYPES}
    out["provenance_paired"] = probe_mcnemar_table(m)
    out["provenance_cost"] = cost_table(m)
    return out
