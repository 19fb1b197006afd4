"""report.md and a self-contained report.html (inline CSS, figures as base64 data URIs, no scripts)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

import polars as pl

from pmem.report._table import Table

#: where each output lives inside the report directory
MARKDOWN, HTML = "report.md", "report.html"
WARNINGS_HEADING = "Integrity warnings"
WARNINGS_NOTE = (
    "These run files are damaged or missing: they differ from the sha256 the runner recorded when it "
    "committed them (RUN_DIR/_commits/). Damaged files of results/, writes/, requests/ and "
    "histories/ are left out: every number below comes from the intact files only."
)


def table_file(name: str) -> str:
    return f"tables/{name}.csv"


def figure_file(name: str) -> str:
    return f"figures/{name}.png"


SUMMARY_SECTION, CONTENTS_ID, NOTES_ID, INTEGRITY_ID = "summary", "contents", "notes", "integrity"

#: the report's sections in order, after the summary, the contents and the notes that open it
SECTIONS = (
    ("coverage", "Run coverage"),
    ("alfworld", "ALFWorld-Revision"),
    ("factconsolidation", "FactConsolidation"),
    ("locomo", "LoCoMo"),
    ("provenance", "Provenance probes"),
    ("accuracy", "All accuracies"),
    ("stale", "Stale-answer rates"),
    ("paired", "Paired comparisons"),
    ("cost", "Read and write cost"),
    ("replies", "Model replies"),
    ("audit", "Write-path audit"),
    ("published", "Published vs ours"),
    ("peers", "Real peers vs our re-implementations"),
)

FIGURE_SECTION = {
    "table6_chains": "alfworld",
    "table8_retraction": "alfworld",
    "conflict_probe": "alfworld",
    "table7_factconsolidation": "factconsolidation",
    "accuracy_vs_read_tokens": "cost",
    "provenance_probes": "provenance",
}

#: tables longer than this are shown folded in report.html (the CSV has every row either way)
FOLD_ROWS = 30
#: a cell longer than this wraps (at most about 40em wide) instead of widening its table
WRAP_CHARS = 48
#: a cell holding a word longer than this may break inside it (identifiers with underscores)
LONG_WORD = 16

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2rem auto;max-width:1500px;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin:.2rem 0 .3rem}h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2rem}h3{font-size:1.05rem;margin-top:1.4rem}
.meta{color:#555;font-size:.8rem;margin:.2rem 0 .6rem;line-height:1.5}.meta b{color:#333;font-weight:600}
#summary{margin-top:.6rem}
ul.summary{padding-left:1.2rem;margin:.3rem 0}ul.summary>li{margin:.35rem 0;line-height:1.4}
ul.summary ul{padding-left:1.1rem;margin:.1rem 0}ul.summary ul li{margin:.15rem 0;font-size:.92rem}
nav.toc ol{columns:3 16rem;column-gap:2rem;margin:.3rem 0;padding-left:1.4rem;font-size:.9rem}
nav.toc li{break-inside:avoid}nav.toc ul{padding-left:1rem;font-size:.85rem;margin:.1rem 0 .3rem}
.scroll{overflow-x:auto;max-width:100%;margin:.4rem 0 1rem 0}
table{border-collapse:collapse;font-size:.78rem}
th,td{border:1px solid #ddd;padding:.25rem .4rem;text-align:left;vertical-align:top}
td.wrap{overflow-wrap:anywhere;min-width:14rem;max-width:40rem}td.brk{overflow-wrap:anywhere}
th{background:#f3f3f3;vertical-align:bottom}tr:nth-child(even) td{background:#fafafa}
.note{color:#555;font-size:.85rem;max-width:1100px}
.footer{color:#333;font-size:.85rem;max-width:1100px;border-left:3px solid #9ecae1;padding:.1rem 0 .1rem .6rem;margin:.2rem 0 1rem}
details{margin:.4rem 0}details>summary{cursor:pointer;color:#333;font-size:.9rem}
details.notes li{color:#555;font-size:.85rem;max-width:1100px;margin:.25rem 0}
.warn{color:#8a1c1c;font-weight:600}
img{max-width:100%;border:1px solid #eee;margin:.4rem 0}
"""


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v:
            return "–"
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def _md_cell(v: object) -> str:
    """A cell on one line of a Markdown table: a line break (a multi-line error, say) would end the row."""
    return "<br>".join(_cell(v).replace("|", "\\|").splitlines())


def md_table(df: pl.DataFrame, max_rows: int = 400) -> str:
    if df.height == 0:
        return "_no rows_\n"
    cols = df.columns
    head = "| " + " | ".join(c or " " for c in cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    body = ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in df.head(max_rows).iter_rows()]
    more = [f"\n_{df.height - max_rows} more rows in the CSV_"] if df.height > max_rows else []
    return "\n".join([head, sep, *body, *more]) + "\n"


