"""`pmem report RUN_DIR [--compare RUN_B] [--out [DIR]] [--with-data]`: write RUN_DIR/report/ from the run's
Parquet files.

``pmem report --compare RUN_A RUN_B`` is the same as ``pmem report RUN_A --compare RUN_B``. A bare
``--out`` collects the report under ``reports/<run name>/`` (the folder that holds the reports a
project keeps, such as the quickstart's example) instead of inside the run directory. ``--with-data``
copies the datasets a reader needs to re-score the run (:data:`KEPT_DATASETS`, and ``run.toml``)
into the report's ``data/`` folder, so a committed report carries them.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pmem.report._build import build_compare, build_report
from pmem.report._load import RunError, one_line
from pmem.rundir import CALIBRATION, HISTORIES, JUDGMENTS, RESULTS, RUN_TOML, STATES, WRITES

#: where a bare ``--out`` collects reports: ``reports/<run name>/`` under the current directory
REPORTS_DIR = Path("reports")
_COLLECT = object()
#: what ``--with-data`` keeps beside a report: every answer with its score, every history's status
KEPT_DATASETS = (RESULTS.name, HISTORIES.name, WRITES.name, JUDGMENTS.name, CALIBRATION.name)
#: the arms' states are kept beside them while they fit this many bytes together (else listed as omitted)
STATES_CAP = 20 * 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        nargs="?",
        default=None,
        help="a run directory (run.toml, results/, writes/, ...)",
    )
    parser.add_argument(
        "--compare",
        metavar="RUN",
        nargs="+",
        default=None,
        help="RUN_B (or RUN_A RUN_B): also write RUN_A/report/compare-<run B>/ with both runs' "
        "tables and B − A",
    )
    parser.add_argument(
        "--out",
        nargs="?",
        const=_COLLECT,
        default=None,
        metavar="DIR",
        help=f"output directory (default RUN_DIR/report; a bare --out means {REPORTS_DIR}/<run name>/)",
    )
    parser.add_argument(
        "--reference",
        default=None,
        help="arm the paired comparisons are made against (default pmem); must be in the results",
    )
    parser.add_argument(
        "--with-data",
        action="store_true",
        help=f"also copy the run's {', '.join(f'{d}/' for d in KEPT_DATASETS)} and {RUN_TOML} into the "
        "report's data/ folder (a committed report anyone can re-score)",
    )


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def copy_data(run_dir: Path, report_dir: Path, states_cap: int = STATES_CAP) -> Path:
    """Copy the run's :data:`KEPT_DATASETS`, its ``states/`` while they fit ``states_cap`` bytes, and
    ``run.toml`` into ``report_dir/data`` (replaced whole: written beside it, then renamed, so a reader
    never sees a mix of two runs), with a ``CONTENTS.md`` saying what is kept and what is not, with sizes.
    Returns the folder."""
    target = report_dir / "data"
    staging = Path(tempfile.mkdtemp(prefix=".data-", dir=report_dir))
    try:
        lines = ["# What this folder keeps of the run", "", "| folder | bytes | kept |", "|---|---|---|"]
        for name in (*KEPT_DATASETS, STATES):
            folder = run_dir / name
            if not folder.is_dir():
                continue
            size = _size(folder)
            kept = name != STATES or size <= states_cap
            if kept:
                shutil.copytree(folder, staging / name, ignore=shutil.ignore_patterns(".*"))
            why = "yes" if kept else f"no: over the {states_cap:,}-byte cap (in the run folder)"
            lines.append(f"| `{name}/` | {size:,} | {why} |")
        for name in sorted(
            p.name for p in run_dir.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
        ):
            if name not in (*KEPT_DATASETS, STATES):
                lines.append(f"| `{name}/` | {_size(run_dir / name):,} | no (the run folder keeps it) |")
        (staging / "CONTENTS.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        shutil.copy2(run_dir / RUN_TOML, staging / RUN_TOML)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def run(args: argparse.Namespace) -> int:

    t0 = time.perf_counter()
    run_dir, compare = args.run_dir, args.compare
    if compare and len(compare) == 2 and run_dir is None:
        run_dir, compare = compare[0], compare[1:]
    if run_dir is None or (compare and len(compare) != 1):
        print(
            "usage: pmem report RUN_DIR [--compare RUN_B] | pmem report --compare RUN_A RUN_B",
            file=sys.stderr,
        )
        return 2
    out = str(REPORTS_DIR / Path(run_dir).resolve().name) if args.out is _COLLECT else args.out
    try:
        paths = build_report(run_dir, out, reference=args.reference)
        for w in paths.warnings:
            print(f"pmem report: warning: {w}", file=sys.stderr)
        print(f"report: {paths.markdown}")
        print(f"report: {paths.html}")
        print(f"{len(paths.tables)} tables, {len(paths.figures)} figures in {time.perf_counter() - t0:.1f} s")
        if args.with_data:
            print(f"data: {copy_data(Path(run_dir), Path(paths.markdown).parent)}")
        if compare:
            cmp_out = None if out is None else f"{out}/compare"
            c = build_compare(run_dir, compare[0], cmp_out, reference=args.reference)
            print(f"compare: {c.markdown}")
            print(f"compare: {c.html}")
    except RunError as exc:
        print(f"pmem report: {one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        # a full disk, a quota, a permission: nothing was renamed into place (see pmem.report._atomic)
        print(f"pmem report: {one_line(exc)} (the previous report is left as it was)", file=sys.stderr)
        return 1
    return 0
