"""What `pmem sweep` prints (``pmem/runner/_cli_sweep.py``): one progress line that fits the terminal on
stderr, a short result and the run directory last on stdout; ``--summary`` the table, ``--verbose`` the
details, which the run's progress log always has.

A real sweep of the quickstart (``--limit 1``: 84 histories x arms, every arm) on the session's cluster
(tests/quickstart_sweep.py).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from quickstart_sweep import COLUMNS, QUICKSTART_GROUP, Swept, quickstart_config, sweep

from pmem.rundir import PROGRESS_LOG
from pmem.runner._driver import SweepResult

pytestmark = QUICKSTART_GROUP
#: a progress line: histories done/total (the first field, whatever else the width left)
PROGRESS = re.compile(r"(?:^|\] )(\d+)/(\d+) histories")
#: the header of the per-cell table
TABLE_HEADER = re.compile(r"^benchmark/subset\s+params\s+arm\s+question type\s+n\s+acc")


@pytest.fixture(scope="module")
def first_run(quickstart_first_run: Swept) -> Swept:
    """The quickstart's first histories, swept at ``COLUMNS=100`` without --summary or --verbose (the
    session's run, which tests/rundir reads too)."""
    return quickstart_first_run


def test_progress_is_one_line_that_fits_the_terminal(first_run: Swept) -> None:
    assert first_run.code == 0, first_run.stderr[-3000:]
    lines = first_run.stderr.splitlines()
    progress = [ln for ln in lines if PROGRESS.search(ln)]
    assert len(progress) >= 2, first_run.stderr[-3000:]  # one every progress_s, and the final one
    too_wide = [ln for ln in lines if ln.startswith("[pmem sweep]") and len(ln) > COLUMNS]
    assert not too_wide, too_wide
    for ln in progress:
        assert len(ln) <= COLUMNS, ln
        assert ln.startswith("[pmem sweep] "), ln  # 100 columns leave room for the tag
        assert " failed | " in ln and "ETA " in ln, ln  # the essential fields
    counts = [tuple(map(int, PROGRESS.search(ln).groups())) for ln in progress]  # type: ignore[union-attr]
    assert {total for _, total in counts} == {84}
    assert counts[-1] == (84, 84)
    assert [d for d, _ in counts] == sorted(d for d, _ in counts)
    # the details are for --verbose and the progress log: no arm by arm counts, no runner internals
    assert not any("alfworld-revision/chains:" in ln for ln in lines)
    assert "event loops" not in first_run.stderr and "in flight each" not in first_run.stderr


def test_without_summary_the_sweep_ends_with_a_short_result_and_the_run_dir(first_run: Swept) -> None:
    lines = first_run.stdout.splitlines()
    run_dir = Path(lines[-1])
    assert run_dir.is_dir() and (run_dir / "results").is_dir()  # the last line: what scripts read
    assert run_dir.name.endswith("-limit1")  # a limited run is a run of its own
    assert len(lines) <= 4, lines
    assert lines[0] == lines[0][:COLUMNS]
    assert lines[0].startswith("pmem sweep: 84/84 histories complete, 0 failed"), lines
    (report,) = [ln for ln in lines if ln.startswith("report: pmem report ")]
    assert report.split()[3] == str(run_dir) and "--summary" in " ".join(lines[1:-1])
    assert not any(TABLE_HEADER.match(ln) for ln in lines)


