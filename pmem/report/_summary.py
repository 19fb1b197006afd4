"""The report's opening: per benchmark in the run, the comparison the paper makes, in a sentence or two
with the numbers and their 95% intervals.

Every number is read from a table the run's metrics already hold (Table 6, 8 and 7 views, the conflict
probe, the provenance-probes tables and paired tests) or summarized with the same counts and intervals
(:func:`pmem.report._counts.summarize`: Wilson, and the history-clustered bootstrap where a history holds
several questions). Nothing here is a published or expected figure. The comparisons follow the paper
(docs/report.md): the reference arm (``pmem`` unless ``--reference`` says otherwise) against the others
at the longest revision chain (accuracy and stale rate), at the longest retraction distance (recovery),
in the conflict probe, on FactConsolidation per arm at the longest stream, and on the provenance probes
against ``pmem-paper`` (and the other paired arms), with an exact McNemar test on the same questions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pmem.report._base import Metrics, length_order, order_arms
from pmem.report._counts import summarize
from pmem.report._coverage import STATUS_KINDS, status_kind
from pmem.report._judge import judge_validation
from pmem.report._load import AGENT_SEP
from pmem.report._locomo import primary_slice
from pmem.report._probes import BENCHMARK as PROBES
from pmem.report._probes import PAIRS, PROBE_TYPES, post_event
from pmem.report._stats import mcnemar_exact
from pmem.report._table import Table, ci, pct
from pmem.rundir import columns as C

SECTION = "summary"
#: benchmark → (display name, the report section holding its tables)
BENCHMARK_SECTIONS = {
    "alfworld-revision": ("ALFWorld-Revision", "alfworld"),
    "factconsolidation": ("FactConsolidation", "factconsolidation"),
    PROBES: ("Provenance probes", "provenance"),
    "locomo": ("LoCoMo", "locomo"),
    "longmemeval": ("LongMemEval", "accuracy"),
}
#: how the summary's intervals read (shown under it)
INTERVALS_NOTE = (
    "Brackets: 95% Wilson score interval; 'boot [..]': 95% history-clustered bootstrap interval, shown "
    "instead where a history contributes several questions to a number and the bootstrap is the wider. "
    "n = questions (committed cases for retraction)."
)
_TIDY = {
    C.BENCHMARK: pl.String,
    "comparison": pl.String,
    C.ARM: pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "lo": pl.Float64,
    "hi": pl.Float64,
    "interval": pl.String,
    "k": pl.Int64,
    "n": pl.Int64,
}


@dataclass
class _Headlines:
    """The sentences of one benchmark and the numbers they quote (tidy rows for the CSV)."""

    benchmark: str
    sentences: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def number(
        self,
        comparison: str,
        arm: str,
        metric: str,
        value: float | None,
        lo: float | None,
        hi: float | None,
        interval: str,
        k: int | None = None,
        n: int | None = None,
    ) -> str:
        """Record one number; its text: ``61.0% [51.2, 70.0]`` (``boot [..]`` for a bootstrap interval)."""
        self.rows.append(
            {
                C.BENCHMARK: self.benchmark,
                "comparison": comparison,
                C.ARM: arm,
                "metric": metric,
                "value": value,
                "lo": lo,
                "hi": hi,
                "interval": interval,
                "k": k,
                "n": n,
            }
        )
        return f"{pct(value)}% {'boot ' if interval == 'bootstrap' else ''}{ci(lo, hi)}".rstrip()


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(x)


def _interval(r: dict[str, Any], pre: str, n_col: str) -> tuple[float | None, float | None, str]:
    """The interval of a summarized cell: Wilson, or the history-clustered bootstrap where histories hold
    several of its questions and the bootstrap is the wider of the two (a percentile bootstrap collapses
    to a point at 0 or 100 %, where Wilson does not)."""
    w_lo, w_hi = r.get(f"{pre}_wilson_lo"), r.get(f"{pre}_wilson_hi")
    b_lo, b_hi = r.get(f"{pre}_boot_lo"), r.get(f"{pre}_boot_hi")
    clustered = r.get("histories", 0) < (r.get(n_col) or 0)
    if clustered and _finite(b_lo) and _finite(b_hi) and _finite(w_lo) and _finite(w_hi):
        assert b_lo is not None and b_hi is not None and w_lo is not None and w_hi is not None
        if b_hi - b_lo > w_hi - w_lo:
            return b_lo, b_hi, "bootstrap"
    return w_lo, w_hi, "Wilson"


def _acc(h: _Headlines, comparison: str, r: dict[str, Any], metric: str = "accuracy") -> str:
    lo, hi, kind = _interval(r, "acc", "n")
    return h.number(comparison, r[C.ARM], metric, r["accuracy"], lo, hi, kind, r.get(C.CORRECT), r["n"])


def _stale(h: _Headlines, comparison: str, r: dict[str, Any]) -> str:
    lo, hi, kind = _interval(r, "stale", "stale_n")
    return h.number(
        comparison, r[C.ARM], "stale_rate", r["stale_rate"], lo, hi, kind, r["stale_k"], r["stale_n"]
    )


def _lead(arms: Sequence[str], reference: str) -> str:
    """The arm the others are compared with: the reference (first agent model of it), else the first arm.
    Every caller has rows, so ``arms`` is never empty."""
    ref = [a for a in arms if a.split(AGENT_SEP, 1)[0] == reference]
    return ref[0] if ref else arms[0]


def _versus(lead: str, lead_text: str, others: list[str], text: Callable[[str], str]) -> str:
    if not others:
        return f"{lead} {lead_text}"
    return f"{lead} {lead_text} vs " + ", ".join(f"{a} {text(a)}" for a in others)


def _by_arm(df: pl.DataFrame) -> dict[str, dict[str, Any]]:
    return {r[C.ARM]: r for r in df.iter_rows(named=True)}


# -- ALFWorld-Revision --------------------------------------------------------------------------------------


def _chains(m: Metrics, h: _Headlines, reference: str) -> None:
    t6 = m.tables["table6_chains"].data
    if t6.height == 0:
        return
    longest = max(t6[C.L].drop_nulls().to_list())
    rows = _by_arm(t6.filter(pl.col(C.L) == longest))
    arms = order_arms(rows)
    lead = _lead(arms, reference)
    others = [a for a in arms if a != lead]
    comp = f"chains L={longest}"
    acc = {a: _acc(h, comp, rows[a]) for a in arms}
    text = (
        f"Revision chains at L={longest} (the longest in this run), current-value accuracy: "
        + _versus(lead, f"{acc[lead]} (n={rows[lead]['n']})", others, lambda a: acc[a])
        + "."
    )
    staled = [a for a in arms if (rows[a].get("stale_n") or 0) > 0]
    if lead in staled:
        st = {a: _stale(h, comp, rows[a]) for a in staled}
        text += (
            " Stale answers (an earlier location): "
            + _versus(lead, st[lead], [a for a in staled if a != lead], lambda a: st[a])
            + "."
        )
    h.sentences.append(text)


def _retraction(m: Metrics, h: _Headlines, reference: str) -> None:
    t8 = m.tables["table8_retraction"].data
    if t8.height == 0:
        return
    far = max(t8[C.D].drop_nulls().to_list())
    rows = _by_arm(t8.filter(pl.col(C.D) == far))
    arms = order_arms(rows)
    lead = _lead(arms, reference)
    comp = f"retraction d={far}"

    def rec(a: str) -> str:
        r = rows[a]
        if not r["committed"]:
            return f"no committed case (of {r['cases']})"
        return h.number(
            comp,
            a,
            "recovered",
            r["recovered"],
            r["recovered_wilson_lo"],
            r["recovered_wilson_hi"],
            "Wilson",
            r["recovered_n"],
            r["committed"],
        )

    lead_text = rec(lead)
    if rows[lead]["committed"]:
        lead_text += f" of {rows[lead]['committed']} committed cases"
    ds = sorted(t8[C.D].drop_nulls().unique().to_list())
    at = f"d={far}" + (
        f" (the longest distance; {', '.join(f'd={d}' for d in ds if d != far)} in the table)"
        if len(ds) > 1
        else ""
    )
    h.sentences.append(
        f"After a retraction at {at}, the retracted value's predecessor is recovered by "
        + _versus(lead, lead_text, [a for a in arms if a != lead], rec)
        + "."
    )


def _conflict(m: Metrics, h: _Headlines, reference: str) -> None:
    cp = m.tables["conflict_probe"].data
    if cp.height == 0:
        return
    parts = []
    for qtype, what in (
        ("before_settle", "while two reports conflict, surfacing the conflict"),
        ("after_settle", "once a later event settles it, the settled value"),
    ):
        rows = _by_arm(cp.filter(pl.col(C.QUESTION_TYPE) == qtype))
        if not rows:
            continue
        arms = order_arms(rows)
        lead = _lead(arms, reference)
        acc = {a: _acc(h, f"conflict {qtype}", rows[a]) for a in arms}
        parts.append(f"{what}: " + _versus(lead, acc[lead], [a for a in arms if a != lead], acc.__getitem__))
    if parts:
        h.sentences.append("Conflict probe, " + "; ".join(parts) + ".")


# -- FactConsolidation ----------------------------------------------------------------------------------------


def _factconsolidation(m: Metrics, h: _Headlines, reference: str) -> None:
    t7 = m.tables["table7_factconsolidation"].data
    if t7.height == 0:
        return
    longest = max(t7[C.LENGTH].drop_nulls().unique().to_list(), key=length_order)
    at = t7.filter(pl.col(C.LENGTH) == longest)
    sh, mh = _by_arm(at.filter(pl.col("hop") == "sh")), _by_arm(at.filter(pl.col("hop") == "mh"))
    lengths = t7[C.LENGTH].unique().to_list()
    where = f"at {longest}" + (" (the longest stream in this run)" if len(lengths) > 1 else "")
    if sh:
        arms = order_arms(sh)
        lead = _lead(arms, reference)
        acc = {a: _acc(h, f"sh {longest}", sh[a]) for a in arms}
        h.sentences.append(
            f"Single-hop accuracy {where}: "
            + _versus(
                lead, f"{acc[lead]} (n={sh[lead]['n']})", [a for a in arms if a != lead], lambda a: acc[a]
            )
            + "."
        )
        staled = [a for a in arms if (sh[a].get("stale_n") or 0) > 0]
        if lead in staled:
            st = {a: _stale(h, f"sh {longest}", sh[a]) for a in staled}
            worst = max((a for a in staled if a != lead), key=lambda a: sh[a]["stale_rate"], default=None)
            text = (
                f"Stale answers on identifiable update chains: {lead} {st[lead]} "
                f"({sh[lead]['stale_k']}/{sh[lead]['stale_n']})"
            )
            if worst is not None:
                text += f", the highest other arm {worst} {st[worst]} ({sh[worst]['stale_k']}/{sh[worst]['stale_n']})"
            if mh:
                marms = order_arms(mh)
                mlead = _lead(marms, reference)
                best = max((a for a in marms if a != mlead), key=lambda a: mh[a]["accuracy"], default=None)
                text += f"; multi-hop accuracy {mlead} {_acc(h, f'mh {longest}', mh[mlead])}"
                if best is not None:
                    text += f", the best other arm {best} {_acc(h, f'mh {longest}', mh[best])}"
            h.sentences.append(text + ".")


# -- provenance probes ------------------------------------------------------------------------------------


def _probes(m: Metrics, h: _Headlines, reference: str) -> None:
    hist = m.hist.filter(pl.col(C.BENCHMARK) == PROBES) if m.hist.height else m.hist
    if hist.height == 0:
        return
    after = [t for types in PROBE_TYPES.values() for t in types if post_event(t)]
    hist = hist.filter(pl.col(C.QUESTION_TYPE).is_in(after) & pl.col(C.SUBSET).is_in(list(PROBE_TYPES)))
    if hist.height == 0:
        return
    pooled = _by_arm(
        summarize(
            hist.group_by(C.ARM, C.HISTORY_ID).agg(
                pl.col("n", "k", "sn", "sk", "tok", "chars", "tok_n").sum()
            ),
            [C.ARM],
        )
    )
    arms = order_arms(pooled)
    lead = _lead(arms, reference)
    base = lead.split(AGENT_SEP, 1)[0]
    partners = [b for a, b in PAIRS if a == base]
    others = [a for a in arms if a != lead and a.split(AGENT_SEP, 1)[0] in partners] or [
        a for a in arms if a != lead
    ]
    acc = {a: _acc(h, "post-event probes pooled", pooled[a], "pass_rate") for a in [lead, *others]}
    paired = m.tables["provenance_paired"].data
    tests = []
    for a in others:
        p = paired.filter((pl.col("arm_a") == lead) & (pl.col("arm_b") == a)) if paired.height else paired
        if p.height:
            a_only, b_only = int(p["a_only"].sum()), int(p["b_only"].sum())
            tests.append(
                f"{lead} vs {a}: {a_only} to {b_only} discordant of {int(p['n'].sum())}, "
                f"p = {mcnemar_exact(a_only, b_only):.2g}"
            )
    text = (
        "Every post-event probe pooled (subsets "
        + ", ".join(s for s in PROBE_TYPES if s in set(hist[C.SUBSET].to_list()))
        + "): "
        + _versus(lead, f"{acc[lead]} (n={pooled[lead]['n']})", others, lambda a: acc[a])
        + " pass"
    )
    if tests:
        text += " (exact McNemar on the same questions: " + "; ".join(tests) + ")"
    h.sentences.append(text + ".")
    per = summarize(hist, [C.SUBSET, C.ARM])
    duo = [lead, *others[:1]]
    parts = []
    for subset in PROBE_TYPES:
        rows = _by_arm(per.filter(pl.col(C.SUBSET) == subset))
        if any(a in rows for a in duo):
            cells = [_acc(h, f"{subset} post-event", rows[a], "pass_rate") if a in rows else "–" for a in duo]
            parts.append(f"{subset} {' vs '.join(cells)}")
    if parts and len(duo) > 1:
        h.sentences.append(f"Per subset, {' vs '.join(duo)}: " + "; ".join(parts) + ".")


# -- LoCoMo ---------------------------------------------------------------------------------------------


def _locomo(m: Metrics, h: _Headlines, reference: str) -> None:
    """Per LoCoMo slice: F1 over categories 1-4 per arm (LoCoMo's metric) and J where judged, each with its
    paired test against the lead arm; whether the judge was measured on the calibration set; adversarial
    abstention apart."""
    table = m.tables["locomo"].data
    if table.height == 0:
        return
    slices = sorted(table["slice"].unique().to_list(), key=lambda sl: sl != primary_slice(table))
    for sl in slices:
        _locomo_slice(m, h, reference, sl, several=len(slices) > 1)
    _locomo_adversarial(m, h, reference)


def _locomo_adversarial(m: Metrics, h: _Headlines, reference: str) -> None:
    data = m.tables["locomo_adversarial"].data
    main = primary_slice(m.tables["locomo"].data)
    if data.height and main is not None:
        data = data.filter(pl.col("slice") == main)
    adv = _by_arm(data.filter(pl.col("n") > 0) if data.height else data)
    lead = _lead(order_arms(adv), reference) if adv else reference
    if lead in adv:
        r = adv[lead]
        text = h.number(
            "adversarial",
            lead,
            "abstained",
            r["abstained"],
            r["abstained_wilson_lo"],
            r["abstained_wilson_hi"],
            "Wilson",
            r["abstained_k"],
            r["n"],
        )
        h.sentences.append(f"Adversarial questions, abstained (scored apart): {lead} {text} (n={r['n']}).")


def _locomo_slice(m: Metrics, h: _Headlines, reference: str, sl: str, *, several: bool) -> None:
    table, paired = m.tables["locomo"].data, m.tables["locomo_f1_paired"].data
    rows = _by_arm(table.filter((pl.col("category") == "overall 1-4") & (pl.col("slice") == sl)))
    arms = order_arms(rows)
    lead = _lead(arms, reference)
    where = f"overall 1-4, {sl}" if several else "overall 1-4"
    label = f" ({sl})" if several else ""

    def score(a: str, metric: str, n_col: str) -> str:
        r = rows[a]
        lo = hi = None
        if metric == "j":
            lo, hi = r["j_wilson_lo"], r["j_wilson_hi"]
        h.number(where, a, metric, r[metric], lo, hi, "Wilson" if metric == "j" else "none", n=r[n_col])
        return f"{100 * r[metric]:.1f}" + (f"% {ci(lo, hi)}" if metric == "j" else "")

    tested = paired.height > 0 and lead == reference

    def test(a: str, column: str) -> str:
        if not tested:
            return ""
        p = paired.filter(
            (pl.col("slice") == sl) & (pl.col("category") == "overall 1-4") & (pl.col("arm_b") == a)
        )
        return f" (p = {p[column][0]:.2g})" if p.height and p[column][0] is not None else ""

    with_f1 = [a for a in arms if rows[a]["f1"] is not None]
    if lead in with_f1:
        f1 = {a: score(a, "f1", "n") + test(a, "p_wilcoxon") for a in with_f1}
        h.sentences.append(
            f"F1 over categories 1-4{label} (LoCoMo's official scorer, x100"
            + (f"; p: paired Wilcoxon against {lead}" if tested else "")
            + "): "
            + _versus(
                lead,
                f"{f1[lead]} (n={rows[lead]['n']})",
                [a for a in with_f1 if a != lead],
                f1.__getitem__,
            )
            + "."
        )
    judged = [a for a in arms if rows[a]["judged"]]
    if lead in judged:
        j = {a: score(a, "j", "judged") + test(a, "p_mcnemar") for a in judged}
        validation = judge_validation(m)
        if validation is None:
            trust = "the judge was not measured on the calibration set: these are not evidence"
        else:
            trust = (
                f"the judge accepts {validation['wrong_accepted']}/{validation['wrong_n']} wrong and "
                f"{validation['right_accepted']}/{validation['right_n']} right answers of the calibration set"
                + ("" if validation["all_kinds_meet"] else "; it misses a kind's target: see its table")
            )
        h.sentences.append(
            f"LLM-judge accuracy (J) over categories 1-4{label} ({trust}"
            + (f"; p: paired McNemar against {lead}" if tested else "")
            + "): "
            + _versus(lead, j[lead], [a for a in judged if a != lead], j.__getitem__)
            + "."
        )


# -- any other benchmark ------------------------------------------------------------------------------------


def _overall(m: Metrics, h: _Headlines, reference: str, benchmark: str) -> None:
    hist = m.hist.filter(pl.col(C.BENCHMARK) == benchmark)
    if hist.height == 0:
        return
    per = hist.group_by(C.ARM, C.HISTORY_ID).agg(pl.col("n", "k", "sn", "sk", "tok", "chars", "tok_n").sum())
    rows = _by_arm(summarize(per, [C.ARM]))
    arms = order_arms(rows)
    lead = _lead(arms, reference)
    acc = {a: _acc(h, "all questions", rows[a]) for a in arms}
    text = "Accuracy over all questions: " + _versus(
        lead, f"{acc[lead]} (n={rows[lead]['n']})", [a for a in arms if a != lead], lambda a: acc[a]
    )
    if (rows[lead].get("stale_n") or 0) > 0:
        text += f"; stale rate {lead} {_stale(h, 'all questions', rows[lead])} ({rows[lead]['stale_k']}/{rows[lead]['stale_n']})"
    h.sentences.append(text + ".")


def _coverage(m: Metrics) -> str:
    """How much of what the config asks for the run holds, in a few words (details: Run coverage)."""
    cov = m.tables["coverage"].data
    if cov.height == 0:
        return "the config asks for no cell."
    kinds = [status_kind(x) for x in cov["status"].to_list()]
    short = [k for k in STATUS_KINDS if k in kinds]
    if not short:
        return f"every one of the {cov.height} (benchmark, subset, arm) cells holds all its histories."
    counts = ", ".join(f"{kinds.count(k)} {k}" for k in short)
    return f"{kinds.count('ok')} of {cov.height} cells complete; {counts} (which ones: Run coverage)."


# -- the table ------------------------------------------------------------------------------------------------


def benchmark_label(benchmark: str) -> tuple[str, str]:
    """(display name, section anchor) of a benchmark's headline."""
    return BENCHMARK_SECTIONS.get(benchmark, (benchmark, "accuracy"))


def summary_table(m: Metrics, reference: str = "pmem") -> Table:
    """One row per benchmark in the run: its headline sentences (display) and the numbers they quote (CSV)."""
    present = sorted(
        set(m.accuracy[C.BENCHMARK].drop_nulls().to_list()) if m.accuracy.height else set(),
        key=lambda b: (
            list(BENCHMARK_SECTIONS).index(b) if b in BENCHMARK_SECTIONS else len(BENCHMARK_SECTIONS),
            b,
        ),
    )
    shown, tidy = [], []
    for b in present:
        h = _Headlines(b)
        if b == "alfworld-revision":
            _chains(m, h, reference)
            _retraction(m, h, reference)
            _conflict(m, h, reference)
        elif b == "factconsolidation":
            _factconsolidation(m, h, reference)
        elif b == PROBES:
            _probes(m, h, reference)
        elif b == "locomo":
            _locomo(m, h, reference)
        if not h.sentences:
            _overall(m, h, reference, b)
        name, section = benchmark_label(b)
        shown += [{C.BENCHMARK: name, "section": section, "summary": x} for x in h.sentences]
        tidy += h.rows
    shown.append({C.BENCHMARK: "Run coverage", "section": "coverage", "summary": _coverage(m)})
    return Table(
        "summary",
        "Summary",
        pl.DataFrame(tidy, schema=_TIDY),
        pl.DataFrame(shown, schema={C.BENCHMARK: pl.String, "section": pl.String, "summary": pl.String}),
        [INTERVALS_NOTE],
        keys=(C.BENCHMARK, "comparison", C.ARM, "metric"),
        values=("value",),
        section=SECTION,
    )
