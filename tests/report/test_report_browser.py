"""report.html in a real headless Chromium (Debian's `chromium` package). Run with `-m browser`."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from benchmarks.synthetic import write_fixture_run
from pmem.report import build_report
from pmem.report._screenshot import INSTALL_HINT, BrowserMissing, find_chromium, render_html

pytestmark = pytest.mark.browser


def test_report_html_renders_in_chromium(tmp_path: Path) -> None:
    try:
        find_chromium()
    except BrowserMissing:
        pytest.fail(INSTALL_HINT)
    paths = build_report(write_fixture_run(tmp_path / "run"))
    shot = render_html(paths.html, tmp_path / "shot.png", width=1400, height=2000)
    png = shot.png.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1400, 2000)
    # the DOM Chromium loaded holds the tables and every embedded figure
    assert "Table 6 view" in shot.dom and "Published (paper) vs ours" in shot.dom
    assert shot.dom.count("data:image/png;base64,") == len(paths.figures)
    assert "heuristic (no LLM)" in shot.dom


def test_screenshot_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pmem.cli import main

    run = write_fixture_run(tmp_path / "run", n_alf=3, fc_questions=6)
    out = tmp_path / "out.png"
    assert main(["report-screenshot", str(run), "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "screenshot:" in capsys.readouterr().out
