"""The sweep's progress (``pmem/runner/_progress.py``): one line that fits the terminal, details on request
and in the run's progress log."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pmem.arms import ARM_NAMES
from pmem.rundir import PROGRESS_LOG
from pmem.runner._progress import ELLIPSIS, LogFile, Progress, fit_line, terminal_width

CHAINS = ("alfworld-revision/chains", "pmem")


class Clock:
    """A clock that moves only when told: rates, ETA and elapsed time the same on every machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


#: 14 of the registered arms (the figures below count 14): a per-arm line of them is far wider than a terminal
MANY_ARMS = list(ARM_NAMES[:14])


def _many_cells() -> Progress:
    """A sweep of 10 subsets x 14 arms, 1,230 of 14,000 histories done in 100 s, 8 of them failed."""
    totals = {(f"factconsolidation/sh_{k}k", arm): 100 for k in range(10) for arm in MANY_ARMS}
    clock = Clock()
    p = Progress(totals, {}, interval=3600.0, stream=io.StringIO(), tty=False, enabled=False, clock=clock)
    groups = sorted(totals)
    for i in range(1230):
        status = "failed" if i % 175 == 0 else "complete"
        p.update(groups[i % len(groups)], {"status": status, "calls": 97, "cached": 12, "tokens": 31_000})
    clock.now += 100
    return p


@pytest.mark.parametrize("width", [12, 25, 40, 60, 80, 100, 120, 200])
def test_the_line_fits_any_width_and_leads_with_done_over_total(width: int) -> None:
    p = _many_cells()
    line = p.line(width)
    assert len(line) <= width, line
    assert line.startswith(("[pmem sweep] 1230/14000", "1230/14000"[: width - 1])), line
    if width >= 40:
        assert "1230/14000 histories" in line
    if width >= 80:  # the essential fields: done/total, failures, rate, ETA
        assert line.startswith("[pmem sweep] 1230/14000 histories (9%) | 8 failed | 12.3/s | ETA 17m")
    full = p.line()  # the log's line has every field
    assert full == (
        "[pmem sweep] 1230/14000 histories (9%) | 8 failed | 12.3/s | ETA 17m18s "
        "| calls 119.3k (14.8k cached) | tokens 38.1M | elapsed 1m40s"
    )
    assert (line == full) == (len(full) <= width)
    assert line == full or line.endswith(ELLIPSIS), "a line that leaves fields out must say so"


def test_fit_line_drops_the_least_important_fields_first() -> None:
    fields = ["5/9 histories (56%)", "1 failed", "2.0/s", "ETA 2s", "calls 40 (4 cached)", "tokens 1.2k"]
    assert fit_line(fields, 200) == "[pmem sweep] " + " | ".join(fields)
    assert fit_line(fields, 64) == "[pmem sweep] 5/9 histories (56%) | 1 failed | 2.0/s | ETA 2s | …"
    # too narrow for the tag beside the essential fields: the counts stay, the tag goes
    assert fit_line(fields, 60) == "5/9 histories (56%) | 1 failed | 2.0/s | ETA 2s | …"
    assert fit_line(fields, 45) == "5/9 histories (56%) | 1 failed | 2.0/s | …"
    assert fit_line(fields, 10) == "5/9 histo…"


@pytest.mark.parametrize("width", [40, 100, 200])
def test_plain_lines_fit_the_width_and_verbose_wraps_the_counts_per_arm(width: int) -> None:
    """Not a terminal: whole lines, none wider than the width; --verbose adds the counts per subset and
    arm (wrapped, never cut), which the plain output leaves out."""
    totals = {(f"factconsolidation/sh_{k}k", arm): 10 for k in range(3) for arm in MANY_ARMS}
    outputs = {}
    for verbose in (False, True):
        out = io.StringIO()
        p = Progress(totals, {}, interval=0.0, stream=out, tty=False, verbose=verbose, width=width)
        for arm in MANY_ARMS:
            p.update(("factconsolidation/sh_0k", arm), {"status": "complete", "calls": 3, "tokens": 900})
        p.detail("[pmem sweep] runner event loops: longest stall 12 ms, 0.1 s blocked in total")
        p.close()
        lines = out.getvalue().splitlines()
        assert lines and all(len(ln) <= width for ln in lines), [ln for ln in lines if len(ln) > width]
        progress = [ln for ln in lines if "/420 histories" in ln]
        assert progress and progress[-1].startswith(("[pmem sweep] 14/420 histories", "14/420 histories"))
        outputs[verbose] = out.getvalue()
    plain, verbose_text = outputs[False], outputs[True]
    assert "factconsolidation/sh_0k:" not in plain and "longest stall" not in plain
    # wrapped, not cut: every arm's count is there once the lines are joined
    joined = " ".join(ln.strip() for ln in verbose_text.splitlines())
    assert "factconsolidation/sh_0k:" in joined and "longest stall 12 ms" in joined
    assert all(f"{arm} 1/10" in joined for arm in MANY_ARMS)
    assert all(f"{arm} 0/10" in joined for arm in MANY_ARMS)  # sh_1k, sh_2k


