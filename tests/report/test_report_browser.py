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


#: measures, once the page has loaded, every table box wider than the space it has (a test-only copy of
#: report.html carries it: the report itself holds no script)
_MEASURE = """<script>window.addEventListener('load', () => {
  const out = []; let table = '?';
  document.querySelectorAll('h3, .scroll').forEach(el => {
    if (el.tagName === 'H3') { table = el.id; return; }
    if (el.scrollWidth > el.clientWidth + 1) out.push(table + ' ' + el.scrollWidth + '>' + el.clientWidth);
  });
  out.push('page ' + document.documentElement.scrollWidth + ' of ' + window.innerWidth);
  const pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = out.join('\\n');
  document.body.appendChild(pre);
});</script>"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_table_fits_the_page(tmp_path: Path, width: int) -> None:
    """At 1280 and 1920 px no table is wider than its box (so none is cut off in a screenshot, where
    --hide-scrollbars leaves no hint of a hidden part) and the page needs no horizontal scrolling."""
    import html as htmllib
    import re
    import subprocess

    from pmem.report._screenshot import FLAGS
    from tests.report.test_report_probes import make_probe_run

    try:
        browser = find_chromium()
    except BrowserMissing:
        pytest.fail(INSTALL_HINT)
    for root in (write_fixture_run(tmp_path / "run"), make_probe_run(tmp_path / "probes")):
        html = build_report(root).html
        probe = tmp_path / f"{root.name}-measure.html"
        probe.write_text(html.read_text().replace("</body>", _MEASURE + "</body>"))
        p = subprocess.run(
            [
                browser,
                *FLAGS,
                f"--user-data-dir={tmp_path / 'profile'}",
                f"--window-size={width},900",
                "--virtual-time-budget=5000",
                "--dump-dom",
                probe.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        found = re.search(r"<pre id=\"measured\">(.*?)</pre>", p.stdout, re.S)
        assert found is not None, p.stderr[-2000:]
        lines = htmllib.unescape(found.group(1)).splitlines()
        assert lines[:-1] == [], f"{root.name} at {width}px: tables wider than their box: {lines[:-1]}"
        page, _, view = lines[-1].removeprefix("page ").partition(" of ")
        assert int(page) <= int(view)
