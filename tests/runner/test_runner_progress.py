from __future__ import annotations

import io

from pmem.runner._progress import Progress


def test_plain_progress_lines_carry_counts_calls_failures_and_eta() -> None:
    out = io.StringIO()
    totals = {
        ("alfworld-revision/chains", "pmem"): 4,
        ("alfworld-revision/chains", "raw"): 4,
        ("factconsolidation/sh_6k", "pmem"): 1,
    }
    p = Progress(totals, {("alfworld-revision/chains", "pmem"): 1}, interval=0.0, stream=out, tty=False)
    p.update(
        ("alfworld-revision/chains", "pmem"), {"status": "complete", "calls": 10, "cached": 4, "tokens": 1500}
    )
    p.update(("alfworld-revision/chains", "raw"), {"status": "failed", "calls": 2, "tokens": 100})
    p.close()
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("[pmem sweep] 3/9 histories (33%) failed=1 calls=12 (cached 4) tokens=1.6k")
    assert "ETA=" in last and "ETA=?" not in last
    assert "alfworld-revision/chains: pmem 2/4, raw 1/4 (1 failed)" in last
    assert "factconsolidation/sh_6k: pmem 0/1" in last


def test_tty_progress_uses_a_bar() -> None:
    out = io.StringIO()
    p = Progress({("b/s", "a"): 2}, {}, stream=out, tty=True)
    p.update(("b/s", "a"), {"status": "complete", "calls": 1, "tokens": 1})
    p.close()
    text = out.getvalue()
    assert "1/2" in text and "hist" in text


def test_line_counts_calls_of_histories_still_running_once() -> None:
    out = io.StringIO()
    g = ("alfworld-revision/chains", "pmem")
    p = Progress({g: 3}, {}, interval=0.0, stream=out, tty=False)
    p.set_live(0, {"a": (7, 700, 1), "b": (3, 300, 0)})
    p.set_live(1, {"c": (5, 500, 0)})
    p.tick(force=True)
    assert "calls=15 (cached 1) tokens=1.5k" in out.getvalue().splitlines()[-1]
    # "a" returns with its final count (8): counted once, not beside the runner's older figure of 7
    p.update(g, {"uid": "a", "status": "complete", "calls": 8, "cached": 1, "tokens": 800})
    assert "calls=16 (cached 1) tokens=1.6k" in out.getvalue().splitlines()[-1]
    # a report the runner sent before "a" returned arrives late: "a" stays out of it
    p.set_live(0, {"a": (8, 800, 1), "b": (4, 400, 0)})
    p.tick(force=True)
    assert "calls=17 (cached 1) tokens=1.7k" in out.getvalue().splitlines()[-1]
    # a runner's new report replaces its old one
    p.set_live(1, {})
    p.close()
    last = out.getvalue().splitlines()[-1]
    assert "calls=12 (cached 1) tokens=1.2k" in last
    assert p.calls == 8 and p.tokens == 800  # the sweep's totals are those of returned histories


def test_tty_bar_shows_live_calls() -> None:
    out = io.StringIO()
    p = Progress({("b/s", "a"): 2}, {}, stream=out, tty=True)
    p.set_live(0, {"u": (42, 4200, 0)})
    text = out.getvalue()
    p.close()
    assert "calls=42" in text and "tok=4.2k" in text
