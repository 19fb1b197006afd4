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


SECTIONS = (
    ("coverage", "Run coverage"),
    ("alfworld", "ALFWorld-Revision"),
    ("factconsolidation", "FactConsolidation"),
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

#: sections left out of the report when none of their tables has a row and no figure belongs to them:
#: a benchmark most runs do not sweep should not add a screen of empty tables to every report
OPTIONAL_SECTIONS = frozenset({"provenance", "peers"})

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1500px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2.2rem}h3{font-size:1.05rem;margin-top:1.4rem}
table{border-collapse:collapse;font-size:.78rem;margin:.4rem 0 1rem 0;display:block;overflow-x:auto}
th,td{border:1px solid #ddd;padding:.25rem .45rem;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}
.note{color:#555;font-size:.85rem;max-width:1100px}.meta td{white-space:normal}
.warn{color:#8a1c1c;font-weight:600}
.badge{display:inline-block;background:#fff3cd;border:1px solid #e0c36b;border-radius:4px;padding:.1rem .4rem}
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


def html_table(df: pl.DataFrame, max_rows: int = 400) -> str:
    if df.height == 0:
        return "<p><em>no rows</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in r) + "</tr>"
        for r in df.head(max_rows).iter_rows()
    )
    more = f"<p class='note'>{df.height - max_rows} more rows in the CSV.</p>" if df.height > max_rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}"


def render(
    title: str,
    meta: Sequence[tuple[str, str]],
    preface: Sequence[str],
    tables: Sequence[Table],
    figures: dict[str, bytes],
    warnings: Sequence[str] = (),
) -> tuple[str, str]:
    """report.md and report.html as text; figures (PNG bytes by name) are linked (md) and embedded (html).

    ``warnings`` (damaged or missing run files) open the report, ahead of every table.
    """
    md: list[str] = [f"# {title}\n"]
    md += [f"- **{k}**: {v}" for k, v in meta]
    md.append("")
    h: list[str] = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><table class='meta'><tbody>",
    ]
    h += [f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in meta]
    h.append("</tbody></table>")
    if warnings:
        md.append(f"## {WARNINGS_HEADING}\n")
        md.append(WARNINGS_NOTE + "\n")
        md += [f"- {w}" for w in warnings]
        md.append("")
        h.append(f"<h2 id='integrity'>{html.escape(WARNINGS_HEADING)}</h2>")
        h.append(f"<p class='note'><span class='warn'>warning</span> {html.escape(WARNINGS_NOTE)}</p><ul>")
        h += [f"<li class='warn'>{html.escape(w)}</li>" for w in warnings]
        h.append("</ul>")
    md += [f"> {p}\n" for p in preface]
    h += [f"<p class='note'><span class='badge'>note</span> {html.escape(p)}</p>" for p in preface]
    by_section: dict[str, list[Table]] = {}
    for t in tables:
        by_section.setdefault(t.section, []).append(t)
    known = {s for s, _ in SECTIONS}
    sections = list(SECTIONS) + [(s, s) for s in by_section if s not in known]
    for sec, heading in sections:
        ts = by_section.get(sec, [])
        figs = [(n, data) for n, data in figures.items() if FIGURE_SECTION.get(n, "figures") == sec]
        if not ts and not figs:
            continue
        if sec in OPTIONAL_SECTIONS and not figs and all(t.empty for t in ts):
            continue
        md.append(f"## {heading}\n")
        h.append(f"<h2 id='{sec}'>{html.escape(heading)}</h2>")
        for t in ts:
            md.append(f"### {t.title}\n")
            md += [f"{n}\n" for n in t.notes]
            md.append(md_table(t.shown))
            md.append(f"CSV: `{table_file(t.name)}`\n")
            h.append(f"<h3 id='{t.name}'>{html.escape(t.title)}</h3>")
            h += [f"<p class='note'>{html.escape(n)}</p>" for n in t.notes]
            h.append(html_table(t.shown))
        for name, data in figs:
            md.append(f"![{name}]({figure_file(name)})\n")
            b64 = base64.b64encode(data).decode("ascii")
            h.append(
                f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{b64}'>"
                f"<figcaption class='note'>{html.escape(name)}</figcaption></figure>"
            )
    h.append("</body></html>")
    return "\n".join(md), "\n".join(h)
