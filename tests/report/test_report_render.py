"""Markdown and HTML tables stay well formed whatever the cell text holds."""

from __future__ import annotations

import polars as pl

from pmem.report._render import md_table


def test_a_multi_line_cell_stays_in_its_row() -> None:
    df = pl.DataFrame({"history": ["h1", "h2"], "error": ["HTTP 400\ncontext_length_exceeded\n", "a | b"]})
    lines = md_table(df).strip().splitlines()
    assert len(lines) == 2 + df.height  # header, rule, one line per row
    assert lines[2] == "| h1 | HTTP 400<br>context_length_exceeded |"
    assert lines[3] == "| h2 | a \\| b |"
