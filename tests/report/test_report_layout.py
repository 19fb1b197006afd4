"""The report leads with the answer: a summary with numbers and intervals, a table of contents whose links
resolve, the notes folded and said once, no empty section, a sentence under each probe table, and figures
whose arms can be told apart (one palette by design family, markers, dodged lines, readable log axes)."""

from __future__ import annotations

import colorsys
import html as htmllib
import itertools
import re
from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import polars as pl
import pytest
from matplotlib.container import ErrorbarContainer

from benchmarks.synthetic import write_fixture_run
from pmem.arms import arm_names
from pmem.report import _plots as plots
from pmem.report import build_report, compute, open_run
from pmem.report._palette import FACT_STORE, FAMILIES, PMEM, RETRIEVAL, arm_family, arm_styles
from pmem.report._probes import BEFORE_AFTER, PROBE_TYPES, merge_premise, table_name
from pmem.report._render import render, table_anchor
from pmem.report._summary import BENCHMARK_SECTIONS
from pmem.report._table import Table
from pmem.rundir import columns as C
from tests.report.test_report_probes import make_probe_run

#: a percentage with its 95% interval, as the summary writes it: ``61.0% [51.2, 70.0]`` (or ``boot [..]``)
NUMBER_CI = re.compile(r"(\d+\.\d)% (?:boot )?\[(\d+\.\d), (\d+\.\d)\]")


@pytest.fixture(scope="module")
def fixture_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    root = write_fixture_run(tmp_path_factory.mktemp("layout") / "run", seed=11, n_alf=6, fc_questions=10)
    paths = build_report(root)
    return root, paths.markdown.read_text(), paths.html.read_text()


@pytest.fixture(scope="module")
def probe_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    root = make_probe_run(tmp_path_factory.mktemp("layout") / "probes")
    paths = build_report(root)
    return root, paths.markdown.read_text(), paths.html.read_text()


@pytest.fixture(params=["fixture_report", "probe_report"])
def report(request: pytest.FixtureRequest) -> tuple[Path, str, str]:
    return request.getfixturevalue(request.param)


def h2_sections(html: str) -> list[tuple[str, str]]:
    """(id, body up to the next h2) of every section of report.html, in order."""
    parts = re.split(r"(?=<h2 id=')", html)
    return [(re.match(r"<h2 id='([^']+)'", p).group(1), p) for p in parts[1:]]  # type: ignore[union-attr]


def visible_texts(html: str) -> list[str]:
    """The text of every paragraph and list item (notes, footers, summary sentences, TOC entries)."""
    # innermost elements only: a summary item holds a list of sentences
    found = re.findall(r"<(p|li)\b[^>]*>((?:(?!<(?:p|li)\b).)*?)</\1>", html, re.S)
    return [htmllib.unescape(re.sub(r"<[^>]+>", "", t)).strip() for _, t in found]


# -- the summary -------------------------------------------------------------------------------------------


def test_the_summary_is_the_first_section(report: tuple[Path, str, str]) -> None:
    _, md, html = report
    assert h2_sections(html)[0][0] == "summary"
    assert re.findall(r"^## (.+)$", md, re.M)[0] == "Summary"
    # what a reader meets next: the contents, then the folded notes, then everything else
    ids = [s for s, _ in h2_sections(html)]
    assert ids[1:3] == ["contents", "notes"]


def test_the_summary_names_every_benchmark_with_a_number_and_an_interval(
    report: tuple[Path, str, str],
) -> None:
    root, _, html = report
    present = set(
        pl.scan_parquet(root / "results" / "**" / "*.parquet").select(C.BENCHMARK).collect()[C.BENCHMARK]
    )
    assert present
    summary = dict(h2_sections(html))["summary"]
    items = re.findall(r"<li><a href='#([^']+)'><b>([^<]+)</b></a><ul>(.*?)</ul></li>", summary, re.S)
    by_name = {name: (anchor, body) for anchor, name, body in items}
    for bench in present:
        name, section = BENCHMARK_SECTIONS.get(bench, (bench, "accuracy"))
        assert name in by_name, f"{bench} missing from the summary"
        anchor, body = by_name[name]
        assert anchor == section
        numbers = NUMBER_CI.findall(body)
        assert numbers, f"{bench}: no number with an interval in {body!r}"
        for v, lo, hi in numbers:
            assert float(lo) <= float(v) <= float(hi)