def _td(v: object) -> str:
    text = _cell(v)
    if len(text) > WRAP_CHARS:
        cls = " class='wrap'"
    elif any(len(w) > LONG_WORD for w in text.split()):
        cls = " class='brk'"  # an identifier such as single_revision_two_step may break inside
    else:
        cls = ""
    return f"<td{cls}>{html.escape(text)}</td>"


def html_table(df: pl.DataFrame, max_rows: int = 400) -> str:
    """A table in its own horizontally scrolling container: a wide table never runs past the page."""
    if df.height == 0:
        return "<p><em>no rows</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(_td(v) for v in r) + "</tr>" for r in df.head(max_rows).iter_rows())
    more = f"<p class='note'>{df.height - max_rows} more rows in the CSV.</p>" if df.height > max_rows else ""
    return (
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>{more}"
    )


def table_anchor(name: str) -> str:
    """The HTML id (and Markdown anchor) of a table: ``table-<name>``, apart from the section ids."""
    return f"table-{name}"


def _md_anchor(anchor: str) -> str:
    return f'<a id="{anchor}"></a>\n'


def _shared_notes(tables: Sequence[Table]) -> list[str]:
    """Notes that two or more tables of a section share: said once, under the section heading."""
    seen: dict[str, int] = {}
    for t in tables:
        for n in dict.fromkeys(t.notes):
            seen[n] = seen.get(n, 0) + 1
    return [n for n, c in seen.items() if c > 1]


def _summary_items(summary: Sequence[Table]) -> list[tuple[str, str, list[str]]]:
    """(benchmark, section anchor, sentences) from the summary table's display, in order."""
    out: dict[tuple[str, str], list[str]] = {}
    for t in summary:
        if not {"benchmark", "section", "summary"} <= set(t.shown.columns):
            continue
        for r in t.shown.iter_rows(named=True):
            out.setdefault((r["benchmark"], r["section"]), []).append(r["summary"])
    return [(b, s, texts) for (b, s), texts in out.items()]


