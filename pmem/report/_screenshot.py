"""`pmem report-screenshot [RUN_DIR | --html FILE] [--out PNG]`: render a report.html in headless Chromium.

Chromium comes from Debian's ``chromium`` package (``apt-get install -y chromium``); set
``PMEM_CHROMIUM`` to use another binary. Without RUN_DIR the newest run under ``runs/`` is used (there
must be one: ``pmem demo`` makes one); ``--html`` renders a report written elsewhere, such as the
committed example in ``reports/quickstart/``.
The browser runs with a fresh profile and no network features, and only ever opens a local file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pmem._atomic import atomic_write_bytes
from pmem.report._build import build_report
from pmem.rundir import REPORT, RESULTS

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--disable-extensions",
)
INSTALL_HINT = (
    "Chromium was not found. Install Debian's package: `sudo apt-get update && sudo apt-get install -y "
    "chromium` (it provides /usr/bin/chromium), or set PMEM_CHROMIUM=/path/to/chromium."
)


class BrowserMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class Rendered:
    png: Path
    dom: str
    stderr: str


def find_chromium() -> str:
    env = os.environ.get("PMEM_CHROMIUM")
    if env:
        if Path(env).is_file():
            return env
        msg = f"PMEM_CHROMIUM={env} does not exist. {INSTALL_HINT}"
        raise BrowserMissing(msg)
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    raise BrowserMissing(INSTALL_HINT)


def _run(
    browser: str, profile: Path, extra: list[str], url: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    cmd = [browser, *FLAGS, f"--user-data-dir={profile}", *extra, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def render_html(
    html: Path, png: Path, *, width: int = 1500, height: int = 2400, timeout: float = 120.0
) -> Rendered:
    """Screenshot ``html`` into ``png`` and return the loaded DOM (for checks) and Chromium's stderr.

    Raises RuntimeError when Chromium exits non-zero, writes no PNG, or logs a page error.
    """
    browser = find_chromium()
    html = html.resolve()
    png = png.resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    url = html.as_uri()
    with tempfile.TemporaryDirectory(prefix="pmem-chromium-") as tmp:
        # Chromium writes where it likes; the PNG reaches its place whole or not at all
        shot_png = Path(tmp) / "shot.png"
        shot = _run(
            browser,
            Path(tmp) / "profile-shot",
            [
                f"--window-size={width},{height}",
                f"--screenshot={shot_png}",
                "--enable-logging=stderr",
                "--v=0",
            ],
            url,
            timeout,
        )
        dom = _run(browser, Path(tmp) / "profile-dom", ["--dump-dom"], url, timeout)
        if shot.returncode != 0 or not shot_png.is_file() or shot_png.stat().st_size == 0:
            msg = f"chromium failed to screenshot {html} (exit {shot.returncode}): {shot.stderr[-2000:]}"
            raise RuntimeError(msg)
        atomic_write_bytes(png, shot_png.read_bytes())
    page_errors = [
        ln for ln in shot.stderr.splitlines() if "CONSOLE" in ln and ("Uncaught" in ln or "Error" in ln)
    ]
    if page_errors:
        msg = f"{html}: the page logged errors in Chromium: " + " | ".join(page_errors[:5])
        raise RuntimeError(msg)
    if dom.returncode != 0 or "<html" not in dom.stdout:
        msg = f"chromium could not load {html} (exit {dom.returncode}): {dom.stderr[-2000:]}"
        raise RuntimeError(msg)
    return Rendered(png=png, dom=dom.stdout, stderr=shot.stderr)


def _default_run() -> Path | None:
    runs = Path("runs")
    if not runs.is_dir():
        return None
    cands = [p for p in runs.iterdir() if (p / RESULTS.name).is_dir()]
    return max(cands, key=lambda p: p.stat().st_mtime) if cands else None


_RUN_DIR_HELP = "run directory (default: the newest under runs/)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", nargs="?", help=_RUN_DIR_HELP)
    parser.add_argument(
        "--html", default=None, metavar="FILE", help="render this report.html instead of a run's"
    )
    parser.add_argument("--out", default=None, help="PNG path (default RUN_DIR/report/screenshot.png)")
    parser.add_argument(
        "--width", type=int, default=1500, help="browser window width in pixels (default 1500)"
    )
    parser.add_argument(
        "--height",
        type=int,
        default=2400,
        help="browser window height in pixels: how much of the page is shot (default 2400)",
    )
    parser.add_argument("--rebuild", action="store_true", help="rebuild report.html even if it exists")


def run(args: argparse.Namespace) -> int:

    if args.html and not Path(args.html).is_file():  # the user's input first, then the tool
        print(f"pmem report-screenshot: {args.html}: no such file", file=sys.stderr)
        return 2
    try:
        find_chromium()
    except BrowserMissing as exc:
        print(f"pmem report-screenshot: {exc}", file=sys.stderr)
        return 3
    if args.html:
        html = Path(args.html)
        out = Path(args.out) if args.out else html.with_name("screenshot.png")
    else:
        run_dir = Path(args.run_dir) if args.run_dir else _default_run()
        if run_dir is None:
            msg = "no run under runs/: give RUN_DIR or --html FILE, or make one with `pmem demo`"
            print(f"pmem report-screenshot: {msg}", file=sys.stderr)
            return 2
        html = run_dir / REPORT / "report.html"
        if args.rebuild or not html.is_file():
            html = build_report(run_dir).html
        out = Path(args.out) if args.out else run_dir / REPORT / "screenshot.png"
    try:
        r = render_html(html, out, width=args.width, height=args.height)
    except RuntimeError as exc:
        print(f"pmem report-screenshot: {exc}", file=sys.stderr)
        return 1
    print(f"screenshot: {r.png} ({r.png.stat().st_size:,} bytes) of {html}")
    return 0