def test_summary_numbers_are_the_runs(fixture_report: tuple[Path, str, str]) -> None:
    """The chains headline quotes Table 6's cells at the longest L, not fixed figures."""
    root, _, html = fixture_report
    t6 = compute(open_run(root)).tables["table6_chains"].data
    longest = t6[C.L].max()
    summary = dict(h2_sections(html))["summary"]
    sentence = next(t for t in visible_texts(summary) if t.startswith(f"Revision chains at L={longest}"))
    for r in t6.filter(pl.col(C.L) == longest).iter_rows(named=True):
        quoted = f"{r[C.ARM]} {100 * r['accuracy']:.1f}% [{100 * r['acc_wilson_lo']:.1f}, {100 * r['acc_wilson_hi']:.1f}]"
        assert quoted in sentence, quoted
    csv = pl.read_csv(root / "report" / "tables" / "summary.csv")
    row = csv.filter((pl.col("comparison") == f"chains L={longest}") & (pl.col(C.ARM) == "pmem")).row(
        0, named=True
    )
    assert row["metric"] == "accuracy" and row["lo"] <= row["value"] <= row["hi"]


# -- contents, notes, sections -----------------------------------------------------------------------------


def test_contents_links_resolve(report: tuple[Path, str, str]) -> None:
    _, md, html = report
    ids = set(re.findall(r"\bid='([^']+)'", html))
    links = re.findall(r"href='#([^']+)'", html)
    assert len(links) > 10
    assert not [x for x in links if x not in ids]
    assert len(ids) == len(re.findall(r"\bid='", html))  # no id twice
    md_ids = set(re.findall(r'<a id="([^"]+)"></a>', md))
    md_links = re.findall(r"\]\(#([^)]+)\)", md)
    assert len(md_links) > 10 and not [x for x in md_links if x not in md_ids]
    contents = dict(h2_sections(html))["contents"]
    # every section after the opening ones and every table shown has its entry
    for sid, body in h2_sections(html)[2:]:
        assert f"href='#{sid}'" in contents
        for tid in re.findall(r"<h3 id='([^']+)'", body):
            assert f"href='#{tid}'" in contents


def test_no_note_is_said_twice(report: tuple[Path, str, str]) -> None:
    _, md, html = report
    counts = Counter(t for t in visible_texts(html) if t)
    assert [t for t, n in counts.items() if n > 1] == []
    paras = [
        ln.strip()
        for ln in md.splitlines()
        if ln.strip() and not ln.lstrip().startswith(("|", "#", "<", "- [", "CSV:", "!["))
    ]
    assert [t for t, n in Counter(paras).items() if n > 1] == []


def test_notes_are_folded_after_the_summary(fixture_report: tuple[Path, str, str]) -> None:
    _, _, html = fixture_report
    notes = dict(h2_sections(html))["notes"]
    assert "<details class='notes'>" in notes and "<details class='notes' open" not in notes
    folded = notes[notes.index("<details") : notes.index("</details>")]
    assert "heuristic (no LLM)" in folded and "LongMemEval: not run" in folded
    # the coverage notes stay with the coverage table; the first screen says it in one line
    coverage = dict(h2_sections(html))["coverage"]
    assert "Counted against plan.json" not in notes and "Coverage: " in coverage
    assert re.search(r"<details><summary>Show the table \(\d+ rows", coverage)


def test_no_section_is_empty(report: tuple[Path, str, str]) -> None:
    _, _, html = report
    for sid, body in h2_sections(html):
        if sid in ("summary", "contents", "notes", "integrity"):
            continue
        assert "<table>" in body or "<img" in body, f"section {sid} shows nothing"


def test_render_leaves_out_a_section_without_rows() -> None:
    full = Table("a", "A table", pl.DataFrame({"x": [1]}), section="accuracy")
    empty = Table("b", "An empty one", pl.DataFrame(), section="accuracy", notes=["why b is empty"])
    lonely = Table("c", "Nobody's rows", pl.DataFrame(), section="peers")
    md, html = render("t", [], [], [full, empty, lonely], {})
    assert "id='accuracy'" in html and "id='peers'" not in html and "## Real peers" not in md
    # an empty table of a shown section: one line with its notes (why it is empty), no heading and no
    # "no rows" table
    assert "No rows in this run (empty CSV written): An empty one (tables/b.csv): why b is empty." in html
    assert "<h3 id='table-b'" not in html and "no rows</em>" not in html


# -- probes ------------------------------------------------------------------------------------------------


