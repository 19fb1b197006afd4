"""Figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import matplotlib

from pmem.report._base import length_order, order_arms
from pmem.report._probes import LABELS, PROBE_TYPES, post_event, table_name

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from PIL import Image

from pmem.report._palette import ArmStyle, arm_styles
from pmem.rundir import columns as C

if TYPE_CHECKING:
    from pmem.report._base import Metrics

#: horizontal offset between neighbouring arms on a line plot, in octaves of a log2 axis (chains) or in
#: category units (stream lengths): arms with equal values (several at 100 %) stay visible side by side
DODGE_OCTAVES = 0.09
DODGE_UNITS = 0.06


def _arm_style(arms: list[str]) -> dict[str, ArmStyle]:
    """One colour, marker and line style per arm, the same in every figure (:mod:`pmem.report._palette`)."""
    return arm_styles(arms)


def _dodge(i: int, n: int, step: float) -> float:
    """Offset of the ``i``-th of ``n`` series, centred on 0."""
    return (i - (n - 1) / 2) * step


def _plain_number(x: float, _pos: object = None) -> str:
    """A tick label without exponents: 30, 150, 1.5k, 20k, 1M."""
    if x <= 0:
        return ""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:g}{suffix}"
    return f"{x:g}"


_NICE = (1.0, 2.0, 5.0)


def _nice_floor(x: float) -> float:
    e = math.floor(math.log10(x))
    return max(m * 10**e for m in (*_NICE, 10.0) if m * 10**e <= x * (1 + 1e-9))


def _nice_ceil(x: float) -> float:
    e = math.floor(math.log10(x))
    return min(m * 10**e for m in (*_NICE, 10.0) if m * 10**e >= x * (1 - 1e-9))


def log_axis(ax: Any, lo: float, hi: float) -> None:
    """A base-10 log x axis over [lo, hi] with a few plain labels (30, 100, 1.5k) that never collide.

    The limits are widened to the neighbouring 1-2-5 values, so even data within one decade gets at
    least two labelled ticks; minor ticks are drawn without labels (the ``3×10¹4×10¹`` pile-up)."""
    lo, hi = _nice_floor(lo / 1.15), _nice_ceil(hi * 1.15)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    decades = math.log10(hi / lo)
    subs = (1.0, 2.0, 5.0) if decades <= 2.2 else (1.0, 3.0) if decades <= 3.5 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.xaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10)), numticks=40))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _err(df: pl.DataFrame, val: str, lo: str, hi: str) -> list[list[float]]:
    v, lo_, hi_ = (df[c].fill_null(float("nan")).to_numpy() * 100 for c in (val, lo, hi))
    # Wilson bounds can sit a rounding error inside p = 0 or 1; matplotlib rejects negative lengths
    return [list(np.clip(v - lo_, 0, None)), list(np.clip(hi_ - v, 0, None))]


def _png(fig: plt.Figure) -> bytes:
    # rendered in memory: the report's writer puts the bytes on disk with the other files, all or nothing
    fig.tight_layout(rect=(0, 0, 0.86, 1) if fig.legends else (0, 0, 1, 1))
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    # a 256-colour palette PNG: the same picture (flat colours, antialiased edges) at about a third of the
    # bytes, which report.html embeds as base64
    with Image.open(io.BytesIO(buf.getvalue())) as im:
        pal = im.convert("RGB").quantize(
            colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
    out = io.BytesIO()
    pal.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _arm_legend(fig: plt.Figure, axes: Any, arms: list[str]) -> None:
    """One legend for a row of panels: each arm once, in display order."""
    handles, labels = [], []
    for ax in axes:
        for h, lbl in zip(*ax.get_legend_handles_labels(), strict=True):
            if lbl not in labels:
                handles.append(h)
                labels.append(lbl)
    order = sorted(range(len(labels)), key=lambda i: arms.index(labels[i]))
    fig.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=7, loc="center right")


def _title(m: Metrics, text: str) -> str:
    return f"{text}\nagent: {m.run.agent_label} · run {m.run.run_id}"


def plot_all(m: Metrics) -> dict[str, bytes]:
    """Every figure of the report as PNG bytes, by name."""
    figs: dict[str, bytes] = {}

    t6 = m.tables["table6_chains"].data
    if t6.height:
        arms = order_arms(t6[C.ARM].to_list())
        style = _arm_style(arms)
        fig, ax = plt.subplots(figsize=(8, 4.2))
        for i, a in enumerate(arms):
            d = t6.filter(pl.col(C.ARM) == a).sort(C.L)
            # dodged in octaves: arms that share a value (several at 100 %) sit side by side, not on top
            x = [v * 2 ** _dodge(i, len(arms), DODGE_OCTAVES) for v in d[C.L].to_list()]
            ax.errorbar(
                x,
                d["accuracy"] * 100,
                yerr=_err(d, "accuracy", "acc_wilson_lo", "acc_wilson_hi"),
                label=a,
                capsize=3,
                **style[a].line(),
            )
        ax.set_xscale("log", base=2)
        ls = sorted(t6[C.L].unique().to_list())
        ax.set_xticks(ls, [str(x) for x in ls])
        ax.set_xticks([], minor=True)
        ax.set_xlabel("revisions per fact (L); arms offset sideways so that equal values stay visible")
        ax.set_ylabel("current-value accuracy (%)")
        ax.set_ylim(-3, 105)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(_title(m, "ALFWorld-Revision chains (Table 6 view), Wilson 95% CI"), fontsize=9)
        _arm_legend(fig, [ax], arms)
        figs["table6_chains"] = _png(fig)

    t8 = m.tables["table8_retraction"].data
    if t8.height:
        arms = order_arms(t8[C.ARM].to_list())
        ds = sorted(t8[C.D].unique().to_list())
        fig, ax = plt.subplots(figsize=(7, 4.2))
        width = 0.8 / max(1, len(ds))
        for j, d in enumerate(ds):
            sub = {r[C.ARM]: r for r in t8.filter(pl.col(C.D) == d).iter_rows(named=True)}
            xs = [i + (j - (len(ds) - 1) / 2) * width for i in range(len(arms))]
            vals = [100 * (sub[a]["recovered"] or 0) if a in sub and sub[a]["committed"] else 0 for a in arms]
            lo = [
                max(0.0, v - 100 * sub[a]["recovered_wilson_lo"]) if a in sub and sub[a]["committed"] else 0
                for a, v in zip(arms, vals, strict=True)
            ]
            hi = [
                max(0.0, 100 * sub[a]["recovered_wilson_hi"] - v) if a in sub and sub[a]["committed"] else 0
                for a, v in zip(arms, vals, strict=True)
            ]
            ax.bar(xs, vals, width=width, yerr=[lo, hi], capsize=3, label=f"d={d}")
        _percent_bars_by_arm(
            ax,
            arms,
            "recovered after retraction (%)\nover committed cases",
            _title(m, "Retraction recovery per arm and distance (Table 8 view)"),
        )
        figs["table8_retraction"] = _png(fig)

    t7 = m.tables["table7_factconsolidation"].data
    if t7.height:
        arms = order_arms(t7[C.ARM].to_list())
        style = _arm_style(arms)
        lengths = sorted(t7[C.LENGTH].unique().to_list(), key=length_order)
        pos = {ln: i for i, ln in enumerate(lengths)}
        # one stream length: arms along x (lines over lengths would all sit on one x and hide each other)
        by_arm = len(lengths) == 1
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.6))
        panels = (
            ("sh", "accuracy", "acc", "single-hop accuracy (%)"),
            ("mh", "accuracy", "acc", "multi-hop accuracy (%)"),
            ("sh", "stale_rate", "stale", "single-hop stale rate (%)"),
        )
        for ax, (hop, col, pre, label) in zip(axes, panels, strict=True):
            for i, a in enumerate(arms):
                d = t7.filter((pl.col(C.ARM) == a) & (pl.col("hop") == hop))
                if col == "stale_rate":
                    d = d.filter(pl.col("stale_n") > 0)
                if d.height == 0:
                    continue
                d = d.with_columns(_x=pl.col(C.LENGTH).replace_strict(pos, return_dtype=pl.Int64)).sort("_x")
                shift = _dodge(i, len(arms), DODGE_UNITS)
                xs = [arms.index(a)] * d.height if by_arm else [x + shift for x in d["_x"].to_list()]
                ax.errorbar(
                    xs,
                    d[col] * 100,
                    yerr=_err(d, col, f"{pre}_wilson_lo", f"{pre}_wilson_hi"),
                    label=a,
                    capsize=3,
                    **{**style[a].line(), **({"linestyle": "none"} if by_arm else {})},
                )
            if by_arm:
                ax.set_xticks(range(len(arms)), arms, rotation=60, ha="right", fontsize=7)
                ax.set_xlabel(f"arm (stream length {lengths[0]})")
            else:
                ax.set_xticks(range(len(lengths)), lengths)
                ax.set_xlabel("stream length")
            ax.set_ylabel(label)
            ax.set_ylim(-3, 103)
        if not by_arm:
            _arm_legend(fig, axes, arms)
        fig.suptitle(_title(m, "FactConsolidation (Table 7 view), Wilson 95% CI"), fontsize=9)
        figs["table7_factconsolidation"] = _png(fig)

    rc = m.tables["read_cost"].data
    if rc.height and rc[C.READ_TOKENS].drop_nulls().len():
        benches = rc[C.BENCHMARK].unique().sort().to_list()
        arms = order_arms(rc[C.ARM].to_list())
        style = _arm_style(arms)
        fig, axes = plt.subplots(1, len(benches), figsize=(5.5 * len(benches), 4.2), squeeze=False)
        for ax, b in zip(axes[0], benches, strict=True):
            d = rc.filter(
                (pl.col(C.BENCHMARK) == b) & pl.col(C.READ_TOKENS).is_not_null() & (pl.col(C.READ_TOKENS) > 0)
            )
            zero = sorted(
                set(rc.filter((pl.col(C.BENCHMARK) == b) & (pl.col(C.READ_TOKENS) <= 0))[C.ARM].to_list())
            )
            for a in arms:
                da = d.filter(pl.col(C.ARM) == a)
                if da.height:
                    ax.plot(
                        da[C.READ_TOKENS],
                        da["accuracy"] * 100,
                        label=a,
                        **{**style[a].line(), "linestyle": "none", "alpha": 0.9},
                    )
            if d.height:
                tokens = d[C.READ_TOKENS].cast(pl.Float64).to_numpy()
                log_axis(ax, float(tokens.min()), float(tokens.max()))
            ax.set_xlabel("context tokens per query (log)")
            ax.set_ylabel("accuracy (%)")
            ax.set_ylim(-3, 103)
            ax.set_title(
                f"{b} (one point per subset)"
                + (f"\nnot on the log axis (0 tokens): {', '.join(zero)}" if zero else ""),
                fontsize=8,
            )
        _arm_legend(fig, axes[0], arms)
        fig.subplots_adjust(right=0.85)
        fig.suptitle(_title(m, "Accuracy vs read tokens (Table 5 style)"), fontsize=9)
        figs["accuracy_vs_read_tokens"] = _png(fig)

    cp = m.tables["conflict_probe"].data
    if cp.height:
        arms = order_arms(cp[C.ARM].to_list())
        qts = sorted(cp[C.QUESTION_TYPE].unique().to_list(), reverse=True)
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / len(qts)
        for j, q in enumerate(qts):
            sub = {r[C.ARM]: r for r in cp.filter(pl.col(C.QUESTION_TYPE) == q).iter_rows(named=True)}
            xs = [i + (j - (len(qts) - 1) / 2) * width for i in range(len(arms))]
            accuracy: list[float] = [100 * sub[a]["accuracy"] if a in sub else 0.0 for a in arms]
            # Wilson intervals as on every other chart: a bar at 0 then shows as a measured 0, not a gap
            lo = [
                max(0.0, v - 100 * sub[a]["acc_wilson_lo"]) if a in sub else 0.0
                for a, v in zip(arms, accuracy, strict=True)
            ]
            hi = [
                max(0.0, 100 * sub[a]["acc_wilson_hi"] - v) if a in sub else 0.0
                for a, v in zip(arms, accuracy, strict=True)
            ]
            ax.bar(xs, accuracy, width=width, yerr=[lo, hi], capsize=3, label=q)
        _percent_bars_by_arm(ax, arms, "accuracy (%)", _title(m, "Conflict probe: before / after settling"))
        figs["conflict_probe"] = _png(fig)

    probes = _probe_figure(m)
    if probes is not None:
        figs["provenance_probes"] = probes
    return figs


def _probe_figure(m: Metrics) -> bytes | None:
    """One panel per provenance-probes subset: each arm's pass rate on the post-event probes, Wilson bars."""

    panels = []
    for subset, types in PROBE_TYPES.items():
        t = m.tables.get(table_name(subset))
        metrics = [q for q in types if post_event(q)]
        d = t.data.filter(pl.col("metric").is_in(metrics)) if t is not None else pl.DataFrame()
        if d.height:
            panels.append((subset, metrics, d))
    if not panels:
        return None
    arms = order_arms([a for _, _, d in panels for a in d[C.ARM].to_list()])
    style = _arm_style(arms)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(1.6 + 2.6 * len(panels), 4.4), squeeze=False, sharey=True
    )
    width = 0.8 / len(arms)
    for ax, (subset, metrics, d) in zip(axes[0], panels, strict=True):
        for i, a in enumerate(arms):
            rows = {r["metric"]: r for r in d.filter(pl.col(C.ARM) == a).iter_rows(named=True)}
            xs = [j + (i - (len(arms) - 1) / 2) * width for j, q in enumerate(metrics) if q in rows]
            if not xs:
                continue
            # an arm without a probe gets no bar rather than a bar at 0: missing is not failing
            got = pl.DataFrame([rows[q] for q in metrics if q in rows])
            ax.bar(
                xs,
                got["rate"] * 100,
                width=width,
                yerr=_err(got, "rate", "wilson_lo", "wilson_hi"),
                capsize=2,
                color=style[a].colour,
                label=a,
            )
        ax.set_xticks(range(len(metrics)), [LABELS[q] for q in metrics], rotation=25, ha="right", fontsize=7)
        ax.set_ylim(0, 105)
        ax.set_title(subset, fontsize=9)
    axes[0][0].set_ylabel("probes passed (%)")
    _arm_legend(fig, axes[0], arms)
    fig.suptitle(_title(m, "Provenance probes after each event, Wilson 95% CI"), fontsize=9)
    return _png(fig)


def _percent_bars_by_arm(ax: Any, arms: list[str], ylabel: str, title: str) -> None:
    """The axes of a grouped bar chart of percentages, one group per arm."""
    ax.set_xticks(range(len(arms)), arms, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never on one