def test_the_width_comes_from_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "57")
    assert terminal_width(io.StringIO()) == 57
    out = io.StringIO()
    p = Progress({CHAINS: 3}, {}, interval=0.0, stream=out, tty=False)
    p.update(CHAINS, {"status": "complete", "calls": 12_345, "cached": 6_789, "tokens": 9_876_543})
    p.close()
    lines = out.getvalue().splitlines()
    assert lines and all(len(ln) <= 57 for ln in lines) and all(ELLIPSIS in ln for ln in lines)
    monkeypatch.delenv("COLUMNS")
    assert terminal_width(io.StringIO()) > 0  # not a terminal: the fallback (80 unless stdout is one)


def test_plain_progress_lines_carry_counts_calls_failures_and_eta() -> None:
    out = io.StringIO()
    totals = {
        ("alfworld-revision/chains", "pmem"): 4,
        ("alfworld-revision/chains", "raw"): 4,
        ("factconsolidation/sh_6k", "pmem"): 1,
    }
    p = Progress(totals, {CHAINS: 1}, interval=0.0, stream=out, tty=False, width=200)
    p.update(CHAINS, {"status": "complete", "calls": 10, "cached": 4, "tokens": 1500})
    p.update(("alfworld-revision/chains", "raw"), {"status": "failed", "calls": 2, "tokens": 100})
    p.close()
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("[pmem sweep] 3/9 histories (33%) | 1 failed | ")
    assert "| calls 12 (4 cached) | tokens 1.6k | elapsed " in last
    assert "ETA " in last and "ETA ?" not in last and "?/s" not in last
    # the counts per subset and arm are details: not on the plain output
    assert "alfworld-revision/chains:" not in out.getvalue()


def test_tty_progress_rewrites_one_line_in_place() -> None:
    out = io.StringIO()
    clock = Clock()
    p = Progress({("b/s", "a"): 2}, {}, stream=out, tty=True, width=70, clock=clock)
    clock.now += 1
    p.update(("b/s", "a"), {"status": "complete", "calls": 1, "tokens": 1})
    p.note("[pmem sweep] runner 0 died: 1 histories requeued")
    clock.now += 1
    p.update(("b/s", "a"), {"status": "complete", "calls": 1, "tokens": 1})
    p.close()
    text = out.getvalue()
    # one progress line rewritten with \r; the note printed above it; the line ended once, at the close
    assert text.count("\n") == 2 and text.endswith("\n")
    drawn = [seg for seg in text.replace("\n", "\r").split("\r") if seg.strip()]
    assert all(len(seg) <= 69 for seg in drawn), drawn  # one column to spare: no wrap in the last one
    assert "[pmem sweep] runner 0 died: 1 histories requeued" in drawn
    assert drawn[-1] == "[pmem sweep] 2/2 histories (100%) | 0 failed | 1.0/s | ETA 0s | …"