def test_each_probe_table_is_followed_by_its_before_after_sentence(
    probe_report: tuple[Path, str, str],
) -> None:
    _, md, html = probe_report
    for subset in PROBE_TYPES:
        anchor = table_anchor(table_name(subset))
        start = html.index(f"<h3 id='{anchor}'")
        block = html[start : html.index("<h3 ", start + 1)]
        table_end = block.index("</table>")
        footer = re.search(r"<p class='footer'>(.*?)</p>", block[table_end:], re.S)
        assert footer is not None, subset
        assert htmllib.unescape(footer.group(1)) == BEFORE_AFTER[subset]
        md_block = md[md.index(f'<a id="{anchor}">') :]
        md_block = md_block[: md_block.index("CSV:")]
        assert md_block.rindex("|") < md_block.index(BEFORE_AFTER[subset])


def _merge_rows(rates: dict[tuple[str, str], tuple[int, int]]) -> pl.DataFrame:
    from pmem.report._stats import wilson

    out: list[dict[str, Any]] = []
    for (arm, metric), (k, n) in rates.items():
        lo, hi = wilson(k, n)
        out.append(
            {C.ARM: arm, "metric": metric, "n": n, "k": k, "rate": k / n, "wilson_lo": lo, "wilson_hi": hi}
        )
    return pl.DataFrame(out)


def test_merge_premise_is_said_when_the_data_shows_the_false_merge() -> None:
    data = _merge_rows(
        {
            ("pmem", "before_correction"): (0, 20),
            ("pmem", "after_correction"): (40, 40),
            ("crud", "before_correction"): (20, 20),
            ("crud", "after_correction"): (40, 40),
            ("pmem-no-identity", "before_correction"): (0, 20),
        }
    )
    text = merge_premise(data)
    assert text is not None
    assert (
        "premise" in text and "pmem 0.0% [0.0, 16.1] before" in text and "pmem 100.0% [91.2, 100.0]" in text
    )
    # an arm without soft identity, or with it off, is no part of the premise
    assert "crud" not in text and "pmem-no-identity" not in text
    # P-Mem passing before the correction, or too few questions to tell: nothing is claimed
    assert merge_premise(_merge_rows({("pmem", "before_correction"): (18, 20)})) is None
    assert merge_premise(_merge_rows({("pmem", "before_correction"): (0, 2)})) is None
    assert merge_premise(_merge_rows({("crud", "before_correction"): (0, 20)})) is None


# -- palette and plots -------------------------------------------------------------------------------------


