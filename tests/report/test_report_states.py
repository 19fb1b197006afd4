"""The report's state table: each history's saved graph read as flat tables with Polars alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from pmem.graph import ProvenanceGraph
from pmem.report._states import NotAState, _per_history, read_state_table

FIXTURES = Path(__file__).resolve().parents[1] / "graph" / "fixtures"


def _graph() -> ProvenanceGraph:
    g = ProvenanceGraph()
    g.apply("accept", "room", "A")
    g.apply("accept", "room", "B")  # A superseded
    g.apply("contest", "room", "C")  # B contested, C an open alternative
    g.apply("accept", "mug", "desk")
    g.apply("accept", "mug", "shelf")
    g.apply("reject", "mug")  # shelf contradicted, desk reinstated
    g.apply("accept", "pen", "red")
    g.apply("revoke", "pen")  # red revoked: an empty cell
    return g


def test_a_states_counts_come_from_its_versions_table(tmp_path: Path) -> None:
    path = tmp_path / "state.arrow"
    _graph().save(path)
    counts = _per_history(read_state_table(path, "versions"))
    assert counts == {
        "versions": 6,
        "keys": 3,
        "with_history": 2,  # room and mug
        "open_conflicts": 1,  # room
        "active": 1,
        "contested": 1,
        "superseded": 1,
        "contradicted": 1,
        "revoked": 1,
        "alternative": 1,
        "undone": 0,
        "erased": 0,
    }


def test_reading_a_state_needs_no_pmem_import(tmp_path: Path) -> None:
    """The table is Polars' reading of the file: the same read works in a process without P-Mem."""
    path = tmp_path / "state.arrow"
    _graph().save(path)
    script = (
        "import sys, polars as pl\n"
        f"outer = pl.read_ipc({str(path)!r})\n"
        "v = pl.read_ipc_stream(outer.filter(pl.col('table') == 'versions')['payload'][0])\n"
        "print(sorted(v['status'].cast(pl.String).to_list()))\n"
        "print(any(m.split('.')[0] == 'pmem' for m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    statuses = sorted(read_state_table(path, "versions")["status"].cast(pl.String).to_list())
    assert out.stdout.splitlines() == [str(statuses), "False"]


def test_files_that_are_not_flat_states_are_named_not_read(tmp_path: Path) -> None:
    foreign = tmp_path / "other.arrow"
    foreign.write_bytes(b"not arrow at all")
    with pytest.raises(NotAState, match="not an Arrow state file"):
        read_state_table(foreign, "versions")
    with pytest.raises(NotAState, match="an older schema"):
        read_state_table(FIXTURES / "state-schema-3.arrow", "versions")
    path = tmp_path / "state.arrow"
    _graph().save(path)
    with pytest.raises(NotAState, match="no 'nothing' table"):
        read_state_table(path, "nothing")
