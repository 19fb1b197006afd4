"""`pmem arms list|check` and `pmem perf arms` print their measurements (small settings here)."""

from __future__ import annotations

import pytest

from pmem.cli import main


def test_arms_list(capsys):
    assert main(["arms", "list"]) == 0
    out = capsys.readouterr().out
    assert "pmem-turn-prune" in out and "prompt templates hash" in out


def test_arms_check_small(capsys):
    assert main(["arms", "check", "--cases", "4", "--only", "chains", "retraction", "conflict"]) == 0
    out = capsys.readouterr().out
    chains = [ln for ln in out.splitlines() if ln.strip().startswith(("1 ", "8 "))]
    assert len(chains) == 2 and all(ln.split()[1] == "100.0%" for ln in chains)
    retr = [ln.split() for ln in out.splitlines() if ln.strip().startswith("pmem ")]
    assert retr and all(r[3] == "100.0%" for r in retr[:2])  # recovered, d = 0 and 32
    assert "both held" in out


@pytest.mark.slow
def test_full_acceptance_check(capsys):
    """The issue's acceptance items 1-4 at n = 140 (about 90 s)."""
    assert main(["arms", "check"]) == 0
    out = capsys.readouterr().out
    sections = out.split("== ")
    chains, retraction, conflict = sections[1], sections[2], sections[3]
    for L in ("1", "2", "4", "8"):
        row = next(ln.split() for ln in chains.splitlines() if ln.strip().split()[:1] == [L])
        assert row[1] == "100.0%" and 20 <= float(row[3]) <= 40  # accuracy, read chars
    rows = [ln.split() for ln in retraction.splitlines()]
    pm = [r for r in rows if r[:1] == ["pmem"]]
    nr = [r for r in rows if r[:1] == ["pmem-no-retention"]]
    assert [r[3] for r in pm] == ["100.0%", "100.0%"] and [r[4] for r in pm] == ["100.0%", "100.0%"]
    assert [r[3] for r in nr] == ["0.0%", "0.0%"] and [r[4] for r in nr] == ["0.0%", "0.0%"]
    crow = next(ln.split() for ln in conflict.splitlines() if ln.split()[:1] == ["pmem"])
    assert crow[1:3] == ["100.0%", "100.0%"] and float(crow[4].rstrip("%")) >= 97.0
    lww = next(ln.split() for ln in conflict.splitlines() if ln.split()[:1] == ["crud"])
    assert lww[1] == "0.0%"
    assert "template (oracle) write path" in sections[4]


def test_store_check_reads_the_queried_location_key_and_refuses_other_text():
    """The retraction/conflict store checks look up the key a query names; a text naming none is refused
    instead of silently looking up nothing."""
    from pmem.arms._cli import _query_key
    from pmem.bench.alfworld_templates import QUERY, location_key

    assert _query_key(QUERY.format(obj="apple 1")) == location_key("apple 1")
    with pytest.raises(ValueError, match="not an ALFWorld-Revision location query"):
        _query_key("What is the capital of France?")
