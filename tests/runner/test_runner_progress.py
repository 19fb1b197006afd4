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