def _lab(hex_colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB colour."""
    rgb = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _hue(hex_colour: str) -> float:
    rgb = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    return colorsys.rgb_to_hls(*rgb)[0] * 360


def test_palette_tells_every_registered_arm_apart_and_groups_families() -> None:
    arms = list(arm_names())
    styles = arm_styles(arms)
    colours = [styles[a].colour for a in arms]
    assert len(set(colours)) == len(arms)
    for a, b in itertools.combinations(arms, 2):
        la, lb = _lab(styles[a].colour), _lab(styles[b].colour)
        delta = sum((p - q) ** 2 for p, q in zip(la, lb, strict=True)) ** 0.5
        assert delta > 15, f"{a} and {b} look alike (delta E {delta:.1f})"
        if arm_family(a) == arm_family(b):
            assert (styles[a].marker, styles[a].linestyle) != (styles[b].marker, styles[b].linestyle)
    for a in arms:
        lo, hi = FAMILIES[arm_family(a)].hues
        assert lo <= _hue(styles[a].colour) <= hi, a
    # the families the registry's classes fall into (docs/arms.md), without a list of names in the test
    assert {a for a in arms if arm_family(a) == PMEM} == {a for a in arms if a.startswith("pmem")}
    assert {"crud", "add-only", "bitemporal", "mem0", "graphiti"} <= {
        a for a in arms if arm_family(a) == FACT_STORE
    }
    assert {"raw", "raw-ordered", "chunks", "long-context", "no-memory"} <= {
        a for a in arms if arm_family(a) == RETRIEVAL
    }
    ranges = [FAMILIES[f].hues for f in (PMEM, FACT_STORE, RETRIEVAL)]
    for (a_lo, a_hi), (b_lo, b_hi) in itertools.combinations(ranges, 2):
        assert a_hi < b_lo or b_hi < a_lo  # no two families share hues
    # an arm as seen under several agent models: the same colour, hollow markers for the second
    two = arm_styles(["pmem@a", "pmem@b"])
    assert two["pmem@a"].colour == two["pmem@b"].colour and two["pmem@b"].hollow and not two["pmem@a"].hollow


@pytest.fixture(scope="module")
def figures(fixture_report: tuple[Path, str, str]) -> dict[str, Any]:
    """Every figure of the fixture run as a live matplotlib Figure (the PNG step is bypassed)."""
    root = fixture_report[0]
    m = compute(open_run(root))
    caught: list[Any] = []

    def keep(fig: Any) -> bytes:
        caught.append(fig)
        return b""

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "_png", keep)
        names = list(plots.plot_all(m))
    yield dict(zip(names, caught, strict=True))
    for fig in caught:
        plt.close(fig)


def arm_series(ax: Any) -> dict[str, Any]:
    """The data line of every arm's series on ``ax``: plain lines and error bars, by label."""
    out = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    out.update({c.get_label(): c.lines[0] for c in ax.containers if isinstance(c, ErrorbarContainer)})
    return out


def test_every_arm_series_has_a_marker(figures: dict[str, Any]) -> None:
    arms = set(arm_names())
    checked = set()
    for name, fig in figures.items():
        for ax in fig.axes:
            for label, line in arm_series(ax).items():
                if label in arms:
                    assert line.get_marker() not in (None, "", "None", " "), (name, label)
                    checked.add(name)
    assert {"table6_chains", "table7_factconsolidation", "accuracy_vs_read_tokens"} <= checked


def test_chains_lines_are_dodged(figures: dict[str, Any]) -> None:
    ax = figures["table6_chains"].axes[0]
    xs = {label: list(line.get_xdata()) for label, line in arm_series(ax).items()}
    assert len(xs) >= 3
    for a, b in itertools.combinations(xs, 2):
        # arms with the same L never share an x: equal values (several at 100 %) stay visible
        assert all(abs(p - q) > 1e-6 for p, q in zip(xs[a], xs[b], strict=False))


def test_log_axis_labels_do_not_collide(figures: dict[str, Any]) -> None:
    fig = figures["accuracy_vs_read_tokens"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        if ax.get_xscale() != "log":
            continue
        lo, hi = ax.get_xlim()
        labels = [
            t
            for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
            if t.get_text() and lo <= t.get_position()[0] <= hi
        ]
        assert len(labels) >= 2, [t.get_text() for t in labels]
        assert not [t for t in labels if "\\times" in t.get_text() or "^" in t.get_text()]
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        for left, right in itertools.pairwise(boxes):
            assert left.x1 <= right.x0, "tick labels overlap"


@pytest.mark.parametrize(("lo", "hi"), [(30.0, 40.0), (7.9, 160.0), (55.0, 6500.0), (3.0, 2_000_000.0)])
def test_log_axis_labels_any_range(lo: float, hi: float) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    try:
        ax.plot([lo, hi], [0, 1], marker="o")
        plots.log_axis(ax, lo, hi)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        xl, xh = ax.get_xlim()
        labels = [
            t
            for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
            if t.get_text() and xl <= t.get_position()[0] <= xh
        ]
        assert xl <= lo and hi <= xh and len(labels) >= 2
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        for left, right in itertools.pairwise(boxes):
            assert left.x1 <= right.x0
    finally:
        plt.close(fig)


def test_table8_view_is_narrow(fixture_report: tuple[Path, str, str]) -> None:
    """The Table 8 view has one row per arm and short cells, so it fits the page (no 1400 px row)."""
    root = fixture_report[0]
    t8 = compute(open_run(root)).tables["table8_retraction"]
    shown = t8.shown
    assert shown[C.ARM].to_list() == sorted(set(t8.data[C.ARM].to_list()), key=shown[C.ARM].to_list().index)
    assert max(len(str(v)) for row in shown.iter_rows() for v in row) <= 24


def test_a_benchmark_without_a_paper_view_gets_its_overall_accuracy(
    fixture_report: tuple[Path, str, str],
) -> None:
    """LongMemEval (or a plugin benchmark): accuracy over all its questions per arm, with intervals."""
    from pmem.report._summary import summary_table

    m = compute(open_run(fixture_report[0]))
    renamed = pl.col(C.BENCHMARK).replace("factconsolidation", "longmemeval")
    m.hist = m.hist.with_columns(renamed)
    m.accuracy = m.accuracy.with_columns(renamed)
    shown = summary_table(m).shown
    lme = shown.filter(pl.col(C.BENCHMARK) == "LongMemEval")["summary"].to_list()
    assert len(lme) == 1 and lme[0].startswith("Accuracy over all questions: pmem ")
    hist = m.hist.filter(pl.col(C.BENCHMARK) == "longmemeval")
    for arm in hist[C.ARM].unique().to_list():
        d = hist.filter(pl.col(C.ARM) == arm)
        assert re.search(
            rf"{re.escape(arm)} {100 * (d['k'].sum() / d['n'].sum()):.1f}% (boot )?\[", lme[0]
        ), arm