def test_summary_prints_the_table_per_cell(
    first_run: Swept, quickstart: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, out = quickstart
    again = sweep(str(config), "--out", str(out), "--limit", "1", "--summary", monkeypatch=monkeypatch)
    assert again.code == 0, again.stderr[-3000:]
    lines = again.stdout.splitlines()
    assert lines[-1] == first_run.stdout.splitlines()[-1]  # still the run directory last
    header = [i for i, ln in enumerate(lines) if TABLE_HEADER.match(ln)]
    assert len(header) == 1, lines[:5]
    rows = lines[header[0] + 1 : -1]
    assert any(r.startswith("alfworld-revision/chains") and " pmem " in r for r in rows)
    assert any(r.startswith("factconsolidation/sh_6k") and " long-context " in r for r in rows)
    assert len(rows) > 50  # every benchmark, subset, parameter, arm and question type


def test_verbose_shows_the_details_and_the_progress_log_keeps_them(
    first_run: Swept, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same histories into a new output folder: a run of its own, swept again with --verbose
    config = quickstart_config(tmp_path)
    more = sweep(
        str(config), "--out", str(tmp_path / "runs"), "--limit", "1", "--verbose", monkeypatch=monkeypatch
    )
    assert more.code == 0, more.stderr[-3000:]
    lines = more.stderr.splitlines()
    joined = " ".join(ln.strip() for ln in lines)
    assert "runner event loops: longest stall" in joined
    assert "runner(s) (32 in flight each)" in joined
    # histories done per subset and arm (4 chains per arm at --limit 1: L = 1, 2, 4, 8), wrapped to fit
    assert re.search(
        r"alfworld-revision/chains: pmem 4/4, pmem-oracle 4/4, raw 4/4,? raw-ordered 4/4", joined
    )
    assert "factconsolidation/sh_6k: add-only 1/1, bitemporal 1/1" in joined
    ours = [ln for ln in lines if ln.startswith(("[pmem sweep]", "  ")) or PROGRESS.search(ln)]
    # no line past the width but one that is a single word longer than it (a path is never split)
    too_wide = [ln for ln in ours if len(ln) > COLUMNS and len(ln.split()) > 1]
    assert len(ours) > 10 and not too_wide, too_wide
    run_dir = more.run_dir
    assert run_dir.parent == tmp_path / "runs" and run_dir.name == first_run.run_dir.name
    # the progress log has the details, verbose or not, one unwrapped line each
    for swept in (more, first_run):
        log = (swept.run_dir / PROGRESS_LOG).read_text()
        assert log.count("runner event loops: longest stall") == 1
        assert re.search(
            r"alfworld-revision/chains: pmem 4/4, pmem-oracle 4/4, raw 4/4, raw-ordered 4/4\n", log
        )
        assert re.search(r"\[pmem sweep\] 84/84 histories \(100%\) \| 0 failed \| .* \| elapsed \d", log)


#: the failed history of the tests of how a failure is named
FAILED = {"subset": "chains", "arm": "pmem", "history_id": "alfworld-revision/chains/L2/case002"}


def _failed_sweep(run_dir: Path, error: str, *, total: int, completed: int, wall_s: float) -> SweepResult:
    """A sweep's result whose failures are :data:`FAILED` with ``error``, the rest complete."""
    return SweepResult(
        run_dir=run_dir,
        run_id=run_dir.name,
        total=total,
        skipped=0,
        completed=completed,
        failed=total - completed,
        redone=0,
        wall_s=wall_s,
        failures=[{**FAILED, "error": error}],
    )


def test_a_failed_history_is_named_on_one_line_that_fits(tmp_path: Path) -> None:
    """Without --summary the first failure is one line cut to the width, the end of its error kept."""
    from pmem.runner._summary import print_result

    error = (
        "Traceback (most recent call last):\n  ...\nModelCallError: HTTP 500: " + "x" * 3000 + " overloaded"
    )
    res = _failed_sweep(tmp_path / "runs" / "t-0123", error, total=10, completed=7, wall_s=3.25)
    out = io.StringIO()
    print_result(res, stream=out, width=COLUMNS)
    lines = out.getvalue().splitlines()
    assert lines[0] == "pmem sweep: 7/10 histories complete, 3 failed (0 from earlier runs) in 3.2s"
    assert lines[1].startswith("first failure: pmem alfworld-revision/chains/L2/case002: ModelCall")
    assert lines[1].endswith(" overloaded")
    assert len(lines[1]) <= COLUMNS
    hint = "(a table per cell and every failure: --summary)"
    whole = f"report: pmem report {res.run_dir} {hint}"
    if len(whole) <= COLUMNS:
        assert lines[2:] == [whole]
    else:  # the hint goes below the command rather than past the width (a path is never cut)
        assert lines[2:] == [f"report: pmem report {res.run_dir}", f"    {hint}"]


def test_a_history_ray_killed_for_memory_is_named_by_the_kill_not_the_node_report(tmp_path: Path) -> None:
    """Ray's out-of-memory kill puts its reason first and the node's memory report after it: the line
    names the kill (the report's coverage table reads the same reason, pmem.rundir.failure_reason)."""
    from pmem.runner._summary import print_result, print_summary

    error = (
        "runner error: 3 worker(s) were killed due to the node running low on memory.\n"
        "Memory on the node (IP: 10.0.0.2, ID: 8f3a) where the lease was running was 22.1GB / 23.2GB.\n"
        "Top 10 memory users:\nPID\tMEM(GB)\tCOMMAND\n4242\t9.80\tray::Runner"
    )
    res = _failed_sweep(tmp_path / "r", error, total=2, completed=1, wall_s=1.0)
    short, table = io.StringIO(), io.StringIO()
    print_result(res, stream=short, width=COLUMNS)
    print_summary(res, table)
    kill = "3 worker(s) were killed due to the node running low on memory"
    (first,) = [ln for ln in short.getvalue().splitlines() if ln.startswith("first failure: ")]
    # cut to the width, its start and its end kept
    assert first.endswith(" running low on memory.") and "runner err" in first and len(first) <= COLUMNS, (
        first
    )
    (named,) = [ln for ln in table.getvalue().splitlines() if ln.startswith("failed: ")]
    assert named.endswith(kill + "."), named


def test_every_result_line_fits_the_width_at_any_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run of thousands of histories, all judged: the counts line went past 100 columns at
    COLUMNS=100 (issue 41); the counts wrap and the hint moves below its command."""
    from pmem.runner._summary import print_result

    monkeypatch.chdir(tmp_path)
    res = SweepResult(
        run_dir=tmp_path / "runs" / "quickstart-06b5fe69fad6-limit2",
        run_id="quickstart-06b5fe69fad6-limit2",
        total=48_680,
        skipped=48_680,
        completed=48_680,
        failed=0,
        redone=0,
        wall_s=1234.5,
        judged=97_360,
    )
    out = io.StringIO()
    print_result(res, stream=out, width=COLUMNS)
    lines = out.getvalue().splitlines()
    assert all(len(ln) <= COLUMNS for ln in lines), [ln for ln in lines if len(ln) > COLUMNS]
    joined = " ".join(ln.strip() for ln in lines)
    assert joined.startswith(
        "pmem sweep: 48680/48680 histories complete, 0 failed (48680 from earlier runs, 97360 answers judged) "
    )
    assert "report: pmem report runs/quickstart-06b5fe69fad6-limit2" in lines


def test_the_summary_says_when_the_agent_is_rule_based(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make demo` printed 139,364 "model calls" and a table of 100.0 without saying that no LLM made
    them: the summary of a run with the heuristic agent says so first; a real model's does not."""
    from pmem.runner._summary import HEURISTIC_NOTICE, print_summary

    def summary(agents: tuple[str, ...]) -> list[str]:
        res = SweepResult(tmp_path, "t-0", 1, 0, 1, 0, 0, 1.0, calls=139_364, agents=agents)
        out = io.StringIO()
        print_summary(res, out)
        return out.getvalue().splitlines()

    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    lines = summary(("heuristic",))
    assert lines[0].startswith("run t-0: ") and "139364 model calls" in lines[0]
    notice = lines[1:]  # no results in this run: no table after it
    assert len(notice) > 1 and all(len(ln) <= COLUMNS for ln in notice)  # wrapped to the terminal
    assert " ".join(ln.strip() for ln in notice) == HEURISTIC_NOTICE
    assert notice[0].startswith("agent: heuristic (no LLM): rules")
    assert summary(("openai",)) == lines[:1]
