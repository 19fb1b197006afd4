"""`pmem inspect`, and the core's import hygiene."""

from __future__ import annotations

import subprocess
import sys

from pmem.cli import main
from pmem.graph import ProvenanceGraph


def test_inspect_prints_cells_and_key_history(tmp_path, capsys):
    g = ProvenanceGraph()
    g.apply("accept", "budget", "$30k", evidence=g.observe("Budget is $30k", time="2024-01-01"))
    g.apply("accept", "budget", "$50k", evidence=g.observe("Raised to $50k"))
    g.apply("reject", "budget", evidence=g.observe("$50k was an error"))
    g.save(tmp_path / "s.arrow")
    assert main(["inspect", str(tmp_path / "s.arrow")]) == 0
    out = capsys.readouterr().out
    assert "1 cells" in out and "budget = $30k" in out
    assert main(["inspect", str(tmp_path / "s.arrow"), "--key", "budget", "--ops"]) == 0
    out = capsys.readouterr().out
    assert "contradicted" in out and "Raised to $50k" in out and "2024-01-01" in out
    assert "reject" in out


def test_inspect_refuses_damaged_state(tmp_path, capsys):
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(b"junk")
    assert main(["inspect", str(bad)]) == 2
    assert "bad.arrow" in capsys.readouterr().out


def test_core_imports_no_other_pmem_package_ray_or_http():
    code = (
        "import sys, pmem, pmem.graph; g = pmem.ProvenanceGraph(); g.apply('accept','k','v');"
        "g.registry.resolve('a.b');"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'ray','aiohttp','httpx','requests','urllib3','vllm','polars'}"
        " or (m.startswith('pmem.') and not m.startswith('pmem.graph')));"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""