def test_line_counts_calls_of_histories_still_running_once() -> None:
    out = io.StringIO()
    p = Progress({CHAINS: 3}, {}, interval=0.0, stream=out, tty=False, width=200)
    p.set_live(0, {"a": (7, 700, 1), "b": (3, 300, 0)})
    p.set_live(1, {"c": (5, 500, 0)})
    p.tick(force=True)
    assert "calls 15 (1 cached) | tokens 1.5k" in out.getvalue().splitlines()[-1]
    # "a" returns with its final count (8): counted once, not beside the runner's older figure of 7
    p.update(CHAINS, {"uid": "a", "status": "complete", "calls": 8, "cached": 1, "tokens": 800})
    assert "calls 16 (1 cached) | tokens 1.6k" in out.getvalue().splitlines()[-1]
    # a report the runner sent before "a" returned arrives late: "a" stays out of it
    p.set_live(0, {"a": (8, 800, 1), "b": (4, 400, 0)})
    p.tick(force=True)
    assert "calls 17 (1 cached) | tokens 1.7k" in out.getvalue().splitlines()[-1]
    # a runner's new report replaces its old one
    p.set_live(1, {})
    p.close()
    last = out.getvalue().splitlines()[-1]
    assert "calls 12 (1 cached) | tokens 1.2k" in last
    assert p.calls == 8 and p.tokens == 800  # the sweep's totals are those of returned histories


def test_tty_line_shows_live_calls() -> None:
    out = io.StringIO()
    p = Progress({("b/s", "a"): 2}, {}, stream=out, tty=True, width=120)
    p.set_live(0, {"u": (42, 4200, 0)})
    text = out.getvalue()
    p.close()
    assert "calls 42 (0 cached) | tokens 4.2k" in text


def test_the_progress_log_gets_everything_even_when_quiet(tmp_path: Path) -> None:
    log = tmp_path / PROGRESS_LOG
    out = io.StringIO()
    p = Progress({CHAINS: 2}, {}, interval=0.0, stream=out, tty=False, enabled=False, log=LogFile(log))
    p.note("[pmem sweep] run t-123: 2 histories x arms, 0 already complete")
    p.detail("[pmem sweep] runner event loops: longest stall 3 ms, 0.0 s blocked in total")
    p.update(CHAINS, {"status": "failed", "calls": 1, "tokens": 10})
    p.close()
    assert out.getvalue() == ""  # --quiet: nothing on the stream
    text = log.read_text()
    assert "run t-123" in text and "longest stall 3 ms" in text
    assert "[pmem sweep] 1/2 histories (50%) | 1 failed |" in text and "elapsed " in text  # every field
    assert "  alfworld-revision/chains: pmem 1/2 (1 failed)" in text


@pytest.mark.parametrize("tty", [False, True])
def test_a_note_is_wrapped_to_the_width_never_cut(tty: bool) -> None:
    """Notes (an arm not run, a runner lost) are whole sentences: wrapped to the terminal, words intact,
    above a terminal's progress line (issue 41: one went past 100 columns at COLUMNS=100)."""
    from pmem.arms import NEEDS_A_MODEL

    out = io.StringIO()
    p = Progress({CHAINS: 3}, {}, interval=0.0, stream=out, tty=tty, width=100)
    note = f"[pmem sweep] not run: mem0 (168 histories): {NEEDS_A_MODEL}"
    assert len(note) > 100
    p.note(note)
    p.close()
    lines = [part for ln in out.getvalue().splitlines() for part in ln.split("\r") if part.strip()]
    assert all(len(ln) <= 100 for ln in lines), [ln for ln in lines if len(ln) > 100]
    wrapped = [ln for ln in lines if "histories (" not in ln]
    assert " ".join(ln.strip() for ln in wrapped) == note
    assert wrapped[0].startswith("[pmem sweep] not run: mem0") and wrapped[1].startswith("    ")


def test_wrap_lines_keeps_words_and_empty_lines() -> None:
    from pmem.runner._progress import wrap_lines

    text = "[pmem sweep] judging 9736 answers with heuristic-judge-with-a-long-name (0 already judged)"
    parts = wrap_lines([text, ""], 40)
    assert all(len(p) <= 40 for p in parts) and parts[-1] == ""
    assert " ".join(p.strip() for p in parts[:-1]) == text
    # a path longer than the width keeps its line whole: split, it could not be copied back
    path = "/tmp/pytest-of-root/pytest-104/test_damaged_batch_resumes_in_0/runs/damaged/states/x.arrow"
    parts = wrap_lines([f"[pmem sweep] damaged batch dropped: {path}: checksum mismatch"], 40)
    assert f"    {path}:" in parts and all(len(p) <= 40 for p in parts if path not in p)