def render(
    title: str,
    meta: Sequence[tuple[str, str]],
    preface: Sequence[str],
    tables: Sequence[Table],
    figures: dict[str, bytes],
    warnings: Sequence[str] = (),
) -> tuple[str, str]:
    """report.md and report.html as text; figures (PNG bytes by name) are linked (md) and embedded (html).

    The report leads with the answer: the summary (the tables of section ``summary``: per benchmark its
    headline sentences, with a link to the section holding its tables), then the contents, then the notes
    (``preface``, folded in HTML) and the integrity ``warnings`` (damaged or missing run files), then the
    sections. A section none of whose tables has a row, and that has no figure, is left out; an empty
    table within a shown section is named in one line. A note several tables of a section share is said
    once, under the section heading.
    """
    by_section: dict[str, list[Table]] = {}
    for t in tables:
        by_section.setdefault(t.section, []).append(t)
    summary = by_section.pop(SUMMARY_SECTION, [])
    items = _summary_items(summary)
    known = {s for s, _ in SECTIONS}
    order = [*SECTIONS, *[(s, s) for s in by_section if s not in known], ("figures", "Figures")]
    # (anchor, heading, tables with rows, empty tables, figures) of every section that has something to show
    shown: list[tuple[str, str, list[Table], list[Table], list[tuple[str, bytes]]]] = []
    for sec, heading in order:
        ts = by_section.get(sec, [])
        figs = [(n, data) for n, data in figures.items() if FIGURE_SECTION.get(n, "figures") == sec]
        full = [t for t in ts if t.has_rows]
        if full or figs:
            shown.append((sec, heading, full, [t for t in ts if not t.has_rows], figs))
    toc: list[tuple[str, str, list[tuple[str, str]]]] = []
    if preface:
        toc.append((NOTES_ID, "Notes", []))
    if warnings:
        toc.append((INTEGRITY_ID, WARNINGS_HEADING, []))
    toc += [
        (sec, heading, [(table_anchor(t.name), t.title) for t in full]) for sec, heading, full, _, _ in shown
    ]

    # -- Markdown ------------------------------------------------------------------------------------------
    md: list[str] = [f"# {title}\n"]
    md += [f"- **{k}**: {v}" for k, v in meta]
    md.append("")
    md.append(_md_anchor(SUMMARY_SECTION))
    md.append("## Summary\n")
    for bench, sec, texts in items:
        md.append(f"- **[{bench}](#{sec})**")
        md += [f"  - {x}" for x in texts]
    md += [f"\n_{n}_" for t in summary for n in t.notes]
    md.append("")
    md.append(_md_anchor(CONTENTS_ID))
    md.append("## Contents\n")
    for anchor, heading, subs in toc:
        md.append(f"- [{heading}](#{anchor})")
        md += [f"  - [{sub}](#{a})" for a, sub in subs]
    md.append("")
    if preface:
        md.append(_md_anchor(NOTES_ID))
        md.append("## Notes\n")
        md += [f"- {p}" for p in preface]
        md.append("")
    if warnings:
        md.append(_md_anchor(INTEGRITY_ID))
        md.append(f"## {WARNINGS_HEADING}\n")
        md.append(WARNINGS_NOTE + "\n")
        md += [f"- {w}" for w in warnings]
        md.append("")

    # -- HTML ----------------------------------------------------------------------------------------------
    h: list[str] = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p class='meta'>"
        + " · ".join(f"<b>{html.escape(k)}</b> {html.escape(v)}" for k, v in meta)
        + "</p>",
        f"<h2 id='{SUMMARY_SECTION}'>Summary</h2><ul class='summary'>",
    ]
    for bench, sec, texts in items:
        h.append(f"<li><a href='#{sec}'><b>{html.escape(bench)}</b></a><ul>")
        h += [f"<li>{html.escape(x)}</li>" for x in texts]
        h.append("</ul></li>")
    if warnings:
        h.append(
            f"<li class='warn'><a href='#{INTEGRITY_ID}'>{html.escape(WARNINGS_HEADING)}</a>: "
            f"{len(warnings)} run file(s) damaged or missing and left out.</li>"
        )
    h.append("</ul>")
    h += [f"<p class='note'>{html.escape(n)}</p>" for t in summary for n in t.notes]
    h.append(f"<h2 id='{CONTENTS_ID}'>Contents</h2><nav class='toc'><ol>")
    for anchor, heading, subs in toc:
        inner = "".join(f"<li><a href='#{a}'>{html.escape(sub)}</a></li>" for a, sub in subs)
        h.append(
            f"<li><a href='#{anchor}'>{html.escape(heading)}</a>"
            + (f"<ul>{inner}</ul>" if inner else "")
            + "</li>"
        )
    h.append("</ol></nav>")
    if preface:
        h.append(f"<h2 id='{NOTES_ID}'>Notes</h2>")
        h.append(
            f"<details class='notes'><summary>{len(preface)} note(s) on this run: what its agent can "
            "measure and how its setup differs from the paper's</summary><ul>"
        )
        h += [f"<li>{html.escape(p)}</li>" for p in preface]
        h.append("</ul></details>")
    if warnings:
        h.append(f"<h2 id='{INTEGRITY_ID}'>{html.escape(WARNINGS_HEADING)}</h2>")
        h.append(f"<p class='note'><span class='warn'>warning</span> {html.escape(WARNINGS_NOTE)}</p>")
        items_html = "".join(f"<li class='warn'>{html.escape(w)}</li>" for w in warnings)
        if len(warnings) > 10:
            h.append(f"<details><summary>{len(warnings)} files</summary><ul>{items_html}</ul></details>")
        else:
            h.append(f"<ul>{items_html}</ul>")

    # -- the sections ----------------------------------------------------------------------------------------
    for sec, heading, full, empty, figs in shown:
        shared = _shared_notes(full)
        md.append(_md_anchor(sec))
        md.append(f"## {heading}\n")
        md += [f"{n}\n" for n in shared]
        h.append(f"<h2 id='{sec}'>{html.escape(heading)}</h2>")
        h += [f"<p class='note'>{html.escape(n)}</p>" for n in shared]
        for t in full:
            notes = [n for n in dict.fromkeys(t.notes) if n not in shared]
            anchor = table_anchor(t.name)
            md.append(_md_anchor(anchor))
            md.append(f"### {t.title}\n")
            md += [f"{n}\n" for n in notes]
            folded = t.folded or t.shown.height > FOLD_ROWS
            if folded:
                md.append(f"<details><summary>{t.shown.height} rows</summary>\n")
            md.append(md_table(t.shown))
            if folded:
                md.append("</details>\n")
            md += [f"{f}\n" for f in t.footer]
            md.append(f"CSV: `{table_file(t.name)}`\n")
            h.append(f"<h3 id='{anchor}'>{html.escape(t.title)}</h3>")
            h += [f"<p class='note'>{html.escape(n)}</p>" for n in notes]
            if folded:
                h.append(
                    f"<details><summary>Show the table ({t.shown.height} rows; CSV "
                    f"<code>{html.escape(table_file(t.name))}</code>)</summary>{html_table(t.shown)}</details>"
                )
            else:
                h.append(html_table(t.shown))
            h += [f"<p class='footer'>{html.escape(f)}</p>" for f in t.footer]
        if empty:
            line = (
                "No rows in this run (empty CSV written): "
                + "; ".join(
                    # the table's notes say why it is empty (a subset not swept, a benchmark not run)
                    f"{t.title} ({table_file(t.name)})"
                    + (f": {' '.join(t.notes).rstrip('.')}" if t.notes else "")
                    for t in empty
                )
                + "."
            )
            md.append(f"_{line}_\n")
            h.append(f"<p class='note'>{html.escape(line)}</p>")
        for name, data in figs:
            md.append(f"![{name}]({figure_file(name)})\n")
            b64 = base64.b64encode(data).decode("ascii")
            h.append(
                f"<figure id='figure-{html.escape(name)}'><img alt='{html.escape(name)}' "
                f"src='data:image/png;base64,{b64}'>"
                f"<figcaption class='note'>{html.escape(name)}</figcaption></figure>"
            )
    h.append("</body></html>")
    return "\n".join(md), "\n".join(h)
